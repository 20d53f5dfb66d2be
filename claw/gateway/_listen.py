"""One port served by several processes: ``SO_REUSEPORT`` sockets.

``claw serve --workers N`` runs N worker processes that each listen on the same
address with ``SO_REUSEPORT``; on Linux the kernel spreads incoming connections over
their listening sockets (by a hash of the connection's addresses), so no worker wakes
for another's connection and each keeps its own accept queue.

The supervisor first binds the address itself, with ``SO_REUSEPORT`` but without
listening (:func:`reserve_port`): that picks the port once when port 0 was asked for,
and holds it while a worker restarts, so no other program can take it in between. A
socket that never listens receives no connections, so the supervisor's socket is
never handed one. The alternative, one listening socket created by the supervisor and
inherited by every worker, would survive a worker's death without losing its queued
connections, but every worker would wake for every connection and the busiest would
still race the idlest for it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from .._errors import ClawError

# The backlog trio's open_tcp_listeners uses by default (its own cap).
_BACKLOG = 0xFFFF


class ReusePortUnsupportedError(ClawError, OSError):
    """This platform has no ``SO_REUSEPORT``, so several processes cannot share a port."""


@attrs.frozen
class BindAddress:
    """One address every worker binds: a socket family and a socket address."""

    family: int
    sockaddr: tuple[Any, ...]


def _reuse_port_option() -> int:
    option = getattr(socket, "SO_REUSEPORT", None)
    if option is None:
        raise ReusePortUnsupportedError(
            "serving with more than one worker needs SO_REUSEPORT, which this platform "
            "lacks; use --workers 1"
        )
    return int(option)


def _prepare(sock: socket.socket | trio.socket.SocketType, family: int) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, _reuse_port_option(), 1)
    if family == socket.AF_INET6:
        # One socket per family, as trio's open_tcp_listeners does.
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)


async def reserve_port(host: str, port: int) -> list[socket.socket]:
    """Bind (and never listen on) ``host``:``port`` with ``SO_REUSEPORT``.

    Returns one bound socket per address ``host`` resolves to; with port 0 only the
    first address is kept, as :meth:`Gateway.serve` does, so that the one port the
    kernel picked is the port of every socket. The caller closes the sockets.
    """
    _reuse_port_option()
    infos = await trio.socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    if port == 0:
        infos = infos[:1]
    reserved: list[socket.socket] = []
    try:
        for family, kind, proto, _, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            reserved.append(sock)
            _prepare(sock, family)
            sock.bind(sockaddr)
    except BaseException:
        for sock in reserved:
            sock.close()
        raise
    return reserved


def bind_addresses(reserved: Sequence[socket.socket]) -> tuple[BindAddress, ...]:
    """The addresses (with the chosen port) a worker binds to share ``reserved``'s port."""
    return tuple(BindAddress(family=s.family, sockaddr=s.getsockname()) for s in reserved)


async def open_reuse_port_listeners(
    addresses: Sequence[BindAddress],
) -> list[trio.SocketListener]:
    """Listen on each of ``addresses`` with ``SO_REUSEPORT`` (a worker's listeners)."""
    listeners: list[trio.SocketListener] = []
    try:
        for address in addresses:
            sock = trio.socket.socket(address.family, socket.SOCK_STREAM)
            try:
                _prepare(sock, address.family)
                await sock.bind(address.sockaddr)
                sock.listen(_BACKLOG)
            except BaseException:
                sock.close()
                raise
            listeners.append(trio.SocketListener(sock))
    except BaseException:
        for listener in listeners:
            await trio.aclose_forcefully(listener)
        raise
    return listeners
