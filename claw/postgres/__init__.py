"""PostgreSQL for claw: the driver layer under the shared state backend.

Install with ``pip install 'trio-claw[postgres]'`` (psycopg 3 and psycopg_pool).
:func:`open_database` opens a connection pool whose calls run in the host's worker
threads and whose queries stop on the server when the calling Trio scope is
cancelled; :meth:`Database.listen` receives NOTIFYs on a dedicated thread.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._database import Database as Database
from ._database import DatabaseStatistics as DatabaseStatistics
from ._database import open_database as open_database
from ._dsn import redact_dsn as redact_dsn
from ._listen import ListenerConnected as ListenerConnected
from ._listen import ListenEvent as ListenEvent
from ._listen import Notification as Notification
from ._listen import open_listener as open_listener

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
