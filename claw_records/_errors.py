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


class RecordsSchemaError(RecordsError):
    """The database holds a Memory Records schema this version does not know.

    Raised at start instead of reading or writing rows of a shape it cannot vouch for;
    the message names the version found and the one expected.
    """


class RecordsUnavailableError(RecordsError):
    """Memory Records is not running (the host is closed, or its service never started)."""


class InvalidRecordError(UnsupportedRequestError):
    """A record request has an invalid argument; the message names it and the fix."""


class StaleRecordError(InvalidRecordError):
    """An update named a revision of a record that has changed since (search again)."""
