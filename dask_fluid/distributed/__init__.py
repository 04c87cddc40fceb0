"""The distributed runtime of dask_fluid, in four layers (each imports only those below it):

``comm``
    Bytes between processes: Dask worker services and RPC (``rpc``), the framed socket wire
    (``wire``), shared-memory payloads, the choice of data path (``transport``).
``pserver``
    Fluid's parameter server: the shard that ``listen_and_serv`` serves, its socket server, the
    fused optimize step, checkpoints, and the trainer side's client and RPC-op kernels.
``collective``
    All-reduce for NCCL2 mode: the ring over Dask comms, the TCP ring, NCCL through CuPy.
``launch``
    Placing programs and data on Dask workers and watching them: ``train_pserver``,
    ``train_collective``, tasks, data placement, events.

This package file stays light on purpose so that importing it does not pull in ``distributed``:
the training entry points are loaded on first access (module ``__getattr__``).
"""

import importlib

from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
    WorkerLostError,
)

# entry point -> the module that defines it; imported on first access only
_LAZY = {
    "train_collective": "dask_fluid.distributed.collective.runtime",
    "train_pserver": "dask_fluid.distributed.launch.pserver_runtime",
}

__all__ = [
    "DeadlineExceededError",
    "DistributedTrainingError",
    "JobAbortedError",
    "RemoteError",
    "ServiceNotFoundError",
    "WorkerLostError",
    *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
