"""The ``claw demo`` main job: a sample workspace, searches, and turns end to end.

It needs no network and no model download: the turns use :class:`RecallModel`, a small
deterministic model that does one honest thing (look the question up with
``memory_search``, then answer with the best excerpt it was allowed to see). That is
enough to show the whole path a real model would take: admission, the run's
capabilities, the memory tools under the run's audience, the terminal entry, commit.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import trio

from ._capabilities import MemoryCallerContext
from ._config import AgentDefaultsConfig, AgentsConfig, HostConfig, WorkersConfig
from ._host import Host, open_host
from .gateway._memory import memory_search
from .models import AssistantMessage, Message, ToolCall, ToolResult, ToolSpec, Usage, UserMessage
from .sessions import ChatType

SAMPLE_QUERIES = (
    "When is the production deploy window?",
    "who is the release manager for apollo",
    "storage costs budget review",
)


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "at",
        "be",
        "by",
        "does",
        "do",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "the",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "you",
    ]
)


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _shared(wanted: set[str], line: str) -> int:
    """How many of ``wanted`` occur in ``line`` (a word also matches its longer forms)."""
    words = _content_words(line)
    return sum(
        1 for w in wanted if w in words or (len(w) >= 4 and any(x.startswith(w) for x in words))
    )


def matching_lines(text: str, query: str, *, limit: int = 3) -> list[tuple[int, str]]:
    """The lines of ``text`` that match ``query`` best, as ``(line index, line)``.

    At most ``limit`` lines, in text order, ranked by how many of the query's content
    words they share; when none shares any, the first non-blank line. This is what a
    search result shows, instead of the start of its chunk.
    """
    wanted = _content_words(query)
    lines = text.splitlines()
    scored = [(_shared(wanted, line), i) for i, line in enumerate(lines) if line.strip()]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:limit]
    if not best:
        best = scored[:1]
    return [(i, lines[i].strip()) for _, i in sorted(best, key=lambda s: s[1])]


def best_line(text: str, question: str) -> str:
    """The line of ``text`` that shares the most content words with ``question``."""
    wanted = _content_words(question)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    return max(lines, key=lambda line: _shared(wanted, line))


_HIT = re.compile(r"^\d+\. \[[^\]]*\] (.*?)\n\s+Source: (\S+)", re.DOTALL | re.MULTILINE)


def _useful_hit(results: str, question: str) -> tuple[str, str] | None:
    """The hit of a ``memory_search`` result worth answering from, as (excerpt, source).

    A memory file's hit first; a past conversation's only when it is not the question
    asked again, nor an earlier answer of this model (a demo run twice finds both).
    """
    hits = _HIT.findall(results)
    asked = question.strip().lower()
    useful = [
        (excerpt, source)
        for excerpt, source in hits
        if asked not in excerpt.lower() and not excerpt.lstrip().startswith("assistant:")
    ]
    notes = [hit for hit in useful if not hit[1].startswith("sessions/")]
    ranked = notes or useful
    return ranked[0] if ranked else None


@attrs.define
class RecallModel:
    """A deterministic model: search memory for the question, answer with the top excerpt.

    It calls ``memory_search`` when that tool is offered, then answers with the first
    result (and its citation) or says that nothing it may see matched. It does not
    understand language; it exists so demos and smoke tests run a real turn offline.
    """

    context_window: int = 32_768
    calls: int = 0

    async def complete(
        self, *, messages: Sequence[Message], system_prompt: str, tools: Sequence[ToolSpec]
    ) -> AssistantMessage:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        last = messages[-1] if messages else None
        usage = Usage(input_tokens=sum(len(str(m)) for m in messages) // 4, output_tokens=20)
        if isinstance(last, UserMessage) and any(t.name == "memory_search" for t in tools):
            call = ToolCall(
                id=f"recall-{self.calls}",
                name="memory_search",
                arguments={"query": last.text, "max_results": 6},
            )
            return AssistantMessage(text="", tool_calls=(call,), usage=usage)
        if isinstance(last, ToolResult):
            question = next((m.text for m in reversed(messages) if isinstance(m, UserMessage)), "")
            found = _useful_hit(last.content, question)
            if found is not None:
                excerpt, source = found
                return AssistantMessage(
                    text=f"From memory: {best_line(excerpt, question)} ({source})", usage=usage
                )
            return AssistantMessage(
                text="I found nothing in memory that I may share in this conversation.",
                usage=usage,
            )
        return AssistantMessage(text="I can only answer from memory.", usage=usage)


def sample_files() -> list[str]:
    """The workspace-relative paths of the bundled sample's files."""
    source = resources.files("claw").joinpath("_data/sample_workspace")
    with resources.as_file(source) as path:
        return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


def copy_sample_workspace(target: Path) -> Path:
    """Copy the bundled sample workspace into ``target`` (created) and return it."""
    source = resources.files("claw").joinpath("_data/sample_workspace")
    with resources.as_file(source) as path:
        shutil.copytree(path, target, dirs_exist_ok=True)
    return target


def demo_config(workspace: Path) -> HostConfig:
    """The demo host: the sample workspace, Memory Core, the recall model."""
    return HostConfig(
        workspace_dir=workspace,
        state_dir=workspace / ".claw",
        workers=WorkersConfig(max_workers=2),
        agents=AgentsConfig(defaults=AgentDefaultsConfig(model="demo/recall")),
    )


async def _operator_search(host: Host, query: str) -> dict[str, Any]:
    async with host.open_scope("demo-operator") as scope:
        caller: MemoryCallerContext = scope.mint_caller_context(
            scope.mint_operator_authority({"operator.read"})
        )
        return await memory_search(
            host.memory,
            caller,
            {"version": 2, "query": query, "maxResults": 3, "minScore": 0.0},
            lambda: None,
        )


async def _fresh_session(host: Host, key: str, chat_type: ChatType) -> str:
    """Create ``key``; or, when an earlier demo run left it, forget that run's
    conversation from the index (as ``claw memory forget --session`` does) and reset the
    session to an empty transcript, so the rerun sees what the first run saw."""
    row = await host.sessions.get(key)
    if row is None:
        await host.sessions.create(key, agent_id="main", chat_type=chat_type)
        return "created"
    if host.memory.offers("forget"):
        async with host.open_scope("demo-operator") as scope:
            caller = scope.mint_caller_context(scope.mint_operator_authority({"operator.admin"}))
            await host.memory.forget_indexed(
                caller, agent_id=row.agent_id, session_id=row.session_id
            )
    await host.sessions.reset(key, keep_session_id=False)
    return "reset"


async def run_demo(
    out: Callable[[str], None],
    workspace: Path | None = None,
    report: dict[str, Any] | None = None,
) -> int:
    """Run the demo, writing human-readable lines with ``out``; returns an exit code.

    ``report``, when given, is filled with what the demo did (its ``--json`` output).
    Run again on the same workspace, the demo resets its two sessions to fresh
    conversations instead of failing on them.
    """
    report = report if report is not None else {}
    with tempfile.TemporaryDirectory(prefix="claw-demo-") as tmp:
        root = workspace if workspace is not None else copy_sample_workspace(Path(tmp) / "ws")
        report["workspace"] = str(root) if workspace is not None else None
        out(f"claw demo: workspace {root}")
        async with open_host(demo_config(root)) as host:
            if host.slots.memory_plugin is None:
                out("no memory plugin is installed (expected memory-core); reinstall trio-claw")
                report["error"] = "no memory plugin is installed (expected memory-core)"
                return 1
            host.models.register_provider("demo", lambda name: RecallModel())
            slots = host.slots
            report["slots"] = {"memory": slots.memory_plugin, "contextEngine": slots.context_engine}
            out(f"memory slot: {slots.memory_plugin}; context engine: {slots.context_engine}")
            out("")
            out("== searches (operator, memory.search v2) ==")
            report["searches"] = []
            for query in SAMPLE_QUERIES:
                payload = await _operator_search(host, query)
                report["searches"].append({"query": query, "hits": payload["hits"]})
                out(f"? {query}")
                for hit in payload["hits"]:
                    c = hit["citation"]
                    line = best_line(hit["excerpt"], query)
                    where = f"{c['path']}#L{c['startLine']}-L{c['endLine']}"
                    out(f"  {hit['score']:.3f}  {where}  {line[:90]}")
            out("")
            out("== turns ==")
            sessions = {
                "dm:alice": await _fresh_session(host, "dm:alice", "direct"),
                "grp:team": await _fresh_session(host, "grp:team", "group"),
            }
            for key, what in sessions.items():
                if what == "reset":
                    out(
                        f"({key} was left by an earlier demo run: its conversation is "
                        "forgotten from the index and the session reset)"
                    )
            question = "What tea does Alice prefer?"
            owner = await host.run_turn(
                "dm:alice", UserMessage(question, sender="alice"), sender_is_owner=True
            )
            out(f"[dm:alice, owner] {question}")
            out(f"  -> {owner.reply.text}")
            group = await host.run_turn(
                "grp:team", UserMessage(question, sender="mallory"), sender_is_owner=False
            )
            out(f"[grp:team, group chat] {question}")
            out(f"  -> {group.reply.text}")
            out("")
            kinds = sorted(set(host.events.kinds()))
            out(f"turns committed: {owner.commit}/{group.commit}; events: {', '.join(kinds)}")
            report["turns"] = [
                {
                    "session": result.session_key,
                    "sessionWas": sessions[result.session_key],
                    "question": question,
                    "reply": result.reply.text,
                    "commit": result.commit,
                }
                for result in (owner, group)
            ]
            report["events"] = kinds
    return 0
