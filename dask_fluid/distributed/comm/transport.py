"""Which data path a job's bulk traffic takes between workers (resolved on the client).

Dask stays the control plane of every job. The bulk data — pserver pushes and pulls, ring
all-reduce chunks — goes either over sockets that the job's tasks open between workers ("tcp":
no event loop, no per-message serialisation; measured 1.8x the throughput of Dask comms on the
reference MLP), with TLS from the cluster's certificates when the workers' comms are
``tls://`` (:mod:`.tls`), or over Dask's own worker-to-worker comms ("dask": what clusters with
UCX or firewalls that only open the workers' Dask ports need). Each runtime has a
``dask.config`` key with the values ``"auto"`` (sockets where the workers' comms are TCP or TLS,
Dask comms otherwise), ``"tcp"`` or ``"dask"``.
"""

from __future__ import annotations

from collections.abc import Sequence

import dask.config

__all__ = ["CHOICES", "COLLECTIVE_KEY", "PSERVER_KEY", "choose"]

#: how trainers reach pservers on other workers (:mod:`.shard_server` or Dask RPC handlers)
PSERVER_KEY = "dask_fluid.pserver.transport"
#: how ring all-reduce neighbours exchange chunks (:mod:`.tcp_ring` or :mod:`.ring`)
COLLECTIVE_KEY = "dask_fluid.collective.transport"
CHOICES = ("auto", "tcp", "dask")


def choose(key: str, workers: Sequence[str], socket_schemes: Sequence[str]) -> str:
    """``"tcp"`` or ``"dask"`` for a job on ``workers``, from the ``dask.config`` ``key``.

    Parameters
    ----------
    key : str
        :data:`PSERVER_KEY` or :data:`COLLECTIVE_KEY`.
    workers : sequence of str
        The Dask addresses of the job's workers.
    socket_schemes : sequence of str
        Address schemes (``"tcp://"``, ``"tls://"``) whose workers the job's own sockets may
        connect.

    Raises
    ------
    ValueError
        For a value other than :data:`CHOICES`, or ``"tcp"`` on workers of another scheme (a
        socket would bypass their transport).
    """
    choice = dask.config.get(key, "auto")
    if choice not in CHOICES:
        raise ValueError(f"{key} = {choice!r} is not allowed: use one of {CHOICES}")
    plain = all(w.startswith(tuple(socket_schemes)) for w in workers)
    if choice == "tcp" and not plain:
        raise ValueError(f"{key} = 'tcp' needs {' or '.join(socket_schemes)} workers, but the "
                         f"cluster has {sorted(workers)[:3]}: a socket would bypass their "
                         "transport; use 'dask' or 'auto'")
    if choice == "auto":
        return "tcp" if plain else "dask"
    return choice
