"""claw.turns: durable session transcripts, the accepted-turns ledger, the turn runner."""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._ledger import AdmittedTurn as AdmittedTurn
from ._ledger import TurnLedgerError as TurnLedgerError
from ._ledger import TurnStatus as TurnStatus
from ._ledger import UnknownTurnError as UnknownTurnError
from ._transcript import Appendable as Appendable
from ._transcript import CompactionInfo as CompactionInfo
from ._transcript import TranscriptCursor as TranscriptCursor
from ._transcript import TranscriptDelta as TranscriptDelta
from ._transcript import TranscriptEntry as TranscriptEntry
from ._transcript import TranscriptEntryKind as TranscriptEntryKind
from ._transcript import TranscriptError as TranscriptError
from ._transcript import TranscriptStats as TranscriptStats
from ._transcript import TranscriptStorageError as TranscriptStorageError
from ._transcript import TranscriptStore as TranscriptStore
from ._transcript import UnknownEntryError as UnknownEntryError
from ._transcript import entry_id as entry_id
from ._transcript import open_transcript_store as open_transcript_store
from ._transcript import parse_entry_id as parse_entry_id

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
