"""``claw sessions ...``: list, show, reset and delete sessions as the local operator.

Each command opens a host on the workspace and calls the session store exactly as an
application embedding claw would (``host.sessions.list/get/reset/delete``), so a reset
or delete here has the API's effects everywhere: it is one transaction, and every
process sharing the state revokes the audiences and recall passes bound to the old
incarnation before it releases anything more under them.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any, TextIO

from .._host import Host
from ..sessions import SessionRow
from ._common import (
    EXIT_OK,
    AddCommand,
    NotFoundError,
    agent_flag,
    emit_json,
    load_config,
    with_operator,
)


def add_parsers(sub: Any, command: AddCommand) -> None:
    """``claw sessions`` and its subcommands."""
    sessions = command(sub, "sessions", "list, show, reset and delete sessions")
    ssub = sessions.add_subparsers(dest="sessions_command", required=True, metavar="COMMAND")
    listing = command(ssub, "list", "list the sessions (key, agent, chat type, revision)")
    agent_flag(listing)
    show = command(ssub, "show", "one session: its row and its transcript's size")
    show.add_argument("key", help="the session key, as list prints it")
    reset = command(
        ssub,
        "reset",
        "start a new incarnation of a session",
        "Start a new incarnation of a session: what its old incarnation was granted is "
        "revoked in every process. The transcript is kept unless --new-session-id.",
    )
    reset.add_argument("key", help="the session key")
    reset.add_argument(
        "--new-session-id",
        action="store_true",
        help="give it a new session id: the next turn starts from an empty transcript",
    )
    delete = command(ssub, "delete", "delete a session (its transcript stays on disk)")
    delete.add_argument("key", help="the session key")


def _time(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).isoformat(timespec="seconds")


def wire_row(row: SessionRow) -> dict[str, Any]:
    """A session row as JSON (the gateway's camelCase)."""
    payload: dict[str, Any] = {
        "key": row.session_key,
        "agentId": row.agent_id,
        "sessionId": row.session_id,
        "lifecycleRevision": row.lifecycle_revision,
        "chatType": row.chat_type,
        "peerIsOwner": row.peer_is_owner,
        "createdAt": _time(row.created_at),
        "updatedAt": _time(row.updated_at),
    }
    if row.parent_key is not None:
        payload["parent"] = {
            "key": row.parent_key,
            "sessionId": row.parent_session_id,
            "lifecycleRevision": row.parent_revision,
        }
    return payload


async def _row(host: Host, key: str) -> SessionRow:
    row = await host.sessions.get(key)
    if row is None:
        raise NotFoundError(f"no session {key!r} (claw sessions list shows the sessions)")
    return row


async def _list(args: argparse.Namespace, host: Host, out: TextIO) -> int:
    rows = await host.sessions.list(args.agent)
    if args.json:
        emit_json(out, {"sessions": [wire_row(r) for r in rows]})
        return EXIT_OK
    if not rows:
        out.write("no sessions\n")
        return EXIT_OK
    table = [("KEY", "AGENT", "CHAT", "REV", "SESSION ID", "UPDATED")]
    table += [
        (
            r.session_key,
            r.agent_id,
            r.chat_type or "-",
            str(r.lifecycle_revision),
            r.session_id,
            _time(r.updated_at),
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
        out.write("\n")
    return EXIT_OK


async def _show(args: argparse.Namespace, host: Host, out: TextIO) -> int:
    row = await _row(host, args.key)
    stats = await host.transcripts.stats(row.session_id)
    transcript = {
        "entries": stats.entry_count,
        "bytes": stats.byte_size,
        "compactions": stats.compaction_count,
        "openTurns": len(stats.open_turn_seqs),
    }
    if args.json:
        emit_json(out, {"session": wire_row(row), "transcript": transcript})
        return EXIT_OK
    for name, value in wire_row(row).items():
        out.write(f"{name}: {value}\n")
    out.write(
        f"transcript: {stats.entry_count} entries, {stats.byte_size} bytes, "
        f"{stats.compaction_count} compactions, {len(stats.open_turn_seqs)} turns open\n"
    )
    return EXIT_OK


async def _reset(args: argparse.Namespace, host: Host, out: TextIO) -> int:
    before = await _row(host, args.key)
    after = await host.sessions.reset(args.key, keep_session_id=not args.new_session_id)
    if args.json:
        emit_json(
            out,
            {
                "session": wire_row(after),
                "previous": {
                    "sessionId": before.session_id,
                    "lifecycleRevision": before.lifecycle_revision,
                },
            },
        )
        return EXIT_OK
    kept = (
        "the same session id: its transcript continues"
        if after.session_id == before.session_id
        else f"a new session id {after.session_id}: the next turn starts from an empty transcript"
    )
    out.write(
        f"reset {args.key}: revision {before.lifecycle_revision} -> "
        f"{after.lifecycle_revision}, {kept}\n"
    )
    return EXIT_OK


async def _delete(args: argparse.Namespace, host: Host, out: TextIO) -> int:
    row = await _row(host, args.key)
    await host.sessions.delete(args.key)
    if args.json:
        emit_json(out, {"deleted": wire_row(row)})
    else:
        out.write(f"deleted {args.key} (revision {row.lifecycle_revision})\n")
    return EXIT_OK


_RUN = {"list": _list, "show": _show, "reset": _reset, "delete": _delete}


async def run(args: argparse.Namespace, out: TextIO, err: TextIO, warnings: list[str]) -> int:
    """Run ``claw sessions <command>`` in a host on the workspace, as its local operator."""
    config = load_config(args)

    async def in_host(host: Host, caller: object) -> int:
        return await _RUN[args.sessions_command](args, host, out)

    result: int = await with_operator(config, in_host)
    return result
