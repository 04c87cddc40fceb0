"""Collectives among the places of one process: ``BuildStrategy.sync_batch_norm`` over the
places of a ``CompiledProgram`` (``CPU_NUM`` > 1, or several GPUs of one process).

:mod:`dask_fluid.multi_place` runs each place's forward and backward in a thread of its own.
With ``sync_batch_norm`` the program's training batch norms run as Fluid's ``sync_batch_norm``
ops (:mod:`.sync_batch_norm`), which sum their statistics over the ranks of the communicator in
their scope. For the places of a process that communicator is a :class:`PlaceCommunicator`:
every place hands its arrays over, a barrier waits for all of them, and each place adds them up
in place order (so every place gets the same bits), as Fluid's ``sync_batch_norm`` kernel
all-reduces between the GPUs of its process. A place that fails aborts its group: the others
leave their waits with :class:`~..errors.JobAbortedError` instead of waiting for ever.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import JobAbortedError
from .ops import COMM_VAR
from .ring import Communicator
from .trainers import TrainerComm

__all__ = ["PlaceCommunicator", "PlaceGroup"]

_ABSENT = object()


class PlaceGroup:
    """The communicators of one step's places, each in its place's scope under
    ``NCCLID`` (where the ``sync_batch_norm`` kernels look) until :meth:`detach`.

    Parameters
    ----------
    scopes : sequence of Scope
        One per place, place 0's first.
    """

    def __init__(self, scopes: Sequence[Any]) -> None:
        self.nranks = len(scopes)
        self._barrier = threading.Barrier(self.nranks)
        self._lock = threading.Lock()
        self._slots: list[list[np.ndarray]] = [[] for _ in range(self.nranks)]
        self.reason = ""
        #: the place whose failure aborted the group (None: not aborted by a place)
        self.failed_place: int | None = None
        self._scopes = list(scopes)
        self._saved = [scope.vars.get(COMM_VAR, _ABSENT) for scope in self._scopes]
        for rank, scope in enumerate(self._scopes):
            scope.vars[COMM_VAR] = TrainerComm(PlaceCommunicator(self, rank), "ring", rank,
                                               self.nranks, [])

    def abort(self, reason: str, place: int | None = None) -> None:
        """Wake every place waiting in a collective of this group with JobAbortedError
        (``place``: the place whose failure stops the others)."""
        with self._lock:
            if not self.reason:
                self.reason, self.failed_place = reason, place
        self._barrier.abort()

    def detach(self) -> None:
        """Put back what the scopes held under ``NCCLID`` before."""
        for scope, saved in zip(self._scopes, self._saved, strict=True):
            if saved is _ABSENT:
                scope.vars.pop(COMM_VAR, None)
            else:
                scope.vars[COMM_VAR] = saved

    def _wait(self, rank: int, step: int | None) -> None:
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise JobAbortedError(f"place {rank} stopped waiting for the other places: "
                                  f"{self.reason or 'the group was aborted'}", "place",
                                  f"place {rank}", step) from None


class PlaceCommunicator(Communicator):
    """Rank ``rank`` of a :class:`PlaceGroup` (see the module docstring)."""

    def __init__(self, group: PlaceGroup, rank: int) -> None:
        self.group = group
        self.rank = rank
        self.nranks = group.nranks

    def _gather(self, arrays: Sequence[np.ndarray], step: int | None) -> list[list[np.ndarray]]:
        """Every place's ``arrays``, once all have handed theirs over."""
        self.group._slots[self.rank] = [np.asarray(a) for a in arrays]
        self.group._wait(self.rank, step)
        return self.group._slots

    def allreduce(self, arrays: Sequence[np.ndarray], *, op: str = "sum",
                  step: int | None = None) -> None:
        if op not in ("sum", "mean"):
            raise ValueError(f"allreduce: op must be 'sum' or 'mean', got {op!r}")
        slots = self._gather(arrays, step)
        totals = []
        for i in range(len(arrays)):
            total = np.array(slots[0][i], copy=True)
            for other in slots[1:]:
                total += other[i]
            totals.append(total / self.nranks if op == "mean" else total)
        self.group._wait(self.rank, step)  # every place has read the others' arrays
        for array, total in zip(arrays, totals, strict=True):
            array[...] = total

    def broadcast(self, arrays: Sequence[np.ndarray], root: int = 0, *,
                  step: int | None = None) -> None:
        source = [np.array(a, copy=True) for a in self._gather(arrays, step)[root]]
        self.group._wait(self.rank, step)
        for array, value in zip(arrays, source, strict=True):
            array[...] = value

    def barrier(self, *, step: int | None = None) -> None:
        self.group._wait(self.rank, step)

    def abort(self, reason: str) -> None:
        self.group.abort(reason)

    def close(self) -> None:
        """Nothing to release: the group lives as long as its step."""
