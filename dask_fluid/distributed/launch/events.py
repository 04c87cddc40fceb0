"""Progress events from trainer tasks to the client, and the result every runtime returns.

Trainers publish small dicts with ``worker.log_event(topic, event)``; the client subscribes to
the job's topic with ``client.subscribe_topic`` and hands each event to the caller's callbacks
while training runs, so a progress bar can follow. Event dicts carry plain Python numbers only
(msgpack-friendly):

``{"type": "step", "job", "rank", "epoch", "step", "samples", "time", "fetches": {name: float}}``
``{"type": "epoch_end", "job", "rank", "epoch", "steps", "samples", "time"}``
``{"type": "done", "job", "rank", "steps", "samples", "elapsed"}``

A trainer publishes a step event only every :data:`PUBLISH_INTERVAL_S` (and at each epoch's
last step), so the ``samples`` of the events that arrive are not what was trained. Published step
events therefore also carry the rank's running totals, from a :class:`StepMeter`: ``trained``
(samples this rank has trained), ``done_steps``, ``elapsed`` (seconds since its loop started),
and ``step_s`` and ``wait_s`` (seconds per step, and of that the part spent waiting for the
pservers or the all-reduce, averaged over the steps since the previous published event).

The launcher adds ``{"type": "job", ...}`` (what runs where) before the tasks start and
``{"type": "job_end", "status", "error"}`` after; pserver tasks add ``{"type": "pserver",
"endpoint", "worker", "rounds", "pushes", "optimize_s", "bytes_in", "bytes_out"}`` (running
totals) every :data:`PSERVER_INTERVAL_S`.
"""

from __future__ import annotations

import html
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

Callback = Callable[[dict], Any]


def _event_interval(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0 or math.isinf(seconds):
        raise ValueError(f"DASK_FLUID_EVENT_INTERVAL={value!r} is not allowed: seconds between "
                         "a trainer's progress events, a number >= 0 (default 0.2)")
    return seconds


#: A trainer publishes a step event at most this often (and at every epoch's last step): each
#: one costs its worker's event loop, the scheduler and the client CPU that the trainers need
#: (at 0.05 s the reference MLP's 2 + 2 pserver job lost about 5 % of its throughput to them).
#: Progress displays redraw every 0.2 s. ``TrainResult.history`` still holds every step.
#: ``DASK_FLUID_EVENT_INTERVAL`` (seconds, in the workers' environment) overrides it.
PUBLISH_INTERVAL_S = _event_interval(os.environ.get("DASK_FLUID_EVENT_INTERVAL", "0.2"))
#: how often a pserver task publishes its counters
PSERVER_INTERVAL_S = 0.5


def topic(job: str) -> str:
    """The pub/sub topic of one job."""
    return f"dask-fluid-{job}"


def publish(worker: Any, job: str, event: dict) -> None:
    """Send ``event`` from a worker (task thread or event loop) to the job's subscribers."""
    event = dict(event, job=job)
    event.setdefault("time", time.time())
    worker.log_event(topic(job), event)


def step_event(rank: int, epoch: int, step: int, samples: int, fetch_names: Iterable[str],
               fetched: Iterable[Any]) -> dict:
    """A ``step`` event with fetched values reduced to floats (means of arrays)."""
    fetches = {name: float(np.asarray(value, dtype=np.float64).mean())
               for name, value in zip(fetch_names, fetched, strict=False)}
    return {"type": "step", "rank": rank, "epoch": epoch, "step": step, "samples": samples,
            "fetches": fetches}


class StepMeter:
    """One trainer's running totals, and when its next step event is due.

    Call :meth:`step` after every step; when :meth:`due` says so, add :meth:`fields` to the
    step event and publish it.

    Parameters
    ----------
    interval_s : float
        At most one published event per this many seconds (an epoch's last step always is).
    start : float, optional
        When the training loop started, on the ``time.perf_counter`` clock (default: now).
    """

    def __init__(self, interval_s: float = PUBLISH_INTERVAL_S, start: float | None = None
                 ) -> None:
        self.interval_s = float(interval_s)
        self.start = time.perf_counter() if start is None else float(start)
        self.trained = 0
        self.steps = 0
        self.wait_s = 0.0
        self._now = self.start
        self._published = (self.start, 0, 0.0)  # (time, steps, wait) at the last event

    def step(self, samples: int, wait_s: float = 0.0) -> None:
        """One step of ``samples`` rows done, of which ``wait_s`` seconds were spent in exchanges
        with other processes (waiting for pserver replies or the all-reduce; a pserver trainer
        also answers the requests its worker's pserver lent it meanwhile): not compute."""
        self._now = time.perf_counter()
        self.trained += int(samples)
        self.steps += 1
        self.wait_s += float(wait_s)

    @property
    def elapsed(self) -> float:
        """Seconds from the loop's start to the last recorded step."""
        return self._now - self.start

    def due(self, last: bool = False) -> bool:
        """Whether the step just recorded should be published (``last``: it ends an epoch)."""
        return last or self._now - self._published[0] >= self.interval_s

    def fields(self) -> dict[str, Any]:
        """The totals for the step event; starts the next averaging window."""
        t, steps, wait = self._published
        n = max(self.steps - steps, 1)
        out = {"trained": self.trained, "done_steps": self.steps,
               "elapsed": self._now - self.start, "step_s": (self._now - t) / n,
               "wait_s": (self.wait_s - wait) / n}
        self._published = (self._now, self.steps, self.wait_s)
        return out


class Subscription:
    """Calls ``callbacks`` with every event of ``job`` on the client (context manager)."""

    def __init__(self, client: Any, job: str, callbacks: Iterable[Callback] = ()) -> None:
        self.client = client
        self.job = job
        self.callbacks = list(callbacks)
        self.events: list[dict] = []

    def _handle(self, event: Any) -> None:
        # subscribe_topic delivers (timestamp, msg)
        msg = event[1] if isinstance(event, tuple) and len(event) == 2 else event
        if isinstance(msg, dict) and msg.get("origin") == "client":
            return  # the launcher's own event, already handed over by emit()
        self.emit(msg)

    def emit(self, msg: dict) -> None:
        """Hand ``msg`` to the callbacks: the events from the tasks, and the launcher's own
        (``origin: "client"``), which it publishes with a round trip that may reach the
        scheduler before this subscription does."""
        self.events.append(msg)
        for cb in self.callbacks:
            try:
                cb(msg)
            except Exception:  # a broken progress bar must not kill training
                logger.exception("dask_fluid progress callback %r failed", cb)

    def __enter__(self) -> Subscription:
        self.client.subscribe_topic(topic(self.job), self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.client.unsubscribe_topic(topic(self.job))
        except Exception:  # the client may already be closing
            logger.debug("unsubscribe from %s failed", topic(self.job), exc_info=True)


@dataclass
class TrainResult:
    """What ``train_pserver`` and ``train_collective`` return.

    Attributes
    ----------
    params : dict of str to ndarray
        Every persistable variable of the original (untranspiled) program, full and unsliced,
        as numpy arrays: the parameters and the optimizer's state, so that a job started with
        ``initial_values=params`` goes on from where this one stopped.
    history : list of dict
        The ``step`` events of every trainer, in arrival order.
    epochs : list of dict
        Per epoch: mean of each fetched value over all steps of all trainers.
    steps : int
        Steps taken by the busiest trainer.
    samples : int
        Samples processed by all trainers together.
    elapsed_s : float
        Wall time of the training loop (slowest trainer).
    samples_per_s : float
    summary : str
        What ran where (transpiler summary, workers, backend).
    recoveries : list of dict
        Elastic training: the ``{"type": "recovery", ...}`` event of every restart after a
        lost worker (``lost``, ``start_round``, ``source``, ``message``); the other fields
        describe the last attempt.
    stats : dict
        Pserver mode: ``{"trainers": [...], "pservers": [...]}``, per trainer its steps,
        samples, ``elapsed``, ``rpc_s`` (in pserver exchanges: waiting, and answering the
        requests its worker's pserver lent it), ``requests`` (pserver round trips) and tensor
        ``bytes_sent``/``bytes_received`` over sockets; per pserver its
        rounds, pushes, ``blocks`` held (``idle`` when none), tensor ``bytes_in``/``bytes_out``
        and optimize time. Empty for the other runtimes.
    """

    params: dict[str, np.ndarray]
    history: list[dict] = field(default_factory=list)
    epochs: list[dict] = field(default_factory=list)
    steps: int = 0
    samples: int = 0
    elapsed_s: float = 0.0
    samples_per_s: float = 0.0
    summary: str = ""
    recoveries: list[dict] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """Jupyter: the totals, the loss of each epoch and what ran where."""
        rows = "".join(
            f"<tr><th style='text-align:left'>{k}</th><td>{v}</td></tr>" for k, v in (
                ("steps", f"{self.steps:,}"), ("samples", f"{self.samples:,}"),
                ("training time", f"{self.elapsed_s:.2f} s"),
                ("samples/s", f"{self.samples_per_s:,.0f}"),
                ("parameters", f"{len(self.params)} arrays, "
                               f"{sum(int(v.size) for v in self.params.values()):,} values")))
        names = sorted({k for e in self.epochs for k in e if k != "epoch"})
        epochs = "".join(
            "<tr><td>{}</td>{}</tr>".format(
                int(e.get("epoch", i)) + 1,
                "".join(f"<td>{e[n]:.4f}</td>" if n in e else "<td></td>" for n in names))
            for i, e in enumerate(self.epochs))
        head = "".join(f"<th>{html.escape(n)}</th>" for n in names)
        per_epoch = (f"<table><tr><th>epoch</th>{head}</tr>{epochs}</table>"
                     if self.epochs else "")
        summary = f"<pre>{html.escape(self.summary)}</pre>" if self.summary else ""
        return (f"<div class='dask-fluid-train-result'><b>TrainResult</b>"
                f"<table>{rows}</table>{per_epoch}{summary}</div>")
