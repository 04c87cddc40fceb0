"""Collective checkpoints: every persistable variable of a collective job, in Fluid's own files.

All ranks of a collective job hold the same variables after every step, so rank 0 alone
writes them. Layout::

    checkpoint_dir/
        step-00000049/          after global step 49 (steps count from 0 over all epochs)
            fc_0.w_0            one file per variable in Paddle 1.8's LoDTensor layout: what
            fc_0.b_0            fluid.io.load_persistables(exe, "step-00000049", main) reads
            learning_rate_0
            ...
            checkpoint.json     the step, the epoch, the job's ranks and global batch, and
                                each file's size and SHA-256

A step is written into a hidden directory beside it, its JSON last, and renamed into place when
complete, so a crash leaves no half-written ``step-*``. A step is **intact** when its JSON is
readable and every file has the size and checksum the JSON recorded; resuming from the
checkpoint directory takes the latest intact step and says which damaged ones it skipped.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dask_fluid.distributed.checkpoint_files import (
    atomic_write,
    file_damage,
    find_intact,
    sha256_file,
)
from dask_fluid.tensor_file import read_tensor, write_tensor

__all__ = ["StepCheckpoint", "find_step_checkpoint", "read_step", "step_dir", "write_step"]

FORMAT = "dask_fluid.collective.v1"
META = "checkpoint.json"


def step_dir(root: str | os.PathLike, step: int) -> pathlib.Path:
    """The directory of the checkpoint taken after global step ``step``."""
    return pathlib.Path(root) / f"step-{step:08d}"


def _file_name(name: str) -> str:
    # Fluid names files after their variables; a name that is not one path component would
    # write outside the step's directory
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"variable {name!r} cannot be saved as a file of its own (Fluid names "
                         "each file after its variable)")
    return name


def write_step(root: str | os.PathLike, step: int, epoch: int,
               arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> pathlib.Path:
    """Write the checkpoint of global step ``step``: ``arrays`` (every persistable variable)
    and ``meta`` (plain values: the job, its ranks and global batch...).

    Returns
    -------
    pathlib.Path
        The step's directory.
    """
    final = step_dir(root, step)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        files = {}
        for name, value in arrays.items():
            path = tmp / _file_name(name)
            atomic_write(path, lambda f, v=value: write_tensor(f, np.asarray(v)))
            files[name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path),
                           "shape": list(np.shape(value)), "dtype": str(np.asarray(value).dtype)}
        doc = dict(meta, format=FORMAT, step=int(step), epoch=int(epoch), created=time.time(),
                   files=files)
        atomic_write(tmp / META, lambda f: f.write(json.dumps(doc, indent=1).encode()))
        if final.exists():  # a resumed job passing the same step again: the newer one wins
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


@dataclass(frozen=True)
class StepCheckpoint:
    """An intact collective checkpoint: its directory, global step, epoch and metadata."""

    path: pathlib.Path
    step: int
    epoch: int
    meta: dict
    #: later steps that were damaged, and why (newest first)
    skipped: tuple[tuple[pathlib.Path, str], ...] = field(default=())

    @property
    def names(self) -> list[str]:
        """The variables it holds."""
        return sorted(self.meta["files"])


def _check_step(directory: pathlib.Path) -> tuple[StepCheckpoint | None, str | None]:
    meta_path = directory / META
    if not meta_path.is_file():
        return None, f"{META} is missing"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"{META} is unreadable ({exc})"
    if not isinstance(meta, dict) or not isinstance(meta.get("files"), dict):
        return None, f"{META} is not a collective checkpoint's description"
    if meta.get("format") != FORMAT:
        return None, f"{META} has format {meta.get('format')!r}, not {FORMAT!r}"
    for name, rec in meta["files"].items():
        why = file_damage(directory / _file_name(name), rec["bytes"], rec["sha256"], META)
        if why is not None:
            return None, why
    return StepCheckpoint(directory, int(meta["step"]), int(meta["epoch"]), meta), None


def find_step_checkpoint(path: str | os.PathLike) -> StepCheckpoint:
    """Resolve ``resume_from``: a ``step-NNNNNNNN`` directory (it must be intact), or a
    checkpoint_dir (its latest intact step; damaged later ones are skipped with a
    :class:`~dask_fluid.distributed.checkpoint_files.CheckpointWarning` naming them).

    Raises
    ------
    FileNotFoundError
        No intact collective checkpoint there.
    ValueError
        ``path`` is a step directory, and it is damaged.
    """
    path = pathlib.Path(path)
    return find_intact(path, path.is_dir() and (path / META).is_file(), _check_step, "step-*",
                       "step", "collective", f"a 'step-NNNNNNNN' directory with its {META}")


def read_step(info: StepCheckpoint) -> dict[str, np.ndarray]:
    """The variables of checkpoint ``info``, checked against the shapes its JSON recorded."""
    arrays = {}
    for name, rec in info.meta["files"].items():
        with open(info.path / _file_name(name), "rb") as f:
            value, _ = read_tensor(f)
        if list(value.shape) != rec["shape"] or str(value.dtype) != rec["dtype"]:
            raise ValueError(f"checkpoint {str(info.path)!r}: {name} holds {value.dtype} "
                             f"{list(value.shape)}, its {META} recorded {rec['dtype']} "
                             f"{rec['shape']}")
        arrays[name] = value
    return arrays
