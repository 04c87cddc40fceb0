"""The nccl backend against the real CuPy and NCCL libraries, with only the GPU stubbed.

Runs where CuPy and NCCL import (``pip install cupy-cuda12x nvidia-nccl-cu12``; the GPU itself
is not needed) and skips saying so elsewhere. Everything but the device queries is real: the
unique id comes from the scheduler's ``ncclGetUniqueId``, travels to worker processes, and
reaches the real ``NcclCommunicator`` in the form the installed CuPy takes (bytes on CuPy 14,
a tuple on 13: the wrong form is a ``TypeError`` before NCCL is even called). Without a GPU,
``ncclCommInitRank`` then fails inside NCCL (``NCCL_ERROR_UNHANDLED_CUDA_ERROR``), which the
job reports as a clear :class:`NcclInitError` — the proof that the communicator was reached.

Each worker process gets stubbed device queries (``getDeviceCount``, ``getDeviceProperties``,
``Device``) and a host name of its own: two identical machines, the same PCI bus id, different
GPU UUIDs.
"""

import hashlib
import os

import pytest

try:
    import cupy
    from cupy.cuda import nccl

    _REASON = None if getattr(nccl, "available", False) else \
        "CuPy has no NCCL (pip install nvidia-nccl-cu12)"
except Exception as exc:  # ImportError, or CuPy without its CUDA libraries
    _REASON = f"the real CuPy is not importable ({type(exc).__name__}: {exc}); " \
              "pip install cupy-cuda12x nvidia-nccl-cu12 to run these"
if _REASON is not None:
    pytest.skip(_REASON, allow_module_level=True)

from distributed import Client, LocalCluster  # noqa: E402

from dask_fluid.datasets import reference_blobs  # noqa: E402
from dask_fluid.distributed import train_collective  # noqa: E402
from dask_fluid.distributed.collective import nccl_setup  # noqa: E402
from dask_fluid.distributed.collective.nccl import NcclInitError  # noqa: E402
from dask_fluid.models import mlp  # noqa: E402


def _has_gpu() -> bool:
    try:
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - cudaErrorInsufficientDriver and friends
        return False


pytestmark = pytest.mark.skipif(_has_gpu(), reason="a real GPU is present: the GPU tests "
                                                   "(test_nccl.py -m gpu) cover this path")


def _stub_gpu(dask_worker=None) -> dict:
    """In a worker process: one GPU at bus 0000:01:00.0 with a UUID of this process's own."""
    import socket

    import cupy

    pid = os.getpid()

    class Device:
        pci_bus_id = "0000:01:00.0"  # identical machines have identical bus ids

        def __init__(self, device=None):
            self.id = 0 if device is None else int(device)

        def use(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    cupy.cuda.runtime.getDeviceCount = lambda: 1
    cupy.cuda.runtime.getDeviceProperties = lambda i: {
        "uuid": hashlib.md5(f"gpu-of-{pid}".encode()).digest(), "name": b"stub"}
    cupy.cuda.Device = Device
    socket.gethostname = lambda: f"node-{pid}"
    return {"cupy": cupy.__version__, "nccl": nccl_setup.local_nccl_version()}


@pytest.fixture(scope="module")
def stubbed_client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        client.run(_stub_gpu)
        yield client


def test_two_identical_hosts_are_two_gpus(stubbed_client):
    infos = nccl_setup.probe_gpus(stubbed_client)
    assert len({i.bus_id for i in infos.values()}) == 1  # the same bus id...
    assert len({i.gpu for i in infos.values()}) == 2  # ... two GPUs
    nccl_setup.check_nccl(stubbed_client, sorted(infos), infos)  # NCCL is allowed


@pytest.mark.parametrize("backend", ["nccl", "auto"])
def test_the_real_communicator_is_reached_and_fails_only_on_the_missing_gpu(stubbed_client,
                                                                          backend):
    spec = mlp(n_features=8, hidden=(16,), n_classes=3, seed=5)
    data = reference_blobs(128, n_features=8, n_classes=3, seed=2)
    with pytest.raises(NcclInitError) as info:
        train_collective(stubbed_client, spec.main, spec.startup, data, backend=backend,
                         batch_size=16)
    message = str(info.value)
    # past CuPy's argument checks (a wrong commId form is "incorrect type"), inside NCCL
    assert "incorrect type" not in message and "TypeError" not in message
    assert "NcclError" in message and "NCCL_ERROR_UNHANDLED_CUDA_ERROR" in message, message
    assert "creating the NCCL communicator failed on rank" in message
    sessions = stubbed_client.run_on_scheduler(
        lambda dask_scheduler: dict(getattr(dask_scheduler, "_dask_fluid_nccl", {})))
    assert sessions == {}
    # the cluster is usable afterwards
    assert stubbed_client.submit(sum, [1, 2]).result(timeout=30) == 3


def test_the_scheduler_id_is_128_bytes_that_cupy_accepts(stubbed_client):
    raw = nccl_setup.uid_bytes(nccl.get_unique_id())
    assert len(raw) == 128
    form = nccl_setup.uid_for_cupy(raw)
    assert isinstance(form, bytes if nccl_setup.cupy_major() >= 14 else tuple)
    with pytest.raises(Exception) as info:  # noqa: PT011 - NCCL's error without a GPU
        nccl.NcclCommunicator(1, form, 0)
    assert "incorrect type" not in str(info.value)
    other = nccl_setup._SIGNED.unpack(raw) if isinstance(form, bytes) else raw
    with pytest.raises(TypeError, match="Argument 'commId' has incorrect type"):
        nccl.NcclCommunicator(1, other, 0)
