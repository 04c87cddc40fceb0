"""Shared-memory payloads between two processes of one machine (the data paths' fast lane).

Over loopback TCP every byte is copied twice by the kernel, and on a small machine those copies
compete with training for the cores: a 12.5 MB push costs about 5 ms of a sender's and a
receiver's core (2.4 GB/s). When a connection's two ends can open the same file in
``/dev/shm`` (checked once per connection with :func:`make_probe` / :func:`check_probe`, so
containers or hosts that only look alike never use it), the sender writes the arrays into its
own segment, one ``memcpy``, and sends only the header over the socket; the receiver maps the
segment and reads the arrays in place.

A segment belongs to its sender and only ever holds that sender's latest message: the
connections are strictly request-reply, so the receiver is done with a message before the
sender writes the next one. Files never outlive the connection's processes: the receiver
unlinks a segment's file as soon as it has mapped it (the memory lives on while mapped), and
the sender unlinks it at close in case the receiver never did. Space is reserved with
``posix_fallocate``, so a full ``/dev/shm`` (Docker's default is 64 MB) makes that message go
over the socket instead of raising SIGBUS later.

``DASK_FLUID_SHM_DISABLE=1`` in a process's environment (as ``NCCL_SHM_DISABLE`` for NCCL) keeps
its connections on the socket: for a ``/dev/shm`` that other jobs need, or to measure the
socket path on one machine (``benchmarks/bench_overlap.py``). Either end of a connection that
has it set is enough.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
from typing import Any

import numpy as np

__all__ = ["DISABLE_ENV", "InSegment", "OutSegment", "available", "check_probe", "make_probe",
           "remove"]

#: environment variable: "1" (or any value but "", "0") keeps this process off shared memory
DISABLE_ENV = "DASK_FLUID_SHM_DISABLE"
_DIR = "/dev/shm"
_PREFIX = "dask-fluid-"


def available() -> bool:
    """Whether this process may use shared memory: ``/dev/shm`` is there and writable, and
    :data:`DISABLE_ENV` does not turn it off."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return False
    return os.path.isdir(_DIR) and os.access(_DIR, os.W_OK) and hasattr(os, "posix_fallocate")


def _path(name: str) -> str:
    if not name.startswith(_PREFIX) or "/" in name:
        raise ValueError(f"not a dask_fluid shared-memory segment: {name!r}")
    return os.path.join(_DIR, name)


def make_probe() -> tuple[str, bytes]:
    """Create a small file the peer must be able to read: ``(name, nonce)``; unlink it with
    :func:`remove` once the peer has answered."""
    name, nonce = f"{_PREFIX}probe-{secrets.token_hex(8)}", secrets.token_bytes(16)
    fd = os.open(_path(name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, nonce)
    finally:
        os.close(fd)
    return name, nonce


def check_probe(name: str, nonce: bytes) -> bool:
    """Whether this process sees the peer's probe file (same machine, same ``/dev/shm``)."""
    try:
        with open(_path(name), "rb") as f:
            return f.read(64) == nonce
    except (OSError, ValueError):
        return False


def remove(name: str) -> None:
    """Unlink a segment or probe file; gone already is fine."""
    with contextlib.suppress(OSError, ValueError):
        os.unlink(_path(name))


class OutSegment:
    """The sender's segment: grows to the largest message, announced to the receiver by name."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._name: str | None = None
        self.capacity = 0
        self.failed = False  # /dev/shm had no room: the socket carries the payload

    def write(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], total: int
              ) -> dict[str, Any] | None:
        """Copy ``arrays`` at their ``meta`` offsets; return the header entry that tells the
        receiver where they are, or None when there is no room (send them on the socket)."""
        if self.failed:
            return None
        new_name = None
        if total > self.capacity:
            if not self._grow(total):
                return None
            new_name = self._name
        for value, offset, dtype, shape in zip(arrays.values(), meta["offsets"],
                                               meta["dtypes"], meta["shapes"], strict=True):
            np.ndarray(shape, np.dtype(dtype), buffer=self._map, offset=offset)[...] = value
        return {"size": total, "capacity": self.capacity, "name": new_name}

    def _grow(self, total: int) -> bool:
        capacity = max(total, self.capacity * 3 // 2, 1 << 20)
        capacity = -(-capacity // mmap.PAGESIZE) * mmap.PAGESIZE
        name = f"{_PREFIX}{secrets.token_hex(12)}"
        try:
            fd = os.open(_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            self.failed = True
            return False
        try:
            os.posix_fallocate(fd, 0, capacity)
            segment = mmap.mmap(fd, capacity)
        except OSError:
            remove(name)
            self.failed = True
            return False
        finally:
            os.close(fd)
        self.close()
        self._map, self._name, self.capacity = segment, name, capacity
        return True

    def close(self) -> None:
        """Drop the mapping and unlink the file if the receiver has not."""
        if self._name is not None:
            remove(self._name)
        self._map, self._name, self.capacity = None, None, 0


class InSegment:
    """The receiver's view of the sender's segment."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None

    def read(self, entry: dict[str, Any]) -> np.ndarray:
        """The message's bytes (a view into the segment) for the header ``entry``."""
        if entry["name"] is not None:
            fd = os.open(_path(entry["name"]), os.O_RDWR)
            try:
                # views of the old mapping may still be alive: let them keep it (no close)
                self._map = mmap.mmap(fd, entry["capacity"])
            finally:
                os.close(fd)
                remove(entry["name"])
        if self._map is None:
            raise ValueError("a shared-memory message arrived before its segment was announced")
        return np.frombuffer(self._map, np.uint8, count=entry["size"])
