"""Progress events from trainer tasks to the client, and the result every runtime returns.

Trainers publish small dicts with ``worker.log_event(topic, event)``; the client subscribes to
the job's topic with ``client.subscribe_topic`` and hands each event to the caller's callbacks
while training runs, so a progress bar can follow. Event dicts carry plain Python numbers only
(msgpack-friendly):

``{"type": "step", "job", "rank", "epoch", "step", "samples", "time", "fetches": {name: float}}``
``{"type": "epoch_end", "job", "rank", "epoch", "steps", "samples", "time"}``
``{"type": "done", "job", "rank", "steps", "samples", "elapsed"}``
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

Callback = Callable[[dict], Any]


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
        Every persistable variable of the original (untranspiled) program that the model needs
        for inference: full, unsliced parameters as numpy arrays.
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
