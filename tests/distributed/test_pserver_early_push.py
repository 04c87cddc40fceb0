"""Early pushes (sync): gradients a trainer sends ahead of its step's push_pull over a network
link join that push on the pserver, which computes exactly what one whole push gives; a part
that is refused fails the push it came ahead of, with the reason. In-process shards, real
sockets without shared memory (DASK_FLUID_SHM_DISABLE), a real sender thread."""

from __future__ import annotations

import concurrent.futures
import contextlib
import select
import time

import dask.config
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_fluid.distributed import train_pserver
from dask_fluid.distributed.comm import shared_payload, wire
from dask_fluid.distributed.comm.auth import client_handshake
from dask_fluid.distributed.comm.rpc import ensure_plugin, unpack_arrays
from dask_fluid.distributed.errors import DistributedTrainingError, RemoteError
from dask_fluid.distributed.pserver.client import EARLY_PUSH_KEY, PServerClient
from dask_fluid.distributed.pserver.shard import flatten_tensors
from dask_fluid.flags import RPCFlags
from dask_fluid.models import mlp

from ..transpiler.models import reference_mlp
from .test_pserver_lending import _until
from .test_pserver_shard import EP, _grads, _spec
from .test_pserver_sync import OPTIMIZERS, _assert_params_equal, _data, _local, _two_trainers

WANT = ["fc_0.w_0", "fc_2.b_0"]


def _halves(grads: dict) -> tuple[dict, dict]:
    names = sorted(grads)
    return ({n: grads[n] for n in names[:3]}, {n: grads[n] for n in names[3:]})


def _params(shard) -> dict:
    return {n: np.array(shard.scope.get(n)) for n in shard.param_names}


def _whole_step_params() -> dict:
    """The parameters after step 0 with both trainers' gradients pushed whole."""
    spec, names = _spec(2, True)
    shard = spec()
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    shard.push(1, 0, _grads(names, ".trainer_1", 3.0))
    assert shard.round == 1
    out = _params(shard)
    shard.close()
    return out


@pytest.fixture
def sync_shard():
    spec, names = _spec(2, True)
    shard = spec()
    yield shard, names
    shard.close()


def test_parts_join_the_push_and_the_step_equals_whole_pushes(sync_shard):
    shard, names = sync_shard
    first, rest = _halves(_grads(names, ".trainer_1", 3.0))
    shard.push_part(1, 0, first)
    shard.push_part(1, 0, rest)
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    # parts are not the trainer's step: the round waits for its push_pull
    assert shard.round == 0 and shard.stats["early_pushes"] == 2
    shard.push(1, 0, {}, parts=2)
    assert shard.round == 1 and shard.stats["pushes"] == 2
    for name, value in _whole_step_params().items():
        np.testing.assert_array_equal(_params(shard)[name], value, err_msg=name)


@pytest.mark.parametrize("case, message", [
    ("count", "counts 2 early pushes, but pserver .* received 1"),
    ("uncounted", "counts 0 early pushes, but pserver .* received 1"),
    ("twice in parts", r"refused an early push of trainer 1's step 0: trainer 1 sent .* twice"),
    ("part and push", "trainer 1 sent .* of step 0 twice"),
    ("malformed", "refused an early push .* malformed early push"),
    ("no step", "refused an early push .* malformed early push .*'one', not an integer"),
])
def test_a_part_that_does_not_fit_fails_the_push_with_the_reason(sync_shard, case, message):
    shard, names = sync_shard
    grads = _grads(names, ".trainer_1", 3.0)
    first, rest = _halves(grads)
    parts, last = 1, rest
    if case == "malformed":
        shard.push_part_request(1, {"round": 0, "sparse": {"x": "not a row count"}},
                                flatten_tensors(first)[0])
    elif case == "no step":
        shard.push_part_request(1, {"round": "one", "sparse": {}}, flatten_tensors(first)[0])
    else:
        shard.push_part(1, 0, first)
    if case == "count":
        parts = 2
    elif case == "uncounted":
        parts = 0
    elif case == "twice in parts":
        shard.push_part(1, 0, first)
        parts = 2
    elif case == "part and push":
        last = grads
    with pytest.raises(ValueError, match=message):
        shard.push(1, 0, last, parts=parts)
    assert shard.round == 0 and 1 not in shard._pending.get(0, {})


def test_a_part_for_a_step_that_is_over_fails_its_push(sync_shard):
    shard, names = sync_shard
    shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
    shard.push(1, 0, _grads(names, ".trainer_1", 1.0))
    shard.push_part(1, 0, _grads(names, ".trainer_1", 1.0))  # step 0 is over
    with pytest.raises(ValueError, match="already at step 1"):
        shard.push(1, 0, {}, parts=1)


def test_an_async_pserver_refuses_early_pushes():
    spec, names = _spec(2, False)
    shard = spec()
    try:
        shard.push_part(1, 0, _grads(names, ".trainer_1", 1.0))
        assert shard.stats["early_pushes"] == 0
        with pytest.raises(ValueError, match="early pushes .* sync mode"):
            shard.push(1, 0, {}, parts=1)
    finally:
        shard.close()


# -- over a socket ----------------------------------------------------------------------------
@contextlib.contextmanager
def _served(monkeypatch):
    """A sync shard of 2 trainers serving on a socket without shared memory, and trainer 1's
    greeted connection to it: ``(shard, connection, gradient names)``."""
    monkeypatch.setenv(shared_payload.DISABLE_ENV, "1")
    spec, names = _spec(2, True)
    shard = spec()
    shard.start_server()
    info = shard.endpoint_info()
    conn = wire.connect(info["host"], info["port"],
                        lambda s: client_handshake(s, b"job", EP, 1), 5)
    assert not conn.sends_shared
    try:
        yield shard, conn, names
    finally:
        conn.close()
        shard.close()


def test_a_push_part_on_the_wire_gets_no_reply_and_joins_the_push_pull(monkeypatch):
    with _served(monkeypatch) as (shard, conn, names):
        first, rest = _halves(_grads(names, ".trainer_1", 3.0))
        arrays, sparse = flatten_tensors(first)
        conn.send({"method": "push_part", "round": 0, "sparse": sparse}, arrays,
                  deadline=time.monotonic() + 5)
        _until(lambda: shard.stats["early_pushes"] == 1, "the part to be read")
        assert not select.select([conn.sock], [], [], 0.1)[0]  # nothing answers a part
        arrays, sparse = flatten_tensors(rest)
        conn.send({"method": "push_pull", "round": 0, "want": WANT, "sparse": sparse,
                   "parts": 1}, arrays, deadline=time.monotonic() + 5)
        shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
        header, buf = conn.recv(deadline=time.monotonic() + 5)
        assert header["ok"], header
        got = unpack_arrays(header["meta"], buf)
        whole = _whole_step_params()
        for name in WANT:
            np.testing.assert_array_equal(got[name], whole[name], err_msg=name)


class _Trainer(PServerClient):
    """Trainer 1 of the test: its one link is the given connection."""

    def __init__(self, conn: wire.Connection, early_push_bytes: int | None) -> None:
        super().__init__(1, RPCFlags(deadline_ms=10_000), True, [EP],
                         early_push_bytes=early_push_bytes)
        self._links[EP] = conn

    def _link(self, ep: str) -> wire.Connection:
        return self._links[ep]


@pytest.mark.parametrize("early", [0, 1 << 20, None])
def test_a_trainer_pushes_early_what_reaches_the_threshold(monkeypatch, early):
    with _served(monkeypatch) as (shard, conn, names):
        trainer = _Trainer(conn, early)
        grads = _grads(names, ".trainer_1", 3.0)  # 0.4 MB in all
        try:
            for name, value in grads.items():  # as the send ops of a backward pass stage them
                trainer.stage([EP], [name], [value])
            expected = len(grads) if early == 0 else 0
            # what went ahead still makes a push (a recv without a barrier before it asks)
            assert trainer.early_pushes == expected and trainer.staged
            _until(lambda: shard.stats["early_pushes"] == expected, "the parts to arrive")
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                step = pool.submit(trainer.exchange, {EP: WANT}, trainer.staged)
                time.sleep(0.05)
                assert not step.done()  # the round waits for trainer 0
                shard.push(0, 0, _grads(names, ".trainer_0", 1.0))
                step.result(5)
            whole = _whole_step_params()
            for name in WANT:
                np.testing.assert_array_equal(trainer.take([name])[0], whole[name])
            assert shard.round == 1 and trainer.round == 1
            assert trainer.requests == expected + 1
        finally:
            trainer.close()


def test_a_link_through_shared_memory_keeps_the_one_push(sync_shard):
    if not shared_payload.available():
        pytest.skip("no writable /dev/shm on this machine")
    shard, names = sync_shard
    shard.start_server()
    info = shard.endpoint_info()
    conn = wire.connect(info["host"], info["port"],
                        lambda s: client_handshake(s, b"job", EP, 1), 5)
    trainer = _Trainer(conn, 0)
    try:
        assert conn.sends_shared
        trainer.stage([EP], ["fc_0.w_0@GRAD.trainer_1"], [np.ones((64, 256), np.float32)])
        assert trainer.early_pushes == 0 and trainer.staged
    finally:
        trainer.close()


def test_an_early_push_to_a_pserver_that_went_away_fails_the_step_naming_it(monkeypatch):
    with _served(monkeypatch) as (shard, conn, names):
        trainer = _Trainer(conn, 0)
        try:
            shard.close()  # the pserver's worker dies: its sockets close
            big = np.ones((2048, 1024), np.float32)  # more than the socket buffers hold
            trainer.stage([EP], ["fc_0.w_0@GRAD.trainer_1"], [big])
            start = time.monotonic()
            with pytest.raises(DistributedTrainingError) as err:
                trainer.exchange({EP: WANT}, True)
            assert time.monotonic() - start < 5  # not the 10 s deadline
            assert err.value.endpoint == EP and not isinstance(err.value, RemoteError)
            assert "broke" in str(err.value) or "aborted" in str(err.value)
        finally:
            trainer.close()


def test_a_bad_setting_is_a_clear_error_before_the_job_starts(dist_client):
    spec = mlp(n_features=4, hidden=(8,), n_classes=2)
    data = {"x": np.zeros((8, 4), np.float32), "y": np.zeros((8, 1), np.int64)}
    with dask.config.set({EARLY_PUSH_KEY: "lots"}), \
            pytest.raises(ValueError, match="early-push-bytes.*'lots'.*byte count"):
        train_pserver(dist_client, spec.main, spec.startup, data, pservers=1, batch_size=4)


@pytest.mark.slow
def test_train_pserver_over_sockets_pushes_early_and_equals_local():
    # worker processes that keep off shared memory, as on two hosts: each trainer reaches the
    # pserver of the other worker over its socket, and with a threshold of 0 every gradient
    # block goes out ahead of the barrier
    steps, half = 3, 16
    global_batches, per_trainer = _two_trainers(_data(steps * 2 * half), steps, half)
    main, startup, loss = reference_mlp(optimizer=OPTIMIZERS["momentum"], dtype="float64")
    lmain, lstartup, _ = reference_mlp(optimizer=OPTIMIZERS["momentum"], dtype="float64")
    scope = _local(lmain, lstartup, global_batches)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=40, env={shared_payload.DISABLE_ENV: "1"}) as cluster, \
            Client(cluster) as client:
        ensure_plugin(client)
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        with dask.config.set({EARLY_PUSH_KEY: 0, "dask_fluid.pserver.transport": "tcp"}):
            result = train_pserver(client, main, startup, per_trainer, trainers=workers,
                                   pservers=workers, batch_size=half, shuffle=False,
                                   fetch_list=[loss])
    _assert_params_equal(result.params, scope, 1e-6)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    # each pserver: 3 steps of the other worker's trainer, one part per gradient block at least
    assert len(lines) == 2 and all("early pushes ahead of them" in ln for ln in lines), lines
