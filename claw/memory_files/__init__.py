"""The host's writer of workspace memory files: one discipline, an undo journal, provenance.

See :mod:`claw.memory_files._writer` (exclusion, appends, rewrites, recovery),
:mod:`claw.memory_files._journal` (the journal) and :mod:`claw.memory_files._entries`
(entries and the revision of cited lines). Plugins reach it as ``api.memory_files``.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._entries import MIN_REVISION_CHARS as MIN_REVISION_CHARS
from ._entries import entries_within as entries_within
from ._entries import entry_spans as entry_spans
from ._entries import lines_revision as lines_revision
from ._errors import BadRevisionError as BadRevisionError
from ._errors import ForgetScopeError as ForgetScopeError
from ._errors import MemoryFileBusyError as MemoryFileBusyError
from ._errors import MemoryFileChangedError as MemoryFileChangedError
from ._errors import MemoryFileError as MemoryFileError
from ._errors import MemoryFileTooLargeError as MemoryFileTooLargeError
from ._errors import MemoryPathError as MemoryPathError
from ._errors import NothingToRestoreError as NothingToRestoreError
from ._errors import RemovalNotFoundError as RemovalNotFoundError
from ._errors import StaleReferenceError as StaleReferenceError
from ._service import DescribeWriter as DescribeWriter
from ._service import MemoryFiles as MemoryFiles
from ._writer import HOME as HOME
from ._writer import Cited as Cited
from ._writer import MemoryFileWriter as MemoryFileWriter
from ._writer import Placement as Placement
from ._writer import Purged as Purged
from ._writer import Removal as Removal
from ._writer import Restoration as Restoration
from ._writer import Written as Written

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
