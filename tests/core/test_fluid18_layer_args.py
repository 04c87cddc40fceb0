"""Layer arguments Fluid 1.8's test_layers.py builds with: a Variable ``scale``, ``depth`` or
batch-norm ``momentum`` read at run time, ``lod_reset``'s LoD level, and ``tree_conv``'s output
without LoD. Expected values are worked out here from the inputs."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers


@pytest.fixture
def run():
    main, startup = fluid.Program(), fluid.Program()
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())

    def go(feed, fetch, return_numpy=True):
        exe.run(startup, scope=scope)
        return exe.run(main, feed=feed, fetch_list=fetch, scope=scope,
                       return_numpy=return_numpy)

    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        yield main, scope, go


def test_scale_by_a_variable(run):
    main, _, go = run
    x = layers.data("x", [3], append_batch_size=False)
    s = layers.data("s", [1], append_batch_size=False)
    out = layers.scale(x, scale=s, bias=1.0)
    (op,) = [o for o in main.global_block().ops if o.type == "scale"]
    assert op.input("ScaleTensor") == [s.name]
    (got,) = go({"x": np.array([1.0, 2.0, 3.0], "float32"), "s": np.array([4.0], "float32")},
                [out])
    np.testing.assert_allclose(got, [5.0, 9.0, 13.0])


def test_one_hot_depth_from_a_variable(run):
    main, _, go = run
    ids = layers.data("ids", [1], dtype="int64")
    depth = layers.fill_constant([1], "int32", 4)
    out = layers.one_hot(ids, depth)
    (op,) = [o for o in main.global_block().ops if o.type == "one_hot"]
    assert op.input("depth_tensor") == [depth.name] and op.attr("depth") == -1
    (got,) = go({"ids": np.array([[2], [0]], "int64")}, [out])
    np.testing.assert_array_equal(got, np.eye(4, dtype="float32")[[2, 0]])
    with pytest.raises(ValueError, match="positive int or a Variable"):
        layers.one_hot(ids, 0)


def test_batch_norm_momentum_from_a_variable(run):
    main, scope, go = run
    x = layers.data("x", [2, 1, 1])
    m = layers.data("m", [1], append_batch_size=False)
    layers.batch_norm(x, momentum=m, moving_mean_name="mean", moving_variance_name="var")
    (op,) = [o for o in main.global_block().ops if o.type == "batch_norm"]
    assert op.input("MomentumTensor") == [m.name]
    xv = np.array([[1.0, 2.0], [3.0, 6.0]], "float32").reshape(2, 2, 1, 1)
    go({"x": xv, "m": np.array([0.25], "float32")}, [])
    batch_mean, batch_var = xv.mean(axis=(0, 2, 3)), xv.var(axis=(0, 2, 3))
    # running = running * m + batch * (1 - m), from mean 0 and variance 1
    np.testing.assert_allclose(np.array(scope.get("mean")), 0.75 * batch_mean, rtol=1e-6)
    np.testing.assert_allclose(np.array(scope.get("var")), 0.25 + 0.75 * batch_var, rtol=1e-6)


def test_lod_reset_output_lod_level(run):
    _, _, go = run
    x = layers.data("x", [4])
    y2 = layers.data("y2", [1], lod_level=2)
    y0 = layers.data("y0", [1], dtype="int32")
    assert layers.lod_reset(x, y2).lod_level == 2
    assert layers.lod_reset(x, y0).lod_level == 1
    assert layers.lod_reset(x, target_lod=[0, 1, 3]).lod_level == 1


def test_tree_conv_output_has_no_lod(run):
    _, _, go = run
    nodes = layers.data("nodes", [3, 2], lod_level=1)
    edges = layers.data("edges", [2, 2], dtype="int32", lod_level=1)
    out = layers.tree_conv(nodes, edges, output_size=3, num_filters=1, max_depth=2)
    nv = fluid.create_lod_tensor(np.ones((1, 3, 2), "float32"), [[1]], fluid.CPUPlace())
    ev = fluid.create_lod_tensor(np.array([[[1, 2], [1, 3]]], "int32"), [[1]],
                                 fluid.CPUPlace())
    (got,) = go({"nodes": nv, "edges": ev}, [out], return_numpy=False)
    assert got.lod() == [] and np.array(got).shape == (1, 3, 3, 1)
