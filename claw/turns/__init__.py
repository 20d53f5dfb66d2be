"""claw.turns: durable session transcripts, the accepted-turns ledger, the turn runner.

The transcript and ledger values and rules live here; the stores that keep them are the
state backends' (:mod:`claw.state.sqlite`, :mod:`claw.state.postgres`).
``claw.turns.TranscriptStore`` and ``open_transcript_store`` (the SQLite store) are
still found here, imported on first use: the store imports this package's rules, so
importing it here eagerly would be a cycle.
"""

from typing import TYPE_CHECKING, Any

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._ledger import AdmittedTurn as AdmittedTurn
from ._ledger import TurnLedgerError as TurnLedgerError
from ._ledger import TurnStatus as TurnStatus
from ._ledger import UnknownTurnError as UnknownTurnError
from ._transcript_core import Appendable as Appendable
from ._transcript_core import CompactionInfo as CompactionInfo
from ._transcript_core import TranscriptCursor as TranscriptCursor
from ._transcript_core import TranscriptDelta as TranscriptDelta
from ._transcript_core import TranscriptEntry as TranscriptEntry
from ._transcript_core import TranscriptEntryKind as TranscriptEntryKind
from ._transcript_core import TranscriptError as TranscriptError
from ._transcript_core import TranscriptStats as TranscriptStats
from ._transcript_core import TranscriptStorageError as TranscriptStorageError
from ._transcript_core import UnknownEntryError as UnknownEntryError
from ._transcript_core import entry_id as entry_id
from ._transcript_core import parse_entry_id as parse_entry_id

if TYPE_CHECKING:
    from ..state.sqlite._transcripts import TranscriptStore as TranscriptStore
    from ..state.sqlite._transcripts import open_transcript_store as open_transcript_store

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata


def __getattr__(name: str) -> Any:
    if name in ("TranscriptStore", "open_transcript_store"):
        from ..state.sqlite import _transcripts  # noqa: PLC0415  (a cycle if eager)

        return getattr(_transcripts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

