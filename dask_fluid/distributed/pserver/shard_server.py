"""The direct data path of a pserver shard: a listening socket and one thread per trainer.

Why not only Dask RPC: profiled on 2 cores (reference MLP, 2 pservers + 2 trainers), each
worker's event loop was busy about 70% of the time with tornado, msgpack and the thread hops of
the step's requests, and the trainers spent 60% of their time waiting for it. Here a trainer
writes its push to a socket from its own thread and a thread of the pserver answers from the
shard's thread-safe core (:class:`~dask_fluid.distributed.pserver.shard.PServerShard`), as Fluid's
gRPC server threads do; the worker's event loop is not involved.

Where it listens: a pserver started by hand (Fluid's launch style) binds its endpoint, which
trainers connect to directly; under Dask it binds any free port of its worker's host, and the
trainers learn it from the shard's job service (Dask stays the control plane there: aborts
arrive as job-service aborts, which close these sockets).

Who reads a connection: its own thread, except while a trainer of this process waits for its
step's replies. When this process runs exactly one trainer, a sync push that leaves its round
open (:meth:`PServerShard.reply_later`) is answered by the thread that ends the round, and its
connection is then lent to that trainer: while it waits, it reads and answers the next requests
itself (:func:`serve_while_waiting`), so that a step costs no thread wake-ups and no hand-offs
of the interpreter lock between the trainer and the connection threads (on 2 cores the pserver
job was 0.72-0.80 x the collective ring's throughput with a thread per connection, 0.84-0.91 x
with this). A lent connection's thread checks every :data:`RECLAIM_CHECK_S` whether a request
has waited unread for a whole check (its trainer computes for long, or waits elsewhere) and then
reads it itself; connections whose messages can block a sender (no shared memory, TLS) are never
lent.

Who may connect: a trainer proves it knows the job's secret in the challenge-response of
:mod:`..comm.auth` (and the pserver proves it back); a connection that does not is closed before
anything of it is decoded. On a ``tls://`` cluster that exchange runs inside TLS with the
cluster's certificates (:mod:`..comm.tls`).
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..comm.auth import HandshakeError, server_handshake
from ..comm.rpc import unpack_arrays, wire_error
from ..comm.tls import server_side
from ..comm.wire import POLL_S, Connection, PeerClosed, WireTimeout, accept
from ..errors import DistributedTrainingError

__all__ = ["HANDSHAKE_TIMEOUT_S", "MAX_PENDING_HANDSHAKES", "RECLAIM_CHECK_S", "ShardServer",
           "serve_while_waiting"]

logger = logging.getLogger(__name__)

#: binding an endpoint whose port is still held (a pserver restarted at once) is retried this
#: long before the error
BIND_RETRY_S = 5.0
#: a connection that has not finished its handshake and hello by then is dropped (slow-loris)
HANDSHAKE_TIMEOUT_S = 5.0
#: connections still shaking hands at once; more are dropped at once (a flood of strangers)
MAX_PENDING_HANDSHAKES = 64
#: a lent connection's thread checks this often whether a request waits unread
RECLAIM_CHECK_S = 0.05

# what serving one message came to (_KEPT: a push_part, which is never answered)
_CLOSED, _ANSWERED, _DEFERRED, _KEPT = "closed", "answered", "deferred", "kept"


def _bind(host: str, port: int, endpoint: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    give_up = time.monotonic() + (BIND_RETRY_S if port else 0)
    while True:
        try:
            return socket.create_server((host, port), family=family)
        except OSError as exc:
            if port and time.monotonic() < give_up and exc.errno in (98, 48):  # EADDRINUSE
                time.sleep(0.1)
                continue
            raise OSError(exc.errno, f"pserver {endpoint} cannot listen on {host}:{port}: "
                          f"{exc.strerror}; is another process using the port, or is the host "
                          "not an address of this machine?") from exc


class _Peer:
    """One trainer's connection, and who reads it."""

    __slots__ = ("conn", "lent", "lock", "open", "served", "tid", "wake")

    def __init__(self, tid: int, conn: Connection) -> None:
        self.tid = tid
        self.conn = conn
        #: held while one message of it is read and answered (by its thread or a trainer)
        self.lock = threading.Lock()
        #: a waiting trainer of this process reads it; its thread is parked
        self.lent = False
        #: set: the parked thread reads it again
        self.wake = threading.Event()
        #: messages answered so far (the reclaim check compares)
        self.served = 0
        self.open = True


def _lendable(conn: Connection) -> bool:
    # a reply sent by the thread that ends a round, or by a trainer, must not block it (a
    # trainer stuck in a send serves nobody): the payloads go through shared memory; and an SSL
    # socket must not be read and written by two threads at once
    return conn.sends_shared and not isinstance(conn.sock, ssl.SSLSocket)


def _readable(sock: socket.socket) -> bool:
    poller = select.poll()  # (select.select refuses descriptors past FD_SETSIZE)
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def serve_while_waiting(servers: Iterable[ShardServer], fds: Iterable[int],
                        timeout_s: float) -> bool:
    """Wait at most ``timeout_s`` for one of ``fds`` to become readable, meanwhile reading and
    answering the requests that arrive on the connections ``servers`` lent to this trainer.

    Returns
    -------
    bool
        Whether one of ``fds`` is readable.
    """
    poller = select.poll()
    peers: dict[int, tuple[ShardServer, _Peer]] = {}
    for server in servers:
        with server._lock:
            lent = list(server._lent.values())
        for peer in lent:
            fd = peer.conn.sock.fileno()
            if fd >= 0:
                peers[fd] = (server, peer)
                poller.register(fd, select.POLLIN)
    wanted = set(fds)
    for fd in wanted:
        poller.register(fd, select.POLLIN)
    ready = False
    for fd, _ in poller.poll(max(0, int(timeout_s * 1000))):
        if fd in wanted:
            ready = True
        elif fd in peers:
            server, peer = peers[fd]
            server._serve_lent(peer)
    return ready


class ShardServer:
    """Serve ``shard`` to trainers on a socket bound to ``(host, port)``.

    Parameters
    ----------
    shard : PServerShard
        Its ``handle(trainer_id, header, arrays)`` answers one request.
    host : str
        The address trainers reach it by.
    port : int
        0: any free port.
    """

    def __init__(self, shard: Any, host: str, port: int = 0) -> None:
        self.shard = shard
        self._listener = _bind(host, port, shard.endpoint)
        self._listener.settimeout(POLL_S)
        self.address = (host, self._listener.getsockname()[1])
        self._conns: dict[int, Connection] = {}
        #: trainers of this process that wait on this shard (lending needs exactly one)
        self._waiters: set[int] = set()
        self._lent: dict[int, _Peer] = {}
        #: requests read by the connection threads and by the waiting trainer
        self.read_by = {"threads": 0, "trainer": 0}
        self._count_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._pending = 0
        self._stopped = False
        self._accept_thread = threading.Thread(
            target=self._accept, name=f"pserver-accept-{shard.pserver_id}", daemon=True)
        self._accept_thread.start()

    def _accept(self) -> None:
        """Take connections; each shakes hands in its own thread, so that a slow or hostile
        peer delays nobody else."""
        while not self._stopped:
            try:
                conn, peer = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            with self._lock:
                crowded = self._pending >= MAX_PENDING_HANDSHAKES
                if not crowded:
                    self._pending += 1
            if crowded:
                conn.close()
                continue
            threading.Thread(target=self._greet, args=(conn, peer), daemon=True,
                             name=f"pserver-{self.shard.pserver_id}-greet").start()

    def _greet(self, conn: socket.socket, peer: Any) -> None:
        shard = self.shard
        try:
            conn.settimeout(HANDSHAKE_TIMEOUT_S)
            conn = server_side(conn, shard.options.tls)
            tid = server_handshake(conn, shard.options.secret, shard.endpoint, shard.trainer_num)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(POLL_S)
            link = accept(conn, HANDSHAKE_TIMEOUT_S)
        except HandshakeError:
            logger.warning("pserver %s: dropped a connection from %s that did not prove it is "
                           "a trainer of this job", shard.endpoint, peer)
            conn.close()
            return
        except (OSError, PeerClosed, WireTimeout, ValueError, TypeError) as exc:
            logger.warning("pserver %s: dropped a connection from %s: %s", shard.endpoint, peer,
                           exc)
            conn.close()
            return
        finally:
            with self._lock:
                self._pending -= 1
        with self._lock:
            if self._stopped:
                link.close()
                return
            old = self._conns.pop(tid, None)
            self._conns[tid] = link
            self._threads.append(threading.current_thread())
        if old is not None:
            old.shutdown()
        self._serve(tid, link)

    def _serve(self, tid: int, conn: Connection) -> None:
        """Answer trainer ``tid``'s requests, one at a time, until it hangs up; lend the
        connection to this process's trainer after a push whose reply waits for its round.

        The arrays of a request may be views into the trainer's shared-memory segment: the
        shard is done with them when it replies (a sync push is consumed by the optimize step
        its reply waits for), and the trainer sends nothing before it has the reply."""
        peer = _Peer(tid, conn)
        while not self._stopped and peer.open:
            # a trainer may compute for long between requests: wait without a deadline
            outcome = self._serve_one(peer, float("inf"), "threads")
            if outcome == _DEFERRED and self._lend(peer):
                self._park(peer)
        conn.close()

    def _serve_one(self, peer: _Peer, deadline: float, reader: str) -> str:
        """Read one request of ``peer`` and answer it (or have its round's end answer it);
        ``reader`` (``"threads"`` or ``"trainer"``) is who counts it."""
        conn, tid, stop = peer.conn, peer.tid, self._is_stopped
        try:
            header, buf = conn.recv(deadline=deadline, stop=stop)
        except (PeerClosed, WireTimeout) as exc:
            peer.open = False
            with self._lock:
                current = self._conns.get(tid) is conn
            if current and not self._stopped:  # not replaced by a newer connection
                self.shard.trainer_lost(tid, f"its connection closed ({exc})")
            return _CLOSED
        peer.served += 1
        with self._count_lock:  # connection threads read at the same time
            self.read_by[reader] += 1
        shard = self.shard
        try:
            arrays = unpack_arrays(header["meta"], buf) if header["meta"]["names"] else {}
            method = header.get("method")
            if method == "push_part":  # the push it came ahead of says what became of it
                shard.push_part_request(tid, header, arrays)
                return _KEPT
            if method == "push_pull" and self._may_lend(conn):
                release = shard.push_request(tid, header, arrays)
                want = tuple(header["want"])
                if shard.reply_later(release, lambda: self._reply_at_round_end(
                        peer, release, want)):
                    return _DEFERRED
                reply, out = {}, shard.reply(tid, release, want)
            else:
                reply, out = shard.handle(tid, header, arrays)
            reply = {"ok": True, **reply}
        except Exception as exc:
            if not isinstance(exc, DistributedTrainingError):
                logger.debug("pserver request failed", exc_info=True)
            reply, out = {"ok": False, "error": wire_error(exc)}, None
        return self._send(peer, reply, out)

    def _reply_at_round_end(self, peer: _Peer, release: int, want: tuple[str, ...]) -> None:
        """Answer a deferred push (called by the thread that ended its round, or that failed
        the job)."""
        try:
            reply, out = {"ok": True}, self.shard.reply(peer.tid, release, want)
        except Exception as exc:
            reply, out = {"ok": False, "error": wire_error(exc)}, None
        try:
            self._send(peer, reply, out)
        except Exception:  # never into the push of whoever ended the round: the trainer of
            # this connection sees it break instead of waiting for its reply
            logger.warning("pserver %s: the reply to trainer %d failed", self.shard.endpoint,
                           peer.tid, exc_info=True)
            peer.open = False
            peer.conn.shutdown()

    def _send(self, peer: _Peer, reply: dict[str, Any], out: dict[str, Any] | None) -> str:
        deadline = time.monotonic() + self.shard.flags.deadline_s
        try:
            peer.conn.send(reply, out, deadline=deadline, stop=self._is_stopped)
        except (PeerClosed, WireTimeout):
            peer.open = False
            peer.conn.shutdown()  # whoever reads it next sees it closed
            return _CLOSED
        return _ANSWERED

    # -- lending connections to the trainer of this process -------------------------------------
    def attach_waiter(self, trainer_id: int) -> None:
        """Trainer ``trainer_id`` of this process waits on this shard in its steps."""
        with self._lock:
            self._waiters.add(trainer_id)
            crowded = len(self._waiters) > 1
        if crowded:  # several waiters: none serves, every connection is read by its thread
            self._take_back_all()

    def detach_waiter(self, trainer_id: int) -> None:
        """Trainer ``trainer_id`` stops waiting (it finished, failed or closed)."""
        with self._lock:
            self._waiters.discard(trainer_id)
        self._take_back_all()

    def _may_lend(self, conn: Connection) -> bool:
        """Whether a push on ``conn`` whose round is open is left to the round's end (and the
        connection lent). Only with one trainer of this process waiting on the shard: without
        one, or with several (several trainer loops on a worker), the connection threads wait
        for the round and reply in parallel; the thread that ends a round replying to every
        trainer in turn made 50 trainers x 20 pservers on 2 worker processes 1.2 x slower."""
        return len(self._waiters) == 1 and _lendable(conn)

    @property
    def lending(self) -> bool:
        """Whether a connection is lent to the waiting trainer now."""
        return bool(self._lent)

    def _lend(self, peer: _Peer) -> bool:
        with self._lock:
            if self._stopped or len(self._waiters) != 1 or not peer.open:
                return False
            peer.wake.clear()
            peer.lent = True
            self._lent[peer.tid] = peer
        return True

    def _park(self, peer: _Peer) -> None:
        """Wait while ``peer`` is lent; take it back when a request of it waited unread for a
        whole check (its trainer is not waiting, or not serving)."""
        seen = peer.served
        while not peer.wake.wait(RECLAIM_CHECK_S) and not self._stopped:
            if peer.served == seen and _readable(peer.conn.sock):
                break
            seen = peer.served
        self._take_back(peer)

    def _take_back(self, peer: _Peer) -> None:
        with peer.lock:  # not while a trainer is answering one of its requests
            self._unlend(peer)

    def _unlend(self, peer: _Peer) -> None:
        """``peer`` is read by its own thread again (the caller holds ``peer.lock``)."""
        peer.lent = False
        with self._lock:
            if self._lent.get(peer.tid) is peer:  # (not a newer connection of that trainer)
                del self._lent[peer.tid]
        peer.wake.set()

    def _take_back_all(self) -> None:
        with self._lock:
            lent = list(self._lent.values())
        for peer in lent:
            self._take_back(peer)

    def _serve_lent(self, peer: _Peer) -> None:
        """A waiting trainer answers a request that arrived on ``peer`` (lent to it)."""
        if not peer.lock.acquire(blocking=False):
            return  # its thread is taking it back
        try:
            if not peer.lent:
                return
            deadline = time.monotonic() + self.shard.flags.deadline_s
            if self._serve_one(peer, deadline, "trainer") == _CLOSED:
                self._unlend(peer)  # its thread closes it
        finally:
            peer.lock.release()

    def _is_stopped(self) -> bool:
        return self._stopped

    def wait_hung_up(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every trainer has closed its connection: the
        replies to their last requests have then gone out."""
        give_up = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, give_up - time.monotonic()))

    def close(self) -> None:
        """Stop accepting, close every connection (wakes the trainers' reads) and the threads."""
        with self._lock:
            self._stopped = True
            conns = list(self._conns.values())
            self._conns.clear()
        self._listener.close()
        for conn in conns:
            conn.shutdown()
        self._take_back_all()
        # no join: close() may run on the worker's event loop; the threads notice within POLL_S
