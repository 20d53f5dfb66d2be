"""claw_testing: the deterministic harness for testing agents and plugins built on claw."""

from ._memory_provider import MemoryRecord as MemoryRecord
from ._memory_provider import RecordingMemoryProvider as RecordingMemoryProvider
from ._reference_engine import ReferenceContextEngine as ReferenceContextEngine
from ._scripted_model import ScriptedCall as ScriptedCall
from ._scripted_model import ScriptedFailure as ScriptedFailure
from ._scripted_model import ScriptedModel as ScriptedModel
from ._scripted_model import ScriptedReply as ScriptedReply
from ._scripted_model import ScriptExhaustedError as ScriptExhaustedError
from ._scripted_model import estimate_tokens as estimate_tokens
