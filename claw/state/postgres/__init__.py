"""PostgreSQL for claw: the shared state backend and the driver layer under it.

Needs the ``postgres`` extra (psycopg 3 and psycopg_pool; in the checkout
``make extras EXTRAS=postgres``, see README.md, "Installing extras") and
set ``[state] backend = "postgresql"`` (see ``docs/postgres.md``).

:func:`open_database` opens a connection pool whose calls run in the host's worker
threads and whose queries stop on the server when the calling Trio scope is
cancelled; :meth:`Database.listen` receives NOTIFYs on a dedicated thread.
:func:`migrate` brings a component's tables to its named :class:`Migration` steps (or
refuses a schema this build does not know). :func:`read_committed_sessions` reads the
committed session rows on a connection, so a provider can check currency in the
transaction that reads the data it guards.
"""

from ..._util import fixup_module_metadata as _fixup_module_metadata
from ._database import Database as Database
from ._database import DatabaseStatistics as DatabaseStatistics
from ._database import open_database as open_database
from ._dsn import redact_dsn as redact_dsn
from ._listen import ListenerConnected as ListenerConnected
from ._listen import ListenEvent as ListenEvent
from ._listen import Notification as Notification
from ._listen import open_listener as open_listener
from ._migrations import Migration as Migration
from ._migrations import check_current as check_current
from ._migrations import migrate as migrate
from ._sessions import read_committed_sessions as read_committed_sessions

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
