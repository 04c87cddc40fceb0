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
