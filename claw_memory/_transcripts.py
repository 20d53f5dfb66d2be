"""Session transcripts as a retrieval source.

The host owns transcripts; Memory Core sees them through :class:`TranscriptSource`.
Each turn becomes a chunk (or a few turns, per settings) whose searchable text is
``speaker: text`` and whose lower-weighted context field holds the neighbouring turns,
so that a question phrased like the reply still finds the turn that was replied to.
Chunks record the agent, session key, session id and the ordered entry ids they span,
which is what authorization and turn-level evaluation need.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable
from urllib.parse import quote

import attrs

from claw.plugin_sdk import RecentlyRead
from claw.plugin_sdk.search import (
    LineWindow,
    chunk_id_for,
    chunk_key,
    estimate_tokens,
    line_windows,
    sha256_hex,
)

from ._lexical import LexicalContext
from ._records import ChunkRecord, PreparedChunk


@attrs.frozen
class TranscriptSession:
    """One session incarnation.

    ``change_token`` must change whenever the session's turns change (an entry count
    plus the last entry id is enough); it is compared before any turn is read.
    """

    agent_id: str
    session_key: str
    session_id: str
    change_token: str


@attrs.frozen
class TranscriptTurn:
    """One visible transcript entry; ``timestamp`` is seconds since the epoch (UTC)."""

    entry_id: str
    role: str
    speaker: str
    text: str
    timestamp: float | None = None


@runtime_checkable
class TranscriptSource(Protocol):
    """Where Memory Core reads session transcripts from."""

    async def list_sessions(self) -> Sequence[TranscriptSession]:
        """Every session that should be searchable, with its current change token."""
        ...

    async def read_turns(self, session: TranscriptSession) -> Sequence[TranscriptTurn]:
        """The turns of ``session`` in transcript order."""
        ...


@runtime_checkable
class VersionedTranscriptSource(TranscriptSource, Protocol):
    """A :class:`TranscriptSource` that can say at once whether its listing changed.

    ``sessions_version()`` returns a value that changes whenever what ``list_sessions``
    answers would (a session appears, vanishes or changes its token). A search then
    tells "nothing changed" from that value alone instead of listing and comparing
    every session of the index, which in an index of many agents' sessions costs in
    proportion to the whole index rather than to the agent searched.
    """

    def sessions_version(self) -> object:
        """A value that changes whenever ``list_sessions``' answer would (cheap, sync)."""
        ...


@attrs.define
class InMemoryTranscriptSource:
    """A :class:`TranscriptSource` over sessions held in memory (harness, notebooks).

    ``put`` replaces a session's turns and derives its change token from their content;
    every ``put`` or ``remove`` moves ``sessions_version``.
    """

    _sessions: dict[tuple[str, str], tuple[TranscriptSession, tuple[TranscriptTurn, ...]]] = (
        attrs.field(factory=dict, init=False)
    )
    _version: int = attrs.field(default=0, init=False)

    def put(
        self, agent_id: str, session_key: str, session_id: str, turns: Sequence[TranscriptTurn]
    ) -> TranscriptSession:
        """Set the turns of a session (replacing earlier ones) and return its descriptor."""
        token = sha256_hex(
            "\x1e".join(f"{t.entry_id}\x1f{t.speaker}\x1f{t.text}\x1f{t.timestamp}" for t in turns)
        )[:16]
        session = TranscriptSession(agent_id, session_key, session_id, f"{len(turns)}:{token}")
        self._sessions[(agent_id, session_id)] = (session, tuple(turns))
        self._version += 1
        return session

    def remove(self, agent_id: str, session_id: str) -> None:
        """Drop a session."""
        del self._sessions[(agent_id, session_id)]
        self._version += 1

    def sessions_version(self) -> int:
        """Changes on every ``put`` and ``remove`` (see :class:`VersionedTranscriptSource`)."""
        return self._version

    async def list_sessions(self) -> Sequence[TranscriptSession]:
        return [s for s, _ in self._sessions.values()]

    async def read_turns(self, session: TranscriptSession) -> Sequence[TranscriptTurn]:
        entry = self._sessions.get((session.agent_id, session.session_id))
        return entry[1] if entry is not None else ()


def session_provenance(session: TranscriptSession) -> str:
    """The provenance key of a session's chunks (what forget and re-indexing use)."""
    return f"sessions:{session.agent_id}\x1f{session.session_key}\x1f{session.session_id}"


def session_path(session: TranscriptSession) -> str:
    """The virtual path of a session: ``sessions/<agent>/<session id>`` (quoted)."""
    return _session_path(session.agent_id, session.session_id)


# A sync names every session the source lists (thousands in an index of many agents'
# transcripts, on every sync): quoting them again each time was most of a one-turn
# sync's Python. Bounded: a path is a short string.
@functools.lru_cache(maxsize=1 << 16)
def _session_path(agent_id: str, session_id: str) -> str:
    return f"sessions/{quote(agent_id, safe='')}/{quote(session_id, safe='')}"


def render_turn(turn: TranscriptTurn) -> str:
    """A turn as one line: ``speaker: text`` with inner newlines folded to spaces."""
    text = " ".join(turn.text.split())
    speaker = turn.speaker or turn.role
    return f"{speaker}: {text}" if speaker else text


def speaker_label(turn: TranscriptTurn) -> str:
    """What :func:`render_turn` puts before a turn's text (``"assistant: "``), or ``""``."""
    speaker = turn.speaker or turn.role
    return f"{speaker}: " if speaker else ""


def _labels(turns: Sequence[TranscriptTurn]) -> list[str]:
    return [speaker_label(t) for t in turns]


def date_text(timestamp: float | None) -> str:
    """The UTC day of ``timestamp`` in words (``"8 May 2023"``); empty without one.

    Ranking counts these words as part of a turn, so a question naming the day or
    month of a session ("... on 8 May, 2023?") favours that session's turns.
    """
    if timestamp is None or math.isnan(timestamp):
        return ""
    try:
        day = datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return f"{day.day} {day:%B} {day.year}"


#: What a transcript chunk's vector is made of (part of the index identity): ``own``,
#: the chunk's own turns. Until this version the vector also saw the neighbouring
#: turns, which made the evidence turn and its four neighbours near-identical vectors:
#: with ``claw-static`` on the LongMemEval tuning split, vector-only turn recall@1 was
#: 0.18 that way and 0.48 on a turn's own text (LoCoMo tuning: 0.14 and 0.24).
TURN_VECTORS = "own/1"

#: How a turn longer than the chunk budget is cut (part of the index identity):
#: ``speaker/1``, every piece starts with the turn's speaker (:func:`turn_pieces`).
#: Until this version only the first did, so the rest of a long reply was ranked as
#: nobody's: the assistant prior (``_ranking.priors``), which tells the turn by its
#: text, let it through at full weight, and it was the top turn of 0.12 of the
#: LongMemEval tuning questions.
TURN_PIECES = "speaker/1"


def prepare_session_chunks(
    session: TranscriptSession,
    turns: Sequence[TranscriptTurn],
    *,
    turns_per_chunk: int,
    context_turns: int,
    max_tokens: int,
    chars_per_token: int,
    tombstones: Mapping[str, object] | frozenset[str] | set[str],
) -> list[PreparedChunk]:
    """Cut a session into chunks of ``turns_per_chunk`` turns.

    A group longer than the chunk budget is cut into several chunks that share the
    group's entry ids. Chunk ids hash the provenance, text and occurrence, so they are
    stable when turns are appended. Chunks whose id is tombstoned are left out.
    """
    return cut_session(
        session,
        turns,
        turns_per_chunk=turns_per_chunk,
        context_turns=context_turns,
        max_tokens=max_tokens,
        chars_per_token=chars_per_token,
        tombstones=tombstones,
    ).chunks


@attrs.frozen
class SessionCut:
    """A session cut into chunks (:func:`cut_session`): the chunks of its turns past
    ``settled_through`` in full, those of the turns before it by id and key only."""

    chunks: list[PreparedChunk]
    settled_ids: list[str]
    settled_keys: list[int]


@attrs.frozen
class _Named:
    """What naming a group of turns needs, kept from an earlier cut of its session:
    what tells it is the same group (its turns' entry ids and the hash of its turns:
    the turns themselves are not held, so a kept name pins no transcript text) and its
    pieces' content hashes (``()`` for a blank group, which makes no chunk)."""

    entry_ids: tuple[str, ...]
    fingerprint: int
    hashes: tuple[str, ...]

    @staticmethod
    def of(group: tuple[TranscriptTurn, ...], hashes: tuple[str, ...]) -> _Named:
        return _Named(tuple(t.entry_id for t in group), hash(group), hashes)

    def names(self, group: tuple[TranscriptTurn, ...]) -> bool:
        """Whether this names ``group``: the same entries with the same fields (told by
        their hash, keyed per process: a match by chance is a 64-bit coincidence)."""
        same_entries = self.entry_ids == tuple(t.entry_id for t in group)
        return same_entries and self.fingerprint == hash(group)


# Entries kept, all sessions together: a group counts one and each of its pieces one
# more, as its memory does (a one-piece group is about 375 bytes, a reply of 36 pieces
# about 4.6 KB: at most about 190 bytes an entry, so about 50 MB in all, however long
# the turns).
_NAMED_ENTRIES = 1 << 18


def _entries(named: list[_Named]) -> int:
    return len(named) + sum(len(n.hashes) for n in named)


_CutKey = tuple[str, int, int, int]


@attrs.define(eq=False)
class SessionNames:
    """The content hashes of the groups each session was last cut into, so that a sync
    of a grown session names its settled groups without rendering, cutting and hashing
    their turns again (most of what naming a long session cost: at 5,000 turns, a third
    of them 2,400-character replies, about 90-140 ms of a one-turn sync).

    A group's pieces depend only on its turns and the chunk budget, so a kept entry
    holds while the group's turns are equal (a session whose turns changed is cut
    anew where they differ). Bounded by ``limit`` entries in all (a group and each of
    its pieces count one), the least recently
    cut sessions going first (:class:`~claw.plugin_sdk.RecentlyRead`); a sync takes a
    session's entry and puts it back, one thread at a time (the lock), so two syncs
    never share one.
    """

    limit: int = _NAMED_ENTRIES
    _kept: RecentlyRead[_CutKey, list[_Named]] = attrs.field(init=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        self._kept = RecentlyRead(self.limit, _entries)

    def take(self, key: _CutKey) -> list[_Named]:
        with self._lock:
            return self._kept.take(key) or []

    def keep(self, key: _CutKey, named: list[_Named]) -> None:
        with self._lock:
            self._kept.keep(key, named)

    def entries(self) -> int:
        """How many entries are kept: a group and each of its pieces count one."""
        with self._lock:
            return sum(self._kept.sizes().values())


def cut_session(
    session: TranscriptSession,
    turns: Sequence[TranscriptTurn],
    *,
    turns_per_chunk: int,
    context_turns: int,
    max_tokens: int,
    chars_per_token: int,
    tombstones: Mapping[str, object] | frozenset[str] | set[str],
    settled_through: int = 0,
    names: SessionNames | None = None,
) -> SessionCut:
    """:func:`prepare_session_chunks`, with the chunks of the groups ending by turn
    ``settled_through`` named only (their ids and keys, as they would be in full).

    A sync of a grown session keeps those chunks' rows when the index has them: it
    needs their ids, which count identical pieces from the session's start, but not
    their records, contexts and analysis (most of what cutting a turn costs). With
    ``names``, a settled group whose turns are those of the session's last cut is
    named from the hashes kept then, without rendering, cutting or hashing it (not
    while any chunk is forgotten: then every group's old pieces are named too).
    """
    prov = session_provenance(session)
    path = session_path(session)
    key = (prov, turns_per_chunk, max_tokens, chars_per_token)
    kept = names.take(key) if names is not None else []
    named: list[_Named] = []
    # Lines are rendered where they are read: a group cut in full and its context.
    rendered: dict[int, str] = {}

    def lines_of(start: int, stop: int) -> list[str]:
        found = []
        for i in range(start, stop):
            line = rendered.get(i)
            if line is None:
                line = rendered[i] = render_turn(turns[i])
            found.append(line)
        return found

    out: list[PreparedChunk] = []
    settled_ids: list[str] = []
    settled_keys: list[int] = []
    seen: dict[str, int] = {}
    # With any chunk forgotten, the pieces as indexes cut them before TURN_PIECES are
    # named too (their own occurrence count), so a forgotten one keeps its text out.
    seen_before: dict[str, int] | None = {} if tombstones else None
    for n, g in enumerate(range(0, len(turns), turns_per_chunk)):
        group = tuple(turns[g : g + turns_per_chunk])
        end = g + len(group)
        settled = end <= settled_through
        earlier = kept[n] if n < len(kept) else None
        if settled and seen_before is None and earlier is not None and earlier.names(group):
            named.append(earlier)
            for content_hash in earlier.hashes:
                occurrence = seen.get(content_hash, 0)
                seen[content_hash] = occurrence + 1
                cid = chunk_id_for("sessions", prov, content_hash, occurrence)
                settled_ids.append(cid)
                settled_keys.append(chunk_key(cid))
            continue
        group_lines = lines_of(g, end)
        if len(group_lines) == 1:
            body = group_lines[0]
            # One line within the budget is its own only piece (what line_windows
            # makes of it; the common case, cut without building windows).
            pieces = (
                [body]
                if estimate_tokens(body, chars_per_token) + 1 <= max_tokens
                else turn_pieces(group_lines, _labels(group), max_tokens, chars_per_token)
            )
        else:
            body = "\n".join(group_lines)
            pieces = turn_pieces(group_lines, _labels(group), max_tokens, chars_per_token)
        if not body.strip():
            named.append(_Named.of(group, ()))
            continue
        hashes = [sha256_hex(piece) for piece in pieces]
        named.append(_Named.of(group, tuple(hashes)))
        forgotten: set[int] = set()
        if seen_before is not None:
            forgotten = _forgotten_before(
                prov,
                group,
                group_lines,
                pieces,
                hashes,
                seen_before=seen_before,
                tombstones=tombstones,
                max_tokens=max_tokens,
                chars_per_token=chars_per_token,
            )
        if settled:
            for k, content_hash in enumerate(hashes):
                occurrence = seen.get(content_hash, 0)
                seen[content_hash] = occurrence + 1
                cid = chunk_id_for("sessions", prov, content_hash, occurrence)
                if cid not in tombstones and k not in forgotten:
                    settled_ids.append(cid)
                    settled_keys.append(chunk_key(cid))
            continue
        lo = max(0, g - context_turns)
        hi = min(len(turns), end + context_turns)
        near_lo = max(0, g - min(1, context_turns))
        near_hi = min(len(turns), end + min(1, context_turns))
        speakers = " ".join(dict.fromkeys(t.speaker for t in group if t.speaker))
        lexical_context = LexicalContext(
            speakers=speakers,
            near="\n".join(lines_of(near_lo, g) + lines_of(end, near_hi)),
            far="\n".join(lines_of(lo, near_lo) + lines_of(near_hi, hi)),
            date=date_text(group[-1].timestamp),
        ).encode()
        for k, (piece, content_hash) in enumerate(zip(pieces, hashes, strict=True)):
            occurrence = seen.get(content_hash, 0)
            seen[content_hash] = occurrence + 1
            cid = chunk_id_for("sessions", prov, content_hash, occurrence)
            if cid in tombstones or k in forgotten:
                continue
            record = ChunkRecord(
                chunk_id=cid,
                key=chunk_key(cid),
                source="sessions",
                provenance=prov,
                path=path,
                start_line=g + 1,
                end_line=end,
                content_hash=content_hash,
                revision=session.change_token,
                text=piece,
                agent_id=session.agent_id,
                session_key=session.session_key,
                session_id=session.session_id,
                entry_ids=tuple(t.entry_id for t in group),
                timestamp=group[-1].timestamp,
            )
            # The vector is the turn's own text (TURN_VECTORS); its neighbours reach
            # ranking through the lexical context fields.
            out.append(PreparedChunk(record=record, context=lexical_context, embed_text=piece))
    if names is not None:
        names.keep(key, named)
    return SessionCut(chunks=out, settled_ids=settled_ids, settled_keys=settled_keys)


def _windows(lines: list[str], max_tokens: int, chars_per_token: int) -> list[LineWindow]:
    return line_windows(
        lines, max_tokens=max_tokens, overlap_tokens=0, chars_per_token=chars_per_token
    )


# A speaker label may take at most this share of a piece's budget; a longer one (a
# speaker named at great length) leaves the pieces after the first without it.
_LABEL_SHARE = 4


def turn_pieces(
    lines: Sequence[str], labels: Sequence[str], max_tokens: int, chars_per_token: int
) -> list[str]:
    """The pieces a group of rendered turns (``lines``, each starting with its
    speaker's label in ``labels``: :func:`speaker_label`) is indexed as, within
    ``max_tokens`` each.

    Whole lines are windowed together; a line longer than the budget is cut alone,
    and every piece of it starts with the turn's speaker label, as the first does by
    rendering: the third piece of a long reply is still the assistant's, for the
    priors that tell a turn by its text and for whoever reads the hit. A get checks
    a hit's revision against these pieces (:func:`names_a_turn_piece`).
    """
    lines = list(lines)
    pieces: list[str] = []
    for w in _windows(lines, max_tokens, chars_per_token):
        line = lines[w.start - 1]
        if w.start != w.end or estimate_tokens(line, chars_per_token) < max_tokens:
            pieces.append(w.text)
            continue
        if w.part:
            continue  # the line's pieces were all cut with its first
        label = labels[w.start - 1]
        room = max_tokens - estimate_tokens(label, chars_per_token)
        if (
            not label
            or not line.startswith(label)
            or room * _LABEL_SHARE < max_tokens * (_LABEL_SHARE - 1)
        ):
            pieces.extend(p.text for p in _windows([line], max_tokens, chars_per_token))
            continue
        text = line[len(label) :]
        pieces.extend(label + p.text for p in _windows([text], room, chars_per_token))
    return pieces


def _forgotten_before(
    prov: str,
    group: Sequence[TranscriptTurn],
    group_lines: list[str],
    pieces: list[str],
    hashes: list[str],
    *,
    seen_before: dict[str, int],
    tombstones: Mapping[str, object] | frozenset[str] | set[str],
    max_tokens: int,
    chars_per_token: int,
) -> set[int]:
    """Which of a group's ``pieces`` hold text of a piece forgotten as an index cut it
    before ``TURN_PIECES`` (the speaker on the first piece only): a forget made then
    tombstoned that piece's id, which the new cut no longer makes.

    Counts the group's old pieces into ``seen_before`` (their ids count identical
    pieces from the session's start, as the new ones do). A group the old cut made
    the same pieces of needs nothing more (its ids are the same). Otherwise a one-turn
    group leaves out the new pieces that overlap a forgotten old one, and a group of
    several turns all of its pieces when any old one was forgotten.
    """
    before = (
        pieces
        if len(pieces) == 1
        else [w.text for w in _windows(group_lines, max_tokens, chars_per_token)]
    )
    if before == pieces:
        for content_hash in hashes:
            seen_before[content_hash] = seen_before.get(content_hash, 0) + 1
        return set()
    gone: list[int] = []
    for j, piece in enumerate(before):
        content_hash = sha256_hex(piece)
        occurrence = seen_before.get(content_hash, 0)
        seen_before[content_hash] = occurrence + 1
        if chunk_id_for("sessions", prov, content_hash, occurrence) in tombstones:
            gone.append(j)
    if not gone:
        return set()
    everything = set(range(len(pieces)))
    line = group_lines[0]
    label = speaker_label(group[0])
    # What of the line each new piece holds: the first with its label, the rest after it.
    own = [pieces[0], *(p[len(label) :] for p in pieces[1:])]
    if (
        len(group_lines) != 1
        or "".join(before) != line
        or "".join(own) != line
        or not (label and all(p.startswith(label) for p in pieces[1:]))
    ):
        return everything
    old_spans = _spans(before)
    return {
        k
        for k, (a, b) in enumerate(_spans(own))
        if any(a < old_spans[j][1] and old_spans[j][0] < b for j in gone)
    }


def _spans(parts: Sequence[str]) -> list[tuple[int, int]]:
    """Where each of ``parts``, laid end to end from 0, starts and ends."""
    ends = list(itertools.accumulate(len(p) for p in parts))
    return [(end - len(p), end) for p, end in zip(parts, ends, strict=True)]


def names_a_turn_piece(
    lines: Sequence[str],
    labels: Sequence[str],
    wanted: str,
    *,
    max_tokens: int,
    chars_per_token: int,
) -> bool:
    """Whether ``wanted`` (a lower-case revision or its prefix) is the hash of one of
    the pieces :func:`turn_pieces` cuts these turns into when they are longer than a
    chunk: a hit on a piece cites all of the group's turns with the piece's hash.

    A piece as indexes cut it before ``TURN_PIECES`` (the label on the first piece
    only) still counts: a reference an agent kept from then names the same turns,
    unchanged, and reads them back.
    """
    pieces = turn_pieces(lines, labels, max_tokens, chars_per_token)
    if len(pieces) < 2:
        return False
    if any(sha256_hex(p).startswith(wanted) for p in pieces):
        return True
    before = _windows(list(lines), max_tokens, chars_per_token)
    return any(sha256_hex(w.text).startswith(wanted) for w in before)
