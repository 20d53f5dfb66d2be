"""Memory Core as the selected memory plugin, through the host's runtime and tools."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import claw
import claw_memory
from claw.memory import MemoryGetRequest, MemoryReference, MemorySearchRequest
from claw.models import ToolResult, UserMessage
from claw_testing import ScriptedModel, ScriptedReply

MEMORY = """# Memory

## Preferences
- Alice prefers green tea over coffee.
- The deploy window is Friday afternoon.

## People
- Bob is the release manager for project apollo.
"""


def _config(tmp_path: Path, **plugin_config: Any) -> claw.HostConfig:
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "MEMORY.md").write_text(MEMORY, encoding="utf-8")
    (workspace / "memory" / "2026-11-30.md").write_text(
        "# 2026-11-30\n- Met Carol about the quarterly budget review.\n", encoding="utf-8"
    )
    entries = {"memory-core": claw.PluginEntryConfig(config=plugin_config)} if plugin_config else {}
    return claw.HostConfig(
        workspace_dir=workspace,
        state_dir=tmp_path / "state",
        plugins=claw.PluginsConfig(discover=False, entries=entries),
        workers=claw.WorkersConfig(inline=True),
        agents=claw.AgentsConfig(defaults=claw.AgentDefaultsConfig(model="scripted/main")),
    )


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[claw.Host]:
    async with claw.open_host(_config(tmp_path), plugins=[claw_memory.plugin]) as h:
        await h.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        await h.sessions.create("grp:1", agent_id="main", chat_type="group")
        yield h


async def _operator_search(host: claw.Host, query: str, **kw: Any) -> Any:
    async with host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        async with host.memory.open(ctx) as handle:
            return await handle.search(MemorySearchRequest(query=query, **kw))


async def test_memory_core_is_selected_by_default_and_native(host: claw.Host) -> None:
    assert host.slots.memory_plugin == "memory-core"
    assert host.memory.uses_provider_runtime()
    assert "claw-hash" in host.plugin_registry.embedding_providers
    assert {t.name for t in host.plugin_registry.tools_of("memory-core")} == {
        "memory_search",
        "memory_get",
        "memory_add",
    }


async def test_operator_search_returns_cited_memory_hits(host: claw.Host) -> None:
    result = await _operator_search(host, "green tea", min_score=0.0)
    assert result.hits
    top = result.hits[0]
    assert top.reference.provider_id == "memory-core"
    assert top.reference.id == "MEMORY.md"
    assert top.citation is not None
    assert top.citation.path == "MEMORY.md"
    assert "green tea" in top.excerpt


async def test_owner_run_sees_memory_files_and_group_run_does_not(host: claw.Host) -> None:
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        async with host.memory.open(run.caller) as handle:
            owner = await handle.search(MemorySearchRequest(query="green tea", min_score=0.0))
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        async with host.memory.open(run.caller) as handle:
            group = await handle.search(MemorySearchRequest(query="green tea", min_score=0.0))
    assert owner.hits
    assert not [h for h in group.hits if h.source == "memory"]
    assert group.warning is not None and "owner-private" in group.warning


async def test_get_resolves_a_fragment_and_refuses_a_stale_revision(host: claw.Host) -> None:
    result = await _operator_search(host, "release manager", min_score=0.0)
    ref = result.hits[0].reference
    async with host.open_scope("op") as scope:
        ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
        async with host.memory.open(ctx) as handle:
            got = await handle.get(MemoryGetRequest(reference=ref))
            assert got.status == "ok"
            assert got.text is not None and "release manager" in got.text
            stale = await handle.get(
                MemoryGetRequest(reference=attrs.evolve(ref, revision="0" * 64))
            )
            assert stale.status == "not_found"
            missing = await handle.get(
                MemoryGetRequest(reference=MemoryReference(provider_id="memory-core", id="NOPE.md"))
            )
            assert missing.status == "not_found"


async def test_a_transcript_hit_reads_back_by_its_reference_as_later_turns_come(
    host: claw.Host,
) -> None:
    """A transcript hit's revision is the hash of the turns it cites, as a memory-file
    hit's is of its lines: a transcript only grows, so the reference reads the cited
    turn after later turns too (it answered not_found for every transcript hit
    before, its revision and the transcript's spelled differently). A revision that
    names other lines, or the whole transcript as it no longer is, is not_found."""
    long_turn = "the zeppelin launch moved to Tuesday. " + "padding words here " * 150
    model = ScriptedModel(["noted", "ok", "fine"])
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn(
        "dm:alice", UserMessage(long_turn + " and the hangar gate code is walrus"),
        sender_is_owner=True,
    )

    async def transcript_ref(query: str) -> MemoryReference:
        found = await _operator_search(host, query, min_score=0.0)
        if found.coverage is not None and not found.coverage.complete:
            # It noticed the new turn and answered from the index as it stood; the
            # background sync indexes the turn.
            await trio.testing.wait_all_tasks_blocked()
            found = await _operator_search(host, query, min_score=0.0)
        return next(h.reference for h in found.hits if h.source == "sessions")

    async def get(ref: MemoryReference) -> Any:
        async with host.open_scope("op") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(ctx) as handle:
                return await handle.get(MemoryGetRequest(reference=ref))

    first = await transcript_ref("zeppelin launch Tuesday")
    # The turn is longer than a chunk: this hit cites a piece of it.
    piece = await transcript_ref("hangar gate code walrus")
    assert first.fragment == piece.fragment and first.revision != piece.revision
    for ref in (first, piece):
        got = await get(ref)
        assert got.status == "ok", ref
        assert got.text is not None and "hangar gate code is walrus" in got.text
        assert got.reference == ref
    whole = (await get(attrs.evolve(first, revision=None))).reference.revision
    assert whole is not None and (await get(attrs.evolve(first, revision=whole))).status == "ok"
    await host.run_turn("dm:alice", UserMessage("thanks"), sender_is_owner=True)
    for ref in (first, piece):
        assert (await get(ref)).status == "ok"  # the cited turn is as it was
    assert (await get(attrs.evolve(first, revision=whole))).status == "not_found"
    assert (await get(attrs.evolve(first, revision="0" * 64))).status == "not_found"
    assert await transcript_ref("zeppelin launch Tuesday") == first


async def test_group_run_is_denied_reading_memory_files(host: claw.Host) -> None:
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        async with host.memory.open(run.caller) as handle:
            with pytest.raises(claw.CapabilityDeniedError, match="owner-private"):
                await handle.get(
                    MemoryGetRequest(
                        reference=MemoryReference(provider_id="memory-core", id="MEMORY.md")
                    )
                )


async def test_health_for_status_authority_has_no_paths(host: claw.Host) -> None:
    async with host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        async with host.memory.open(ctx) as handle:
            health = await handle.health()
    assert health.status == "ready"
    assert health.details["chunks"] >= 2
    assert "/" not in repr(health.details)


async def test_host_authority_search_sees_no_memory_files(host: claw.Host) -> None:
    async with host.open_scope("status") as scope:
        ctx = scope.mint_caller_context(scope.mint_host_authority("status"))
        async with host.memory.open(ctx) as handle:
            result = await handle.search(MemorySearchRequest(query="green tea", min_score=0.0))
    assert result.hits == ()


async def test_transcripts_are_indexed_and_authorized_per_conversation(host: claw.Host) -> None:
    model = ScriptedModel(["noted, the launch is on Tuesday", "ok"])
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn(
        "grp:1",
        UserMessage("the zeppelin launch moved to Tuesday", sender="bob"),
        sender_is_owner=False,
    )
    await host.run_turn("dm:alice", UserMessage("hello"), sender_is_owner=True)
    async with host.open_run("grp:1", sender_is_owner=False) as run:
        async with host.memory.open(run.caller) as handle:
            own = await handle.search(MemorySearchRequest(query="zeppelin launch", min_score=0.0))
    assert [h.source for h in own.hits][:1] == ["sessions"]
    assert own.hits[0].metadata["session_key"] == "grp:1"
    await host.sessions.create("grp:2", agent_id="main", chat_type="group")
    async with host.open_run("grp:2", sender_is_owner=False) as run:
        async with host.memory.open(run.caller) as handle:
            other = await handle.search(MemorySearchRequest(query="zeppelin launch", min_score=0.0))
    assert other.hits == ()
    operator = await _operator_search(host, "zeppelin launch", min_score=0.0)
    assert any(h.source == "sessions" for h in operator.hits)


async def test_pagination_and_project_filter(host: claw.Host) -> None:
    workspace = host.config.workspace_dir
    (workspace / "memory" / "projects" / "apollo").mkdir(parents=True)
    (workspace / "memory" / "projects" / "zeus").mkdir(parents=True)
    (workspace / "memory" / "projects" / "apollo" / "notes.md").write_text(
        "launch checklist apollo\n"
    )
    (workspace / "memory" / "projects" / "zeus" / "notes.md").write_text("launch checklist zeus\n")
    both = await _operator_search(host, "launch checklist", min_score=0.0)
    assert {h.reference.id for h in both.hits} >= {
        "memory/projects/apollo/notes.md",
        "memory/projects/zeus/notes.md",
    }
    only = await _operator_search(
        host, "launch checklist", min_score=0.0, active_project_keys=("apollo",)
    )
    assert "memory/projects/zeus/notes.md" not in {h.reference.id for h in only.hits}
    first = await _operator_search(host, "launch checklist", min_score=0.0, max_results=1)
    assert first.next_cursor is not None
    second = await _operator_search(
        host, "launch checklist", min_score=0.0, max_results=1, cursor=first.next_cursor
    )
    assert second.hits[0].reference.id != first.hits[0].reference.id


async def test_memory_search_tool_runs_with_the_runs_audience(host: claw.Host) -> None:
    model = ScriptedModel(
        [
            ScriptedReply(tool_calls=[("memory_search", {"query": "green tea"})]),
            "Alice likes green tea.",
            ScriptedReply(tool_calls=[("memory_search", {"query": "green tea"})]),
            "I cannot see that here.",
        ]
    )
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn("dm:alice", UserMessage("what tea?"), sender_is_owner=True)
    owner_result = next(m for m in model.calls[1].messages if isinstance(m, ToolResult))
    assert "Source: MEMORY.md#L" in owner_result.content
    await host.run_turn("grp:1", UserMessage("what tea?"), sender_is_owner=False)
    group_result = next(m for m in model.calls[3].messages if isinstance(m, ToolResult))
    assert "MEMORY.md" not in group_result.content
    assert "## Memory" in model.calls[0].system_prompt


async def test_public_artifacts_list_memory_files(host: claw.Host) -> None:
    _, capability = host.memory.selection()
    assert capability is not None and capability.public_artifacts is not None
    artifacts = await capability.public_artifacts.list_artifacts(agent_id="main")
    assert [a.path for a in artifacts] == ["MEMORY.md", "memory/2026-11-30.md"]


async def test_unknown_config_key_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(
        claw.ConfigError, match=r"plugins\.entries\.memory-core\.config\.chunk_tokenz"
    ):
        async with claw.open_host(_config(tmp_path, chunk_tokenz=3), plugins=[claw_memory.plugin]):
            pass  # pragma: no cover


async def test_an_invalid_setting_names_its_key_path_without_a_stray_segment(
    tmp_path: Path,
) -> None:
    with pytest.raises(claw.ConfigError) as caught:
        async with claw.open_host(_config(tmp_path, chunk_tokens=-1), plugins=[claw_memory.plugin]):
            pass  # pragma: no cover
    assert caught.value.key_path == "plugins.entries.memory-core.config.chunk_tokens"
    assert "memory_core." not in str(caught.value)


async def test_lexical_only_when_embedder_is_none(tmp_path: Path) -> None:
    async with claw.open_host(
        _config(tmp_path, embedder="none"), plugins=[claw_memory.plugin]
    ) as host:
        result = await _operator_search(host, "green tea", min_score=0.0)
        assert result.hits
        assert result.hits[0].metadata["vector_score"] is None


async def test_watcher_keeps_the_index_in_sync_for_long_running_hosts(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = _config(tmp_path, watch=True, watch_interval=1.0, sync_on_search=False)
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as host:
        before = await _operator_search(host, "hovercraft eels", min_score=0.0)
        assert "memory/2026-12-01.md" not in {h.reference.id for h in before.hits}
        (config.workspace_dir / "memory" / "2026-12-01.md").write_text(
            "- My hovercraft is full of eels.\n", encoding="utf-8"
        )
        await trio.sleep(10)
        after = await _operator_search(host, "hovercraft eels", min_score=0.0)
        assert [h.reference.id for h in after.hits][:1] == ["memory/2026-12-01.md"]


async def test_bad_watch_interval_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(claw.ConfigError, match="watch_interval"):
        async with claw.open_host(
            _config(tmp_path, watch=True, watch_interval=0), plugins=[claw_memory.plugin]
        ):
            pass  # pragma: no cover


async def test_memory_core_flush_appends_to_todays_note_and_the_note_is_searchable(
    tmp_path: Path,
) -> None:
    import time as _time

    from claw_memory._runtime import daily_note_path

    config = _config(tmp_path)
    defaults = attrs.evolve(config.agents.defaults, context_window=8000)
    config = attrs.evolve(config, agents=claw.AgentsConfig(defaults=defaults))
    model = ScriptedModel(
        [
            ScriptedReply(
                tool_calls=[
                    (
                        "write",
                        {
                            "path": daily_note_path(_time.time()),
                            "content": "- Alice's locker code is 7741.",
                        },
                    )
                ]
            ),
            "NO_REPLY",
            "ok",
        ],
        context_window=8000,
    )
    async with claw.open_host(config, plugins=[claw_memory.plugin]) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        result = await host.run_turn(
            "dm:alice", UserMessage("x" * 4 * 4000, sender="alice"), sender_is_owner=True
        )
        assert result.flush is not None
        assert result.flush.status == "completed"
        note = host.config.workspace_dir / daily_note_path(_time.time())
        assert "locker code is 7741" in note.read_text(encoding="utf-8")
        found = await _operator_search(host, "locker code", min_score=0.0)
        assert found.hits[0].reference.id == daily_note_path(_time.time())


async def test_any_registered_embedding_provider_can_be_chosen(tmp_path: Path) -> None:
    @attrs.frozen
    class Constant:
        id: str = "third-party-embedder"
        model: str = "constant-v1"
        dims: int = 8
        max_input_bytes: int = 4096

        async def embed(self, texts: Any) -> Any:
            import numpy as np

            return np.ones((len(texts), self.dims), dtype=np.float32)

    third = claw.Plugin(
        id="third",
        register=lambda api: api.register_embedding_provider(Constant()),
        contracts=claw.PluginContracts(embedding_providers=("third-party-embedder",)),
    )
    async with claw.open_host(
        _config(tmp_path, embedder="third-party-embedder"), plugins=[claw_memory.plugin, third]
    ) as host:
        async with host.open_scope("status") as scope:
            ctx = scope.mint_caller_context(scope.mint_operator_authority({"operator.read"}))
            async with host.memory.open(ctx) as handle:
                health = await handle.health()
    assert health.details["embedder"] == "third-party-embedder"
    assert health.details["dims"] == 8


async def test_an_unregistered_embedder_is_a_config_error_naming_it(tmp_path: Path) -> None:
    async with claw.open_host(
        _config(tmp_path, embedder="nobody"), plugins=[claw_memory.plugin]
    ) as host:
        with pytest.raises(claw.ConfigError, match="'nobody' is not registered"):
            await _operator_search(host, "tea")


async def test_a_search_noticing_a_change_says_it_answered_from_the_current_index(
    host: claw.Host, tmp_path: Path
) -> None:
    """Through the provider handle: the noticing search is incomplete and says why; once
    the background sync has published, a search sees the change and is complete."""
    first = await _operator_search(host, "zeppelin", min_score=0.0)
    assert first.coverage is not None and first.coverage.complete
    path = tmp_path / "ws" / "memory" / "airships.md"
    path.write_text("- The zeppelin hangar is in Friedrichshafen.\n", encoding="utf-8")
    noticing = await _operator_search(host, "zeppelin hangar", min_score=0.0)
    assert noticing.coverage is not None and not noticing.coverage.complete
    assert noticing.warning is not None and "background" in noticing.warning
    assert not [h for h in noticing.hits if "zeppelin" in h.excerpt]
    await trio.testing.wait_all_tasks_blocked()  # the inline workers finish the sync
    after = await _operator_search(host, "zeppelin hangar", min_score=0.0)
    assert after.coverage is not None and after.coverage.complete
    assert after.warning is None
    assert "zeppelin" in after.hits[0].excerpt


async def test_a_memory_fact_outranks_transcript_lines_that_only_repeat_the_question(
    host: claw.Host,
) -> None:
    """Facts before echoes: after a user asked twice who the release manager is, the
    fact in MEMORY.md answers that question first, not the user's own questions."""
    model = ScriptedModel(["Let me look into that.", "Still checking, one moment."])
    host.models.register_provider("scripted", lambda name: model)
    for _ in range(2):
        await host.run_turn(
            "dm:alice", UserMessage("Who is the release manager?"), sender_is_owner=True
        )
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        async with host.memory.open(run.caller) as handle:
            result = await handle.search(
                MemorySearchRequest(query="Who is the release manager?", min_score=0.0)
            )
    sources = [h.source for h in result.hits]
    assert "sessions" in sources  # the questions are found ...
    top = result.hits[0]
    # ... but the fact comes first.
    assert (top.source, top.reference.id) == ("memory", "MEMORY.md")
    assert "release manager" in top.excerpt


async def test_a_search_on_an_unchanged_host_lists_no_session(
    host: claw.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's transcript reader keeps a listing version: while no transcript or
    session changed, a search lists (and compares) no session; a new turn moves the
    version, and the next search lists, syncs and finds it."""
    from claw._transcript_reader import TranscriptReader

    listed: list[str | None] = []
    listing = TranscriptReader.list_sessions

    async def counted(self: TranscriptReader, *, agent_id: str | None = None) -> Any:
        listed.append(agent_id)
        return await listing(self, agent_id=agent_id)

    monkeypatch.setattr(TranscriptReader, "list_sessions", counted)
    model = ScriptedModel(["noted, the launch is on Tuesday", "noted, the hangar is big"])
    host.models.register_provider("scripted", lambda name: model)
    await host.run_turn(
        "dm:alice", UserMessage("the zeppelin launch moved to Tuesday"), sender_is_owner=True
    )
    await _operator_search(host, "zeppelin launch", min_score=0.0)
    await trio.testing.wait_all_tasks_blocked()  # the background sync publishes
    listed_once = await _operator_search(host, "zeppelin launch", min_score=0.0)
    assert any(h.source == "sessions" for h in listed_once.hits)
    listed.clear()
    for _ in range(3):
        again = await _operator_search(host, "zeppelin launch", min_score=0.0)
        assert again.coverage is not None and again.coverage.complete
        assert again.hits == listed_once.hits
    assert listed == []
    await host.run_turn(
        "dm:alice", UserMessage("the zeppelin hangar is in Friedrichshafen"), sender_is_owner=True
    )
    await _operator_search(host, "zeppelin hangar", min_score=0.0)
    assert listed == ["main"]
    await trio.testing.wait_all_tasks_blocked()
    after = await _operator_search(host, "Friedrichshafen hangar", min_score=0.0)
    assert any("Friedrichshafen" in h.excerpt for h in after.hits if h.source == "sessions")


async def test_a_relative_date_in_a_search_counts_from_the_hosts_clock(tmp_path: Path) -> None:
    """A host on a clock of its own (a harness's, here May 2023) stamps its transcripts
    with it; "10 days ago" in a search counts back from that clock too, not from the
    machine's time, so it finds what was said ten days before on the host's clock."""
    day = 86_400.0
    asked = 1_685_023_200.0  # 2023-05-25 14:00 UTC
    now = [asked - 30 * day]
    model = ScriptedModel(["Noted.", "Noted."])
    async with claw.open_host(
        _config(tmp_path), plugins=[claw_memory.plugin], clock=lambda: now[0]
    ) as host:
        host.models.register_provider("scripted", lambda name: model)
        await host.sessions.create("dm:alice", agent_id="main", chat_type="direct")
        # The older purchase is said in more of the question's words.
        for text, when in (
            ("I got a kitchen appliance, a blender", asked - 30 * day),
            ("I got a kitchen appliance today, an air fryer", asked - 10 * day),
        ):
            now[0] = when
            await host.run_turn("dm:alice", UserMessage(text), sender_is_owner=True)
        now[0] = asked
        result = await _operator_search(
            host, "What kitchen appliance did I buy 10 days ago?", min_score=0.0
        )
    turns = [h for h in result.hits if h.source == "sessions"]
    assert turns and "air fryer" in turns[0].excerpt


async def test_memory_core_search_checks_its_caller_before_ranking_and_after_it(
    host: claw.Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's own checks, without the host's guard around it: a caller reset
    while the search ranked gets no hits, and a stale caller ranks nothing."""
    from claw_memory._index import MemoryIndex

    runtime = host.memory.slots.memory_capabilities["memory-core"].provider_runtime
    ranked: list[str] = []
    real_rank_page = MemoryIndex.rank_page
    reset_while_ranking: list[str] = []

    async def rank_page(self: MemoryIndex, query: str, **kw: Any) -> Any:
        ranked.append(query)
        page = await real_rank_page(self, query, **kw)
        for key in reset_while_ranking:
            await host.sessions.reset(key)
        return page

    monkeypatch.setattr(MemoryIndex, "rank_page", rank_page)
    request = MemorySearchRequest(query="green tea", min_score=0.0)
    async with host.open_run("dm:alice", sender_is_owner=True) as run:
        handle = (await runtime.open(agent_id="main", context=run.caller)).provider
        assert (await handle.search(request)).hits
        reset_while_ranking.append("dm:alice")
        with pytest.raises(claw.StaleCapabilityError):
            await handle.search(request)
        assert ranked == ["green tea", "green tea"]
        with pytest.raises(claw.StaleCapabilityError):
            await handle.search(request)
        assert ranked == ["green tea", "green tea"]
