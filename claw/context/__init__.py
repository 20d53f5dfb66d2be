"""Context engines: the contract, the legacy engine, the prompt snapshot."""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._contract import CURRENT_TURN_FENCE as CURRENT_TURN_FENCE
from ._contract import HOST_PARAMS as HOST_PARAMS
from ._contract import TURN_ADVANCEMENT_IDEMPOTENCY as TURN_ADVANCEMENT_IDEMPOTENCY
from ._contract import AfterTurnParams as AfterTurnParams
from ._contract import AssembleParams as AssembleParams
from ._contract import AssembleResult as AssembleResult
from ._contract import BootstrapParams as BootstrapParams
from ._contract import CommitTurnParams as CommitTurnParams
from ._contract import CommitTurnResult as CommitTurnResult
from ._contract import CompactParams as CompactParams
from ._contract import CompactResult as CompactResult
from ._contract import ContextEngine as ContextEngine
from ._contract import ContextEngineInfo as ContextEngineInfo
from ._contract import ContextProjection as ContextProjection
from ._contract import HostFields as HostFields
from ._contract import IngestBatchParams as IngestBatchParams
from ._contract import IngestParams as IngestParams
from ._contract import IngestResult as IngestResult
from ._contract import MaintainParams as MaintainParams
from ._contract import TranscriptSemantics as TranscriptSemantics
from ._contract import delegate_compaction_to_runtime as delegate_compaction_to_runtime
from ._contract import estimate_tokens as estimate_tokens
from ._contract import participates_in_durable_turns as participates_in_durable_turns
from ._engines import ContextEngineSlot as ContextEngineSlot
from ._engines import EngineFailedError as EngineFailedError
from ._engines import LegacyContextEngine as LegacyContextEngine
from ._prompt import MemoryPromptSnapshot as MemoryPromptSnapshot
from ._prompt import active_prompt_snapshot as active_prompt_snapshot
from ._prompt import build_memory_system_prompt_addition as build_memory_system_prompt_addition

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
