"""The state seam: the host opens its stores through a configurable backend."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import claw
from claw._workers import InlineWorkerPool, WorkerPool
from claw.models import UserMessage
from claw.sessions import open_session_store
from claw.state import SessionLister, StateBackend, StateStores
from claw.state.sqlite import SQLiteStateBackend
from claw.state.sqlite._sessions import SessionStore
from claw.turns import open_transcript_store
from claw_testing import ScriptedModel, harness_config, open_harness_host


@attrs.define
class _RecordingBackend:
    """A backend that delegates to SQLite and records what the host asked of it."""

    inner: SQLiteStateBackend
    calls: list[str] = attrs.field(factory=list)

    @property
    def name(self) -> str:
        return "recording"

    def session_lister(self, workers: WorkerPool) -> SessionLister:
        self.calls.append("session_lister")
        return self.inner.session_lister(workers)

    def open(
        self, *, workers: WorkerPool, clock: Callable[[], float]
    ) -> AbstractAsyncContextManager[StateStores]:
        return self._open(workers, clock)

    @asynccontextmanager
    async def _open(
        self, workers: WorkerPool, clock: Callable[[], float]
    ) -> AsyncIterator[StateStores]:
        self.calls.append("open")
        async with self.inner.open(workers=workers, clock=clock) as stores:
            yield stores
        self.calls.append("closed")


async def test_the_host_opens_its_stores_through_the_backend_it_is_given(
    host_config: claw.HostConfig,
) -> None:
    backend = _RecordingBackend(SQLiteStateBackend(host_config.resolved_state_dir))
    typed: StateBackend = backend
    async with claw.open_host(host_config, state=typed) as host:
        assert backend.calls == ["open"]
        row = await host.sessions.create("dm:a", agent_id="main", chat_type="direct")
        assert host.sessions.get_nowait("dm:a") == row
    assert backend.calls == ["open", "closed"]
    # The same files, opened by the default backend, hold what was written.
    async with claw.open_host(host_config) as host:
        assert host.sessions.get_nowait("dm:a") == row


async def test_an_unknown_state_backend_is_a_config_error_naming_the_key(
    host_config: claw.HostConfig,
) -> None:
    config = attrs.evolve(host_config, state=claw.StateConfig(backend="nosuch"))
    with pytest.raises(claw.ConfigError, match=r"state\.backend.*no state backend 'nosuch'"):
        async with claw.open_host(config):
            pass  # pragma: no cover


def test_state_backend_is_read_from_toml() -> None:
    config = claw.HostConfig.from_mapping({"state": {"backend": "sqlite"}})
    assert config.state == claw.StateConfig(backend="sqlite", dsn=None)
    with pytest.raises(claw.ConfigError, match=r"state\.bogus"):
        claw.HostConfig.from_mapping({"state": {"bogus": 1}})


async def test_read_committed_reads_rows_and_deleted_watermarks_from_the_database(
    host: claw.Host,
) -> None:
    sessions = host.sessions
    await sessions.create("dm:a", agent_id="main", chat_type="direct")
    b = await sessions.create("dm:b", agent_id="main", chat_type="direct")
    await sessions.reset("dm:b")
    await sessions.delete("dm:a")
    seen = await sessions.read_committed(["dm:a", "dm:b", "dm:never"])
    assert seen.get_nowait("dm:a") is None
    assert seen.last_revision_nowait("dm:a") == 1
    row = seen.get_nowait("dm:b")
    assert row is not None and row.lifecycle_revision == b.lifecycle_revision + 1
    assert seen.get_nowait("dm:never") is None
    assert seen.last_revision_nowait("dm:never") == 0


async def test_a_turn_admitted_elsewhere_in_between_moves_this_admission_to_the_next_seq(
    tmp_path: Path,
) -> None:
    """Another process admits a turn of the session between this runner's read of the
    next seq and its admission: the taken turn id is refused and the admission retried."""
    config = harness_config(tmp_path / "ws", tmp_path / "state", memory="none")
    async with (
        open_harness_host(config, plugins=(), model=ScriptedModel(["mine"])) as host,
        open_transcript_store(
            tmp_path / "state" / "transcripts.sqlite3", workers=InlineWorkerPool()
        ) as elsewhere,
    ):
        row = await host.sessions.create("dm:a", agent_id="main", chat_type="direct")
        store = host.turns.store
        interloped: list[str] = []

        async def record_admitted(*args: Any, **kwargs: Any) -> Any:
            if not interloped:  # the other process wins the first race
                turn_id, key = kwargs["turn_id"], kwargs["advancement_key"]
                await elsewhere.record_admitted(
                    "dm:a", row.session_id, UserMessage("theirs"), turn_id=turn_id,
                    advancement_key=key,
                )  # fmt: skip
                interloped.append(turn_id)
            return await store.record_admitted(*args, **kwargs)

        host.turns.store = _Overriding(store, record_admitted=record_admitted)
        result = await host.run_turn("dm:a", UserMessage("mine"), sender_is_owner=True)
        assert result.reply.text == "mine"
        theirs, mine = await store.turns(row.session_id)
        assert theirs.turn_id == interloped[0] and theirs.first_seq == 1
        assert mine.turn_id == result.turn_id != theirs.turn_id and mine.first_seq == 2


class _Overriding:
    """A transcript store with some methods replaced; the rest are the store's."""

    def __init__(self, inner: object, **methods: Any) -> None:
        self._inner, self._methods = inner, methods

    def __getattr__(self, name: str) -> Any:
        return self._methods.get(name) or getattr(self._inner, name)


async def test_a_turn_starts_from_the_committed_rows_not_the_watchers_last_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session another process created (or reset) a moment ago is what the turn uses,
    even before the watcher saw it (here: never, it is disabled)."""

    async def deaf(self: object, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    monkeypatch.setattr(SessionStore, "watch", deaf)
    config = harness_config(tmp_path / "ws", tmp_path / "state", memory="none")
    async with (
        open_harness_host(config, plugins=(), model=ScriptedModel(["one", "two"])) as host,
        open_session_store(
            tmp_path / "state" / "sessions.sqlite3", workers=InlineWorkerPool()
        ) as elsewhere,
    ):
        created = await elsewhere.create("dm:new", agent_id="main", chat_type="direct")
        first = await host.run_turn("dm:new", UserMessage("hi"), sender_is_owner=True)
        assert first.session_id == created.session_id
        reset = await elsewhere.reset("dm:new", keep_session_id=False)
        second = await host.run_turn("dm:new", UserMessage("again"), sender_is_owner=True)
        assert second.session_id == reset.session_id != created.session_id


def test_only_the_postgres_backend_imports_psycopg() -> None:
    """The ``postgres`` extra stays optional: claw, its SQLite backend and the bundled
    plugins import without psycopg, and no module outside ``claw/state/postgres/``
    names it (the plugin SDK's ``postgres`` facade re-exports that package)."""
    root = Path(claw.__file__).resolve().parent
    naming = []
    for path in root.rglob("*.py"):
        if root / "state" / "postgres" in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            naming += [str(path) for n in names if n.split(".")[0] in ("psycopg", "psycopg_pool")]
    assert naming == []
    probe = (
        "import sys, claw, claw.state, claw.state.sqlite, claw_memory, claw_records; "
        "print(sorted(m for m in sys.modules if m.startswith('psycopg')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
