"""A read-only view of the host's session transcripts for plugins (memory providers).

Memory plugins index session transcripts; they read them through this facet, never
through the host's stores. Sessions are listed per agent, one entry per session
incarnation (a reset that changes the session id keeps the old transcript listed, so
memory survives resets until it is forgotten); detached internal sessions (such as a
flush's maintenance run) have no session row and are never listed. A turn is a user or
assistant message with text: tool results, tool-call records and compaction summaries
are left out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

from ._errors import HostClosedError
from ._recent import RecentlyRead
from .models import AssistantMessage, UserMessage

if TYPE_CHECKING:
    from .state import SessionLister, TranscriptLedger
    from .turns import TranscriptCursor, TranscriptDelta, TranscriptStats


@attrs.frozen
class TranscriptSessionInfo:
    """One session incarnation with a token that changes whenever its transcript does."""

    agent_id: str
    session_key: str
    session_id: str
    change_token: str


@attrs.frozen
class TranscriptTurnInfo:
    """One visible turn: who said what, and when (seconds since the epoch)."""

    entry_id: str
    role: str
    speaker: str
    text: str
    timestamp: float | None = None


# How many turns a reader keeps, over the sessions it read last (see read_turns): a
# few long sessions' worth (about 300 bytes a turn of chat).
_CACHED_TURNS = 50_000


@attrs.frozen
class _KeptTurns:
    """A session's visible turns through entry ``through_seq``: what reading it again
    need not read (no entry before it belongs to a turn in flight)."""

    through_seq: int
    turns: tuple[TranscriptTurnInfo, ...]


@attrs.define(eq=False)
class TranscriptReader:
    """Read-only access to session transcripts, handed to plugins as ``api.transcripts``.

    It holds only what reading needs: the transcript store (once the host is open), a
    read-only view of the session rows (its own read-only connection) and a change
    counter the host bumps. It holds neither the host nor the session store, so no
    attribute path from it leads to the capability registry (see
    docs/threat-model.md).
    """

    _sessions: SessionLister
    _transcripts: TranscriptLedger | None = attrs.field(default=None, init=False)
    _session_version: int = attrs.field(default=0, init=False)
    _closed: bool = attrs.field(default=False, init=False)
    _cache: dict[str | None, tuple[tuple[int, int], list[TranscriptSessionInfo]]] = attrs.field(
        factory=dict, init=False
    )
    # Session id -> the turns read so far (see read_turns).
    _turns: RecentlyRead[str, _KeptTurns] = attrs.field(
        factory=lambda: RecentlyRead(_CACHED_TURNS, lambda kept: len(kept.turns)), init=False
    )

    # -- host side (see TranscriptReaders) -------------------------------------------

    def _attach(self, transcripts: TranscriptLedger) -> None:
        """Called once the host's stores are open."""
        self._transcripts = transcripts

    def _session_changed(self) -> None:
        """Called after every committed session change."""
        self._session_version += 1

    async def _aclose(self) -> None:
        self._closed = True
        self._transcripts = None
        await self._sessions.aclose()

    def _store(self) -> TranscriptLedger:
        if self._closed:
            raise HostClosedError("the host is closed")
        if self._transcripts is None:
            raise HostClosedError("the host is not open yet")
        return self._transcripts

    # -- plugin side -------------------------------------------------------------

    def sessions_version(self) -> object:
        """A value that changes whenever what :meth:`list_sessions` answers may (cheap,
        sync, no I/O): it moves with every transcript write and session change.

        A memory provider that checks for changed sessions before every search reads
        this first and lists (and compares every session) only once it moved: the
        listing is answered from a cache, but converting and comparing it still costs
        in proportion to every session the provider indexes.
        """
        return (self._store().version, self._session_version)

    async def list_sessions(self, *, agent_id: str | None = None) -> list[TranscriptSessionInfo]:
        """Every session incarnation with a transcript (of ``agent_id``, when given).

        Answered from a cache while neither the transcripts nor the sessions changed, so
        a memory provider can check for changes before every search at no I/O cost.
        """
        store = self._store()
        version = (store.version, self._session_version)
        # The same value sessions_version() answers: a listing cached against it is the
        # answer for as long as it stands.
        cached = self._cache.get(agent_id)
        if cached is not None and cached[0] == version:
            return list(cached[1])
        rows = await self._sessions.list(agent_id)
        # One read for every session's transcript stats (an agent's keys, or all of
        # them), not two per session: listing thousands of sessions after every write
        # cost that many reads (on PostgreSQL, round trips).
        by_key: dict[str, list[TranscriptStats]] = {}
        for session_key, found in await store.session_listing(
            None if agent_id is None else [row.session_key for row in rows]
        ):
            by_key.setdefault(session_key, []).append(found)
        out: list[TranscriptSessionInfo] = []
        for row in rows:
            for stats in by_key.get(row.session_key, ()):
                if stats.entry_count == 0:
                    continue
                session_id = stats.session_id
                # Closing or reopening a turn changes what read_turns shows, so the
                # turns in flight are part of the token.
                in_flight = ",".join(map(str, stats.open_turn_seqs))
                token = f"{stats.entry_count}:{stats.last_seq}:{stats.byte_size}:{in_flight}"
                out.append(
                    TranscriptSessionInfo(
                        agent_id=row.agent_id,
                        session_key=row.session_key,
                        session_id=session_id,
                        change_token=token,
                    )
                )
        self._cache[agent_id] = (version, out)
        return list(out)

    async def read_turns(self, session_id: str) -> list[TranscriptTurnInfo]:
        """The user and assistant turns of a session incarnation, in order.

        Entries of a turn still in flight (admitted, no terminal entry yet, not
        closed) are left out: they are the current context of a run, not memory, and
        a memory search made during a turn must not find the turn's own question.
        Everything else is shown, including turns closed as failed or aborted and
        every turn after them.

        Entries are never changed or deleted, so the turns read up to the first entry
        of a turn in flight are kept (for the sessions read last, up to
        :data:`_CACHED_TURNS` turns in all) and the next read reads only the entries
        after them: a memory provider reads its live session after every turn, and
        reading all of a 5,000-turn session cost 40 ms. A failed turn reopened to be
        retried hides its entries again: a reopened turn inside the kept part drops
        it.
        """
        store = self._store()
        while True:
            kept = self._turns.take(session_id)
            through = kept.through_seq if kept is not None else 0
            # The entries before the ledger: a turn is admitted before its first entry
            # and closed after its last, so an entry read here whose turn the ledger
            # read next shows closed was never in flight when read.
            entries = await store.read_entries(session_id, after_seq=through)
            ledger = await store.turns(session_id, open_only=True)
            in_flight = {t.turn_id: t.first_seq for t in ledger}
            if kept is None or min(in_flight.values(), default=through + 1) > through:
                break
            # A turn of the kept part was reopened: read the session again, whole.
        turns = list(kept.turns) if kept is not None else []
        settled = True
        for entry in entries:
            # Skip (never stop at) a turn in flight: what follows it must stay visible.
            if entry.turn_id is not None and entry.turn_id in in_flight:
                if settled:
                    settled = False
                    self._turns.keep(session_id, _KeptTurns(through, tuple(turns)))
                continue
            message = entry.payload
            if isinstance(message, UserMessage) and message.text.strip():
                speaker = message.sender or "user"
                role = "user"
            elif isinstance(message, AssistantMessage) and message.text.strip():
                speaker = role = "assistant"
            else:
                if settled:
                    through = entry.seq
                continue
            turns.append(
                TranscriptTurnInfo(
                    entry_id=entry.entry_id,
                    role=role,
                    speaker=speaker,
                    text=message.text,
                    timestamp=entry.created_at,
                )
            )
            if settled:
                through = entry.seq
        if settled:
            self._turns.keep(session_id, _KeptTurns(through, tuple(turns)))
        return turns

    async def read_visible_message_delta(
        self, session_id: str, cursor: TranscriptCursor | None = None
    ) -> TranscriptDelta:
        """The cursor API engines use to bootstrap or rebuild history (see claw.turns)."""
        return await self._store().read_session_transcript_visible_message_delta(session_id, cursor)


@attrs.define(eq=False)
class TranscriptReaders:
    """The host side of every plugin's ``api.transcripts``: it makes one reader per
    plugin while plugins load (before the stores open), attaches them to the transcript
    store once it is open, tells them of session changes and closes them.

    ``lister`` opens each reader's own read-only view of the session rows.
    """

    _lister: Callable[[], SessionLister]
    _readers: list[TranscriptReader] = attrs.field(factory=list, init=False)
    _store: TranscriptLedger | None = attrs.field(default=None, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    def new(self) -> TranscriptReader:
        """A reader for one plugin (attached at once when the store is already open)."""
        reader = TranscriptReader(self._lister())
        if self._store is not None and not self._closed:
            reader._attach(self._store)
        self._readers.append(reader)
        return reader

    def attach(self, transcripts: TranscriptLedger) -> None:
        """The transcript store is open: every reader reads from it from now on."""
        self._store = transcripts
        for reader in self._readers:
            reader._attach(transcripts)

    def session_changed(self) -> None:
        """A session changed incarnation: cached listings are out of date."""
        for reader in self._readers:
            reader._session_changed()

    async def aclose(self) -> None:
        self._closed = True
        for reader in self._readers:
            await reader._aclose()
