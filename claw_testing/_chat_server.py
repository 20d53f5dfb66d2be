"""A real OpenAI-compatible chat-completions server on loopback, for tests and examples.

:class:`StubChatServer` is an HTTP server (the standard library's, in a thread of its
own) that answers ``POST /v1/chat/completions`` with whatever its responder returns and
``GET /v1/models`` with one model, as Ollama, vLLM and llama.cpp's server do. claw's
client talks to it over TCP exactly as it talks to those servers, so a guide or an
example run against it exercises the whole path: configuration, HTTP, retries, error
mapping, tool calls.

:func:`remembering_responder` is a rule-following stand-in for a model that does what
claw's prompts ask: it searches memory before answering a question and answers with the
best excerpt and its ``Source:`` citation (a memory note before a past transcript), notes
statements, and in a pre-compaction flush reads the file the flush names, appends the
user's statements it does not hold yet, then replies ``NO_REPLY``. It does not understand
language; it makes an end-to-end run
deterministic.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

Responder = Callable[[Mapping[str, Any]], "StubReply | Mapping[str, Any]"]
"""Maps a request body (parsed JSON) to a reply: a chat-completions body or a raw reply."""

MAX_REQUEST_BYTES = 16 * 1024 * 1024


@attrs.frozen
class StubReply:
    """A raw HTTP reply, for answering with an error or with garbage."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"


@attrs.frozen
class StubRequest:
    """A request the server received: its path, headers and parsed JSON body."""

    path: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]


def chat_completion(
    text: str = "", *, tool_calls: Sequence[tuple[str, Mapping[str, Any]]] = (), model: str = "stub"
) -> dict[str, Any]:
    """A chat-completions response body with ``text`` and ``(name, arguments)`` tool calls."""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(arguments))},
            }
            for i, (name, arguments) in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            body = {"object": "list", "data": [{"id": "stub", "object": "model"}]}
            self._send(200, json.dumps(body).encode())
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self._send(413, b'{"error": "request too large"}')
            return
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, b'{"error": "not found"}')
            return
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            self._send(400, b'{"error": "body is not JSON"}')
            return
        owner = self.server.owner
        owner.requests.append(StubRequest(self.path, dict(self.headers.items()), body))
        reply = owner.responder(body)
        if isinstance(reply, StubReply):
            self._send(reply.status, reply.body, reply.content_type)
        else:
            self._send(200, json.dumps(reply).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: StubChatServer


class StubChatServer:
    """An OpenAI-compatible HTTP server on ``127.0.0.1`` (a free port), in a thread.

    ``with StubChatServer(responder) as server:`` serves until the block ends;
    :attr:`base_url` is the API root to put in ``[models.providers.<name>] base_url``;
    :attr:`requests` lists what it received.
    """

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[StubRequest] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="claw-stub-chat-server", daemon=True
        )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> StubChatServer:
        """Start serving (in a daemon thread) and return the server."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> StubChatServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# -- the rule-following model -----------------------------------------------------------

_FLUSH = re.compile(r"memory flush: store durable memories in (\S+?) now", re.IGNORECASE)
_HIT = re.compile(r"^\d+\. \[[^\]]*\] (.*?)\n\s+Source: (\S+)", re.DOTALL | re.MULTILINE)
_WORD = re.compile(r"[a-z0-9]+")


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
    return ""


def _best_line(text: str, question: str) -> str:
    wanted = set(_WORD.findall(question.lower()))
    lines = [line.strip(" -*\t") for line in text.splitlines() if line.strip(" -*\t")]
    if not lines:
        return ""
    return max(lines, key=lambda line: len(wanted & set(_WORD.findall(line.lower()))))


def _last_tool_call(messages: Sequence[Mapping[str, Any]]) -> str | None:
    for message in reversed(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if calls:
            return str(calls[-1].get("function", {}).get("name"))
    return None


def _flush_step(
    messages: Sequence[Mapping[str, Any]],
    users: Sequence[str],
    tools: set[str],
    path: str,
    model: str,
) -> dict[str, Any]:
    """Read the target first, append the statements it lacks, then ``NO_REPLY``."""
    last = messages[-1]
    if last.get("role") != "tool" and "read" in tools:
        return chat_completion(tool_calls=[("read", {"path": path})], model=model)
    if last.get("role") == "tool" and _last_tool_call(messages) != "read":
        return chat_completion("NO_REPLY", model=model)  # written (or refused): done
    held = _text(last) if last.get("role") == "tool" else ""
    notes = [
        u.strip()
        for u in users
        if u.strip() and not u.rstrip().endswith("?") and not _FLUSH.search(u)
    ]
    new = [note for note in dict.fromkeys(notes) if note not in held]
    if not new or "write" not in tools:
        return chat_completion("NO_REPLY", model=model)
    content = "".join(f"- {note}\n" for note in new)
    return chat_completion(tool_calls=[("write", {"path": path, "content": content})], model=model)


def remembering_responder(body: Mapping[str, Any]) -> dict[str, Any]:
    """Answer as a careful assistant following claw's prompts would (module docstring)."""
    messages = [m for m in body.get("messages", []) if isinstance(m, Mapping)]
    tools = {
        t["function"]["name"]
        for t in body.get("tools", [])
        if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
    }
    model = str(body.get("model", "stub"))
    last = messages[-1] if messages else {}
    users = [_text(m) for m in messages if m.get("role") == "user"]
    flush = next((_FLUSH.search(u) for u in reversed(users) if _FLUSH.search(u)), None)
    if flush is not None:  # a pre-compaction memory flush
        return _flush_step(messages, users, tools, flush.group(1), model)
    if last.get("role") == "tool":
        question = users[-1] if users else ""
        hits = _HIT.findall(_text(last))
        if not hits:
            return chat_completion("I have nothing in memory about that yet.", model=model)
        # An excerpt that only repeats the question answers nothing; notes someone chose
        # to keep beat raw transcripts of past conversations.
        useful = [h for h in hits if question.strip().lower() not in h[0].lower()] or hits
        excerpt, source = next((h for h in useful if not h[1].startswith("sessions/")), useful[0])
        line = _best_line(excerpt, question)
        return chat_completion(f"{line} (Source: {source})", model=model)
    text = _text(last)
    if text.rstrip().endswith("?") and "memory_search" in tools:
        return chat_completion(tool_calls=[("memory_search", {"query": text})], model=model)
    return chat_completion("Noted.", model=model)
