"""Durable state: the seam the host uses, and the backends behind it.

What the host needs from durable state (the session store, the transcript store, the
turn ledger, the per-session locks) is declared once, as protocols (:mod:`._seam`);
a :class:`StateBackend` opens the stores (:class:`StateStores`). ``[state] backend``
selects one: ``"sqlite"`` (:mod:`claw.state.sqlite`, built in, the embedded default)
or one registered in the ``claw.state_backends`` entry-point group, such as
``"postgresql"`` (:mod:`claw.state.postgres`, the ``postgres`` extra).

Where things live:

- ``_seam.py``: the protocols and their contracts;
- ``_session_locks.py``: per-session locks across processes, over a backend's try-lock;
- ``_sessions_sql.py``, ``_ledger_sql.py``, ``_transcript_writes.py``: the session
  changes and reads, the ledger's reads and updates, and a transcript's appends,
  compactions and admissions, written once over a backend's dialect (table names,
  placeholder, row locks, notifications);
- ``sqlite/``: the SQLite backend (sessions, transcripts and ledger, owners, locks,
  the commit watcher);
- ``postgres/``: the PostgreSQL backend and its driver layer (pool, LISTEN,
  migrations).

The values and pure rules the stores keep stay with their subsystems:
:mod:`claw.sessions` (rows, incarnation changes, the mirror, lineage) and
:mod:`claw.turns` (transcript entries and cursors, the ledger's turn rules).
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._seam import SessionLister as SessionLister
from ._seam import SessionLocks as SessionLocks
from ._seam import SessionStorage as SessionStorage
from ._seam import StateBackend as StateBackend
from ._seam import StateStores as StateStores
from ._seam import TranscriptLedger as TranscriptLedger
from ._seam import TranscriptStorage as TranscriptStorage
from ._seam import TurnLedger as TurnLedger

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
