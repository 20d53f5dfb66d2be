"""Memory Records: the bundled record-based memory plugin of claw (id ``memory-records``).

Memories are records in PostgreSQL, partitioned by the host-minted audience (the
owner's, or one conversation's root session), each with a stable provider-scoped
reference and revisions; every host searches a derived local index fed by the
database's change sequence, ranked by the engine Memory Core uses
(:mod:`claw.plugin_sdk.search`). ``claw_records.plugin`` is what the host loads.
"""

from claw.plugin_sdk import fixup_module_metadata as _fixup_module_metadata

from ._errors import InvalidRecordError as InvalidRecordError
from ._errors import RecordsError as RecordsError
from ._errors import RecordsUnavailableError as RecordsUnavailableError
from ._errors import StaleRecordError as StaleRecordError
from ._plugin import RecordsConfig as RecordsConfig
from ._plugin import plugin as plugin
from ._service import RecordsService as RecordsService

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
