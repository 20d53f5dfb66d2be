"""The one public surface a claw plugin may use.

Bundled plugins (Memory Core) import only from here, never from claw internals: a
bundled plugin gets no door that a third-party plugin lacks. Nothing here mints a
capability; plugins receive capabilities from the host and may only inspect them.
"""

from .._capabilities import ConversationRecallPass as ConversationRecallPass
from .._capabilities import FlushIdentity as FlushIdentity
from .._capabilities import HostAuthority as HostAuthority
from .._capabilities import MemoryAudience as MemoryAudience
from .._capabilities import MemoryCallerContext as MemoryCallerContext
from .._capabilities import OperatorAuthority as OperatorAuthority
from .._capabilities import SessionAuthority as SessionAuthority
from .._embeddings import EmbeddingProvider as EmbeddingProvider
from .._errors import CapabilityDeniedError as CapabilityDeniedError
from .._errors import ClawError as ClawError
from .._errors import ConfigError as ConfigError
from .._errors import ContractError as ContractError
from .._errors import ProviderError as ProviderError
from .._errors import StaleCapabilityError as StaleCapabilityError
from .._errors import StateLockedError as StateLockedError
from .._errors import UnsupportedRequestError as UnsupportedRequestError
from .._plugins import ContextEngineFactoryContext as ContextEngineFactoryContext
from .._plugins import Plugin as Plugin
from .._plugins import PluginApi as PluginApi
from .._plugins import PluginContracts as PluginContracts
from .._plugins import Tool as Tool
from .._transcript_reader import TranscriptReader as TranscriptReader
from .._transcript_reader import TranscriptSessionInfo as TranscriptSessionInfo
from .._transcript_reader import TranscriptTurnInfo as TranscriptTurnInfo
from .._util import fixup_module_metadata as fixup_module_metadata
from .._workers import InlineWorkerPool as InlineWorkerPool
from .._workers import ThreadWorkerPool as ThreadWorkerPool
from .._workers import WorkerPool as WorkerPool
from .._workers import WorkerPoolStatistics as WorkerPoolStatistics
from ..context import AfterTurnParams as AfterTurnParams
from ..context import AssembleParams as AssembleParams
from ..context import AssembleResult as AssembleResult
from ..context import CommitTurnParams as CommitTurnParams
from ..context import CommitTurnResult as CommitTurnResult
from ..context import CompactParams as CompactParams
from ..context import CompactResult as CompactResult
from ..context import ContextEngine as ContextEngine
from ..context import ContextEngineInfo as ContextEngineInfo
from ..context import ContextProjection as ContextProjection
from ..context import IngestParams as IngestParams
from ..context import IngestResult as IngestResult
from ..context import MaintainParams as MaintainParams
from ..context import TranscriptSemantics as TranscriptSemantics
from ..context import build_memory_system_prompt_addition as build_memory_system_prompt_addition
from ..context import delegate_compaction_to_runtime as delegate_compaction_to_runtime
from ..memory import AuthorizeSearchHitsRequest as AuthorizeSearchHitsRequest
from ..memory import Citation as Citation
from ..memory import HealthStatus as HealthStatus
from ..memory import LegacyReadResult as LegacyReadResult
from ..memory import LegacySearchResult as LegacySearchResult
from ..memory import MemoryCandidate as MemoryCandidate
from ..memory import MemoryCandidatesRequest as MemoryCandidatesRequest
from ..memory import MemoryCandidatesResult as MemoryCandidatesResult
from ..memory import MemoryGetRequest as MemoryGetRequest
from ..memory import MemoryGetResult as MemoryGetResult
from ..memory import MemoryHealth as MemoryHealth
from ..memory import MemoryPluginCapability as MemoryPluginCapability
from ..memory import MemoryProviderOpenResult as MemoryProviderOpenResult
from ..memory import MemoryReference as MemoryReference
from ..memory import MemorySearchHit as MemorySearchHit
from ..memory import MemorySearchRequest as MemorySearchRequest
from ..memory import MemorySearchResult as MemorySearchResult
from ..memory import ProviderCapabilities as ProviderCapabilities
from ..memory import PublicArtifact as PublicArtifact
from ..memory import SearchCoverage as SearchCoverage
from ..memory import line_fragment as line_fragment
from ..memory import parse_line_fragment as parse_line_fragment
from ..turns._tools import FlushToolContext as FlushToolContext
from ..turns._tools import ToolContext as ToolContext
