"""``memory.search`` (v1 and v2), ``memory.get`` and ``memory.status``.

The functions :func:`memory_search`, :func:`memory_get` and :func:`memory_status` take
the host's memory guard, a :class:`~claw.MemoryCallerContext` and the wire ``params``
and return the wire payload. The gateway calls them with the context it minted for the
request; the MCP server and the CLI call them the same way. This module is the
boundary where a request enters: the wire parameters are validated here, once, into
the neutral request, and nothing behind it checks them again. Every provider call goes
through the guard's request routes (``MemoryRuntime.search``, ``get``, ``status``),
which check currency, with ``check`` (the request's own condition: its connection open;
an aborted request's caller context is stale), before and after each provider call and
make the release check last; claw errors are translated to the wire's codes once, in
:func:`translate_error`.

Wire shapes (camelCase) are exactly those of the issue: v2 search answers
``{version: 2, agentId, providerId, hits, nextCursor?, coverage?, warning?}``; v1 (no
version, or ``version: 1``) answers the file-shaped ``{agentId, provider, searchMode,
results}``, converted once from the neutral hits, for a plugin that registers a
file-shaped runtime (through its ``provider_runtime`` when it has one, else the host's
legacy adapter); a provider that only has the neutral runtime answers
``INVALID_REQUEST`` naming the plugin and asking for ``version: 2``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .._capabilities import MemoryCallerContext, SessionAuthority
from .._currency import RequestCheck
from .._errors import (
    CapabilityDeniedError,
    ClawError,
    ContractError,
    HostClosedError,
    ProviderError,
    StaleCapabilityError,
    UnknownAgentError,
    UnsupportedRequestError,
)
from .._input import InvalidInputError
from ..memory import (
    MemoryAddResult,
    MemoryAnswer,
    MemoryForgetResult,
    MemoryGetRequest,
    MemoryReference,
    MemoryRestoreResult,
    MemoryRuntime,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    MemoryUnavailableError,
)
from ._errors import GatewayError
from ._methods import GatewayMethod, GatewayRequestContext

logger = logging.getLogger("claw.gateway")

MAX_RESULTS_DEFAULT = 20
MAX_RESULTS_LIMIT = 50

_SEARCH_V2_FIELDS = frozenset(
    {"version", "query", "maxResults", "minScore", "cursor", "sources", "agentId"}
)
_SEARCH_V1_FIELDS = frozenset({"version", "query", "maxResults", "minScore", "sources", "agentId"})
_GET_FIELDS = frozenset({"reference", "from", "lines", "agentId"})
_REFERENCE_FIELDS = frozenset({"providerId", "id", "revision", "fragment"})
_STATUS_FIELDS = frozenset({"agentId"})


# Bounds on what a client may send (each one's message names the field). A frame is
# already bounded by max_message_bytes; these keep one field from carrying all of it
# into a provider (a query is tokenised, a path resolved, an agent id turned into a
# directory).
MAX_QUERY_CHARS = 4096
MAX_CURSOR_CHARS = 256
MAX_AGENT_ID_CHARS = 512
MAX_REFERENCE_ID_CHARS = 4096
MAX_REFERENCE_FIELD_CHARS = 256
MAX_LINE_NUMBER = 10_000_000


def _invalid(message: str) -> GatewayError:
    return GatewayError("INVALID_REQUEST", message)


def _no_unknown(params: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    if allowed.issuperset(params):
        return
    unknown = sorted(set(params) - allowed)
    if unknown:
        valid = ", ".join(sorted(allowed))
        raise _invalid(f"{where}: unknown field {unknown[0][:64]!r} (valid fields: {valid})")


def _string(
    params: Mapping[str, Any],
    key: str,
    *,
    required: bool = False,
    max_chars: int = MAX_REFERENCE_FIELD_CHARS,
    label: str | None = None,
) -> str | None:
    name = label or key
    value = params.get(key)
    if value is None:
        if required:
            raise _invalid(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise _invalid(f"{name} must be a string")
    if required and (not value or value.isspace()):
        raise _invalid(f"{name} must not be empty")
    if len(value) > max_chars:
        raise _invalid(f"{name} must be at most {max_chars} characters, got {len(value)}")
    if "\x00" in value:
        raise _invalid(f"{name} must not contain NUL")
    return value


def _positive_int(
    params: Mapping[str, Any], key: str, *, maximum: int = MAX_LINE_NUMBER
) -> int | None:
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid(f"{key} must be a positive integer")
    if value > maximum:
        raise _invalid(f"{key} must be at most {maximum}")
    return value


def _agent(params: Mapping[str, Any], caller: MemoryCallerContext) -> str | None:
    agent = _string(params, "agentId", max_chars=MAX_AGENT_ID_CHARS)
    if agent is not None and not agent.strip():
        raise _invalid("agentId must not be empty")
    authority = caller.authority
    if agent is None and isinstance(authority, SessionAuthority):
        return authority.agent_id
    return agent


def translate_error(exc: BaseException) -> BaseException:
    """Map claw errors to the wire's error codes (gateway errors pass through)."""
    if isinstance(exc, GatewayError):
        return exc
    if isinstance(exc, UnsupportedRequestError | UnknownAgentError | InvalidInputError):
        return GatewayError("INVALID_REQUEST", str(exc))
    if isinstance(exc, CapabilityDeniedError):
        return GatewayError("FORBIDDEN", str(exc))
    if isinstance(exc, StaleCapabilityError | HostClosedError):
        return GatewayError("UNAVAILABLE", str(exc))
    if isinstance(exc, MemoryUnavailableError):
        return GatewayError("UNAVAILABLE", str(exc))
    if type(exc) is ProviderError:
        # Raised by the host's guard: its message names the provider, not host paths.
        return GatewayError("UNAVAILABLE", str(exc))
    if isinstance(exc, ProviderError):
        # A provider's own failure: its message may name files; it goes to the log.
        logger.warning("memory provider failed: %s", exc, exc_info=exc)
        return GatewayError(
            "UNAVAILABLE",
            f"the memory provider failed ({type(exc).__name__}); the gateway log has details",
        )
    if isinstance(exc, ContractError):
        return GatewayError("INTERNAL", "the memory provider broke its contract")
    return exc


def _wire_hit(hit: MemorySearchHit) -> dict[str, Any]:
    # The whole reference, fragment included: it is what get, forget and restore take, so
    # a hit's reference names the hit's lines, never the whole file they lie in.
    out: dict[str, Any] = {"reference": wire_reference(hit.reference), "excerpt": hit.excerpt}
    if hit.score is not None:
        out["score"] = hit.score
    if hit.citation is not None:
        out["citation"] = {
            "path": hit.citation.path,
            "startLine": hit.citation.start_line,
            "endLine": hit.citation.end_line,
            "source": hit.citation.source,
        }
    if hit.provenance:
        out["provenance"] = [p.to_wire() for p in hit.provenance]
    return out


def _search_request(params: Mapping[str, Any], *, v2: bool) -> MemorySearchRequest:
    _no_unknown(params, _SEARCH_V2_FIELDS if v2 else _SEARCH_V1_FIELDS, "memory.search")
    query = _string(params, "query", required=True, max_chars=MAX_QUERY_CHARS)
    assert query is not None
    max_results = (
        _positive_int(params, "maxResults", maximum=MAX_RESULTS_LIMIT) or MAX_RESULTS_DEFAULT
    )
    min_score = params.get("minScore")
    if min_score is not None and (
        isinstance(min_score, bool)
        or not isinstance(min_score, int | float)
        or not math.isfinite(min_score)
        or not 0 <= min_score <= 1
    ):
        raise _invalid("minScore must be a number between 0 and 1")
    sources = params.get("sources")
    if sources is not None:
        if not isinstance(sources, list) or not sources:
            raise _invalid("sources must be a non-empty array of 'memory' and/or 'sessions'")
        for source in sources:
            if source not in ("memory", "sessions"):
                raise _invalid(f"sources contains {source!r}; use 'memory' and/or 'sessions'")
    cursor = _string(params, "cursor", max_chars=MAX_CURSOR_CHARS) if v2 else None
    if cursor is not None and not cursor:
        raise _invalid("cursor must not be empty; pass back a nextCursor, or omit it")
    # Every value was checked above, with the wire's names and bounds: not again.
    return MemorySearchRequest._trusted(
        query=query,
        max_results=max_results,
        min_score=float(min_score) if min_score is not None else None,
        cursor=cursor,
        sources=tuple(sources) if sources is not None else None,
    )


async def memory_search(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    params: Mapping[str, Any],
    check: RequestCheck | None = None,
    *,
    fresh: bool = False,
) -> dict[str, Any]:
    """The ``memory.search`` payload (v1 or v2) for ``caller``.

    ``check`` is the request's own condition, checked with every currency check;
    ``fresh`` says ``caller`` was minted with nothing awaited since (the gateway's).
    """
    version = params.get("version", 1)
    if isinstance(version, bool) or version not in (1, 2):
        raise _invalid(f"unsupported memory.search version {version!r}; use 1 or 2")
    request = _search_request(params, v2=version == 2)
    answer = await memory.search(
        caller,
        request,
        agent_id=_agent(params, caller),
        file_shaped=version == 1,
        also=check,
        fresh=fresh,
    )
    return _v1_payload(answer) if version == 1 else _v2_payload(answer)


def _v2_payload(answer: MemoryAnswer[MemorySearchResult]) -> dict[str, Any]:
    result = answer.result
    payload: dict[str, Any] = {
        "version": 2,
        "agentId": answer.agent_id,
        "providerId": answer.provider_id,
        "hits": [_wire_hit(h) for h in result.hits],
    }
    if result.next_cursor is not None:
        payload["nextCursor"] = result.next_cursor
    if result.coverage is not None:
        payload["coverage"] = {
            "sources": list(result.coverage.sources),
            "complete": result.coverage.complete,
        }
    if result.warning is not None:
        payload["warning"] = result.warning
    return payload


def _v1_payload(answer: MemoryAnswer[MemorySearchResult]) -> dict[str, Any]:
    """The file-shaped answer, converted once from the neutral hits."""
    mode = answer.health.details.get("searchMode") if answer.health is not None else None
    return {
        "agentId": answer.agent_id,
        "provider": answer.provider_id,
        "searchMode": mode if isinstance(mode, str) else "unknown",
        "results": [
            _v1_result(hit, native=answer.native)
            for hit in answer.result.hits
            if hit.citation is not None
        ],
    }


def _v1_result(hit: MemorySearchHit, *, native: bool) -> dict[str, Any]:
    """One v1 result. Its citation label is the legacy manager's own, or for a native
    provider the ``path#L<a>-L<b>`` form a file-shaped manager gives."""
    citation = hit.citation
    assert citation is not None
    item: dict[str, Any] = {
        "path": citation.path,
        "startLine": citation.start_line,
        "endLine": citation.end_line,
        "score": hit.score if hit.score is not None else 0.0,
        "snippet": hit.excerpt,
        "source": hit.source,
    }
    label = hit.metadata.get("citation_label")
    if isinstance(label, str):
        item["citation"] = label
    elif native:
        item["citation"] = f"{citation.path}#L{citation.start_line}-L{citation.end_line}"
    return item


def _reference(value: Any) -> MemoryReference:
    if not isinstance(value, Mapping):
        raise _invalid("reference must be an object with providerId and id")
    _no_unknown(value, _REFERENCE_FIELDS, "memory.get reference")
    provider = _string(value, "providerId", required=True, label="reference.providerId")
    ref_id = _string(
        value, "id", required=True, max_chars=MAX_REFERENCE_ID_CHARS, label="reference.id"
    )
    assert provider is not None and ref_id is not None
    return MemoryReference(
        provider_id=provider,
        id=ref_id,
        revision=_string(value, "revision", label="reference.revision"),
        fragment=_string(value, "fragment", label="reference.fragment"),
    )


def wire_reference(ref: MemoryReference) -> dict[str, Any]:
    """A reference as the wire carries it (camelCase; absent fields left out)."""
    wire: dict[str, Any] = {"providerId": ref.provider_id, "id": ref.id}
    if ref.revision is not None:
        wire["revision"] = ref.revision
    if ref.fragment is not None:
        wire["fragment"] = ref.fragment
    return wire


def wire_add(result: MemoryAddResult) -> dict[str, Any]:
    """Where an added memory landed, as the wire carries it (the CLI's and MCP's shape)."""
    c = result.citation
    return {
        "reference": wire_reference(result.reference),
        "citation": {
            "path": c.path,
            "startLine": c.start_line,
            "endLine": c.end_line,
            "source": c.source,
        },
        "timestamp": result.timestamp,
    }


def wire_forget(result: MemoryForgetResult) -> dict[str, Any]:
    """What a forget removed (or would remove), as the wire carries it."""
    payload: dict[str, Any] = {
        "reference": wire_reference(result.reference),
        "dryRun": result.dry_run,
        "paths": list(result.paths),
        "chunks": result.chunks,
    }
    if result.removed_text is not None:
        payload["removedText"] = result.removed_text
    if result.removal_id is not None:
        payload["removalId"] = result.removal_id
    if result.start_line is not None and result.end_line is not None:
        payload["startLine"] = result.start_line
        payload["endLine"] = result.end_line
    if result.entries is not None:
        payload["entries"] = result.entries
    if result.forget_id is not None:
        payload["forgetId"] = result.forget_id
    return payload


def wire_restore(result: MemoryRestoreResult) -> dict[str, Any]:
    """What a restore put back, and how, as the wire carries it."""
    return {
        "removalId": result.removal_id,
        "reference": wire_reference(result.reference),
        "mode": result.mode,
        "dryRun": result.dry_run,
        "already": result.already,
    }


async def memory_get(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    params: Mapping[str, Any],
    check: RequestCheck | None = None,
    *,
    fresh: bool = False,
) -> dict[str, Any]:
    """The ``memory.get`` payload for ``caller`` (see :func:`memory_search`)."""
    _no_unknown(params, _GET_FIELDS, "memory.get")
    reference = _reference(params.get("reference"))
    request = MemoryGetRequest(
        reference=reference,
        from_line=_positive_int(params, "from"),
        lines=_positive_int(params, "lines"),
    )
    answer = await memory.get(
        caller, request, agent_id=_agent(params, caller), also=check, fresh=fresh
    )
    result = answer.result
    payload: dict[str, Any] = {
        "version": 2,
        "agentId": answer.agent_id,
        "providerId": answer.provider_id,
        "status": result.status,
        "reference": wire_reference(result.reference),
    }
    if result.status == "ok":
        payload["text"] = result.text
        payload["from"] = result.from_line
        payload["lines"] = result.lines
        if result.total_lines is not None:
            payload["totalLines"] = result.total_lines
        payload["truncated"] = result.truncated
        if result.provenance:
            payload["provenance"] = [p.to_wire() for p in result.provenance]
    return payload


async def memory_status(
    memory: MemoryRuntime,
    caller: MemoryCallerContext,
    params: Mapping[str, Any],
    check: RequestCheck | None = None,
    *,
    fresh: bool = False,
) -> dict[str, Any]:
    """The ``memory.status`` payload for ``caller`` (no host paths in details)."""
    _no_unknown(params, _STATUS_FIELDS, "memory.status")
    answer = await memory.status(caller, agent_id=_agent(params, caller), also=check, fresh=fresh)
    health = answer.result
    payload: dict[str, Any] = {
        "version": 2,
        "agentId": answer.agent_id,
        "providerId": answer.provider_id,
        "status": health.status,
    }
    if health.message is not None:
        payload["message"] = health.message
    if health.details:
        payload["details"] = dict(health.details)
    return payload


MemoryMethod = Callable[..., Awaitable[dict[str, Any]]]


def _handler(fn: MemoryMethod) -> Callable[[GatewayRequestContext], Awaitable[dict[str, Any]]]:
    async def handle(ctx: GatewayRequestContext) -> dict[str, Any]:
        try:
            # The context was minted for this request just before: nothing was awaited.
            # The guard verifies the context (an aborted request's is stale) with every
            # check, and the connection with it.
            return await fn(ctx.memory, ctx.caller, ctx.params, ctx.check_connection, fresh=True)
        except ClawError as exc:
            translated = translate_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    return handle


MEMORY_METHODS: dict[str, Callable[[GatewayRequestContext], Awaitable[dict[str, Any]]]] = {
    "memory.search": _handler(memory_search),
    "memory.get": _handler(memory_get),
    "memory.status": _handler(memory_status),
}


def register_memory_methods(gateway: Any) -> None:
    """Register the three memory methods (each needs ``operator.read``).

    Their last step is the guard's release check (or, for status, its check after the
    provider's handle closed), so the gateway does not check the request again after
    them (``releases``).
    """
    for name, handler in MEMORY_METHODS.items():
        gateway.add_method(
            GatewayMethod(name=name, handler=handler, required_scope="operator.read", releases=True)
        )
