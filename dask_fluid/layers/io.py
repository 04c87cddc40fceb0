"""Fluid 1.8's reader layers (``layers.io``): py_reader, create_py_reader_by_data, read_file,
double_buffer, load.

Program structure, as in Fluid 1.8 (``python/paddle/fluid/layers/io.py``) with one deviation:

* ``py_reader`` / ``create_py_reader_by_data`` put a reader variable in the main program
  (``create_py_reader_N``, or ``<name>_reader``; with the double buffer the reader returned
  is ``double_buffer_N`` / ``<name>_double_buffer``, as Fluid names them) and return a
  :class:`Reader`: a non-iterable :class:`~dask_fluid.py_reader.PyReader` with Fluid's
  methods (``start``, ``reset``, ``decorate_paddle_reader`` / ``decorate_sample_list_generator``,
  ``decorate_tensor_provider`` / ``decorate_batch_generator``) and ``queue``, Fluid's blocking
  queue (``push``, ``close``, ``kill``, ``size``, ``capacity``, ``is_closed``): the pushed
  batches are the PyReader's source, read ahead by its thread (so up to ``capacity`` + 1 more
  batches than the queue's own ``capacity`` can be pushed before ``push`` blocks); as in Fluid
  such a reader is not ``start()``-ed, and ``reset()`` reopens the queue.
* ``read_file(reader)`` appends Fluid's ``read`` op (``Reader`` → ``Out``) and returns its
  outputs, the data variables. **Deviation**: these variables are made by ``py_reader`` (a
  PyReader needs its feed list when it is made) and are fed, on every run of the program
  without a feed, by the executor's hook for started PyReaders — the one read-ahead queue
  (``capacity`` batches, one more with the double buffer), EOFException at the end of the
  pass, ``reset()`` after. The ``read`` op itself writes nothing (``dask_fluid.ops.reader_ops``).
  Fluid's startup ``create_py_reader`` op and main-program ``create_double_buffer_reader`` op
  are not added: the reader lives in Python, not in the scope.
* A clone keeps the data variables' names, and ``save_inference_model`` prunes the ``read`` op
  (its outputs are fed), as Fluid's ``prune_read_op``.
* ``Program.clone()`` (``for_test`` too): Fluid 1.8's ``py_reader`` docs say "Program.clone()
  method cannot clone py_reader". Here the clone keeps the reader variable and the ``read`` op
  but is not fed by the reader: feed it by hand (its data variables have the same names), or
  build the test program with its own reader, as Fluid's docs advise. A CompiledProgram of the
  reader's own program (``with_data_parallel``) is fed by the reader.
* ``load(out, file_path, load_as_fp16)`` appends Fluid's ``load`` op, which reads a LoDTensor
  file as written by Fluid's ``save`` op or ``fluid.io.save_vars`` (one file per variable).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .. import unique_name
from ..framework import Program, Variable, VarType, convert_dtype, default_main_program
from ..layer_helper import LayerHelper
from ..places import CPUPlace
from ..py_reader import _POLL_S, DOUBLE_BUFFER, PyReader, _ReadAhead

__all__: list[str] = ["create_py_reader_by_data", "double_buffer", "load", "py_reader",
                      "read_file"]

_CLOSED = object()  # queued by BlockingQueue.close()


class BlockingQueue:
    """Fluid's ``LoDTensorBlockingQueue`` as ``py_reader(...).queue`` shows it: batches pushed
    by the user, taken by the reader's read-ahead thread (the one of
    :class:`~dask_fluid.py_reader.PyReader`: this queue is its source)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._closed = False
        self._pass = 0  # which pass the source of the reader's thread belongs to

    def push(self, tensors: Sequence[Any]) -> bool:
        """Queue one batch (blocks while the queue is full); False once the queue is closed,
        as Fluid's ``push``."""
        if self._closed:
            return False
        self._queue.put(list(tensors))
        return True

    def close(self) -> None:
        """No batch after those queued: the run after the last one raises EOFException."""
        if not self._closed:
            self._closed = True
            self._queue.put(_CLOSED)

    def kill(self) -> None:
        """Fluid's ``kill``: close and drop the queued batches."""
        self._drain()
        self.close()

    def size(self) -> int:
        return self._queue.qsize()

    def capacity(self) -> int:
        return self._capacity

    def is_closed(self) -> bool:
        return self._closed

    def _drain(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _reopen(self) -> None:
        self._pass += 1  # the last pass's thread, if still waiting, takes nothing more
        self._drain()
        self._closed = False

    def _batches(self) -> Iterator[list]:
        own = self._pass
        while own == self._pass:
            try:
                item = self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            if own != self._pass:  # taken from the next pass: give it back
                self._queue.put(item)
                return
            if item is _CLOSED:
                return
            yield item


class Reader(PyReader):
    """What ``layers.py_reader`` returns (Fluid 1.8's monkey-patched reader Variable).

    ``name`` is the reader variable's name. Its data variables are returned by
    :func:`read_file`.
    """

    def __init__(self, data_vars: list[Variable], capacity: int, reader_var: Variable) -> None:
        # the double buffer is added by double_buffer(), as Fluid's _py_reader does
        super().__init__(data_vars, capacity, use_double_buffer=False, iterable=False)
        self._var = reader_var
        self._read = False
        self._capacity = capacity
        self._push: BlockingQueue | None = None

    @property
    def name(self) -> str:
        return self._var.name

    def decorate_paddle_reader(self, paddle_reader: Callable[[], Iterable[list]],
                               places: Any = None) -> None:
        """Fluid's name for :meth:`decorate_sample_list_generator`: a reader of batches given
        as lists of samples (``paddle.batch(...)``); LoD fields become LoD tensors."""
        self.decorate_sample_list_generator(paddle_reader, places)

    def decorate_tensor_provider(self, func: Callable[[], Iterable], places: Any = None
                                 ) -> None:
        """Fluid's name for :meth:`decorate_batch_generator`: each item is one array (or
        LoDTensor) per data variable."""
        self.decorate_batch_generator(func, places)

    @property
    def queue(self) -> BlockingQueue:
        """Fluid's ``LoDTensorBlockingQueue`` of the reader: ``queue.push(tensors)`` one batch
        (one array or LoDTensor per data variable), ``queue.close()`` after the last one. As in
        Fluid, a reader without a decorated source is fed this way and needs no ``start()``:
        the first run (or the first after ``reset()``, which reopens the queue) starts it. A
        reader with a decorated source reads that after ``start()``, as Fluid's provider
        thread pushes it into this same queue."""
        if self._push is None:
            self._push = BlockingQueue(self._capacity)
        return self._push

    def _fed_by_pushes(self) -> bool:
        return self._push is not None and self._batches is None

    def start(self) -> None:
        if self._fed_by_pushes():
            # Fluid's start() runs the decorated provider, which a pushed reader lacks
            raise RuntimeError("py_reader: a reader fed by reader.queue.push starts with the "
                               "first run, or the first after reset(); do not start() it (or "
                               "give it a source: decorate_paddle_reader, "
                               "decorate_tensor_provider)")
        super().start()

    def reset(self) -> None:
        super().reset()
        if self._push is not None:
            # Fluid's reset reopens the queue: pushes go to the next pass
            self._push._reopen()

    def _next_feed(self) -> dict:
        if self._fed_by_pushes() and self._running is None:
            # started by the run, so no thread waits on an unused queue
            self._running = _ReadAhead(self._feeds_of(self._push._batches)(), self._ahead)
        return super()._next_feed()

    def _add_double_buffer(self, name: str | None) -> None:
        """Fluid's double-buffer reader over this one: a new reader variable, one batch more
        read ahead."""
        self._var = self._var.block.create_var(
            name=unique_name.generate("double_buffer") if name is None else name,
            type=VarType.RAW, dtype="float32", stop_gradient=True)
        self._ahead += DOUBLE_BUFFER

    def _append_read(self, program: Program) -> list[Variable]:
        """Append the ``read`` op that fills the data variables to ``program`` (once)."""
        if program is not self._program:
            raise ValueError("read_file: the default main program is not the program the "
                             "reader was created in; call read_file under the reader's "
                             "program_guard")
        if self._read:
            raise NotImplementedError("read_file(reader) a second time on the same reader is "
                                      "not implemented in dask_fluid: use the variables the "
                                      "first call returned")
        self._read = True
        outs = list(self._feed_list)
        program.global_block().append_op(type="read", inputs={"Reader": [self._var]},
                                         outputs={"Out": outs},
                                         attrs={"throw_eof_exp": True, "infer_out": True,
                                                "drop_last": True})
        return outs


def _check_capacity(capacity: Any) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise ValueError(f"capacity must be a positive int (batches), got {capacity!r}")
    return capacity


def _new_reader(capacity: int, specs: list[tuple[list[int], str, int, bool]],
                name: str | None, use_double_buffer: bool) -> Reader:
    """The data variables, the reader variable and the Reader (Fluid's ``_py_reader``)."""
    program = default_main_program()
    block = program.global_block()
    reader_name = unique_name.generate("create_py_reader") if name is None else f"{name}_reader"
    # Fluid's read_file makes its outputs with LayerHelper('read_file'): read_file_N.tmp_M
    helper = LayerHelper("read_file")
    data_vars = [
        block.create_var(name=unique_name.generate(f"{helper.name}.tmp"), shape=shape,
                         dtype=dtype, lod_level=lod_level, stop_gradient=True, is_data=True,
                         need_check_feed=check)
        for shape, dtype, lod_level, check in specs]
    reader_var = block.create_var(name=reader_name, type=VarType.RAW, dtype="float32",
                                  stop_gradient=True)
    reader = Reader(data_vars, capacity, reader_var)
    if use_double_buffer:
        double_buffer(reader, name=None if name is None else f"{name}_double_buffer")
    return reader


def py_reader(capacity: int, shapes: Sequence[Sequence[int]], dtypes: Sequence[Any],
              lod_levels: Sequence[int] | None = None, name: str | None = None,
              use_double_buffer: bool = True) -> Reader:
    """A reader fed from Python, following Fluid 1.8's ``layers.py_reader``.

    Parameters
    ----------
    capacity : int
        Batches read ahead of the runs.
    shapes : list of list of int
        Each data variable's whole shape (the batch dimension included, usually -1).
    dtypes : list
        Each data variable's dtype.
    lod_levels : list of int, optional
        Each data variable's LoD level (default 0).
    name : str, optional
        Names the reader ``<name>_reader`` (``<name>_double_buffer`` with the double buffer).
    use_double_buffer : bool
        Read one more batch ahead (:func:`double_buffer`).

    Returns
    -------
    Reader
        Give it a source (``decorate_paddle_reader`` / ``decorate_tensor_provider``), take its
        data variables with :func:`read_file`, then ``start()`` it before each pass and
        ``reset()`` it after ``EOFException``.

    Raises
    ------
    ValueError
        ``capacity`` is not positive, ``shapes`` is empty, or ``dtypes`` / ``lod_levels`` do
        not have one entry per shape.
    """
    capacity = _check_capacity(capacity)
    if isinstance(shapes, (str, bytes)) or not isinstance(shapes, Sequence) or not shapes:
        raise ValueError(f"py_reader: shapes must be a non-empty list of shapes, got {shapes!r}")
    shapes = [[int(d) for d in shape] for shape in shapes]
    if isinstance(dtypes, (str, bytes)) or len(dtypes) != len(shapes):
        raise ValueError(f"py_reader: dtypes must have one dtype per shape ({len(shapes)}), "
                         f"got {dtypes!r}")
    lod_levels = [0] * len(shapes) if lod_levels is None else [int(x) for x in lod_levels]
    if len(lod_levels) != len(shapes):
        raise ValueError(f"py_reader: lod_levels must have one level per shape "
                         f"({len(shapes)}), got {lod_levels!r}")
    if any(level < 0 for level in lod_levels):
        raise ValueError(f"py_reader: lod_levels must be >= 0, got {lod_levels!r}")
    # Fluid's py_reader sets need_check_feed 0 for each slot: batches are not shape-checked
    specs = [(shape, convert_dtype(dt), level, False)
             for shape, dt, level in zip(shapes, dtypes, lod_levels, strict=True)]
    return _new_reader(capacity, specs, name, use_double_buffer)


def create_py_reader_by_data(capacity: int, feed_list: Sequence[Variable],
                             name: str | None = None, use_double_buffer: bool = True) -> Reader:
    """A :func:`py_reader` whose data variables copy the shapes, dtypes and LoD levels of
    ``feed_list``, following Fluid 1.8's ``layers.create_py_reader_by_data``.

    Raises
    ------
    TypeError
        ``feed_list`` is not a list of Variables (Fluid: "feed_list should be a list of
        Variable").
    """
    capacity = _check_capacity(capacity)
    if not isinstance(feed_list, list) or not feed_list or not all(
            isinstance(v, Variable) for v in feed_list):
        raise TypeError(f"create_py_reader_by_data: feed_list should be a non-empty list of "
                        f"Variable, got {feed_list!r}")
    specs = [(list(v.shape), v.dtype, v.lod_level, v.need_check_feed) for v in feed_list]
    return _new_reader(capacity, specs, name, use_double_buffer)


def double_buffer(reader: Reader, place: Any = None, name: str | None = None) -> Reader:
    """Read one more batch ahead, following Fluid 1.8's ``layers.double_buffer``: the next
    batch is converted while the program runs. Takes effect at the next ``start()``.

    Parameters
    ----------
    reader : Reader
        From :func:`py_reader` or :func:`create_py_reader_by_data`.
    place : CPUPlace, optional
        Where Fluid puts the buffered batch. Batches go to the executor's place when it runs
        them, so only None and CPUPlace are taken.
    name : str, optional
        The new reader variable's name (default ``double_buffer_N``).

    Returns
    -------
    Reader
        ``reader`` itself, whose variable is now the double-buffer reader.
    """
    if not isinstance(reader, Reader):
        raise TypeError("double_buffer: reader must be what layers.py_reader or "
                        f"create_py_reader_by_data returns, got {type(reader).__name__}")
    if place is not None and not isinstance(place, CPUPlace):
        raise NotImplementedError(f"double_buffer(place={place!r}) is not implemented in "
                                  "dask_fluid: batches go to the executor's place when it runs")
    reader._add_double_buffer(name)
    return reader


def read_file(reader: Reader) -> Variable | list[Variable]:
    """The data variables ``reader`` fills on each run, following Fluid 1.8's
    ``layers.read_file``: appends the ``read`` op.

    Returns
    -------
    Variable or list of Variable
        One variable when the reader has one slot, else the list.

    Raises
    ------
    TypeError
        ``reader`` is not a reader of :func:`py_reader`.
    ValueError
        The default main program is not the reader's program.
    NotImplementedError
        ``read_file`` of the same reader a second time (in Fluid each ``read`` op takes a
        batch of its own).
    """
    if not isinstance(reader, Reader):
        raise TypeError("read_file: reader must be what layers.py_reader or "
                        f"create_py_reader_by_data returns, got {type(reader).__name__}")
    outs = reader._append_read(default_main_program())
    return outs[0] if len(outs) == 1 else outs


def load(out: Variable, file_path: str, load_as_fp16: bool | None = None) -> None:
    """Load ``out`` from ``file_path`` when the program runs, following Fluid 1.8's
    ``layers.load``: appends the ``load`` op (attrs ``file_path``, ``load_as_fp16``).

    The file is one LoDTensor in Fluid's format (Fluid's ``save`` op, ``fluid.io.save_vars``
    without ``filename``); ``load_as_fp16=True`` converts the value to float16.

    Raises
    ------
    TypeError
        ``out`` is not a Variable, ``file_path`` not a str, ``load_as_fp16`` not a bool.
    NotImplementedError
        ``out`` is a SelectedRows variable.
    """
    if not isinstance(out, Variable):
        raise TypeError(f"load: out must be a Variable, got {type(out).__name__}")
    if not isinstance(file_path, str):
        raise TypeError(f"load: file_path must be a str, got {type(file_path).__name__}")
    if load_as_fp16 is not None and not isinstance(load_as_fp16, bool):
        raise TypeError(f"load: load_as_fp16 must be a bool or None, got {load_as_fp16!r}")
    if out.type == VarType.SELECTED_ROWS:
        raise NotImplementedError("load(out=<SelectedRows variable>) is not implemented in "
                                  "dask_fluid: only LoDTensor files are read")
    helper = LayerHelper("load")
    helper.append_op(type="load", inputs={}, outputs={"Out": [out]},
                     attrs={"file_path": file_path, "load_as_fp16": bool(load_as_fp16)})
