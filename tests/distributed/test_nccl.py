"""The nccl backend.

Two halves:

- on any machine, the backend's logic (session on the scheduler, check-in, fused buffers, the
  mean, teardown, errors) runs against a fake ``cupy`` whose NCCL communicator reduces through
  shared memory between the threads of an in-process cluster;
- on a machine with a CUDA GPU, CuPy and NCCL, the real thing: world size 1 on one GPU, and
  one rank per GPU when there are more. Skipped with the reason otherwise.
"""

import ctypes
import itertools
import sys
import threading
import types
import uuid

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_worker

import dask_fluid as fluid
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import DeadlineExceededError, train_collective
from dask_fluid.distributed.collective import nccl as nccl_backend
from dask_fluid.distributed.collective.nccl import GpuInfo, NcclCommunicator, NcclUnavailableError
from dask_fluid.models import mlp

# -- a fake cupy: numpy arrays with device pointers, NCCL as threads sharing memory ------------

_DTYPES = {1: np.float16, 2: np.float32, 3: np.float64, 4: np.int32, 5: np.int64, 6: np.uint8,
           7: np.int8}


class _FakeDeviceArray(np.ndarray):
    @property
    def data(self):  # cupy's MemoryPointer
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _view(ptr, count, dtype):
    dtype = np.dtype(_DTYPES[dtype])
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype)


class _Clique:
    def __init__(self, n):
        self.barrier = threading.Barrier(n, timeout=20)
        self.slots = {}


class _FakeComm:
    cliques: dict = {}
    lock = threading.Lock()
    destroyed = 0

    def __init__(self, n, uid, rank):
        assert isinstance(uid, tuple) and len(uid) == 128, "the uid must be a tuple again"
        with self.lock:
            self.clique = self.cliques.setdefault(uid, _Clique(n))
        self.n, self.rank, self.calls = n, rank, 0
        self.clique.barrier.wait()  # ncclCommInitRank returns once every rank joined

    def _collective(self, contribution, combine, recv, count, dtype):
        key, self.calls = self.calls, self.calls + 1
        self.clique.slots[(key, self.rank)] = contribution.copy()
        self.clique.barrier.wait()
        result = combine([self.clique.slots[(key, r)] for r in range(self.n)])
        self.clique.barrier.wait()
        _view(recv, count, dtype)[:] = result

    def allReduce(self, send, recv, count, dtype, op, stream):  # noqa: N802 - cupy's name
        self._collective(_view(send, count, dtype), lambda parts: sum(parts[1:], parts[0]),
                         recv, count, dtype)

    def broadcast(self, send, recv, count, dtype, root, stream):
        self._collective(_view(send, count, dtype), lambda parts: parts[root], recv, count,
                         dtype)

    def check_async_error(self):
        pass

    def destroy(self):
        type(self).destroyed += 1

    def abort(self):
        self.clique.barrier.abort()


def _fake_cupy():
    counter = itertools.count()
    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    nccl = types.ModuleType("cupy.cuda.nccl")
    nccl.available = True
    nccl.get_unique_id = lambda: tuple(int(v) for v in np.random.randint(-128, 128, 128))
    nccl.NcclCommunicator = _FakeComm
    nccl.groupStart = nccl.groupEnd = lambda: None
    for code, dtype in _DTYPES.items():
        setattr(nccl, f"NCCL_{np.dtype(dtype).name.upper()}", code)
    nccl.NCCL_SUM = 0

    class Device:
        def __init__(self, index=0):
            self.pci_bus_id = f"fake:{next(counter)}"  # one fake GPU per worker

        def use(self):
            pass

    class Stream:
        ptr, done = 0, True

        def __init__(self, non_blocking=False):
            pass

        def wait_event(self, event):
            pass

        def synchronize(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cuda.Device, cuda.Stream = Device, Stream
    cuda.Event = lambda: types.SimpleNamespace(record=lambda stream=None: None)
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
    cuda.nccl = nccl
    cupy.cuda = cuda
    cupy.asarray = lambda a: a if isinstance(a, _FakeDeviceArray) else \
        np.array(a, copy=True).view(_FakeDeviceArray)
    cupy.concatenate = lambda parts: np.concatenate(parts).view(_FakeDeviceArray)
    cupy.asnumpy = lambda a: np.array(a, copy=True).view(np.ndarray)
    return {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl}


@pytest.fixture(scope="module")
def fake_client():
    """An in-process cluster of 2 workers (threads share the fake NCCL) with the fake cupy."""
    mp = pytest.MonkeyPatch()
    for name, module in _fake_cupy().items():
        mp.setitem(sys.modules, name, module)
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            yield client
    finally:
        mp.undo()


def _small():
    return mlp(n_features=8, hidden=(16,), n_classes=3, seed=5)


def test_fake_nccl_training_equals_the_ring_and_cleans_up(fake_client):
    x, y = reference_blobs(256, n_features=8, n_classes=3, seed=2)
    results = {}
    for backend in ("ring", "auto"):
        spec = _small()
        results[backend] = train_collective(fake_client, spec.main, spec.startup, (x, y),
                                            backend=backend, batch_size=16, epochs=2)
    assert "backend ring" in results["ring"].summary
    assert "backend nccl" in results["auto"].summary  # every worker "has a GPU"
    assert len({r["digest"] for r in results["auto"].ranks}) == 1
    for name, value in results["ring"].params.items():
        np.testing.assert_allclose(results["auto"].params[name], value, rtol=1e-6, atol=1e-7)
    sessions = fake_client.run_on_scheduler(
        lambda dask_scheduler: dict(getattr(dask_scheduler, "_dask_fluid_nccl", {})))
    assert sessions == {}  # the session was deleted
    assert _FakeComm.destroyed >= 2


def _rank(job, rank, addresses, session, deadline_s, arrays):
    worker = get_worker()
    with NcclCommunicator(worker, job, rank, addresses, deadline_s, session=session) as comm:
        comm.allreduce(arrays, op="mean", step=1)
        marker = [np.full(2, rank, dtype=np.int64)]
        comm.broadcast(marker, root=1)
        comm.barrier()
    return arrays + marker


def test_fake_nccl_fused_dtypes_and_broadcast(fake_client):
    addresses = sorted(fake_client.scheduler_info()["workers"])
    session, job = nccl_backend.create_session(fake_client), uuid.uuid4().hex
    inputs = [[np.full(3, r + 1, dtype=np.float32), np.arange(4.0) * r,
               np.full((2, 2), 2 * r, dtype=np.float32)] for r in range(2)]
    futures = [fake_client.submit(_rank, job, r, addresses, session, 20.0, inputs[r],
                                  workers=[w], pure=False) for r, w in enumerate(addresses)]
    outputs = fake_client.gather(futures)
    nccl_backend.destroy_session(fake_client, session)
    for out in outputs:
        np.testing.assert_array_equal(out[0], np.full(3, 1.5, dtype=np.float32))
        np.testing.assert_array_equal(out[1], np.arange(4.0) * 0.5)
        np.testing.assert_array_equal(out[2], np.ones((2, 2), dtype=np.float32))
        assert [a.dtype for a in out[:3]] == [np.float32, np.float64, np.float32]
        assert out[3].tolist() == [1, 1]  # broadcast from rank 1


def test_fake_nccl_missing_peer_hits_the_deadline(fake_client):
    addresses = sorted(fake_client.scheduler_info()["workers"])
    session = nccl_backend.create_session(fake_client)
    future = fake_client.submit(_rank, uuid.uuid4().hex, 0, addresses, session, 0.5,
                                [np.ones(2)], workers=[addresses[0]], pure=False)
    with pytest.raises(DeadlineExceededError, match="only 1 of 2 ranks checked in"):
        future.result(timeout=30)
    nccl_backend.destroy_session(fake_client, session)


def test_check_nccl_names_what_is_missing(fake_client):
    a, b = sorted(fake_client.scheduler_info()["workers"])
    same = GpuInfo(cupy=True, nccl=True, gpus=1, device="0000:01:00.0")
    with pytest.raises(NcclUnavailableError, match="share the GPU 0000:01:00.0"):
        nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: same})
    missing = GpuInfo(problem="CuPy is not importable (ImportError)")
    with pytest.raises(NcclUnavailableError, match=f"worker {b}: CuPy is not importable"):
        nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: missing})


# -- the real thing -----------------------------------------------------------------------------


def _gpu_count() -> tuple[int, str]:
    try:
        import cupy
        from cupy.cuda import nccl
    except Exception as exc:
        return 0, f"CuPy is not importable ({type(exc).__name__})"
    if not getattr(nccl, "available", False):
        return 0, "CuPy has no NCCL (cupy.cuda.nccl.available is False)"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return 0, f"no CUDA GPU ({type(exc).__name__})"
    return n, "" if n else "no CUDA GPU"


GPUS, NO_GPU_REASON = _gpu_count()
needs_gpu = pytest.mark.skipif(GPUS == 0, reason=f"needs a CUDA GPU with NCCL: {NO_GPU_REASON}")


def _gpu_cluster(n):
    """One worker process per GPU, each seeing only its own GPU as device 0."""
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {f"gpu{i}": {"cls": Nanny, "options": {"nthreads": 1, "env": {
        "CUDA_VISIBLE_DEVICES": str(i)}}} for i in range(n)}
    return SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {
        "dashboard_address": ":0"}}, silence_logs=40)


def _gpu_rank(job, rank, addresses, session):
    import cupy

    worker = get_worker()
    with NcclCommunicator(worker, job, rank, addresses, 60.0, session=session) as comm:
        dev = [cupy.full(1000003, rank + 1, dtype=cupy.float32), cupy.arange(7.0) * rank]
        host = [np.full(5, rank, dtype=np.float64)]
        comm.allreduce(dev + host, op="sum")
        comm.barrier()
        return [cupy.asnumpy(a) for a in dev] + host


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("world", sorted({1, GPUS}))
def test_real_nccl_allreduce(world):
    with _gpu_cluster(world) as cluster, Client(cluster) as client:
        client.wait_for_workers(world, timeout=120)
        addresses = sorted(client.scheduler_info()["workers"])
        session, job = nccl_backend.create_session(client), uuid.uuid4().hex
        try:
            futures = [client.submit(_gpu_rank, job, r, addresses, session, workers=[w],
                                     pure=False) for r, w in enumerate(addresses)]
            outputs = client.gather(futures)
        finally:
            nccl_backend.destroy_session(client, session)
    total = world * (world + 1) / 2
    for out in outputs:
        assert np.all(out[0] == total)
        np.testing.assert_array_equal(out[1], np.arange(7.0) * world * (world - 1) / 2)
        np.testing.assert_array_equal(out[2], np.full(5, world * (world - 1) / 2))


@pytest.mark.gpu
@needs_gpu
def test_real_nccl_training_equals_local():
    world = min(GPUS, 2)
    batch = 16
    x, y = reference_blobs(world * batch * 5, n_features=8, n_classes=3, seed=4)
    with _gpu_cluster(world) as cluster, Client(cluster) as client:
        client.wait_for_workers(world, timeout=120)
        spec = _small()
        result = train_collective(client, spec.main, spec.startup, (x, y), backend="nccl",
                                  device="gpu", batch_size=batch, shuffle=False)
    assert "backend nccl" in result.summary and len({r["digest"] for r in result.ranks}) == 1
    # local reference with the global batch: rank r holds the r-th contiguous block
    ref = _small()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(ref.startup, scope=scope)
    blocks = np.array_split(np.arange(len(x)), world)
    for s in range(5):
        idx = np.concatenate([b[s * batch:(s + 1) * batch] for b in blocks])
        exe.run(ref.main, feed={"x": x[idx], "y": y[idx, None]}, scope=scope)
    for name, value in result.params.items():
        np.testing.assert_allclose(value, np.asarray(scope.get(name)), rtol=1e-4, atol=1e-5)
