"""Errors of the pre-compaction memory flush, rooted in :class:`~claw.ClawError`."""

from __future__ import annotations

from .._errors import ClawError, ContractError


class FlushPlanError(ContractError):
    """A memory plugin's flush plan breaks its contract (bad fields, wrong type, bad path).

    Raised when a plan is built with invalid fields; the host reports a plan it cannot
    use as a skipped or failed flush that names the plugin.
    """


class FlushToolError(ClawError, ValueError):
    """A flush tool refused a call: a path outside its target, or outside the workspace.

    Reported to the flush model as an error tool result; it never ends the flush run.
    """
