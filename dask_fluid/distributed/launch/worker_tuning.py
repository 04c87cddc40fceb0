"""How a Dask worker is set up while training tasks run on it: malloc and Dask's profiler.

Two settings, read on the client when a job starts (``dask.config``) and carried to the tasks
in a :class:`WorkerTuning`:

- ``dask_fluid.worker.tune-malloc`` (default true): glibc's malloc thresholds
  (:mod:`.malloc`).
- ``dask_fluid.worker.profile-interval`` (default ``"100ms"``): Dask's statistical profiler
  samples the stack of every thread running a task every ``distributed.worker.profile.interval``
  (10 ms by default), on the worker's event loop and holding the GIL. A training task runs for
  the whole job, so the profiler walks the trainer's stack (and a pserver task's) 100 times a
  second, twice (recent and per-key profiles). Measured on the reference MLP's 2 + 2 pserver job
  (two workers, one core each): the event loops took 0.068 ms of CPU per step, and each step
  took 1.65-1.72 ms; sampling every 100 ms, 0.022 ms and 1.46-1.54 ms, because the trainer is
  also interrupted less. While training tasks run, the profiler samples at most this often (a
  worker already sampling less often is left alone), and the worker's own interval comes back
  when the last training task on the worker ends. The dashboard's profile of the job still
  shows where its time goes, from fewer samples. ``None`` or ``false`` leaves the profiler
  alone.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dask.config
from dask.utils import parse_timedelta

from . import malloc

__all__ = ["PROFILE_INTERVAL_KEY", "WorkerTuning", "profile_interval_s", "sparse_profiling",
           "tuned_for_training"]

PROFILE_INTERVAL_KEY = "dask_fluid.worker.profile-interval"
#: the default of that setting, seconds
_DEFAULT_INTERVAL_S = 0.1

_lock = threading.Lock()
#: worker -> [training tasks running, its own profiler interval (ms), whether it was changed]
_active: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def profile_interval_s() -> float | None:
    """The client-side setting in seconds (None: leave Dask's profiler alone).

    Raises
    ------
    ValueError
        The value is neither a duration (``"100ms"``, seconds as a number) above 0 nor
        None/false/"off".
    """
    value = dask.config.get(PROFILE_INTERVAL_KEY, _DEFAULT_INTERVAL_S)
    if value is None or value is False or (isinstance(value, str) and value.lower() in
                                           ("off", "false", "none")):
        return None
    try:
        seconds = parse_timedelta(value, default="s")
    except (AttributeError, TypeError, ValueError, KeyError):  # not a duration at all
        seconds = None
    if seconds is None or isinstance(value, bool) or not seconds > 0:
        raise ValueError(f"{PROFILE_INTERVAL_KEY} = {value!r} is not allowed: a duration such "
                         "as '100ms' (how often Dask's profiler may sample a worker while it "
                         "trains), or None to leave the profiler alone")
    return float(seconds)


def _set_interval(pc: Any, ms: float) -> None:
    # on the worker's event loop: tornado's PeriodicCallback is not thread-safe
    running = pc.is_running()
    pc.stop()
    pc.callback_time = ms
    if running:
        pc.start()


@contextlib.contextmanager
def sparse_profiling(worker: Any, interval_s: float | None) -> Iterator[bool]:
    """Let Dask's profiler on ``worker`` sample at most every ``interval_s`` while the block
    runs (see the module docstring); nested and concurrent uses on one worker share it.

    Yields
    ------
    bool
        Whether the interval was changed (a profiler that samples more often than that).
    """
    pc = getattr(worker, "periodic_callbacks", {}).get("profile")
    if interval_s is None or pc is None:
        yield False
        return
    wanted = 1000 * float(interval_s)
    with _lock:
        entry = _active.get(worker)
        if entry is None:  # the first training task on this worker sets it for all of them
            own = pc.callback_time
            entry = _active[worker] = [0, own, own < wanted]
            if own < wanted:
                worker.loop.add_callback(_set_interval, pc, wanted)
        entry[0] += 1
    try:
        yield entry[2]
    finally:
        with _lock:
            entry[0] -= 1
            if entry[0] == 0:
                del _active[worker]
                if entry[2]:
                    worker.loop.add_callback(_set_interval, pc, entry[1])


@dataclass(frozen=True)
class WorkerTuning:
    """The worker settings of one job (read on the client: :meth:`from_config`)."""

    #: raise glibc's malloc thresholds while training (:func:`.malloc.training_malloc`)
    malloc: bool = True
    #: Dask's profiler samples at most this often while training; None: left alone
    profile_interval_s: float | None = _DEFAULT_INTERVAL_S

    @classmethod
    def from_config(cls) -> WorkerTuning:
        """The client's ``dask_fluid.worker.*`` settings (checked)."""
        return cls(malloc.enabled(), profile_interval_s())


@contextlib.contextmanager
def tuned_for_training(worker: Any, tuning: WorkerTuning) -> Iterator[None]:
    """Both settings of ``tuning`` on ``worker`` while the block (a training task) runs."""
    with malloc.training_malloc(tuning.malloc), \
            sparse_profiling(worker, tuning.profile_interval_s):
        yield
