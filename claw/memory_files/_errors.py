"""The memory-file writer's errors: each names the file and what to do."""

from __future__ import annotations

from .._errors import ClawError, UnsupportedRequestError


class MemoryFileError(ClawError, RuntimeError):
    """A memory-file change could not be made (the message names the file and why)."""


class MemoryPathError(ClawError, PermissionError):
    """A path that is not a writable file of the workspace (outside it, or via a symlink)."""


class MemoryFileChangedError(MemoryFileError):
    """The file kept changing from outside (an editor) while a rewrite was prepared.

    Nothing was written: the outside change is never overwritten. Retry later.
    """


class MemoryFileBusyError(MemoryFileError, TimeoutError):
    """Another writer held the workspace's memory-file lock for too long."""


class MemoryFileTooLargeError(MemoryFileError):
    """The change would make the file larger than the caller's limit."""

    def __init__(self, message: str, *, size: int, limit: int) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class StaleReferenceError(UnsupportedRequestError):
    """The cited lines changed since they were cited; the message says what is there now."""


class BadRevisionError(UnsupportedRequestError):
    """A reference's revision that is not a revision (hex digits, 8 to 64 of them)."""


class ForgetScopeError(UnsupportedRequestError):
    """A forget would remove more than one entry without being told to remove the range."""


class RemovalNotFoundError(ClawError, LookupError):
    """No removal with that id in the workspace's undo journal."""


class NothingToRestoreError(UnsupportedRequestError):
    """The removal's text is gone for good (it was purged)."""
