"""claw_testing: the deterministic harness for testing agents and plugins built on claw.

Installing trio-claw registers its pytest plugin (fixtures ``claw_host``,
``memory_workspace``, ``scripted_model``, ...; see ``docs/testing.md``); the names
here are the building blocks those fixtures use, for tests and notebooks alike.
"""

from ._chat_server import StubChatServer as StubChatServer
from ._chat_server import StubReply as StubReply
from ._chat_server import StubRequest as StubRequest
from ._chat_server import chat_completion as chat_completion
from ._chat_server import remembering_responder as remembering_responder
from ._events import EventRecorder as EventRecorder
from ._events import record_events as record_events
from ._harness import HARNESS_GATEWAY_TOKEN as HARNESS_GATEWAY_TOKEN
from ._harness import harness_config as harness_config
from ._harness import memory_provider_plugin as memory_provider_plugin
from ._harness import open_harness_gateway as open_harness_gateway
from ._harness import open_harness_host as open_harness_host
from ._memory_provider import MemoryRecord as MemoryRecord
from ._memory_provider import RecordingMemoryProvider as RecordingMemoryProvider
from ._reference_engine import ReferenceContextEngine as ReferenceContextEngine
from ._scripted_model import ScriptedCall as ScriptedCall
from ._scripted_model import ScriptedFailure as ScriptedFailure
from ._scripted_model import ScriptedModel as ScriptedModel
from ._scripted_model import ScriptedReply as ScriptedReply
from ._scripted_model import ScriptExhaustedError as ScriptExhaustedError
from ._scripted_model import estimate_tokens as estimate_tokens
from ._sessions import SessionBuilder as SessionBuilder
from ._workspace import MemoryWorkspace as MemoryWorkspace
