"""Collective communication for data-parallel training; ring all-reduce over Dask comms.

:class:`Communicator` is the interface the collective (NCCL2-style) training mode programs
against; :class:`RingCommunicator` implements it on CPUs with Dask worker-to-worker messages, and a
CuPy/NCCL backend can implement it on GPUs (DESIGN.md decision 8).

Rendezvous: the client decides ranks and addresses (:func:`ring_addresses`: the sorted addresses
of the workers that join) and passes ``(job, rank, addresses)`` to one task per worker. Each task
builds a :class:`RingCommunicator`, which attaches a
:class:`~dask_fluid.distributed.comm.rpc.Mailbox`
service to its worker and shakes hands with its ring neighbours. A message to a mailbox that does
not exist yet is retried until the deadline, so ranks may start in any order. Data never goes
through the scheduler.

The all-reduce is the bandwidth-optimal ring: the arrays are fused into one flat buffer per dtype
and split into ``nranks`` chunks; ``nranks - 1`` reduce-scatter steps leave rank ``r`` with the
full sum of chunk ``(r + 1) % nranks``, and ``nranks - 1`` all-gather steps hand each reduced chunk
around the ring. Every rank ends with bit-identical results: each chunk is summed once, in a fixed
order, by one rank, and then copied verbatim.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    ServiceNotFoundError,
)
from dask_fluid.distributed.launch.tasks import live_workers

__all__ = ["Communicator", "RingCommunicator", "ring_addresses"]

logger = logging.getLogger(__name__)

_OPS = ("sum", "mean")

# Pause between retries of a message to a mailbox that does not exist yet (the peer's task has
# not started); short, because all ranks normally start within milliseconds of each other.
_RETRY_PAUSE_S = 0.005

# Extra time a task thread waits for a send beyond its deadline, so that the send's own error,
# not a bare timeout, is what surfaces.
_SEND_GRACE_S = 5.0

# Abort reasons quote the error; keep them short enough for a log line.
_MAX_REASON = 500


class Communicator(abc.ABC):
    """Collective operations among the ranks of one job, called from each rank's task thread.

    Every rank must call the same collectives in the same order with arrays of the same shapes
    and dtypes.
    """

    rank: int
    nranks: int

    @property
    def right(self) -> int:
        """The rank this rank sends to."""
        return (self.rank + 1) % self.nranks

    @property
    def left(self) -> int:
        """The rank this rank receives from."""
        return (self.rank - 1) % self.nranks

    @abc.abstractmethod
    def allreduce(self, arrays: Sequence[np.ndarray], *, op: str = "sum",
                  step: int | None = None) -> None:
        """Reduce ``arrays`` over all ranks, in place.

        Parameters
        ----------
        arrays : sequence of ndarray
            Writable arrays; each is replaced by the element-wise sum (``op="sum"``) or mean
            (``op="mean"``) of the same array over all ranks.
        op : {"sum", "mean"}
        step : int, optional
            The training step, quoted by errors.
        """

    @abc.abstractmethod
    def broadcast(self, arrays: Sequence[np.ndarray], root: int = 0, *,
                  step: int | None = None) -> None:
        """Overwrite ``arrays`` on every rank with those of rank ``root``, in place."""

    @abc.abstractmethod
    def barrier(self, *, step: int | None = None) -> None:
        """Return only once every rank has called ``barrier``."""

    @abc.abstractmethod
    def abort(self, reason: str) -> None:
        """Wake this rank's and every other rank's waits with ``JobAbortedError``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release this rank's resources; the communicator cannot be used afterwards."""

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def ring_addresses(client: Any, workers: Sequence[str] | None = None) -> list[str]:
    """The ring order for ``workers`` (default: all workers of ``client``): sorted addresses.

    Rank ``r`` of the job is the worker at index ``r``.
    """
    if workers is None:  # a scheduler round trip: scheduler_info() may be a stale copy
        workers = live_workers(client)
    return sorted(workers)


@dataclass
class _Group:
    """The arrays of one dtype, fused into one flat buffer split into ``nranks`` chunks."""

    indices: list[int]
    flat: np.ndarray
    bounds: list[int]
    fused: bool  # False when ``flat`` is a view of the single array itself

    def chunk(self, c: int) -> np.ndarray:
        return self.flat[self.bounds[c] : self.bounds[c + 1]]


def _fuse(arrays: Sequence[np.ndarray], nranks: int) -> list[_Group]:
    by_dtype: dict[str, list[int]] = {}
    for i, a in enumerate(arrays):
        by_dtype.setdefault(a.dtype.str, []).append(i)
    groups = []
    for dtype in sorted(by_dtype):  # same order on every rank
        indices = by_dtype[dtype]
        single = arrays[indices[0]]
        if len(indices) == 1 and single.flags.c_contiguous:
            flat, fused = single.reshape(-1), False
        else:
            flat, fused = np.concatenate([arrays[i].reshape(-1) for i in indices]), True
        size = flat.size
        bounds = [size * c // nranks for c in range(nranks + 1)]
        groups.append(_Group(indices, flat, bounds, fused))
    return groups


def _unfuse(arrays: Sequence[np.ndarray], groups: Sequence[_Group]) -> None:
    for g in groups:
        if not g.fused:
            continue
        offset = 0
        for i in g.indices:
            a = arrays[i]
            np.copyto(a, g.flat[offset : offset + a.size].reshape(a.shape))
            offset += a.size


def _check_arrays(arrays: Sequence[Any], op: str | None = None) -> list[np.ndarray]:
    arrays = list(arrays)
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(
                f"arrays[{i}] is a {type(a).__name__}; RingCommunicator needs numpy arrays "
                "(use the nccl backend for cupy arrays)"
            )
        if not a.flags.writeable:
            raise ValueError(f"arrays[{i}] is read-only; collectives write their result in place")
        if op == "mean" and not np.issubdtype(a.dtype, np.inexact):
            raise TypeError(
                f"arrays[{i}] has dtype {a.dtype}; op='mean' needs floating-point arrays "
                "(use op='sum' for integers)"
            )
    return arrays


class RingCommunicator(Communicator):
    """Ring all-reduce among Dask workers, used from the task thread of each rank.

    Parameters
    ----------
    worker : distributed.Worker
        This rank's worker (``distributed.get_worker()`` inside the task).
    job : str
        The job id, shared by all ranks.
    rank : int
        This rank, ``0 <= rank < len(addresses)``.
    addresses : sequence of str
        Worker address of every rank, in rank order (:func:`ring_addresses`).
    deadline_s : float
        Deadline of every send and every wait (``RPCFlags.deadline_s``).
    name : str
        Name of the mailbox service; distinct names allow several communicators in one job.

    Raises
    ------
    ValueError
        If ``rank`` is out of range, addresses repeat, or ``addresses[rank]`` is not this worker
        (the task ran somewhere else than planned).
    DeadlineExceededError, WorkerLostError
        If a neighbour does not show up within ``deadline_s``.
    """

    def __init__(
        self,
        worker: Any,
        job: str,
        rank: int,
        addresses: Sequence[str],
        deadline_s: float,
        *,
        name: str = "ring",
    ) -> None:
        addresses = list(addresses)
        _check_rendezvous(worker, rank, addresses)
        self.worker = worker
        self.job = job
        self.rank = rank
        self.nranks = len(addresses)
        self.addresses = addresses
        self.deadline_s = float(deadline_s)
        self.name = name
        self._seq = 0
        self._closed = False
        self._mailbox = rpc.Mailbox(role="rank")
        rpc.attach_service(worker, job, name, self._mailbox)
        try:
            self._collective(self._handshake, None)
        except BaseException:
            rpc.detach_service(worker, job, name)
            raise

    # -- public collectives ---------------------------------------------------------------------

    def allreduce(self, arrays: Sequence[np.ndarray], *, op: str = "sum",
                  step: int | None = None) -> None:
        if op not in _OPS:
            raise ValueError(f"op={op!r} is not supported; use one of {_OPS}")
        arrays = _check_arrays(arrays, op)
        self._check_open()
        if self.nranks == 1 or not arrays:
            return  # the mean of one value is itself
        groups = _fuse(arrays, self.nranks)
        self._collective(self._ring_allreduce, step, groups, op)
        _unfuse(arrays, groups)

    def broadcast(self, arrays: Sequence[np.ndarray], root: int = 0, *,
                  step: int | None = None) -> None:
        if not 0 <= root < self.nranks:
            raise ValueError(f"root={root} is not a rank; ranks are 0..{self.nranks - 1}")
        arrays = _check_arrays(arrays)
        self._check_open()
        if self.nranks == 1 or not arrays:
            return
        groups = _fuse(arrays, 1)
        self._collective(self._star_broadcast, step, groups, root)
        if self.rank != root:
            _unfuse(arrays, groups)

    def barrier(self, *, step: int | None = None) -> None:
        self.allreduce([np.zeros(1, dtype=np.int64)], step=step)

    def abort(self, reason: str) -> None:
        rpc.abort_local(self.worker, self.job, reason)
        others = [a for i, a in enumerate(self.addresses) if i != self.rank]
        # fire and forget: a dead peer must not delay the error this rank is about to raise
        asyncio.run_coroutine_threadsafe(
            rpc.abort_job(self.worker, others, self.job, reason, timeout_s=self.deadline_s),
            self.worker.loop.asyncio_loop,
        )

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            rpc.detach_service(self.worker, self.job, self.name)

    # -- the algorithms -------------------------------------------------------------------------

    def _handshake(self, seq: int, step: int | None) -> None:
        if self.nranks == 1:
            return
        sent = self._send(self.right, (seq, "hello"), None, step)
        self._recv(self.left, (seq, "hello"), step)
        self._wait_sent(sent, self.right, step)

    def _ring_allreduce(self, seq: int, step: int | None, groups: list[_Group], op: str) -> None:
        n, r = self.nranks, self.rank
        for s in range(n - 1):  # reduce-scatter
            incoming = self._exchange((seq, "rs", s), groups, (r - s) % n, step)
            target = (r - s - 1) % n
            for g, part in zip(groups, incoming, strict=True):
                chunk = g.chunk(target)
                self._check_part(part, chunk, target)
                np.add(chunk, part, out=chunk)
        owned = (r + 1) % n
        if op == "mean":
            for g in groups:
                np.divide(g.chunk(owned), n, out=g.chunk(owned))
        for s in range(n - 1):  # all-gather
            incoming = self._exchange((seq, "ag", s), groups, (r + 1 - s) % n, step)
            target = (r - s) % n
            for g, part in zip(groups, incoming, strict=True):
                chunk = g.chunk(target)
                self._check_part(part, chunk, target)
                np.copyto(chunk, part)

    def _exchange(self, tag: tuple, groups: list[_Group], send_chunk: int,
                  step: int | None) -> list[np.ndarray]:
        """Send one chunk of every group to the right, receive one from the left."""
        sent = self._send(self.right, tag, [g.chunk(send_chunk) for g in groups], step)
        incoming = self._recv(self.left, tag, step)
        # the sent views are read by the event loop until the reply: don't touch them before
        self._wait_sent(sent, self.right, step)
        return incoming

    def _star_broadcast(self, seq: int, step: int | None, groups: list[_Group],
                        root: int) -> None:
        tag = (seq, "bcast")
        if self.rank == root:
            payload = [g.flat for g in groups]
            sends = [(p, self._send(p, tag, payload, step))
                     for p in range(self.nranks) if p != root]
            for peer, sent in sends:
                self._wait_sent(sent, peer, step)
            return
        incoming = self._recv(root, tag, step)
        for g, part in zip(groups, incoming, strict=True):
            self._check_part(part, g.flat, 0)
            np.copyto(g.flat, part)

    # -- plumbing -------------------------------------------------------------------------------

    def _collective(self, body: Any, step: int | None, *args: Any) -> None:
        """Run one collective; on failure abort the job on every rank so nobody stays blocked."""
        seq = self._seq
        self._seq += 1
        try:
            body(seq, step, *args)
        except JobAbortedError:
            raise
        except Exception as exc:
            self.abort(_abort_reason(self.rank, self.worker.address, exc))
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this RingCommunicator is closed; create a new one")

    def _check_part(self, part: Any, expected: np.ndarray, chunk: int) -> None:
        if (not isinstance(part, np.ndarray) or part.shape != expected.shape
                or part.dtype != expected.dtype):
            got = (getattr(part, "shape", None), getattr(part, "dtype", type(part).__name__))
            raise ValueError(
                f"rank {self.left} sent chunk {chunk} as {got}, rank {self.rank} expected "
                f"{(expected.shape, expected.dtype)}: every rank must pass arrays of the same "
                "shapes and dtypes, in the same order, to the same collectives"
            )

    def _send(self, peer: int, tag: Hashable, payload: Any,
              step: int | None) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(
            self._put(peer, tag, payload, step), self.worker.loop.asyncio_loop
        )

    async def _put(self, peer: int, tag: Hashable, payload: Any, step: int | None) -> None:
        address = self.addresses[peer]
        give_up = time.monotonic() + self.deadline_s
        while True:
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceededError(
                    f"rank {peer} never attached its mailbox (its task did not start)",
                    "rank", address, step, deadline_ms=self.deadline_s * 1000,
                )
            try:
                await rpc.call(
                    self.worker, address, self.job, self.name, "put",
                    deadline_s=remaining, role="rank", endpoint=address, step=step,
                    tag=tag, payload=payload,
                )
                return
            except ServiceNotFoundError:
                await asyncio.sleep(_RETRY_PAUSE_S)

    def _wait_sent(self, sent: concurrent.futures.Future, peer: int, step: int | None) -> None:
        try:
            sent.result(self.deadline_s + _SEND_GRACE_S)
        except concurrent.futures.TimeoutError:
            sent.cancel()
            raise DeadlineExceededError(
                "the send was never run by the worker's event loop", "rank",
                self.addresses[peer], step, deadline_ms=self.deadline_s * 1000,
            ) from None

    def _recv(self, peer: int, tag: Hashable, step: int | None) -> Any:
        return self._mailbox.get(tag, self.deadline_s, endpoint=self.addresses[peer], step=step)


def _abort_reason(rank: int, address: str, exc: Exception) -> str:
    # the detail without the hint: the peers' JobAbortedError adds its own
    if isinstance(exc, DistributedTrainingError):
        what = f"{type(exc).__name__} from {exc.role} {exc.endpoint}: {exc.detail}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    return f"rank {rank} ({address}) failed with {what}"[:_MAX_REASON]


def _check_rendezvous(worker: Any, rank: int, addresses: list[str]) -> None:
    if not addresses:
        raise ValueError("addresses is empty; a ring needs at least one rank")
    if len(set(addresses)) != len(addresses):
        raise ValueError(f"addresses repeat a worker: {addresses}; each rank needs its own worker")
    if not 0 <= rank < len(addresses):
        raise ValueError(f"rank={rank} is out of range for {len(addresses)} addresses")
    if addresses[rank] != worker.address:
        raise ValueError(
            f"rank {rank} was planned on worker {addresses[rank]} but runs on {worker.address}; "
            "submit each rank's task with workers=[address] and allow_other_workers=False"
        )

