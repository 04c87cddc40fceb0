"""Direct TCP links between the ranks of a collective job: listen, dial, greet.

The TCP ring's data connections, the abort notices of ranks started as plain processes, and the
NCCL unique id that trainer 0 serves at its endpoint (Fluid's ``gen_nccl_id``) all travel over
links made here, so that greeting, retrying and their errors are written once.

A link starts with the challenge-response of :mod:`~dask_fluid.distributed.comm.auth`, keyed by
the job secret, over the label ``"<purpose>:<listener's label>"`` (its endpoint or worker
address): the listener sends a fresh nonce, the dialling rank answers with its rank, a nonce of
its own and an HMAC over both, and the listener proves it knows the secret in return. So a
recorded greeting cannot be replayed, a handshake for one purpose (or for a pserver) never
opens another, and a rank cannot be fooled by a process that only listens on its neighbour's
port. A listener hangs up on a wrong handshake, so a rank with another secret fails at once
with an error saying so instead of waiting for its deadline. Greetings are handled each in a
thread of its own with a short timeout, so a slow stranger delays nobody.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dask_fluid.distributed.comm.auth import (
    HandshakeError,
    accept_handshake,
    client_handshake,
    split_endpoint,
)
from dask_fluid.distributed.comm.tls import TlsContexts, client_side, server_side
from dask_fluid.distributed.errors import (
    DeadlineExceededError,
    DistributedTrainingError,
    JobAbortedError,
)

__all__ = ["PURPOSES", "Hello", "Listener", "bind", "dial", "hello", "send_notice",
           "split_endpoint"]

logger = logging.getLogger(__name__)

#: what a link is for: a ring's data connection, an abort notice, the NCCL unique id
PURPOSES = ("ring", "abort", "ncclid")
_ACK = b"\x01"
#: a listener wakes this often to notice that it was closed
_ACCEPT_POLL_S = 0.2
#: how long a stranger may take to greet before it is dropped
_GREET_S = 2.0
#: greetings handled at once; connections beyond these are dropped unread (a flood of
#: strangers costs threads only up to here)
_MAX_GREETING = 64
#: connecting to a rank that is not listening yet is retried this often
CONNECT_RETRY_S = 0.05
#: binding an endpoint whose port is still held (a trainer restarted at once) is retried this
#: long before the error
BIND_RETRY_S = 5.0
_LENGTH = struct.Struct("!I")


@dataclass(frozen=True)
class Hello:
    """What rank ``rank`` proves when it dials a ``purpose`` link to the rank labelled
    ``label``."""

    secret: bytes
    purpose: str
    label: str
    rank: int

    @property
    def auth_label(self) -> str:
        return _auth_label(self.purpose, self.label)


def _auth_label(purpose: str, label: str) -> str:
    return f"{purpose}:{label}"


def hello(secret: bytes, purpose: str, label: str, rank: int) -> Hello:
    """The handshake of rank ``rank`` on a ``purpose`` link to the rank labelled ``label``."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown link purpose {purpose!r}: one of {PURPOSES}")
    return Hello(secret, purpose, label, int(rank))


def bind(host: str, port: int, label: str) -> socket.socket:
    """A listening socket on ``(host, port)``; port 0 is any free port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    give_up = time.monotonic() + (BIND_RETRY_S if port else 0)
    while True:
        try:
            return socket.create_server((host, port), family=family)
        except OSError as exc:
            if port and time.monotonic() < give_up and exc.errno in (98, 48):  # EADDRINUSE
                time.sleep(0.1)
                continue
            raise OSError(exc.errno, f"trainer {label} cannot listen on {host}:{port}: "
                          f"{exc.strerror}; is another process using the port, or is the host "
                          "not an address of this machine?") from exc


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n and (piece := sock.recv(n - len(got))):
        got += piece
    return got


class Listener:
    """Accept greeted links on ``sock`` in a thread of its own until :meth:`close`.

    Parameters
    ----------
    sock : socket.socket
        A listening socket (:func:`bind`).
    secret : bytes
        The job secret.
    label : str
        This rank's label (its endpoint or worker address), part of every greeting.
    nranks : int
        Greetings from ranks outside ``0..nranks-1`` are dropped.
    on_abort : callable, optional
        ``on_abort(rank, reason)`` for an abort notice; without it notices are refused.
    tls : TlsContexts, optional
        Accept TLS connections only (a ``tls://`` cluster's certificates).
    """

    def __init__(self, sock: socket.socket, secret: bytes, label: str, nranks: int,
                 on_abort: Callable[[int, str], None] | None = None,
                 tls: TlsContexts | None = None) -> None:
        self.sock = sock
        self.tls = tls
        self.secret = secret
        self.label = label
        self.nranks = nranks
        self.on_abort = on_abort
        self.address = sock.getsockname()[:2]
        self._inbox: dict[tuple[str, int], socket.socket] = {}
        self._cond = threading.Condition()
        self._greeting = threading.BoundedSemaphore(_MAX_GREETING)
        purposes = [p for p in PURPOSES if p != "abort" or on_abort is not None]
        self._labels = {_auth_label(p, label): p for p in purposes}
        self._closed = False
        sock.settimeout(_ACCEPT_POLL_S)
        self._thread = threading.Thread(target=self._accept, daemon=True,
                                        name=f"dask-fluid-listener-{label}")
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            if not self._greeting.acquire(blocking=False):
                logger.warning("%s: dropped a connection: %d others are still greeting",
                               self.label, _MAX_GREETING)
                conn.close()
                continue
            threading.Thread(target=self._greet, args=(conn,), daemon=True,
                             name=f"dask-fluid-greet-{self.label}").start()

    def _greet(self, conn: socket.socket) -> None:
        try:
            self._greeted(conn)
        except (OSError, ValueError, struct.error):
            conn.close()  # a stranger, a rank of another job (another secret), a broken peer
        finally:
            self._greeting.release()

    def _greeted(self, conn: socket.socket) -> None:
        conn.settimeout(_GREET_S)
        conn = server_side(conn, self.tls)
        try:
            label, rank = accept_handshake(conn, self.secret, list(self._labels), self.nranks)
        except HandshakeError:
            logger.warning("%s: dropped a connection that did not prove it is a rank of this "
                           "job", self.label)
            raise
        purpose = self._labels[label]
        if purpose == "abort":
            try:
                (size,) = _LENGTH.unpack(_read_exactly(conn, _LENGTH.size))
                reason = _read_exactly(conn, min(size, 4096)).decode(errors="replace")
            except (OSError, struct.error):
                reason = f"rank {rank} failed (its notice was cut off)"
            try:
                self.on_abort(rank, reason)
                conn.sendall(_ACK)  # handled: the sender may now close its ring sockets
            finally:
                conn.close()
            return
        conn.settimeout(None)
        with self._cond:
            if self._closed:
                conn.close()
                return
            old = self._inbox.pop((purpose, rank), None)
            self._inbox[(purpose, rank)] = conn  # a re-dial replaces a stale connection
            self._cond.notify_all()
        if old is not None:
            old.close()

    def take(self, purpose: str, rank: int, deadline_s: float, peer: str,
             stop: Callable[[], str | None] = lambda: None,
             role: str = "rank") -> socket.socket:
        """The ``purpose`` link that rank ``rank`` (labelled ``peer``) dialled; errors call the
        ranks ``role``.

        Raises
        ------
        DeadlineExceededError
            If it did not come within ``deadline_s``.
        JobAbortedError
            If ``stop()`` returns a reason while waiting.
        """
        give_up = time.monotonic() + deadline_s
        with self._cond:
            while (purpose, rank) not in self._inbox:
                reason = stop()
                if reason is not None:
                    raise JobAbortedError(f"job aborted: {reason}", role, self.label)
                remaining = give_up - time.monotonic()
                if remaining <= 0 or self._closed:
                    raise DeadlineExceededError(
                        f"{role} {rank} never connected to {self.label} ({purpose} link); is it "
                        f"running, and is {peer} its endpoint?", role, peer,
                        deadline_ms=deadline_s * 1000)
                self._cond.wait(min(remaining, _ACCEPT_POLL_S))
            return self._inbox.pop((purpose, rank))

    def close(self) -> None:
        """Stop accepting; links not taken yet are closed."""
        with self._cond:
            self._closed = True
            left, self._inbox = list(self._inbox.values()), {}
            self._cond.notify_all()
        try:
            # stop listening now: a bare close() leaves the socket listening until the accept
            # thread's poll returns, and a connection queued meanwhile would be reset, which its
            # dialler would take for a refusal
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if threading.current_thread() is not self._thread:
            self._thread.join(2 * _ACCEPT_POLL_S)
        for conn in left:
            conn.close()


def dial(host: str, port: int, greet: Hello, deadline_s: float, *, peer: str, me: str,
         retry: bool = True, stop: Callable[[], str | None] = lambda: None,
         role: str = "rank", tls: TlsContexts | None = None) -> socket.socket:
    """A greeted, acknowledged connection to the listener at ``host:port``.

    Parameters
    ----------
    host, port
        Where the peer listens.
    greet : Hello
        From :func:`hello`.
    deadline_s : float
        Connecting is retried (``retry``) while nothing listens there, until this deadline.
    peer, me : str
        The peer's and this rank's labels, for errors.
    stop : callable
        Returns an abort reason to give up early.
    role : str
        What errors call the ranks ("rank", "trainer").
    tls : TlsContexts, optional
        Connect with TLS (a ``tls://`` cluster's certificates).

    Raises
    ------
    DeadlineExceededError
        Nothing accepted the connection within ``deadline_s``, naming ``peer``.
    DistributedTrainingError
        The peer hung up on the greeting (another job, another secret).
    """
    give_up = time.monotonic() + deadline_s
    while True:
        remaining = give_up - time.monotonic()
        try:
            sock = socket.create_connection((host, port), timeout=max(0.05, min(remaining, 2)))
        except OSError as exc:  # refused (not listening yet), unreachable, timed out
            reason = stop()
            if reason is not None:
                raise JobAbortedError(f"job aborted: {reason}", role, me) from None
            if not retry or time.monotonic() + CONNECT_RETRY_S > give_up:
                raise DeadlineExceededError(
                    f"{role} {peer} did not accept the connection of {me} ({type(exc).__name__}"
                    f": {exc}); is it running, and is {peer} its endpoint?", role, peer,
                    deadline_ms=deadline_s * 1000) from None
            time.sleep(CONNECT_RETRY_S)
            continue
        if sock.getsockname() == sock.getpeername():
            # nothing listened there and the kernel picked the target port as the source port:
            # a TCP self-connect (the endpoint is in the ephemeral range); try again
            sock.close()
            time.sleep(CONNECT_RETRY_S)
            continue
        try:
            # the whole deadline: a busy peer may be slow to answer
            sock.settimeout(max(0.05, give_up - time.monotonic()))
            sock = client_side(sock, tls)
            client_handshake(sock, greet.secret, greet.auth_label, greet.rank)
        except TimeoutError:
            sock.close()
            raise DeadlineExceededError(
                f"{role} {peer} accepted the connection of {me} but never answered its "
                "greeting", role, peer, deadline_ms=deadline_s * 1000) from None
        except OSError as exc:  # HandshakeError included: a hang-up or a wrong proof
            sock.close()
            raise DistributedTrainingError(
                f"{peer} refused the greeting of {me} ({exc}): is it a trainer of this job, "
                "with the same job secret (DASK_FLUID_JOB_SECRET) and the same trainer "
                "endpoints?", role, peer) from None
        sock.settimeout(None)
        return sock


def send_notice(host: str, port: int, greet: Hello, reason: str, timeout_s: float, *,
                peer: str, me: str, role: str = "rank", tls: TlsContexts | None = None) -> bool:
    """Tell the rank at ``host:port`` why this job stops; False when it could not be told."""
    try:
        sock = dial(host, port, greet, timeout_s, peer=peer, me=me, retry=False, role=role,
                    tls=tls)
    except DistributedTrainingError:
        return False
    try:
        data = reason.encode()[:4096]
        sock.settimeout(timeout_s)
        sock.sendall(_LENGTH.pack(len(data)) + data)
        # wait until the rank has taken the notice in, so that it learns why before it sees
        # this rank's ring connections close
        return _read_exactly(sock, 1) == _ACK
    except OSError:
        return False
    finally:
        sock.close()
