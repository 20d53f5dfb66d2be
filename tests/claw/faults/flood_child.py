"""Child process: hold N silent TCP sockets to HOST:PORT, reopening each one dropped.

Usage: python flood_child.py HOST PORT N. Prints "READY" once N are open, and on end of
stdin prints "OPENED <n> DROPPED <n> REFUSED <n>" and exits.
"""

from __future__ import annotations

import selectors
import socket
import sys
import time


def main() -> int:
    host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sel = selectors.DefaultSelector()
    opened = dropped = refused = 0
    ready = False

    def open_one() -> None:
        nonlocal opened, refused
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect((host, port))
        except OSError:
            refused += 1
            sock.close()
            time.sleep(0.01)
            return
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ)
        opened += 1

    sel.register(sys.stdin, selectors.EVENT_READ)
    for _ in range(count):
        open_one()
    while True:
        live = len(sel.get_map()) - 1
        while live < count:
            open_one()
            live = len(sel.get_map()) - 1
        if not ready:
            print("READY", flush=True)
            ready = True
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is sys.stdin:
                if not sys.stdin.readline():
                    print(f"OPENED {opened} DROPPED {dropped} REFUSED {refused}", flush=True)
                    return 0
                continue
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if not data:
                sel.unregister(sock)
                sock.close()
                dropped += 1


if __name__ == "__main__":
    sys.exit(main())
