"""Did a call send work to the cluster? Asked of the scheduler's transition log.

Counting tasks or transitions is not enough on a shared cluster: the tasks of earlier tests are
still being released while a test runs, which changes both counts. New work shows as a task
entering ``waiting``, ``queued``, ``processing`` or ``no-worker``; releases never do.
"""

from __future__ import annotations

from typing import Any

_WORK_STATES = ("waiting", "queued", "processing", "no-worker")


def _now(dask_scheduler: Any) -> float:
    from time import time

    return time()


def _started_since(since: float, dask_scheduler: Any) -> list[str]:
    return sorted({str(entry[0]) for entry in dask_scheduler.transition_log
                   if entry[-1] >= since and entry[2] in _WORK_STATES})


def mark(client: Any) -> float:
    """The scheduler's clock now."""
    return client.run_on_scheduler(_now)


def work_started_since(client: Any, since: float) -> list[str]:
    """Keys of the tasks that started toward running since ``since`` (:func:`mark`)."""
    return client.run_on_scheduler(_started_since, since)
