"""A pserver task's counters as progress events: steps, tensor bytes in and out, update time.

The shard counts rounds, pushes and optimize time in ``shard.stats`` but not bytes. This module
counts them from the outside (the shard belongs to the pserver package, which this layer only
uses): every request of every trainer, local, over Dask RPC or over the shard's own socket,
passes through the shard's ``push`` (which takes the gradients), ``reply`` and ``pull_sync``
(which return parameters), so wrapping those three methods on the one shard instance of the
task counts every tensor byte that reaches or leaves the pserver. A thread publishes the totals
every :data:`~.events.PSERVER_INTERVAL_S` while the pserver serves, and once more at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from . import events

__all__ = ["ShardCounters", "StatsPublisher"]


def _nbytes(value: Any) -> int:
    """Bytes of a dense array, of a SelectedRows (rows and values), else 0."""
    n = getattr(value, "nbytes", None)
    if n is not None:
        return int(n)
    return sum(int(getattr(getattr(value, a, None), "nbytes", 0) or 0) for a in ("rows", "value"))


def _total(values: Iterable[Any]) -> int:
    return sum(_nbytes(v) for v in values)


class ShardCounters:
    """Counts the tensor bytes that ``shard`` receives and sends (wraps three of its methods).

    Parameters
    ----------
    shard : PServerShard
        Started, before any trainer calls it (``ServeOptions.on_start``).
    """

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.bytes_in = 0
        self.bytes_out = 0
        self._lock = threading.Lock()  # push and reply run in several threads at once
        push, reply, pull = shard.push, shard.reply, shard.pull_sync

        def counted_push(trainer_id: int, round: int, grads: dict[str, Any]) -> int:
            self._add(_total(grads.values()), 0)
            return push(trainer_id, round, grads)

        shard.push = counted_push
        shard.reply = self._counting_reply(reply)
        shard.pull_sync = self._counting_reply(pull)

    def _counting_reply(self, method: Callable[..., dict]) -> Callable[..., dict]:
        def counted(*args: Any, **kwargs: Any) -> dict:
            out = method(*args, **kwargs)
            self._add(0, _total((out or {}).values()))
            return out

        return counted

    def _add(self, bytes_in: int, bytes_out: int) -> None:
        with self._lock:
            self.bytes_in += bytes_in
            self.bytes_out += bytes_out

    def snapshot(self) -> dict[str, Any]:
        """The running totals, as a ``pserver`` event's fields."""
        stats = self.shard.stats
        return {"endpoint": self.shard.endpoint, "rounds": int(stats["rounds"]),
                "pushes": int(stats["pushes"]), "optimize_s": float(stats["optimize_s"]),
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out}


class StatsPublisher:
    """Publishes ``{"type": "pserver", ...}`` events for one shard from a daemon thread.

    Parameters
    ----------
    worker : distributed.Worker
    job : str
    shard : PServerShard
    interval_s : float
    """

    def __init__(self, worker: Any, job: str, shard: Any,
                 interval_s: float = events.PSERVER_INTERVAL_S) -> None:
        self.worker, self.job, self.interval_s = worker, job, float(interval_s)
        self.counters = ShardCounters(shard)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"dask-fluid-stats-{shard.endpoint}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.publish()

    def publish(self) -> None:
        """Send the current totals (never raises: the counters must not stop a pserver)."""
        try:
            events.publish(self.worker, self.job, {"type": "pserver",
                                                   "worker": self.worker.address,
                                                   **self.counters.snapshot()})
        except Exception:  # the worker may be closing
            pass

    def stop(self) -> None:
        """Stop the thread and publish the final totals."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.publish()
