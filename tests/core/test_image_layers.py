"""``layers.group_norm``, ``pixel_shuffle``, ``maxout`` and ``gather_nd`` as Fluid 1.8 builds
them: parameters, shapes and attributes, values against numpy through the executor, the
errors Fluid gives, and a whole program's gradients through all four against central
differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_group_norm_builds_fluids_parameters_and_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6, 3, 2])
        # Fluid 1.8 makes Scale and Bias only for a true param_attr / bias_attr (`if
        # param_attr:` on the arguments): the default None makes none
        y = layers.group_norm(x, groups=3, act="relu", param_attr=fluid.ParamAttr(),
                              bias_attr=fluid.ParamAttr())
        bare = layers.group_norm(x, groups=2)
        channels_last = layers.group_norm(layers.data("z", [3, 2, 4]), 2, data_layout="NHWC",
                                          param_attr=fluid.ParamAttr())
    op = next(o for o in main.global_block().ops if o.type == "group_norm")
    assert op.input("Scale") == ["group_norm_0.w_0"] and op.input("Bias") == ["group_norm_0.b_0"]
    assert op.attr("groups") == 3 and op.attr("epsilon") == pytest.approx(1e-5)
    assert op.attr("data_layout") == "NCHW"
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["group_norm_0.w_0"].shape == (6,) and params["group_norm_0.b_0"].shape == (6,)
    assert params["group_norm_2.w_0"].shape == (4,)  # NHWC: the channels are last
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["group_norm_0.w_0"].type == "fill_constant"
    assert init["group_norm_0.w_0"].attr("value") == 1.0
    assert main.global_block().ops[1].type == "relu" and y.shape == (-1, 6, 3, 2)
    bare_op = [o for o in main.global_block().ops if o.type == "group_norm"][1]
    assert "Scale" not in bare_op.inputs or not bare_op.input("Scale")
    assert "Bias" not in bare_op.inputs or not bare_op.input("Bias")
    assert "group_norm_1.w_0" not in params and "group_norm_2.b_0" not in params
    assert main.global_block().var(bare_op.output("Mean")[0]).shape == (-1, 2)
    assert channels_last.shape == (-1, 3, 2, 4)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        v = layers.data("v", [6, 3, 2])
        with pytest.raises(ValueError, match="groups=4 must be a positive int dividing the 6"):
            layers.group_norm(v, groups=4)
        with pytest.raises(ValueError, match="data_layout must be 'NCHW' or 'NHWC'"):
            layers.group_norm(v, groups=2, data_layout="NCWH")
    xv = np.random.default_rng(0).standard_normal((2, 6, 3, 2)).astype(np.float32)
    got, plain = _run(main, startup, {"x": xv, "z": np.zeros((2, 3, 2, 4), np.float32)},
                      [y, bare])
    groups = xv.reshape(2, 3, -1)
    want = ((groups - groups.mean(axis=2, keepdims=True))
            / np.sqrt(groups.var(axis=2, keepdims=True) + 1e-5)).reshape(xv.shape)
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-4, atol=1e-5)
    halves = xv.reshape(2, 2, -1)
    np.testing.assert_allclose(
        plain, ((halves - halves.mean(axis=2, keepdims=True))
                / np.sqrt(halves.var(axis=2, keepdims=True) + 1e-5)).reshape(xv.shape),
        rtol=1e-4, atol=1e-5)


def test_pixel_shuffle_maxout_gather_nd_shapes_values_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [8, 2, 3])
        up = layers.pixel_shuffle(x, upscale_factor=2)
        pooled = layers.maxout(x, groups=4)
        last = layers.maxout(layers.data("h", [2, 3, 6]), groups=3, axis=-1)
        table = layers.data("t", [4, 3, 2], append_batch_size=False)
        idx = layers.data("i", [2, 2, 2], dtype="int64", append_batch_size=False)
        picked = layers.gather_nd(table, idx)
        with pytest.raises(ValueError, match="must be a multiple of upscale_factor² \\(9\\)"):
            layers.pixel_shuffle(x, 3)
        with pytest.raises(ValueError, match="axis must be 1 \\(NCHW\\), -1 or 3"):
            layers.maxout(x, groups=2, axis=2)
        with pytest.raises(ValueError, match="groups=3 must be an int larger than 1 dividing "
                                             "dim 1"):
            layers.maxout(x, groups=3)
        with pytest.raises(ValueError, match="groups=1 must be an int larger than 1"):
            layers.maxout(x, groups=1)
        with pytest.raises(TypeError, match="index .* must be int32 or int64"):
            layers.gather_nd(table, layers.data("f", [1], append_batch_size=False))
    assert up.shape == (-1, 2, 4, 6) and pooled.shape == (-1, 2, 2, 3)
    assert last.shape == (-1, 2, 3, 2) and picked.shape == (2, 2, 2)
    assert main.global_block().ops[1].attr("axis") == 1
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 8, 2, 3)).astype(np.float32)
    hv = rng.standard_normal((2, 2, 3, 6)).astype(np.float32)
    tv = rng.standard_normal((4, 3, 2)).astype(np.float32)
    iv = np.array([[[0, 2], [3, 1]], [[1, 1], [2, 0]]], np.int64)
    g_up, g_pool, g_last, g_pick = _run(main, startup, {"x": xv, "h": hv, "t": tv, "i": iv},
                                        [up, pooled, last, picked])
    np.testing.assert_array_equal(
        g_up, xv.reshape(2, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 4, 6))
    np.testing.assert_array_equal(g_pool, xv.reshape(2, 2, 4, 2, 3).max(axis=2))
    np.testing.assert_array_equal(g_last, hv.reshape(2, 2, 3, 2, 3).max(axis=4))
    np.testing.assert_array_equal(g_pick, tv[iv[..., 0], iv[..., 1]])


def test_gradients_through_group_norm_maxout_pixel_shuffle_gather_nd():
    """conv2d → group_norm → maxout → pixel_shuffle → gather_nd → a weighted sum: the
    parameters' gradients equal central differences of the loss."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 3, 3))
    weights = rng.standard_normal((3, 2, 2, 2))
    index = np.array([[0, 1], [1, 0], [0, 1]], np.int64)

    def build():
        xv = layers.data("x", [2, 3, 3], dtype="float64")
        iv = layers.data("i", [3, 2], dtype="int64", append_batch_size=False)
        wv = layers.data("wt", [3, 2, 2, 2], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 8, 2, param_attr="filt", bias_attr=False)  # [N, 8, 2, 2]
        h = layers.group_norm(h, groups=4, param_attr="gs", bias_attr="gb")
        h = layers.maxout(h, groups=2)  # [N, 4, 2, 2]
        h = layers.pixel_shuffle(h, 2)  # [N, 1, 4, 4]
        h = layers.reshape(h, [-1, 2, 2, 2])  # [2N, 2, 2, 2]
        picked = layers.gather_nd(h, iv)  # rows 0 and 1 of the first two axes: [3, 2, 2]
        return layers.reduce_sum(layers.elementwise_mul(picked, layers.reduce_sum(wv, dim=1)))

    got = program_grads_and_numeric(build, {"x": x, "i": index, "wt": weights},
                                    ["filt", "gs", "gb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["gb"][0]).sum() > 0  # the bias reaches the loss
