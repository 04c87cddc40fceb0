"""Paddle 1.8's ``paddle.reader`` (also ``fluid.io``'s reader decorators, and ``paddle.batch``):
decorators that build new sample readers from old ones.

A *reader* is a callable taking no argument that returns an iterable of samples (usually a
generator function). Every decorator here takes readers and returns a new reader; nothing is read
until the returned reader is called, except by :func:`cache`, which reads eagerly as Paddle does.

The semantics follow ``python/paddle/reader/decorator.py`` of Paddle 1.8. Where Paddle's
implementation would hang or lose an error, these do better without changing what a correct
program sees:

- :func:`buffered` and :func:`xmap_readers` run real threads; an exception raised by the wrapped
  reader or by the mapper is re-raised in the consumer (Paddle's threads died silently and the
  consumer waited forever), and the threads stop when the consumer stops early.
- :func:`xmap_readers` with ``order=True`` waits on a condition instead of spinning.
- :func:`compose` marks a finished reader with a private sentinel, so a reader that yields
  ``None`` is not mistaken for an exhausted one.
- :func:`multiprocess_reader` forks real processes (one per reader) and joins them; where
  ``fork`` does not exist it raises :class:`NotImplementedError`. A child reports a failure with
  a marker of its own, so a sample ``""`` is a sample (Paddle took it for a failure).
"""

from __future__ import annotations

import codecs
import itertools
import json
import logging
import multiprocessing
import queue
import random
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

__all__ = [
    "ComposeNotAligned",
    "batch",
    "chunked",
    "Fake",
    "PipeReader",
    "Reader",
    "buffered",
    "cache",
    "chain",
    "compose",
    "firstn",
    "map_readers",
    "multiprocess_reader",
    "shuffle",
    "xmap_readers",
]

logger = logging.getLogger(__name__)

Reader = Callable[[], Iterable[Any]]

# Paddle's multiprocess_reader gives up on an empty multiprocessing.Queue after this many seconds
# (paddle.fluid.reader.QUEUE_GET_TIMEOUT).
QUEUE_GET_TIMEOUT = 60

# How often a blocked helper thread wakes up to see whether its consumer went away.
_POLL_S = 0.05


def cache(reader: Reader) -> Reader:
    """Read ``reader`` once, now, and replay its samples from memory.

    Parameters
    ----------
    reader : callable
        The reader to cache. It is called exactly once, by this function.

    Returns
    -------
    callable
        A reader yielding the cached samples, as many times as it is called.
    """
    all_data = tuple(reader())

    def cached_reader() -> Iterator[Any]:
        yield from all_data

    return cached_reader


def map_readers(func: Callable[..., Any], *readers: Reader) -> Reader:
    """Yield ``func(a, b, ...)`` for the i-th samples ``a, b, ...`` of each reader.

    Stops with the shortest reader, like :func:`map`.

    Parameters
    ----------
    func : callable
        Takes one sample from each reader and returns the new sample.
    *readers : callable
        The readers whose samples are the arguments of ``func``.

    Returns
    -------
    callable
        The mapped reader.
    """

    def mapped_reader() -> Iterator[Any]:
        yield from map(func, *[r() for r in readers])

    return mapped_reader


def shuffle(reader: Reader, buf_size: int) -> Reader:
    """Shuffle ``reader``'s samples within consecutive buffers of ``buf_size`` samples.

    Each full buffer, and the last partial one, is shuffled with :func:`random.shuffle` (seed it
    with :func:`random.seed` for a repeatable order) and then emptied.

    Parameters
    ----------
    reader : callable
        The reader whose samples are shuffled.
    buf_size : int
        Number of samples shuffled together.

    Returns
    -------
    callable
        The shuffled reader.
    """

    def shuffled_reader() -> Iterator[Any]:
        buf: list[Any] = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        if buf:
            random.shuffle(buf)
            yield from buf

    return shuffled_reader


def chain(*readers: Reader) -> Reader:
    """Yield every sample of the first reader, then of the second, and so on.

    Parameters
    ----------
    *readers : callable
        The readers to chain.

    Returns
    -------
    callable
        The chained reader.
    """

    def chained_reader() -> Iterator[Any]:
        # Paddle calls every reader before reading any of them; keep that order of side effects.
        yield from itertools.chain(*[r() for r in readers])

    return chained_reader


class ComposeNotAligned(ValueError):
    """The readers given to :func:`compose` did not yield the same number of samples."""


_MISSING = object()


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def compose(*readers: Reader, check_alignment: bool = True) -> Reader:
    """Join the i-th samples of every reader into one flat tuple.

    Tuples are spliced in, anything else becomes one field: samples ``(1, 2)``, ``3`` and
    ``(4, 5)`` compose into ``(1, 2, 3, 4, 5)``.

    Parameters
    ----------
    *readers : callable
        The readers to compose.
    check_alignment : bool, default True
        If True, raise :class:`ComposeNotAligned` when one reader ends before the others. If
        False, stop silently with the shortest reader.

    Returns
    -------
    callable
        The composed reader.

    Raises
    ------
    ComposeNotAligned
        From the composed reader, when ``check_alignment`` is True and the readers have
        different lengths.
    """

    def composed_reader() -> Iterator[tuple]:
        its = [r() for r in readers]
        if not check_alignment:
            for outputs in zip(*its, strict=False):  # the shortest reader ends it
                yield sum(map(_as_tuple, outputs), ())
            return
        for outputs in itertools.zip_longest(*its, fillvalue=_MISSING):
            if any(o is _MISSING for o in outputs):
                raise ComposeNotAligned("outputs of readers are not aligned.")
            yield sum(map(_as_tuple, outputs), ())

    return composed_reader


class _Failure:
    """An exception raised in a helper thread, carried to the consumer through a queue."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()  # the producer of a queue has finished
_STOPPED = object()  # returned by _get/_put when the consumer went away


def _put(q: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put ``item`` on ``q``, waiting while it is full; False if ``stop`` was set meanwhile."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _get(q: queue.Queue, stop: threading.Event) -> Any:
    """Take an item from ``q``, waiting while it is empty; ``_STOPPED`` if ``stop`` was set."""
    while not stop.is_set():
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            continue
    return _STOPPED


def _start_daemon(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _fill_queue(reader: Reader, q: queue.Queue, stop: threading.Event, tag: bool) -> None:
    """Thread body: put every sample of ``reader()`` (as ``(index, sample)`` if ``tag``) on ``q``.

    Ends with ``_END``, or with a ``_Failure`` if the reader raised.
    """
    try:
        for index, sample in enumerate(reader()):
            if not _put(q, (index, sample) if tag else sample, stop):
                return
    except Exception as exc:  # handed to the consumer, which re-raises it
        _put(q, _Failure(exc), stop)
        return
    _put(q, _END, stop)


def buffered(reader: Reader, size: int) -> Reader:
    """Read ``reader`` ahead in a background thread, keeping up to ``size`` samples buffered.

    Parameters
    ----------
    reader : callable
        The reader to read ahead.
    size : int
        Maximum number of samples waiting in the buffer (0 or less: unbounded, as for
        :class:`queue.Queue`).

    Returns
    -------
    callable
        A reader yielding the same samples in the same order.
    """

    def buffered_reader() -> Iterator[Any]:
        q: queue.Queue = queue.Queue(maxsize=size)
        stop = threading.Event()
        _start_daemon(_fill_queue, reader, q, stop, False)
        try:
            while True:
                item = q.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            stop.set()  # the reading thread exits instead of blocking on a full queue

    return buffered_reader


def firstn(reader: Reader, n: int) -> Reader:
    """Yield at most the first ``n`` samples of ``reader``.

    Parameters
    ----------
    reader : callable
        The reader to truncate.
    n : int
        Maximum number of samples. As in Paddle, a negative ``n`` means no limit.

    Returns
    -------
    callable
        The truncated reader.
    """

    def firstn_reader() -> Iterator[Any]:
        if n == 0:
            return
        # Stop right after the n-th sample instead of pulling one more from the source.
        for i, item in enumerate(reader(), start=1):
            yield item
            if i == n:
                return

    return firstn_reader


class _Turn:
    """Which sample index may be emitted next, for ``xmap_readers(order=True)``."""

    def __init__(self) -> None:
        self._next = 0
        self._cond = threading.Condition()

    def wait_for(self, index: int, stop: threading.Event) -> bool:
        with self._cond:
            while self._next != index:
                if stop.is_set():
                    return False
                self._cond.wait(timeout=_POLL_S)
        return True

    def advance(self) -> None:
        with self._cond:
            self._next += 1
            self._cond.notify_all()


def _xmap_handle(
    mapper: Callable[[Any], Any],
    in_queue: queue.Queue,
    out_queue: queue.Queue,
    stop: threading.Event,
    turn: _Turn | None,
) -> None:
    """Thread body of one xmap worker: map samples from ``in_queue`` onto ``out_queue``."""
    while True:
        item = _get(in_queue, stop)
        if item is _STOPPED:
            return
        if item is _END:
            _put(in_queue, _END, stop)  # pass the end on to the next worker
            _put(out_queue, _END, stop)
            return
        if isinstance(item, _Failure):  # the source reader raised
            _put(out_queue, item, stop)
            return
        index, sample = item
        try:
            result: Any = mapper(sample)
        except Exception as exc:  # handed to the consumer, which re-raises it
            result = _Failure(exc)
        # In order mode a failure also waits for its turn, so every earlier result comes first.
        if turn is not None and not turn.wait_for(index, stop):
            return
        _put(out_queue, result, stop)
        if turn is not None:
            turn.advance()
        if isinstance(result, _Failure):
            return


def xmap_readers(
    mapper: Callable[[Any], Any],
    reader: Reader,
    process_num: int,
    buffer_size: int,
    order: bool = False,
) -> Reader:
    """Map ``reader``'s samples through ``mapper`` on ``process_num`` threads.

    One thread reads ``reader`` into an input queue; ``process_num`` threads take samples from it,
    call ``mapper`` and put the results on an output queue, which the returned reader yields.

    Parameters
    ----------
    mapper : callable
        Maps one sample to one new sample. It runs concurrently on several threads.
    reader : callable
        The source reader.
    process_num : int
        Number of mapping threads (at least 1).
    buffer_size : int
        Capacity of the input and of the output queue.
    order : bool, default False
        If True, yield results in the order of the source samples; if False, as they are ready.

    Returns
    -------
    callable
        The mapped reader. An exception raised by ``mapper`` or by ``reader`` is re-raised by it.

    Raises
    ------
    ValueError
        If ``process_num`` is less than 1 (Paddle's reader would wait forever).
    """
    if process_num < 1:
        raise ValueError(
            f"xmap_readers needs process_num >= 1 mapping threads, got process_num={process_num}."
        )

    def xreader() -> Iterator[Any]:
        in_queue: queue.Queue = queue.Queue(buffer_size)
        out_queue: queue.Queue = queue.Queue(buffer_size)
        stop = threading.Event()
        turn = _Turn() if order else None
        _start_daemon(_fill_queue, reader, in_queue, stop, True)
        for _ in range(process_num):
            _start_daemon(_xmap_handle, mapper, in_queue, out_queue, stop, turn)
        try:
            finished = 0
            while finished < process_num:
                item = out_queue.get()
                if item is _END:
                    finished += 1
                elif isinstance(item, _Failure):
                    raise item.exc
                else:
                    yield item
        finally:
            stop.set()

    return xreader


# -- multiprocess_reader ----------------------------------------------------------------------


class _ChildFailed:
    """Sent by a child whose reader raised (or yielded None) instead of its next sample.

    Paddle sends the sample ``""`` for this, so a reader yielding ``""`` looked like a failure;
    a marker of its own type cannot be confused with a sample.
    """

    def __init__(self, index: int) -> None:
        self.index = index


def _read_into_queue(reader: Reader, q: Any, index: int) -> None:
    """Child process body (queue mode): samples, then None; a _ChildFailed if the reader failed."""
    try:
        for sample in reader():
            if sample is None:
                raise ValueError("sample has None")
            q.put(sample)
        q.put(None)
    except BaseException:
        q.put(_ChildFailed(index))
        raise  # multiprocessing prints the child's traceback


def _read_into_pipe(reader: Reader, conn: Any) -> None:
    """Child process body (pipe mode): JSON samples, then JSON null; a _ChildFailed on failure."""
    try:
        for sample in reader():
            if sample is None:
                raise ValueError("sample has None!")
            conn.send(json.dumps(sample))
        conn.send(json.dumps(None))
    except BaseException:
        conn.send(_ChildFailed(0))
        raise
    finally:
        conn.close()


# How long a child that reported a failure gets to print its traceback and exit.
_FAILED_CHILD_GRACE_S = 2.0


def _stop_processes(processes: Sequence[Any], outcome: str, failed: Any = None) -> None:
    """Join the children.

    ``outcome`` is "completed", "abandoned" (the consumer stopped early) or "failed" (a child
    reported an error; ``failed`` is that child, or None if it is not known which one). A failed
    child gets a moment to print its traceback; the others are terminated, as they may be blocked
    on a queue or pipe nobody reads any more.
    """
    deadline = time.monotonic() + _FAILED_CHILD_GRACE_S
    for p in processes:
        if outcome != "completed":
            if outcome == "failed" and failed in (None, p):
                p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.terminate()
        p.join()


def multiprocess_reader(
    readers: Sequence[Reader], use_pipe: bool = True, queue_size: int = 1000
) -> Reader:
    """Run each reader in its own process and merge their samples.

    The processes are forked when the returned reader is called, so readers may be closures;
    each must be independent of the others. With ``use_pipe=True`` every sample travels as JSON
    through a :func:`multiprocessing.Pipe` (tuples arrive as lists, numpy arrays are not
    allowed), and the readers are read round-robin. With ``use_pipe=False`` samples are pickled
    through one :class:`multiprocessing.Queue` of ``queue_size`` and arrive as they are ready.

    Parameters
    ----------
    readers : list or tuple of callable
        The readers, one process each.
    use_pipe : bool, default True
        Merge through pipes (JSON) instead of a queue (pickle).
    queue_size : int, default 1000
        Capacity of the queue when ``use_pipe`` is False.

    Returns
    -------
    callable
        The merged reader. A reader that raises, or yields None, makes it raise ValueError; the
        child's traceback goes to its standard error.

    Raises
    ------
    NotImplementedError
        Where the ``fork`` start method does not exist (Windows): readers are usually closures,
        which cannot be sent to a spawned process.
    TypeError
        If ``readers`` is not a list or tuple.
    ValueError
        If ``readers`` is empty.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        raise NotImplementedError(
            "multiprocess_reader needs the 'fork' start method, which this platform lacks: "
            "readers are closures, which cannot be pickled to a spawned process. "
            "Use xmap_readers (threads) instead."
        )
    if not isinstance(readers, (list, tuple)):
        raise TypeError(f"`readers` must be list or tuple, got {type(readers).__name__}.")
    if len(readers) == 0:
        raise ValueError("`readers` must be list or tuple with at least one reader, got none.")
    ctx = multiprocessing.get_context("fork")

    def queue_reader() -> Iterator[Any]:
        q = ctx.Queue(queue_size)
        processes = [
            ctx.Process(target=_read_into_queue, args=(r, q, i)) for i, r in enumerate(readers)
        ]
        for p in processes:
            p.start()
        outcome, failed = "abandoned", None
        try:
            finished = 0
            while finished < len(readers):
                try:
                    sample = q.get(timeout=QUEUE_GET_TIMEOUT)
                except queue.Empty:
                    logger.error(
                        "multiprocess_reader failed to get data from the multiprocessing.Queue."
                    )
                    raise
                if sample is None:
                    finished += 1
                elif isinstance(sample, _ChildFailed):
                    outcome, failed = "failed", processes[sample.index]
                    raise ValueError(
                        "multiprocess_reader failed to put data into the multiprocessing.Queue."
                    )
                else:
                    yield sample
            outcome = "completed"
        finally:
            _stop_processes(processes, outcome, failed)

    def pipe_reader() -> Iterator[Any]:
        conns = []
        processes = []
        for r in readers:
            parent_conn, child_conn = ctx.Pipe()
            conns.append(parent_conn)
            processes.append(ctx.Process(target=_read_into_pipe, args=(r, child_conn)))
            processes[-1].start()
            # Only the child holds its end now, so recv() fails (EOFError) if the child dies.
            child_conn.close()
        process_of = dict(zip(conns, processes, strict=True))
        outcome, failed = "abandoned", None
        try:
            # Round-robin: one sample from each reader still running, in turn.
            while conns:
                for conn in list(conns):
                    message = conn.recv()
                    if isinstance(message, _ChildFailed):
                        outcome, failed = "failed", process_of[conn]
                        raise ValueError(
                            "multiprocess_reader failed to send data into the "
                            "multiprocessing.Pipe."
                        )
                    sample = json.loads(message)
                    if sample is None:
                        conn.close()
                        conns.remove(conn)
                    else:
                        yield sample
            outcome = "completed"
        finally:
            for conn in conns:
                conn.close()
            _stop_processes(processes, outcome, failed)

    return pipe_reader if use_pipe else queue_reader


# -- PipeReader and Fake ----------------------------------------------------------------------


class PipeReader:
    """Read the standard output of a command, as lines or as chunks of text.

    Parameters
    ----------
    command : str
        The command line, split on single spaces (no shell), e.g. ``"cat data.txt"`` or
        ``"hadoop fs -cat /path/part-0"``.
    bufsize : int, default 8192
        Bytes read from the pipe at a time.
    file_type : {"plain", "gzip"}, default "plain"
        ``"gzip"`` decompresses the stream (gzip or zlib header) before decoding it.

    Raises
    ------
    TypeError
        If ``command`` is not a string or ``file_type`` is not one of the two.
    """

    def __init__(self, command: str, bufsize: int = 8192, file_type: str = "plain") -> None:
        if not isinstance(command, str):
            raise TypeError("left_cmd must be a string")
        if file_type not in ("plain", "gzip"):
            raise TypeError(f"file_type {file_type} is not allowed")
        self.file_type = file_type
        self.bufsize = bufsize
        # offset 32 lets zlib detect and skip the gzip header
        self.dec = zlib.decompressobj(32 + zlib.MAX_WBITS) if file_type == "gzip" else None
        self.process = subprocess.Popen(command.split(" "), bufsize=bufsize, stdout=subprocess.PIPE)

    def get_line(self, cut_lines: bool = True, line_break: str = "\n") -> Iterator[str]:
        """Yield the command's output as text.

        Parameters
        ----------
        cut_lines : bool, default True
            Yield lines (without ``line_break``); if False, yield each decoded chunk as it comes.
        line_break : str, default "\\n"
            What separates lines.

        Yields
        ------
        str
            A line, or a chunk of text. A last line without a trailing ``line_break`` is yielded
            too (Paddle dropped it).
        """
        # An incremental decoder, so a UTF-8 character split across two reads stays whole.
        text = codecs.getincrementaldecoder("utf-8")()
        remained = ""
        try:
            while True:
                buff = self.process.stdout.read(self.bufsize)
                if not buff:
                    break
                if self.dec is not None:
                    buff = self.dec.decompress(buff)
                chunk = text.decode(buff)
                if not cut_lines:
                    if chunk:
                        yield chunk
                    continue
                *lines, remained = (remained + chunk).split(line_break)
                yield from lines
        finally:
            # Also when the consumer stops early: the command then exits on a broken pipe.
            self.process.stdout.close()
            self.process.wait()
        tail = remained + text.decode(b"", final=True)
        if tail:
            if cut_lines:
                yield from tail.split(line_break)
            else:
                yield tail


class Fake:
    """A reader that repeats the first sample of a real one, for speed tests.

    ``Fake()(reader, data_num)`` returns a reader yielding ``reader``'s first sample
    ``data_num`` times; the sample is read once and kept by this object.
    """

    def __init__(self) -> None:
        self.data: Any = None
        self.yield_num = 0

    def __call__(self, reader: Reader, data_num: int) -> Reader:
        def fake_reader() -> Iterator[Any]:
            if self.data is None:
                self.data = next(iter(reader()))
            while self.yield_num < data_num:
                yield self.data
                self.yield_num += 1
            self.yield_num = 0

        return fake_reader


def batch(reader: Reader, batch_size: int, drop_last: bool = False) -> Reader:
    """Group ``reader``'s samples into lists of ``batch_size``.

    Parameters
    ----------
    reader : callable
        The sample reader.
    batch_size : int
        Samples per batch. Converted with :func:`int` first, as Paddle does, so ``"32"`` and
        ``32.0`` are accepted.
    drop_last : bool, default False
        Drop the last batch when it has fewer than ``batch_size`` samples.

    Returns
    -------
    callable
        A reader yielding lists of samples.

    Raises
    ------
    ValueError
        If ``batch_size`` is not positive (or :func:`int` rejects it).

    Examples
    --------
    >>> def reader():
    ...     yield from range(5)
    >>> list(batch(reader, 2)())
    [[0, 1], [2, 3], [4]]
    """
    # Checked here, not in the returned reader, so a bad size fails where the reader is built.
    batch_size = int(batch_size)
    if batch_size <= 0:
        # Paddle 1.8's wording, "integeral" included, for code that matches on it.
        raise ValueError(
            "batch_size should be a positive integeral value, "
            f"but got batch_size={batch_size}"
        )

    def batch_reader() -> Iterator[list[Any]]:
        return chunked(reader(), batch_size, drop_last)

    return batch_reader


def chunked(items: Iterable[Any], size: int, drop_last: bool = False) -> Iterator[list[Any]]:
    """Lists of ``size`` consecutive items of ``items``; the last, shorter one is yielded
    unless ``drop_last`` (what :func:`batch` does to a reader's samples, and the readers of
    :mod:`dask_fluid.py_reader` to samples and to a step's batches per place)."""
    group: list[Any] = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
    if group and not drop_last:
        yield group
