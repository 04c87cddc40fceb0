"""The direct data path lends a trainer's connection to the waiting trainer of the shard's own
process (shard_server): who answers a sync push whose round is still open, who reads the next
requests, when the connection's own thread takes it back, and what a failure does to the
replies that wait for a round. In-process shards, real sockets and shared memory."""

from __future__ import annotations

import contextlib
import select
import socket
import time

import numpy as np
import pytest

from dask_fluid.distributed.comm import wire
from dask_fluid.distributed.comm.auth import client_handshake
from dask_fluid.distributed.comm.rpc import unpack_arrays
from dask_fluid.distributed.errors import WorkerLostError
from dask_fluid.distributed.pserver import shard_server
from dask_fluid.distributed.pserver.shard import Schedule
from dask_fluid.distributed.pserver.shard_server import RECLAIM_CHECK_S, serve_while_waiting

from .test_pserver_shard import EP, _grads, _spec

WANT = ["fc_2.b_0"]


def _until(check, what: str, timeout_s: float = 5.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def _remote_trainer(shard, tid: int) -> wire.Connection:
    info = shard.endpoint_info()
    conn = wire.connect(info["host"], info["port"],
                        lambda s: client_handshake(s, b"job", EP, tid), 5)
    assert conn.shared, "the lending path needs shared-memory payloads (/dev/shm)"
    return conn


def _push(conn, round_index: int, grads: dict) -> None:
    conn.send({"method": "push_pull", "round": round_index, "want": WANT, "sparse": {}}, grads,
              deadline=time.monotonic() + 5)


def _reply(conn) -> dict:
    header, buf = conn.recv(deadline=time.monotonic() + 5, copy=True)
    assert header["ok"], header
    return unpack_arrays(header["meta"], buf)


def _push_and_lend(shard, conn, names, value: float = 1.0) -> None:
    """Trainer 1 pushes round 0, which waits for trainer 0: its connection is lent."""
    _push(conn, 0, _grads(names, ".trainer_1", value))
    _until(lambda: shard.server.lending, "the connection to be lent")


def _served_until(shard, done) -> None:
    """Wait as a trainer of the shard's process does until ``done()``."""
    _until(lambda: serve_while_waiting([shard.server], (), 0.5) or done(),
           "the waiting trainer to read the push")


def _readable(conn, timeout_s: float) -> bool:
    return bool(select.select([conn.sock], [], [], timeout_s)[0])


@contextlib.contextmanager
def _serving(trainers: int = 2, waiters: tuple[int, ...] = (0,), **kw):
    """A shard serving on a socket, ``waiters`` waiting on it in this process, trainer 1
    connected over the socket: ``(shard, connection, gradient names)``."""
    spec, names = _spec(trainers, True, **kw)
    shard = spec()
    shard.start_server()
    for tid in waiters:
        shard.server.attach_waiter(tid)
    conn = _remote_trainer(shard, 1)
    try:
        yield shard, conn, names
    finally:
        conn.close()
        shard.close()


@pytest.fixture
def two_trainers():
    with _serving() as served:
        yield served


def test_the_round_ender_answers_the_open_push_and_the_waiting_trainer_reads_the_next(
        monkeypatch):
    # the connection's own thread takes back a request left unread for a whole check
    # (50 ms): on a loaded machine this test's thread can be descheduled that long between
    # the push and its wait, and the thread would read the push instead (the test a request
    # left unread... checks that path); here only the waiting trainer may read it
    monkeypatch.setattr(shard_server, "RECLAIM_CHECK_S", 30.0)
    with _serving() as (shard, conn, names):
        _round_ender_and_waiting_trainer(shard, conn, names)


def _round_ender_and_waiting_trainer(shard, conn, names) -> None:
    server = shard.server
    _push_and_lend(shard, conn, names, 3.0)
    assert shard.round == 0 and server.read_by == {"threads": 1, "trainer": 0}
    assert not _readable(conn, 0.05)  # its round waits for trainer 0
    before = shard.scope.get("fc_2.b_0").copy()
    release = shard.push(0, 0, _grads(names, ".trainer_0", 1.0))  # ends the round: replies
    assert shard.round == 1 and _readable(conn, 5)
    np.testing.assert_allclose(_reply(conn)["fc_2.b_0"], before - 0.1 * 2.0, rtol=1e-6)
    np.testing.assert_array_equal(shard.reply(0, release, tuple(WANT))["fc_2.b_0"],
                                  before - 0.1 * 2.0)

    # the next push is read by the waiting trainer, not by the parked connection thread
    _push(conn, 1, _grads(names, ".trainer_1", 1.0))
    _served_until(shard, lambda: server.read_by["trainer"])
    assert server.read_by == {"threads": 1, "trainer": 1} and shard.stats["pushes"] == 3
    shard.push(0, 1, _grads(names, ".trainer_0", 1.0))
    assert _reply(conn)["fc_2.b_0"].shape == (10,) and shard.round == 2


def test_a_wait_returns_when_its_own_reply_can_be_read(two_trainers):
    shard, conn, names = two_trainers
    _push_and_lend(shard, conn, names)
    mine, theirs = socket.socketpair()
    try:
        assert not serve_while_waiting([shard.server], (mine.fileno(),), 0.05)
        theirs.send(b"x")
        assert serve_while_waiting([shard.server], (mine.fileno(),), 5)
    finally:
        mine.close()
        theirs.close()


def test_a_request_left_unread_is_taken_back_by_the_connection_thread(two_trainers):
    shard, conn, names = two_trainers
    server = shard.server
    _push_and_lend(shard, conn, names)
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    _reply(conn)
    # trainer 0 does not wait (it computes): the push must not sit there for ever (two checks
    # of the connection thread at most; the bound leaves room for a loaded machine)
    _push(conn, 1, _grads(names, ".trainer_1", 1.0))
    _until(lambda: shard.stats["pushes"] == 3, "the connection thread to read the push",
           timeout_s=40 * RECLAIM_CHECK_S)
    assert server.read_by == {"threads": 2, "trainer": 0}
    _until(lambda: server.lending, "the connection to be lent again")
    shard.push(0, 1, _grads(names, ".trainer_0", 1.0))
    assert _reply(conn)["fc_2.b_0"].shape == (10,)


def test_a_trainer_that_stops_waiting_gives_its_connections_back(two_trainers):
    shard, conn, names = two_trainers
    server = shard.server
    _push_and_lend(shard, conn, names)
    server.detach_waiter(0)
    assert not server.lending
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    _reply(conn)
    _push(conn, 1, _grads(names, ".trainer_1", 1.0))  # read by its thread, at once
    _until(lambda: shard.stats["pushes"] == 3, "the connection thread to read the push")
    assert server.read_by == {"threads": 2, "trainer": 0} and not server.lending


def test_two_waiting_trainers_in_one_process_borrow_nothing():
    with _serving(3, (0, 2)) as (shard, conn, names):
        _push(conn, 0, _grads(names, ".trainer_1", 1.0))
        _until(lambda: shard.stats["pushes"] == 1, "the push to be read")
        time.sleep(0.05)
        assert not shard.server.lending
        shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
        shard.push(2, 0, _grads(names, ".trainer_2", 1.0))
        assert _reply(conn)["fc_2.b_0"].shape == (10,)


def test_a_push_past_a_trainers_last_step_is_answered_when_the_epoch_ends():
    # trainer 1 has 2 steps, trainer 0 has 3: trainer 1's last push is released by the end of
    # round 2, which only trainer 0 takes part in
    with _serving(schedule=Schedule((3, 2), 1)) as (shard, conn, names):
        _push_and_lend(shard, conn, names)
        shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
        _reply(conn)
        _push(conn, 1, _grads(names, ".trainer_1", 1.0))  # its last step: release = round 2
        _served_until(shard, lambda: shard.stats["pushes"] == 3)
        shard.push(0, 1, _grads(names, ".trainer_0", 1.0))
        assert shard.round == 2 and not _readable(conn, 0.05)  # waits for round 2
        shard.push(0, 2, _grads(names, ".trainer_0", 1.0))
        assert _reply(conn)["fc_2.b_0"].shape == (10,) and shard.round == 3


def test_a_failure_answers_the_replies_that_wait_for_a_round_with_its_reason(two_trainers):
    shard, conn, names = two_trainers
    _push_and_lend(shard, conn, names)
    shard.abort("trainer 0's worker died")
    assert _readable(conn, 5)
    header, _ = conn.recv(deadline=time.monotonic() + 5)
    assert not header["ok"] and "trainer 0's worker died" in header["error"]["text"]


def test_a_lent_connection_that_closes_fails_the_round_naming_the_trainer(two_trainers):
    shard, conn, names = two_trainers
    _push_and_lend(shard, conn, names)
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    _reply(conn)
    conn.close()  # trainer 1 dies while its connection is lent to trainer 0
    _until(lambda: serve_while_waiting([shard.server], (), 0.5) or not shard.server.lending,
           "the waiting trainer to see the connection close")
    with pytest.raises(WorkerLostError, match="lost trainer 1"):
        shard.serve()


def test_a_shard_with_large_parameters_keeps_a_thread_per_connection():
    # past inline_bytes each reply is a large copy: the connection threads make them in
    # parallel instead of the thread that ends the round making them in turn
    with _serving(inline_bytes=0) as (shard, conn, names):
        _push(conn, 0, _grads(names, ".trainer_1", 1.0))
        _until(lambda: shard.stats["pushes"] == 1, "the push to be read")
        time.sleep(0.05)
        assert not shard.server.lending
        shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
        assert _reply(conn)["fc_2.b_0"].shape == (10,)
        assert shard.server.read_by == {"threads": 1, "trainer": 0}
