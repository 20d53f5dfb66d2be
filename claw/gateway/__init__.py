"""The claw gateway: methods over WebSocket for token-authenticated operators.

The server (:class:`Gateway`) maps each connection to capabilities it minted; no
capability crosses the wire. The frames are described in ARCHITECTURE.md ("The
gateway"); :func:`open_gateway_client` speaks them from Python.
"""

from .._util import fixup_module_metadata as _fixup_module_metadata
from ._auth import READ_SCOPE as READ_SCOPE
from ._client import GatewayClient as GatewayClient
from ._client import open_gateway_client as open_gateway_client
from ._client import open_in_memory_gateway_client as open_in_memory_gateway_client
from ._errors import ERROR_CODES as ERROR_CODES
from ._errors import ErrorCode as ErrorCode
from ._errors import GatewayConnectionError as GatewayConnectionError
from ._errors import GatewayError as GatewayError
from ._errors import GatewayRequestError as GatewayRequestError
from ._methods import GatewayHandler as GatewayHandler
from ._methods import GatewayMethod as GatewayMethod
from ._methods import GatewayRequestContext as GatewayRequestContext
from ._protocol import RequestId as RequestId
from ._server import Gateway as Gateway
from ._server import GatewayAddress as GatewayAddress
from ._server import GatewayConnectionStatistics as GatewayConnectionStatistics
from ._server import GatewayStatistics as GatewayStatistics
from ._server import run_gateway_until_signal as run_gateway_until_signal

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
