"""``fluid.io.PyReader``: feeding a program from a Python generator (Fluid 1.8).

Two ways, as in Fluid:

* **iterable** (``iterable=True``): ``for data in reader(): exe.run(feed=data, ...)`` — each
  item is one feed dict per place (a list);
* **non-iterable** (``iterable=False``): the reader belongs to the program it was created in;
  after ``reader.start()``, every ``exe.run(program)`` without a feed takes the next batch, and
  the run after the last batch raises :class:`EOFException` (``fluid.core.EOFException``), after
  which ``reader.reset()`` readies the next pass.

Batches come from ``decorate_sample_generator`` (samples, batched here),
``decorate_sample_list_generator`` (lists of samples, converted by :class:`DataFeeder`: LoD
fields become LoD tensors) or ``decorate_batch_generator`` (one array, or LoDTensor, per
variable). There is no background thread and no ``capacity`` queue: a batch is converted when
the run asks for it, which gives the same feeds in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .data_feeder import DataFeeder
from .executor import CPUPlace
from .framework import Program, Variable

__all__ = ["EOFException", "PyReader"]


class EOFException(Exception):
    """Raised by ``Executor.run`` when a started non-iterable reader has no batch left
    (Fluid's ``fluid.core.EOFException``)."""


class PyReader:
    """Feed a program from a Python generator (Fluid 1.8's ``fluid.io.PyReader``).

    Parameters
    ----------
    feed_list : list of Variable
        The data layers each batch fills, in order.
    capacity : int, optional
        Fluid's queue size; batches are made on demand here, so it only has to be positive.
    use_double_buffer : bool
        Fluid's prefetch to the device; no effect here (batches move at run time).
    iterable : bool
        See the module docstring.
    return_list : bool
        Iterable mode: yield lists of arrays instead of feed dicts.
    """

    def __init__(self, feed_list: Sequence[Variable] | None = None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False) -> None:
        if not feed_list:
            raise ValueError("PyReader needs feed_list: the data layers its batches fill")
        if capacity is not None and int(capacity) <= 0:
            raise ValueError(f"PyReader: capacity must be positive, got {capacity}")
        self._feed_list = list(feed_list)
        self._iterable = bool(iterable)
        self._return_list = bool(return_list)
        self._batches: Callable[[], Iterable[dict]] | None = None
        self._running: Iterator[dict] | None = None
        self._program: Program = self._feed_list[0].block.program
        if not self._iterable:
            readers = self._program.__dict__.setdefault("_py_readers", [])
            readers.append(self)

    # -- sources ---------------------------------------------------------------------------------
    def decorate_sample_generator(self, sample_generator: Callable[[], Iterable], batch_size: int,
                                  drop_last: bool = True, places: Any = None) -> None:
        """Batches of ``batch_size`` samples (tuples of fields) from ``sample_generator``."""
        if int(batch_size) <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")

        def batched() -> Iterator[list]:
            batch: list = []
            for sample in sample_generator():
                batch.append(sample)
                if len(batch) == batch_size:
                    yield batch
                    batch = []
            if batch and not drop_last:
                yield batch

        self.decorate_sample_list_generator(batched, places)

    def decorate_sample_list_generator(self, reader: Callable[[], Iterable[list]],
                                       places: Any = None) -> None:
        """Batches given as lists of samples; :class:`DataFeeder` builds the feeds."""
        feeder = DataFeeder(self._feed_list, CPUPlace(), program=self._program)
        self._batches = lambda: (feeder.feed(batch) for batch in reader())

    def decorate_batch_generator(self, reader: Callable[[], Iterable], places: Any = None
                                 ) -> None:
        """Batches given as one array (or LoDTensor) per variable of ``feed_list``."""
        names = [v.name for v in self._feed_list]

        def feeds() -> Iterator[dict]:
            for item in reader():
                values = list(item.values()) if isinstance(item, dict) else list(item)
                if len(values) != len(names):
                    raise ValueError(f"PyReader: a batch has {len(values)} fields but "
                                     f"feed_list has {len(names)}: {names}")
                yield dict(zip(names, values, strict=True))

        self._batches = feeds

    # -- iterable mode -----------------------------------------------------------------------------
    def __call__(self) -> Iterator[Any]:
        if not self._iterable:
            raise RuntimeError("a PyReader with iterable=False is not iterable: call start() "
                               "and run the program without a feed until EOFException")
        for feed in self._source()():
            yield [list(feed.values())] if self._return_list else [feed]

    # -- non-iterable mode -------------------------------------------------------------------------
    def start(self) -> None:
        """Begin a pass: the program's runs without a feed take the batches in order."""
        if self._iterable:
            raise RuntimeError("start() is for a PyReader with iterable=False")
        if self._running is not None:
            raise RuntimeError("PyReader.start(): the reader is already running; reset() first")
        self._running = iter(self._source()())

    def reset(self) -> None:
        """End the pass (after EOFException, or to stop early)."""
        if self._iterable:
            raise RuntimeError("reset() is for a PyReader with iterable=False")
        self._running = None

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
