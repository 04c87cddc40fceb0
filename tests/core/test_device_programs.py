"""Fluid programs on ``CUDAPlace(0)`` train as on ``CPUPlace``: dense, image and sequence
networks, the feeding paths (DataFeeder, iterable PyReader with places, LoD tensors made on
the place, CompiledProgram over ``cuda_places()``) and fetches as LoDTensors. Each runs on the
real CuPy with a GPU and on the strict CPU CuPy everywhere (``device_xp``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dask_fluid as fluid

STEPS = 3  # steps of each comparison


def _program(build: Callable[[], tuple]) -> tuple:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        out = build()
    return main, startup, out


def _on_both(build: Callable[[], tuple], feeds: Callable[[object], list]) -> dict:
    """Losses (and the last step's other fetches) of STEPS runs on each place."""
    got = {}
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        main, startup, (loss, *others) = _program(build)
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        runs = [exe.run(main, feed=feed, fetch_list=[loss, *others], scope=scope,
                        return_numpy=False) for feed in feeds(place)]
        got[type(place).__name__] = [[np.array(v) for v in run] for run in runs]
    return got


def _assert_same(got: dict, rtol: float = 1e-5) -> None:
    for cpu, gpu in zip(got["CPUPlace"], got["CUDAPlace"], strict=True):
        for c, g in zip(cpu, gpu, strict=True):
            np.testing.assert_allclose(g, c, rtol=rtol, atol=1e-6)


def _dense():
    x = fluid.layers.data("x", shape=[5])
    y = fluid.layers.data("y", shape=[1], dtype="int64")
    pred = fluid.layers.fc(fluid.layers.fc(x, 8, act="relu"), 3, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, y))
    acc = fluid.layers.accuracy(pred, y)
    lr = fluid.layers.exponential_decay(0.1, 2, 0.5, staircase=True)
    fluid.optimizer.Adam(lr).minimize(loss)
    auc = fluid.layers.auc(pred, y)[0]
    return loss, acc, lr, auc


def _dense_batches(place: object) -> list:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((6, 5)).astype(np.float32),
             "y": rng.integers(0, 3, (6, 1))} for _ in range(STEPS)]


def test_dense_network_with_lr_decay_auc_and_lodtensor_fetches(device_xp):
    got = _on_both(_dense, _dense_batches)
    _assert_same(got)
    assert float(got["CUDAPlace"][-1][2][0]) == pytest.approx(0.05)  # the decayed lr


def _image():
    img = fluid.layers.data("img", shape=[1, 8, 8])
    y = fluid.layers.data("y", shape=[1], dtype="int64")
    c = fluid.nets.simple_img_conv_pool(img, 4, 3, 2, 2, act="relu")
    c = fluid.layers.dropout(fluid.layers.batch_norm(c), 0.3)
    loss = fluid.layers.mean(fluid.layers.cross_entropy(fluid.layers.fc(c, 3, act="softmax"), y))
    fluid.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return (loss,)


def test_image_network_with_batch_norm_and_dropout(device_xp):
    rng = np.random.default_rng(2)
    batches = [{"img": rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
                "y": rng.integers(0, 3, (4, 1))} for _ in range(STEPS)]
    _assert_same(_on_both(_image, lambda place: batches), rtol=1e-4)


def _text():
    w = fluid.layers.data("w", shape=[1], dtype="int64", lod_level=1)
    y = fluid.layers.data("y", shape=[1], dtype="int64")
    emb = fluid.layers.embedding(w, size=[20, 8], is_sparse=True)
    h, _ = fluid.layers.dynamic_lstm(fluid.layers.fc(emb, 32), size=32)
    g = fluid.layers.dynamic_gru(fluid.layers.fc(emb, 24), size=8)
    pooled = fluid.layers.concat([fluid.layers.sequence_pool(h, "max"),
                                  fluid.layers.sequence_last_step(g)], axis=1)
    pred = fluid.layers.fc(pooled, 2, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, y))
    fluid.optimizer.Adagrad(0.1).minimize(loss)
    return loss, h


def test_sequence_network_fed_lod_tensors_made_on_the_place(device_xp):
    def feeds(place):
        words = np.array([[1], [2], [3], [4], [5], [9]], np.int64)
        return [{"w": fluid.create_lod_tensor(words, [[2, 3, 1]], place),
                 "y": np.array([[0], [1], [1]])} for _ in range(STEPS)]

    got = _on_both(_text, feeds)
    _assert_same(got, rtol=1e-4)


def test_data_feeder_and_iterable_py_reader_on_the_place(device_xp):
    rng = np.random.default_rng(3)
    samples = [[(rng.standard_normal(5).astype(np.float32), int(rng.integers(0, 3)))
                for _ in range(4)] for _ in range(STEPS)]

    def by_feeder(place):
        main, _, _ = _program(_dense)
        feeder = fluid.DataFeeder(feed_list=["x", "y"], place=place, program=main)
        return [feeder.feed(batch) for batch in samples]

    def by_reader(place):  # one dict per place, as Fluid's iterable PyReader yields them
        x = fluid.layers.data("x", shape=[5])
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        reader = fluid.io.PyReader(feed_list=[x, y], capacity=2, iterable=True)
        reader.decorate_sample_list_generator(
            lambda: ([(a, np.array([b])) for a, b in batch] for batch in samples),
            places=[place])
        return list(reader())

    _assert_same(_on_both(_dense, by_feeder))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        _assert_same(_on_both(_dense, by_reader))


def test_compiled_program_over_cuda_places(device_xp):
    main, startup, (loss, *_) = _program(_dense)
    losses = {}
    for place, places in ((fluid.CPUPlace(), fluid.cpu_places(1)),
                          (fluid.CUDAPlace(0), fluid.cuda_places())):
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                                   places=places)
        losses[type(place).__name__] = [
            exe.run(compiled, feed=feed, fetch_list=[loss], scope=scope)[0]
            for feed in _dense_batches(place)]
    np.testing.assert_allclose(np.ravel(losses["CUDAPlace"]), np.ravel(losses["CPUPlace"]),
                               rtol=1e-5)


def test_a_list_of_feeds_for_several_places_is_refused_by_a_program():
    main, startup, (loss, *_) = _program(_dense)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _dense_batches(None)[0]
    with pytest.raises(ValueError, match="a list of 2 dicts .* runs on one place"):
        exe.run(main, feed=[feed, feed], fetch_list=[loss], scope=scope)


def test_piecewise_decay_with_host_placed_boundaries_on_the_device(device_xp):
    # Fluid makes the step counter and boundaries with force_cpu=True and a Switch reads them;
    # on a GPU executor they are made on the device, where less_than meets the counter
    def build():
        x = fluid.layers.data("x", shape=[5])
        loss = fluid.layers.mean(fluid.layers.fc(x, 1))
        lr = fluid.layers.piecewise_decay([2, 4], [1.0, 0.5, 0.1])
        fluid.optimizer.SGD(lr).minimize(loss)
        return loss, lr

    batches = [{"x": np.ones((2, 5), np.float32)}] * 6
    got = _on_both(build, lambda place: batches)
    _assert_same(got)
    assert [float(run[1][0]) for run in got["CUDAPlace"]] == pytest.approx(
        [1.0, 1.0, 0.5, 0.5, 0.1, 0.1])
