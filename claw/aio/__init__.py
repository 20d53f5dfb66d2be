"""claw.aio: claw from asyncio code.

claw's core is Trio; asyncio code reaches it through a bridge. ``claw.aio.open_memory``
and ``claw.aio.open_host`` run ``claw.open_memory`` / ``claw.open_host`` in a Trio thread
of their own and return facades whose methods are awaited on asyncio's loop::

    async with claw.aio.open_memory("path/to/workspace") as mem:
        result = await mem.search("deploy window")

Cancelling an asyncio task cancels its call on the Trio side (and waits for it to
unwind); closing a facade closes everything it opened; errors keep their claw types.
See ``docs/asyncio.md``; ``claw.blocking`` is the same for synchronous code.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._calls import Opening as Opening
from ._host import Host as Host
from ._host import Sessions as Sessions
from ._host import open_host as open_host
from ._memory import Memory as Memory
from ._memory import open_memory as open_memory

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
