"""PyReader (iterable and not) and the file datasets (QueueDataset, InMemoryDataset) with
Executor.train_from_dataset: the batches a program sees, the end of a pass, the errors."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.py_reader import EOFException


def _net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        y = fluid.layers.data(name="y", shape=[1])
        pooled = fluid.layers.sequence_pool(fluid.layers.embedding(ids, size=[20, 3]), "sum")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(pooled, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, ids, y, loss


def _samples(n=10):
    rng = np.random.default_rng(0)
    return [(list(rng.integers(0, 20, int(rng.integers(1, 5)))), [float(i % 2)])
            for i in range(n)]


def test_non_iterable_reader_feeds_runs_until_eof_and_resets():
    main, startup, ids, y, loss = _net()
    with fluid.program_guard(main, startup):
        reader = fluid.io.PyReader(feed_list=[ids, y], capacity=8, iterable=False)
    samples = _samples()
    reader.decorate_sample_list_generator(lambda: (samples[i:i + 4] for i in range(0, 10, 4)))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(RuntimeError, match="PyReader that is not started"):
        exe.run(main, fetch_list=[loss], scope=scope)
    for _ in range(2):
        reader.start()
        seen = 0
        with pytest.raises(EOFException):
            while True:
                exe.run(main, fetch_list=[loss], scope=scope)
                seen += len(scope.lods["ids"][0]) - 1
        reader.reset()
        assert seen == 10  # batches of 4, 4 and 2 samples, each pass
    from dask_fluid.compat import core
    assert core.EOFException is EOFException


def test_iterable_reader_and_batch_generator_give_the_same_feeds():
    main, startup, ids, y, loss = _net()
    with fluid.program_guard(main, startup):
        it = fluid.io.PyReader(feed_list=[ids, y], capacity=4, iterable=True)
    it.decorate_sample_generator(lambda: iter(_samples()), batch_size=3, drop_last=True)
    feeds = [data[0] for data in it()]
    assert len(feeds) == 3 and all(f["ids"].lod()[0][-1] == len(np.array(f["ids"]))
                                   for f in feeds)
    with pytest.raises(RuntimeError, match="iterable=False"):
        it.start()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    assert np.isfinite(exe.run(main, feed=feeds[0], fetch_list=[loss], scope=scope)[0]).all()
    with pytest.raises(RuntimeError, match="no data source"):
        list(fluid.io.PyReader(feed_list=[ids, y], iterable=True)())


def _generator_script(tmp_path):
    script = tmp_path / "gen.py"
    script.write_text(textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        from dask_fluid.compat.incubate.data_generator import MultiSlotDataGenerator

        class Gen(MultiSlotDataGenerator):
            def generate_sample(self, line):
                def it():
                    ids, label = line.split(";")
                    yield ("ids", [int(v) for v in ids.split()]), ("y", [float(label)])
                return it

        Gen().run_from_stdin()
    """) % str(__import__("pathlib").Path(fluid.__file__).parents[1]))
    data = tmp_path / "part-0"
    data.write_text("".join(f"{' '.join(str(j) for j in range(i % 4 + 1))};{i % 2}\n"
                            for i in range(10)))
    return f"{sys.executable} {script}", str(data)


@pytest.mark.parametrize("kind", ["QueueDataset", "InMemoryDataset"])
def test_train_from_dataset_through_a_data_generator(tmp_path, capsys, kind):
    main, startup, ids, y, loss = _net()
    command, data = _generator_script(tmp_path)
    dataset = fluid.DatasetFactory().create_dataset(kind)
    dataset.set_use_var([ids, y])
    dataset.set_batch_size(4)
    dataset.set_pipe_command(command)
    dataset.set_filelist([data, data])
    dataset.set_thread(2)
    if kind == "InMemoryDataset":
        dataset.load_into_memory()
        assert dataset.get_memory_data_size() == 20
        dataset.local_shuffle()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    before = np.array(scope.vars["fc_0.w_0"]).copy()
    exe.train_from_dataset(main, dataset, scope=scope, fetch_list=[loss], fetch_info=["cost"],
                           print_period=2)
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("cost")]
    assert len(printed) == 3  # batches 0, 2 and 4 of the 5 (20 samples by 4)
    assert not np.allclose(before, np.array(scope.vars["fc_0.w_0"]))


def test_train_from_dataset_debug_reports_each_ops_time(tmp_path, capsys):
    """Fluid's ``debug=True``: the mean read time and each op's mean time per batch, on
    standard error; the training is the same as without it."""
    main, startup, ids, y, loss = _net()
    command, data = _generator_script(tmp_path)
    results = []
    for debug in (False, True):
        dataset = fluid.DatasetFactory().create_dataset("QueueDataset")
        dataset.set_use_var([ids, y])
        dataset.set_batch_size(4)
        dataset.set_pipe_command(command)
        dataset.set_filelist([data])
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        exe.train_from_dataset(main, dataset, scope=scope, thread=3, debug=debug)
        results.append(np.array(scope.vars["fc_0.w_0"]))
        assert exe._op_times is None  # timing is off again after the call
    np.testing.assert_array_equal(results[0], results[1])
    report = capsys.readouterr().err.splitlines()
    ops = main.global_block().ops
    assert report[0] == "batches: 3" and report[1].startswith("read time: ")
    assert len(report) == 2 + len(ops)
    for line, (i, op) in zip(report[2:], enumerate(ops), strict=True):
        assert line.startswith(f"op_name:[{i}][{op.type}] (block 0), op_mean_time:[")


def test_dataset_errors_say_what_is_wrong(tmp_path):
    main, startup, ids, y, loss = _net()
    dataset = fluid.DatasetFactory().create_dataset()
    with pytest.raises(ValueError, match="set_use_var"):
        fluid.Executor().train_from_dataset(main, dataset)
    bad = tmp_path / "bad"
    bad.write_text("2 1\n")
    dataset.set_use_var([ids, y])
    dataset.set_filelist([str(bad)])
    with pytest.raises(ValueError, match="slot 'ids' announces 2 values, has 1"):
        fluid.Executor().train_from_dataset(main, dataset)
    dataset.set_pipe_command("exit 3")
    with pytest.raises(RuntimeError, match="pipe_command 'exit 3' failed .*exit 3"):
        fluid.Executor().train_from_dataset(main, dataset)
    with pytest.raises(NotImplementedError, match="QueueDataset does not support global"):
        dataset.global_shuffle()
    with pytest.raises(ValueError, match="datafeed class Nope does not exist"):
        fluid.DatasetFactory().create_dataset("Nope")


# -- the reader thread: batches made ahead of the runs (Fluid's blocking queue) ----------------

def _until(predicate, timeout_s=10.0):
    import time
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def _reader_threads():
    import threading
    return [t for t in threading.enumerate() if t.name == "dask-fluid-py-reader"]


def _counting_batches(n, made, fail_at=None):
    """A batch generator of ``n`` batches that records each one it makes."""
    def gen():
        for i in range(n):
            if i == fail_at:
                raise OSError(f"disk gone at batch {i}")
            made.append(i)
            yield [np.full((2, 1), i, dtype=np.float32)]
    return gen


def _dense():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[1])
        out = fluid.layers.scale(x, scale=2.0)
    return main, startup, x, out


@pytest.mark.parametrize("capacity, double_buffer", [(3, False), (3, True), (None, False)])
def test_the_reader_thread_makes_capacity_batches_ahead_and_no_more(capacity, double_buffer):
    from dask_fluid.py_reader import DEFAULT_CAPACITY, DOUBLE_BUFFER
    main, startup, x, out = _dense()
    made = []
    reader = fluid.io.PyReader(feed_list=[x], capacity=capacity, iterable=False,
                               use_double_buffer=double_buffer)
    reader.decorate_batch_generator(_counting_batches(50, made))
    ahead = (capacity or DEFAULT_CAPACITY) + (DOUBLE_BUFFER if double_buffer else 0)
    exe = fluid.Executor()
    reader.start()
    try:
        # one batch taken: the thread refills the queue to `ahead` batches, makes one more
        # and waits with it for a free slot
        (got,) = exe.run(main, fetch_list=[out])
        assert got[0, 0] == 0.0
        _until(lambda: len(made) == 2 + ahead)
        import time
        time.sleep(0.2)
        assert len(made) == 2 + ahead
        (got,) = exe.run(main, fetch_list=[out])
        assert got[0, 0] == 2.0  # batch 1, in order
    finally:
        reader.reset()
    _until(lambda: not _reader_threads())


def test_a_source_exception_is_raised_by_the_run_after_the_last_good_batch():
    main, startup, x, out = _dense()
    reader = fluid.io.PyReader(feed_list=[x], capacity=4, iterable=False)
    reader.decorate_batch_generator(_counting_batches(10, [], fail_at=3))
    exe = fluid.Executor()
    reader.start()
    got = [exe.run(main, fetch_list=[out])[0][0, 0] for _ in range(3)]
    assert got == [0.0, 2.0, 4.0]
    with pytest.raises(OSError, match="disk gone at batch 3"):
        exe.run(main, fetch_list=[out])
    with pytest.raises(EOFException):  # the pass is over, nothing hangs
        exe.run(main, fetch_list=[out])
    reader.reset()
    # the iterable form raises it from the loop
    it = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=True)
    it.decorate_batch_generator(_counting_batches(10, [], fail_at=2))
    seen = []
    with pytest.raises(OSError, match="disk gone at batch 2"):
        for data in it():
            seen.append(float(np.array(data[0]["x"])[0, 0]))
    assert seen == [0.0, 1.0]
    _until(lambda: not _reader_threads())


def test_reset_mid_pass_and_leaving_the_loop_early_stop_the_thread_and_start_over():
    main, startup, x, out = _dense()
    made = []
    reader = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=False)
    reader.decorate_batch_generator(_counting_batches(1000, made))
    exe = fluid.Executor()
    for _ in range(2):
        reader.start()
        assert exe.run(main, fetch_list=[out])[0][0, 0] == 0.0  # each pass from the start
        reader.reset()
        _until(lambda: not _reader_threads())
    assert len(made) < 20  # the thread stopped with the pass, it did not read all 1000
    it = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=True)
    it.decorate_batch_generator(_counting_batches(1000, made))
    for i, _ in enumerate(it()):
        if i == 3:
            break
    _until(lambda: not _reader_threads())


def test_read_ahead_gives_the_same_feeds_in_the_same_order_as_the_source():
    main, startup, ids, y, loss = _net()
    samples = _samples(40)
    loaders = []
    for capacity in (1, 16):
        with fluid.program_guard(main, startup):
            it = fluid.io.PyReader(feed_list=[ids, y], capacity=capacity, iterable=True)
        it.decorate_sample_generator(lambda: iter(samples), batch_size=3, drop_last=False)
        loaders.append([(np.array(d[0]["ids"]), d[0]["ids"].lod(), np.array(d[0]["y"]))
                        for d in it()])
    direct = fluid.DataFeeder([ids, y], fluid.CPUPlace(), program=main)
    expected = [direct.feed(samples[i:i + 3]) for i in range(0, 40, 3)]
    for got in loaders:
        assert len(got) == len(expected) == 14
        for (i, lod, yy), want in zip(got, expected, strict=True):
            assert np.array_equal(i, np.array(want["ids"])) and lod == want["ids"].lod()
            assert np.array_equal(yy, np.array(want["y"]))


def test_data_loader_from_generator_is_fluid_1_8s_generator_loader():
    main, startup, x, out = _dense()
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=True,
                                                return_list=True)
    assert loader.set_batch_generator(_counting_batches(3, [])) is loader
    assert [float(np.array(d[0][0])[0, 0]) for d in loader()] == [0.0, 1.0, 2.0]
    exe = fluid.Executor()
    looped = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2, iterable=False)
    looped.set_sample_list_generator(lambda: ([([float(i)],), ([float(i)],)] for i in range(2)))
    looped.start()
    got = [exe.run(main, fetch_list=[out])[0][:, 0].tolist() for _ in range(2)]
    with pytest.raises(EOFException):
        exe.run(main, fetch_list=[out])
    looped.reset()
    assert got == [[0.0, 0.0], [2.0, 2.0]]
    with pytest.warns(UserWarning, match=r"use_multiprocess=True\) has no effect here"):
        multi = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=2,
                                                   use_multiprocess=True)
    multi.set_batch_generator(_counting_batches(2, []))
    assert [float(np.array(d[0]["x"])[0, 0]) for d in multi()] == [0.0, 1.0]


def test_a_loader_iterates_itself_and_says_whether_it_is_iterable():
    # Fluid 1.8: DataLoaderBase.__call__ returns the loader, so ``for d in loader:`` is a pass
    # as ``for d in loader():`` is; ``iterable`` is a property of PyReader and the loaders
    main, startup, x, out = _dense()
    loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, iterable=True,
                                                return_list=True)
    loader.set_batch_generator(_counting_batches(3, []))
    assert loader.iterable
    assert [float(np.array(d[0][0])[0, 0]) for d in loader] == [0.0, 1.0, 2.0]
    # each loop a new pass
    assert [float(np.array(d[0][0])[0, 0]) for d in loader] == [0.0, 1.0, 2.0]
    # a loop left early: _reset (Fluid's, which its loops call) ends that pass, and a pass
    # started without it ends the one before
    pending = iter(loader())
    next(pending)
    loader._reset()
    assert loader._pass is None and next(pending, "ended") == "ended"
    first = iter(loader())
    next(first)
    assert [float(np.array(d[0][0])[0, 0]) for d in loader] == [0.0, 1.0, 2.0]
    assert next(first, "ended") == "ended"
    reader = fluid.io.PyReader(feed_list=[x], capacity=2, iterable=False)
    assert not reader.iterable
    assert not hasattr(reader, "queue")  # Fluid's C++ queue: named in the error
    with pytest.raises(AttributeError, match=r"PyReader.queue .* is not implemented"):
        reader.queue  # noqa: B018


def test_an_iterable_reader_over_several_places_gives_each_place_its_batch():
    # Fluid 1.8's read_next over N places: N consecutive batches at a time, one per place;
    # drop_last drops (True) or yields on fewer places (False) the last batches
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", shape=[1])
    for drop_last, want in ((True, [[0.0, 1.0], [2.0, 3.0]]),
                            (False, [[0.0, 1.0], [2.0, 3.0], [4.0]])):
        loader = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4,
                                                    drop_last=drop_last)
        loader.set_batch_generator(_counting_batches(5, []), places=fluid.cpu_places(2))
        got = [[float(np.array(d["x"])[0, 0]) for d in item] for item in loader()]
        assert got == want
    listed = fluid.io.DataLoader.from_generator(feed_list=[x], capacity=4, return_list=True)
    listed.set_batch_generator(_counting_batches(4, []), places=fluid.cpu_places(2))
    assert [[float(np.array(t[0])[0, 0]) for t in item] for item in listed] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match="at least one place"):
        listed.set_batch_generator(_counting_batches(1, []), places=[])


def test_a_data_parallel_program_trains_from_a_reader_over_its_places():
    # the usual Fluid 1.8 script: places = fluid.cpu_places(2); loader.set_..._generator(reader,
    # places); for data in loader(): exe.run(compiled, feed=data). Each place gets its own
    # batch, so two places fed batches a and b take the step of one place fed a + b
    def run(per_place):
        with fluid.unique_name.guard():
            main, startup, ids, y, loss = _net()
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        start = np.array(scope.vars["fc_0.w_0"])
        samples = _samples(12)
        if per_place:
            loader = fluid.io.DataLoader.from_generator(feed_list=[ids, y], capacity=4)
            loader.set_sample_list_generator(
                lambda: (samples[i:i + 3] for i in range(0, 12, 3)), fluid.cpu_places(2))
            prog = fluid.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, places=fluid.cpu_places(2))
            feeds = list(loader())
            assert [len(f) for f in feeds] == [2, 2]  # 4 batches of 3 samples, 2 per step
        else:
            feeder = fluid.DataFeeder([ids, y], fluid.CPUPlace())
            prog, feeds = main, [feeder.feed(samples[i:i + 6]) for i in range(0, 12, 6)]
        for feed in feeds:
            exe.run(prog, feed=feed, scope=scope)
        trained = np.array(scope.vars["fc_0.w_0"])
        assert not np.allclose(trained, start)
        return trained

    np.testing.assert_allclose(run(True), run(False), rtol=1e-5, atol=1e-6)


