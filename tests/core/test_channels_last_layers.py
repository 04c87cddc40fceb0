"""Channels-last image layers (Fluid 1.8's ``data_format="NHWC"`` of conv2d, pool2d and
conv2d_transpose): the programs Fluid builds, and a network trained on NHWC data that follows
the same network on the NCHW data step for step."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph, layers


def _ops(main):
    return main.global_block().ops


def test_conv2d_nhwc_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", [9, 8, 6])  # [N, H, W, C]
        y = layers.conv2d(x, 4, 3, stride=2, padding=1, groups=2, data_format="NHWC")
    conv, add = _ops(main)[:2]
    assert conv.type == "conv2d" and conv.attrs["data_format"] == "NHWC"
    assert main.global_block().var(conv.input("Filter")[0]).shape == (4, 3, 3, 3)
    assert add.type == "elementwise_add" and add.attrs["axis"] == 3  # the channels, last
    assert main.global_block().var(add.input("Y")[0]).shape == (4,)
    assert y.shape == (-1, 5, 4, 4)


def test_pool2d_and_conv2d_transpose_nhwc_shapes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", [7, 6, 3])
        p = layers.pool2d(x, 2, "max", 2, data_format="NHWC")
        g = layers.pool2d(x, pool_type="avg", global_pooling=True, data_format="NHWC")
        t = layers.conv2d_transpose(x, 5, filter_size=3, stride=2, data_format="NHWC")
    assert p.shape == (-1, 3, 3, 3) and g.shape == (-1, 1, 1, 3)
    assert t.shape == (-1, 15, 13, 5)
    ops = _ops(main)
    assert [op.attrs["data_format"] for op in ops if op.type in ("pool2d", "conv2d_transpose")] \
        == ["NHWC"] * 3
    assert ops[-1].type == "elementwise_add" and ops[-1].attrs["axis"] == 3


def test_fluid_18_per_dimension_padding():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        a = layers.conv2d(layers.data("a", [2, 8, 8]), 3, 3,
                          padding=[[0, 0], [0, 0], [1, 2], [0, 1]])
        b = layers.conv2d(layers.data("b", [8, 8, 2]), 3, 3,
                          padding=[[0, 0], [1, 2], [0, 1], [0, 0]], data_format="NHWC")
        with pytest.raises(ValueError, match="batch or channel"):
            layers.pool2d(layers.data("c", [2, 8, 8]), 2, pool_padding=[[0, 0], [1, 1],
                                                                        [1, 1], [1, 1]])
    convs = [op for op in _ops(main) if op.type == "conv2d"]
    assert [op.attrs["paddings"] for op in convs] == [[1, 2, 0, 1]] * 2
    assert a.shape == (-1, 3, 9, 7) and b.shape == (-1, 9, 7, 3)


def test_unknown_data_format_is_a_clear_error():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", [3, 8, 8])
        with pytest.raises(ValueError, match="'NCHW' or 'NHWC'"):
            layers.conv2d(x, 2, 3, data_format="NDHWC")
    with dygraph.guard(), pytest.raises(ValueError, match="NHWC"):
        dygraph.Pool2D(2, data_format="CHWN")


def _net(data_format: str):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 11
    shape = [3, 10, 9] if data_format == "NCHW" else [10, 9, 3]
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", shape)
        y = layers.data("y", [1], dtype="int64")
        h = layers.conv2d(x, 6, 3, padding=1, act="relu", data_format=data_format)
        h = layers.pool2d(h, 2, "max", 2, data_format=data_format)
        h = layers.conv2d(h, 4, 3, stride=2, groups=2, data_format=data_format)
        h = layers.conv2d_transpose(h, 4, filter_size=2, stride=2, data_format=data_format)
        h = layers.pool2d(h, pool_type="avg", global_pooling=True, data_format=data_format)
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, 3), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


def test_an_nhwc_network_trains_as_the_nchw_one():
    rng = np.random.default_rng(0)
    batches = [(rng.normal(size=(4, 3, 10, 9)).astype("float32"),
                rng.integers(0, 3, (4, 1))) for _ in range(3)]
    results = {}
    for fmt in ("NCHW", "NHWC"):
        main, startup, loss = _net(fmt)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        losses = []
        for x, y in batches:
            feed = x if fmt == "NCHW" else x.transpose(0, 2, 3, 1)
            losses.append(exe.run(main, feed={"x": feed, "y": y}, fetch_list=[loss],
                                  scope=scope)[0])
        params = {p.name: np.array(scope.get(p.name)) for p in main.all_parameters()}
        results[fmt] = (np.array(losses), params)
    (l1, p1), (l2, p2) = results["NCHW"], results["NHWC"]
    np.testing.assert_allclose(l2, l1, rtol=1e-5)
    assert p1.keys() == p2.keys()  # the same parameters: filters keep their layout
    for name in p1:
        np.testing.assert_allclose(p2[name], p1[name], rtol=1e-4, atol=1e-6, err_msg=name)


def test_dygraph_pool2d_nhwc_is_the_nchw_pooling_transposed():
    x = np.random.default_rng(1).normal(size=(2, 3, 6, 5)).astype("float32")
    with dygraph.guard():
        nchw = dygraph.Pool2D(3, "avg", 2, 1)(dygraph.to_variable(x)).numpy()
        nhwc = dygraph.Pool2D(3, "avg", 2, 1, data_format="NHWC")(
            dygraph.to_variable(x.transpose(0, 2, 3, 1))).numpy()
    np.testing.assert_allclose(nhwc, nchw.transpose(0, 2, 3, 1), rtol=1e-6)
