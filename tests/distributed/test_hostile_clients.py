"""Hostile clients against a pserver serving a real training job over its direct data path, and
against a collective ring's links: garbage, oversize lengths, malicious pickles, replayed
handshakes, slow-loris, wrong secrets, forged abort notices, a valid-looking hello with bad
fields, an impostor listening on a neighbour's endpoint. Nothing executes, no connection but the
bad one is dropped, and the job finishes with the parameters of local training."""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.distributed import DistributedTrainingError
from dask_fluid.distributed.collective import links
from dask_fluid.distributed.collective.tcp_ring import EndpointRingCommunicator
from dask_fluid.distributed.comm import wire
from dask_fluid.distributed.comm.auth import HandshakeError, client_handshake
from dask_fluid.distributed.pserver.client import DirectClient
from dask_fluid.distributed.pserver.ops import CLIENT_KEY, SERVE_KEY
from dask_fluid.distributed.pserver.shard import ServeOptions
from dask_fluid.executor import Executor, Scope
from dask_fluid.flags import RPCFlags

from ..transpiler.models import reference_mlp

SECRET = b"the-job-secret"
FLAGS = RPCFlags(deadline_ms=20000)


class _Boom:
    """Unpickling this would create a file: the test checks that it never does."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _pserver(ep: str, done: dict) -> threading.Thread:
    main, startup, _ = reference_mlp()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
    prog = t.get_pserver_program(ep)
    scope = Scope()
    exe = Executor()
    exe.run(t.get_startup_program(ep, prog), scope=scope)
    exe.host_context[SERVE_KEY] = ServeOptions(secret=SECRET, flags=FLAGS)

    def run():
        try:
            exe.run(prog, scope=scope)
            done["scope"] = scope
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            done["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _train(ep: str, steps: int = 4) -> tuple[list[float], dict]:
    main, startup, loss = reference_mlp()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, startup_program=startup, pservers=ep, trainers=1)
    exe, scope = Executor(), Scope()
    exe.host_context[CLIENT_KEY] = DirectClient(0, FLAGS, True, secret=SECRET)
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    losses = []
    prog = t.get_trainer_program()
    for _ in range(steps):
        feed = {"x": rng.normal(size=(16, 64)).astype(np.float32),
                "y": rng.integers(0, 10, (16, 1))}
        losses.append(float(exe.run(prog, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
    exe.close()
    return losses, {n: scope.get(n) for n in ("fc_0.w_0", "fc_2.b_0")}


def _local(steps: int = 4) -> list[float]:
    main, startup, loss = reference_mlp()
    exe, scope = Executor(), Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    out = []
    for _ in range(steps):
        feed = {"x": rng.normal(size=(16, 64)).astype(np.float32),
                "y": rng.integers(0, 10, (16, 1))}
        out.append(float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]))
    return out


def _hung_up(sock: socket.socket) -> bool:
    sock.settimeout(10)
    try:
        while sock.recv(4096):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


class _Recorder:
    """A socket stand-in that records what a real client handshake sends."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.sent = sock, b""

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self.sent += data
        self.sock.sendall(data)


@pytest.mark.slow
def test_hostile_clients_change_nothing(tmp_path, held_port):
    port = held_port()
    ep = f"127.0.0.1:{port}"
    done: dict = {}
    server = _pserver(ep, done)
    marker = str(tmp_path / "pwned")
    deadline = time.monotonic() + 10
    while True:  # wait for the pserver to listen
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    # slow-loris: connects and sends nothing, for longer than everything below takes
    loris = socket.create_connection(("127.0.0.1", port))
    # garbage instead of a handshake
    s = socket.create_connection(("127.0.0.1", port))
    s.recv(16)
    s.sendall(os.urandom(52))
    assert _hung_up(s)
    # a malicious pickle and an oversize length as the "handshake"
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(pickle.dumps(_Boom(marker)) + struct.pack("!QQ", 1 << 62, 1 << 62))
    assert _hung_up(s)
    # a replayed handshake: record a real one, replay its answer to a fresh challenge
    s = socket.create_connection(("127.0.0.1", port))
    rec = _Recorder(s)
    client_handshake(rec, SECRET, ep, 0)
    s.close()
    s = socket.create_connection(("127.0.0.1", port))
    s.recv(16)
    s.sendall(rec.sent)
    assert _hung_up(s)
    # the wrong secret: refused, and the server proves nothing to it
    s = socket.create_connection(("127.0.0.1", port))
    with pytest.raises(HandshakeError):
        client_handshake(s, b"guess", ep, 0)
    s.close()
    # the right secret, then a hello with bad fields, then a pickled header: each drops only
    # that connection (the accept loop lives on)
    s = socket.create_connection(("127.0.0.1", port))
    client_handshake(s, SECRET, ep, 0)
    wire.send_message(s, {"shm_probe": 7}, deadline=time.monotonic() + 5)
    assert _hung_up(s)
    s = socket.create_connection(("127.0.0.1", port))
    client_handshake(s, SECRET, ep, 0)
    head = pickle.dumps(_Boom(marker))
    s.sendall(struct.pack("!QQ", len(head), 0) + head)
    assert _hung_up(s)

    # the real trainer trains through all of it, exactly as local training does
    losses, _ = _train(ep)
    np.testing.assert_allclose(losses, _local(), rtol=1e-5, atol=1e-6)
    server.join(30)
    assert not server.is_alive() and "error" not in done, done.get("error")
    assert not os.path.exists(marker)  # no pickle from a socket was ever loaded
    loris.close()


def test_wire_refuses_oversize_and_non_map_headers():
    a, b = socket.socketpair()
    try:
        a.sendall(struct.pack("!QQ", wire.MAX_HEADER_BYTES + 1, 0))
        with pytest.raises(wire.PeerClosed, match="not a message of ours"):
            wire.recv_message(b, deadline=time.monotonic() + 2)
        import msgpack
        head = msgpack.packb([1, 2, 3])
        a.sendall(struct.pack("!QQ", len(head), 0) + head)
        with pytest.raises(wire.PeerClosed, match="not a map"):
            wire.recv_message(b, deadline=time.monotonic() + 2)
    finally:
        a.close()
        b.close()


def _listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on {port}"
            time.sleep(0.05)


def _ring_rank(rank: int, eps: list[str], out: dict) -> threading.Thread:
    def run():
        try:
            comm = EndpointRingCommunicator(rank, eps, 20.0, secret=SECRET)
            try:
                value = np.full(1000, rank + 1.0, np.float32)
                comm.allreduce([value])  # in place
                out[rank] = value
            finally:
                comm.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out[f"error{rank}"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_hostile_clients_change_nothing_on_a_ring(held_port):
    eps = [f"127.0.0.1:{held_port()}" for _ in range(2)]
    port0 = int(eps[0].rsplit(":", 1)[1])
    out: dict = {}
    rank0 = _ring_rank(0, eps, out)  # listens, and waits for rank 1
    _listening(port0)

    # slow-loris: three connections that send nothing. Greetings are handled concurrently, so
    # the next connection gets its challenge at once, not after 3 x the 2 s greeting timeout
    lorises = [socket.create_connection(("127.0.0.1", port0)) for _ in range(3)]
    s = socket.create_connection(("127.0.0.1", port0))
    s.settimeout(5)
    assert len(s.recv(16)) == 16
    s.sendall(os.urandom(52))
    assert _hung_up(s)
    s = socket.create_connection(("127.0.0.1", port0))
    s.sendall(pickle.dumps(_Boom("/nonexistent/x")) + struct.pack("!QQ", 1 << 62, 1 << 62))
    assert _hung_up(s)
    # a handshake sniffed from an earlier connection (to another listener with the same label
    # and secret), replayed to a fresh challenge
    side = links.Listener(links.bind("127.0.0.1", 0, eps[0]), SECRET, eps[0], 2)
    try:
        s = socket.create_connection(side.address)
        rec = _Recorder(s)
        client_handshake(rec, SECRET, f"ring:{eps[0]}", 1)
        s.close()
    finally:
        side.close()
    s = socket.create_connection(("127.0.0.1", port0))
    s.recv(16)
    s.sendall(rec.sent)
    assert _hung_up(s)
    # the wrong secret, a rank out of range, a forged abort notice: refused, nothing changes
    for greet in (links.hello(b"guess", "ring", eps[0], 1), links.hello(SECRET, "ring", eps[0], 5),
                  links.hello(b"guess", "abort", eps[0], 1)):
        with pytest.raises(DistributedTrainingError, match="refused the greeting"):
            links.dial("127.0.0.1", port0, greet, 5, peer=eps[0], me="attacker", retry=False)
    assert not links.send_notice("127.0.0.1", port0, links.hello(b"guess", "abort", eps[0], 1),
                                 "stop now", 5, peer=eps[0], me="attacker")

    rank1 = _ring_rank(1, eps, out)
    rank0.join(30)
    rank1.join(30)
    assert "error0" not in out and "error1" not in out, out
    np.testing.assert_array_equal(out[0], np.full(1000, 3.0, np.float32))
    np.testing.assert_array_equal(out[1], out[0])
    for loris in lorises:
        loris.close()


def test_a_rank_refuses_a_listener_that_does_not_know_the_secret():
    """The dialling rank checks the listener too: a process that merely listens on its
    neighbour's endpoint (and echoes whatever it is sent) cannot pose as that neighbour."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def impostor():
        conn, _ = server.accept()
        conn.sendall(os.urandom(16))  # a nonce
        conn.recv(52)
        conn.sendall(os.urandom(32))  # a proof it cannot compute
        time.sleep(1)
        conn.close()

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    try:
        with pytest.raises(DistributedTrainingError, match="does not know the job secret"):
            links.dial("127.0.0.1", port, links.hello(SECRET, "ring", f"127.0.0.1:{port}", 0), 5,
                       peer=f"127.0.0.1:{port}", me="rank 0", retry=False)
    finally:
        t.join(5)
        server.close()
