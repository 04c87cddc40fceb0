"""The steps of a launched trainer script: counted in its process, published by its worker.

A script run by ``dask-fluid launch`` calls ``exe.run(...)`` itself, so no runtime of ours sees
its steps. The worker that runs a trainer role (:func:`.script.run_role`) gives the script's
process the write end of a pipe, its number in :data:`STEP_FD_ENV`; ``dask-fluid run`` then
installs a :class:`StepReporter` as an executor run hook (:func:`install_from_env`). The
reporter counts the runs of programs that train (programs with backward ops: the trainer
program, not the startup, pserver or test programs; in dygraph mode each ``minimize``), the
rows they were fed and their first fetched value (the loss), and writes a line of JSON to the
pipe at most every :data:`~.events.PUBLISH_INTERVAL_S`, with the same running totals as the
pserver and collective trainers (a :class:`~.events.StepMeter`). The worker reads the lines
(:func:`read_steps`) and publishes them as the role's ``step`` events, so the progress bar, the
Jupyter view and the dashboard page show a launched job as they show the others.

What a script does not tell is left out: its epochs (the events carry none) and the time it
waits for the pservers (``wait_s`` is 0).

This module runs in the script's process too, so it imports nothing of Dask.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from typing import IO, Any

import numpy as np

from ...executor import RunInfo, add_run_hook
from ...framework import OP_ROLE_KEY, OpRole, Program
from .events import PUBLISH_INTERVAL_S, StepMeter

__all__ = ["STEP_FD_ENV", "StepReporter", "batch_rows", "install_from_env", "read_steps",
           "trains"]

logger = logging.getLogger(__name__)

#: the environment variable that names the pipe's write end in a trainer's process
STEP_FD_ENV = "DASK_FLUID_STEP_FD"

_TRAINS: weakref.WeakKeyDictionary[Program, tuple[int, bool]] = weakref.WeakKeyDictionary()


def trains(program: Program) -> bool:
    """Whether running ``program`` is a training step: its global block has backward ops."""
    ops = program.global_block().ops
    cached = _TRAINS.get(program)
    if cached is None or cached[0] != len(ops):  # a program built further is looked at again
        found = any(int(op.attrs.get(OP_ROLE_KEY, 0)) & OpRole.Backward for op in ops)
        cached = _TRAINS[program] = (len(ops), found)
    return cached[1]


def batch_rows(feed: Any) -> int:
    """Rows of a batch: of the first fed value (sequences for a LoD tensor), summed over the
    places of a multi-place feed."""
    if isinstance(feed, (list, tuple)):
        return sum(batch_rows(f) for f in feed)
    if not isinstance(feed, Mapping) or not feed:
        return 0
    value = next(iter(feed.values()))
    lod = value.lod() if callable(getattr(value, "lod", None)) else None
    if lod:
        return len(lod[0]) - 1
    shape = np.shape(value)
    return int(shape[0]) if shape else 1


def _losses(names: list[str], fetched: list) -> dict[str, float]:
    """The fetched values as floats (means of arrays); what is not numeric is left out."""
    out = {}
    for name, value in zip(names, fetched, strict=False):
        try:
            out[name] = float(np.asarray(value, dtype=np.float64).mean())
        except (TypeError, ValueError):
            continue
    return out


class StepReporter:
    """An executor run hook that writes a launched trainer's step records to ``stream``.

    Parameters
    ----------
    stream : text file
        One JSON object a line: ``step`` records (throttled), then one ``done`` record from
        :meth:`close`.
    interval_s : float
        At most one step record per this many seconds.
    """

    def __init__(self, stream: IO[str], interval_s: float = PUBLISH_INTERVAL_S) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.meter: StepMeter | None = None
        self._last: dict | None = None  # the latest step, written or not
        self._pending = False
        self._remove_hook: Callable[[], None] | None = None

    def install(self) -> StepReporter:
        """Hear every :meth:`Executor.run` of this process until :meth:`close`."""
        if self._remove_hook is None:
            self._remove_hook = add_run_hook(self)
        return self

    def __call__(self, info: RunInfo) -> None:
        # a dygraph training step comes as a run of the tracer's program (it has no ops)
        dygraph_step = getattr(info.program, "_tracer", None) is not None
        if self.stream.closed or not (dygraph_step or trains(info.program)):
            return
        rows = batch_rows(info.feed)
        if self.meter is None:  # the loop starts with the first step, not at process start
            self.meter = StepMeter(self.interval_s, start=time.perf_counter() - info.seconds)
        meter = self.meter
        meter.step(rows)
        self._last = {"type": "step", "step": meter.steps - 1, "samples": rows,
                      "fetches": _losses(info.fetch_names, info.fetched)}
        self._pending = True
        if meter.due():
            self._flush(meter, self._last)

    def _flush(self, meter: StepMeter, last: dict) -> None:
        self._write(dict(last, **meter.fields()))
        self._pending = False

    def _write(self, record: dict) -> None:
        try:
            self.stream.write(json.dumps(record) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # the worker went away: train on, unwatched
            logger.debug("step record not written", exc_info=True)
            self._close_stream()

    def close(self) -> None:
        """Write the last step (if not yet written) and the totals, close the stream and stop
        hearing the runs."""
        if self._remove_hook is not None:
            self._remove_hook()
            self._remove_hook = None
        if self.stream.closed:
            return
        meter = self.meter
        if meter is not None:
            if self._pending and self._last is not None:
                self._flush(meter, self._last)
            self._write({"type": "done", "steps": meter.steps, "samples": meter.trained,
                         "elapsed": meter.elapsed})
        self._close_stream()

    def _close_stream(self) -> None:
        try:
            self.stream.close()
        except OSError:
            pass


def install_from_env(environ: MutableMapping[str, str] | None = None) -> StepReporter | None:
    """In a launched trainer's process: report its steps to the pipe that ``environ`` names.

    The variable is removed from ``environ`` and the pipe is not inherited, so the processes
    the script starts report nothing. Returns None when the variable is not set.
    """
    environ = os.environ if environ is None else environ
    value = environ.pop(STEP_FD_ENV, None)
    if not value:
        return None
    try:
        fd = int(value)
        os.set_inheritable(fd, False)
        stream = os.fdopen(fd, "w", buffering=1)
    except (ValueError, OSError) as err:
        logger.warning("%s=%r is not an open pipe (%s): the launcher will not see this "
                       "trainer's steps", STEP_FD_ENV, value, err)
        return None
    reporter = StepReporter(stream).install()
    atexit.register(reporter.close)
    return reporter


def read_steps(stream: IO[str], rank: int, publish: Callable[[dict], None]) -> dict | None:
    """Worker side: publish each record of ``stream`` as an event of trainer ``rank`` until the
    script's process closes it; return the last ``step`` or ``done`` record (None if none)."""
    last = None
    for line in stream:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("type") not in ("step", "done"):
            continue
        record["rank"] = rank
        publish(record)
        last = record
    return last
