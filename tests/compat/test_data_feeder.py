"""fluid.DataFeeder: samples (tuples) into feed dicts with Fluid 1.8's dtype and shape rules."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid


@pytest.fixture
def net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        image = fluid.layers.data(name="image", shape=[2, 2])
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        pred = fluid.layers.fc(image, 3, act="softmax", num_flatten_dims=1)
        loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, label))
        fluid.optimizer.SGD(0.5).minimize(loss)
    return main, startup, image, label, loss


def _batch(n, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.random((2, 2)).tolist(), int(rng.integers(3))) for _ in range(n)]


def test_feed_stacks_each_field_with_the_variables_dtype_and_shape(net):
    main, _, image, label, _ = net
    feeder = fluid.DataFeeder([image, label], fluid.CPUPlace())
    batch = _batch(4)
    feed = feeder.feed(batch)
    assert list(feed) == ["image", "label"]
    # Fluid 1.8: a LoDTensor for every field, with an empty LoD for lod_level 0
    assert all(isinstance(t, fluid.LoDTensor) for t in feed.values())
    assert feed["image"].shape() == [4, 2, 2] and feed["image"].lod() == []
    assert np.array(feed["image"]).dtype == np.float32
    np.testing.assert_allclose(np.array(feed["image"]), [s[0] for s in batch], rtol=1e-6)
    # a scalar label per sample is reshaped to the layer's [-1, 1]
    assert feed["label"].shape() == [4, 1] and feed["label"].recursive_sequence_lengths() == []
    assert np.array(feed["label"]).dtype == np.int64
    np.testing.assert_array_equal(np.array(feed["label"])[:, 0], [s[1] for s in batch])
    assert feeder.feed_names == ["image", "label"]
    assert feeder.feed_shapes == [(-1, 2, 2), (-1, 1)]


def test_names_are_looked_up_in_the_program(net):
    main, _, image, label, _ = net
    feeder = fluid.DataFeeder(["label", "image"], fluid.CPUPlace(), program=main)
    feed = feeder.feed([(1, np.zeros((2, 2)))])
    assert feed["label"].shape() == [1, 1] and feed["image"].shape() == [1, 2, 2]


def test_feed_trains_through_the_executor(net):
    main, startup, image, label, loss = net
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    feeder = fluid.DataFeeder([image, label], fluid.CPUPlace(), program=main)
    feed = feeder.feed(_batch(8))
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
              for _ in range(5)]
    assert losses[-1] < losses[0]


def test_errors(net):
    main, _, image, label, _ = net
    feeder = fluid.DataFeeder([image, label], fluid.CPUPlace())
    with pytest.raises(ValueError, match=r"number of fields in data \(1\) does not match "
                                         r"len\(feed_list\) \(2\)"):
        feeder.feed([(np.zeros((2, 2)),)])
    with pytest.raises(ValueError, match=r"Shape not match.*'image' is \[-1, 2, 2\], but "
                                         r"receive \[1, 2, 3\]"):
        feeder.feed([(np.zeros((2, 3)), 0)])
    with pytest.raises(ValueError, match=r"Reshape error.*'image'"):
        feeder.feed([(np.zeros(5), 0)])
    with pytest.raises(ValueError, match="do not form a regular float32 array.*lod_level >= 1"):
        feeder.feed([([[0.0, 1.0], [2.0]], 0)])
    with pytest.raises(TypeError, match="Feed list should contain"):
        fluid.DataFeeder([3], fluid.CPUPlace())


def test_lod_fields_become_lod_tensors_as_fluid_builds_them():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        paras = fluid.layers.data(name="paras", shape=[2], dtype="float32", lod_level=2)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    feeder = fluid.DataFeeder([words, paras, label], fluid.CPUPlace(), program=main)
    feed = feeder.feed([
        ([1, 2, 3], [[[0, 1]], [[2, 3], [4, 5]]], 1),
        ([4], [[[6, 7], [8, 9], [1, 1]]], 0),
    ])
    w = feed["words"]
    assert isinstance(w, fluid.LoDTensor) and w.lod() == [[0, 3, 4]]
    assert np.array(w).tolist() == [[1], [2], [3], [4]] and np.array(w).dtype == np.int64
    p = feed["paras"]
    assert p.recursive_sequence_lengths() == [[2, 1], [1, 2, 3]] and p.shape() == [6, 2]
    assert feed["label"].lod() == [] and np.array(feed["label"]).tolist() == [[1], [0]]
    with pytest.raises(ValueError, match="'words' has lod_level 1, so each sample holds a "
                                         "sequence; got int 7"):
        feeder.feed([(7, [[[0, 1]]], 0)])


def test_decorate_reader_and_feed_parallel(net, monkeypatch):
    monkeypatch.setenv("CPU_NUM", "1")
    main, _, image, label, _ = net
    feeder = fluid.DataFeeder([image, label], fluid.CPUPlace())

    def reader():
        yield _batch(2, seed=1)
        yield _batch(3, seed=2)

    feeds = list(feeder.decorate_reader(reader, multi_devices=False)())
    assert [f["label"].shape() for f in feeds] == [[2, 1], [3, 1]]
    per_place = list(feeder.decorate_reader(reader, multi_devices=True)())
    assert len(per_place) == 2 and all(len(group) == 1 for group in per_place)
    assert all(isinstance(t, fluid.LoDTensor) for group in per_place for t in group[0].values())
    with pytest.raises(ValueError, match="number of devices and number of mini-batches"):
        list(feeder.feed_parallel([_batch(1), _batch(1)]))
