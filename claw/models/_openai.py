"""A :class:`~claw.models.Model` for OpenAI-compatible chat-completions servers.

Ollama, llama.cpp's server, vLLM, LM Studio and hosted OpenAI-style APIs all
speak ``POST {base_url}/chat/completions``; pointing this client at one lets a
user run claw against a real model. It runs on trio through httpx (which uses
anyio), non-streaming.

What it promises:

* Messages and tool calls are mapped both ways; tool-call arguments arrive as
  JSON text and leave as frozen :class:`~claw.models.JsonObject` values.
* Transient failures (HTTP 408/409/425/429/5xx, timeouts, lost connections)
  are retried ``max_retries`` times with exponential backoff, honouring a
  numeric ``Retry-After``; then :class:`RetryableModelError`.
* An HTTP 400/413/422 whose error text says the prompt is too long becomes
  :class:`ContextOverflowError`, which the turn runner answers by compacting.
* Each attempt (connect, request, whole response) is bounded by ``timeout``
  seconds, and the response body by ``max_response_bytes``.

Pass ``http_client`` to share one connection pool the host owns (and closes);
without it each call opens and closes its own client.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import httpx
import trio

from ._errors import (
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelRequestError,
    ModelResponseError,
    RetryableModelError,
)
from ._messages import (
    AssistantMessage,
    CompactionSummary,
    Message,
    SystemMessage,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    UserMessage,
)
from ._registry import ProviderFactory

_RETRYABLE_STATUS = frozenset({408, 409, 425, 429})
_OVERFLOW_STATUS = frozenset({400, 413, 422})
_OVERFLOW_HINTS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "context size",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "input is too long",
    "reduce the length",
)
SUMMARY_PREFIX = "Summary of the earlier conversation, which was compacted:\n\n"
"""How a :class:`CompactionSummary` is introduced to the model (as a user-role message)."""
TOOL_ERROR_PREFIX = "Tool error: "
"""Prefixed to a failed tool's content; the chat-completions format has no error flag."""


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


@attrs.define
class OpenAICompatibleModel:
    """A chat-completions client for one model of one server.

    ``base_url`` is the API root including any version segment, for example
    ``http://127.0.0.1:11434/v1`` for Ollama. ``sleep`` is how backoff waits;
    tests inject a recorder instead of waiting.
    """

    base_url: str
    model: str
    api_key: str | None = attrs.field(default=None, repr=False)
    context_window: int = attrs.field(default=32_768, validator=_positive)
    timeout: float = attrs.field(default=120.0, validator=_positive)
    max_retries: int = attrs.field(default=2, validator=_non_negative)
    backoff_initial: float = attrs.field(default=0.5, validator=_non_negative)
    backoff_max: float = attrs.field(default=20.0, validator=_non_negative)
    max_response_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive)
    max_output_tokens: int | None = None
    temperature: float | None = None
    #: The ``[models.providers.<name>]`` this model came from, named in every error.
    provider: str | None = None
    http_client: httpx.AsyncClient | None = attrs.field(default=None, repr=False)
    sleep: Callable[[float], Awaitable[None]] = attrs.field(default=trio.sleep, repr=False)

    @property
    def url(self) -> str:
        """The chat-completions endpoint."""
        return self.base_url.rstrip("/") + "/chat/completions"

    @property
    def where(self) -> str:
        """How errors name this model: provider, model and endpoint."""
        ref = f"{self.provider}/{self.model}" if self.provider else self.model
        return f"model {ref!r} at {self.url}"

    async def complete(
        self,
        *,
        messages: Sequence[Message],
        system_prompt: str,
        tools: Sequence[ToolSpec],
    ) -> AssistantMessage:
        """Ask the server for the next assistant message, retrying transient failures."""
        body = build_request_body(
            self.model,
            messages=messages,
            system_prompt=system_prompt,
            tools=tools,
            max_output_tokens=self.max_output_tokens,
            temperature=self.temperature,
        )
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                status, headers, payload = await self._post(body)
            except RetryableModelError as exc:
                error: ModelError = exc
            else:
                if 200 <= status < 300:
                    return parse_response(payload, model=self.model, where=self.where)
                error = map_error_response(
                    status,
                    payload,
                    model=self.model,
                    context_window=self.context_window,
                    where=self.where,
                )
                retry_after = _retry_after(headers)
            if not error.retryable or attempt >= self.max_retries:
                raise error
            await self.sleep(self._backoff(attempt, retry_after))
            attempt += 1

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_max, self.backoff_initial * 2.0**attempt)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    async def _post(self, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        headers = {"Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            with trio.fail_after(self.timeout):
                if self.http_client is not None:
                    return await self._send(self.http_client, body, headers)
                async with httpx.AsyncClient(timeout=self.timeout) as client:
                    return await self._send(client, body, headers)
        except (trio.TooSlowError, httpx.TimeoutException):
            raise RetryableModelError(
                f"{self.where} did not answer within {self.timeout}s"
            ) from None
        except httpx.TransportError as exc:
            raise RetryableModelError(
                f"{self.where}: connection failed ({_transport_reason(exc)}); is the server "
                "running and base_url right?"
            ) from exc
        except httpx.HTTPError as exc:  # a malformed URL, a protocol violation
            raise ModelResponseError(f"{self.where}: HTTP failed: {exc!r}") from exc

    def _too_large(self) -> ModelResponseError:
        return ModelResponseError(
            f"{self.where} sent more than "
            f"{self.max_response_bytes} bytes; raise max_response_bytes if expected"
        )

    async def _send(
        self, client: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str]
    ) -> tuple[int, httpx.Headers, bytes]:
        async with client.stream(
            "POST", self.url, json=body, headers=headers, timeout=self.timeout
        ) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_response_bytes:
                raise self._too_large()
            # Past the limit, keep draining without storing instead of breaking out:
            # leaving httpx's async generators half-consumed makes them finalise
            # in the garbage collector. The drain is bounded by the call's timeout.
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size <= self.max_response_bytes:
                    chunks.append(chunk)
            if size > self.max_response_bytes:
                raise self._too_large()
            return response.status_code, response.headers, b"".join(chunks)


def openai_compatible_provider(
    base_url: str,
    *,
    api_key: str | None = None,
    context_window: int = 32_768,
    timeout: float = 120.0,
    max_retries: int = 2,
    http_client: httpx.AsyncClient | None = None,
    provider: str | None = None,
) -> ProviderFactory:
    """A provider factory for :meth:`ModelRegistry.register_provider` serving any model name.

    ``registry.register_provider("ollama",
    openai_compatible_provider("http://127.0.0.1:11434/v1"))`` makes
    ``ollama/qwen3:8b`` resolvable.
    """

    def build(model: str) -> OpenAICompatibleModel:
        return OpenAICompatibleModel(
            base_url=base_url,
            model=model,
            api_key=api_key,
            context_window=context_window,
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
            provider=provider,
        )

    return build


def build_request_body(
    model: str,
    *,
    messages: Sequence[Message],
    system_prompt: str,
    tools: Sequence[ToolSpec],
    max_output_tokens: int | None = None,
    temperature: float | None = None,
) -> dict[str, Any]:
    """The chat-completions request body for one call (exposed for inspection and tests)."""
    wire: list[dict[str, Any]] = []
    if system_prompt:
        wire.append({"role": "system", "content": system_prompt})
    wire.extend(_message_to_wire(m) for m in messages)
    body: dict[str, Any] = {"model": model, "messages": wire, "stream": False}
    if tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters.thaw(),
                },
            }
            for tool in tools
        ]
    if max_output_tokens is not None:
        body["max_tokens"] = max_output_tokens
    if temperature is not None:
        body["temperature"] = temperature
    return body


def _message_to_wire(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.text}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.text}
    if isinstance(message, CompactionSummary):
        return {"role": "user", "content": SUMMARY_PREFIX + message.text}
    if isinstance(message, ToolResult):
        content = TOOL_ERROR_PREFIX + message.content if message.is_error else message.content
        return {"role": "tool", "tool_call_id": message.call_id, "content": content}
    wire: dict[str, Any] = {"role": "assistant", "content": message.text}
    if message.tool_calls:
        wire["content"] = message.text or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments.to_json_text()},
            }
            for call in message.tool_calls
        ]
    return wire


def parse_response(payload: bytes, *, model: str, where: str | None = None) -> AssistantMessage:
    """Map a chat-completions response body to an :class:`AssistantMessage`.

    Raises :class:`ModelResponseError` naming what is missing or malformed, and the
    model (``where``: provider, model and endpoint, when known).
    """
    who = where or f"model {model!r}"

    def bad(what: str) -> ModelResponseError:
        return ModelResponseError(
            f"{who} returned an unusable response: {what}; is base_url an OpenAI-compatible "
            "API root (it usually ends in /v1)?"
        )

    try:
        data = json.loads(payload)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad(f"body is not JSON ({exc})") from None
    if not isinstance(data, Mapping):
        raise bad("body is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise bad("no choices[0]")
    message = choices[0].get("message")
    if not isinstance(message, Mapping):
        raise bad("choices[0].message is missing")
    text = _content_text(message.get("content"))
    if text is None:
        raise bad("choices[0].message.content is neither text nor text parts")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise bad("choices[0].message.tool_calls is not an array")
    calls = []
    for index, raw in enumerate(raw_calls):
        where = f"choices[0].message.tool_calls[{index}]"
        function = raw.get("function") if isinstance(raw, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise bad(f"{where}.function.name is missing")
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{index}"
        calls.append(_tool_call(call_id, function["name"], function.get("arguments")))
    return AssistantMessage(text=text, tool_calls=tuple(calls), usage=_usage(data.get("usage")))


def _tool_call(call_id: str, name: str, arguments: object) -> ToolCall:
    """One tool call of the reply. Arguments that are not an acceptable JSON object (not
    JSON, NaN, a lone surrogate, too deep) do not fail the turn: the call carries why
    (``invalid_arguments``), and the tool is answered with that error instead of run."""
    if arguments is None or arguments == "":
        return ToolCall.from_model(id=call_id, name=name, arguments={})
    if isinstance(arguments, Mapping):
        return ToolCall.from_model(id=call_id, name=name, arguments=arguments)
    if not isinstance(arguments, str):
        return ToolCall.from_model(
            id=call_id, name=name, arguments={}, invalid="arguments: expected JSON text"
        )
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError as exc:
        invalid = f"arguments: not valid JSON ({exc.msg} at character {exc.pos})"
        return ToolCall.from_model(id=call_id, name=name, arguments={}, invalid=invalid)
    except (ValueError, RecursionError):
        invalid = "arguments: not valid JSON (a number out of range, or nested too deeply)"
        return ToolCall.from_model(id=call_id, name=name, arguments={}, invalid=invalid)
    if not isinstance(parsed, dict):
        invalid = f"arguments: expected a JSON object, got {type(parsed).__name__}"
        return ToolCall.from_model(id=call_id, name=name, arguments={}, invalid=invalid)
    return ToolCall.from_model(id=call_id, name=name, arguments=parsed)


def _content_text(content: object) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, Mapping):
                return None
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return None


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (prompt, completion)
    ):
        return None
    assert isinstance(prompt, int) and isinstance(completion, int)
    return Usage(input_tokens=prompt, output_tokens=completion)


def map_error_response(
    status: int,
    payload: bytes,
    *,
    model: str,
    context_window: int | None = None,
    where: str | None = None,
) -> ModelError:
    """The :class:`ModelError` for a non-2xx response (exposed for tests)."""
    detail = _error_detail(payload)
    message = f"{where or f'model {model!r}'} answered HTTP {status}: {detail}"
    if status in _OVERFLOW_STATUS and (
        status == 413 or any(hint in detail.lower() for hint in _OVERFLOW_HINTS)
    ):
        return ContextOverflowError(message, context_window=context_window)
    if status in (401, 403):
        return ModelAuthError(message, status_code=status)
    if status in _RETRYABLE_STATUS or 500 <= status <= 599:
        return RetryableModelError(message, status_code=status)
    if 400 <= status <= 499:
        return ModelRequestError(message, status_code=status)
    return ModelResponseError(message)


def _error_detail(payload: bytes) -> str:
    text = payload.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text[:500] or "(empty body)"
    error = data.get("error") if isinstance(data, Mapping) else None
    if isinstance(error, Mapping):
        parts = [str(error[k]) for k in ("code", "type", "message") if error.get(k)]
        return ": ".join(parts)[:500] or text[:500]
    if isinstance(error, str):
        return error[:500]
    return text[:500]


def _transport_reason(exc: httpx.TransportError) -> str:
    """The root cause of a transport error in a few words (``Connection refused``)."""
    cause: BaseException = exc
    for _ in range(20):  # a cause chain, or exception groups (anyio's connect attempts)
        if isinstance(cause, BaseExceptionGroup) and cause.exceptions:
            cause = cause.exceptions[0]
        elif cause.__cause__ is not None or cause.__context__ is not None:
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        else:
            break
    return str(cause) or type(cause).__name__


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
