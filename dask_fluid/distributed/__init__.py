"""The Dask runtime of dask_fluid: worker services, worker-to-worker RPC, data placement, rings.

Import the submodules you need (``dask_fluid.distributed.rpc``, ``.data``, ``.ring``); this package
file stays light on purpose so that importing it does not pull in ``distributed``.
"""

from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    RemoteError,
    ServiceNotFoundError,
    WorkerLostError,
)

__all__ = [
    "DeadlineExceededError",
    "DistributedTrainingError",
    "JobAbortedError",
    "RemoteError",
    "ServiceNotFoundError",
    "WorkerLostError",
]
