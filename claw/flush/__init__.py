"""claw.flush: the pre-compaction memory flush.

Timing (:mod:`._timing`), the plans a memory plugin returns (:mod:`._plans`), which
plugin's resolver is effective (:mod:`._selection`), the flush identity
(:mod:`._identity`), the file and tools arms (:mod:`._file_arm`, :mod:`._tools_arm`),
completion evidence (:mod:`._evidence`) and the coordinator the host installs at start
(:mod:`._coordinator`).
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._coordinator import FlushCoordinator as FlushCoordinator
from ._errors import FlushPlanError as FlushPlanError
from ._errors import FlushToolError as FlushToolError
from ._evidence import NO_EVIDENCE_REASON as NO_EVIDENCE_REASON
from ._evidence import SILENT_TOKEN as SILENT_TOKEN
from ._identity import derive_flush_id as derive_flush_id
from ._identity import flush_session_key as flush_session_key
from ._plans import FlushPlanResolver as FlushPlanResolver
from ._plans import MemoryFlushFilePlanDraft as MemoryFlushFilePlanDraft
from ._plans import MemoryFlushPlan as MemoryFlushPlan
from ._plans import MemoryFlushPlanRequest as MemoryFlushPlanRequest
from ._plans import MemoryFlushToolsPlan as MemoryFlushToolsPlan
from ._plans import ProviderFlushPlanResolver as ProviderFlushPlanResolver
from ._result import FlushResult as FlushResult
from ._timing import MemoryFlushTiming as MemoryFlushTiming
from ._timing import flush_trigger as flush_trigger
from ._timing import resolve_timing as resolve_timing

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
