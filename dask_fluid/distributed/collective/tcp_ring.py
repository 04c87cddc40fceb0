"""Ring all-reduce over direct TCP connections between neighbouring ranks (the ring backend's
fast data path), between Dask workers or between plain processes with Fluid endpoints.

Why not Dask comms for every message: each message from a task thread through the worker's
event loop costs a thread hop, a Dask RPC and a mailbox wake-up on the other side, and measured
here (2 cores, LocalCluster of 2 processes) one ring exchange cost about 0.8 ms even for one
float: a 2-rank all-reduce of the reference MLP's 340 KB of gradients took 2.1 ms, twice the
compute of the step. A socket written and read by the task threads themselves costs tens of
microseconds, as in gloo (what PyTorch DDP uses on CPUs).

One ring, two control planes (how the ranks find each other and how a failure reaches them):

- :class:`TcpRingCommunicator`, inside Dask tasks: a
  :class:`~dask_fluid.distributed.collective.ring.RingCommunicator` does the rendezvous (each
  rank listens on a free port of its worker's host and tells its left neighbour), carries aborts
  to the other ranks, and its job service wakes this rank on an abort;
- :class:`EndpointRingCommunicator`, in processes started Fluid's way (by hand or by
  ``dask-fluid launch``; the ``gen_nccl_id`` op on a CPU): each rank listens on its own
  endpoint, dials its right neighbour's (retried until the deadline, greeted with the job
  secret) and keeps listening for abort notices, which a failing rank sends every other rank.

Either way the data never goes through the scheduler or an event loop, and the algorithm is the
ring's (reduce-scatter, then all-gather, per dtype), so every rank ends with bit-identical
results. The Dask flavour serves ``tcp://`` workers, and ``tls://`` workers with TLS from the
cluster's certificates (:mod:`~dask_fluid.distributed.comm.tls`); with UCX or in-process
workers the collective mode uses the plain
:class:`~dask_fluid.distributed.collective.ring.RingCommunicator`.
"""

from __future__ import annotations

import abc
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from dask_fluid.distributed.collective import links
from dask_fluid.distributed.collective.ring import (
    Communicator,
    RingCommunicator,
    _check_arrays,
    _fuse,
    _unfuse,
)
from dask_fluid.distributed.comm import rpc
from dask_fluid.distributed.comm.tls import TlsContexts, worker_contexts
from dask_fluid.distributed.comm.wire import worker_host
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
    WorkerLostError,
)

__all__ = ["EndpointRingCommunicator", "TcpRingCommunicator"]

_OPS = ("sum", "mean")
_SELECT_S = 0.5  # wake-up interval of a wait, to notice aborts and deadlines
_SEND_CHUNK = 1 << 22
#: how long a failing rank spends telling the other ranks why (all of them at once)
ABORT_NOTICE_S = 2.0
#: how long a rank whose neighbour hung up waits for the abort that may explain it
_NEWS_GRACE_S = 1.0
_MAX_REASON = 500
#: a non-blocking socket that cannot go on now (TLS may need to read or write a record first)
_AGAIN = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


class _SocketRing(Communicator):
    """The ring over two sockets (to the right, from the left); subclasses make the links and
    say how an abort reaches the other ranks.

    Parameters
    ----------
    rank : int
    labels : sequence of str
        Every rank's label (worker address or endpoint), in rank order; errors name them.
    deadline_s : float
        Deadline of connecting and of every exchange.
    """

    #: what errors call a rank (a Dask job's "rank", a Fluid job's "trainer")
    role = "rank"

    def __init__(self, rank: int, labels: Sequence[str], deadline_s: float) -> None:
        self.rank = rank
        self.addresses = list(labels)
        self.nranks = len(self.addresses)
        self.deadline_s = float(deadline_s)
        self._aborted: str | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._send: socket.socket | None = None
        self._recv: socket.socket | None = None

    def _link(self, listener: links.Listener, right: tuple[str, int], secret: bytes,
              tls: TlsContexts | None = None) -> None:
        """Dial the right neighbour at ``right``, take the left one's link from ``listener``."""
        me = self.addresses[self.rank]
        stop = self._abort_reason
        try:
            self._send = links.dial(*right, links.hello(secret, "ring", self.addresses[self.right],
                                                        self.rank),
                                    self.deadline_s, peer=self.addresses[self.right], me=me,
                                    stop=stop, role=self.role, tls=tls)
            self._recv = listener.take("ring", self.left, self.deadline_s,
                                       self.addresses[self.left], stop=stop, role=self.role)
        except OSError as exc:
            raise WorkerLostError(f"could not connect to {self.role} {self.right} at "
                                  f"{right[0]}:{right[1]}: {exc}", self.role,
                                  self.addresses[self.right]) from exc
        for sock in (self._send, self._recv):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)

    def _abort_reason(self) -> str | None:
        return self._aborted

    # -- collectives ----------------------------------------------------------------------------

    def allreduce(self, arrays: Sequence[np.ndarray], *, op: str = "sum",
                  step: int | None = None) -> None:
        if op not in _OPS:
            raise ValueError(f"op={op!r} is not supported; use one of {_OPS}")
        arrays = _check_arrays(arrays, op)
        self._check_usable(step)
        if self.nranks == 1 or not arrays:
            return
        groups = _fuse(arrays, self.nranks)
        n, r = self.nranks, self.rank
        self._guard(step, self._ring, groups, op, n, r)
        _unfuse(arrays, groups)

    def _ring(self, step: int | None, groups: list, op: str, n: int, r: int) -> None:
        for g in groups:
            scratch = np.empty(max(g.bounds[c + 1] - g.bounds[c] for c in range(n)), g.flat.dtype)
            for s in range(n - 1):  # reduce-scatter
                target = (r - s - 1) % n
                chunk = g.chunk(target)
                part = scratch[:chunk.size]
                self._exchange(g.chunk((r - s) % n), part, step)
                np.add(chunk, part, out=chunk)
            if op == "mean":
                owned = g.chunk((r + 1) % n)
                np.divide(owned, n, out=owned)
            for s in range(n - 1):  # all-gather
                self._exchange(g.chunk((r + 1 - s) % n), g.chunk((r - s) % n), step)

    def broadcast(self, arrays: Sequence[np.ndarray], root: int = 0, *,
                  step: int | None = None) -> None:
        if not 0 <= root < self.nranks:
            raise ValueError(f"root={root} is not a rank; ranks are 0..{self.nranks - 1}")
        arrays = _check_arrays(arrays)
        self._check_usable(step)
        if self.nranks == 1 or not arrays:
            return
        groups = _fuse(arrays, 1)

        def chain(step: int | None) -> None:  # root -> right -> ... -> the rank left of root
            for g in groups:
                if self.rank != root:
                    self._exchange(None, g.flat, step)
                if self.right != root:
                    self._exchange(g.flat, None, step)

        self._guard(step, chain)
        if self.rank != root:
            _unfuse(arrays, groups)

    def barrier(self, *, step: int | None = None) -> None:
        self.allreduce([np.zeros(1, dtype=np.int64)], step=step)

    # -- the wire -------------------------------------------------------------------------------

    def _exchange(self, out: np.ndarray | None, into: np.ndarray | None,
                  step: int | None) -> None:
        """Send ``out`` to the right and fill ``into`` from the left, both at once."""
        send = memoryview(out).cast("B") if out is not None and out.size else None
        recv = memoryview(into).cast("B") if into is not None and into.size else None
        sent = got = 0
        give_up = time.monotonic() + self.deadline_s
        with selectors.DefaultSelector() as sel:
            while (send is not None and sent < len(send)) or (recv is not None and
                                                             got < len(recv)):
                if self._aborted is not None:
                    raise JobAbortedError(f"job aborted: {self._aborted}", self.role,
                                          self.addresses[self.rank], step)
                if send is not None and sent < len(send):
                    try:
                        sent += self._send.send(send[sent: sent + _SEND_CHUNK])
                    except _AGAIN:
                        pass
                    except OSError as exc:
                        self._lost(self.right, exc, step)
                if recv is not None and got < len(recv):
                    try:
                        k = self._recv.recv_into(recv[got:], len(recv) - got)
                    except _AGAIN:
                        k = -1
                    except OSError as exc:
                        self._lost(self.left, exc, step)
                    if k == 0:
                        self._lost(self.left, ConnectionResetError("connection closed"), step)
                    got += max(k, 0)
                done_send = send is None or sent >= len(send)
                done_recv = recv is None or got >= len(recv)
                if done_send and done_recv:
                    return
                if not done_recv and isinstance(self._recv, ssl.SSLSocket) and \
                        self._recv.pending():
                    continue  # decrypted bytes wait in TLS's buffer, not on the socket
                remaining = give_up - time.monotonic()
                if remaining <= 0:
                    peer = self.left if not done_recv else self.right
                    raise DeadlineExceededError(
                        "the ring exchange did not complete", self.role, self.addresses[peer], step,
                        deadline_ms=self.deadline_s * 1000)
                want = ([(self._send, selectors.EVENT_WRITE)] if not done_send else []) + \
                    ([(self._recv, selectors.EVENT_READ)] if not done_recv else [])
                for sock, ev in want:
                    sel.register(sock, ev)
                sel.select(min(remaining, _SELECT_S))
                for sock, _ in want:
                    sel.unregister(sock)

    def _lost(self, peer: int, exc: BaseException, step: int | None) -> None:
        # A neighbour that stopped because it was told why (an abort) closes its sockets, and
        # that is often seen here before the same news reaches this rank; wait a moment for it,
        # so that this rank, too, fails with the cause rather than "the connection broke".
        give_up = time.monotonic() + _NEWS_GRACE_S
        while self._aborted is None and time.monotonic() < give_up:
            time.sleep(0.01)
        if self._aborted is not None:  # the job's abort (or our own) closed the socket
            raise JobAbortedError(f"job aborted: {self._aborted}", self.role,
                                  self.addresses[self.rank], step)
        raise WorkerLostError(f"the connection to {self.role} {peer} broke: {type(exc).__name__}: "
                              f"{exc}", self.role, self.addresses[peer], step) from exc

    def _guard(self, step: int | None, body: Any, *args: Any) -> None:
        """Run one collective; on failure abort every rank, so nobody stays blocked."""
        try:
            body(step, *args)
        except JobAbortedError:
            raise
        except Exception as exc:
            self.abort(_reason(f"{self.role} {self.rank}", self.addresses[self.rank], exc))
            raise

    def _check_usable(self, step: int | None) -> None:
        if self._aborted is not None:
            raise JobAbortedError(f"job aborted: {self._aborted}", self.role,
                                  self.addresses[self.rank], step)
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed; create a new one")

    # -- ending ---------------------------------------------------------------------------------

    def _abort_local(self, reason: str) -> None:
        with self._lock:
            if self._aborted is None:
                self._aborted = reason
        for sock in (self._send, self._recv):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes a select() on it
                except OSError:
                    pass

    def abort(self, reason: str) -> None:
        self._abort_local(reason)
        self._abort_others(reason)

    @abc.abstractmethod
    def _abort_others(self, reason: str) -> None:
        """Wake every other rank's waits with ``JobAbortedError(reason)``."""

    def _close_sockets(self) -> None:
        for sock in (self._send, self._recv):
            if sock is not None:
                sock.close()


def _reason(who: str, label: str, exc: Exception) -> str:
    if isinstance(exc, DistributedTrainingError):  # the detail without the hint
        what = f"{type(exc).__name__} from {exc.role} {exc.endpoint}: {exc.detail}"
    else:
        what = f"{type(exc).__name__}: {exc}"
    return f"{who} ({label}) failed with {what}"[:_MAX_REASON]


class _Hook(rpc.Service):
    """Job service that lets ``abort_job`` wake a rank blocked on its sockets."""

    def __init__(self, comm: TcpRingCommunicator) -> None:
        self._comm = comm

    def abort(self, reason: str) -> None:
        self._comm._abort_local(reason)


class TcpRingCommunicator(_SocketRing):
    """Ring all-reduce with direct sockets between the Dask workers of the ranks; same interface
    and arguments as :class:`~dask_fluid.distributed.collective.ring.RingCommunicator`.

    Parameters
    ----------
    worker, job, rank, addresses, deadline_s, name
        As :class:`~dask_fluid.distributed.collective.ring.RingCommunicator`.
    secret : bytes
        The job secret (32 random bytes the launcher made for this job, never in a task key or
        name); each link's handshake proves it. On ``tls://`` workers the links use TLS with the
        cluster's certificates as well.
    """

    def __init__(self, worker: Any, job: str, rank: int, addresses: Sequence[str],
                 deadline_s: float, *, secret: bytes, name: str = "tcp-ring") -> None:
        if len(secret) < 16:
            raise ValueError("a TcpRingCommunicator needs the job's secret (at least 16 random "
                             "bytes, the same on every rank)")
        super().__init__(rank, addresses, deadline_s)
        self.worker, self.job, self.name = worker, job, name
        self.secret = secret
        self._control = RingCommunicator(worker, job, rank, addresses, deadline_s,
                                         name=f"{name}-control")
        try:
            rpc.attach_service(worker, job, name, _Hook(self))
            if self.nranks > 1:
                self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        ctl, secret = self._control, self.secret
        tls = worker_contexts(self.worker)
        host = worker_host(self.worker.address)
        listener = links.Listener(links.bind(host, 0, self.addresses[self.rank]), secret,
                                  self.addresses[self.rank], self.nranks, tls=tls)
        try:
            # the left neighbour sends to us, so it needs our port; we need our right's
            sent = ctl._send(self.left, ("tcp", "port"), list(listener.address), None)
            right_host, right_port = ctl._recv(self.right, ("tcp", "port"), None)
            ctl._wait_sent(sent, self.left, None)
            self._link(listener, (right_host, int(right_port)), secret, tls)
        finally:
            listener.close()  # aborts travel through Dask: nothing more to accept

    def _abort_others(self, reason: str) -> None:
        self._control.abort(reason)  # the job's services here and on every other rank

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._close_sockets()
        rpc.detach_service(self.worker, self.job, self.name)
        self._control.close()


class EndpointRingCommunicator(_SocketRing):
    """Ring all-reduce between plain processes, each listening on its Fluid endpoint.

    Parameters
    ----------
    rank : int
        This trainer's id, ``0 <= rank < len(endpoints)``.
    endpoints : sequence of str
        ``host:port`` of every trainer, in rank order (``PADDLE_TRAINER_ENDPOINTS``); this rank
        binds ``endpoints[rank]``.
    deadline_s : float
        ``FLAGS_rpc_deadline``: how long to wait for the neighbours to come up, and for every
        exchange.
    secret : bytes
        The job secret (``DASK_FLUID_JOB_SECRET``); every trainer must hold the same one.
    tls : TlsContexts, optional
        TLS for the links and the abort notices (:func:`..comm.tls.env_contexts`).

    Raises
    ------
    ValueError
        If ``rank`` is out of range or the endpoints repeat.
    DeadlineExceededError
        If a neighbour did not come up within ``deadline_s`` (the error names its endpoint).
    """

    role = "trainer"

    def __init__(self, rank: int, endpoints: Sequence[str], deadline_s: float, *,
                 secret: bytes = b"", tls: TlsContexts | None = None) -> None:
        endpoints = list(endpoints)
        if len(set(endpoints)) != len(endpoints):
            raise ValueError(f"trainer endpoints repeat: {endpoints}; each trainer needs its own")
        if not 0 <= rank < len(endpoints):
            raise ValueError(f"trainer_id {rank} is out of range for {len(endpoints)} trainer "
                             "endpoints")
        super().__init__(rank, endpoints, deadline_s)
        self.secret = secret
        self.tls = tls
        self._where = [links.split_endpoint(ep) for ep in endpoints]
        self._listener: links.Listener | None = None
        if self.nranks == 1:
            return
        try:
            self._listener = links.Listener(
                links.bind(*self._where[rank], endpoints[rank]), secret, endpoints[rank],
                self.nranks, on_abort=self._noticed, tls=tls)
            self._link(self._listener, self._where[self.right], secret, tls)
        except BaseException:
            self.close()
            raise

    def _noticed(self, rank: int, reason: str) -> None:
        self._abort_local(reason)

    def abort(self, reason: str) -> None:
        # the others first: were our sockets shut first, our neighbours would fail with "the
        # connection broke" before the notice that says why arrived
        self._abort_others(reason)
        self._abort_local(reason)

    def _abort_others(self, reason: str) -> None:
        me = self.addresses[self.rank]
        threads = [threading.Thread(target=links.send_notice, daemon=True, args=(
            *self._where[k], links.hello(self.secret, "abort", self.addresses[k], self.rank),
            reason, ABORT_NOTICE_S), kwargs={"peer": self.addresses[k], "me": me,
                                            "role": self.role, "tls": self.tls})
            for k in range(self.nranks) if k != self.rank]
        for t in threads:
            t.start()
        give_up = time.monotonic() + ABORT_NOTICE_S
        for t in threads:  # a dead or unreachable rank must not delay this rank's own error
            t.join(max(0.0, give_up - time.monotonic()))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.close()
        self._close_sockets()
