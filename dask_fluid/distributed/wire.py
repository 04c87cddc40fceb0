"""Framed messages over plain blocking sockets: the direct data path of pserver mode.

A message is a small pickled header plus one byte buffer laid out as :func:`.rpc.pack_arrays`
lays it out (each array at a 64-byte aligned offset), so the receiver reads the whole buffer into
one array with a single ``recv_into`` loop and unpacks zero-copy views. The sender never packs:
:func:`send_message` gathers the arrays themselves (and the alignment padding) with
``sendmsg``, so a 25 MB push is not copied in user space before it reaches the kernel.

Every blocking call wakes at least every :data:`POLL_S` seconds to check a ``stop`` callable
(the job was aborted) and its deadline, so a peer that dies or stalls gives a specific error,
never a hang.
"""

from __future__ import annotations

import hashlib
import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from distributed.protocol import pickle

from dask_fluid.distributed.rpc import _PACK_ALIGN

__all__ = ["POLL_S", "PeerClosed", "WireTimeout", "layout", "recv_message", "send_message",
           "token", "worker_host"]

POLL_S = 0.5
_PREFIX = struct.Struct("!QQ")  # header bytes, buffer bytes
_ZEROS = bytes(_PACK_ALIGN)
#: sendmsg takes at most IOV_MAX (1024 on Linux) buffers per call
_IOV_BATCH = 512


class PeerClosed(ConnectionError):
    """The other side closed the connection (its worker died, or it was aborted)."""


class WireTimeout(TimeoutError):
    """The deadline passed before the message was sent or received completely."""


def worker_host(address: str) -> str:
    """The host part of a Dask address (127.0.0.1 for in-process workers)."""
    return urlsplit(address).hostname or "127.0.0.1"


def token(job: str, who: str) -> bytes:
    """The 32-byte greeting that proves a connecting peer belongs to ``job``."""
    return hashlib.sha256(f"{job}/{who}".encode()).digest()


def layout(arrays: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], int]:
    """The :func:`.rpc.pack_arrays` meta of ``arrays`` and the total buffer size, no copying."""
    offsets, dtypes, shapes = [], [], []
    total = 0
    for value in arrays.values():
        offsets.append(total)
        dtypes.append(value.dtype.str)
        shapes.append(list(value.shape))
        total += -(-value.nbytes // _PACK_ALIGN) * _PACK_ALIGN
    return {"names": list(arrays), "dtypes": dtypes, "shapes": shapes, "offsets": offsets}, total


def _pieces(arrays: Mapping[str, np.ndarray]) -> list[memoryview]:
    out = []
    for value in arrays.values():
        view = memoryview(np.ascontiguousarray(value)).cast("B")
        out.append(view)
        pad = -len(view) % _PACK_ALIGN
        if pad:
            out.append(memoryview(_ZEROS)[:pad])
    return out


def send_message(sock: socket.socket, header: Mapping[str, Any],
                 arrays: Mapping[str, np.ndarray] | None = None, *,
                 deadline: float, stop: Callable[[], bool] = lambda: False) -> None:
    """Send ``header`` and ``arrays``; the header gets ``"meta"`` (the arrays' layout).

    Raises
    ------
    PeerClosed
        The connection broke, or ``stop()`` became true.
    WireTimeout
        ``deadline`` (``time.monotonic()`` seconds) passed.
    """
    arrays = arrays or {}
    meta, total = layout(arrays)
    head = pickle.dumps({**header, "meta": meta})
    views = [memoryview(_PREFIX.pack(len(head), total)), memoryview(head), *_pieces(arrays)]
    i = 0
    while i < len(views):
        if stop():
            raise PeerClosed("the job was aborted while sending")
        try:
            sent = sock.sendmsg(views[i:i + _IOV_BATCH])
        except (TimeoutError, BlockingIOError):
            if time.monotonic() > deadline:
                raise WireTimeout("the peer did not take the message in time") from None
            continue
        except OSError as exc:
            raise PeerClosed(f"{type(exc).__name__}: {exc}") from exc
        while sent and i < len(views):  # drop what went out, keep the rest of a partial view
            if sent >= len(views[i]):
                sent -= len(views[i])
                i += 1
            else:
                views[i] = views[i][sent:]
                sent = 0


def _recv_into(sock: socket.socket, view: memoryview, deadline: float,
               stop: Callable[[], bool]) -> None:
    got = 0
    while got < len(view):
        if stop():
            raise PeerClosed("the job was aborted while receiving")
        try:
            k = sock.recv_into(view[got:])
        except (TimeoutError, BlockingIOError):
            if time.monotonic() > deadline:
                raise WireTimeout("no answer in time") from None
            continue
        except OSError as exc:
            raise PeerClosed(f"{type(exc).__name__}: {exc}") from exc
        if k == 0:
            raise PeerClosed("connection closed by the peer")
        got += k


def recv_message(sock: socket.socket, *, deadline: float,
                 stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], np.ndarray]:
    """Receive one message: ``(header, buffer)``; unpack with ``rpc.unpack_arrays(header["meta"],
    buffer)``. Errors as :func:`send_message`."""
    prefix = bytearray(_PREFIX.size)
    _recv_into(sock, memoryview(prefix), deadline, stop)
    head_len, total = _PREFIX.unpack(prefix)
    head = bytearray(head_len)
    _recv_into(sock, memoryview(head), deadline, stop)
    buf = np.empty(total, np.uint8)
    if total:
        _recv_into(sock, memoryview(buf), deadline, stop)
    return pickle.loads(head), buf


def connect(host: str, port: int, greeting: bytes, timeout_s: float) -> socket.socket:
    """Open a connection, send ``greeting`` and leave the socket polling every :data:`POLL_S`."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(greeting)
        sock.settimeout(POLL_S)
    except BaseException:
        sock.close()
        raise
    return sock
