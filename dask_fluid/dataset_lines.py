"""The records of ``fluid.DatasetFactory`` datasets (:mod:`dask_fluid.queue_dataset`): how a
file is read (Fluid's ``fs_open_read``), how a MultiSlot line becomes a record (``DataFeed``'s
``ParseOneInstanceFromPipe``), how records become feeds (``PutToFeedVec``), and the two
record-level rewrites of ``InMemoryDataset``: ``merge_by_ins_id`` (Fluid's
``MultiSlotDataset::MergeByInsId``) and ``slots_shuffle`` (``MultiSlotDataset::SlotsShuffle``).
"""

from __future__ import annotations

import random
import shlex
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .framework import Variable
from .lod import LoDTensor, lengths_to_offsets
from .sample_readers import chunked

__all__ = ["Record", "feeds", "merge_by_ins_id", "parse_line", "read_command", "read_lines",
           "slots_shuffle"]

# Fluid drops (sparse) or tests (dense merging) values as zero below this magnitude
_FLOAT_ZERO = 1e-6


@dataclass
class Record:
    """One instance: a value array per slot of ``set_use_var`` (in order), and the line's
    leading ``ins_id`` / ``content`` tokens when the dataset parses them ("" otherwise)."""

    fields: list[np.ndarray]
    ins_id: str = ""
    content: str = ""


def read_command(path: str, pipe_command: str, hdfs_command: str = "hadoop fs",
                 download_cmd: str = "") -> str:
    """The shell command Fluid's ``fs_open_read(path, pipe_command)`` runs.

    ``hdfs:``/``afs:`` paths are read by ``download_cmd "path"`` when a download command is
    set, else ``hadoop fs ... -cat "path"`` (``-text`` for ``.gz`` files, which ignore the
    download command); their output is piped into ``pipe_command``. Local paths feed
    ``pipe_command`` on its standard input, through ``zcat`` first when they end in ``.gz``.
    """
    quoted = shlex.quote(path)  # Fluid writes "path"; quoting also survives odd names
    if path.startswith(("hdfs:", "afs:")):
        if path.endswith(".gz"):
            source = f"{hdfs_command} -text {quoted}"
        elif download_cmd:
            source = f"{download_cmd} {quoted}"
        else:
            source = f"{hdfs_command} -cat {quoted}"
        return f"{source} | {pipe_command}" if pipe_command else source
    if path.endswith(".gz"):
        return f"( zcat ) < {quoted}" + (f" | {pipe_command}" if pipe_command else "")
    return f"( {pipe_command or 'cat'} ) < {quoted}"


def read_lines(path: str, pipe_command: str, hdfs_command: str = "hadoop fs",
               download_cmd: str = "") -> list[str]:
    """The lines ``read_command`` gives, run as Fluid runs it (bash, ``set -o pipefail``)."""
    command = read_command(path, pipe_command, hdfs_command, download_cmd)
    proc = subprocess.run(["bash", "-c", "set -o pipefail; " + command],
                          capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"Dataset: pipe_command {pipe_command!r} failed on {path} (exit "
                           f"{proc.returncode}; command {command!r}): "
                           f"{proc.stderr.decode(errors='replace')[-2000:]}")
    return proc.stdout.decode().splitlines()


def parse_line(line: str, use_vars: Sequence[Variable], where: str, *, ins_id: bool = False,
               content: bool = False, drop_sparse_zeros: bool = False) -> Record:
    """One MultiSlot line ``[1 <ins_id>] [1 <content>] <n> v1 .. vn <m> w1 .. wm ...``.

    With ``drop_sparse_zeros`` (Fluid's in-memory feed), zero values of the sequence slots
    (``lod_level >= 1``) are left out, as ``MultiSlotInMemoryDataFeed`` leaves them out;
    dense slots keep theirs.
    """
    tokens = line.split()
    pos = 0
    leading = {}
    for name, wanted in (("ins_id", ins_id), ("content", content)):
        if wanted:
            # Fluid CHECKs that the token is announced as exactly one value
            if len(tokens) < pos + 2 or tokens[pos] != "1":
                raise ValueError(f"Dataset: {where} should start with '1 <{name}>' "
                                 f"(set_parse_{name})")
            leading[name] = tokens[pos + 1]
            pos += 2
    fields = []
    for var in use_vars:
        if pos >= len(tokens):
            raise ValueError(f"Dataset: {where} (after pipe_command) has too few slots for "
                             f"{[v.name for v in use_vars]}")
        if not _is(int, tokens[pos]):
            raise ValueError(f"Dataset: {where}: slot {var.name!r} should start with its "
                             f"number of values, not {tokens[pos]!r}")
        count = int(tokens[pos])
        values = tokens[pos + 1:pos + 1 + count]
        if count <= 0 or len(values) != count:
            raise ValueError(f"Dataset: {where}: slot {var.name!r} announces {count} values, "
                             f"has {len(values)}")
        kind = float if var.dtype.startswith("float") else int
        try:
            arr = np.asarray([kind(v) for v in values],
                             dtype=np.float32 if kind is float else np.int64)
        except ValueError:
            bad = next(v for v in values if not _is(kind, v))
            raise ValueError(f"Dataset: {where}: slot {var.name!r} has {bad!r}, not a number "
                             f"of its dtype {var.dtype}") from None
        fields.append(arr[~_zeros(arr)] if drop_sparse_zeros and var.lod_level > 0 else arr)
        pos += 1 + count
    if pos != len(tokens):
        raise ValueError(f"Dataset: {where} has more slots than {[v.name for v in use_vars]}")
    return Record(fields, **leading)


def _is(kind: type, token: str) -> bool:
    try:
        kind(token)
    except ValueError:
        return False
    return True


def _zeros(values: np.ndarray) -> np.ndarray:
    """Where ``values`` are zero to Fluid (a float below ``_FLOAT_ZERO`` in magnitude)."""
    if values.dtype == np.float32:
        return np.abs(values) < _FLOAT_ZERO
    return values == 0


def merge_by_ins_id(records: Sequence[Record], merge_size: int,
                    dense: Sequence[bool]) -> tuple[list[Record], int]:
    """Fluid's ``MergeByInsId``: the instances sharing an ``ins_id`` become one.

    A group whose size is not ``merge_size`` (when ``merge_size > 0``) is dropped. A dense
    slot takes the values of the group's last instance with a nonzero value there (the
    first instance's when all are zero); a sequence slot takes the values of the one
    instance that has any, and a group where two instances have values for the same
    sequence slot is dropped (a conflict). ``ins_id`` and ``content`` are the first
    instance's. Returns the merged records, shuffled as Fluid shuffles them, and the number
    of instances dropped.
    """
    groups: dict[str, list[Record]] = {}
    for rec in sorted(records, key=lambda r: r.ins_id):  # stable: file order within a group
        groups.setdefault(rec.ins_id, []).append(rec)
    merged, dropped = [], 0
    for group in groups.values():
        if merge_size > 0 and len(group) != merge_size:
            dropped += len(group)
            continue
        fields: list[np.ndarray] = []
        for k, is_dense in enumerate(dense):
            if is_dense:
                chosen = [r.fields[k] for r in group if not _zeros(r.fields[k]).all()]
                fields.append(chosen[-1] if chosen else group[0].fields[k])
                continue
            present = [r.fields[k] for r in group if r.fields[k].size]
            if len(present) > 1:
                break
            fields.append(present[0] if present else group[0].fields[k])
        if len(fields) != len(dense):  # a conflict on a sequence slot
            dropped += len(group)
            continue
        merged.append(Record(fields, group[0].ins_id, group[0].content))
    random.shuffle(merged)
    return merged, dropped


def slots_shuffle(records: Sequence[Record], slots: Sequence[int], capacity: int) -> list[Record]:
    """Fluid's ``SlotsShuffle``: each record's values of ``slots`` replaced by those of a
    random earlier-or-same record, drawn from a reservoir of ``capacity`` candidates
    (``RecordCandidateList::AddAndGet``); the other slots and the order stay."""
    reservoir: list[Record] = []
    out = []
    for seen, rec in enumerate(records, 1):
        if len(reservoir) < capacity:
            reservoir.append(rec)
        else:
            index = random.randrange(seen)
            if index < capacity:
                reservoir[index] = rec
        donor = reservoir[random.randrange(len(reservoir))]
        fields = [donor.fields[k] if k in slots else v for k, v in enumerate(rec.fields)]
        out.append(replace(rec, fields=fields))
    return out


def feeds(records: Iterable[Record], use_vars: Sequence[Variable],
          batch_size: int) -> Iterator[dict[str, Any]]:
    """The feed of each batch of ``batch_size`` records (the last one may be smaller)."""
    return (_feed(batch, use_vars) for batch in chunked(records, batch_size))


def _feed(batch: list[Record], use_vars: Sequence[Variable]) -> dict[str, Any]:
    feed: dict[str, Any] = {}
    for k, var in enumerate(use_vars):
        # a sequence left empty (its zeros dropped) is fed as one 0, as Fluid fills it
        column = [r.fields[k] if r.fields[k].size else np.zeros(1, r.fields[k].dtype)
                  for r in batch]
        if var.lod_level > 0:
            arr = np.concatenate(column).reshape(-1, 1)
            feed[var.name] = LoDTensor._of(arr, lengths_to_offsets([[len(c) for c in column]]))
        else:
            feed[var.name] = _dense(np.concatenate(column), var)
    return feed


def _dense(values: np.ndarray, var: Variable) -> np.ndarray:
    """A dense slot's values of the batch in the variable's shape, its (last) -1 dimension
    inferred from their number, as Fluid's ``PutToFeedVec`` resizes them."""
    shape = list(var.shape)
    known = int(np.prod([d for d in shape if d > 0]))
    if -1 in shape:
        shape[len(shape) - 1 - shape[::-1].index(-1)] = len(values) // known
    if int(np.prod(shape)) != len(values):
        raise ValueError(f"Dataset: slot {var.name!r} (lod_level 0) has {len(values)} values "
                         f"in a batch, which do not fill its shape {tuple(var.shape)}")
    return values.reshape(shape)
