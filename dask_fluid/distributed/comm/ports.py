"""Ports for endpoints that a launcher names before the processes that serve them start."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

__all__ = ["held_ports"]


@contextmanager
def held_ports(n: int) -> Iterator[list[int]]:
    """``n`` distinct free ports, held for the ``with`` block: bound on every address, not
    listening.

    A port merely found free and released may be taken by another process's ``bind(0)``
    before the server meant for it listens (Paddle's launcher has that race). A held port is
    never handed to another ``bind(0)``, connecting to it is refused until its server
    listens, and our servers may listen on it meanwhile: they bind with SO_REUSEADDR
    (``socket.create_server``), as the hold does.
    """
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("", 0))
        yield [s.getsockname()[1] for s in socks]
