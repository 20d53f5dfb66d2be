"""claw.blocking: claw from synchronous code (scripts, web handlers, notebooks).

``claw.blocking.open_memory`` and ``claw.blocking.open_host`` run ``claw.open_memory`` /
``claw.open_host`` in a Trio thread of their own and return facades whose methods block
until the Trio side returns::

    with claw.blocking.open_memory("path/to/workspace") as mem:
        result = mem.search("deploy window")

Any number of threads may call a facade at once; Ctrl-C while a call waits cancels it
in Trio; closing a facade closes everything it opened; errors keep their claw types.
See ``docs/asyncio.md``; ``claw.aio`` is the same for asyncio code.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._host import Host as Host
from ._host import Sessions as Sessions
from ._host import open_host as open_host
from ._memory import Memory as Memory
from ._memory import open_memory as open_memory

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
