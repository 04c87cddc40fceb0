"""``fluid.io.PyReader``: feeding a program from a Python generator (Fluid 1.8).

Two ways, as in Fluid:

* **iterable** (``iterable=True``): ``for data in reader(): exe.run(feed=data, ...)`` — each
  item is a list with one entry per place: a feed dict ``{name: LoDTensor}``, or with
  ``return_list=True`` a list of LoDTensors in the order of ``feed_list`` (Fluid 1.8's
  ``read_next`` and ``read_next_list``);
* **non-iterable** (``iterable=False``): the reader belongs to the program it was created in;
  after ``reader.start()``, every ``exe.run(program)`` without a feed takes the next batch, and
  the run after the last batch raises :class:`EOFException` (``fluid.core.EOFException``), after
  which ``reader.reset()`` readies the next pass.

Batches come from ``decorate_sample_generator`` (samples, batched here),
``decorate_sample_list_generator`` (lists of samples, converted by :class:`DataFeeder`: LoD
fields get their sequence lengths as LoD) or ``decorate_batch_generator`` (one array, or
LoDTensor, per variable). As in Fluid, every field of a batch becomes a
:class:`~dask_fluid.lod.LoDTensor` on the CPU (an array is wrapped without a copy; the
executor moves it to its place).

In dygraph mode (inside ``fluid.dygraph.guard``), as Fluid 1.8's ``DygraphGeneratorLoader``,
a reader takes no ``feed_list``, is always iterable and yields each batch as a list of dygraph
variables, one per field of the samples (each field's values stacked into one array).

As in Fluid, a thread reads the source ahead of the runs into a queue of ``capacity`` batches
(Fluid's ``LoDTensorBlockingQueue`` and its feeding thread), and ``use_double_buffer`` adds
Fluid's double buffer, :data:`DOUBLE_BUFFER` batch more: the next batches are converted while
the program runs (or while a trainer waits for its pservers' parameters). There is one reader
thread and the queue is first in, first out, so the feeds are the same, in the same order, as
reading on demand. An exception raised by the source is raised again by the run (or the
iteration) that would have taken the batch after the last good one; ``reset()``, leaving the
``for`` loop early and the end of the pass stop the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from .data_feeder import DataFeeder
from .executor import CPUPlace, EOFException, feed_array
from .framework import Program, Variable, _dygraph_tracer
from .lod import LoDTensor
from .queue_dataset import DatasetBase
from .sample_readers import chunked

__all__ = ["DEFAULT_CAPACITY", "DOUBLE_BUFFER", "DataLoader", "DatasetLoader", "EOFException",
           "GeneratorLoader", "PyReader"]

logger = logging.getLogger(__name__)

#: batches Fluid's double buffer reads ahead of the program besides the queue (its docs: "the
#: memory of one batch")
DOUBLE_BUFFER = 1
#: the queue's size when no capacity is given
DEFAULT_CAPACITY = 2
#: how often a reader thread blocked on a full queue checks whether it was stopped
_POLL_S = 0.1


class PyReader:
    """Feed a program from a Python generator (Fluid 1.8's ``fluid.io.PyReader``).

    Parameters
    ----------
    feed_list : list of Variable
        The data layers each batch fills, in order.
    capacity : int, optional
        Batches the reader thread makes ahead of the runs (default :data:`DEFAULT_CAPACITY`).
    use_double_buffer : bool
        Fluid's double buffer: :data:`DOUBLE_BUFFER` more batch read ahead.
    iterable : bool
        See the module docstring.
    return_list : bool
        Iterable mode: yield lists of LoDTensors instead of feed dicts.
    """

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False) -> None:
        if capacity is not None and int(capacity) <= 0:
            raise ValueError(f"PyReader: capacity must be positive, got {capacity}")
        #: dygraph mode's tracer (its batches become its variables), None in a program
        self._tracer = _dygraph_tracer()
        if self._tracer is not None:
            # Fluid 1.8's DygraphGeneratorLoader: no feed list, iterable, lists of variables
            if not iterable:
                warnings.warn("Please NOTE: DygraphGeneratorLoader supports iterable mode "
                              "only. Change to iterable mode.", stacklevel=3)
                iterable = True
            if not return_list:
                warnings.warn("Please NOTE: DygraphGeneratorLoader supports returning as list "
                              "only. Change to return as list.", stacklevel=3)
            feed_list, return_list = None, True
        elif not feed_list:
            raise ValueError("PyReader needs feed_list: the data layers its batches fill")
        self._feed_list = list(feed_list or ())
        self._ahead = ((DEFAULT_CAPACITY if capacity is None else int(capacity))
                       + (DOUBLE_BUFFER if use_double_buffer else 0))
        self._iterable = bool(iterable)
        #: Fluid's drop_last (DataLoader.from_generator): the end of a pass over several places
        self._drop_last = True
        #: the places of an iterable reader's source: each item it yields has a batch for each
        self._places = 1
        self._return_list = bool(return_list)
        self._batches: Callable[[], Iterable[dict]] | None = None
        self._running: _ReadAhead | None = None
        #: an iterable reader's pass under way (a weak reference to its generator)
        self._pass: weakref.ref | None = None
        self._program: Program | None = (self._feed_list[0].block.program
                                         if self._feed_list else None)
        if not self._iterable:
            readers = self._program.__dict__.setdefault("_py_readers", [])
            readers.append(self)

    # -- sources ---------------------------------------------------------------------------------
    def decorate_sample_generator(self, sample_generator: Callable[[], Iterable], batch_size: int,
                                  drop_last: bool = True, places: Any = None) -> None:
        """Batches of ``batch_size`` samples (tuples of fields) from ``sample_generator``."""
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")

        self.decorate_sample_list_generator(
            lambda: chunked(sample_generator(), batch_size, drop_last), places)

    def decorate_sample_list_generator(self, reader: Callable[[], Iterable[list]],
                                       places: Any = None) -> None:
        """Batches given as lists of samples; :class:`DataFeeder` builds the feeds."""
        self._places = _place_count(places)
        if self._tracer is not None:  # dygraph: each field's values stacked (Fluid 1.8)
            self._batches = lambda: (_stacked_fields(batch) for batch in reader())
            return
        feeder = DataFeeder(self._feed_list, CPUPlace(), program=self._program)
        self._batches = lambda: (feeder.feed(batch) for batch in reader())

    def decorate_batch_generator(self, reader: Callable[[], Iterable], places: Any = None
                                 ) -> None:
        """Batches given as one array (or LoDTensor) per variable of ``feed_list``."""
        self._places = _place_count(places)
        if self._tracer is not None:  # dygraph: one array per field, in order
            self._batches = lambda: ([_field_array(v, i) for i, v in enumerate(
                item.values() if isinstance(item, dict) else item)] for item in reader())
            return
        self._batches = self._feeds_of(reader)

    def _feeds_of(self, reader: Callable[[], Iterable]) -> Callable[[], Iterator[dict]]:
        """The feeds ``{name: LoDTensor}`` of batches given as one array (or LoDTensor) per
        variable."""
        names = [v.name for v in self._feed_list]
        dtypes = [v.dtype for v in self._feed_list]

        def feeds() -> Iterator[dict]:
            for item in reader():
                values = list(item.values()) if isinstance(item, dict) else list(item)
                if len(values) != len(names):
                    raise ValueError(f"PyReader: a batch has {len(values)} fields but "
                                     f"feed_list has {len(names)}: {names}")
                yield {name: _as_tensor(value, name, dtype)
                       for name, value, dtype in zip(names, values, dtypes, strict=True)}

        return feeds

    @property
    def iterable(self) -> bool:
        """Whether the reader is iterated (``for data in reader():``) rather than started."""
        return self._iterable

    @property
    def queue(self) -> Any:
        """Fluid's C++ blocking queue of the reader: not carried over (an AttributeError that
        names it, so that ``hasattr(reader, "queue")`` is False, as the compat layer's)."""
        raise AttributeError(
            f"{type(self).__name__}.queue (Fluid's C++ blocking queue) is not implemented in "
            "dask_fluid: give the reader its batches with decorate_sample_generator, "
            "decorate_sample_list_generator or decorate_batch_generator (set_* on a DataLoader)")

    # -- iterable mode -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        # ``for data in loader:`` is ``for data in loader():``, a new pass (Fluid's
        # DataLoaderBase.__call__ returns the loader itself)
        return self()

    def __call__(self) -> Iterator[Any]:
        if not self._iterable:
            raise RuntimeError("a PyReader with iterable=False is not iterable: call start() "
                               "and run the program without a feed until EOFException")
        self._reset()  # a new pass ends the one before
        running = self._passing()
        # weakly: a loop left early drops the generator, which ends the pass at once
        self._pass = weakref.ref(running)
        return running

    def _reset(self) -> None:
        """End the pass under way (Fluid's ``_reset``, what a loop left early calls): an
        iterable reader stops reading ahead; a started one is :meth:`reset`."""
        if not self._iterable:
            self.reset()
            return
        running = self._pass() if self._pass is not None else None
        self._pass = None
        if running is not None:
            running.close()

    def _passing(self) -> Iterator[Any]:
        ahead = _ReadAhead(self._source()(), self._ahead)
        try:
            if self._tracer is not None:
                for feed in ahead:
                    # made here, not in the reader thread: the tracer belongs to this one
                    yield [self._tracer.wrap(self._tracer.executor.to_place(a)) for a in feed]
                return
            # consecutive batches, one for each place (Fluid's order); the last ones, fewer,
            # dropped or yielded for fewer places
            for feeds in chunked(ahead, self._places, self._drop_last):
                # for each place its feed dict, or its LoDTensors in the order of feed_list
                yield [list(f.values()) for f in feeds] if self._return_list else feeds
        finally:  # the end of the pass, or a loop left early
            ahead.close()

    # -- non-iterable mode -------------------------------------------------------------------------
    def start(self) -> None:
        """Begin a pass: the program's runs without a feed take the batches in order."""
        if self._iterable:
            raise RuntimeError("start() is for a PyReader with iterable=False")
        if self._running is not None:
            raise RuntimeError("PyReader.start(): the reader is already running; reset() first")
        self._running = _ReadAhead(self._source()(), self._ahead)

    def reset(self) -> None:
        """End the pass (after EOFException, or to stop early)."""
        if self._iterable:
            raise RuntimeError("reset() is for a PyReader with iterable=False")
        running, self._running = self._running, None
        if running is not None:
            running.close()

    def _source(self) -> Callable[[], Iterable[dict]]:
        if self._batches is None:
            raise RuntimeError("PyReader has no data source: call decorate_sample_generator, "
                               "decorate_sample_list_generator or decorate_batch_generator")
        return self._batches

    def _next_feed(self) -> dict:
        if self._running is None:
            raise RuntimeError("the program is fed by a PyReader that is not started: call "
                               "reader.start() before exe.run (and reader.reset() after "
                               "EOFException)")
        try:
            return next(self._running)
        except StopIteration:
            raise EOFException("There is no next data.") from None


class DataLoader:
    """Fluid 1.8's ``fluid.io.DataLoader`` for static programs: :meth:`from_generator` and
    :meth:`from_dataset`."""

    @staticmethod
    def from_dataset(dataset: Any, places: Any, drop_last: bool = True) -> DatasetLoader:
        """A loader of the batches of a ``fluid.DatasetFactory`` dataset (load an
        ``InMemoryDataset`` into memory first), one for each of ``places`` at a time.

        Raises
        ------
        TypeError
            ``dataset`` is not a dataset of ``fluid.DatasetFactory``.
        ValueError
            No places, or fewer files than places (Fluid reads a file per place at least).
        """
        return DatasetLoader(dataset, places, drop_last)

    @staticmethod
    def from_generator(feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                       use_double_buffer: bool = True, iterable: bool = True,
                       return_list: bool = False, use_multiprocess: bool = False,
                       drop_last: bool = True) -> GeneratorLoader:
        """A loader fed by a Python generator: :class:`PyReader`'s reading, with Fluid's
        ``set_sample_generator``, ``set_sample_list_generator`` and ``set_batch_generator``
        (each returns the loader).

        ``drop_last`` is Fluid's rule for the end of a pass over several places (``places``
        of N places, or a CompiledProgram over N places fed by a non-iterable reader): each
        place reads its own batch, as in Fluid, and the last batches, fewer than N, are
        dropped (``True``) or, iterable, yielded for fewer places (``False``), which a
        CompiledProgram over N places refuses, as Fluid 1.8 does for training. On one place
        no batch is dropped.
        ``use_multiprocess`` is for Fluid's dygraph mode: in static programs it has no effect
        in Fluid 1.8, and here neither (the reader is a thread); ``True`` warns that it does
        nothing.
        """
        if use_multiprocess:
            warnings.warn("DataLoader.from_generator(use_multiprocess=True) has no effect "
                          "here: the batches are read by a thread of this process (Fluid 1.8 "
                          "reads them in a child process in dygraph mode)", stacklevel=2)
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list,
                               drop_last)


class GeneratorLoader(PyReader):
    """What :meth:`DataLoader.from_generator` returns (Fluid's ``GeneratorLoader``)."""

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False, drop_last: bool = True) -> None:
        super().__init__(feed_list, capacity, use_double_buffer, iterable, return_list)
        self._drop_last = bool(drop_last)

    def set_sample_generator(self, reader: Callable[[], Iterable], batch_size: int,
                             drop_last: bool = True, places: Any = None) -> GeneratorLoader:
        """:meth:`PyReader.decorate_sample_generator`; returns the loader."""
        self.decorate_sample_generator(reader, batch_size, drop_last, places)
        return self

    def set_sample_list_generator(self, reader: Callable[[], Iterable[list]],
                                  places: Any = None) -> GeneratorLoader:
        """:meth:`PyReader.decorate_sample_list_generator`; returns the loader."""
        self.decorate_sample_list_generator(reader, places)
        return self

    def set_batch_generator(self, reader: Callable[[], Iterable], places: Any = None
                            ) -> GeneratorLoader:
        """:meth:`PyReader.decorate_batch_generator`; returns the loader."""
        self.decorate_batch_generator(reader, places)
        return self


class DatasetLoader:
    """What :meth:`DataLoader.from_dataset` returns (Fluid 1.8's ``DatasetLoader``): the
    batches of a ``fluid.DatasetFactory`` dataset, iterated as ``for data in loader():``, each
    item a list with one feed dict ``{name: LoDTensor}`` for each place.

    As Fluid's ``IterableDatasetWrapper``, the dataset has a reader per place (files dealt to
    them in turn; an in-memory dataset's samples split into contiguous parts), and a step
    takes the next batch of each reader in turn, passing over the readers that are done,
    until it has one for every place; a pass ends when the readers cannot give that many.
    With ``drop_last`` a batch smaller than the batch size ends its reader.
    """

    def __init__(self, dataset: Any, places: Any, drop_last: bool = True) -> None:
        if not isinstance(dataset, DatasetBase):
            raise TypeError(f"DataLoader.from_dataset: dataset must be a dataset of "
                            f"fluid.DatasetFactory, got {type(dataset).__name__}")
        if _dygraph_tracer() is not None:
            raise NotImplementedError("DataLoader.from_dataset is not supported in dygraph "
                                      "mode (nor in Fluid 1.8)")
        if places is None:
            raise ValueError("DataLoader.from_dataset: give the places to feed (e.g. "
                             "fluid.cpu_places())")
        count = _place_count(places)
        if len(dataset._filelist) < count:
            raise ValueError(f"DataLoader.from_dataset: the dataset has "
                             f"{len(dataset._filelist)} file(s), fewer than the {count} "
                             "places (Fluid reads at least one file per place)")
        if dataset._thread_num not in (0, count):  # logged, as Fluid logs it
            logger.warning("thread_num %d which is set in Dataset is ignored: the loader reads "
                           "for %d place(s)", dataset._thread_num, count)
        dataset.set_thread(count)
        self._dataset, self._places, self._drop_last = dataset, count, bool(drop_last)

    def __call__(self) -> Iterator[list[dict]]:
        readers = self._dataset._reader_feeds(self._places)
        names = {v.name: v.dtype for v in self._dataset._use_vars}
        size = self._dataset._batch_size
        live = list(range(len(readers)))
        while True:
            step: list[dict] = []
            while len(step) < self._places and live:
                for i in list(live):
                    feed = next(readers[i], None)
                    if feed is None or (self._drop_last and _rows(feed) != size):
                        live.remove(i)
                        continue
                    step.append({n: _as_tensor(v, n, names[n]) for n, v in feed.items()})
                    if len(step) == self._places:
                        break
            if len(step) < self._places:
                return  # Fluid's StopIteration: a step is never run on fewer places
            yield step

    def __iter__(self) -> Iterator[list[dict]]:
        return self()


def _rows(feed: dict) -> int:
    """The samples of a batch: its sequences, or the rows of its first field."""
    value = next(iter(feed.values()))
    if isinstance(value, LoDTensor):
        lod = value.lod()
        return len(lod[0]) - 1 if lod else value.shape()[0]
    return len(value)


_END = object()  # queued after the last batch


def _as_tensor(value: Any, name: str, dtype: str) -> LoDTensor:
    """One field of a batch as a LoDTensor (Fluid 1.8's ``GeneratorLoader`` thread: a
    LoDTensor as it is, anything else ``LoDTensor.set`` on the CPU).

    An array is wrapped without a copy. Other values (nested lists, numbers) are converted to
    the variable's ``dtype``, as the executor converts such a feed; a number becomes a ``[1]``
    tensor, as in the executor's (and Fluid's) ``_as_lodtensor``.

    Raises
    ------
    TypeError
        When the value is ragged (Fluid's ``_check_input_array``): a variable-length field
        needs a LoDTensor (``fluid.create_lod_tensor``).
    """
    if isinstance(value, LoDTensor):
        return value
    try:  # an array as it is: the executor checks its dtype and shape at the run
        array = feed_array(value, dtype)
    except (TypeError, ValueError):
        if np.isscalar(value):
            raise
        # numpy refuses ragged nested sequences
        raise TypeError(f"PyReader: field {name!r} of a batch is not a regular {dtype} "
                        "array (nested lists of different lengths?); give a "
                        "variable-length field as a LoDTensor (fluid.create_lod_tensor)"
                        ) from None
    return LoDTensor._of(array, (), CPUPlace())


def _field_array(value: Any, index: int) -> np.ndarray:
    """One field of a dygraph batch as an array (Fluid 1.8's ``_check_input_array``)."""
    try:
        array = np.asarray(value)
    except ValueError:  # numpy refuses ragged nested sequences
        array = np.empty(0, dtype=object)
    if array.dtype == object:
        raise TypeError(f"field {index} of a batch is not a regular array (ragged or of "
                        "objects): every sample's field must have the same shape")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        # what the executor refuses in a program's feed
        raise ValueError(f"field {index} of a batch contains NaN or inf; clean the input data")
    return array


def _stacked_fields(batch: list) -> list[np.ndarray]:
    """A list of samples (tuples of fields) as one array per field."""
    if not batch:
        raise ValueError("a batch of the sample list generator is empty")
    width = len(batch[0])
    for sample in batch:
        if len(sample) != width:
            raise ValueError(f"the samples of a batch have {width} and {len(sample)} fields")
    return [_field_array([sample[i] for sample in batch], i) for i in range(width)]


def _place_count(places: Any) -> int:
    """How many places a reader's ``places`` names (None or one place: 1). An iterable reader
    over N places yields N batches at a time, one for each, as Fluid's; the executor puts a
    batch on its place."""
    if isinstance(places, (list, tuple)):
        if not places:
            raise ValueError("a reader's places must name at least one place, got []")
        return len(places)
    return 1


class _ReadAhead:
    """A thread that reads ``batches`` into a queue of ``size`` while the runs take them."""

    def __init__(self, batches: Iterable[dict], size: int) -> None:
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, size))
        self._stopped = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._read, args=(batches,),
                                        name="dask-fluid-py-reader", daemon=True)
        self._thread.start()

    def _read(self, batches: Iterable[dict]) -> None:
        try:
            for feed in batches:
                if not self._put(feed):
                    return
        except BaseException as exc:  # noqa: BLE001 - the run that takes it raises it
            self._put(exc)  # (a batch is a dict, never an exception)
            return
        self._put(_END)

    def _put(self, item: object) -> bool:
        """Queue ``item`` unless the reader is stopped meanwhile."""
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> _ReadAhead:
        return self

    def __next__(self) -> dict:
        """The next batch; StopIteration after the last one, or the source's exception."""
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def close(self) -> None:
        """Stop the thread (a source blocked in its own code is left to finish on its own: the
        thread is a daemon and queues nothing more)."""
        self._stopped.set()
        self._done = True
        self._thread.join(timeout=2 * _POLL_S)
