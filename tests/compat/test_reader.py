"""paddle.batch and the paddle.reader decorators, against Paddle 1.8's documented behaviour."""

from __future__ import annotations

import gzip
import os
import random
import threading
import time

import pytest

from dask_fluid import sample_readers as R
from dask_fluid.compat.batch import batch


def counter(n, start=0):
    def reader():
        yield from range(start, start + n)

    return reader


def failing(n, exc):
    def reader():
        yield from range(n)
        raise exc

    return reader


# -- batch ------------------------------------------------------------------------------------


def test_batch_groups_and_keeps_the_short_last_batch():
    assert list(batch(counter(10), 4)()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_batch_drop_last():
    assert list(batch(counter(10), 4, drop_last=True)()) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(batch(counter(8), 4, drop_last=True)()) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_batch_size_goes_through_int_like_paddle():
    assert list(batch(counter(3), "2")()) == [[0, 1], [2]]
    assert list(batch(counter(3), 2.7)()) == [[0, 1], [2]]


@pytest.mark.parametrize("size", [0, -3, 0.5])
def test_batch_rejects_non_positive_sizes(size):
    msg = f"batch_size should be a positive integeral value, but got batch_size={int(size)}"
    with pytest.raises(ValueError, match=msg):
        batch(counter(3), size)


def test_batch_each_call_rereads():
    b = batch(counter(3), 2)
    assert list(b()) == list(b()) == [[0, 1], [2]]


# -- simple decorators ------------------------------------------------------------------------


def test_cache_reads_once_eagerly():
    calls = []

    def reader():
        calls.append(1)
        yield from range(3)

    cached = R.cache(reader)
    assert calls == [1]  # read at decoration time, as Paddle does
    assert list(cached()) == list(cached()) == [0, 1, 2]
    assert calls == [1]


def test_map_readers_zips_and_stops_with_shortest():
    mapped = R.map_readers(lambda x, y: x * y, counter(5, 1), counter(3, 10))
    assert list(mapped()) == [10, 22, 36]


def test_shuffle_permutes_within_each_buffer():
    random.seed(3)
    out = list(R.shuffle(counter(10), 4)())
    assert sorted(out[:4]) == [0, 1, 2, 3]
    assert sorted(out[4:8]) == [4, 5, 6, 7]
    assert sorted(out[8:]) == [8, 9]
    # random.shuffle drives it, so a seed repeats the order
    random.seed(3)
    assert list(R.shuffle(counter(10), 4)()) == out
    assert sorted(R.shuffle(counter(100), 100)()) == list(range(100))


def test_chain():
    def three(start):
        def reader():
            for i in range(start, start + 3):
                yield [i, i, i]

        return reader

    out = list(R.chain(three(0), three(10), three(20))())
    assert out == [[i, i, i] for i in (0, 1, 2, 10, 11, 12, 20, 21, 22)]


def test_compose_flattens_tuples():
    def pairs():
        yield from [(1, 2), (6, 7)]

    def singles():
        yield from [3, 8]

    def more_pairs():
        yield from [(4, 5), (9, 10)]

    out = list(R.compose(pairs, singles, more_pairs)())
    assert out == [(1, 2, 3, 4, 5), (6, 7, 8, 9, 10)]


def test_compose_not_aligned():
    composed = R.compose(counter(3), counter(2))
    with pytest.raises(R.ComposeNotAligned, match="outputs of readers are not aligned."):
        list(composed())
    assert issubclass(R.ComposeNotAligned, ValueError)
    # check_alignment=False drops the trailing outputs silently
    assert list(R.compose(counter(3), counter(2), check_alignment=False)()) == [(0, 0), (1, 1)]


def test_compose_keeps_none_samples():
    # A None sample is a sample, not the end of a reader (Paddle confused the two).
    def nones():
        yield from [None, None]

    assert list(R.compose(nones, counter(2))()) == [(None, 0), (None, 1)]


def test_firstn():
    assert list(R.firstn(counter(100), 5)()) == [0, 1, 2, 3, 4]
    assert list(R.firstn(counter(3), 5)()) == [0, 1, 2]
    assert list(R.firstn(counter(3), 0)()) == []
    assert list(R.firstn(counter(3), -1)()) == [0, 1, 2]  # Paddle: negative means no limit


def test_firstn_pulls_no_extra_sample():
    pulled = []

    def reader():
        for i in range(10):
            pulled.append(i)
            yield i

    list(R.firstn(reader, 3)())
    assert pulled == [0, 1, 2]


def test_fake_repeats_the_first_sample():
    fake = R.Fake()(counter(10, 7), 4)
    assert list(fake()) == [7, 7, 7, 7]
    assert list(fake()) == [7, 7, 7, 7]


# -- threaded decorators ----------------------------------------------------------------------


def test_buffered_preserves_order_and_reads_ahead():
    produced = []

    def reader():
        for i in range(50):
            produced.append(i)
            yield i

    it = iter(R.buffered(reader, 10)())
    assert next(it) == 0
    deadline = time.monotonic() + 5
    while len(produced) < 11 and time.monotonic() < deadline:
        time.sleep(0.01)
    # The thread filled the buffer (10) while we held the first sample, and no more.
    assert 11 <= len(produced) <= 12
    assert [0, *it] == list(range(50))


def test_buffered_reraises_the_reader_error():
    with pytest.raises(KeyError, match="boom"):
        list(R.buffered(failing(5, KeyError("boom")), 2)())


def test_buffered_thread_stops_when_consumer_stops():
    before = threading.active_count()
    it = iter(R.buffered(counter(10_000), 2)())
    next(it)
    it.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= before


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_maps_every_sample(order):
    def slow_square(x):
        time.sleep(0.001 * (x % 3))  # finish out of order
        return x * x

    out = list(R.xmap_readers(slow_square, counter(60), 4, 8, order=order)())
    if order:
        assert out == [x * x for x in range(60)]
    else:
        assert sorted(out) == [x * x for x in range(60)]


def test_xmap_readers_runs_on_several_threads():
    seen = set()
    barrier = threading.Barrier(3, timeout=5)

    def mapper(x):
        seen.add(threading.get_ident())
        if x < 3:
            barrier.wait()  # only passes if three mappers run at the same time
        return x

    out = list(R.xmap_readers(mapper, counter(9), 3, 4, order=True)())
    assert out == list(range(9))
    assert len(seen) == 3
    assert threading.get_ident() not in seen


@pytest.mark.parametrize("order", [True, False])
def test_xmap_readers_reraises_mapper_error(order):
    def mapper(x):
        if x == 7:
            raise ZeroDivisionError("bad sample 7")
        return x

    got = []
    with pytest.raises(ZeroDivisionError, match="bad sample 7"):
        for x in R.xmap_readers(mapper, counter(20), 2, 4, order=order)():
            got.append(x)
    if order:
        # every sample before the failing one still comes out, in order
        assert got == list(range(7))
    else:
        assert 7 not in got


def test_xmap_readers_reraises_reader_error():
    with pytest.raises(KeyError, match="source"):
        list(R.xmap_readers(lambda x: x, failing(5, KeyError("source")), 2, 2)())


def test_xmap_readers_needs_a_thread():
    with pytest.raises(ValueError, match="process_num >= 1"):
        R.xmap_readers(lambda x: x, counter(3), 0, 2)


# -- multiprocess_reader ----------------------------------------------------------------------


def pid_reader(tag, n):
    def reader():
        for i in range(n):
            yield [tag, i, os.getpid()]

    return reader


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_merges_real_processes(use_pipe):
    merged = R.multiprocess_reader([pid_reader("a", 5), pid_reader("b", 3)], use_pipe=use_pipe)
    out = list(merged())
    assert sorted((tag, i) for tag, i, _ in out) == [("a", i) for i in range(5)] + [
        ("b", i) for i in range(3)
    ]
    pids = {tag: {pid for t, _, pid in out if t == tag} for tag in "ab"}
    assert len(pids["a"]) == len(pids["b"]) == 1
    assert pids["a"] != pids["b"]
    assert os.getpid() not in pids["a"] | pids["b"]
    if use_pipe:
        # Pipes are read round-robin, one sample of each running reader in turn.
        assert [(t, i) for t, i, _ in out[:4]] == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_empty_string_is_a_sample(use_pipe):
    def strings():
        yield from ["", "x"]

    assert list(R.multiprocess_reader([strings], use_pipe=use_pipe)()) == ["", "x"]


def test_multiprocess_reader_pipe_sends_json():
    def tuples():
        yield (1, 2)

    assert list(R.multiprocess_reader([tuples])()) == [[1, 2]]  # tuples arrive as lists


@pytest.mark.parametrize(
    "use_pipe, msg",
    [
        (True, "multiprocess_reader failed to send data into the multiprocessing.Pipe."),
        (False, "multiprocess_reader failed to put data into the multiprocessing.Queue."),
    ],
)
def test_multiprocess_reader_child_error(use_pipe, msg):
    merged = R.multiprocess_reader(
        [failing(2, RuntimeError("child broke")), pid_reader("ok", 1000)], use_pipe=use_pipe
    )
    with pytest.raises(ValueError, match=msg):
        list(merged())


@pytest.mark.parametrize("use_pipe", [True, False])
def test_multiprocess_reader_rejects_none_samples(use_pipe):
    def nones():
        yield None

    with pytest.raises(ValueError, match="multiprocess_reader failed"):
        list(R.multiprocess_reader([nones], use_pipe=use_pipe)())


def test_multiprocess_reader_consumer_stops_early():
    # The children block on a full queue; stopping the consumer must not hang.
    it = iter(R.multiprocess_reader([pid_reader("a", 10_000)], use_pipe=False, queue_size=2)())
    assert next(it)[:2] == ["a", 0]
    start = time.monotonic()
    it.close()
    assert time.monotonic() - start < 5


def test_multiprocess_reader_arguments():
    with pytest.raises(TypeError, match="`readers` must be list or tuple"):
        R.multiprocess_reader(counter(3))
    with pytest.raises(ValueError, match="at least one reader"):
        R.multiprocess_reader([])


def test_multiprocess_reader_without_fork(monkeypatch):
    monkeypatch.setattr(R.multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with pytest.raises(NotImplementedError, match="multiprocess_reader needs the 'fork'"):
        R.multiprocess_reader([counter(3)])


# -- PipeReader -------------------------------------------------------------------------------


def test_pipe_reader_plain_and_gzip(tmp_path):
    text = "first line\nsecond é line\nlast without newline"
    plain = tmp_path / "a.txt"
    plain.write_text(text, encoding="utf-8")
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(text.encode()))
    expected = text.split("\n")
    assert list(R.PipeReader(f"cat {plain}", bufsize=5).get_line()) == expected
    assert list(R.PipeReader(f"cat {packed}", file_type="gzip").get_line()) == expected
    chunks = R.PipeReader(f"cat {plain}", bufsize=4).get_line(cut_lines=False)
    assert "".join(chunks) == text


def test_pipe_reader_arguments():
    with pytest.raises(TypeError, match="left_cmd must be a string"):
        R.PipeReader(["cat", "x"])
    with pytest.raises(TypeError, match="file_type bz2 is not allowed"):
        R.PipeReader("cat /dev/null", file_type="bz2")
