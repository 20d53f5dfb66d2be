"""The host's side of memory: the guard every memory route goes through, and the contracts.

This is not Memory Core. ``claw.memory`` is the *host* side, the same whichever memory
plugin owns the slot: the provider-neutral contracts and values a plugin implements
(:class:`MemoryPluginCapability`, :class:`MemorySearchRequest`, ...), the guard
(:class:`MemoryRuntime`, ``host.memory``) through which the gateway, MCP, agent tools
and the host's consumers reach the selected provider, the host-owned legacy adapter,
and the consumers themselves. Memory Core, the bundled memory *plugin* (markdown files,
tantivy, numpy), lives in the top-level package ``claw_memory`` and is one provider
among others behind this guard.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._consumers import BUILTIN_RECALL_TOOLS as BUILTIN_RECALL_TOOLS
from ._consumers import RecallItem as RecallItem
from ._consumers import RecallResult as RecallResult
from ._consumers import deep_recall_tools as deep_recall_tools
from ._consumers import dreaming_owner as dreaming_owner
from ._consumers import project_recall as project_recall
from ._consumers import provider_status as provider_status
from ._consumers import trigger_recall as trigger_recall
from ._consumers import voice_fast_context as voice_fast_context
from ._consumers import wiki_search as wiki_search
from ._contracts import LegacyReadResult as LegacyReadResult
from ._contracts import LegacySearchResult as LegacySearchResult
from ._contracts import MemoryMaintenance as MemoryMaintenance
from ._contracts import MemoryPluginCapability as MemoryPluginCapability
from ._contracts import MemoryPluginRuntime as MemoryPluginRuntime
from ._contracts import MemoryProviderHandle as MemoryProviderHandle
from ._contracts import MemoryProviderOpenResult as MemoryProviderOpenResult
from ._contracts import MemoryProviderRuntime as MemoryProviderRuntime
from ._contracts import MemorySearchManager as MemorySearchManager
from ._contracts import PublicArtifact as PublicArtifact
from ._contracts import PublicArtifacts as PublicArtifacts
from ._guard import ForeignReferenceError as ForeignReferenceError
from ._guard import GuardedMemoryHandle as GuardedMemoryHandle
from ._guard import MemoryHandleClosedError as MemoryHandleClosedError
from ._guard import MemoryUnavailableError as MemoryUnavailableError
from ._legacy import LEGACY_CAPABILITIES as LEGACY_CAPABILITIES
from ._legacy import LegacyProviderHandle as LegacyProviderHandle
from ._legacy import line_fragment as line_fragment
from ._legacy import parse_line_fragment as parse_line_fragment
from ._legacy import strip_host_paths as strip_host_paths
from ._runtime import MemoryAnswer as MemoryAnswer
from ._runtime import MemoryRuntime as MemoryRuntime
from ._runtime import ToolMemory as ToolMemory
from ._types import AuthorizeSearchHitsRequest as AuthorizeSearchHitsRequest
from ._types import CandidateKind as CandidateKind
from ._types import Citation as Citation
from ._types import HealthStatus as HealthStatus
from ._types import MemoryAddRequest as MemoryAddRequest
from ._types import MemoryAddResult as MemoryAddResult
from ._types import MemoryCandidate as MemoryCandidate
from ._types import MemoryCandidatesRequest as MemoryCandidatesRequest
from ._types import MemoryCandidatesResult as MemoryCandidatesResult
from ._types import MemoryForgetResult as MemoryForgetResult
from ._types import MemoryGetRequest as MemoryGetRequest
from ._types import MemoryGetResult as MemoryGetResult
from ._types import MemoryHealth as MemoryHealth
from ._types import MemoryProvenance as MemoryProvenance
from ._types import MemoryPurgeRequest as MemoryPurgeRequest
from ._types import MemoryPurgeResult as MemoryPurgeResult
from ._types import MemoryReference as MemoryReference
from ._types import MemoryRemoval as MemoryRemoval
from ._types import MemoryRestoreResult as MemoryRestoreResult
from ._types import MemorySearchHit as MemorySearchHit
from ._types import MemorySearchRequest as MemorySearchRequest
from ._types import MemorySearchResult as MemorySearchResult
from ._types import ProviderCapabilities as ProviderCapabilities
from ._types import SearchCoverage as SearchCoverage
from ._types import Source as Source
from ._writes import WRITE_SCOPES as WRITE_SCOPES
from ._writes import describe_writer as describe_writer
from ._writes import writer_refusal as writer_refusal

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
