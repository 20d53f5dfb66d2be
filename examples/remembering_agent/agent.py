"""An agent that remembers: a real model, sessions, turns, the flush, recall with citations.

The walk-through is docs/models.md. Put a ``claw.toml`` naming your model in an empty
directory, then run::

    python examples/remembering_agent/agent.py --workspace my-agent

It tells the agent a few things in one conversation (session ``dm:me``), until the
pre-compaction memory flush saves them to ``memory/<today>.md``; resets the session, so
the conversation itself is gone; and asks again in the fresh conversation, where the
answer can only come from memory: the agent searches it and cites the file and lines.
Run it again and it carries on in the same workspace. Errors (no server at base_url, a
reply that is not a chat completion, a missing API key) are printed as one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import trio

import claw
from claw.models import UserMessage

SESSION = "dm:me"
TELL = (
    "Hi, I'm Sam. Please remember that my favourite tea is genmaicha.",
    "Our team deploys on Thursdays, never on Fridays.",
    "The staging database lives in the Frankfurt region.",
    "My manager is Priya; she prefers written status updates.",
)
ASK = "Which tea do I like?"


async def run(workspace: Path) -> None:
    config = claw.load_workspace_config(workspace)  # reads <workspace>/claw.toml
    print(f"model: {config.agents.defaults.model}")
    async with claw.open_host(config) as host:
        if await host.sessions.get(SESSION) is None:
            await host.sessions.create(SESSION, agent_id="main", chat_type="direct")
        for text in TELL:
            result = await host.run_turn(SESSION, UserMessage(text), sender_is_owner=True)
            print(f"you:   {text}\nagent: {result.reply.text}")
            if result.flush is not None:
                why = f" ({result.flush.reason})" if result.flush.reason else ""
                print(f"[memory flush {result.flush.status}{why}]")
        for note in sorted((config.workspace_dir / "memory").glob("*.md")):
            print(f"[{note.relative_to(config.workspace_dir)}]\n{note.read_text().rstrip()}")
        # A new session id: the next turn starts from an empty transcript.
        await host.sessions.reset(SESSION, keep_session_id=False)
        print(f"[{SESSION} reset: a new conversation; only memory carries over]")
        result = await host.run_turn(SESSION, UserMessage(ASK), sender_is_owner=True)
        print(f"you:   {ASK}\nagent: {result.reply.text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    try:
        trio.run(run, args.workspace)
    except claw.ClawError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
