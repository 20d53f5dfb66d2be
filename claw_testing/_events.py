"""An event recorder: what the host did (turns, flushes, compactions) and what it warned about.

:class:`EventRecorder` subscribes to ``host.events`` and to the warnings that claw and its
bundled plugins log (loggers ``claw`` and ``claw_memory``, level WARNING and above), from
the moment it is attached until it is closed. Its assertion helpers fail with the list of
what was recorded, so a failing test says what happened instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs

from claw import Host, HostEvent

WARNING_LOGGERS = ("claw", "claw_memory")
"""The loggers whose warnings the recorder captures."""


def _matches(kind: str, prefix: str) -> bool:
    return kind == prefix or kind.startswith(prefix + ".")


class _Capture(logging.Handler):
    def __init__(self, sink: list[logging.LogRecord]) -> None:
        super().__init__(level=logging.WARNING)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self._sink.append(record)


@attrs.define(eq=False)
class EventRecorder:
    """Host events and logged warnings, in order, with assertions over them.

    Create one with :meth:`attach` (or the ``claw_events`` fixture); :meth:`close`
    stops recording. ``kind`` arguments match a kind exactly or as a dotted prefix:
    ``"flush"`` matches ``"flush.completed"`` and ``"flush.skipped"``.
    """

    events: list[HostEvent] = attrs.field(factory=list)
    warning_records: list[logging.LogRecord] = attrs.field(factory=list)
    _unsubscribe: Any = attrs.field(default=None, repr=False)
    _handler: _Capture | None = attrs.field(default=None, repr=False)
    _loggers: list[tuple[logging.Logger, int]] = attrs.field(factory=list, repr=False)

    @classmethod
    def attach(cls, host: Host) -> EventRecorder:
        """Start recording ``host``'s events and claw's warnings."""
        recorder = cls()
        recorder._unsubscribe = host.events.subscribe(recorder.events.append)
        recorder._handler = _Capture(recorder.warning_records)
        for name in WARNING_LOGGERS:
            logger = logging.getLogger(name)
            recorder._loggers.append((logger, logger.level))
            logger.addHandler(recorder._handler)
            if logger.getEffectiveLevel() > logging.WARNING:
                logger.setLevel(logging.WARNING)
        return recorder

    def close(self) -> None:
        """Stop recording (idempotent); what was recorded stays readable."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._handler is not None:
            for logger, level in self._loggers:
                logger.removeHandler(self._handler)
                logger.setLevel(level)
            self._loggers.clear()
            self._handler = None

    def clear(self) -> None:
        """Forget what was recorded so far (recording continues)."""
        self.events.clear()
        self.warning_records.clear()

    # -- views -------------------------------------------------------------------

    def of(self, kind: str) -> list[HostEvent]:
        """The recorded events of ``kind`` (exact or dotted prefix), oldest first."""
        return [e for e in self.events if _matches(e.kind, kind)]

    def kinds(self, kind: str | None = None) -> list[str]:
        """The kinds recorded (of ``kind``, if given), in order."""
        return [e.kind for e in (self.events if kind is None else self.of(kind))]

    @property
    def turns(self) -> list[HostEvent]:
        """``turn.*`` events: admitted, terminal, committed, overflow, ..."""
        return self.of("turn")

    @property
    def flushes(self) -> list[HostEvent]:
        """``flush.*`` events: completed, skipped, failed."""
        return self.of("flush")

    @property
    def compactions(self) -> list[HostEvent]:
        """``compaction.*`` events: completed, skipped."""
        return self.of("compaction")

    @property
    def warnings(self) -> list[str]:
        """The messages of the warnings logged by claw and Memory Core, in order."""
        return [r.getMessage() for r in self.warning_records]

    # -- assertions --------------------------------------------------------------

    def _describe(self) -> str:
        kinds = ", ".join(self.kinds()) or "no events"
        return f"recorded: {kinds}"

    def assert_emitted(
        self, kind: str, *, session_key: str | None = None, **data: Any
    ) -> HostEvent:
        """Return the first event of ``kind`` whose session and data match; else fail.

        ``data`` items must be equal to the event's; a value that is a callable
        matches when it returns true for the event's value.
        """
        for event in self.of(kind):
            if session_key is not None and event.session_key != session_key:
                continue
            if _data_matches(event.data, data):
                return event
        wanted = f"{kind}" + (f" for {session_key!r}" if session_key else "")
        if data:
            wanted += f" with {data!r}"
        raise AssertionError(f"no event {wanted}; {self._describe()}")

    def assert_not_emitted(self, kind: str, *, session_key: str | None = None) -> None:
        """Fail if any event of ``kind`` (for ``session_key``, if given) was recorded."""
        found = [e for e in self.of(kind) if session_key is None or e.session_key == session_key]
        if found:
            raise AssertionError(f"unexpected {[e.kind for e in found]}; {self._describe()}")

    def assert_order(self, *kinds: str) -> None:
        """Fail unless events of these kinds were recorded in this relative order.

        Each kind is matched against the first event of that kind after the previous
        match, so ``assert_order("turn.admitted", "flush", "turn.committed")`` holds
        when a flush happened between a turn's admission and its commit.
        """
        position = 0
        for kind in kinds:
            for index in range(position, len(self.events)):
                if _matches(self.events[index].kind, kind):
                    position = index + 1
                    break
            else:
                raise AssertionError(f"no {kind} after position {position}; {self._describe()}")

    def assert_warned(self, fragment: str) -> str:
        """Return the first logged warning containing ``fragment``; else fail."""
        for message in self.warnings:
            if fragment in message:
                return message
        raise AssertionError(f"no warning containing {fragment!r}; warnings: {self.warnings!r}")

    def assert_no_warnings(self) -> None:
        """Fail if claw or Memory Core logged any warning."""
        if self.warning_records:
            raise AssertionError(f"unexpected warnings: {self.warnings!r}")


def _data_matches(actual: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    for key, expected in wanted.items():
        if key not in actual:
            return False
        value = actual[key]
        if callable(expected) and not isinstance(expected, type):
            if not expected(value):
                return False
        elif value != expected:
            return False
    return True


@contextmanager
def record_events(host: Host) -> Iterator[EventRecorder]:
    """``with record_events(host) as events:`` records until the block exits."""
    recorder = EventRecorder.attach(host)
    try:
        yield recorder
    finally:
        recorder.close()
