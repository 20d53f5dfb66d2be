"""claw's MCP server: memory tools for editors and desktop agents (``claw mcp``).

Needs the ``mcp`` extra, the official MCP SDK and hypercorn (in the checkout:
``make extras EXTRAS=mcp``; see README.md, "Installing extras").
:class:`MemoryMcpServer` serves one host's memory over stdio
(:meth:`MemoryMcpServer.serve_stdio`) or streamable HTTP
(:meth:`MemoryMcpServer.serve_http`); docs/mcp.md says which authority a client acts
with.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._http import MCP_PATH as MCP_PATH
from ._server import SERVER_NAME as SERVER_NAME
from ._server import MemoryMcpServer as MemoryMcpServer

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
