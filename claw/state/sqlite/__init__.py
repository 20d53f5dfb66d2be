"""The embedded state backend: sessions, transcripts and the turn ledger in SQLite.

``<state_dir>/sessions.sqlite3`` holds the session rows (:mod:`._sessions`, schema and
migrations in :mod:`._session_schema`); ``<state_dir>/transcripts.sqlite3`` the
transcripts and the turn ledger (:mod:`._transcripts`). Any number of processes open
them at once (WAL, busy timeouts, one short transaction per call). Each open host is an
owner (:mod:`._owners`), so only a dead process's turns are closed by another; turns
of one session run one at a time across processes under an ``flock`` per session key
(:mod:`._session_locks`); other processes' commits reach this one through
:mod:`._commit_watch`. :class:`SQLiteStateBackend` (:mod:`._backend`) opens them all.
"""

from ..._util import fixup_module_metadata as _fixup_module_metadata
from ._backend import SQLiteStateBackend as SQLiteStateBackend
from ._sessions import SessionStore as SessionStore
from ._sessions import open_session_store as open_session_store
from ._transcripts import TranscriptStore as TranscriptStore
from ._transcripts import open_transcript_store as open_transcript_store

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
