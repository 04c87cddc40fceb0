"""NCCL backend of the collective mode: CuPy's ``NcclCommunicator``, one per rank.

The communicator is created inside the trainer task after the client set up the unique id on
the scheduler (:mod:`.nccl_setup`: probing, sessions, the id's forms), or, in a process started
Fluid's way, from the id trainer 0 handed out (:mod:`.trainers`).

What NCCL allows, and how this module keeps to it:

- ``ncclCommInitRank`` blocks until every rank joined and cannot be cancelled. It runs in a
  helper thread (after selecting this rank's device there: the current device is per thread)
  which the task thread polls, so that the deadline and an abort of the job end the wait. The
  helper also runs a one-element all-reduce, and ``NCCL_RUNTIME_CONNECT=0`` is set, so that the
  peers' connections are made inside that bounded wait rather than in the first collective's
  ``groupEnd``. A communicator whose init completes after the task gave up is aborted by the
  helper itself: none is left behind.
- A communicator must not be used by two threads at once. Only the task thread calls it:
  an abort of the job arriving from elsewhere (the worker's event loop, through the job's
  service) only sets a flag, and the task thread, which polls it while it waits for a
  collective, calls ``ncclCommAbort``.
- Collectives fuse the arrays into one flat device buffer per dtype, written on the current
  stream; the communicator's own stream waits for an event recorded after those writes, runs the
  collectives, and the task thread polls that stream (``cudaStreamQuery``) instead of blocking in
  ``synchronize``: a dead peer becomes ``DeadlineExceededError``, an abort ``JobAbortedError``, a
  CUDA or NCCL error (``cudaStreamQuery``, ``ncclCommGetAsyncError``) is raised as itself at
  once, and the other ranks are told.
- ``close`` destroys the communicator when its stream drained within the deadline and aborts it
  otherwise; it never raises (an error there is logged and kept in ``close_error``), so the
  error that ended the job is the one the user sees.

CuPy is optional: it is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from dask_fluid.distributed.collective.nccl_setup import (
    GpuInfo,
    NcclUnavailableError,
    check_nccl,
    check_nccl_version,
    create_session,
    destroy_session,
    fetch_unique_id,
    probe_gpus,
    uid_bytes,
    uid_for_cupy,
)
from dask_fluid.distributed.collective.ring import Communicator
from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
)

__all__ = [
    "GpuInfo",
    "NcclCommunicator",
    "NcclInitError",
    "NcclUnavailableError",
    "check_nccl",
    "create_session",
    "destroy_session",
    "fetch_unique_id",
    "probe_gpus",
]

logger = logging.getLogger(__name__)

_OPS = ("sum", "mean")
_POLL_S = 20e-6  # stream polling pause: a collective of a small model takes ~100 µs
_INIT_POLL_S = 0.05  # how often the task thread looks at the init helper (abort, deadline)
_NOTICE_S = 2.0  # how long a rank that saw a peer's connection break waits for its abort notice

#: numpy dtype name -> NCCL datatype constant (bfloat16 needs ml_dtypes' numpy dtype)
_DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
           "bfloat16": "NCCL_BFLOAT16", "int8": "NCCL_INT8", "uint8": "NCCL_UINT8",
           "int32": "NCCL_INT32", "uint32": "NCCL_UINT32", "int64": "NCCL_INT64",
           "uint64": "NCCL_UINT64"}


class NcclInitError(DistributedTrainingError):
    """``ncclCommInitRank`` (or the warm-up collective right after it) failed on one rank."""

    hint = ("NCCL_ERROR_UNHANDLED_CUDA_ERROR means NCCL could not use the GPU (driver, "
            "CUDA_VISIBLE_DEVICES); run with NCCL_DEBUG=INFO for NCCL's own account.")


class _AbortHook(rpc.Service):
    """The service attached for the job: lets ``abort_job`` reach the communicator.

    It runs on the worker's event loop, possibly while the task thread is inside an NCCL call,
    so it only flags the abort; the task thread acts on it.
    """

    def __init__(self, comm: NcclCommunicator) -> None:
        self._comm = comm

    def abort(self, reason: str) -> None:
        self._comm._flag(reason)


def _nccl_dtype(nccl: Any, dtype: np.dtype) -> int:
    name = np.dtype(dtype).name
    code = getattr(nccl, _DTYPES.get(name, ""), None)
    if code is None:
        known = sorted(n for n, c in _DTYPES.items() if hasattr(nccl, c))
        raise TypeError(f"NCCL cannot reduce dtype {name}; use one of {known}")
    return code


class _Init:
    """What the init helper thread hands to the task thread, under a lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.comm: Any = None
        self.stream: Any = None
        self.error: BaseException | None = None
        self.abandoned = False


class NcclCommunicator(Communicator):
    """A :class:`~dask_fluid.distributed.collective.ring.Communicator` on ``cupy.cuda.nccl``.

    Arrays may be cupy (reduced in place on the device) or numpy (staged through the device and
    copied back).

    Parameters
    ----------
    worker : distributed.Worker or None
        This rank's worker; None outside Dask (aborts then stay in this process, and the other
        ranks see NCCL fail or hit their deadline).
    job : str
        The job id (aborts of the job reach this communicator).
    rank : int
    addresses : sequence of str
        Worker address (or endpoint) of every rank, in rank order (for errors and to propagate
        aborts).
    deadline_s : float
        Bound of the rendezvous, the init and every collective.
    session : str, optional
        From :func:`create_session`.
    unique_id : bytes, optional
        The NCCL unique id (128 bytes, or CuPy's form of it), when it came another way than a
        session.
    nccl_version : int, optional
        The NCCL version of the process that made ``unique_id``; checked against this one.
    device : int
        CUDA device of this rank (0 with one worker per GPU and ``CUDA_VISIBLE_DEVICES``).
    name : str
        Service name of the abort hook.

    Attributes
    ----------
    close_error : Exception or None
        What went wrong while closing, if anything (``close`` never raises).
    """

    def __init__(self, worker: Any, job: str, rank: int, addresses: Sequence[str],
                 deadline_s: float, *, session: str | None = None,
                 unique_id: Any = None, nccl_version: int | None = None, device: int = 0,
                 name: str = "nccl") -> None:
        if (session is None) == (unique_id is None):
            raise ValueError("give NcclCommunicator either a session or a unique_id")
        import cupy  # noqa: PLC0415
        from cupy.cuda import nccl  # noqa: PLC0415

        self._cupy, self._nccl = cupy, nccl
        self.worker, self.job, self.rank = worker, job, rank
        self.addresses = list(addresses)
        self.nranks = len(self.addresses)
        self.deadline_s = float(deadline_s)
        self.name = name
        self.device = int(device)
        self.close_error: BaseException | None = None
        self._aborted: str | None = None  # set by any thread; acted on by the task thread
        self._comm: Any = None
        self._stream: Any = None
        self._comm_aborted = False
        self._closed = False
        self._lock = threading.Lock()
        if worker is not None:
            rpc.attach_service(worker, job, name, _AbortHook(self))
        try:
            if unique_id is None:
                unique_id, nccl_version = fetch_unique_id(
                    session, rank, self.nranks, self.deadline_s, address=self.address,
                    aborted=lambda: self._aborted)
            if nccl_version is not None:
                check_nccl_version(nccl_version, "the process that made the unique id")
            self._comm, self._stream = self._init_bounded(uid_bytes(unique_id))
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return self.addresses[self.rank]

    def _init_bounded(self, uid: bytes) -> tuple[Any, Any]:
        cp, nccl = self._cupy, self._nccl
        # connect every peer during the init (NCCL >= 2.22 connects lazily by default, i.e.
        # in the first collective's groupEnd, outside any bound); a user's setting wins
        os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
        if self._aborted is not None:  # aborted before the init began: do not begin it
            raise JobAbortedError(f"job aborted: {self._aborted}", "rank", self.address)
        state = _Init()

        def init() -> None:
            comm = None
            try:
                cp.cuda.Device(self.device).use()  # the current device is per thread
                comm = nccl.NcclCommunicator(self.nranks, uid_for_cupy(uid), self.rank)
                stream = cp.cuda.Stream(non_blocking=True)
                probe = cp.zeros(1, dtype=cp.float32)
                comm.allReduce(probe.data.ptr, probe.data.ptr, 1, nccl.NCCL_FLOAT32,
                               nccl.NCCL_SUM, stream.ptr)
                while not stream.done and not state.abandoned:  # no unbounded synchronize
                    time.sleep(_POLL_S * 50)
            except BaseException as exc:  # noqa: BLE001 - handed to the task thread
                with state.lock:
                    state.error = exc
                if comm is not None:
                    _quiet_abort(comm)
                return
            with state.lock:
                if not state.abandoned:
                    state.comm, state.stream = comm, stream
                    return
            _quiet_abort(comm)  # the task gave up meanwhile: nobody else will release it

        thread = threading.Thread(target=init, name=f"nccl-init-{self.job}", daemon=True)
        thread.start()
        give_up = time.monotonic() + self.deadline_s
        while True:
            thread.join(_INIT_POLL_S)
            if not thread.is_alive():
                break
            reason = self._aborted
            late = time.monotonic() > give_up
            if reason is None and not late:
                continue
            with state.lock:
                state.abandoned = True
                comm = state.comm
            if comm is not None:  # finished between the join and the lock
                _quiet_abort(comm)
            if reason is not None:
                raise JobAbortedError(f"job aborted: {reason}", "rank", self.address)
            raise DeadlineExceededError("ncclCommInitRank did not complete (a peer never "
                                        "joined)", "rank", self.address,
                                        deadline_ms=self.deadline_s * 1000)
        if state.error is not None:
            exc = state.error
            raise NcclInitError(
                f"creating the NCCL communicator failed on rank {self.rank} of {self.nranks} "
                f"(CUDA device {self.device}): {type(exc).__name__}: {exc}", "rank",
                self.address) from exc
        return state.comm, state.stream

    # -- collectives ----------------------------------------------------------------------------

    def allreduce(self, arrays: Sequence[Any], *, op: str = "sum",
                  step: int | None = None) -> None:
        if op not in _OPS:
            raise ValueError(f"op={op!r} is not supported; use one of {_OPS}")
        arrays = list(arrays)
        if op == "mean" and any(not np.issubdtype(a.dtype, np.inexact) for a in arrays):
            raise TypeError("op='mean' needs floating-point arrays (use op='sum' for integers)")
        self._run(arrays, step, lambda flat, dt: self._comm.allReduce(
            flat.data.ptr, flat.data.ptr, flat.size, dt, self._nccl.NCCL_SUM, self._stream.ptr),
            scale=1.0 / self.nranks if op == "mean" else None)

    def broadcast(self, arrays: Sequence[Any], root: int = 0, *,
                  step: int | None = None) -> None:
        if not 0 <= root < self.nranks:
            raise ValueError(f"root={root} is not a rank; ranks are 0..{self.nranks - 1}")
        self._run(list(arrays), step, lambda flat, dt: self._comm.broadcast(
            flat.data.ptr, flat.data.ptr, flat.size, dt, root, self._stream.ptr))

    def barrier(self, *, step: int | None = None) -> None:
        self.allreduce([np.zeros(1, dtype=np.int32)], step=step)

    def _run(self, arrays: list[Any], step: int | None, collective: Any,
             scale: float | None = None) -> None:
        self._check_usable(step)
        if not arrays:
            return
        # this rank's device is current for the fused buffers (and only during the call: the
        # task thread is the worker's, and runs other tasks afterwards)
        with self._cupy.cuda.Device(self.device):
            self._run_on_device(arrays, step, collective, scale)

    def _run_on_device(self, arrays: list[Any], step: int | None, collective: Any,
                       scale: float | None) -> None:
        cp = self._cupy
        groups: dict[str, list[int]] = {}
        for i, a in enumerate(arrays):
            groups.setdefault(np.dtype(a.dtype).str, []).append(i)
        # an unsupported dtype is refused before anything is enqueued
        codes = {key: _nccl_dtype(self._nccl, np.dtype(key)) for key in groups}
        flats = []
        for key in sorted(groups):  # the same order on every rank
            parts = [cp.asarray(arrays[i]).reshape(-1) for i in groups[key]]
            flats.append(parts[0].copy() if len(parts) == 1 else cp.concatenate(parts))
        try:
            # the fused buffers are written on the current stream: NCCL's stream waits for them
            ready = cp.cuda.Event()
            ready.record()
            self._stream.wait_event(ready)
            self._nccl.groupStart()
            try:
                for key, flat in zip(sorted(groups), flats, strict=True):
                    collective(flat, codes[key])
            finally:
                self._nccl.groupEnd()
            if scale is not None:
                with self._stream:
                    for flat in flats:
                        flat *= flat.dtype.type(scale)
            self._wait(step)
        except (JobAbortedError, DeadlineExceededError):
            raise
        except Exception as exc:  # CUDA or NCCL error: it is the cause, raise it as itself
            self.abort(f"rank {self.rank} ({self.address}) failed in an NCCL collective: "
                       f"{type(exc).__name__}: {exc}"[:500])
            raise
        # the results are read on the current stream, which the wait above ordered after them
        for key, flat in zip(sorted(groups), flats, strict=True):
            offset = 0
            for i in groups[key]:
                a = arrays[i]
                part = flat[offset: offset + a.size].reshape(a.shape)
                offset += a.size
                if isinstance(a, np.ndarray):
                    np.copyto(a, cp.asnumpy(part))
                else:
                    a[...] = part

    def _wait(self, step: int | None) -> None:
        """Poll the stream: returns when it is done, raises on abort, deadline or error."""
        give_up = time.monotonic() + self.deadline_s
        while not self._stream.done:  # cudaStreamQuery: raises a kernel's error
            if self._aborted is not None:
                raise self._aborted_error(step)
            if time.monotonic() > give_up:
                self.abort(f"rank {self.rank} ({self.address}): an NCCL collective did not "
                           f"finish within {self.deadline_s:g} s")
                raise DeadlineExceededError("an NCCL collective did not finish (a peer is dead "
                                            "or stuck)", "rank", self.address, step,
                                            deadline_ms=self.deadline_s * 1000)
            try:
                self._comm.check_async_error()  # NcclError when a peer's connection broke
            except Exception:
                # a peer that failed is telling every rank why (abort of the job): give its
                # notice a moment, so that this rank reports the cause, not the symptom
                self._await_notice()
                if self._aborted is not None:
                    raise self._aborted_error(step) from None
                raise
            time.sleep(_POLL_S)

    def _await_notice(self) -> None:
        give_up = time.monotonic() + min(_NOTICE_S, self.deadline_s)
        while self._aborted is None and time.monotonic() < give_up:
            time.sleep(_INIT_POLL_S / 5)

    def _aborted_error(self, step: int | None) -> JobAbortedError:
        """Act on a flagged abort (task thread): ncclCommAbort, and the error to raise."""
        self._abort_comm()
        return JobAbortedError(f"job aborted: {self._aborted}", "rank", self.address, step)

    def _check_usable(self, step: int | None) -> None:
        if self._aborted is not None:
            raise self._aborted_error(step)
        if self._closed or self._comm is None:
            raise RuntimeError("this NcclCommunicator is closed; create a new one")

    # -- ending ---------------------------------------------------------------------------------

    def _flag(self, reason: str) -> bool:
        """Record the abort (any thread); True if it is the first."""
        with self._lock:
            if self._aborted is not None:
                return False
            self._aborted = reason
            return True

    def _abort_comm(self) -> None:
        """``ncclCommAbort`` (task thread only): kernels waiting on dead peers return."""
        with self._lock:
            if self._comm is None or self._comm_aborted:
                return
            self._comm_aborted = True
        _quiet_abort(self._comm)

    def abort(self, reason: str) -> None:
        """Abort this rank's communicator and tell the other ranks (from the task thread)."""
        first = self._flag(reason)
        self._abort_comm()
        if self.worker is None or not first:
            return
        rpc.abort_local(self.worker, self.job, reason)
        others = [a for i, a in enumerate(self.addresses) if i != self.rank]
        try:
            rpc.abort_job_sync(self.worker, others, self.job, reason, timeout_s=5.0)
        except Exception:  # noqa: BLE001 - the error this rank raises matters more
            pass

    def _drained(self) -> bool:
        give_up = time.monotonic() + self.deadline_s
        while not self._stream.done:
            if time.monotonic() > give_up:
                return False
            time.sleep(_POLL_S)
        return True

    def close(self) -> None:
        """Destroy the communicator (abort it if it is not idle); never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._comm is not None:
                if self._aborted is None and not self._comm_aborted and self._drained():
                    self._comm.destroy()
                    self._comm_aborted = True  # nothing left to abort
                else:
                    self._abort_comm()
        except Exception as exc:  # noqa: BLE001 - never mask the error that ended the job
            self.close_error = exc
            logger.warning("rank %d (%s): closing the NCCL communicator failed: %s: %s",
                           self.rank, self.address, type(exc).__name__, exc)
            self._abort_comm()
        finally:
            if self.worker is not None:
                rpc.detach_service(self.worker, self.job, self.name)

    def __exit__(self, exc_type: Any, *rest: object) -> None:
        self.close()
        if exc_type is None and self.close_error is not None:
            raise self.close_error


def _quiet_abort(comm: Any) -> None:
    try:
        comm.abort()
    except Exception as exc:  # noqa: BLE001 - best effort while failing anyway
        logger.warning("ncclCommAbort failed: %s: %s", type(exc).__name__, exc)
