"""Pserver checkpoints: one ``.npz`` of arrays plus one JSON of metadata per pserver and round.

Layout::

    checkpoint_dir/
        round-00000019/
            pserver-0.npz    every persistable variable of pserver 0 (parameter blocks,
            pserver-0.json   optimizer state, learning rate, table shard, DC-ASGD backups)
            pserver-1.npz
            pserver-1.json

Each file is written under a temporary name in the same directory and renamed (``os.replace``,
atomic on POSIX), the JSON after the ``.npz``: a JSON file therefore always describes a complete
``.npz``, and a round directory is complete when all ``n_pservers`` JSON files exist.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["CheckpointInfo", "find_checkpoint", "read_shard", "round_dir", "write_shard"]

FORMAT = "dask_fluid.pserver.v1"


def round_dir(root: str | os.PathLike, round_index: int) -> pathlib.Path:
    """The directory of the checkpoint taken after global round ``round_index``."""
    return pathlib.Path(root) / f"round-{round_index:08d}"


def _atomic_write(path: pathlib.Path, write: Any) -> None:
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
    _atomic_write(directory / f"pserver-{k}.npz",
                  lambda f: np.savez(f, **{n: np.asarray(a) for n, a in arrays.items()}))
    doc = dict(meta, format=FORMAT, created=time.time(),
               vars={n: [list(np.shape(a)), str(np.asarray(a).dtype)] for n, a in arrays.items()})
    _atomic_write(directory / f"pserver-{k}.json",
                  lambda f: f.write(json.dumps(doc, indent=1).encode()))
    return directory


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint: its directory and the metadata of pserver 0."""

    path: pathlib.Path
    round: int
    epoch: int
    step: int
    n_pservers: int
    meta: dict


def _complete(directory: pathlib.Path) -> CheckpointInfo | None:
    first = directory / "pserver-0.json"
    if not first.is_file():
        return None
    meta = json.loads(first.read_text())
    if meta.get("format") != FORMAT:
        return None
    n = int(meta["n_pservers"])
    if not all((directory / f"pserver-{k}.json").is_file() for k in range(n)):
        return None
    return CheckpointInfo(directory, int(meta["round"]), int(meta["epoch"]), int(meta["step"]),
                          n, meta)


def find_checkpoint(path: str | os.PathLike) -> CheckpointInfo:
    """Resolve ``resume_from``: a round directory, or a checkpoint root (the latest complete
    round in it is used).

    Raises
    ------
    FileNotFoundError
        No complete checkpoint there.
    """
    path = pathlib.Path(path)
    info = _complete(path) if path.is_dir() else None
    if info is not None:
        return info
    if path.is_dir():
        for directory in sorted(path.glob("round-*"), reverse=True):
            info = _complete(directory)
            if info is not None:
                return info
    raise FileNotFoundError(f"no complete pserver checkpoint at {str(path)!r}: expected a "
                            "'round-NNNNNNNN' directory with pserver-K.json/.npz for every "
                            "pserver, or a checkpoint_dir containing such directories")


def read_shard(info: CheckpointInfo, pserver_id: int) -> dict[str, np.ndarray]:
    """The arrays pserver ``pserver_id`` wrote in checkpoint ``info``."""
    with np.load(info.path / f"pserver-{pserver_id}.npz") as data:
        return {name: data[name] for name in data.files}
