"""``fluid.DatasetFactory``, ``QueueDataset`` and ``InMemoryDataset`` with
``Executor.train_from_dataset`` (Fluid 1.8's file-fed training).

A dataset reads each file as Fluid's ``fs_open_read`` does (:mod:`dask_fluid.dataset_lines`):
through ``pipe_command`` (a shell command fed the file, e.g. a ``MultiSlotDataGenerator``
script), after ``set_download_cmd``'s command or ``hadoop fs -cat`` for ``hdfs:``/``afs:``
paths. The command writes MultiSlot lines ``<n> v1 .. vn <m> w1 .. wm ...``, one slot per
variable of ``set_use_var`` in order. Each slot becomes a sample field: an int64 or float32
list, a LoD sequence when the variable has ``lod_level >= 1``. Batches of ``batch_size``
samples feed the program, as Fluid's ``DataFeed``.

Fluid runs ``thread_num`` reader threads, each with its own program copy (hogwild). Here the
files are read in order and the batches run one after another on the executor: the same
samples and updates, without the races. ``InMemoryDataset`` loads every sample first (or in
the background: ``preload_into_memory``) and can shuffle them, merge them by line id and
shuffle slots; exchanging samples between trainers (``global_shuffle`` with several) and the
PV/BoxPS/feasign-table features of Baidu's CTR pipelines, which need Fluid's C++ services,
raise ``NotImplementedError`` saying so.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .dataset_lines import Record, feeds, merge_by_ins_id, parse_line, read_lines, slots_shuffle
from .framework import Variable

__all__ = ["DatasetFactory", "InMemoryDataset", "QueueDataset"]

_BOXPS = ("it belongs to the search-id (PV) merging of Baidu's BoxPS CTR pipeline "
          "(PaddleBoxDataFeed), which needs Fluid's C++ BoxPS service")
_EXCHANGE = ("exchanging samples between trainers (Fluid's client-to-client messages of the "
             "PSLib fleet, shaped by set_queue_num, set_fleet_send_batch_size and "
             "set_fleet_send_sleep_seconds) is not implemented in dask_fluid; give each "
             "trainer its own files, or run one trainer")


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _one_trainer(method: str, fleet: Any) -> None:
    """Several trainers need what only Fluid's PSLib fleet does: say so."""
    if fleet is not None and int(fleet.worker_num()) > 1:
        raise NotImplementedError(f"InMemoryDataset.{method}(fleet) with "
                                  f"{fleet.worker_num()} trainers: {_EXCHANGE}")


class DatasetBase:
    """What the datasets share (Fluid's ``DatasetBase``)."""

    def __init__(self) -> None:
        self._pipe_command = "cat"
        self._batch_size = 1
        self._thread_num = 1
        self._filelist: list[str] = []
        self._use_vars: list[Variable] = []
        self._hdfs_command = "hadoop fs"
        self._download_cmd = ""
        self._candidates: int | None = None  # set_fea_eval's record_candidate_size
        self.fea_eval = False  # Fluid's attribute name

    def set_pipe_command(self, pipe_command: str) -> None:
        """The shell command each file is piped through (default ``cat``)."""
        self._pipe_command = str(pipe_command)

    def set_batch_size(self, batch_size: int) -> None:
        self._batch_size = _positive("batch_size", batch_size)

    def set_thread(self, thread_num: int) -> None:
        """Fluid's reader threads; kept (files are read in order here)."""
        self._thread_num = _positive("thread_num", thread_num)

    def set_filelist(self, filelist: Sequence[str]) -> None:
        """The files to read; none gives no samples, as in Fluid."""
        self._filelist = [str(f) for f in filelist]

    def set_use_var(self, var_list: Sequence[Variable]) -> None:
        """The variables each MultiSlot line fills, in slot order."""
        for var in var_list:
            if not isinstance(var, Variable):
                raise TypeError(f"set_use_var takes Variables, got {type(var).__name__}")
        self._use_vars = list(var_list)

    def set_hdfs_config(self, fs_name: str, fs_ugi: str) -> None:
        """Read ``hdfs:``/``afs:`` files with ``hadoop fs -D fs.default.name=<fs_name> -D
        hadoop.job.ugi=<fs_ugi> -cat`` (Fluid's command; ``hadoop`` must be installed).
        Fluid sets it for the whole process; here for this dataset."""
        self._hdfs_command = (f"hadoop fs -D fs.default.name={fs_name} "
                              f"-D hadoop.job.ugi={fs_ugi}")

    def set_download_cmd(self, download_cmd: str) -> None:
        """Read ``hdfs:``/``afs:`` files with ``<download_cmd> "<path>"`` piped into
        ``pipe_command`` (Fluid's ``hdfs_open_read``: local paths and ``.gz`` ones are read
        as before). Fluid sets it for the whole process; here for this dataset."""
        self._download_cmd = str(download_cmd)

    def set_rank_offset(self, rank_offset: str) -> None:
        raise NotImplementedError(f"Dataset.set_rank_offset is not implemented: {_BOXPS}")

    def set_pv_batch_size(self, pv_batch_size: int) -> None:
        raise NotImplementedError(f"Dataset.set_pv_batch_size is not implemented: {_BOXPS}")

    def set_fea_eval(self, record_candidate_size: int, fea_eval: bool = True) -> None:
        """Turn on (or off) the feature-evaluation mode ``slots_shuffle`` needs, drawing
        each replacement from ``record_candidate_size`` candidate instances."""
        if fea_eval:
            self._candidates = _positive("record_candidate_size", record_candidate_size)
        self.fea_eval = bool(fea_eval)

    def slots_shuffle(self, slots: Sequence[str]) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not hold its samples, please "
                                  "use InMemoryDataset for slots_shuffle")

    def desc(self) -> str:
        return (f"{type(self).__name__}(batch_size={self._batch_size}, thread_num="
                f"{self._thread_num}, pipe_command={self._pipe_command!r}, filelist="
                f"{self._filelist}, use_var={[v.name for v in self._use_vars]})")

    # -- reading ----------------------------------------------------------------------------
    def _samples(self, files: Sequence[str] | None = None) -> Iterator[Record]:
        """The records of ``files`` (default: the file list), in order."""
        if not self._use_vars:
            raise ValueError("Dataset: call set_use_var(...) with the data layers to fill")
        for path in self._filelist if files is None else files:
            lines = read_lines(path, self._pipe_command, self._hdfs_command,
                               self._download_cmd)
            for number, line in enumerate(lines, 1):
                if line.strip():
                    yield parse_line(line, self._use_vars, f"line {number} of {path}",
                                     **self._line_format())

    def _line_format(self) -> dict[str, bool]:
        """What ``parse_line`` reads besides the slots (Fluid's streaming feed: nothing)."""
        return {}

    def _feeds(self) -> Iterator[dict]:
        return feeds(self._samples(), self._use_vars, self._batch_size)

    def _reader_feeds(self, readers: int) -> list[Iterator[dict]]:
        """The batches of each of ``readers`` readers (Fluid's reader threads, one per place
        of a ``DataLoader.from_dataset``): reader i streams files i, i + readers, ... (Fluid's
        threads take the next file of the list as they finish one)."""
        return [feeds(self._samples(self._filelist[i::readers]), self._use_vars,
                      self._batch_size) for i in range(readers)]


class _StreamedDataset(DatasetBase):
    """A dataset read as it streams: it holds no samples to shuffle (Fluid's words)."""

    def local_shuffle(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support local shuffle, "
                                  "please use InMemoryDataset for local_shuffle")

    def global_shuffle(self, fleet: Any = None) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support global shuffle, "
                                  "please use InMemoryDataset for global_shuffle")


class QueueDataset(_StreamedDataset):
    """Stream the files through ``pipe_command`` batch by batch."""


class FileInstantDataset(_StreamedDataset):
    """Fluid's ``FileInstantDataset``: a ``QueueDataset`` whose ``MultiSlotFileInstantDataFeed``
    memory-maps files of a binary format (uint16 counts, raw float32/uint64 values, in CUDA
    builds only). It can be configured; reading it raises, as that format is not implemented."""

    def _samples(self, files: Sequence[str] | None = None) -> Iterator[Record]:
        raise NotImplementedError("FileInstantDataset: the binary files of Fluid's "
                                  "MultiSlotFileInstantDataFeed (CUDA builds only) are not "
                                  "implemented in dask_fluid; write MultiSlot text lines and use "
                                  "QueueDataset")


class InMemoryDataset(DatasetBase):
    """Load every sample first (``load_into_memory``), then batch them, shuffled or not.

    Fluid holds the samples in an input channel until ``global_shuffle`` or a training pass
    deals them to the readers' channels: ``get_memory_data_size`` counts the former,
    ``get_shuffle_data_size`` the latter, and so do they here. Fluid's ``local_shuffle``
    shuffles only the input channel (nothing after a pass, until ``postprocess_instance``);
    here it shuffles every sample held.
    """

    def __init__(self) -> None:
        super().__init__()
        self._memory: list[Record] | None = None
        self._dealt = False  # the samples went to the readers' channels
        self._slots_original: list[Record] | None = None  # what slots_shuffle starts from
        self._preload: tuple[threading.Thread, dict[str, Any]] | None = None
        # Fluid's attribute names, which scripts and Fluid's own tests read
        self.parse_ins_id = False
        self.parse_content = False
        self.merge_by_lineid = False
        self._merge_size = 2
        self.queue_num: int | None = None
        self.fleet_send_batch_size: int | None = None
        self.fleet_send_sleep_seconds: int | None = None

    # -- settings ---------------------------------------------------------------------------
    def set_feed_type(self, data_feed_type: str) -> None:
        """Fluid's data feed class: only its default ``MultiSlotInMemoryDataFeed`` is here."""
        if data_feed_type != "MultiSlotInMemoryDataFeed":
            raise NotImplementedError(f"InMemoryDataset.set_feed_type({data_feed_type!r}): only "
                                      "'MultiSlotInMemoryDataFeed' is implemented in dask_fluid "
                                      f"(PaddleBoxDataFeed: {_BOXPS})")

    def set_queue_num(self, queue_num: int) -> None:
        """Fluid's number of output channels the samples are dealt to. Batches are read in
        order here and a one-trainer ``global_shuffle`` sends nothing, so it shapes only the
        exchange between trainers, which is not implemented."""
        self.queue_num = _positive("queue_num", queue_num)

    def set_fleet_send_batch_size(self, fleet_send_batch_size: int = 1024) -> None:
        """How many samples ``global_shuffle`` sends another trainer per message; a
        one-trainer ``global_shuffle`` sends none (exchanging is not implemented)."""
        self.fleet_send_batch_size = _positive("fleet_send_batch_size", fleet_send_batch_size)

    def set_fleet_send_sleep_seconds(self, fleet_send_sleep_seconds: int = 0) -> None:
        """The pause between ``global_shuffle``'s messages to other trainers; a one-trainer
        ``global_shuffle`` sends none (exchanging is not implemented)."""
        if isinstance(fleet_send_sleep_seconds, bool) or int(fleet_send_sleep_seconds) < 0:
            raise ValueError("fleet_send_sleep_seconds must be a non-negative integer, got "
                             f"{fleet_send_sleep_seconds!r}")
        self.fleet_send_sleep_seconds = int(fleet_send_sleep_seconds)

    def set_parse_ins_id(self, parse_ins_id: bool) -> None:
        """Read each line's leading ``1 <ins_id>`` (the id ``merge_by_lineid`` groups by)."""
        self.parse_ins_id = bool(parse_ins_id)

    def set_parse_content(self, parse_content: bool) -> None:
        """Read each line's ``1 <content>`` token (after the ins_id, when parsed)."""
        self.parse_content = bool(parse_content)

    def set_merge_by_lineid(self, merge_size: int = 2) -> None:
        """After ``global_shuffle``, merge the instances sharing an ins_id (Fluid's
        ``MergeByInsId``: :func:`dask_fluid.dataset_lines.merge_by_ins_id`), dropping the
        groups of another size than ``merge_size`` (any size when ``merge_size <= 0``).
        Turns on ``set_parse_ins_id``."""
        self._merge_size = int(merge_size)
        self.merge_by_lineid = True
        self.parse_ins_id = True

    def set_parse_logkey(self, parse_logkey: bool) -> None:
        if parse_logkey:
            raise NotImplementedError("InMemoryDataset.set_parse_logkey(True) is not "
                                      f"implemented: the logkey's search id, cmatch and rank "
                                      f"serve only PV merging; {_BOXPS}")

    def set_enable_pv_merge(self, enable_pv_merge: bool) -> None:
        if enable_pv_merge:
            raise NotImplementedError("InMemoryDataset.set_enable_pv_merge(True) is not "
                                      f"implemented: {_BOXPS}")

    def set_merge_by_sid(self, merge_by_sid: bool) -> None:
        raise NotImplementedError("InMemoryDataset.set_merge_by_sid is not implemented: it "
                                  f"shapes only PV merging (set_enable_pv_merge); {_BOXPS}")

    def set_current_phase(self, current_phase: int) -> None:
        raise NotImplementedError("InMemoryDataset.set_current_phase is not implemented: the "
                                  f"join/update phases feed PV instances; {_BOXPS}")

    def set_generate_unique_feasigns(self, generate_uni_feasigns: bool, shard_num: int) -> None:
        raise NotImplementedError("InMemoryDataset.set_generate_unique_feasigns is not "
                                  "implemented: the local feasign tables are pulled from "
                                  "Fluid's C++ PSLib parameter server")

    def generate_local_tables_unlock(self, table_id: int, fea_dim: int, read_thread_num: int,
                                     consume_thread_num: int, shard_num: int) -> None:
        raise NotImplementedError("InMemoryDataset.generate_local_tables_unlock is not "
                                  "implemented: it fills local feasign tables from Fluid's C++ "
                                  "PSLib parameter server (FleetWrapper::PullSparseToLocal)")

    def _line_format(self) -> dict[str, bool]:
        # Fluid's MultiSlotInMemoryDataFeed: leading ids, and no zeros in sequence slots
        return {"ins_id": self.parse_ins_id, "content": self.parse_content,
                "drop_sparse_zeros": True}

    # -- loading ----------------------------------------------------------------------------
    def load_into_memory(self) -> None:
        """Read every file; the samples join those already held, as in Fluid."""
        self._not_preloading("load_into_memory")
        self._hold(list(self._samples()))

    def preload_into_memory(self, thread_num: int | None = None) -> None:
        """``load_into_memory`` in a background thread; ``wait_preload_done`` ends it.
        Fluid reads with ``thread_num`` threads; one reads the files in order here."""
        self._not_preloading("preload_into_memory")
        if thread_num is not None:
            _positive("thread_num", thread_num)
        box: dict[str, Any] = {}

        def load() -> None:
            try:
                box["samples"] = list(self._samples())
            except BaseException as exc:  # handed to wait_preload_done's caller
                box["error"] = exc

        thread = threading.Thread(target=load, name="InMemoryDataset.preload", daemon=True)
        self._preload = (thread, box)
        thread.start()

    def wait_preload_done(self) -> None:
        """Wait for ``preload_into_memory``; its error, if any, is raised here."""
        if self._preload is None:
            raise RuntimeError("InMemoryDataset.wait_preload_done: call preload_into_memory() "
                               "first")
        (thread, box), self._preload = self._preload, None
        thread.join()
        if "error" in box:
            raise box["error"]
        self._hold(box["samples"])

    def _not_preloading(self, method: str) -> None:
        if self._preload is not None:
            raise RuntimeError(f"InMemoryDataset.{method}: a preload_into_memory() is under "
                               "way; call wait_preload_done() first")

    def _hold(self, samples: list[Record]) -> None:
        self._memory = (self._memory or []) + samples
        self._dealt = False
        self._slots_original = None  # slots_shuffle starts again from what is held now

    def release_memory(self) -> None:
        self._not_preloading("release_memory")
        self._memory, self._dealt, self._slots_original = None, False, None

    # -- shuffling --------------------------------------------------------------------------
    def _held(self, method: str) -> list[Record]:
        self._not_preloading(method)
        if self._memory is None:
            raise RuntimeError(f"InMemoryDataset.{method}: call load_into_memory() first")
        return self._memory

    def local_shuffle(self) -> None:
        random.shuffle(self._held("local_shuffle"))

    def global_shuffle(self, fleet: Any = None, thread_num: int = 12) -> None:
        """Shuffle the samples of all trainers among them; then ``set_merge_by_lineid``'s
        merge. With ``fleet`` None or one trainer (Fluid's ``trainer_num`` 1), every sample
        of this process is shuffled and stays here; ``thread_num`` is Fluid's number of
        sending threads (-1: ``set_thread``'s). Unseeded in Fluid; Python's ``random`` here.
        """
        if int(thread_num) != -1:
            _positive("thread_num", thread_num)
        _one_trainer("global_shuffle", fleet)
        samples = self._held("global_shuffle")
        random.shuffle(samples)
        self._dealt = True
        if self.merge_by_lineid:
            dense = [var.lod_level == 0 for var in self._use_vars]
            self._memory, dropped = merge_by_ins_id(samples, self._merge_size, dense)
            if dropped:
                warnings.warn(f"InMemoryDataset merge_by_lineid dropped {dropped} instances "
                              f"(groups of another size than merge_size={self._merge_size}, "
                              "or two with values in one sequence slot)", stacklevel=2)

    def preprocess_instance(self) -> None:
        """Without PV merging (``set_enable_pv_merge``, not implemented): Fluid's local
        shuffle of the samples held."""
        if self._memory:
            self.local_shuffle()

    def postprocess_instance(self) -> None:
        """Without PV merging: the samples go back to the input channel, shuffled."""
        if self._memory:
            self.local_shuffle()
            self._dealt = False

    def slots_shuffle(self, slots: Sequence[str]) -> None:
        """Replace the values of ``slots`` (names of ``set_use_var`` variables) of each sample
        by those of a random sample, to measure how much the model needs them (Fluid's
        ``SlotsShuffle``: :func:`dask_fluid.dataset_lines.slots_shuffle`). Each call starts
        from the samples as loaded. Fluid shuffles only int64 slots (float slots keep their
        values), silently skips the shuffle without ``set_fea_eval`` and ignores unknown
        names; both raise here."""
        if not self.fea_eval:
            raise RuntimeError("InMemoryDataset.slots_shuffle needs the feature-evaluation "
                               "mode: call set_fea_eval(record_candidate_size, True) first "
                               "(Fluid skips the shuffle silently)")
        names = [var.name for var in self._use_vars]
        unknown = sorted(set(slots) - set(names))
        if unknown:
            raise ValueError(f"InMemoryDataset.slots_shuffle: {unknown} are not slots of "
                             f"set_use_var ({names})")
        if self._slots_original is None:
            self._slots_original = list(self._held("slots_shuffle"))
        chosen = [k for k, var in enumerate(self._use_vars)
                  if var.name in slots and not var.dtype.startswith("float")]
        assert self._candidates is not None  # set by set_fea_eval(.., True)
        self._memory = slots_shuffle(self._slots_original, chosen, self._candidates)
        self._dealt = False

    # -- sizes ------------------------------------------------------------------------------
    def get_memory_data_size(self, fleet: Any = None) -> int:
        """The samples loaded and not yet dealt by ``global_shuffle`` or a training pass;
        Fluid sums them over the trainers of ``fleet`` (one trainer here)."""
        _one_trainer("get_memory_data_size", fleet)
        return 0 if self._dealt else len(self._memory or [])

    def get_shuffle_data_size(self, fleet: Any = None) -> int:
        """The samples dealt to the readers by ``global_shuffle`` or a training pass;
        Fluid sums them over the trainers of ``fleet`` (one trainer here)."""
        _one_trainer("get_shuffle_data_size", fleet)
        return len(self._memory or []) if self._dealt else 0

    def get_pv_data_size(self) -> int:
        """Fluid's count of merged PV instances: 0 without PV merging, as here."""
        return 0

    def _feeds(self) -> Iterator[dict]:
        self._not_preloading("train_from_dataset")
        if self._memory is None:
            raise RuntimeError("InMemoryDataset: call load_into_memory() before training")
        self._dealt = True
        return feeds(self._memory, self._use_vars, self._batch_size)

    def _reader_feeds(self, readers: int) -> list[Iterator[dict]]:
        """The batches of each of ``readers`` readers: the samples in memory dealt to their
        channels in contiguous, nearly equal parts, as Fluid's ``PrepareTrain`` splits them."""
        self._feeds()  # the checks and the bookkeeping of a training pass
        memory = self._memory or []
        size, extra = divmod(len(memory), readers)
        bounds = [i * size + min(i, extra) for i in range(readers + 1)]
        return [feeds(memory[a:b], self._use_vars, self._batch_size)
                for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class DatasetFactory:
    """``fluid.DatasetFactory().create_dataset("QueueDataset" | "InMemoryDataset" |
    "FileInstantDataset")``."""

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> DatasetBase:
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset,
                 "FileInstantDataset": FileInstantDataset}
        if datafeed_class == "BoxPSDataset":
            raise NotImplementedError("BoxPSDataset is not implemented in dask_fluid: it loads "
                                      "passes into Baidu's BoxPS GPU parameter server (Fluid's "
                                      "C++ BoxWrapper); use InMemoryDataset")
        if datafeed_class not in kinds:
            raise ValueError(f"datafeed class {datafeed_class} does not exist (known: "
                             f"{sorted(kinds)})")
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
