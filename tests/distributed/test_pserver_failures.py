"""Failures and flags on worker processes: a killed worker (pserver or trainer), a trainer that
raised and a missed deadline each end training with an error naming role, endpoint and step,
quickly; the next job on the same client succeeds; FLAGS_rpc_* take effect."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
from distributed import Client

import dask_fluid as fluid
from dask_fluid.distributed import (
    DeadlineExceededError,
    DistributedTrainingError,
    WorkerLostError,
    train_pserver,
)
from dask_fluid.flags import RPCFlags
from dask_fluid.models import mlp

from ..transpiler.models import table_net
from .conftest import make_cluster


@pytest.fixture(scope="module")
def client():
    with make_cluster(3) as cluster, Client(cluster) as c:
        yield c


def _workers(client) -> list[str]:
    client.wait_for_workers(3, timeout=60)
    return sorted(client.scheduler_info(n_workers=-1)["workers"])


def _parts(n: int = 256, seed: int = 0, nan_at: int | None = None) -> list[dict]:
    rng = np.random.default_rng(seed)
    parts = [{"x": rng.normal(size=(n, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (n, 1))} for _ in range(2)]
    if nan_at is not None:
        parts[1]["x"][nan_at] = np.nan
    return parts


def _assert_next_job_succeeds(client) -> None:
    w = _workers(client)
    spec = mlp()
    result = train_pserver(client, spec.main, spec.startup, _parts(64), trainers=w[:2],
                           pservers=[w[2]], batch_size=32)
    assert result.steps == 2
    # nothing of the failed job is left on the workers
    left = client.run(lambda dask_worker: len(getattr(dask_worker, "_dask_fluid", {})))
    assert set(left.values()) == {0}


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["pserver", "trainer"])
def test_killed_worker_ends_training_with_a_clear_error(client, victim):
    w = _workers(client)
    pids = client.run(os.getpid)
    target = w[2] if victim == "pserver" else w[1]
    go, killed_at = threading.Event(), []

    def killer():
        go.wait(60)
        killed_at.append(time.perf_counter())
        os.kill(pids[target], signal.SIGKILL)

    threading.Thread(target=killer, daemon=True).start()

    def on_event(event):
        if event.get("type") == "step" and event["step"] >= 20:
            go.set()

    spec = mlp()
    with pytest.raises(DistributedTrainingError) as info:
        train_pserver(client, spec.main, spec.startup, _parts(), trainers=w[:2],
                      pservers=[w[2]], batch_size=16, epochs=100, callbacks=[on_event],
                      flags=RPCFlags(deadline_ms=5000))
    elapsed = time.perf_counter() - killed_at[0]
    err = info.value
    assert elapsed < 10, elapsed
    assert isinstance(err, (WorkerLostError, DeadlineExceededError)), repr(err)
    assert err.role == victim and err.endpoint == target, repr(err)
    assert err.step is not None and err.step >= 20
    assert victim in str(err) and target in str(err)
    _assert_next_job_succeeds(client)


@pytest.mark.slow
def test_a_trainer_that_raises_ends_the_job_naming_itself(client):
    w = _workers(client)
    spec = mlp()
    start = time.perf_counter()
    with pytest.raises(DistributedTrainingError, match="NaN") as info:
        train_pserver(client, spec.main, spec.startup, _parts(nan_at=100), trainers=w[:2],
                      pservers=2, batch_size=16, shuffle=False,
                      flags=RPCFlags(deadline_ms=5000))
    assert time.perf_counter() - start < 10
    err = info.value
    assert (err.role, err.endpoint, err.step) == ("trainer", w[1], 6)  # row 100 is in step 6
    _assert_next_job_succeeds(client)


@pytest.mark.slow
def test_a_missed_deadline_names_the_silent_trainer(client, monkeypatch):
    # FLAGS_rpc_deadline from the environment of the client; trainer 1's worker process is
    # frozen (SIGSTOP: a hung machine), so the pserver's barrier misses its gradients
    monkeypatch.setenv("FLAGS_rpc_deadline", "2000")
    w = _workers(client)
    pid = client.run(os.getpid, workers=[w[1]])[w[1]]
    go = threading.Event()

    def freezer():
        go.wait(60)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(5)
        finally:
            os.kill(pid, signal.SIGCONT)

    frozen = threading.Thread(target=freezer, daemon=True)
    frozen.start()

    def on_event(event):
        if event.get("type") == "step" and event["step"] >= 10:
            go.set()

    spec = mlp()
    start = time.perf_counter()
    with pytest.raises(DeadlineExceededError) as info:
        train_pserver(client, spec.main, spec.startup, _parts(), trainers=w[:2],
                      pservers=[w[2]], batch_size=16, epochs=100, callbacks=[on_event])
    assert time.perf_counter() - start < 30
    err = info.value
    assert err.role == "trainer" and err.endpoint == w[1] and err.deadline_ms == 2000
    assert err.step is not None and err.step >= 10
    assert "FLAGS_rpc_deadline = 2000 ms" in str(err)
    frozen.join(10)  # the worker runs again
    _assert_next_job_succeeds(client)


def _stall_from_round(round_from: int, stall_s: float) -> None:
    """On a worker: its trainer sleeps ``stall_s`` after computing step ``round_from`` (a
    trainer stuck in its own code, not a frozen process)."""
    from dask_fluid.distributed.launch import pserver_tasks

    checked = pserver_tasks.check_finite

    def check_then_stall(names, fetched, epoch, round_index):
        if round_index == round_from:
            time.sleep(stall_s)
        return checked(names, fetched, epoch, round_index)

    check_then_stall.checked = checked
    pserver_tasks.check_finite = check_then_stall


def _unstall() -> None:
    from dask_fluid.distributed.launch import pserver_tasks

    pserver_tasks.check_finite = getattr(pserver_tasks.check_finite, "checked",
                                         pserver_tasks.check_finite)


@pytest.mark.slow
def test_a_missed_deadline_says_where_the_silent_trainer_was(client, monkeypatch):
    # trainer 1 sleeps in its step loop: the pserver's barrier misses its gradients, and the
    # error names the frames the trainer's task was in when the deadline passed
    monkeypatch.setenv("FLAGS_rpc_deadline", "2000")
    w = _workers(client)
    client.run(_stall_from_round, 3, 8.0, workers=[w[1]])
    spec = mlp()
    try:
        with pytest.raises(DeadlineExceededError) as info:
            train_pserver(client, spec.main, spec.startup, _parts(), trainers=w[:2],
                          pservers=[w[2]], batch_size=16, epochs=3)
    finally:
        client.run(_unstall, workers=[w[1]])
    err = info.value
    assert err.role == "trainer" and err.endpoint == w[1], err
    assert "its trainer 1 task was in sleep" in str(err) or \
        "its trainer 1 task was in check_then_stall" in str(err), err
    assert "< _loop (pserver_tasks.py:" in str(err), err
    time.sleep(8)  # the stalled task ends (it was told to stop)
    _assert_next_job_succeeds(client)


@pytest.mark.slow
def test_thread_flags_size_the_pserver_pools(client, monkeypatch):
    import dask

    monkeypatch.setenv("FLAGS_rpc_send_thread_num", "3")
    monkeypatch.setenv("FLAGS_rpc_prefetch_thread_num", "2")
    w = _workers(client)
    rng = np.random.default_rng(0)
    data = {"ids_a": rng.integers(0, 1000, (64, 1)), "ids_b": rng.integers(0, 1000, (64, 1)),
            "label": rng.integers(0, 2, (64, 1))}
    main, startup = table_net(optimizer=lambda: fluid.optimizer.SGD(0.1))
    with dask.config.set({"dask_fluid.rpc.get-thread-num": 4,
                          "dask_fluid.pserver.inline-bytes": 0}):
        result = train_pserver(client, main, startup, [data, data], trainers=w[:2],
                               pservers=2, batch_size=8)
    lines = [ln for ln in result.summary.splitlines() if ln.startswith("pserver ")]
    assert len(lines) == 2
    for line in lines:
        assert "threads send/get/prefetch 3/4/2" in line, line
        used = line.split("(used ")[1].split(")")[0].split("/")
        send, get, prefetch = (int(u) for u in used)
        assert 1 <= send <= 3 and 1 <= get <= 4 and 1 <= prefetch <= 2, line


def test_silent_input_is_refused(client):
    # float labels for an int64 layer would be truncated; an unknown key would train on nothing
    spec = mlp()
    rows = _parts()
    bad = [dict(p, y=p["y"].astype(np.float64) + 0.5) for p in rows]
    with pytest.raises(DistributedTrainingError, match="'y' is int64, but its data has "
                       "non-integer values"):
        train_pserver(client, spec.main, spec.startup, bad, trainers=2, pservers=1)
    whole = [dict(p, y=p["y"].astype(np.float64)) for p in rows]  # 3.0 is fine
    train_pserver(client, spec.main, spec.startup, whole, trainers=2, pservers=1,
                  steps_per_epoch=1)
    with pytest.raises(ValueError, match=r"data has keys \['lables'\] that are not data layers"):
        train_pserver(client, spec.main, spec.startup, [dict(p, lables=p["y"]) for p in rows],
                      trainers=2, pservers=1)


def test_a_diverging_loss_stops_the_job_naming_the_step(client):
    spec = mlp(opt=fluid.optimizer.SGD(1e12))
    with pytest.raises(DistributedTrainingError, match=r"became (nan|inf) at step \d+ "
                       r"\(epoch 0\): training diverged"):
        train_pserver(client, spec.main, spec.startup, _parts(), trainers=2, pservers=1,
                      fetch_list=[spec.loss], batch_size=16)
