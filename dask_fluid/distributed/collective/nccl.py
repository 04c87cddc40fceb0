"""NCCL backend of the collective mode: CuPy's ``NcclCommunicator`` set up through the scheduler.

The recipe is raft-dask's (shared/reference/dask-peers.md §3), with the fixes its users asked for:

1. the client creates a *session* on the scheduler (:func:`create_session`): the scheduler process
   calls ``ncclGetUniqueId`` and keeps the id in a dict keyed by a uuid session id. The process that
   creates the id hosts NCCL's bootstrap listener, and the scheduler is the one process every
   worker can reach;
2. each trainer task fetches the id from the scheduler (``get_client().run_on_scheduler``, from
   the task thread), converts it back to a tuple (it travels as a list), waits until every rank
   has checked in, and only then calls ``NcclCommunicator(nranks, uid, rank)``. The init blocks
   until all ranks join, so it runs inside the trainer task (never in ``client.run``, which would
   stall the worker's event loop and its heartbeats, cuml#3261) and in a helper thread bounded
   by the job's deadline;
3. the communicator is torn down at the end of the task (``destroy``) or on failure
   (``ncclCommAbort``, also when the job is aborted from elsewhere), and the client deletes the
   session (:func:`destroy_session`).

Collectives fuse the arrays into one flat device buffer per dtype and run on a dedicated CUDA
stream; the calling thread polls that stream instead of blocking in ``synchronize`` so that a
dead peer turns into ``DeadlineExceededError`` (and an abort) instead of a hang.

CuPy is optional: it is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dask_fluid.distributed.collective.ring import Communicator
from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import DeadlineExceededError, JobAbortedError

__all__ = [
    "GpuInfo",
    "NcclCommunicator",
    "NcclUnavailableError",
    "check_nccl",
    "create_session",
    "destroy_session",
    "fetch_unique_id",
    "probe_gpus",
]

_OPS = ("sum", "mean")
_STORE = "_dask_fluid_nccl"  # attribute of the Scheduler object holding the sessions
_POLL_S = 20e-6  # stream polling pause: a collective of a small model takes ~100 µs
_CHECKIN_POLL_S = 0.01


class NcclUnavailableError(RuntimeError):
    """The nccl backend cannot run: CuPy, NCCL or a GPU is missing somewhere (named)."""


# --------------------------------------------------------------------------------------------
# Probing (client side, before anything is launched)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuInfo:
    """What one process offers to the nccl backend.

    Attributes
    ----------
    cupy : bool
        CuPy imports.
    nccl : bool
        ``cupy.cuda.nccl.available``.
    gpus : int
        CUDA devices visible to the process.
    device : str
        Identity of device 0 (PCI bus id, else host and index): NCCL refuses two ranks on one GPU.
    problem : str
        Why the backend cannot run there, empty when it can.
    """

    cupy: bool = False
    nccl: bool = False
    gpus: int = 0
    device: str = ""
    problem: str = ""


def _probe(*, need_gpu: bool = True) -> dict[str, Any]:
    # Runs in client.run (the worker's event loop): only quick calls, no cupy.is_available(),
    # which can take seconds (cupy#8152).
    import socket

    try:
        import cupy  # noqa: PLC0415
        from cupy.cuda import nccl  # noqa: PLC0415
    except Exception as exc:  # ImportError, or a wheel missing its CUDA libraries (cupy#8108)
        return {"problem": f"CuPy is not importable ({type(exc).__name__}: {exc}); install the "
                           "'gpu' extra (pip install 'dask-fluid[gpu]')"}
    info: dict[str, Any] = {"cupy": True, "nccl": bool(getattr(nccl, "available", False))}
    if not info["nccl"]:
        info["problem"] = ("CuPy cannot load the NCCL library (cupy.cuda.nccl.available is "
                           "False); install NCCL, e.g. pip install nvidia-nccl-cu12")
        return info
    if not need_gpu:
        return info
    try:
        info["gpus"] = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:
        info["problem"] = f"no usable CUDA GPU ({type(exc).__name__}: {exc})"
        return info
    if info["gpus"] == 0:
        info["problem"] = "no CUDA GPU is visible (CUDA_VISIBLE_DEVICES?)"
        return info
    try:
        info["device"] = cupy.cuda.Device(0).pci_bus_id
    except Exception:
        info["device"] = f"{socket.gethostname()}:0"
    return info


def probe_gpus(client: Any, workers: Sequence[str] | None = None) -> dict[str, GpuInfo]:
    """Ask each worker (default: all) whether it can run an NCCL rank.

    Runs quick checks through ``client.run``; nothing is launched and CuPy stays optional.

    Returns
    -------
    dict of str to GpuInfo
        Worker address -> what it offers.
    """
    kwargs = {} if workers is None else {"workers": list(workers)}
    replies = client.run(_probe, **kwargs)
    return {addr: GpuInfo(**reply) for addr, reply in replies.items()}


def _probe_scheduler(dask_scheduler: Any = None) -> dict[str, Any]:
    return _probe(need_gpu=False)


def check_nccl(client: Any, workers: Sequence[str],
               infos: dict[str, GpuInfo] | None = None) -> None:
    """Raise :class:`NcclUnavailableError` unless ``workers`` can form an NCCL clique.

    Checks that every worker has CuPy, NCCL and a GPU, that no two workers share a GPU, and
    that the scheduler (which creates the unique id) has CuPy with NCCL.

    Parameters
    ----------
    client : distributed.Client
    workers : sequence of str
        The trainer workers.
    infos : dict, optional
        The result of :func:`probe_gpus`, to avoid probing twice.
    """
    infos = infos if infos is not None else probe_gpus(client, workers)
    problems = [f"worker {w}: {infos[w].problem}" if w in infos else f"worker {w}: not found"
                for w in workers if w not in infos or infos[w].problem]
    seen: dict[str, str] = {}
    for w in workers:
        device = infos.get(w, GpuInfo()).device
        if device and device in seen:
            problems.append(f"workers {seen[device]} and {w} share the GPU {device} (NCCL "
                            "needs one GPU per rank: start one worker per GPU, e.g. with "
                            "dask_cuda.LocalCUDACluster)")
        seen.setdefault(device, w)
    scheduler = client.run_on_scheduler(_probe_scheduler)
    if scheduler.get("problem"):
        problems.append(f"the scheduler (it creates the NCCL unique id): {scheduler['problem']}")
    if problems:
        raise NcclUnavailableError(
            "backend='nccl' cannot run here: " + "; ".join(problems)
            + ". Use backend='ring' (CPU) or backend='auto'.")


# --------------------------------------------------------------------------------------------
# Sessions on the scheduler
# --------------------------------------------------------------------------------------------


def _scheduler_create(session: str, dask_scheduler: Any = None) -> None:
    from cupy.cuda import nccl  # noqa: PLC0415

    store = dask_scheduler.__dict__.setdefault(_STORE, {})
    store[session] = {"uid": tuple(nccl.get_unique_id()), "arrived": set()}


def _scheduler_checkin(session: str, rank: int, dask_scheduler: Any = None) -> list[int] | None:
    state = getattr(dask_scheduler, _STORE, {}).get(session)
    if state is None:
        return None
    state["arrived"].add(rank)
    return list(state["uid"])


def _scheduler_arrived(session: str, dask_scheduler: Any = None) -> int:
    state = getattr(dask_scheduler, _STORE, {}).get(session)
    return -1 if state is None else len(state["arrived"])


def _scheduler_delete(session: str, dask_scheduler: Any = None) -> None:
    getattr(dask_scheduler, _STORE, {}).pop(session, None)


def create_session(client: Any) -> str:
    """Create an NCCL unique id on the scheduler; return the session id that names it."""
    session = uuid.uuid4().hex
    client.run_on_scheduler(_scheduler_create, session)
    return session


def destroy_session(client: Any, session: str) -> None:
    """Forget the session on the scheduler (idempotent)."""
    client.run_on_scheduler(_scheduler_delete, session)


def fetch_unique_id(session: str, rank: int, nranks: int, deadline_s: float, *,
                    address: str = "", aborted: Any = None, client: Any = None,
                    wait_for_session: bool = False) -> tuple[int, ...]:
    """From a trainer: check in with the scheduler, wait for every rank, return the id.

    Waiting for all ranks before ``ncclCommInitRank`` keeps the one call that cannot be
    interrupted from starting while a peer is missing.

    Parameters
    ----------
    session : str
    rank, nranks : int
    deadline_s : float
    address : str
        This rank's label, for errors.
    aborted : callable, optional
        Returns an abort reason to stop waiting.
    client : distributed.Client, optional
        Default: the worker's client (``get_client()``, inside a task).
    wait_for_session : bool
        Wait (until the deadline) for another rank to create the session, instead of failing
        when it does not exist yet (trainers started by ``dask-fluid launch``: trainer 0
        creates it).

    Raises
    ------
    DeadlineExceededError
        If not every rank checked in within ``deadline_s``.
    JobAbortedError
        If ``aborted()`` returns a reason while waiting.
    RuntimeError
        If the session does not exist (already destroyed).
    """
    if client is None:
        from distributed import get_client  # noqa: PLC0415

        client = get_client()
    give_up = time.monotonic() + deadline_s
    while (uid := client.run_on_scheduler(_scheduler_checkin, session, rank)) is None:
        if not wait_for_session:
            raise RuntimeError(f"NCCL session {session} does not exist on the scheduler (the "
                               "job ended or was never set up)")
        if time.monotonic() > give_up:
            raise DeadlineExceededError("trainer 0 never created the NCCL session on the "
                                        "scheduler", "rank", address,
                                        deadline_ms=deadline_s * 1000)
        time.sleep(_CHECKIN_POLL_S)
    while (arrived := client.run_on_scheduler(_scheduler_arrived, session)) < nranks:
        reason = aborted() if aborted is not None else None
        if reason:
            raise JobAbortedError(f"job aborted: {reason}", "rank", address)
        if time.monotonic() > give_up:
            raise DeadlineExceededError(
                f"only {max(arrived, 0)} of {nranks} ranks checked in for the NCCL rendezvous",
                "rank", address, deadline_ms=deadline_s * 1000)
        time.sleep(_CHECKIN_POLL_S)
    return tuple(int(v) for v in uid)  # msgpack turned the tuple into a list


# --------------------------------------------------------------------------------------------
# The communicator (worker side, in the trainer task)
# --------------------------------------------------------------------------------------------


class _AbortHook(rpc.Service):
    """The service attached for the job: exports nothing but lets ``abort_job`` reach the comm."""

    def __init__(self, comm: NcclCommunicator) -> None:
        self._comm = comm

    def abort(self, reason: str) -> None:
        self._comm._abort_local(reason)


def _nccl_dtype(nccl: Any, dtype: np.dtype) -> int:
    table = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
             "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint8": "NCCL_UINT8",
             "int8": "NCCL_INT8"}
    try:
        return getattr(nccl, table[np.dtype(dtype).name])
    except KeyError:
        raise TypeError(f"NCCL cannot reduce dtype {dtype}; use one of {sorted(table)}") from None


class NcclCommunicator(Communicator):
    """A :class:`~dask_fluid.distributed.collective.ring.Communicator` on ``cupy.cuda.nccl``.

    Create it inside the trainer task, one per rank, after the client called
    :func:`create_session`; or, in a process started Fluid's way, with ``worker=None`` and the
    ``unique_id`` trainer 0 handed out (:mod:`.trainers`). Arrays may be cupy (reduced in place
    on the device) or numpy (staged through the device and copied back).

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
    unique_id : tuple of int, optional
        The NCCL unique id, when it came another way than a session.
    device : int
        CUDA device of this rank (0 with one worker per GPU and ``CUDA_VISIBLE_DEVICES``).
    name : str
        Service name of the abort hook.
    """

    def __init__(self, worker: Any, job: str, rank: int, addresses: Sequence[str],
                 deadline_s: float, *, session: str | None = None,
                 unique_id: Sequence[int] | None = None, device: int = 0,
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
        self._aborted: str | None = None
        self._comm: Any = None
        self._closed = False
        self._lock = threading.Lock()
        cupy.cuda.Device(self.device).use()
        if worker is not None:
            rpc.attach_service(worker, job, name, _AbortHook(self))
        try:
            uid = tuple(int(v) for v in unique_id) if unique_id is not None else \
                fetch_unique_id(session, rank, self.nranks, self.deadline_s,
                                address=self.address, aborted=lambda: self._aborted)
            self._comm = self._init_bounded(uid)
            self._stream = cupy.cuda.Stream(non_blocking=True)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> str:
        return self.addresses[self.rank]

    def _init_bounded(self, uid: tuple[int, ...]) -> Any:
        # ncclCommInitRank releases the GIL but cannot be cancelled: run it in a helper thread and
        # give up (leaking that thread) at the deadline rather than hang the task.
        box: dict[str, Any] = {}

        def init() -> None:
            try:
                self._cupy.cuda.Device(self.device).use()
                box["comm"] = self._nccl.NcclCommunicator(self.nranks, uid, self.rank)
            except BaseException as exc:  # noqa: BLE001 - handed to the task thread
                box["error"] = exc

        thread = threading.Thread(target=init, name=f"nccl-init-{self.job}", daemon=True)
        thread.start()
        thread.join(self.deadline_s)
        if thread.is_alive():
            raise DeadlineExceededError("ncclCommInitRank did not complete (a peer never "
                                        "joined)", "rank", self.address,
                                        deadline_ms=self.deadline_s * 1000)
        if "error" in box:
            raise box["error"]
        return box["comm"]

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
        cp = self._cupy
        groups: dict[str, list[int]] = {}
        for i, a in enumerate(arrays):
            groups.setdefault(np.dtype(a.dtype).str, []).append(i)
        flats = []
        for key in sorted(groups):  # the same order on every rank
            parts = [cp.asarray(arrays[i]).reshape(-1) for i in groups[key]]
            flats.append(parts[0].copy() if len(parts) == 1 else cp.concatenate(parts))
        # the fused buffers were written on the current stream: NCCL's stream must wait for them
        ready = cp.cuda.Event()
        ready.record()
        self._stream.wait_event(ready)
        try:
            self._nccl.groupStart()
            try:
                for flat in flats:
                    collective(flat, _nccl_dtype(self._nccl, flat.dtype))
            finally:
                self._nccl.groupEnd()
            if scale is not None:
                with self._stream:
                    for flat in flats:
                        flat *= flat.dtype.type(scale)
            self._wait(step)
        except (JobAbortedError, DeadlineExceededError):
            raise
        except Exception as exc:
            self.abort(f"rank {self.rank} ({self.address}) failed in an NCCL collective: "
                       f"{type(exc).__name__}: {exc}"[:500])
            raise
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
        """Poll the stream: returns when it is done, raises on abort, deadline or NCCL error."""
        give_up = time.monotonic() + self.deadline_s
        check = getattr(self._comm, "check_async_error", None)
        while not self._stream.done:
            if self._aborted is not None:
                raise JobAbortedError(f"job aborted: {self._aborted}", "rank", self.address, step)
            if time.monotonic() > give_up:
                self.abort(f"rank {self.rank} ({self.address}): an NCCL collective did not "
                           f"finish within {self.deadline_s:g} s")
                raise DeadlineExceededError("an NCCL collective did not finish (a peer is dead "
                                            "or stuck)", "rank", self.address, step,
                                            deadline_ms=self.deadline_s * 1000)
            if check is not None:
                check()  # raises NcclError when a peer's connection broke
            time.sleep(_POLL_S)

    def _check_usable(self, step: int | None) -> None:
        if self._aborted is not None:
            raise JobAbortedError(f"job aborted: {self._aborted}", "rank", self.address, step)
        if self._closed or self._comm is None:
            raise RuntimeError("this NcclCommunicator is closed; create a new one")

    # -- ending ---------------------------------------------------------------------------------

    def _abort_local(self, reason: str) -> None:
        with self._lock:
            if self._aborted is not None:
                return
            self._aborted = reason
            comm = self._comm
        if comm is not None:
            try:
                comm.abort()  # ncclCommAbort: kernels waiting on dead peers return
            except Exception:  # noqa: BLE001 - best effort while failing anyway
                pass

    def abort(self, reason: str) -> None:
        self._abort_local(reason)
        if self.worker is None:
            return
        rpc.abort_local(self.worker, self.job, reason)
        others = [a for i, a in enumerate(self.addresses) if i != self.rank]
        try:
            rpc.abort_job_sync(self.worker, others, self.job, reason, timeout_s=5.0)
        except Exception:  # noqa: BLE001 - the error this rank raises matters more
            pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            comm, aborted = self._comm, self._aborted
        if comm is not None and aborted is None:
            try:
                self._stream.synchronize()
                comm.destroy()
            except Exception:  # noqa: BLE001
                comm.abort()
        if self.worker is not None:
            rpc.detach_service(self.worker, self.job, self.name)
