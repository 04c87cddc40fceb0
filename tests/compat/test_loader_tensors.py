"""What DataFeeder.feed and the iterable readers give, as Fluid 1.8: LoDTensors, per place.

Fluid 1.8's ``DataFeeder.feed`` makes a ``core.LoDTensor`` of every field (its LoD for a field
with ``lod_level >= 1``), and its ``GeneratorLoader`` / ``PyReader`` yield, for each batch, a
list with one entry per place: ``{name: LoDTensor}``, or with ``return_list=True`` a list of
LoDTensors in the order of ``feed_list``. Feeding them to ``Executor.run`` (and to a
CompiledProgram over several places) gives what feeding the arrays gives.
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.compiler import CompiledProgram

SAMPLES = 8


def _samples():
    rng = np.random.default_rng(0)
    return [(rng.random(3).astype("float32"), np.array([i % 2], dtype="int64"))
            for i in range(SAMPLES)]


def _net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="int64")
        pred = fluid.layers.fc(x, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, y))
    return main, startup, x, y, loss


def _loss_of_arrays(main, startup, loss, batch):
    """The loss of ``batch`` fed as plain arrays: what every tensor feed must give."""
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    feed = {"x": np.stack([s[0] for s in batch]), "y": np.stack([s[1] for s in batch])}
    return scope, exe, float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])


def _loaders(x, y, return_list):
    samples = _samples()
    by_samples = fluid.io.DataLoader.from_generator(
        feed_list=[x, y], capacity=2, return_list=return_list).set_sample_generator(
        lambda: iter(samples), batch_size=4, places=fluid.CPUPlace())
    by_lists = fluid.io.DataLoader.from_generator(
        feed_list=[x, y], capacity=2, return_list=return_list).set_sample_list_generator(
        lambda: iter([samples[:4], samples[4:]]), places=fluid.cpu_places(1))
    by_batches = fluid.io.DataLoader.from_generator(
        feed_list=[x, y], capacity=2, return_list=return_list).set_batch_generator(
        lambda: ((np.stack([s[0] for s in part]), np.stack([s[1] for s in part]))
                 for part in (samples[:4], samples[4:])), places=fluid.CPUPlace())
    reader = fluid.io.PyReader(feed_list=[x, y], capacity=2, iterable=True,
                               return_list=return_list)
    reader.decorate_sample_generator(lambda: iter(samples), batch_size=4)
    return {"set_sample_generator": by_samples, "set_sample_list_generator": by_lists,
            "set_batch_generator": by_batches, "PyReader": reader}


def _two_batches(source, return_list):
    """The net, its loss on the first 4 samples fed as arrays, and ``source``'s 2 batches."""
    main, startup, x, y, loss = _net()
    samples = _samples()
    scope, exe, want = _loss_of_arrays(main, startup, loss, samples[:4])
    batches = list(_loaders(x, y, return_list=return_list)[source]())
    assert len(batches) == 2
    return main, loss, samples, scope, exe, want, batches


@pytest.mark.parametrize("source", ["set_sample_generator", "set_sample_list_generator",
                                    "set_batch_generator", "PyReader"])
def test_iterable_loaders_yield_one_dict_of_lodtensors_per_place(source):
    main, loss, samples, scope, exe, want, batches = _two_batches(source, False)
    for data, part in zip(batches, (samples[:4], samples[4:]), strict=True):
        assert isinstance(data, list) and len(data) == 1 and list(data[0]) == ["x", "y"]
        tx, ty = data[0]["x"], data[0]["y"]
        assert isinstance(tx, fluid.LoDTensor) and isinstance(ty, fluid.LoDTensor)
        assert tx.shape() == [4, 3] and ty.shape() == [4, 1]
        assert tx.lod() == [] and ty.recursive_sequence_lengths() == []
        np.testing.assert_array_equal(np.array(tx), np.stack([s[0] for s in part]))
        assert np.array(ty).dtype == np.int64
        np.testing.assert_array_equal(np.array(ty), np.stack([s[1] for s in part]))
    # the list of one dict feeds the program as the arrays do
    got = float(exe.run(main, feed=batches[0], fetch_list=[loss], scope=scope)[0][0])
    assert got == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("source", ["set_sample_generator", "set_sample_list_generator",
                                    "set_batch_generator", "PyReader"])
def test_return_list_yields_one_list_of_lodtensors_per_place(source):
    main, loss, samples, scope, exe, want, batches = _two_batches(source, True)
    first = batches[0]
    assert isinstance(first, list) and len(first) == 1 and isinstance(first[0], list)
    tx, ty = first[0]
    assert isinstance(tx, fluid.LoDTensor) and isinstance(ty, fluid.LoDTensor)
    assert tx.shape() == [4, 3] and ty.shape() == [4, 1]
    np.testing.assert_array_equal(np.array(ty)[:, 0], [s[1][0] for s in samples[:4]])
    got = float(exe.run(main, feed={"x": tx, "y": ty}, fetch_list=[loss], scope=scope)[0][0])
    assert got == pytest.approx(want, rel=1e-6)


def test_batch_generator_tensors_wrap_arrays_and_keep_lodtensors():
    _, _, x, y, _ = _net()
    xs = np.ones((2, 3), dtype="float32")
    given = fluid.create_lod_tensor(np.zeros((2, 1), dtype="int64"), [[1, 1]],
                                    fluid.CPUPlace())
    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=2)
    loader.set_batch_generator(lambda: iter([(xs, given), ([[1, 2, 3]], [[4]])]),
                               places=fluid.CPUPlace())
    first, second = [data[0] for data in loader()]
    assert np.shares_memory(np.asarray(first["x"]), xs)  # an array is not copied
    assert first["y"] is given and first["y"].lod() == [[0, 1, 2]]
    # nested lists get the variable's dtype, as the executor gives a list feed
    assert np.array(second["x"]).dtype == np.float32 and second["x"].shape() == [1, 3]
    assert np.array(second["y"]).dtype == np.int64
    ragged = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=2)
    ragged.set_batch_generator(lambda: iter([([[1.0, 2.0, 3.0], [1.0]], [[0], [1]])]))
    with pytest.raises(TypeError, match="'x' of a batch is not a regular float32 array"):
        list(ragged())


def _lod_net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[10, 4])
        pooled = fluid.layers.sequence_pool(emb, "sum")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(
            fluid.layers.fc(pooled, 2, act="softmax"), label))
    return main, startup, words, label, emb, loss


LOD_BATCH = [([1, 2, 3], 0), ([4], 1), ([5, 6], 0), ([7, 8, 9, 1], 1)]


@pytest.mark.parametrize("return_list", [False, True])
def test_lod_fields_keep_their_lod_through_the_loader_and_the_run(return_list):
    main, startup, words, label, emb, loss = _lod_net()
    loader = fluid.io.DataLoader.from_generator(feed_list=[words, label], capacity=2,
                                                return_list=return_list)
    loader.set_sample_generator(lambda: iter(LOD_BATCH), batch_size=4, places=fluid.CPUPlace())
    (data,) = list(loader())
    tw = data[0][0] if return_list else data[0]["words"]
    assert isinstance(tw, fluid.LoDTensor)
    assert tw.lod() == [[0, 3, 4, 6, 10]] and tw.recursive_sequence_lengths() == [[3, 1, 2, 4]]
    assert tw.shape() == [10, 1]
    np.testing.assert_array_equal(np.array(tw)[:, 0], [1, 2, 3, 4, 5, 6, 7, 8, 9, 1])
    feed = {"words": data[0][0], "label": data[0][1]} if return_list else data
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    out, got = exe.run(main, feed=feed, fetch_list=[emb, loss], scope=scope, return_numpy=False)
    assert out.lod() == [[0, 3, 4, 6, 10]]
    # the same batch through a DataFeeder gives the same loss
    feeder = fluid.DataFeeder([words, label], fluid.CPUPlace(), program=main)
    want = exe.run(main, feed=feeder.feed(LOD_BATCH), fetch_list=[loss], scope=scope)[0]
    np.testing.assert_allclose(np.array(got), want, rtol=1e-6)


def test_data_feeder_tensors_feed_as_the_arrays_do():
    main, startup, x, y, loss = _net()
    samples = _samples()
    scope, exe, want = _loss_of_arrays(main, startup, loss, samples)
    feed = fluid.DataFeeder([x, y], fluid.CPUPlace(), program=main).feed(samples)
    assert {type(t) for t in feed.values()} == {fluid.LoDTensor}
    got = float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
    assert got == pytest.approx(want, rel=1e-6)


def test_data_feeder_tensors_feed_a_program_over_several_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, x, y, loss = _net()
    samples = _samples()
    scope, exe, _ = _loss_of_arrays(main, startup, loss, samples)
    compiled = CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    arrays = {"x": np.stack([s[0] for s in samples]), "y": np.stack([s[1] for s in samples])}
    want = exe.run(compiled, feed=arrays, fetch_list=[loss], scope=scope)[0]
    feeder = fluid.DataFeeder([x, y], fluid.CPUPlace(), program=main)
    # the whole batch, split over the places
    got = exe.run(compiled, feed=feeder.feed(samples), fetch_list=[loss], scope=scope)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # one feed per place
    per_place = list(feeder.feed_parallel([samples[:4], samples[4:]]))
    assert len(per_place) == 2 and per_place[1]["x"].shape() == [4, 3]
    got = exe.run(compiled, feed=per_place, fetch_list=[loss], scope=scope)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_lod_tensors_feed_a_program_over_several_places(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, words, label, _, loss = _lod_net()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    feeder = fluid.DataFeeder([words, label], fluid.CPUPlace(), program=main)
    compiled = CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    halves = [feeder.feed(LOD_BATCH[:2]), feeder.feed(LOD_BATCH[2:])]
    want = [exe.run(main, feed=h, fetch_list=[loss], scope=scope)[0] for h in halves]
    # the whole batch: its sequences are split over the places, each with its LoD
    got = exe.run(compiled, feed=feeder.feed(LOD_BATCH), fetch_list=[loss], scope=scope,
                  return_merged=False)[0]
    np.testing.assert_allclose(np.concatenate([np.ravel(g) for g in got]), np.ravel(want),
                               rtol=1e-6)
    loader = fluid.io.DataLoader.from_generator(feed_list=[words, label], capacity=2,
                                                iterable=False)
    loader.set_sample_generator(lambda: iter(LOD_BATCH), batch_size=2)
    loader.start()
    got = exe.run(compiled, fetch_list=[loss], scope=scope, return_merged=False)[0]
    loader.reset()
    np.testing.assert_allclose(np.concatenate([np.ravel(g) for g in got]), np.ravel(want),
                               rtol=1e-6)
