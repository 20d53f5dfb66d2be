"""Errors raised by Memory Records.

Each subclasses :class:`claw.plugin_sdk.ClawError` and the nearest builtin, through the
SDK's :class:`~claw.plugin_sdk.ProviderError` (the provider failed: a gateway answers
``UNAVAILABLE``) or :class:`~claw.plugin_sdk.UnsupportedRequestError` (the caller's
mistake: ``INVALID_REQUEST``).
"""

from __future__ import annotations

from claw.plugin_sdk import ProviderError, UnsupportedRequestError


class RecordsError(ProviderError):
    """Base of the Memory Records runtime failures (not raised by itself)."""


class RecordsUnavailableError(RecordsError):
    """Memory Records is not running (the host is closed, or its service never started)."""


class InvalidRecordError(UnsupportedRequestError):
    """A record request has an invalid argument; the message names it and the fix."""


class StaleRecordError(InvalidRecordError):
    """An update named a revision of a record that has changed since (search again)."""
