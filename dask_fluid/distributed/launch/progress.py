"""What a job's events say about its progress: one pure aggregator for every view.

:class:`JobProgress` folds the events of one job (:mod:`.events`) into per-trainer and
per-pserver state. The client's progress bar, the Jupyter widget and the dashboard page on the
scheduler all read it, so they show the same numbers. Throughput is computed from what the
trainers report having trained (``trained`` and ``elapsed`` of their step events), never from
the events that happen to arrive: trainers publish only a few step events per second.
Events without those fields (the local estimator's loop, which reports every step in-process)
are counted as they come, on the caller's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobProgress", "LossCurve", "PServerState", "TrainerState"]

#: points kept per trainer's loss curve; beyond that every other point is dropped
MAX_POINTS = 512


class LossCurve:
    """A bounded ``(step, loss)`` series: halves its resolution each time it fills up."""

    def __init__(self, max_points: int = MAX_POINTS) -> None:
        self.max_points = max(2, int(max_points))
        self.steps: list[int] = []
        self.losses: list[float] = []
        self._stride = 1
        self._seen = 0

    def add(self, step: int, loss: float) -> None:
        self._seen += 1
        if (self._seen - 1) % self._stride:
            return
        self.steps.append(int(step))
        self.losses.append(float(loss))
        if len(self.steps) >= self.max_points:
            self.steps, self.losses = self.steps[::2], self.losses[::2]
            self._stride *= 2

    def __len__(self) -> int:
        return len(self.steps)


@dataclass
class TrainerState:
    """The latest report of one trainer."""

    rank: int
    worker: str = ""
    epoch: int = 0
    step: int = -1
    trained: int = 0
    done_steps: int = 0
    elapsed: float = 0.0
    step_s: float = 0.0
    wait_s: float = 0.0
    loss: float | None = None
    done: bool = False
    curve: LossCurve = field(default_factory=LossCurve)

    @property
    def samples_per_s(self) -> float:
        return self.trained / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def compute_s(self) -> float:
        """Seconds per step not spent waiting for the others."""
        return max(self.step_s - self.wait_s, 0.0)


@dataclass
class PServerState:
    """The latest counters of one pserver."""

    endpoint: str
    worker: str = ""
    rounds: int = 0
    pushes: int = 0
    optimize_s: float = 0.0
    bytes_in: int = 0
    bytes_out: int = 0

    @property
    def update_s(self) -> float:
        """Seconds of optimize blocks per step."""
        return self.optimize_s / self.rounds if self.rounds else 0.0


class JobProgress:
    """Folds one job's events into its current state (call it with each event).

    Parameters
    ----------
    loss_name : str, optional
        Key of the loss in the step events' ``fetches``; default: the first key.
    rounds : int, optional
        Steps the job will take (global rounds), when the caller knows it before the job's
        ``job`` event says so.
    """

    def __init__(self, loss_name: str | None = None, rounds: int | None = None) -> None:
        self.loss_name = loss_name
        self.rounds = rounds
        self.trainers: dict[int, TrainerState] = {}
        self.pservers: dict[str, PServerState] = {}
        self.job: str | None = None
        self.info: dict[str, Any] = {}
        self.status = "running"
        self.error = ""
        self.started = time.time()
        self.ended: float | None = None
        self.version = 0  # bumped on every change a view shows
        self.has_epochs = False  # whether any step event said its epoch
        self._clock_start = time.perf_counter()  # for events without trainer totals

    # -- folding events ---------------------------------------------------------------------
    def __call__(self, event: dict) -> None:
        kind = event.get("type")
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None:
            handler(event)
            self.version += 1

    def _on_job(self, event: dict) -> None:
        self.job = event.get("job")
        self.info = {k: v for k, v in event.items() if k not in ("type", "job")}
        if event.get("rounds"):
            self.rounds = int(event["rounds"])
        self.started = float(event.get("time", self.started))
        for rank, worker in enumerate(event.get("trainers", ())):
            self._trainer(rank).worker = str(worker)
        for endpoint, worker in (event.get("pservers") or {}).items():
            self._pserver(endpoint).worker = str(worker)

    def _on_job_end(self, event: dict) -> None:
        self.status = str(event.get("status", "finished"))
        self.error = str(event.get("error", ""))
        self.ended = float(event.get("time", time.time()))

    def _on_step(self, event: dict) -> None:
        t = self._trainer(int(event.get("rank", 0)))
        if "epoch" in event:  # a launched script's steps carry none
            t.epoch = int(event["epoch"])
            self.has_epochs = True
        t.step = max(t.step, int(event.get("step", 0)))
        if "trained" in event:
            t.trained = int(event["trained"])
            t.done_steps = int(event.get("done_steps", t.done_steps))
            t.elapsed = float(event.get("elapsed", t.elapsed))
            t.step_s = float(event.get("step_s", t.step_s))
            t.wait_s = float(event.get("wait_s", t.wait_s))
        else:  # every step reported in-process: count on this clock
            elapsed = time.perf_counter() - self._clock_start
            t.trained += int(event.get("samples", 0))
            t.done_steps += 1
            t.step_s, t.elapsed = elapsed - t.elapsed, elapsed
        loss = self._loss(event.get("fetches") or {})
        if loss is not None:
            t.loss = loss
            t.curve.add(t.step, loss)

    def _on_done(self, event: dict) -> None:
        t = self._trainer(int(event.get("rank", 0)))
        t.done = True
        if "elapsed" in event:
            t.trained = int(event.get("samples", t.trained))
            t.done_steps = int(event.get("steps", t.done_steps))
            t.elapsed = float(event["elapsed"])

    def _on_pserver(self, event: dict) -> None:
        p = self._pserver(str(event.get("endpoint", "")))
        p.worker = str(event.get("worker", p.worker))
        for key in ("rounds", "pushes", "bytes_in", "bytes_out"):
            setattr(p, key, int(event.get(key, getattr(p, key))))
        p.optimize_s = float(event.get("optimize_s", p.optimize_s))

    def _loss(self, fetches: dict) -> float | None:
        if self.loss_name is None and fetches:
            self.loss_name = next(iter(fetches))
        value = fetches.get(self.loss_name) if self.loss_name is not None else None
        return None if value is None else float(value)

    def _trainer(self, rank: int) -> TrainerState:
        if rank not in self.trainers:
            self.trainers[rank] = TrainerState(rank)
        return self.trainers[rank]

    def _pserver(self, endpoint: str) -> PServerState:
        if endpoint not in self.pservers:
            self.pservers[endpoint] = PServerState(endpoint)
        return self.pservers[endpoint]

    # -- what the views show ----------------------------------------------------------------
    @property
    def trained(self) -> int:
        """Samples trained by all trainers so far."""
        return sum(t.trained for t in self.trainers.values())

    @property
    def samples_per_s(self) -> float:
        """Samples trained by all trainers over the slowest trainer's training time (what
        ``TrainResult.samples_per_s`` reports at the end)."""
        elapsed = max((t.elapsed for t in self.trainers.values()), default=0.0)
        return self.trained / elapsed if elapsed > 0 else 0.0

    @property
    def step(self) -> int:
        """Steps (global rounds) begun: the highest step any trainer reported, plus one."""
        return max((t.step for t in self.trainers.values()), default=-1) + 1

    @property
    def epoch(self) -> int:
        return max((t.epoch for t in self.trainers.values()), default=0)

    @property
    def loss(self) -> float | None:
        """Mean of the trainers' latest losses."""
        losses = [t.loss for t in self.trainers.values() if t.loss is not None]
        return sum(losses) / len(losses) if losses else None

    @property
    def step_s(self) -> float:
        """The slowest trainer's recent seconds per step."""
        return max((t.step_s for t in self.trainers.values()), default=0.0)

    @property
    def slowest(self) -> TrainerState | None:
        """The trainer with the most compute per step (the one the others wait for)."""
        reported = [t for t in self.trainers.values() if t.step_s > 0]
        return max(reported, key=lambda t: t.compute_s) if reported else None

    def describe(self) -> dict[str, str]:
        """Short formatted fields for a one-line view."""
        out = {"epoch": str(self.epoch + 1)} if self.has_epochs else {}
        if self.loss is not None:
            out["loss"] = f"{self.loss:.4f}"
        out["samples/s"] = f"{self.samples_per_s:,.0f}"
        if self.step_s:
            out["step"] = f"{self.step_s * 1e3:.1f} ms"
        slowest = self.slowest
        if slowest is not None and len(self.trainers) > 1:
            if any(t.wait_s > 0 for t in self.trainers.values()):
                what = f"{slowest.compute_s * 1e3:.1f} ms compute"
            else:  # no wait reported (a launched script): its whole step, not its compute
                what = f"{slowest.step_s * 1e3:.1f} ms a step"
            out["slowest"] = f"trainer {slowest.rank} ({what})"
        return out
