"""The data paths' connections: framed messages over real sockets, payloads through shared
memory between processes of one machine, and nothing left behind in /dev/shm."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest

from dask_fluid.distributed.comm import shared_payload, wire
from dask_fluid.distributed.comm.rpc import unpack_arrays

needs_shm = pytest.mark.skipif(not shared_payload.available(),
                               reason="no writable /dev/shm on this machine")


def _server_saw(results: list, timeout_s: float = 5.0) -> list:
    """``results`` once the server thread recorded its side: it does so after sending its
    reply, so the client can get there first."""
    give_up = time.monotonic() + timeout_s
    while not results and time.monotonic() < give_up:
        time.sleep(0.001)
    return results


def _segments() -> set[str]:
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm") if n.startswith("dask-fluid-")}


def _echo_server(greeting: bytes, results: list):
    """A server thread that accepts one connection and echoes every message doubled."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        sock, _ = listener.accept()
        listener.close()
        assert sock.recv(len(greeting), socket.MSG_WAITALL) == greeting
        sock.settimeout(wire.POLL_S)
        conn = wire.accept(sock, 5)
        results.append(conn.shared)
        while True:
            try:
                header, buf = conn.recv(deadline=time.monotonic() + 10)
            except wire.PeerClosed:
                break
            arrays = unpack_arrays(header["meta"], buf) if header["meta"]["names"] else {}
            conn.send({"n": header["n"]}, {k: v * 2 for k, v in arrays.items()},
                      deadline=time.monotonic() + 10)
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


@needs_shm
def test_large_payloads_go_through_shared_memory_and_small_ones_over_the_socket():
    before = _segments()
    seen: list = []
    port, thread = _echo_server(b"hello", seen)
    conn = wire.connect("127.0.0.1", port, lambda sock: sock.sendall(b"hello"), 5)
    try:
        assert conn.shared and _server_saw(seen) == [True]
        rng = np.random.default_rng(0)
        # small (socket), large (segment created), larger (segment grows), odd dtypes/shapes
        for n, size in enumerate([10, 300_000, 3_000_000, 40_000, 2_000_000]):
            arrays = {"a": rng.standard_normal(size).astype(np.float32),
                      "b": np.arange(7, dtype=np.int64).reshape(7, 1),
                      "c": rng.standard_normal((3, 5))[:, ::2]}  # not contiguous
            conn.send({"n": n}, arrays, deadline=time.monotonic() + 10)
            header, buf = conn.recv(deadline=time.monotonic() + 10, copy=True)
            assert header["n"] == n and "shm" not in header
            out = unpack_arrays(header["meta"], buf)
            for k, v in arrays.items():
                np.testing.assert_array_equal(out[k], v * 2)
                assert out[k].dtype == v.dtype
        # the receiver unlinked every segment it mapped: /dev/shm holds nothing of ours
        assert _segments() == before
    finally:
        conn.close()
        thread.join(10)
    assert _segments() == before


@needs_shm
@pytest.mark.parametrize("value", ["1", "yes"])
def test_dask_fluid_shm_disable_keeps_the_payloads_on_the_socket(monkeypatch, value):
    monkeypatch.setenv(shared_payload.DISABLE_ENV, value)
    assert not shared_payload.available()
    before = _segments()
    seen: list = []
    port, thread = _echo_server(b"hello", seen)
    conn = wire.connect("127.0.0.1", port, lambda sock: sock.sendall(b"hello"), 5)
    try:
        assert not conn.shared and not conn.sends_shared and _server_saw(seen) == [False]
        x = np.arange(1_000_000, dtype=np.float32)  # far above SHM_MIN_BYTES
        conn.send({"n": 0}, {"x": x}, deadline=time.monotonic() + 10)
        header, buf = conn.recv(deadline=time.monotonic() + 10)
        np.testing.assert_array_equal(unpack_arrays(header["meta"], buf)["x"], 2 * x)
        assert _segments() == before  # not even a probe file
    finally:
        conn.close()
        thread.join(10)


def test_dask_fluid_shm_disable_0_or_empty_leaves_shared_memory_on(monkeypatch):
    for value in ("0", "", " "):
        monkeypatch.setenv(shared_payload.DISABLE_ENV, value)
        assert shared_payload.available() == (os.path.isdir("/dev/shm")
                                              and os.access("/dev/shm", os.W_OK))


def test_a_socket_only_connection_carries_the_payload_itself():
    a, b = socket.socketpair()
    a.settimeout(wire.POLL_S)
    b.settimeout(wire.POLL_S)
    left, right = wire.Connection(a, False), wire.Connection(b, False)
    try:
        x = np.arange(200_000, dtype=np.float64)  # more than the socket buffers hold
        sender = threading.Thread(target=left.send, args=({"k": 1}, {"x": x}),
                                  kwargs={"deadline": time.monotonic() + 5})
        sender.start()
        header, buf = right.recv(deadline=time.monotonic() + 5)
        sender.join(5)
        np.testing.assert_array_equal(unpack_arrays(header["meta"], buf)["x"], x)
    finally:
        left.close()
        right.close()


@needs_shm
def test_a_probe_from_elsewhere_is_refused():
    assert not shared_payload.check_probe("dask-fluid-probe-0000000000000000", b"x" * 16)
    name, nonce = shared_payload.make_probe()
    try:
        assert shared_payload.check_probe(name, nonce)
        assert not shared_payload.check_probe(name, b"y" * 16)
    finally:
        shared_payload.remove(name)
    with pytest.raises(ValueError, match="not a dask_fluid shared-memory segment"):
        shared_payload._path("../etc/passwd")


@needs_shm
def test_a_full_dev_shm_falls_back_to_the_socket():
    before = _segments()
    segment = shared_payload.OutSegment()
    # far more than any /dev/shm: posix_fallocate fails now instead of SIGBUS later
    meta = {"offsets": [], "dtypes": [], "shapes": []}
    assert segment.write({}, meta, 1 << 50) is None
    assert segment.failed and segment.write({}, meta, 10) is None
    assert _segments() == before


def test_empty_arrays_travel_between_full_ones():
    # a pserver shard often gets no ids of a batch: zero-size arrays must frame like the rest
    a, b = socket.socketpair()
    try:
        arrays = {"none": np.zeros((0, 1), np.int64), "ids": np.arange(3, dtype=np.int64),
                  "empty_rows": np.zeros((0, 4), np.float32), "w": np.ones((2, 2), np.float32)}
        deadline = time.monotonic() + 5
        wire.send_message(a, {"method": "prefetch"}, arrays, deadline=deadline)
        header, buf = wire.recv_message(b, deadline=deadline)
        got = unpack_arrays(header["meta"], buf)
        for name, value in arrays.items():
            assert got[name].shape == value.shape and got[name].dtype == value.dtype
            np.testing.assert_array_equal(got[name], value)
    finally:
        a.close()
        b.close()
