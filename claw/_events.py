"""The host's observable events: turns, flushes, compactions, quarantines, warnings.

Every notable thing the host does is recorded as a :class:`HostEvent` in an
append-only, bounded :class:`EventLog`, in the order it happened. Tests and the
harness assert on it; applications can subscribe to forward events to their own
logging or metrics. Subscribers run synchronously and must not block.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import attrs

logger = logging.getLogger("claw.events")


@attrs.frozen
class HostEvent:
    """One thing the host did: ``kind`` (``"turn.committed"``, ``"flush.skipped"``, ...)."""

    seq: int
    kind: str
    session_key: str | None
    data: Mapping[str, Any]

    def row(self) -> dict[str, Any]:
        """The event as one flat row: seq, kind, session, then its data."""
        return {"seq": self.seq, "kind": self.kind, "session": self.session_key, **self.data}


@attrs.define(eq=False)
class EventLog:
    """A bounded, ordered record of host events with synchronous subscribers."""

    max_events: int = 10_000
    _events: deque[HostEvent] = attrs.field(init=False)
    _seq: int = attrs.field(default=0, init=False)
    _subscribers: list[Callable[[HostEvent], None]] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        self._events = deque(maxlen=self.max_events)

    def emit(self, kind: str, session_key: str | None = None, **data: Any) -> HostEvent:
        """Record an event and hand it to every subscriber."""
        self._seq += 1
        event = HostEvent(seq=self._seq, kind=kind, session_key=session_key, data=data)
        self._events.append(event)
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception:
                logger.exception("event subscriber failed on %s", kind)
        return event

    def subscribe(self, callback: Callable[[HostEvent], None]) -> Callable[[], None]:
        """Call ``callback(event)`` for every later event; returns an unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback)

    def events(self, kind: str | None = None) -> list[HostEvent]:
        """The recorded events, oldest first (of ``kind``, or a ``kind.`` prefix, if given)."""
        if kind is None:
            return list(self._events)
        return [e for e in self._events if e.kind == kind or e.kind.startswith(kind + ".")]

    def kinds(self) -> list[str]:
        """The kinds of the recorded events, in order."""
        return [e.kind for e in self._events]
