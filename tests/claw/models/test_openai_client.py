"""The chat-completions client against a fake HTTP/1.1 server on 127.0.0.1, port 0.

The server is written here on ``trio.serve_tcp``: it reads one request per
connection, answers with the next scripted reply and closes first.
"""

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import attrs
import httpx
import pytest
import trio

from claw.models import (
    AssistantMessage,
    CompactionSummary,
    ContextOverflowError,
    ModelAuthError,
    ModelRegistry,
    ModelRequestError,
    ModelResponseError,
    OpenAICompatibleModel,
    RetryableModelError,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
    openai_compatible_provider,
)


@attrs.frozen
class Reply:
    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False
    close_delimited: bool = False  # no Content-Length: the body ends when the server closes


@attrs.frozen
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@attrs.define
class FakeServer:
    replies: list[Reply] = attrs.field(factory=list)
    requests: list[Request] = attrs.field(factory=list)
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                chunk = await stream.receive_some()
                if not chunk:
                    return
                buffer += chunk
            head, _, rest = buffer.partition(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            while len(rest) < length:
                rest += await stream.receive_some()
            method, path, _ = request_line.split(" ")
            self.requests.append(Request(method, path, headers, json.loads(rest or b"null")))
            reply = self.replies.pop(0)
            if reply.hang:
                await trio.sleep_forever()
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            lines = [f"HTTP/1.1 {reply.status} X"]
            if not reply.close_delimited:
                lines.append(f"Content-Length: {len(body)}")
            lines += ["Content-Type: application/json", "Connection: close"]
            lines += [f"{k}: {v}" for k, v in reply.headers]
            await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[FakeServer]:
    fake = FakeServer()
    listeners = await nursery.start(partial(trio.serve_tcp, host="127.0.0.1"), fake.handle, 0)
    (listener,) = listeners
    fake.port = listener.socket.getsockname()[1]
    yield fake
    assert fake.replies == [], "the test scripted replies the client never asked for"


def completion(
    content: Any = "", tool_calls: list[dict[str, Any]] | None = None, usage: Any = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"id": "x", "choices": [{"index": 0, "message": message}]}
    if usage is not None:
        body["usage"] = usage
    return body


@attrs.define
class SleepRecorder:
    delays: list[float] = attrs.field(factory=list)

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await trio.lowlevel.checkpoint()


def client(fake: FakeServer, **kwargs: Any) -> OpenAICompatibleModel:
    kwargs.setdefault("sleep", SleepRecorder())
    return OpenAICompatibleModel(base_url=fake.base_url, model="qwen3:8b", **kwargs)


SEARCH = ToolSpec(
    "search", "search memory", {"type": "object", "properties": {"q": {"type": "string"}}}
)


async def test_request_maps_system_prompt_messages_tool_calls_results_and_tools(
    server: FakeServer,
) -> None:
    server.replies.append(Reply(body=completion("ok")))
    model = client(server, api_key="sk-test", max_output_tokens=64, temperature=0.2)
    history = [
        CompactionSummary("we talked about cats"),
        SystemMessage("the user is on mobile"),
        UserMessage("find cats"),
        AssistantMessage("", tool_calls=[ToolCall("c1", "search", {"q": "cats", "n": [1, 2]})]),
        ToolResult("c1", "search", "index offline", is_error=True),
        AssistantMessage("Nothing found."),
        UserMessage("try again"),
    ]
    reply = await model.complete(messages=history, system_prompt="be brief", tools=[SEARCH])
    assert reply == AssistantMessage("ok")
    (request,) = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["authorization"] == "Bearer sk-test"
    body = request.body
    assert (body["model"], body["stream"], body["max_tokens"], body["temperature"]) == (
        "qwen3:8b",
        False,
        64,
        0.2,
    )
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert body["messages"][1]["role"] == "user"
    assert body["messages"][1]["content"].endswith("we talked about cats")
    assert body["messages"][2:] == [
        {"role": "system", "content": "the user is on mobile"},
        {"role": "user", "content": "find cats"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"n":[1,2],"q":"cats"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Tool error: index offline"},
        {"role": "assistant", "content": "Nothing found."},
        {"role": "user", "content": "try again"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "search memory",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]


async def test_no_tools_no_system_prompt_and_no_key_are_left_out(server: FakeServer) -> None:
    server.replies.append(Reply(body=completion("ok")))
    await client(server).complete(messages=[UserMessage("hi")], system_prompt="", tools=[])
    (request,) = server.requests
    assert "authorization" not in request.headers
    assert "tools" not in request.body and "max_tokens" not in request.body
    assert request.body["messages"] == [{"role": "user", "content": "hi"}]


async def test_response_tool_calls_and_usage_are_mapped(server: FakeServer) -> None:
    server.replies.append(
        Reply(
            body=completion(
                None,
                tool_calls=[
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "cats"}'},
                    },
                    {"type": "function", "function": {"name": "now", "arguments": ""}},
                    {"id": "c3", "function": {"name": "obj", "arguments": {"k": [1]}}},
                ],
                usage={"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127},
            )
        )
    )
    reply = await client(server).complete(messages=[], system_prompt="", tools=[SEARCH])
    assert reply == AssistantMessage(
        "",
        tool_calls=(
            ToolCall("call_9", "search", {"q": "cats"}),
            ToolCall("call_1", "now", {}),
            ToolCall("c3", "obj", {"k": [1]}),
        ),
        usage=Usage(120, 7),
    )


async def test_text_parts_content_is_joined(server: FakeServer) -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    server.replies.append(Reply(body=completion(parts)))
    reply = await client(server).complete(messages=[], system_prompt="", tools=[])
    assert (reply.text, reply.usage) == ("ab", None)


async def test_429_and_5xx_are_retried_with_backoff_honouring_retry_after(
    server: FakeServer,
) -> None:
    server.replies += [
        Reply(429, {"error": {"message": "slow down"}}, headers=(("Retry-After", "3"),)),
        Reply(503, b"overloaded"),
        Reply(body=completion("finally")),
    ]
    sleep = SleepRecorder()
    model = client(server, max_retries=2, backoff_initial=0.5, sleep=sleep)
    reply = await model.complete(messages=[UserMessage("hi")], system_prompt="", tools=[])
    assert reply.text == "finally"
    assert sleep.delays == [3.0, 1.0]
    assert len(server.requests) == 3
    assert server.requests[0].body == server.requests[2].body


async def test_retries_give_up_with_a_retryable_error_carrying_the_status(
    server: FakeServer,
) -> None:
    server.replies += [Reply(500, {"error": "boom"}), Reply(502, {"error": "still boom"})]
    sleep = SleepRecorder()
    with pytest.raises(RetryableModelError, match="HTTP 502: still boom") as info:
        await client(server, max_retries=1, sleep=sleep).complete(
            messages=[], system_prompt="", tools=[]
        )
    assert info.value.status_code == 502
    assert info.value.retryable
    assert sleep.delays == [0.5]


@pytest.mark.parametrize(
    "error",
    [
        {"error": {"message": "This model's maximum context length is 8192 tokens", "code": None}},
        {"error": {"code": "context_length_exceeded", "message": "Too long"}},
        {"error": "the request exceeds the available context size, try increasing it"},
    ],
)
async def test_http_400_context_length_errors_become_context_overflow(
    server: FakeServer, error: dict[str, Any]
) -> None:
    server.replies.append(Reply(400, error))
    sleep = SleepRecorder()
    model = client(server, context_window=8192, sleep=sleep)
    with pytest.raises(ContextOverflowError) as info:
        await model.complete(messages=[UserMessage("long")], system_prompt="", tools=[])
    assert info.value.context_window == 8192
    assert not info.value.retryable
    assert sleep.delays == []


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(400, ModelRequestError), (404, ModelRequestError), (401, ModelAuthError)],
)
async def test_other_client_errors_are_not_retried(
    server: FakeServer, status: int, error_type: type[Exception]
) -> None:
    server.replies.append(Reply(status, {"error": {"message": "model 'nope' not found"}}))
    with pytest.raises(error_type, match=f"HTTP {status}: model 'nope' not found"):
        await client(server).complete(messages=[], system_prompt="", tools=[])
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "body is not JSON"),
        ({"choices": []}, "no choices[0]"),
        ({"choices": [{"message": {"content": 3}}]}, "neither text"),
        (completion("", tool_calls=[{"function": {"arguments": "{}"}}]), "function.name"),
    ],
)
async def test_malformed_responses_raise_model_response_error(
    server: FakeServer, body: Any, fragment: str
) -> None:
    server.replies.append(Reply(200, body))
    with pytest.raises(ModelResponseError) as info:
        await client(server).complete(messages=[], system_prompt="", tools=[])
    assert fragment in str(info.value)


@pytest.mark.parametrize("close_delimited", [False, True])
async def test_oversized_response_is_refused(server: FakeServer, close_delimited: bool) -> None:
    server.replies.append(Reply(body=completion("x" * 5000), close_delimited=close_delimited))
    with pytest.raises(ModelResponseError, match="more than 1000 bytes"):
        await client(server, max_response_bytes=1000).complete(
            messages=[], system_prompt="", tools=[]
        )


async def test_a_server_that_never_answers_times_out_as_retryable(
    server: FakeServer, autojump_clock: trio.testing.MockClock
) -> None:
    server.replies.append(Reply(hang=True))
    with pytest.raises(RetryableModelError, match="did not answer within 30.0s"):
        await client(server, timeout=30.0, max_retries=0).complete(
            messages=[], system_prompt="", tools=[]
        )


async def test_connection_refused_is_retryable() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    model = OpenAICompatibleModel(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=0, sleep=SleepRecorder()
    )
    with pytest.raises(RetryableModelError, match="connection failed"):
        await model.complete(messages=[], system_prompt="", tools=[])


async def test_provider_factory_shares_the_hosts_http_client(server: FakeServer) -> None:
    server.replies += [Reply(body=completion("one")), Reply(body=completion("two"))]
    registry = ModelRegistry()
    async with httpx.AsyncClient() as http:
        registry.register_provider(
            "local", openai_compatible_provider(server.base_url, http_client=http)
        )
        model = registry.resolve("local/qwen3:8b")
        assert isinstance(model, OpenAICompatibleModel)
        assert (model.model, model.http_client) == ("qwen3:8b", http)
        for expected in ("one", "two"):
            result = await registry.complete_with_fallback(
                "local/qwen3:8b", messages=[UserMessage("hi")], system_prompt="", tools=[]
            )
            assert result.message.text == expected
    assert [r.body["model"] for r in server.requests] == ["qwen3:8b", "qwen3:8b"]


def test_client_options_are_validated_and_the_key_is_not_in_repr() -> None:
    with pytest.raises(ValueError, match="timeout"):
        OpenAICompatibleModel(base_url="http://x", model="m", timeout=0)
    assert "sk-secret" not in repr(
        OpenAICompatibleModel(base_url="http://x/", model="m", api_key="sk-secret")
    )
    assert OpenAICompatibleModel(base_url="http://x/v1/", model="m").url == (
        "http://x/v1/chat/completions"
    )


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ("{bad", "arguments: not valid JSON (Expecting property name"),
        ('{"when": NaN}', "arguments.when: is nan, not a finite number"),
        ('{"text": "tea \\ud800"}', "arguments.text: contains a lone surrogate (U+D800"),
        ('{"m": ' * 40 + "1" + "}" * 40, "is nested more than 32 levels deep"),
        ("[1, 2]", "arguments: expected a JSON object, got list"),
    ],
)
async def test_tool_call_arguments_claw_does_not_accept_make_an_invalid_call_not_an_error(
    server: FakeServer, arguments: str, said: str
) -> None:
    """The reply is kept (the turn goes on); the call carries why its arguments were
    refused, and nothing unstorable is kept from them."""
    call = {"id": "c1", "function": {"name": "t", "arguments": arguments}}
    server.replies.append(Reply(200, completion("", tool_calls=[call])))
    reply = await client(server).complete(messages=[], system_prompt="", tools=[])
    [call] = reply.tool_calls
    assert (call.id, call.name, dict(call.arguments)) == ("c1", "t", {})
    assert call.invalid_arguments is not None and said in call.invalid_arguments
    call.invalid_arguments.encode("utf-8")


async def test_errors_name_the_provider_the_model_and_the_endpoint(server: FakeServer) -> None:
    server.replies += [Reply(200, b"<html>It works!</html>"), Reply(404, {"error": "no model"})]
    model = client(server, provider="local")
    where = f"model 'local/{model.model}' at {model.url}"
    with pytest.raises(ModelResponseError, match="unusable response") as info:
        await model.complete(messages=[], system_prompt="", tools=[])
    assert str(info.value).startswith(where)
    assert "ends in /v1" in str(info.value)
    with pytest.raises(ModelRequestError) as refused:
        await model.complete(messages=[], system_prompt="", tools=[])
    assert str(refused.value).startswith(f"{where} answered HTTP 404")


async def test_connection_refused_says_why_and_what_to_check() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    model = OpenAICompatibleModel(
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        provider="local",
        max_retries=0,
        sleep=SleepRecorder(),
    )
    with pytest.raises(RetryableModelError) as info:
        await model.complete(messages=[], system_prompt="", tools=[])
    message = str(info.value)
    assert message.startswith(f"model 'local/m' at http://127.0.0.1:{port}/v1/chat/completions")
    assert "Connection refused" in message and "sub-exception" not in message
    assert "base_url" in message
