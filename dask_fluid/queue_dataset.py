"""``fluid.DatasetFactory``, ``QueueDataset`` and ``InMemoryDataset`` with
``Executor.train_from_dataset`` (Fluid 1.8's file-fed training).

A dataset reads its files through ``pipe_command`` (a shell command run with the file on its
standard input, e.g. a ``MultiSlotDataGenerator`` script), which writes MultiSlot lines:
``<n> v1 .. vn <m> w1 .. wm ...``, one slot per variable of ``set_use_var`` in order. Each slot
becomes a sample field: an int64 or float32 list, a LoD sequence when the variable has
``lod_level >= 1``. Batches of ``batch_size`` samples feed the program, as Fluid's
``DataFeed``.

Fluid runs ``thread_num`` reader threads, each with its own program copy (hogwild). Here the
files are read in order and the batches run one after another on the executor: the same
samples and updates, without the races. ``InMemoryDataset`` loads every sample first and can
``local_shuffle`` them; ``global_shuffle`` (across trainers) is not implemented and says so.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .framework import Variable
from .lod import LoDTensor, lengths_to_offsets

__all__ = ["DatasetFactory", "InMemoryDataset", "QueueDataset"]


class DatasetBase:
    """What both datasets share (Fluid's ``DatasetBase``)."""

    def __init__(self) -> None:
        self._pipe_command = "cat"
        self._batch_size = 1
        self._thread_num = 1
        self._filelist: list[str] = []
        self._use_vars: list[Variable] = []
        self._hdfs: tuple[str, str] | None = None

    def set_pipe_command(self, pipe_command: str) -> None:
        """The shell command each file is piped through (default ``cat``)."""
        self._pipe_command = str(pipe_command)

    def set_batch_size(self, batch_size: int) -> None:
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._batch_size = int(batch_size)

    def set_thread(self, thread_num: int) -> None:
        """Fluid's reader threads; kept (files are read in order here)."""
        if int(thread_num) <= 0:
            raise ValueError(f"thread_num must be positive, got {thread_num}")
        self._thread_num = int(thread_num)

    def set_filelist(self, filelist: Sequence[str]) -> None:
        self._filelist = [str(f) for f in filelist]

    def set_use_var(self, var_list: Sequence[Variable]) -> None:
        """The variables each MultiSlot line fills, in slot order."""
        for var in var_list:
            if not isinstance(var, Variable):
                raise TypeError(f"set_use_var takes Variables, got {type(var).__name__}")
        self._use_vars = list(var_list)

    def set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        raise NotImplementedError("Dataset.set_hdfs_config: reading files from HDFS is not "
                                  "implemented in dask_fluid; copy the files locally")

    def desc(self) -> str:
        return (f"{type(self).__name__}(batch_size={self._batch_size}, thread_num="
                f"{self._thread_num}, pipe_command={self._pipe_command!r}, filelist="
                f"{self._filelist}, use_var={[v.name for v in self._use_vars]})")

    # -- reading ----------------------------------------------------------------------------
    def _samples(self) -> Iterator[list]:
        if not self._use_vars:
            raise ValueError("Dataset: call set_use_var(...) with the data layers to fill")
        if not self._filelist:
            raise ValueError("Dataset: call set_filelist(...) with the files to read")
        for path in self._filelist:
            with open(path, "rb") as f:
                proc = subprocess.run(self._pipe_command, shell=True, stdin=f,
                                      capture_output=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"Dataset: pipe_command {self._pipe_command!r} failed on "
                                   f"{path} (exit {proc.returncode}): "
                                   f"{proc.stderr.decode(errors='replace')[-2000:]}")
            for number, line in enumerate(proc.stdout.decode().splitlines(), 1):
                if line.strip():
                    yield self._parse(line, path, number)

    def _parse(self, line: str, path: str, number: int) -> list:
        tokens = line.split()
        fields, pos = [], 0
        for var in self._use_vars:
            if pos >= len(tokens):
                raise ValueError(f"Dataset: line {number} of {path} (after pipe_command) has "
                                 f"too few slots for {[v.name for v in self._use_vars]}")
            count = int(tokens[pos])
            values = tokens[pos + 1:pos + 1 + count]
            if count <= 0 or len(values) != count:
                raise ValueError(f"Dataset: line {number} of {path}: slot {var.name!r} "
                                 f"announces {count} values, has {len(values)}")
            kind = np.float32 if var.dtype.startswith("float") else np.int64
            fields.append(np.asarray([float(v) if kind is np.float32 else int(v)
                                      for v in values], dtype=kind))
            pos += 1 + count
        if pos != len(tokens):
            raise ValueError(f"Dataset: line {number} of {path} has more slots than "
                             f"{[v.name for v in self._use_vars]}")
        return fields

    def _batches(self, samples: Iterator[list]) -> Iterator[dict]:
        batch: list[list] = []
        for sample in samples:
            batch.append(sample)
            if len(batch) == self._batch_size:
                yield self._feed(batch)
                batch = []
        if batch:
            yield self._feed(batch)

    def _feed(self, batch: list[list]) -> dict[str, Any]:
        feed: dict[str, Any] = {}
        for k, var in enumerate(self._use_vars):
            column = [sample[k] for sample in batch]
            if var.lod_level > 0:
                arr = np.concatenate(column).reshape(-1, 1)
                feed[var.name] = LoDTensor._of(arr, lengths_to_offsets([[len(c) for c in
                                                                         column]]))
            else:
                width = {len(c) for c in column}
                if len(width) != 1:
                    raise ValueError(f"Dataset: slot {var.name!r} (lod_level 0) has samples "
                                     f"of different lengths {sorted(width)}")
                feed[var.name] = np.stack(column)
        return feed

    def _feeds(self) -> Iterator[dict]:
        return self._batches(self._samples())


class QueueDataset(DatasetBase):
    """Stream the files through ``pipe_command`` batch by batch."""

    def local_shuffle(self) -> None:
        raise NotImplementedError("QueueDataset does not support local shuffle, please use "
                                  "InMemoryDataset for local_shuffle")

    def global_shuffle(self, fleet: Any = None) -> None:
        raise NotImplementedError("QueueDataset does not support global shuffle, please use "
                                  "InMemoryDataset for global_shuffle")


class InMemoryDataset(DatasetBase):
    """Load every sample first (``load_into_memory``), then batch them, shuffled or not."""

    def __init__(self) -> None:
        super().__init__()
        self._memory: list[list] | None = None

    def load_into_memory(self) -> None:
        self._memory = list(self._samples())

    def local_shuffle(self) -> None:
        if self._memory is None:
            raise RuntimeError("InMemoryDataset.local_shuffle: call load_into_memory() first")
        random.shuffle(self._memory)

    def global_shuffle(self, fleet: Any = None, thread_num: int = 12) -> None:
        raise NotImplementedError("InMemoryDataset.global_shuffle (exchanging samples between "
                                  "trainers) is not implemented in dask_fluid; use "
                                  "local_shuffle, or give each trainer its own files")

    def release_memory(self) -> None:
        self._memory = None

    def get_memory_data_size(self, fleet: Any = None) -> int:
        return len(self._memory or [])

    def _feeds(self) -> Iterator[dict]:
        if self._memory is None:
            raise RuntimeError("InMemoryDataset: call load_into_memory() before training")
        return self._batches(iter(self._memory))


class DatasetFactory:
    """``fluid.DatasetFactory().create_dataset("QueueDataset" | "InMemoryDataset")``."""

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> DatasetBase:
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset}
        if datafeed_class not in kinds:
            raise ValueError(f"datafeed class {datafeed_class} does not exist (known: "
                             f"{sorted(kinds)}; FileInstantDataset and BoxPSDataset are not "
                             "implemented)")
        return kinds[datafeed_class]()


def run_from_dataset(executor: Any, program: Any, dataset: DatasetBase, scope: Any,
                     fetch_list: Sequence[Any] | None, fetch_info: Sequence[str] | None,
                     print_period: int, debug: bool = False) -> None:
    """What ``Executor.train_from_dataset`` does: every batch through ``program``, printing
    ``fetch_info: value`` of the fetches every ``print_period`` batches; with ``debug``, the
    mean read time and each op's mean time per batch at the end (standard error)."""
    if not isinstance(dataset, DatasetBase):
        raise TypeError(f"dataset must be a Dataset of fluid.DatasetFactory, got "
                        f"{type(dataset).__name__}")
    fetch_list = list(fetch_list or [])
    info = list(fetch_info or [getattr(f, "name", str(f)) for f in fetch_list])
    if len(info) != len(fetch_list):
        raise ValueError(f"fetch_info has {len(info)} names for {len(fetch_list)} fetches")
    read_s, batches = 0.0, 0
    feeds = dataset._feeds()
    saved, executor._op_times = executor._op_times, ({} if debug else None)
    try:
        while True:
            t0 = time.perf_counter()
            feed = next(feeds, None)
            if feed is None:
                break
            read_s += time.perf_counter() - t0
            values = executor.run(program, feed=feed, fetch_list=fetch_list, scope=scope)
            if fetch_list and print_period and batches % int(print_period) == 0:
                print(", ".join(f"{name}: {np.array(v).reshape(-1)[:4]}"
                                for name, v in zip(info, values, strict=True)),
                      file=sys.stdout, flush=True)
            batches += 1
        if debug:
            _print_op_times(executor._op_times, read_s, batches)
    finally:
        executor._op_times = saved


def _print_op_times(times: dict, read_s: float, batches: int) -> None:
    """Fluid's debug report: mean seconds per batch of reading and of each op."""
    n = max(batches, 1)
    lines = [f"batches: {batches}", f"read time: {read_s / n:.6f}s"]
    lines += [f"op_name:[{i}][{op_type}] (block {blk}), op_mean_time:[{spent[0] / n:.6f}s]"
              for (blk, i, op_type), spent in sorted(times.items())]
    print("\n".join(lines), file=sys.stderr, flush=True)
