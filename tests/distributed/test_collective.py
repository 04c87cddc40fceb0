"""Collective training on the ring backend: equals local training, identical bits, no hangs."""

import os
import signal
import sys
import time
import uuid

import cloudpickle
import dask
import numpy as np
import pytest
from distributed import get_worker

import dask_fluid as fluid
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import DistributedTrainingError, train_collective
from dask_fluid.distributed.collective.nccl import NcclUnavailableError
from dask_fluid.distributed.collective.ring import RingCommunicator, ring_addresses
from dask_fluid.distributed.collective.runtime import rank_seed, split_program, steps_per_epoch_for
from dask_fluid.distributed.collective.tcp_ring import TcpRingCommunicator
from dask_fluid.distributed.launch.data import batch_indices, group_chunks, partition_by_worker
from dask_fluid.flags import RPCFlags
from dask_fluid.models import mlp
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

from .. import scheduler_probe

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _cupy_has_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _small(opt=None):
    return mlp(n_features=8, hidden=(16,), n_classes=3, opt=opt, seed=5)


def _local_reference(spec, partition, x, y, batch, epochs, steps, seed):
    """Local training where step s takes the union, in rank order, of every rank's batch s
    (rank r trains on the r-th contiguous run of chunks: group_chunks)."""
    bounds = np.cumsum((0, *partition.chunk_rows))
    ranks = [np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in group])
             for group in group_chunks(partition.chunk_rows, len(partition.workers))]
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(spec.startup, scope=scope)
    losses = []
    for epoch in range(epochs):
        orders = [batch_indices(len(rows), batch, epoch, rank_seed(seed, r), True)
                  for r, rows in enumerate(ranks)]
        for s in range(steps):
            idx = np.concatenate([rows[order[s]]
                                  for rows, order in zip(ranks, orders, strict=True)])
            (loss,) = exe.run(spec.main, feed={"x": x[idx], "y": y[idx, None]},
                              fetch_list=[spec.loss], scope=scope)
            losses.append(float(loss.mean()))
    return scope, losses


@pytest.mark.parametrize("nranks, opt, data_path",
                         [(2, None, "tcp"), (3, "adam", "tcp"), (3, None, "dask")])
def test_ring_equals_local_training_with_the_global_batch(dist_client, workers, nranks, opt,
                                                          data_path):
    batch, epochs, seed = 16, 2, 3
    n = nranks * batch * 10  # 10 full batches per rank and epoch: 20 steps
    x, y = reference_blobs(n, n_features=8, n_classes=3, seed=1)
    make = (lambda: _small(fluid.optimizer.Adam(0.01))) if opt else _small
    partition = partition_by_worker(dist_client, {"x": x, "y": y}, workers=workers[:nranks])
    assert len(partition.workers) == nranks
    spec = make()
    with dask.config.set({"dask_fluid.collective.transport": data_path}):
        result = train_collective(dist_client, spec.main, spec.startup, partition,
                                  backend="ring", epochs=epochs, batch_size=batch, seed=seed,
                                  fetch_list=[spec.loss])
    assert result.steps == 20 and result.samples == 20 * batch * nranks
    assert f"backend ring ({data_path} data path)" in result.summary
    digests = {r["digest"] for r in result.ranks}
    assert len(result.ranks) == nranks and len(digests) == 1  # bit-identical on every rank

    ref = make()
    scope, losses = _local_reference(ref, partition, x, y, batch, epochs, 10, seed)
    assert set(result.params) >= {p.name for p in ref.main.all_parameters()}
    for name, value in result.params.items():
        expected = np.asarray(scope.get(name))
        err = np.max(np.abs(value - expected)) / max(np.max(np.abs(expected)), 1e-30)
        assert err <= 1e-6, (name, err)
    # the mean over ranks of each rank's loss is the local loss of the global batch
    by_step = {}
    for event in result.history:
        by_step.setdefault(event["step"], []).append(event["fetches"][spec.loss.name])
    np.testing.assert_allclose([np.mean(by_step[s]) for s in range(20)], losses, rtol=1e-5)


def test_a_bad_transport_setting_is_refused(dist_client, workers):
    spec = _small()
    x, y = reference_blobs(8, n_features=8, n_classes=3)
    with dask.config.set({"dask_fluid.collective.transport": "rdma"}), \
            pytest.raises(ValueError, match="transport = 'rdma' is not allowed"):
        train_collective(dist_client, spec.main, spec.startup, (x, y), backend="ring")


def test_numpy_tuple_auto_backend_events_and_zero_row_worker(dist_client, workers):
    spec = _small()
    x, y = reference_blobs(2, n_features=8, n_classes=3)  # 2 rows for 3 workers
    events = []
    result = train_collective(dist_client, spec.main, spec.startup, (x, y), trainers=3,
                              batch_size=4, epochs=2, callbacks=[events.append])
    if not _cupy_has_gpu():
        assert "backend ring" in result.summary
    assert len(result.ranks) == 2  # the worker without rows does not train
    assert result.steps == 2 and len(result.history) == 4
    assert result.epochs[0]["epoch"] == 0 and spec.loss.name in result.epochs[0]  # default fetch
    give_up = time.monotonic() + 10
    while sum(e["type"] == "done" for e in events) < 2 and time.monotonic() < give_up:
        time.sleep(0.05)
    assert sum(e["type"] == "step" for e in events) == 4
    assert {e["job"] for e in events} == {events[0]["job"]}


def test_nccl2_transpiled_program_maps_endpoints_onto_workers(dist_client, workers):
    spec = _small()
    endpoints = [workers[2], "127.0.0.1:6170"]
    t = DistributeTranspiler(DistributeTranspilerConfig())
    t.config.mode = "nccl2"
    t.transpile(0, program=spec.main, startup_program=spec.startup,
                trainers=",".join(endpoints), current_endpoint=endpoints[0])
    assert any(op.type == "gen_nccl_id" for op in spec.startup.global_block().ops)
    x, y = reference_blobs(64, n_features=8, n_classes=3)
    result = train_collective(dist_client, data={"x": x, "y": y}, transpiler=t, backend="ring",
                              batch_size=8, steps_per_epoch=5)  # cycles through 4 batches
    assert [r["address"] for r in result.ranks] == [workers[2], workers[0]]
    assert "endpoint 127.0.0.1:6170" in result.summary
    assert result.steps == 5 and len({r["digest"] for r in result.ranks}) == 1


def test_partition_with_trainers_selects_among_the_data_holders(dist_client, workers):
    spec = _small()
    x, y = reference_blobs(96, n_features=8, n_classes=3)
    partition = partition_by_worker(dist_client, {"x": x, "y": y}, workers=workers)
    result = train_collective(dist_client, spec.main, spec.startup, partition, trainers=2,
                              batch_size=8)
    assert [r["address"] for r in result.ranks] == partition.workers[:2]
    result = train_collective(dist_client, spec.main, spec.startup, partition,
                              trainers=[partition.workers[2], partition.workers[0]], batch_size=8)
    assert [r["address"] for r in result.ranks] == [partition.workers[2], partition.workers[0]]


def test_steps_per_epoch_and_program_split():
    assert steps_per_epoch_for([100, 300], 32) == 4  # min over ranks of ceil(rows / batch)
    assert steps_per_epoch_for([100, 300], 32, 7) == 7
    spec = _small()
    compute, optimize, grads = split_program(spec.main)
    assert [op.type for op in optimize.global_block().ops] == ["sgd"] * 4
    assert "sgd" not in [op.type for op in compute.global_block().ops]
    assert grads == sorted(p.name + "@GRAD" for p in spec.main.all_parameters())
    with pytest.raises(ValueError, match="no optimize op"):
        split_program(spec.main.clone(for_test=True))


def test_bad_arguments_fail_before_launching(dist_client):
    spec = _small()
    x, y = reference_blobs(8, n_features=8, n_classes=3)
    with pytest.raises(ValueError, match="backend="):
        train_collective(dist_client, spec.main, spec.startup, (x, y), backend="gloo")
    with pytest.raises(ValueError, match="data layers"):
        train_collective(dist_client, spec.main, spec.startup, {"x": x})
    with pytest.raises(ValueError, match="not workers of this cluster"):
        train_collective(dist_client, spec.main, spec.startup, (x, y),
                         trainers=["tcp://10.0.0.1:1"])


@pytest.mark.skipif(_cupy_has_gpu(), reason="this machine has a GPU: nccl may well run")
def test_nccl_without_gpu_is_a_clear_error_before_any_work(dist_client):
    spec = _small()
    x, y = reference_blobs(64, n_features=8, n_classes=3)
    events = []

    before = scheduler_probe.mark(dist_client)
    with pytest.raises(NcclUnavailableError, match=r"backend='nccl' cannot run here: worker "
                                                   r"tcp://.*CuPy"):
        train_collective(dist_client, spec.main, spec.startup, (x, y), backend="nccl",
                         callbacks=[events.append])
    # no data was even moved (earlier tests' tasks may still be released meanwhile)
    assert scheduler_probe.work_started_since(dist_client, before) == []
    assert events == []


SECRET = bytes(range(32))


# -- the ring through the fused multi-array path: sizes the tests of ring.py don't cover --------


def _ring_rank(kind, job, rank, addresses, arrays):
    extra = {"secret": SECRET} if kind is TcpRingCommunicator else {}
    with kind(get_worker(), job, rank, addresses, 30.0, **extra) as comm:
        comm.allreduce(arrays, op="mean")
    return arrays


@pytest.mark.parametrize("kind", [RingCommunicator, TcpRingCommunicator])
def test_ring_fused_mixed_dtypes_with_fewer_elements_than_ranks(dist_client, workers, kind):
    addresses = ring_addresses(dist_client, workers)
    rng = np.random.default_rng(7)
    # one float64 element for 3 ranks (empty chunks), float32 sizes 1+2+4 = 7 (not divisible)
    inputs = [[rng.standard_normal(1), rng.standard_normal(1).astype(np.float32),
               rng.standard_normal(2).astype(np.float32),
               rng.standard_normal((2, 2)).astype(np.float32)] for _ in addresses]
    job = uuid.uuid4().hex
    futures = [dist_client.submit(_ring_rank, kind, job, r, addresses,
                                  [a.copy() for a in inputs[r]], workers=[w], pure=False)
               for r, w in enumerate(addresses)]
    results = dist_client.gather(futures)
    for k in range(4):
        expected = np.mean([inp[k].astype(np.float64) for inp in inputs], axis=0)
        np.testing.assert_allclose(results[0][k], expected, rtol=1e-6)
        assert results[0][k].dtype == inputs[0][k].dtype
        assert all(res[k].tobytes() == results[0][k].tobytes() for res in results)


def _tcp_broadcast_rank(job, rank, addresses):
    with TcpRingCommunicator(get_worker(), job, rank, addresses, 30.0, secret=SECRET) as comm:
        arrays = [np.full(5, rank, dtype=np.float32), np.arange(3) * rank]
        comm.broadcast(arrays, root=1)
        comm.barrier()
        total = [np.array([rank], dtype=np.int64)]
        comm.allreduce(total)
    return arrays, total


def test_tcp_ring_broadcast_barrier_and_integer_sum(dist_client, workers):
    addresses = ring_addresses(dist_client, workers)
    job = uuid.uuid4().hex
    futures = [dist_client.submit(_tcp_broadcast_rank, job, r, addresses, workers=[w],
                                  pure=False) for r, w in enumerate(addresses)]
    for arrays, total in dist_client.gather(futures):
        np.testing.assert_array_equal(arrays[0], np.full(5, 1, dtype=np.float32))
        np.testing.assert_array_equal(arrays[1], np.arange(3))
        assert total[0].tolist() == [0 + 1 + 2]


# -- failures: a cluster of their own, because a worker gets killed -------------------------


@pytest.mark.slow
def test_killed_rank_ends_the_job_within_the_deadline_and_the_next_job_runs(killable_client):
    client = killable_client
    client.wait_for_workers(3, timeout=60)
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    pids = client.run(os.getpid)
    victim = pids[workers[1]]  # rank 1 with trainers=2
    spec = _small()
    x, y = reference_blobs(256, n_features=8, n_classes=3)
    killed = []

    def kill_rank_1(event):
        if event.get("type") == "step" and event["rank"] == 1 and event["step"] >= 5 \
                and not killed:
            killed.append(time.monotonic())
            os.kill(victim, signal.SIGKILL)

    deadline_s = 3.0
    start = time.monotonic()
    with pytest.raises(DistributedTrainingError) as info:
        train_collective(client, spec.main, spec.startup, (x, y), trainers=2, batch_size=8,
                         steps_per_epoch=100_000, callbacks=[kill_rank_1],
                         flags=RPCFlags(deadline_ms=int(deadline_s * 1000)))
    assert killed, "the rank was never killed"
    assert time.monotonic() - killed[0] < deadline_s + 10
    assert time.monotonic() - start < 60
    assert workers[1] in str(info.value)  # names the dead rank's worker

    client.wait_for_workers(3, timeout=60)
    result = train_collective(client, spec.main, spec.startup, (x, y), trainers=2,
                              batch_size=8, flags=RPCFlags(deadline_ms=10_000))
    assert result.steps == 16 and len({r["digest"] for r in result.ranks}) == 1


def test_identical_fits_on_dask_arrays_are_bit_identical_wherever_the_chunks_are(dist_client,
                                                                                 workers):
    import dask.array as da

    x, y = reference_blobs(960, n_features=8, n_classes=3, seed=2)
    results = []
    for placement in (None, [workers[2]], [workers[1], workers[0]]):
        xd = da.from_array(x, chunks=(120, 8), name=f"x-{placement}")
        yd = da.from_array(y, chunks=120, name=f"y-{placement}")
        if placement is not None:  # Dask put the chunks elsewhere this time
            xd, yd = dist_client.persist([xd, yd], workers=placement)
        spec = _small()
        results.append(train_collective(dist_client, spec.main, spec.startup,
                                        {"x": xd, "y": yd}, trainers=3, backend="ring",
                                        batch_size=16, epochs=2))
    assert len({r.ranks[0]["digest"] for r in results}) == 1
    assert [r["rows"] for r in results[0].ranks] == [360, 360, 240]  # 8 chunks of 120


def test_collective_refuses_silent_input_and_stops_a_diverging_loss(dist_client, workers):
    # the same checks as pserver mode (launch/feeds.py): nothing truncated, nothing ignored
    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 64)).astype(np.float32)
    y = rng.integers(0, 10, (128, 1))
    spec = mlp()
    with pytest.raises(ValueError, match="'y' is int64, but its data has non-integer values"):
        train_collective(dist_client, spec.main, spec.startup, {"x": x, "y": y + 0.5},
                         trainers=workers[:2], backend="ring")
    with pytest.raises(ValueError, match=r"\['lables'\]"):
        train_collective(dist_client, spec.main, spec.startup, {"x": x, "y": y, "lables": y},
                         trainers=workers[:2], backend="ring")
    wild = mlp(opt=fluid.optimizer.SGD(1e12))
    with pytest.raises(DistributedTrainingError, match=r"became (nan|inf) at step \d+ "
                       r"\(epoch 0\): training diverged"):
        train_collective(dist_client, wild.main, wild.startup, {"x": x, "y": y},
                         trainers=workers[:2], backend="ring", batch_size=16)


def test_ring_over_device_arrays_equals_the_ring_over_host_arrays(device_xp):
    # device="gpu" trainers all-reduce device gradients through the ring (no NCCL here): an
    # in-process cluster, so that its workers see the test's CuPy (the strict one included)
    from distributed import Client, LocalCluster

    x, y = reference_blobs(256, n_features=8, n_classes=3, seed=2)
    params = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        for device in ("cpu", "gpu"):
            spec = _small()
            result = train_collective(client, spec.main, spec.startup, (x, y), backend="ring",
                                      device=device, batch_size=16, epochs=2)
            assert "backend ring" in result.summary
            assert len({r["digest"] for r in result.ranks}) == 1
            params[device] = result.params
    for name, value in params["cpu"].items():
        assert isinstance(params["gpu"][name], np.ndarray)  # results come back to the host
        np.testing.assert_allclose(params["gpu"][name], value, rtol=1e-6, atol=1e-7)
