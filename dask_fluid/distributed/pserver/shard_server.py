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

Who may connect: a trainer proves it knows the job's secret in the challenge-response of
:mod:`..comm.auth` (and the pserver proves it back); a connection that does not is closed before
anything of it is decoded. On a ``tls://`` cluster that exchange runs inside TLS with the
cluster's certificates (:mod:`..comm.tls`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

from ..comm.auth import HandshakeError, server_handshake
from ..comm.rpc import unpack_arrays, wire_error
from ..comm.tls import server_side
from ..comm.wire import POLL_S, Connection, PeerClosed, WireTimeout, accept
from ..errors import DistributedTrainingError

__all__ = ["HANDSHAKE_TIMEOUT_S", "MAX_PENDING_HANDSHAKES", "ShardServer"]

logger = logging.getLogger(__name__)

#: binding an endpoint whose port is still held (a pserver restarted at once) is retried this
#: long before the error
BIND_RETRY_S = 5.0
#: a connection that has not finished its handshake and hello by then is dropped (slow-loris)
HANDSHAKE_TIMEOUT_S = 5.0
#: connections still shaking hands at once; more are dropped at once (a flood of strangers)
MAX_PENDING_HANDSHAKES = 64


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
        """Answer trainer ``tid``'s requests, one at a time, until it hangs up.

        The arrays of a request may be views into the trainer's shared-memory segment: the
        shard is done with them when it replies (a sync push is consumed by the optimize step
        its reply waits for), and the trainer sends nothing before it has the reply."""
        stop = self._is_stopped
        while not self._stopped:
            try:
                # a trainer may compute for long between requests: wait without a deadline
                header, buf = conn.recv(deadline=float("inf"), stop=stop)
            except (PeerClosed, WireTimeout) as exc:
                with self._lock:
                    current = self._conns.get(tid) is conn
                if current and not self._stopped:  # not replaced by a newer connection
                    self.shard.trainer_lost(tid, f"its connection closed ({exc})")
                break
            try:
                arrays = unpack_arrays(header["meta"], buf) if header["meta"]["names"] else {}
                reply, out = self.shard.handle(tid, header, arrays)
                reply = {"ok": True, **reply}
            except Exception as exc:
                if not isinstance(exc, DistributedTrainingError):
                    logger.debug("pserver request failed", exc_info=True)
                reply, out = {"ok": False, "error": wire_error(exc)}, None
            deadline = time.monotonic() + self.shard.flags.deadline_s
            try:
                conn.send(reply, out, deadline=deadline, stop=stop)
            except (PeerClosed, WireTimeout):
                break
        conn.close()

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
        # no join: close() may run on the worker's event loop; the threads notice within POLL_S
