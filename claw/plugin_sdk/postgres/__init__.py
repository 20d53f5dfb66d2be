"""PostgreSQL for plugins: the host's driver layer (needs the ``postgres`` extra).

A plugin that keeps its data in PostgreSQL (Memory Records) opens a pool with
:func:`open_database`: calls run its blocking ``fn(conn, *args)`` in the host's worker
threads, one transaction each (or autocommit), a cancelled caller stops the query on the
server, and :meth:`Database.listen` hands NOTIFYs to the event loop from a dedicated
thread, announcing each (re)connection with :class:`ListenerConnected` (the cue to catch
up on what a dropped connection missed). A plugin's tables are a component of their own
in the host's migration table: :func:`migrate` applies its named migrations in order,
or refuses a database it does not know (:class:`SchemaVersionError`). Importing this
module imports psycopg: import it only where a database is actually configured.
"""

from ..._errors import SchemaVersionError as SchemaVersionError
from ...state.postgres import Database as Database
from ...state.postgres import ListenerConnected as ListenerConnected
from ...state.postgres import ListenEvent as ListenEvent
from ...state.postgres import Migration as Migration
from ...state.postgres import Notification as Notification
from ...state.postgres import migrate as migrate
from ...state.postgres import open_database as open_database
