"""The Dask runtime of dask_fluid: worker services, worker-to-worker RPC, data placement, rings.

Import the submodules you need (``dask_fluid.distributed.rpc``, ``.data``, ``.ring``); this package
file stays light on purpose so that importing it does not pull in ``distributed``: the training
entry points (``train_collective``, ...) are loaded on first access (module ``__getattr__``).
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
    "train_collective": "dask_fluid.distributed.collective",
    "train_pserver": "dask_fluid.distributed.pserver_runtime",
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
