"""Framed messages over plain blocking sockets: the direct data path of pserver mode.

A message is a small msgpack header (plain values only: nothing in it can run code when it is
decoded, whoever sent it) plus one byte buffer laid out as :func:`.rpc.pack_arrays`
lays it out (each array at a 64-byte aligned offset), so the receiver reads the whole buffer into
one array with a single ``recv_into`` loop and unpacks zero-copy views. The sender never packs:
:func:`send_message` gathers the arrays themselves (and the alignment padding) with
``sendmsg``, so a 25 MB push is not copied in user space before it reaches the kernel.

Every blocking call wakes at least every :data:`POLL_S` seconds to check a ``stop`` callable
(the job was aborted) and its deadline, so a peer that dies or stalls gives a specific error,
never a hang.

:class:`Connection` is what trainers and pservers hold: a greeted socket that, when both ends
can map the same ``/dev/shm`` file (:mod:`.shared_payload`), carries only headers while the
payloads of :data:`SHM_MIN_BYTES` or more go through shared memory.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import msgpack
import numpy as np

from dask_fluid.distributed.comm import shared_payload
from dask_fluid.distributed.comm.rpc import _PACK_ALIGN
from dask_fluid.distributed.comm.tls import TlsContexts, client_side

__all__ = ["MAX_HEADER_BYTES", "MAX_PAYLOAD_BYTES", "POLL_S", "SHM_MIN_BYTES", "Connection",
           "PeerClosed", "WireTimeout", "accept", "connect", "layout", "recv_message",
           "send_message", "worker_host"]

POLL_S = 0.5
_PREFIX = struct.Struct("!QQ")  # header bytes, buffer bytes
_ZEROS = bytes(_PACK_ALIGN)
#: sendmsg takes at most IOV_MAX (1024 on Linux) buffers per call
_IOV_BATCH = 512
#: a TLS socket has no sendmsg: it writes one buffer (at most this much) per call
_TLS_CHUNK = 1 << 20
#: smaller payloads go over the socket even between processes of one machine: below this the
#: socket costs no more than touching the segment
SHM_MIN_BYTES = 1 << 16
#: a header larger than this is not one of ours: the connection is dropped before allocating it
MAX_HEADER_BYTES = 1 << 20
#: nor is a payload larger than this (1 TiB)
MAX_PAYLOAD_BYTES = 1 << 40


def _encode(header: Mapping[str, Any]) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def _decode(head: bytes | bytearray) -> dict[str, Any]:
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=True)
    except Exception as exc:  # any malformed header ends that connection, nothing else
        raise PeerClosed(f"the peer sent a header that is not one of ours ({exc})") from None
    if not isinstance(header, dict):
        raise PeerClosed("the peer sent a header that is not a map")
    return header


class PeerClosed(ConnectionError):
    """The other side closed the connection (its worker died, or it was aborted)."""


class WireTimeout(TimeoutError):
    """The deadline passed before the message was sent or received completely."""


def worker_host(address: str) -> str:
    """The host part of a Dask address (127.0.0.1 for in-process workers)."""
    return urlsplit(address).hostname or "127.0.0.1"


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
        if value.size == 0:  # e.g. the ids a batch has for a pserver: none (cast refuses 0s)
            continue
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
    _send_frames(sock, _encode({**header, "meta": meta}), total, _pieces(arrays), deadline,
                 stop)


def _poll(call: Callable[..., int], arg: Any, deadline: float, stop: Callable[[], bool],
          doing: str, late: str) -> int | None:
    """``call(arg)`` on a socket: its result, or None when it timed out (POLL_S) before
    ``deadline``."""
    if stop():
        raise PeerClosed(f"the job was aborted while {doing}")
    try:
        return call(arg)
    except (TimeoutError, BlockingIOError):
        if time.monotonic() > deadline:
            raise WireTimeout(late) from None
        return None
    except OSError as exc:
        raise PeerClosed(f"{type(exc).__name__}: {exc}") from exc


def _tls_send(sock: ssl.SSLSocket) -> Callable[[list[memoryview]], int]:
    # a write that timed out is retried with the same buffer, as OpenSSL requires
    return lambda views: sock.send(views[0][:_TLS_CHUNK])


def _send_frames(sock: socket.socket, head: bytes, total: int, pieces: list[memoryview],
                 deadline: float, stop: Callable[[], bool]) -> None:
    views = [memoryview(_PREFIX.pack(len(head), total)), memoryview(head), *pieces]
    write = _tls_send(sock) if isinstance(sock, ssl.SSLSocket) else sock.sendmsg
    i = 0
    while i < len(views):
        sent = _poll(write, views[i:i + _IOV_BATCH], deadline, stop, "sending",
                     "the peer did not take the message in time")
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
        k = _poll(sock.recv_into, view[got:], deadline, stop, "receiving", "no answer in time")
        if k == 0:
            raise PeerClosed("connection closed by the peer")
        got += k or 0


def recv_message(sock: socket.socket, *, deadline: float,
                 stop: Callable[[], bool] = lambda: False) -> tuple[dict[str, Any], np.ndarray]:
    """Receive one message: ``(header, buffer)``; unpack with ``rpc.unpack_arrays(header["meta"],
    buffer)``. Errors as :func:`send_message`."""
    prefix = bytearray(_PREFIX.size)
    _recv_into(sock, memoryview(prefix), deadline, stop)
    head_len, total = _PREFIX.unpack(prefix)
    if head_len > MAX_HEADER_BYTES or total > MAX_PAYLOAD_BYTES:
        raise PeerClosed(f"the peer announced a {head_len}-byte header and a {total}-byte "
                         "payload: not a message of ours")
    head = bytearray(head_len)
    _recv_into(sock, memoryview(head), deadline, stop)
    buf = np.empty(total, np.uint8)
    if total:
        _recv_into(sock, memoryview(buf), deadline, stop)
    return _decode(head), buf


class Connection:
    """A greeted socket between two processes, with shared-memory payloads when both are on
    one machine (``shared``). One request and its reply at a time, as the data paths use it.

    Parameters
    ----------
    sock : socket.socket
        Connected, polling every :data:`POLL_S`.
    shared : bool
        Whether both ends map the same ``/dev/shm`` (decided by :func:`connect` / :func:`accept`).
    """

    def __init__(self, sock: socket.socket, shared: bool) -> None:
        self.sock = sock
        self.shared = shared
        self._out = shared_payload.OutSegment() if shared else None
        self._in = shared_payload.InSegment() if shared else None

    @property
    def sends_shared(self) -> bool:
        """Whether payloads of :data:`SHM_MIN_BYTES` or more go through shared memory (the
        socket then only carries headers and small payloads, which never block a sender whose
        peer reads one message at a time)."""
        return self._out is not None and not self._out.failed

    def send(self, header: Mapping[str, Any], arrays: Mapping[str, np.ndarray] | None = None,
             *, deadline: float, stop: Callable[[], bool] = lambda: False) -> None:
        """:func:`send_message`, the payload through shared memory when it can."""
        arrays = arrays or {}
        meta, total = layout(arrays)
        head = {**header, "meta": meta}
        entry = None
        if self._out is not None and total >= SHM_MIN_BYTES:
            entry = self._out.write(arrays, meta, total)
        if entry is None:
            _send_frames(self.sock, _encode(head), total, _pieces(arrays), deadline, stop)
        else:
            _send_frames(self.sock, _encode({**head, "shm": entry}), 0, [], deadline, stop)

    def recv(self, *, deadline: float, stop: Callable[[], bool] = lambda: False,
             copy: bool = False) -> tuple[dict[str, Any], np.ndarray]:
        """:func:`recv_message`. A shared-memory payload is a view into the peer's segment,
        valid until the peer's next message, unless ``copy``."""
        header, buf = recv_message(self.sock, deadline=deadline, stop=stop)
        entry = header.pop("shm", None)
        if entry is not None:
            if self._in is None:
                raise PeerClosed("the peer sent a shared-memory payload on a socket-only "
                                 "connection")
            try:
                buf = self._in.read(entry)
            except (KeyError, TypeError, ValueError) as exc:
                raise PeerClosed(f"the peer sent a bad shared-memory entry ({exc})") from None
            except OSError as exc:
                raise PeerClosed(f"the peer's shared-memory segment is gone: {exc}") from exc
            if copy:
                buf = buf.copy()
        return header, buf

    def shutdown(self) -> None:
        """Wake a thread blocked on this connection (any thread may call it)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()
        if self._out is not None:
            self._out.close()


def connect(host: str, port: int, handshake: Callable[[socket.socket], None],
            timeout_s: float, tls: TlsContexts | None = None) -> Connection:
    """Open a connection (TLS with ``tls``'s client context), run ``handshake`` on it
    (:func:`.auth.client_handshake`), agree with the peer on shared memory (a probe file it
    must be able to read), and leave the socket polling every :data:`POLL_S`."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    probe = None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock = client_side(sock, tls)
        handshake(sock)
        sock.settimeout(POLL_S)
        deadline = time.monotonic() + timeout_s
        if shared_payload.available():
            with contextlib.suppress(OSError):
                probe = shared_payload.make_probe()
        send_message(sock, {"shm_probe": probe}, deadline=deadline)
        answer, _ = recv_message(sock, deadline=deadline)
        return Connection(sock, bool(answer.get("shm")) and probe is not None)
    except BaseException:
        sock.close()
        raise
    finally:
        if probe is not None:
            shared_payload.remove(probe[0])


def accept(sock: socket.socket, timeout_s: float) -> Connection:
    """The server's side of :func:`connect`, after the handshake."""
    deadline = time.monotonic() + timeout_s
    hello, _ = recv_message(sock, deadline=deadline)
    probe = hello.get("shm_probe")
    if probe is not None and not (isinstance(probe, list) and len(probe) == 2 and isinstance(
            probe[0], str) and isinstance(probe[1], bytes)):
        raise PeerClosed(f"the peer's hello has a malformed shm_probe {probe!r}")
    shared = probe is not None and shared_payload.available() and \
        shared_payload.check_probe(*probe)
    send_message(sock, {"shm": shared}, deadline=deadline)
    return Connection(sock, shared)
