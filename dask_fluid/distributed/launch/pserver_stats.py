"""A pserver task's counters as progress events: steps, tensor bytes in and out, update time.

The shard counts them (``shard.stats``); a thread publishes the totals every
:data:`~.events.PSERVER_INTERVAL_S` while the pserver serves, and once more at the end.
"""

from __future__ import annotations

import threading
from typing import Any

from . import events

__all__ = ["StatsPublisher", "snapshot"]


def snapshot(shard: Any) -> dict[str, Any]:
    """The shard's running totals, as a ``pserver`` event's fields."""
    stats = shard.stats
    return {"endpoint": shard.endpoint, "rounds": int(stats["rounds"]),
            "pushes": int(stats["pushes"]), "optimize_s": float(stats["optimize_s"]),
            "bytes_in": int(stats["bytes_in"]), "bytes_out": int(stats["bytes_out"])}


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
        self.shard = shard
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
                                                   **snapshot(self.shard)})
        except Exception:  # the worker may be closing
            pass

    def stop(self) -> None:
        """Stop the thread and publish the final totals."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.publish()
