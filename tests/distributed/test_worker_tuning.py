"""Dask's statistical profiler while training tasks run on a worker: sampled at most every
``dask_fluid.worker.profile-interval`` (default 100 ms), shared by the training tasks of a
worker, and the worker's own interval back when the last one ends; checked on the worker
processes of the session cluster, and around real pserver and collective jobs."""

from __future__ import annotations

import time

import dask
import pytest

from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import train_collective, train_pserver
from dask_fluid.distributed.launch import worker_tuning
from dask_fluid.distributed.launch.worker_tuning import (
    PROFILE_INTERVAL_KEY,
    WorkerTuning,
    profile_interval_s,
    sparse_profiling,
)
from dask_fluid.models import mlp


def test_the_setting_is_read_from_dask_config_and_checked():
    assert profile_interval_s() == 0.1
    for value, seconds in (("250ms", 0.25), (0.5, 0.5), ("2s", 2.0), (None, None),
                           (False, None), ("off", None), ("None", None)):
        with dask.config.set({PROFILE_INTERVAL_KEY: value}):
            assert profile_interval_s() == seconds, value
    for bad in ("often", -1, 0, "0ms", True, [1]):
        with dask.config.set({PROFILE_INTERVAL_KEY: bad}), \
                pytest.raises(ValueError, match="profile-interval = .* is not allowed"):
            profile_interval_s()
    with dask.config.set({PROFILE_INTERVAL_KEY: "1s"}):
        assert WorkerTuning.from_config() == WorkerTuning(True, 1.0)


def _profile_ms(dask_worker):
    return dask_worker.periodic_callbacks["profile"].callback_time


def _observe_nested(interval_s: float) -> list:
    """In a task thread: the profiler's interval (ms) outside, inside two nested uses, between
    them and after (each read once the event loop has applied the change)."""
    from distributed import get_worker

    worker = get_worker()
    pc = worker.periodic_callbacks["profile"]

    def settled(ms: float) -> float:
        give_up = time.monotonic() + 10
        while pc.callback_time != ms and time.monotonic() < give_up:
            time.sleep(0.01)
        return pc.callback_time

    seen = [pc.callback_time]
    own = pc.callback_time
    with sparse_profiling(worker, interval_s) as changed:
        seen += [changed, settled(1000 * interval_s)]
        with sparse_profiling(worker, interval_s) as again:
            seen += [again, pc.callback_time]
        seen.append(pc.callback_time)  # the outer use still holds it
    seen += [settled(own), pc.is_running()]
    with sparse_profiling(worker, own / 1000 / 2) as faster:  # never makes it sample more
        seen += [faster, pc.callback_time]
    with sparse_profiling(worker, None) as untouched:
        seen.append(untouched)
    return seen


def test_training_slows_the_profiler_and_the_worker_gets_its_interval_back(dist_client,
                                                                          workers):
    own = dist_client.run(_profile_ms, workers=workers[:1])[workers[0]]
    assert own == 10  # Dask's default, the environment of these workers
    seen = dist_client.submit(_observe_nested, 0.25, workers=workers[:1], pure=False).result(30)
    assert seen == [10, True, 250, True, 250, 250, 10, True, False, 10, False]


@pytest.mark.parametrize("kind", ["pserver", "collective"])
def test_jobs_leave_every_worker_profiler_as_they_found_it(dist_client, workers, kind):
    spec = mlp(n_features=8, hidden=(8,), n_classes=3)
    x, y = reference_blobs(256, n_features=8, n_classes=3)
    before = dist_client.run(_profile_ms)
    if kind == "pserver":
        train_pserver(dist_client, spec.main, spec.startup, {"x": x, "y": y}, pservers=2,
                      batch_size=32, fetch_list=[spec.loss])
    else:
        train_collective(dist_client, spec.main, spec.startup, (x, y), batch_size=32,
                         fetch_list=[spec.loss])
    give_up = time.monotonic() + 10  # the restore runs on each worker's event loop
    while dist_client.run(_profile_ms) != before and time.monotonic() < give_up:
        time.sleep(0.05)
    assert dist_client.run(_profile_ms) == before
    assert not worker_tuning._active  # this process ran no training task
