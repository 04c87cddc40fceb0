"""Ring all-reduce over Dask worker-to-worker comms: exact sums, identical bits, no hangs."""

import os
import sys
import time
import uuid

import cloudpickle
import numpy as np
import pytest
from distributed import get_worker

from dask_fluid.distributed.collective.ring import RingCommunicator, ring_addresses
from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    WorkerLostError,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

DEADLINE_S = 30.0


def _rank_task(job, rank, addresses, deadline_s, actions):
    """One rank: build a communicator and run ``actions`` (a list of (name, arrays, kwargs))."""
    worker = get_worker()
    outputs = []
    with RingCommunicator(worker, job, rank, addresses, deadline_s) as comm:
        for name, arrays, kwargs in actions:
            if name == "die":
                os._exit(1)
            result = getattr(comm, name)(arrays, **kwargs) if arrays is not None else \
                getattr(comm, name)(**kwargs)
            assert result is None
            outputs.append(arrays)
    return outputs


def _run(client, addresses, actions_per_rank, deadline_s=DEADLINE_S):
    """Submit one rank task per address, pinned, and return the futures."""
    job = uuid.uuid4().hex
    return [
        client.submit(_rank_task, job, rank, addresses, deadline_s, actions_per_rank[rank],
                      workers=[address], allow_other_workers=False, pure=False)
        for rank, address in enumerate(addresses)
    ]


@pytest.mark.parametrize("nranks", [2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_allreduce_sums_exactly_and_identically(dist_client, workers, nranks, dtype):
    addresses = ring_addresses(dist_client, workers[:nranks])
    rng = np.random.default_rng(nranks)
    sizes = [1, 7, 1000003]
    inputs = [[rng.standard_normal(n).astype(dtype) for n in sizes] for _ in range(nranks)]
    actions = [[("allreduce", [a.copy() for a in inputs[r]], {})] for r in range(nranks)]
    results = [f.result()[0] for f in _run(dist_client, addresses, actions)]
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for k, _ in enumerate(sizes):
        expected = np.sum([inputs[r][k] for r in range(nranks)], axis=0, dtype=np.float64)
        np.testing.assert_allclose(results[0][k], expected, rtol=rtol, atol=rtol)
        assert results[0][k].dtype == dtype
        for r in range(1, nranks):
            assert results[r][k].tobytes() == results[0][k].tobytes()  # bit-identical


def test_allreduce_mean_of_mixed_dtypes_and_shapes(dist_client, workers):
    addresses = ring_addresses(dist_client, workers)
    rng = np.random.default_rng(1)

    def arrays_of(rank):
        return [rng.standard_normal((3, 5)).astype(np.float32),
                rng.standard_normal(2),
                rng.standard_normal((4, 1)).astype(np.float32)[::2]]  # non-contiguous

    inputs = [arrays_of(r) for r in range(3)]
    actions = [[("allreduce", [a.copy() for a in inputs[r]], {"op": "mean", "step": 5})]
               for r in range(3)]
    results = [f.result()[0] for f in _run(dist_client, addresses, actions)]
    for k in range(3):
        expected = np.mean([inputs[r][k] for r in range(3)], axis=0)
        np.testing.assert_allclose(results[0][k], expected, rtol=1e-5)
        assert results[0][k].shape == inputs[0][k].shape
        assert all(results[r][k].tobytes() == results[0][k].tobytes() for r in range(3))


def test_broadcast_barrier_and_several_collectives_in_a_row(dist_client, workers):
    addresses = ring_addresses(dist_client, workers)
    params = [np.full(10, r, dtype=np.float32) for r in range(3)]
    actions = [
        [("broadcast", [params[r], np.array([r])], {"root": 1}),
         ("barrier", None, {}),
         ("allreduce", [np.ones(4, dtype=np.float64)], {})]
        for r in range(3)
    ]
    for outputs in (f.result() for f in _run(dist_client, addresses, actions)):
        broadcast, _, allreduced = outputs
        np.testing.assert_array_equal(broadcast[0], np.full(10, 1, dtype=np.float32))
        assert broadcast[1].tolist() == [1]
        np.testing.assert_array_equal(allreduced[0], np.full(4, 3.0))


def test_single_rank_is_a_no_op(dist_client, workers):
    data = np.arange(5, dtype=np.float32)
    [future] = _run(dist_client, workers[:1], [[("allreduce", [data.copy()], {"op": "mean"})]])
    np.testing.assert_array_equal(future.result()[0][0], data)


def test_mismatched_shapes_fail_on_every_rank_without_hanging(dist_client, workers):
    addresses = ring_addresses(dist_client, workers[:2])
    actions = [[("allreduce", [np.ones(10)], {"step": 3})],
               [("allreduce", [np.ones(12)], {"step": 3})]]
    start = time.perf_counter()
    for future in _run(dist_client, addresses, actions):
        with pytest.raises((ValueError, JobAbortedError)):
            future.result(timeout=20)
    assert time.perf_counter() - start < 10


def test_rank_on_the_wrong_worker_is_refused(dist_client, workers):
    def wrong_place():
        return RingCommunicator(get_worker(), "job", 0, [workers[1], workers[2]], 1.0)

    with pytest.raises(ValueError, match="planned on worker .* but runs on"):
        dist_client.submit(wrong_place, workers=[workers[0]], pure=False).result()


# -- failures: on a cluster of their own (killable_client), because workers get killed ----------


@pytest.mark.slow
def test_killed_rank_raises_on_the_others_and_the_cluster_recovers(killable_client):
    client = killable_client
    client.wait_for_workers(3, timeout=60)
    addresses = ring_addresses(client)
    deadline_s = 3.0
    data = np.ones(100_000, dtype=np.float32)
    actions = [[("allreduce", [data.copy()], {})] for _ in range(2)] + [[("die", None, {})]]
    futures = _run(client, addresses, actions, deadline_s=deadline_s)
    start = time.perf_counter()
    errors = []
    for future in futures[:2]:
        with pytest.raises(DistributedTrainingError) as info:
            future.result(timeout=30)
        errors.append(info.value)
    elapsed = time.perf_counter() - start
    assert elapsed < deadline_s + 4  # within the deadline (plus startup), not hanging
    assert all(isinstance(e, (WorkerLostError, DeadlineExceededError, JobAbortedError))
               for e in errors)
    assert any(isinstance(e, (WorkerLostError, DeadlineExceededError)) for e in errors)
    # the rank that sends to the dead one sees the broken connection at once (WorkerLostError
    # naming it); if the dead rank took its last message first, the ranks waiting on it and on
    # each other run into the deadline instead, each naming the neighbour it waited for
    assert all(e.role == "rank" and e.endpoint in addresses for e in errors)
    lost = [e for e in errors if isinstance(e, WorkerLostError)]
    assert all(e.endpoint == addresses[2] for e in lost)
    client.cancel(futures[2])

    # a new job on the same client, with the restarted worker, succeeds
    client.wait_for_workers(3, timeout=60)
    addresses = ring_addresses(client)
    actions = [[("allreduce", [np.full(3, r, dtype=np.float64)], {})] for r in range(3)]
    for future in _run(client, addresses, actions, deadline_s=deadline_s):
        np.testing.assert_array_equal(future.result(timeout=30)[0][0], np.full(3, 3.0))


@pytest.mark.slow
def test_killed_callee_gives_worker_lost_to_a_caller(killable_client):
    client = killable_client
    client.wait_for_workers(3, timeout=60)
    a, b = ring_addresses(client)[:2]
    job = uuid.uuid4().hex

    class Suicidal:
        def ping(self):
            return "pong"

        async def die(self):
            os._exit(1)

    def attach(dask_worker):
        rpc.attach_service(dask_worker, job, "s", Suicidal())

    async def caller(peer, dask_worker):
        kw = dict(deadline_s=5, role="pserver", step=9)
        await rpc.call(dask_worker, peer, job, "s", "ping", **kw)  # opens the pooled connection
        start = time.perf_counter()
        try:
            await rpc.call(dask_worker, peer, job, "s", "die", **kw)
        except WorkerLostError as exc:
            return time.perf_counter() - start, exc.endpoint, exc.step

    client.run(attach, workers=[b])
    elapsed, endpoint, step = client.run(caller, b, workers=[a])[a]
    assert elapsed < 3 and endpoint == b and step == 9
    client.wait_for_workers(3, timeout=60)
