"""What pserver and collective checkpoints share: files written whole or not at all, their
checksums, and the choice of the latest intact checkpoint among damaged ones."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pathlib
import uuid
import warnings
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["CheckpointWarning", "atomic_write", "check_checkpoint_args", "checkpoint_due",
           "file_damage", "find_intact", "latest_intact", "sha256_file"]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20
T = TypeVar("T")


class CheckpointWarning(UserWarning):
    """A checkpoint was damaged and skipped in favour of an earlier intact one."""


def sha256_file(path: pathlib.Path) -> str:
    """The SHA-256 of the file at ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_damage(path: pathlib.Path, recorded_bytes: Any, recorded_sha256: Any,
                recorder: str) -> str | None:
    """Why the file at ``path`` is not the one ``recorder`` (the JSON describing it) recorded:
    missing, another size or another checksum; None when it is that file."""
    if not path.is_file():
        return f"{path.name} is missing"
    size = path.stat().st_size
    if size != recorded_bytes:
        return f"{path.name} has {size} bytes, {recorder} recorded {recorded_bytes}"
    if sha256_file(path) != recorded_sha256:
        return f"{path.name} does not match the checksum {recorder} recorded"
    return None


def atomic_write(path: pathlib.Path, write: Callable[[Any], object]) -> None:
    """Write ``path`` through ``write(file)`` under a temporary name in the same directory,
    flushed to disk, then renamed (``os.replace``, atomic on POSIX): a reader sees the old
    file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def latest_intact(root: pathlib.Path, directories: Iterable[pathlib.Path],
                  check: Callable[[pathlib.Path], tuple[T | None, str | None]], kind: str
                  ) -> tuple[T | None, list[tuple[pathlib.Path, str]]]:
    """The newest of ``directories`` that ``check`` finds intact, and the newer damaged ones
    skipped on the way (warned about with :class:`CheckpointWarning` and logged).

    ``check(directory)`` returns ``(info, None)`` for an intact checkpoint, ``(None, why)`` for
    a damaged one and ``(None, None)`` for one still being written (skipped silently).
    ``kind`` names a checkpoint in the messages ("round", "step").
    """
    skipped: list[tuple[pathlib.Path, str]] = []
    for directory in sorted(directories, reverse=True):
        info, why = check(directory)
        if info is not None:
            if skipped:
                names = "; ".join(f"{d.name} ({w})" for d, w in skipped)
                warnings.warn(f"resuming from {directory.name}: skipped the damaged "
                              f"{kind}(s) {names}", CheckpointWarning, stacklevel=3)
                logger.warning("checkpoint %s: skipped damaged %s(s) %s", root, kind, names)
            return info, skipped
        if why is not None:
            skipped.append((directory, why))
    return None, skipped


def check_checkpoint_args(checkpoint_dir: Any, checkpoint_every: Any) -> None:
    """Refuse a ``checkpoint_every`` that is not an int >= 1 or ``"epoch"``, or one without a
    ``checkpoint_dir`` to write to."""
    if checkpoint_every is None:
        return
    if checkpoint_dir is None:
        raise ValueError("checkpoint_every needs checkpoint_dir (where to write)")
    if checkpoint_every != "epoch" and (isinstance(checkpoint_every, bool) or not isinstance(
            checkpoint_every, int) or checkpoint_every < 1):
        raise ValueError(f"checkpoint_every = {checkpoint_every!r} is not allowed: an int "
                         ">= 1 (every that many steps) or 'epoch'")


def checkpoint_due(every: int | str | None, global_step: int, steps_per_epoch: int) -> bool:
    """Whether a checkpoint is taken after ``global_step`` (counted from 0 over all epochs):
    every ``every`` steps, or at the end of every epoch for ``"epoch"``."""
    if every is None:
        return False
    if every == "epoch":
        return global_step % steps_per_epoch == steps_per_epoch - 1
    return (global_step + 1) % int(every) == 0


def find_intact(path: pathlib.Path, named: bool,
                check: Callable[[pathlib.Path], tuple[T | None, str | None]], pattern: str,
                kind: str, what: str, layout: str) -> T:
    """Resolve ``resume_from``: ``path`` itself when it names one checkpoint (``named``; it
    must be intact), else the latest intact checkpoint among ``path``'s entries matching
    ``pattern`` (:func:`latest_intact`), with the skipped ones in its ``skipped`` field.

    Raises
    ------
    ValueError
        ``path`` names a checkpoint, and it is damaged.
    FileNotFoundError
        No intact checkpoint there (``what`` checkpoint, expected ``layout``).
    """
    if named:
        info, why = check(path)
        if info is not None:
            return info
        if why is not None:
            raise ValueError(f"checkpoint {kind} {str(path)!r} is damaged: {why}; resume from "
                             f"its checkpoint_dir to take the latest intact {kind}")
    skipped: list[tuple[pathlib.Path, str]] = []
    if path.is_dir():
        info, skipped = latest_intact(path, path.glob(pattern), check, kind)
        if info is not None:
            return dataclasses.replace(info, skipped=tuple(skipped))
    damaged = "".join(f"; {d.name} is damaged: {w}" for d, w in skipped)
    raise FileNotFoundError(f"no intact {what} checkpoint at {str(path)!r}: expected {layout}, "
                            f"or a checkpoint_dir containing such directories{damaged}")
