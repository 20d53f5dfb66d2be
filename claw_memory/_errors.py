"""Errors raised by Memory Core.

Each subclasses :class:`claw.plugin_sdk.ClawError` and the nearest builtin, so that
generic handlers (``except RuntimeError``) keep working. Third-party failures
(tantivy's bare ``ValueError``, sqlite, httpx) are wrapped at the boundary into one
of these.
"""

from __future__ import annotations

from claw.plugin_sdk import ClawError, ProviderError, UnsupportedRequestError


class MemoryCoreError(ProviderError):
    """Base of the Memory Core runtime failures (not raised by itself).

    A :class:`~claw.plugin_sdk.ProviderError` (a ``RuntimeError``): the provider
    failed, which a gateway answers ``UNAVAILABLE``, never ``INTERNAL``.
    """


class IndexLockedError(MemoryCoreError):
    """Another process rebuilt the index directory with different settings.

    Any number of processes share one index directory as long as they agree on what
    it is built from (embedder, chunking, sources); one that opens it with other
    settings rebuilds it, and the others can no longer follow it.
    """


class IndexBusyError(MemoryCoreError):
    """Another process held the index's writer lease longer than a writer waits for it.

    Retryable: the other process's write ends (or the process exits and the kernel
    drops its lease), and the next attempt takes the lease.
    """


class IndexClosedError(MemoryCoreError):
    """The index was used after it was closed."""


class IndexStoreError(MemoryCoreError):
    """The index's SQLite database failed; the message names the file and SQLite's cause."""


class IndexCorruptError(IndexStoreError):
    """The index's SQLite database is corrupt (or not a database). It is derived data:
    opening the index sets it aside and rebuilds it from the sources."""


class SourcePathError(ClawError, PermissionError):
    """A read asked for a path that is not one of the index's sources."""


class InvalidSearchError(UnsupportedRequestError):
    """A search, read or forget request has an invalid argument (names it and the fix).

    An :class:`~claw.plugin_sdk.UnsupportedRequestError` (a ``ValueError``): the
    caller's mistake, which the gateway answers with ``INVALID_REQUEST``.
    """
