"""claw.jupyter: drive claw's Trio API from synchronous code such as notebook cells.

``portal = start_portal()`` runs Trio in a background thread; ``portal.run(fn, *args)``
awaits ``fn(*args)`` there and returns its result; ``portal.enter_async_context(cm)``
keeps ``cm`` (a host, a gateway client) open across cells until ``portal.stop()``.
``table(items)`` draws sessions, hits or events as one table (search results, hits,
sessions and health draw themselves). See ``docs/jupyter.md``.
"""

from .._display import Table as Table
from .._display import table as table
from .._util import fixup_module_metadata as _fixup_module_metadata
from ._portal import PortalClosedError as PortalClosedError
from ._portal import TrioPortal as TrioPortal
from ._portal import start_portal as start_portal

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
