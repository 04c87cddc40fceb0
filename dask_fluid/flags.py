"""Fluid's ``FLAGS_rpc_*`` settings, read from the environment or from ``dask.config``.

Fluid reads its RPC flags from environment variables (``FLAGS_rpc_deadline=5000 python train.py``).
dask_fluid keeps those names and adds ``dask.config`` keys, so the same setting can live in a Dask
YAML file or a ``dask.config.set`` block:

- ``FLAGS_rpc_deadline`` / ``dask_fluid.rpc.deadline``: deadline of every remote call and every
  wait, in milliseconds (default 180000);
- ``FLAGS_rpc_send_thread_num`` / ``dask_fluid.rpc.send-thread-num`` (default 12),
  ``FLAGS_rpc_get_thread_num`` / ``dask_fluid.rpc.get-thread-num`` (default 12),
  ``FLAGS_rpc_prefetch_thread_num`` / ``dask_fluid.rpc.prefetch-thread-num`` (default 12):
  sizes of the parameter server's thread pools.

The environment variable wins over the config key, which wins over the default.

Flags are resolved **once, on the client, when a job starts** (:meth:`RPCFlags.current`), and the
resulting :class:`RPCFlags` object is shipped to the workers with the job. Workers never read their
own environment: a worker started by a cluster manager usually does not inherit the environment of
the process that calls ``fit()``, and one job must see one consistent deadline on every rank.

``FLAGS_rpc_retry_times`` is deliberately not supported: dask's comm layer already retries
connection setup until ``distributed.comm.timeouts.connect``, and every remote call here is bounded
by the deadline instead of being retried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dask.config

__all__ = ["FLAGS", "RPCFlags", "read_flag"]

# flag name -> (dask.config key, default)
FLAGS: Mapping[str, tuple[str, int]] = {
    "FLAGS_rpc_deadline": ("dask_fluid.rpc.deadline", 180000),
    "FLAGS_rpc_send_thread_num": ("dask_fluid.rpc.send-thread-num", 12),
    "FLAGS_rpc_get_thread_num": ("dask_fluid.rpc.get-thread-num", 12),
    "FLAGS_rpc_prefetch_thread_num": ("dask_fluid.rpc.prefetch-thread-num", 12),
}

dask.config.update_defaults(
    {
        "dask_fluid": {
            "rpc": {key.rsplit(".", 1)[1]: default for key, default in FLAGS.values()},
        }
    }
)


def _positive_int(value: Any, source: str) -> int:
    """Parse ``value`` as an integer > 0; ``source`` names where it came from for the error."""
    parsed: int | None = None
    if isinstance(value, bool):
        parsed = None  # True would silently become 1
    elif isinstance(value, int):
        parsed = value
    elif isinstance(value, float) and value.is_integer():
        parsed = int(value)
    elif isinstance(value, str):
        try:
            parsed = int(value.strip())
        except ValueError:
            parsed = None
    if parsed is None or parsed <= 0:
        raise ValueError(
            f"{source} = {value!r} is not allowed: it must be a positive integer "
            "(a whole number > 0, e.g. 180000 for FLAGS_rpc_deadline in milliseconds)."
        )
    return parsed


def read_flag(name: str) -> int:
    """Return the value of one ``FLAGS_rpc_*`` flag for this process.

    Parameters
    ----------
    name : str
        One of the keys of :data:`FLAGS`, e.g. ``"FLAGS_rpc_deadline"``.

    Returns
    -------
    int
        From the environment variable ``name`` if set, else from the ``dask.config`` key, else
        the default.

    Raises
    ------
    KeyError
        If ``name`` is not a known flag.
    ValueError
        If the value found is not a positive integer; the message names the variable or key.
    """
    try:
        key, default = FLAGS[name]
    except KeyError:
        raise KeyError(f"unknown flag {name!r}; known flags are {sorted(FLAGS)}") from None
    env_value = os.environ.get(name)
    if env_value is not None:
        return _positive_int(env_value, f"environment variable {name}")
    return _positive_int(dask.config.get(key, default), f"dask.config key {key!r}")


@dataclass(frozen=True)
class RPCFlags:
    """The RPC settings of one job, resolved on the client and shipped to the workers.

    Parameters
    ----------
    deadline_ms : int
        Deadline of every remote call and every wait, in milliseconds (``FLAGS_rpc_deadline``).
    send_thread_num, get_thread_num, prefetch_thread_num : int
        Sizes of the parameter server's thread pools for send, get and prefetch requests.
    """

    deadline_ms: int = 180000
    send_thread_num: int = 12
    get_thread_num: int = 12
    prefetch_thread_num: int = 12

    def __post_init__(self) -> None:
        for field_name in ("deadline_ms", "send_thread_num", "get_thread_num",
                           "prefetch_thread_num"):
            _positive_int(getattr(self, field_name), f"RPCFlags.{field_name}")

    @classmethod
    def current(cls) -> RPCFlags:
        """Resolve all flags now, in this process (call it on the client at job start)."""
        return cls(
            deadline_ms=read_flag("FLAGS_rpc_deadline"),
            send_thread_num=read_flag("FLAGS_rpc_send_thread_num"),
            get_thread_num=read_flag("FLAGS_rpc_get_thread_num"),
            prefetch_thread_num=read_flag("FLAGS_rpc_prefetch_thread_num"),
        )

    @property
    def deadline_s(self) -> float:
        """The deadline in seconds, as ``asyncio.wait_for`` wants it."""
        return self.deadline_ms / 1000.0
