"""A frozen worker (SIGSTOP: alive, not answering — what FLAGS_rpc_deadline is for) ends the
job with DeadlineExceededError within the deadline and a bounded clean-up, and the cluster
takes the next job once the worker runs again."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
from distributed import Client

from dask_fluid.distributed import (
    DeadlineExceededError,
    DistributedTrainingError,
    train_collective,
    train_pserver,
)
from dask_fluid.models import mlp

from .conftest import make_cluster

pytestmark = pytest.mark.slow

DEADLINE_MS = 3000
#: what the clean-up may add: abort acknowledgement, grace and detach bounds (launch/tasks.py)
GRACE_S = 10.0


@pytest.fixture(scope="module")
def client():
    with make_cluster(3) as cluster, Client(cluster) as c:
        yield c


def _workers(client) -> list[str]:
    client.wait_for_workers(3, timeout=60)
    return sorted(client.scheduler_info(n_workers=-1)["workers"])


def _parts(n: int = 256) -> list[dict]:
    rng = np.random.default_rng(0)
    return [{"x": rng.normal(size=(n, 64)).astype(np.float32),
             "y": rng.integers(0, 10, (n, 1))} for _ in range(2)]


def _fails_when_frozen(client, worker: str, train: Callable[[Callable], object]) -> None:
    """Run ``train(callback)`` with ``worker``'s process stopped (SIGSTOP) at the first event
    of step 3; check that it raises DeadlineExceededError, with a step, in time."""
    pid = client.run(os.getpid, workers=[worker])[worker]
    frozen_at: list[float] = []
    lock = threading.Lock()

    def on_event(event):
        with lock:
            if event.get("type") == "step" and event["step"] >= 3 and not frozen_at:
                os.kill(pid, signal.SIGSTOP)
                frozen_at.append(time.monotonic())

    try:
        with pytest.raises(DistributedTrainingError) as info:
            train(on_event)
        took = time.monotonic() - frozen_at[0]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert isinstance(info.value, DeadlineExceededError), info.value
    assert info.value.step is not None, info.value  # the launcher knows the last step
    assert took < DEADLINE_MS / 1000 + GRACE_S, took


@pytest.mark.parametrize("sync,victim", [(True, "trainer"), (True, "pserver"),
                                         (False, "trainer"), (False, "pserver")])
def test_a_frozen_worker_ends_the_job_within_the_deadline(client, monkeypatch, sync, victim):
    monkeypatch.setenv("FLAGS_rpc_deadline", str(DEADLINE_MS))
    w = _workers(client)
    spec = mlp()
    _fails_when_frozen(client, w[1] if victim == "trainer" else w[2], lambda on_event: (
        train_pserver(client, spec.main, spec.startup, _parts(), trainers=w[:2],
                      pservers=[w[2]], batch_size=16, epochs=1000, sync_mode=sync,
                      callbacks=[on_event])))
    # the worker runs again: the cluster takes the next job
    result = train_pserver(client, spec.main, spec.startup, _parts(64), trainers=w[:2],
                           pservers=[w[2]], batch_size=32)
    assert result.steps == 2


def test_a_frozen_rank_ends_a_collective_job_within_the_deadline(client, monkeypatch):
    monkeypatch.setenv("FLAGS_rpc_deadline", str(DEADLINE_MS))
    w = _workers(client)
    spec = mlp()
    x = np.concatenate([p["x"] for p in _parts()])
    y = np.concatenate([p["y"] for p in _parts()])
    _fails_when_frozen(client, w[1], lambda on_event: train_collective(
        client, spec.main, spec.startup, (x, y), trainers=w[:2], backend="ring", batch_size=16,
        epochs=1000, callbacks=[on_event]))
    result = train_collective(client, spec.main, spec.startup, (x[:128], y[:128]),
                              trainers=w[:2], backend="ring", batch_size=32)
    assert result.steps == 2


def test_a_worker_whose_heartbeats_are_late_but_which_answers_is_not_frozen(client, monkeypatch):
    # the trainer's event loop blocked for 1.5 deadlines (what a loaded machine can do to the
    # heartbeats): the launcher's direct call gets its answer after it, and the job goes on
    monkeypatch.setenv("FLAGS_rpc_deadline", str(DEADLINE_MS))
    w = _workers(client)
    spec = mlp()
    blocked: list[float] = []

    def on_event(event):
        if event.get("type") == "step" and event["step"] >= 3 and not blocked:
            blocked.append(time.monotonic())
            # on the worker's event loop (client.run runs a plain function there), from a
            # thread of ours: the callback must not wait for it
            threading.Thread(target=client.run, args=(time.sleep, 1.5 * DEADLINE_MS / 1000),
                             kwargs={"workers": [w[1]]}, daemon=True).start()

    epochs, start = 250, time.monotonic()
    result = train_pserver(client, spec.main, spec.startup, _parts(), trainers=w[:2],
                           pservers=[w[2]], batch_size=16, epochs=epochs, sync_mode=False,
                           callbacks=[on_event])
    assert blocked and result.steps == epochs * 16
    # it outlasted the block (else nothing was checked)
    assert time.monotonic() - blocked[0] > 1.5 * DEADLINE_MS / 1000, time.monotonic() - start
