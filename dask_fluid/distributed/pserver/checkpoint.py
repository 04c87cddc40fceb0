"""Pserver checkpoints: one ``.npz`` of arrays plus one JSON of metadata per pserver and round.

Layout::

    checkpoint_dir/
        round-00000019/
            pserver-0.npz    every persistable variable of pserver 0 (parameter blocks,
            pserver-0.json   optimizer state, learning rate, table shard, DC-ASGD backups)
            pserver-1.npz
            pserver-1.json

        idle-pserver-2.json   pserver 2 holds no block: it saves nothing, in no round

Each file is written under a temporary name in the same directory and renamed (``os.replace``,
atomic on POSIX), the JSON after the ``.npz``; the JSON records the size and SHA-256 of its
``.npz``. A round is **intact** when every one of its ``n_pservers`` pservers has its JSON
there, or is idle (its ``idle-pserver-K.json`` at the root, written when it starts; a pserver
that holds blocks removes any such file of its id when it starts, so a stale one cannot make a
round look whole), and every ``.npz`` has the size and checksum its JSON recorded: a file
truncated or damaged after it was written (a full disk, a copy cut short) makes the round
unusable, and resuming from the checkpoint directory takes the latest intact round instead,
saying which rounds it skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dask_fluid.distributed.checkpoint_files import (
    CheckpointWarning,
    atomic_write,
    file_damage,
    find_intact,
    sha256_file,
)

__all__ = ["CheckpointInfo", "CheckpointWarning", "find_checkpoint", "mark_idle", "read_shard",
           "round_dir", "write_shard"]

FORMAT = "dask_fluid.pserver.v2"


def round_dir(root: str | os.PathLike, round_index: int) -> pathlib.Path:
    """The directory of the checkpoint taken after global round ``round_index``."""
    return pathlib.Path(root) / f"round-{round_index:08d}"


def write_shard(root: str | os.PathLike, meta: Mapping[str, Any],
                arrays: Mapping[str, np.ndarray]) -> pathlib.Path:
    """Write one pserver's checkpoint of one round.

    Parameters
    ----------
    root : path
        The checkpoint directory (created if needed).
    meta : mapping
        At least ``round``, ``epoch``, ``step``, ``pserver_id``, ``n_pservers``, ``endpoint``;
        stored in the JSON with the variables' shapes and dtypes.
    arrays : mapping of str to ndarray

    Returns
    -------
    pathlib.Path
        The round directory.
    """
    directory = round_dir(root, int(meta["round"]))
    directory.mkdir(parents=True, exist_ok=True)
    k = int(meta["pserver_id"])
    npz = directory / f"pserver-{k}.npz"
    atomic_write(npz, lambda f: np.savez(f, **{n: np.asarray(a) for n, a in arrays.items()}))
    doc = dict(meta, format=FORMAT, created=time.time(),
               vars={n: [list(np.shape(a)), str(np.asarray(a).dtype)] for n, a in arrays.items()},
               npz_bytes=npz.stat().st_size, npz_sha256=sha256_file(npz))
    atomic_write(directory / f"pserver-{k}.json",
                  lambda f: f.write(json.dumps(doc, indent=1).encode()))
    return directory


def _idle_marker(root: str | os.PathLike, pserver_id: int) -> pathlib.Path:
    return pathlib.Path(root) / f"idle-pserver-{int(pserver_id)}.json"


def mark_idle(root: str | os.PathLike, pserver_id: int, idle: bool,
              meta: Mapping[str, Any] | None = None) -> None:
    """Record at the start of a job whether pserver ``pserver_id`` holds no block (it then
    writes no round, and every round counts it as saved), or clear a stale record of it."""
    marker = _idle_marker(root, pserver_id)
    if not idle:
        marker.unlink(missing_ok=True)
        return
    pathlib.Path(root).mkdir(parents=True, exist_ok=True)
    doc = dict(meta or {}, format=FORMAT, pserver_id=int(pserver_id), idle=True)
    atomic_write(marker, lambda f: f.write(json.dumps(doc, indent=1).encode()))


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its directory and the metadata of its lowest-numbered saved
    pserver (pserver 0 unless that one holds no block)."""

    path: pathlib.Path
    round: int
    epoch: int
    step: int
    n_pservers: int
    meta: dict
    #: later rounds that were damaged, and why (newest first)
    skipped: tuple[tuple[pathlib.Path, str], ...] = field(default=())


def _check_round(directory: pathlib.Path) -> tuple[CheckpointInfo | None, str | None]:
    """``(info, None)`` for an intact round; ``(None, why)`` for a damaged one; ``(None,
    None)`` for a round still being written (not every pserver's JSON is there yet)."""
    # the metadata of the lowest-numbered pserver that saved (pserver 0 may hold no block)
    ids = sorted(int(p.stem[len("pserver-"):]) for p in directory.glob("pserver-*.json")
                 if p.stem[len("pserver-"):].isdigit())
    if not ids:
        return None, None
    first = directory / f"pserver-{ids[0]}.json"
    try:
        meta = json.loads(first.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{first.name} is unreadable ({exc})"
    if meta.get("format") != FORMAT:
        return None, f"{first.name} has format {meta.get('format')!r}, not {FORMAT!r}"
    n = int(meta["n_pservers"])
    for k in range(n):
        doc_path, npz = directory / f"pserver-{k}.json", directory / f"pserver-{k}.npz"
        if not doc_path.is_file():
            if _idle_marker(directory.parent, k).is_file():
                continue  # it holds nothing to save
            return None, None
        try:
            doc = json.loads(doc_path.read_text())
        except (OSError, ValueError) as exc:
            return None, f"{doc_path.name} is unreadable ({exc})"
        why = file_damage(npz, doc.get("npz_bytes"), doc.get("npz_sha256"), "its JSON")
        if why is not None:
            return None, why
    return CheckpointInfo(directory, int(meta["round"]), int(meta["epoch"]), int(meta["step"]),
                          n, meta), None


def find_checkpoint(path: str | os.PathLike) -> CheckpointInfo:
    """Resolve ``resume_from``: a round directory (it must be intact), or a checkpoint root
    (the latest intact round in it is used; damaged later rounds are skipped with a
    :class:`CheckpointWarning` naming them).

    Raises
    ------
    FileNotFoundError
        No intact checkpoint there.
    ValueError
        ``path`` is a round directory, and it is damaged.
    """
    path = pathlib.Path(path)
    named = path.is_dir() and path.name.startswith("round-") and any(
        path.glob("pserver-*.json"))
    return find_intact(path, named, _check_round, "round-*", "round", "pserver",
                       "a 'round-NNNNNNNN' directory with pserver-K.json/.npz for every pserver")


def read_shard(info: CheckpointInfo, pserver_id: int) -> dict[str, np.ndarray]:
    """The arrays pserver ``pserver_id`` wrote in checkpoint ``info`` (none for an idle one)."""
    npz = info.path / f"pserver-{pserver_id}.npz"
    if not npz.is_file() and _idle_marker(info.path.parent, pserver_id).is_file():
        return {}
    with np.load(npz) as data:
        return {name: data[name] for name in data.files}
