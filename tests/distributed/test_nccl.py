"""The nccl backend.

Two halves:

- on any machine, the backend's logic (the id's forms, session on the scheduler, check-in,
  device selection, fused buffers and stream ordering, the mean, aborts, teardown, errors) runs
  against ``fake_cupy`` imitating CuPy 13 and CuPy 14 (every test runs under both): NCCL as
  threads of an in-process cluster sharing memory, with CuPy's argument types and asynchronous
  streams;
- on a machine with a CUDA GPU, CuPy and NCCL, the real thing: world size 1 on one GPU, and
  one rank per GPU when there are more. Skipped with the reason otherwise.
"""

import collections
import json
import logging
import pathlib
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_worker, wait

import dask_fluid as fluid
from dask_fluid.datasets import reference_blobs
from dask_fluid.distributed import DeadlineExceededError, JobAbortedError, train_collective
from dask_fluid.distributed.collective import nccl as nccl_backend
from dask_fluid.distributed.collective import nccl_setup
from dask_fluid.distributed.collective.nccl import GpuInfo, NcclCommunicator, NcclUnavailableError
from dask_fluid.distributed.comm.rpc import abort_job_sync, ensure_plugin
from dask_fluid.models import mlp
from tests.distributed import fake_cupy

# -- the fake: CuPy 13 and 14 ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=["13.6.0", "14.2.0"])
def fake_client(request):
    """An in-process cluster of 2 workers (threads share the fake NCCL) with a fake CuPy."""
    mp = pytest.MonkeyPatch()
    for name, module in fake_cupy.modules(request.param, gpus=2).items():
        mp.setitem(sys.modules, name, module)
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                          dashboard_address=":0") as cluster, Client(cluster) as client:
            yield client
    finally:
        mp.undo()


@pytest.fixture
def world(fake_client):
    """The fake's state; after each test: nothing leaked, NCCL's rules kept."""
    ensure_plugin(fake_client)  # the workers' abort handler, as train_* installs it
    w = fake_cupy.world()
    w.violations.clear()
    w.aborts.clear()
    yield w
    fake_cupy.check_released()
    w.sticky.clear()
    w.fail_next.clear()
    w.nccl_version = 23203


def _small():
    return mlp(n_features=8, hidden=(16,), n_classes=3, seed=5)


def _submit(client, fn, *args):
    addresses = sorted(client.scheduler_info()["workers"])
    return [client.submit(fn, *args, r, addresses, workers=[w], pure=False)
            for r, w in enumerate(addresses)]


def test_the_id_travels_as_bytes_and_reaches_cupy_in_its_own_form(world):
    raw = bytes(range(0, 256, 2))  # 0..254: half of them are negative chars
    as13 = nccl_setup._SIGNED.unpack(raw)
    assert nccl_setup.uid_bytes(raw) == raw and nccl_setup.uid_bytes(as13) == raw
    assert nccl_setup.uid_bytes(list(as13)) == raw  # msgpack's list of a tuple
    wanted = nccl_setup.uid_for_cupy(raw)
    if world.major >= 14:
        assert wanted == raw
    else:
        assert wanted == as13 and min(wanted) == -128 and max(wanted) == 126
    # the fake takes exactly the installed CuPy's form, with CuPy's message otherwise
    other = as13 if world.major >= 14 else raw
    with pytest.raises(TypeError, match="Argument 'commId' has incorrect type"):
        sys.modules["cupy.cuda.nccl"].NcclCommunicator(1, other, 0)
    with pytest.raises(ValueError, match="128 bytes"):
        nccl_setup.uid_bytes(b"short")


def test_fake_nccl_training_equals_the_ring_and_cleans_up(fake_client, world):
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
    assert world.aborts == []  # destroyed, not aborted


def _fused(job, session, rank, addresses):
    import cupy

    worker = get_worker()
    with cupy.cuda.Device(rank):  # the caller's device arrays live on the rank's device
        device = [cupy.asarray(np.arange(5, dtype=np.float32) * (rank + 1)),
                  cupy.asarray(np.full(3, rank + 10, dtype=np.uint64))]
    host = [np.full(3, rank + 1, dtype=np.float32), np.arange(4.0) * rank,
            np.full((2, 2), 2 * rank, dtype=np.float32), np.full(2, rank, dtype=np.uint32)]
    with NcclCommunicator(worker, job, rank, addresses, 20.0, session=session,
                          device=rank) as comm:
        comm.allreduce(host[:3], op="mean", step=1)
        comm.allreduce(host[3:] + device, op="sum")
        marker = [np.full(2, rank, dtype=np.int64)]
        comm.broadcast(marker, root=1)
        comm.barrier()
    return host + [cupy.asnumpy(a) for a in device] + marker


def test_fused_dtypes_device_arrays_and_broadcast_on_each_ranks_device(fake_client, world):
    session = nccl_backend.create_session(fake_client)
    try:
        outputs = fake_client.gather(_submit(fake_client, _fused, uuid.uuid4().hex, session))
    finally:
        nccl_backend.destroy_session(fake_client, session)
    for out in outputs:
        np.testing.assert_array_equal(out[0], np.full(3, 1.5, dtype=np.float32))
        np.testing.assert_array_equal(out[1], np.arange(4.0) * 0.5)
        np.testing.assert_array_equal(out[2], np.ones((2, 2), dtype=np.float32))
        assert [a.dtype for a in out[:3]] == [np.float32, np.float64, np.float32]
        assert out[3].tolist() == [1, 1] and out[3].dtype == np.uint32
        np.testing.assert_array_equal(out[4], np.arange(5, dtype=np.float32) * 3)
        assert out[5].tolist() == [21, 21, 21] and out[5].dtype == np.uint64
        assert out[6].tolist() == [1, 1]  # broadcast from rank 1
    assert world.aborts == []


def _rank(job, session, deadline_s, rank, addresses):
    with NcclCommunicator(get_worker(), job, rank, addresses, deadline_s,
                          session=session) as comm:
        comm.allreduce([np.ones(2)])


def test_missing_peer_hits_the_deadline(fake_client, world):
    addresses = sorted(fake_client.scheduler_info()["workers"])
    session = nccl_backend.create_session(fake_client)
    future = fake_client.submit(_rank, uuid.uuid4().hex, session, 0.5, 0, addresses,
                                workers=[addresses[0]], pure=False)
    with pytest.raises(DeadlineExceededError, match="only 1 of 2 ranks checked in"):
        future.result(timeout=30)
    nccl_backend.destroy_session(fake_client, session)


def test_a_different_nccl_version_than_the_ids_is_a_clear_error(fake_client, world):
    session = nccl_backend.create_session(fake_client)  # made with NCCL 2.32.3
    world.nccl_version = 21805  # ... the workers have another one
    try:
        futures = _submit(fake_client, _rank, uuid.uuid4().hex, session, 10.0)
        with pytest.raises(NcclUnavailableError, match=r"NCCL 2\.18\.5 but the process that "
                                                       r"made the unique id has NCCL 2\.32\.3"):
            fake_client.gather(futures)
        # gather raises at the first error: let the other rank end too while the session
        # lives (a rank started after destroy_session waits out its 10 s deadline for the id,
        # holding its worker's only thread, and the next test waited for it)
        wait(futures)
        assert all(isinstance(f.exception(), NcclUnavailableError) for f in futures)
    finally:
        nccl_backend.destroy_session(fake_client, session)


def test_check_nccl_identifies_gpus_by_host_and_uuid(fake_client, world):
    a, b = sorted(fake_client.scheduler_info()["workers"])
    gpu = dict(cupy=True, nccl=True, gpus=1, bus_id="0000:01:00.0", nccl_version=23203)
    same = GpuInfo(host="node1", uuid="GPU-1111", **gpu)
    with pytest.raises(NcclUnavailableError, match="share the GPU GPU-1111 on host node1"):
        nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: same})
    # two identical machines: the same bus id, different GPUs
    nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: GpuInfo(
        host="node2", uuid="GPU-2222", **gpu)})
    missing = GpuInfo(problem="CuPy is not importable (ImportError)")
    with pytest.raises(NcclUnavailableError, match=f"worker {b}: CuPy is not importable"):
        nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: missing})
    old = GpuInfo(host="node2", uuid="GPU-2222", **dict(gpu, nccl_version=21805))
    with pytest.raises(NcclUnavailableError, match=rf"NCCL versions differ \(worker {a} "
                                                   rf"2\.32\.3, worker {b} 2\.18\.5"):
        nccl_backend.check_nccl(fake_client, [a, b], {a: same, b: old})


def test_probe_reports_host_uuid_and_versions(fake_client, world):
    infos = nccl_backend.probe_gpus(fake_client)
    for info in infos.values():
        assert info.problem == "" and info.gpus == 2 and info.bus_id == "0000:01:00.0"
        assert info.uuid.startswith("GPU-") and len(info.uuid) == 40
        assert info.nccl_version == 23203 and info.cupy_version == world.version
    world.shared_gpu = True  # two workers handed the same GPU
    try:
        with pytest.raises(NcclUnavailableError, match="share the GPU"):
            train_collective(fake_client, _small().main, _small().startup,
                             reference_blobs(64, n_features=8, n_classes=3), backend="nccl")
    finally:
        world.shared_gpu = False


# -- aborts, kernel errors, close ---------------------------------------------------------------


def _waits_in_a_collective(job, session, rank, addresses):
    worker = get_worker()
    with NcclCommunicator(worker, job, rank, addresses, 30.0, session=session) as comm:
        if rank == 1:
            give_up = time.monotonic() + 10  # never joins the collective: rank 0 waits
            while not fake_cupy.world().aborts and time.monotonic() < give_up:  # until aborted
                time.sleep(0.01)
            return threading.get_ident(), None
        start = time.monotonic()
        try:
            comm.allreduce([np.ones(4)], step=3)
        except JobAbortedError as exc:
            return threading.get_ident(), (time.monotonic() - start, str(exc))
    raise AssertionError("rank 0's collective completed without its peer")


def test_an_abort_is_flagged_by_the_handler_and_acted_on_by_the_task_thread(fake_client,
                                                                            world):
    job = uuid.uuid4().hex
    session = nccl_backend.create_session(fake_client)
    addresses = sorted(fake_client.scheduler_info()["workers"])
    try:
        raw = fake_client.run_on_scheduler(
            lambda dask_scheduler: dask_scheduler._dask_fluid_nccl[session]["uid"])
        futures = _submit(fake_client, _waits_in_a_collective, job, session)
        start = time.monotonic()  # abort once rank 0 waits in its first collective (after the
        while 0 not in getattr(world.cliques.get(raw), "contributions", {}).get(1, {}):  # warm-up)
            assert time.monotonic() - start < 20, "rank 0 never reached its collective"
            time.sleep(0.01)
        abort_job_sync(fake_client, [addresses[0]], job, "stopped by the test")
        (ident0, (waited, message)), _ = fake_client.gather(futures)
    finally:
        nccl_backend.destroy_session(fake_client, session)
    assert "stopped by the test" in message and "step 3" in message and waited < 10
    # ncclCommAbort ran once, on rank 0's task thread (never on the event loop, and never while
    # that thread was inside the communicator: no violations)
    assert len(world.aborts) == 1 and world.aborts[0][1] == ident0


def _blocks_in_init(job, raw, deadline_s, rank, addresses):
    """Rank 0 only: the id came from elsewhere and rank 1 has not joined."""
    with NcclCommunicator(get_worker(), job, rank, addresses, deadline_s, unique_id=raw,
                          nccl_version=23203):
        pass


@pytest.mark.parametrize("how", ["deadline", "abort"])
def test_a_communicator_created_after_the_task_gave_up_is_aborted(fake_client, world, how):
    addresses = sorted(fake_client.scheduler_info()["workers"])
    job, raw = uuid.uuid4().hex, nccl_setup.uid_bytes(sys.modules["cupy.cuda.nccl"]
                                                      .get_unique_id())
    future = fake_client.submit(_blocks_in_init, job, raw, 0.6 if how == "deadline" else 30.0,
                                0, addresses, workers=[addresses[0]], pure=False)
    start = time.monotonic()
    if how == "abort":  # once rank 0 is inside ncclCommInitRank
        while 0 not in getattr(world.cliques.get(raw), "members", {}):
            assert time.monotonic() - start < 20, "rank 0 never began its init"
            time.sleep(0.01)
        abort_job_sync(fake_client, [addresses[0]], job, "stopped during the init")
    expected = DeadlineExceededError if how == "deadline" else JobAbortedError
    with pytest.raises(expected, match="ncclCommInitRank did not complete|during the init"):
        future.result(timeout=30)
    assert time.monotonic() - start < 15  # far from the 30 s deadline of the abort case
    # now the peer joins, as a rank does (init, then the warm-up all-reduce): rank 0's init
    # completes in its helper thread, which finds the task gone and aborts the communicator
    cupy, nccl = sys.modules["cupy"], sys.modules["cupy.cuda.nccl"]
    peer = nccl.NcclCommunicator(2, nccl_setup.uid_for_cupy(raw), 1)
    buf, stream = cupy.zeros(1, dtype=np.float32), cupy.cuda.Stream(non_blocking=True)
    peer.allReduce(buf.data.ptr, buf.data.ptr, 1, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    peer.abort()
    fake_cupy.check_released()
    assert any(name.startswith("nccl-init-") for name, _ in world.aborts), world.aborts


#: job -> set once rank 0's communicator is up (both fake ranks live in this process)
_RANK0_READY: dict[str, threading.Event] = collections.defaultdict(threading.Event)


def _fails_in_a_kernel(job, session, rank, addresses):
    worker = get_worker()
    with NcclCommunicator(worker, job, rank, addresses, 30.0, session=session) as comm:
        if rank == 0:
            _RANK0_READY[job].set()
        else:
            # the fake device is shared: an error injected while rank 0 still polls its init
            # would fail that init instead of the all-reduce under test
            assert _RANK0_READY[job].wait(20), "rank 0 never finished its init"
            fake_cupy.world().inject_kernel_error(0)
        start = time.monotonic()
        try:
            comm.allreduce([np.ones(4)], step=5)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            return type(exc).__name__, str(exc), time.monotonic() - start
    return None


def test_a_kernel_error_surfaces_as_itself_at_once(fake_client, world):
    # both fake workers are device 0 of one process: the sticky error hits both ranks' streams,
    # so either may see it first; the other learns it from the abort notice
    session = nccl_backend.create_session(fake_client)
    try:
        results = fake_client.gather(_submit(fake_client, _fails_in_a_kernel,
                                             uuid.uuid4().hex, session))
    finally:
        nccl_backend.destroy_session(fake_client, session)
    names = sorted(r[0] for r in results)
    assert "CUDARuntimeError" in names, results
    assert set(names) <= {"CUDARuntimeError", "JobAbortedError"}
    for _, message, waited in results:
        assert waited < 10, results  # not the 30 s deadline
        assert "cudaErrorIllegalAddress" in message


def _solo(deadline_s=5.0):
    raw = nccl_setup.uid_bytes(sys.modules["cupy.cuda.nccl"].get_unique_id())
    return NcclCommunicator(None, "solo", 0, ["me"], deadline_s, unique_id=raw,
                            nccl_version=23203)


def test_close_never_masks_the_first_error(world, caplog, monkeypatch):
    def broken(self):
        raise fake_cupy.NcclError(3)

    monkeypatch.setattr(fake_cupy.NcclCommunicator, "destroy", broken)
    with caplog.at_level(logging.WARNING):
        with pytest.raises(KeyError, match="the user's error"):
            with _solo() as comm:
                raise KeyError("the user's error")
    assert isinstance(comm.close_error, fake_cupy.NcclError)
    assert "closing the NCCL communicator failed" in caplog.text
    with pytest.raises(fake_cupy.NcclError, match="NCCL_ERROR_INTERNAL_ERROR"):
        with _solo():
            pass  # nothing else went wrong: the close error is the error
    monkeypatch.undo()
    fake_cupy.check_released()  # the failed destroys were followed by aborts


def test_the_fake_frees_memory_inside_its_own_lock(world):
    # the garbage collector runs finalizers in whatever thread allocates, also one that
    # holds the fake's lock: freeing must not take that lock again (it once hung a full run)
    memory = fake_cupy._Allocation(64, 0)
    ptr = memory.ptr
    assert world.find(ptr, 1) is memory
    with world.lock:
        del memory  # its finalizer runs here
    assert world.find(ptr, 1) is None
    assert ptr not in world.allocations  # dropped at that look-up


def test_world_size_one_all_ops(world):
    with _solo() as comm:
        import cupy

        dev = cupy.asarray(np.array([1.0, 2.0]))
        comm.allreduce([dev], op="mean")
        np.testing.assert_array_equal(cupy.asnumpy(dev), [1.0, 2.0])
        with pytest.raises(TypeError, match="NCCL cannot reduce dtype complex128"):
            comm.allreduce([np.ones(2, dtype=np.complex128)])
        with pytest.raises(ValueError, match="root=1 is not a rank"):
            comm.broadcast([np.ones(1)], root=1)


# -- the executor selects CUDAPlace's device -------------------------------------------------------


def test_cuda_place_runs_on_its_device(world):
    spec = _small()
    exe, scope = fluid.Executor(fluid.CUDAPlace(1)), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    devices = {name: scope.vars[name].device.id for name in scope.vars
               if isinstance(scope.vars[name], fake_cupy.ndarray)}
    assert devices and set(devices.values()) == {1}, devices
    assert world.device == 0  # restored for the calling thread
    with pytest.raises(ValueError, match=r"CUDAPlace\(2\): this process sees 2 CUDA device"):
        fluid.Executor(fluid.CUDAPlace(2))


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


def _gpu_rank(job, session, rank, addresses):
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
@pytest.mark.parametrize("world_size", sorted({1, GPUS}))
def test_real_nccl_allreduce(world_size):
    with _gpu_cluster(world_size) as cluster, Client(cluster) as client:
        client.wait_for_workers(world_size, timeout=120)
        session = nccl_backend.create_session(client)
        try:
            outputs = client.gather(_submit(client, _gpu_rank, uuid.uuid4().hex, session))
        finally:
            nccl_backend.destroy_session(client, session)
    total = world_size * (world_size + 1) / 2
    for out in outputs:
        assert np.all(out[0] == total)
        np.testing.assert_array_equal(out[1], np.arange(7.0) * world_size * (world_size - 1) / 2)
        np.testing.assert_array_equal(out[2], np.full(5, world_size * (world_size - 1) / 2))


@pytest.mark.gpu
@needs_gpu
def test_real_nccl_training_equals_local():
    world_size = min(GPUS, 2)
    batch = 16
    x, y = reference_blobs(world_size * batch * 5, n_features=8, n_classes=3, seed=4)
    with _gpu_cluster(world_size) as cluster, Client(cluster) as client:
        client.wait_for_workers(world_size, timeout=120)
        spec = _small()
        result = train_collective(client, spec.main, spec.startup, (x, y), backend="nccl",
                                  device="gpu", batch_size=batch, shuffle=False)
    assert "backend nccl" in result.summary and len({r["digest"] for r in result.ranks}) == 1
    # local reference with the global batch: rank r holds the r-th contiguous block
    ref = _small()
    scope, exe = fluid.Scope(), fluid.Executor()
    exe.run(ref.startup, scope=scope)
    blocks = np.array_split(np.arange(len(x)), world_size)
    for s in range(5):
        idx = np.concatenate([b[s * batch:(s + 1) * batch] for b in blocks])
        exe.run(ref.main, feed={"x": x[idx], "y": y[idx, None]}, scope=scope)
    for name, value in result.params.items():
        np.testing.assert_allclose(value, np.asarray(scope.get(name)), rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(GPUS > 0, reason="a GPU is present: gpu_check.py runs its checks instead")
def test_gpu_check_skips_saying_why_without_a_gpu(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[2]
    report = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--json", str(report)],
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: no GPU (") and NO_GPU_REASON.split(" (")[0] in \
        proc.stdout
    assert "skipped" in json.loads(report.read_text())


@pytest.mark.parametrize("version", ["13.6.0", "14.2.0"])
def test_gpu_check_raw_calls_match_the_cupy_api(version, monkeypatch):
    # the GPU-only script's own CuPy calls, against the fake's signatures (both versions)
    for name, module in fake_cupy.modules(version, gpus=1).items():
        monkeypatch.setitem(sys.modules, name, module)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.pop(0)
    report = gpu_check._raw_cupy()
    assert report["ok"] and len(report["calls"]) == 2, report
    assert report["unique_id_type"] == ("bytes" if version.startswith("14") else "tuple")
    fake_cupy.check_released()
