"""The scheduler plugin that keeps the dask-fluid jobs' progress for the dashboard page.

Trainer and pserver tasks already publish their progress on each job's topic (``dask-fluid-<job>``)
for the client's progress bar; those events pass through the scheduler, which hands every one
to its plugins' ``log_event``. So the page needs no extra messages from the workers and no
server of its own: :class:`FluidDashboardPlugin` folds the events into a
:class:`~dask_fluid.distributed.launch.progress.JobProgress` per job, in the scheduler's event
loop, and on ``start`` adds the page to the scheduler's dashboard (:mod:`.page`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from distributed.diagnostics.plugin import SchedulerPlugin

from ..events import topic
from ..progress import JobProgress

__all__ = ["PLUGIN_NAME", "Board", "FluidDashboardPlugin", "ensure_dashboard"]

logger = logging.getLogger(__name__)

PLUGIN_NAME = "dask-fluid-dashboard"
TOPIC_PREFIX = topic("")
#: finished jobs kept on the page (the running ones are always kept)
MAX_JOBS = 20

_warned = False


class Board:
    """Every job's progress, newest last, bounded to :data:`MAX_JOBS`."""

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self.max_jobs = max_jobs
        self.jobs: OrderedDict[str, JobProgress] = OrderedDict()
        self.version = 0

    def __call__(self, event: dict) -> None:
        job = event.get("job")
        if not isinstance(job, str):
            return
        progress = self.jobs.get(job)
        if progress is None:
            if event.get("type") not in ("job", "step", "pserver"):
                return  # the tail of a job already dropped
            progress = self.jobs[job] = JobProgress()
            self._trim()
        progress(event)
        self.version += 1

    def _trim(self) -> None:
        finished = [j for j, p in self.jobs.items() if p.status != "running"]
        for job in finished[:max(0, len(self.jobs) - self.max_jobs)]:
            del self.jobs[job]


class FluidDashboardPlugin(SchedulerPlugin):
    """Keeps the dask-fluid jobs' progress and serves the "fluid training" dashboard page.

    Registered by every job (:func:`ensure_dashboard`); its fixed ``name`` makes registering
    it again a no-op.
    """

    name = PLUGIN_NAME
    idempotent = True

    def __init__(self) -> None:
        self.board = Board()
        self.routes: list[str] = []

    async def start(self, scheduler: Any) -> None:
        from .page import install

        try:
            self.routes = install(scheduler, self.board)
        except Exception:  # a dashboard problem must never stop a job
            logger.warning("dask-fluid: could not add the training page to the dashboard",
                           exc_info=True)

    def log_event(self, topic: str, msg: Any) -> None:
        if topic.startswith(TOPIC_PREFIX) and isinstance(msg, dict):
            self.board(msg)

    def __getstate__(self) -> dict:
        return {}  # sent to the scheduler empty: the board lives there

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def ensure_dashboard(client: Any) -> None:
    """Register :class:`FluidDashboardPlugin` on the scheduler of ``client`` (idempotent).

    Never raises: a scheduler that cannot take the plugin (no dask_fluid installed there,
    pickled plugins refused) still runs the job, without the page; a warning says why once.
    """
    global _warned
    try:
        client.register_plugin(FluidDashboardPlugin())
    except Exception as exc:
        if not _warned:
            _warned = True
            logger.warning("dask-fluid: the scheduler did not take the dashboard plugin, so "
                           "there is no training page (%s: %s)", type(exc).__name__, exc)
