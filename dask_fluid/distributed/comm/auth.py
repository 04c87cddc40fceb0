"""The job secret that direct connections prove they know (pserver endpoints, rings).

Under ``dask-fluid launch`` and the Dask launchers every job gets 32 random bytes of its own.
Processes started by hand (Fluid's launch style) read it from :data:`SECRET_ENV`; without one
they run as Fluid 1.8 did, unauthenticated: anyone who can reach an endpoint can train against
it. That is said once per process, at start-up.

A connection to a pserver starts with a challenge-response in both directions
(:func:`server_handshake`, :func:`client_handshake`): the server sends a fresh nonce, the client
answers with its id, a nonce of its own and an HMAC over both nonces, and the server proves it
knows the secret too with an HMAC over them in the other order. Nothing is decoded before it,
a recorded handshake cannot be replayed (the server's nonce differs each time), and a trainer
cannot be fooled by a process that only listens on the pserver's port. The collective links
(ring connections, abort notices, the NCCL id) use the same exchange with one label per purpose
(:func:`accept_handshake`), so a handshake for one purpose never opens another.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import socket
import sys
from collections.abc import Sequence

__all__ = ["HandshakeError", "SECRET_ENV", "accept_handshake", "client_handshake", "env_secret",
           "new_secret", "server_handshake", "split_endpoint"]

logger = logging.getLogger(__name__)

#: environment variable holding the job secret (any string; ``dask-fluid launch`` sets 64 hex
#: digits)
SECRET_ENV = "DASK_FLUID_JOB_SECRET"

_warned = False


def new_secret() -> str:
    """A fresh job secret (32 random bytes as hex), as ``dask-fluid launch`` hands it out."""
    return secrets.token_hex(32)


def env_secret() -> bytes:
    """The job secret of this process (:data:`SECRET_ENV`), or ``b""`` (unauthenticated, said
    once on stderr)."""
    global _warned
    value = os.environ.get(SECRET_ENV, "")
    if not value and not _warned:
        _warned = True
        print(f"dask_fluid: {SECRET_ENV} is not set: pserver endpoints accept any process that "
              "can reach them, as in Fluid 1.8; set it to the same random string in every "
              "process of the job (dask-fluid launch does) to authenticate them",
              file=sys.stderr)
    return value.encode()


NONCE_BYTES = 16
_MAC_BYTES = 32


class HandshakeError(ConnectionError):
    """The peer did not prove it knows the job secret (or hung up while it should have)."""


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` (``"[::1]:port"`` for IPv6) as ``(host, port)``."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"endpoint {endpoint!r} is not host:port (e.g. 127.0.0.1:6170)")
    return host.strip("[]"), int(port)


def _mac(secret: bytes, role: bytes, label: str, who: int, first: bytes, second: bytes) -> bytes:
    msg = b"\0".join([b"dask-fluid-handshake", role, label.encode(),
                      int(who).to_bytes(4, "big"), first, second])
    return hmac.new(secret, msg, hashlib.sha256).digest()


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        piece = sock.recv(n - len(data))
        if not piece:
            raise HandshakeError("the peer hung up during the handshake")
        data += piece
    return data


def server_handshake(sock: socket.socket, secret: bytes, label: str, n_ids: int) -> int:
    """The accepting side; returns the client's id (``0 <= id < n_ids``). The socket's timeout
    bounds every read.

    Raises
    ------
    HandshakeError
        The client did not prove it knows ``secret`` (or names an id out of range).
    """
    return accept_handshake(sock, secret, [label], n_ids)[1]


def accept_handshake(sock: socket.socket, secret: bytes, labels: Sequence[str], n_ids: int
                     ) -> tuple[str, int]:
    """:func:`server_handshake` for a client that may use any of ``labels``: returns the label
    it proved and its id.

    Raises
    ------
    HandshakeError
        The client did not prove it knows ``secret`` for one of ``labels``, or names an id out
        of range.
    """
    nonce = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(nonce)
    got = _read_exactly(sock, 4 + NONCE_BYTES + _MAC_BYTES)
    who, theirs, mac = int.from_bytes(got[:4], "big"), got[4:4 + NONCE_BYTES], got[-_MAC_BYTES:]
    label = next((lb for lb in labels if 0 <= who < n_ids and hmac.compare_digest(
        mac, _mac(secret, b"client", lb, who, nonce, theirs))), None)
    if label is None:
        raise HandshakeError(f"a connection to {labels[0]} did not prove it knows the job "
                             "secret")
    sock.sendall(_mac(secret, b"server", label, who, theirs, nonce))
    return label, who


def client_handshake(sock: socket.socket, secret: bytes, label: str, who: int) -> None:
    """The connecting side, as client ``who`` of the server labelled ``label``.

    Raises
    ------
    HandshakeError
        The server refused (hung up), or could not prove it knows ``secret``.
    """
    nonce = _read_exactly(sock, NONCE_BYTES)
    mine = secrets.token_bytes(NONCE_BYTES)
    sock.sendall(int(who).to_bytes(4, "big") + mine
                 + _mac(secret, b"client", label, who, nonce, mine))
    proof = _read_exactly(sock, _MAC_BYTES)
    if not hmac.compare_digest(proof, _mac(secret, b"server", label, who, mine, nonce)):
        raise HandshakeError(f"the process listening at {label} does not know the job secret: "
                             "it is not this job's pserver")
