"""The host-owned legacy adapter: a file-shaped search manager behind the neutral handle.

Selected only when the memory slot owner registers no ``provider_runtime``. It declares
memory and session search, no pagination, project filtering and no automatic-recall
candidates. References are ``{provider_id, id: <virtual path>, fragment: "L<a>-L<b>"}``;
read bounds and the manager's own visibility filtering are preserved, and health details
never include host paths (database or workspace locations).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import ContractError, UnsupportedRequestError
from ._contracts import LegacyReadResult, LegacySearchResult, MemorySearchManager
from ._types import (
    Citation,
    HealthStatus,
    MemoryGetRequest,
    MemoryGetResult,
    MemoryHealth,
    MemoryReference,
    MemorySearchHit,
    MemorySearchRequest,
    MemorySearchResult,
    ProviderCapabilities,
    SearchCoverage,
)

LEGACY_CAPABILITIES = ProviderCapabilities(
    sources=("memory", "sessions"), pagination=False, candidates=(), project_filter=True
)

# ASCII digits only (``\d`` also matches other scripts' digits), at most nine of them.
_FRAGMENT_RE = re.compile(r"\AL([0-9]{1,9})-L([0-9]{1,9})\Z")
#: Last words of a detail key that names a location (``db_path``, ``indexDir``, ``workspace``).
_PATH_WORDS = frozenset(
    {
        "db",
        "database",
        "path",
        "paths",
        "workspace",
        "dir",
        "dirs",
        "directory",
        "folder",
        "file",
        "filename",
        "root",
        "location",
        "uri",
        "url",
    }
)
_KEY_WORD_RE = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
#: A path anywhere in a string: POSIX absolute or home-relative, a drive letter, a UNC share
#: (also inside a URI such as ``sqlite:////var/lib/x`` or a sentence "index at /srv/x").
_EMBEDDED_PATH_RE = re.compile(r"(?:^|[\s\"'=:(,\[{<@])(?:~?/[^\s]|[A-Za-z]:[\\/]|\\\\)")


def line_fragment(start_line: int, end_line: int) -> str:
    """The legacy fragment for a line range: ``"L<start>-L<end>"``."""
    return f"L{start_line}-L{end_line}"


def parse_line_fragment(fragment: str) -> tuple[int, int]:
    """Parse ``"L<start>-L<end>"``; raise UnsupportedRequestError naming the bad fragment.

    Fragments come from callers (a reference they pass back), so a bad one is the
    caller's mistake, never the provider's.
    """
    match = _FRAGMENT_RE.match(fragment)
    if match is None:
        raise UnsupportedRequestError(
            f"reference.fragment {fragment[:64]!r} is not of the form 'L<start>-L<end>'"
        )
    start, end = int(match.group(1)), int(match.group(2))
    if start < 1 or end < start:
        raise UnsupportedRequestError(
            f"reference.fragment {fragment!r} is not a valid line range (1 <= start <= end)"
        )
    return start, end


def _derives_from_a_host_path(value: object) -> bool:
    if isinstance(value, os.PathLike):
        return True
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return isinstance(value, str) and bool(_EMBEDDED_PATH_RE.search(value))


def _is_location_key(key: object) -> bool:
    words = _KEY_WORD_RE.findall(str(key))
    return bool(words) and words[-1].lower() in _PATH_WORDS


def _clean_value(value: Any) -> tuple[bool, Any]:
    """``(keep, cleaned)`` for one detail value."""
    if _derives_from_a_host_path(value):
        return False, None
    if isinstance(value, Mapping):
        return True, strip_host_paths(value)
    if isinstance(value, list | tuple | set | frozenset):
        kept = [cleaned for keep, cleaned in map(_clean_value, value) if keep]
        return True, kept
    return True, value


_PATH_TOKEN_RE = re.compile(r"(?<![\w.])(?:~?/(?=\S)|[A-Za-z]:[\\/]|\\\\)[^\s\"'<>,;)\]}]*")


def redact_host_paths(text: str) -> str:
    """``text`` with every path in it replaced by ``<path>`` (for health messages)."""
    return _PATH_TOKEN_RE.sub("<path>", text)


def strip_host_paths(details: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``details`` without anything derived from a host path.

    Dropped: entries whose key names a location (``db_path``, ``workspaceDir``, ``root``,
    ...) or is itself a path, and values that are path objects or strings with a path in
    them (absolute, ``~/``, a drive letter, a UNC share, also inside URIs and sentences),
    at any depth of nested mappings and sequences.
    """
    clean: dict[str, Any] = {}
    for key, value in details.items():
        if _is_location_key(key) or _derives_from_a_host_path(key):
            continue
        keep, cleaned = _clean_value(value)
        if keep:
            clean[key] = cleaned
    return clean


@attrs.define(eq=False)
class LegacyProviderHandle:
    """Wraps one caller's legacy search manager as a neutral provider handle."""

    provider_id: str
    manager: MemorySearchManager
    session_key: str | None = None

    @property
    def capabilities(self) -> ProviderCapabilities:
        return LEGACY_CAPABILITIES

    def _hit(self, result: LegacySearchResult) -> MemorySearchHit:
        if not isinstance(result, LegacySearchResult):
            raise ContractError(
                f'legacy memory plugin "{self.provider_id}" returned a '
                f"{type(result).__name__}, not a LegacySearchResult"
            )
        metadata = dict(result.metadata)
        if result.citation is not None:
            metadata.setdefault("citation_label", result.citation)
        return MemorySearchHit(
            reference=MemoryReference(
                provider_id=self.provider_id,
                id=result.path,
                fragment=line_fragment(result.start_line, result.end_line),
            ),
            excerpt=result.snippet,
            score=result.score,
            citation=Citation(
                path=result.path,
                start_line=result.start_line,
                end_line=result.end_line,
                source=result.source,
            ),
            source=result.source,
            metadata=metadata,
        )

    async def search(self, request: MemorySearchRequest) -> MemorySearchResult:
        sources = request.sources or LEGACY_CAPABILITIES.sources
        results = await self.manager.search(
            request.query,
            max_results=request.max_results,
            min_score=request.min_score,
            sources=sources,
            session_key=self.session_key,
        )
        hits = tuple(self._hit(r) for r in results)
        return MemorySearchResult(hits=hits, coverage=SearchCoverage(sources=sources))

    async def get(self, request: MemoryGetRequest) -> MemoryGetResult:
        ref = request.reference
        from_line, lines = request.from_line, request.lines
        if ref.fragment is not None and from_line is None and lines is None:
            start, end = parse_line_fragment(ref.fragment)
            from_line, lines = start, end - start + 1
        read = await self.manager.read_file(ref.id, from_line=from_line, lines=lines)
        if read is None:
            return MemoryGetResult(status="not_found", reference=ref)
        if not isinstance(read, LegacyReadResult):
            raise ContractError(
                f'legacy memory plugin "{self.provider_id}" returned a {type(read).__name__} '
                "from read_file, not a LegacyReadResult"
            )
        return MemoryGetResult(
            status="ok",
            reference=ref,
            text=read.text,
            from_line=read.from_line,
            lines=read.lines,
            total_lines=read.total_lines,
            truncated=read.truncated,
        )

    async def health(self) -> MemoryHealth:
        status = dict(await self.manager.status())
        raw = status.pop("status", "ready")
        state: HealthStatus = (
            "ready" if raw == "ready" else "unavailable" if raw == "unavailable" else "degraded"
        )
        message = status.pop("message", None)
        return MemoryHealth(
            status=state,
            message=redact_host_paths(message) if isinstance(message, str) else None,
            details=strip_host_paths(status),
        )

    async def close(self) -> None:
        await self.manager.close()
