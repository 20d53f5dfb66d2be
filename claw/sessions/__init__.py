"""Sessions and the memory audience their lineage resolves to.

The session values (:class:`SessionRow`), the rules every store obeys (what each
incarnation change makes of a row, the mirror both stores share) and
:func:`resolve_audience`, :func:`resolve_detached_child` and
:func:`is_lineage_current`, the pure rules the capability layer mints and checks memory
audiences with. The stores are the state backends' (:mod:`claw.state.sqlite`,
:mod:`claw.state.postgres`); ``claw.sessions.SessionStore``, ``open_session_store`` and
``SCHEMA_VERSION`` (the SQLite store's) are still found here, imported on first use:
the store imports this package's rules, so importing it here eagerly would be a cycle.
"""

from typing import TYPE_CHECKING, Any

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._changes import SessionListener as SessionListener
from ._errors import InvalidSessionError as InvalidSessionError
from ._errors import SessionError as SessionError
from ._errors import SessionExistsError as SessionExistsError
from ._errors import SessionNotFoundError as SessionNotFoundError
from ._errors import SessionSchemaError as SessionSchemaError
from ._errors import SessionStorageError as SessionStorageError
from ._lineage import MAX_LINEAGE_HOPS as MAX_LINEAGE_HOPS
from ._lineage import AudienceKind as AudienceKind
from ._lineage import LineageLink as LineageLink
from ._lineage import NoAudience as NoAudience
from ._lineage import ResolvedAudience as ResolvedAudience
from ._lineage import explain_audience as explain_audience
from ._lineage import explain_detached_child as explain_detached_child
from ._lineage import is_lineage_current as is_lineage_current
from ._lineage import resolve_audience as resolve_audience
from ._lineage import resolve_detached_child as resolve_detached_child
from ._rows import CHAT_TYPES as CHAT_TYPES
from ._rows import ChatType as ChatType
from ._rows import Incarnation as Incarnation
from ._rows import SessionRow as SessionRow
from ._rows import SessionRows as SessionRows
from ._rows import SessionSnapshot as SessionSnapshot
from ._rows import SessionView as SessionView

if TYPE_CHECKING:
    from ..state.sqlite._session_schema import SCHEMA_VERSION as SCHEMA_VERSION
    from ..state.sqlite._sessions import SessionStore as SessionStore
    from ..state.sqlite._sessions import open_session_store as open_session_store

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata


def __getattr__(name: str) -> Any:
    if name in ("SessionStore", "open_session_store"):
        from ..state.sqlite import _sessions  # noqa: PLC0415  (a cycle if eager)

        return getattr(_sessions, name)
    if name == "SCHEMA_VERSION":
        from ..state.sqlite import _session_schema  # noqa: PLC0415

        return _session_schema.SCHEMA_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
