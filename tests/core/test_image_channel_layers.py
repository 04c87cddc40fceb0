"""``layers.lrn``, ``instance_norm``, ``affine_channel``, ``shuffle_channel``,
``space_to_depth`` and ``adaptive_pool2d`` as Fluid 1.8 builds them: ops, slots, attributes,
parameters, static shapes, values against numpy through the executor, the errors Fluid gives,
and a whole program's gradients through them against central differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _ops(main, type_):
    return [o for o in main.global_block().ops if o.type == type_]


def test_lrn_and_instance_norm_build_fluids_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6, 3, 2])
        y = layers.lrn(x, n=3, alpha=0.5, beta=0.6)
        z = layers.lrn(layers.data("h", [3, 2, 6]), data_format="NHWC")
        inorm = layers.instance_norm(x)
        bare = layers.instance_norm(x, param_attr=False, bias_attr=False, epsilon=1e-3)
    op = _ops(main, "lrn")[0]
    assert op.attr("n") == 3 and op.attr("k") == 1.0 and op.attr("alpha") == 0.5
    assert op.attr("beta") == pytest.approx(0.6) and op.attr("data_format") == "NCHW"
    mid = main.global_block().var(op.output("MidOut")[0])
    assert mid.stop_gradient and mid.shape == (-1, 6, 3, 2)
    assert y.shape == (-1, 6, 3, 2) and z.shape == (-1, 3, 2, 6)
    assert _ops(main, "lrn")[1].attr("data_format") == "NHWC"
    op = _ops(main, "instance_norm")[0]
    assert op.input("Scale") == ["instance_norm_0.w_0"]
    assert op.input("Bias") == ["instance_norm_0.b_0"]
    assert op.attr("epsilon") == pytest.approx(1e-5)
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["instance_norm_0.w_0"].shape == (6,)
    assert params["instance_norm_0.b_0"].shape == (6,)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["instance_norm_0.w_0"].type == "fill_constant"
    assert init["instance_norm_0.w_0"].attr("value") == 1.0
    assert init["instance_norm_0.b_0"].attr("value") == 0.0
    assert main.global_block().var(op.output("SavedVariance")[0]).shape == (-1,)
    assert inorm.shape == (-1, 6, 3, 2)
    bare_op = _ops(main, "instance_norm")[1]
    assert not bare_op.inputs.get("Scale") and not bare_op.inputs.get("Bias")
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 6, 3, 2)).astype(np.float32)
    hv = rng.standard_normal((2, 3, 2, 6)).astype(np.float32)
    got_y, got_z, got_in, got_bare = _run(main, startup, {"x": xv, "h": hv},
                                          [y, z, inorm, bare])
    sq = np.pad(xv.astype(np.float64) ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    mid_v = 1.0 + 0.5 * (sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:])
    np.testing.assert_allclose(got_y, xv / mid_v ** 0.6, rtol=1e-5)
    sq = np.pad(hv.astype(np.float64) ** 2, ((0, 0), (0, 0), (0, 0), (2, 2)))
    mid_v = 1.0 + 1e-4 * sum(sq[..., o:o + 6] for o in range(5))
    np.testing.assert_allclose(got_z, hv / mid_v ** 0.75, rtol=1e-5)
    flat = xv.reshape(2, 6, -1)
    for got, eps in ((got_in, 1e-5), (got_bare, 1e-3)):
        want = (flat - flat.mean(axis=2, keepdims=True)) / np.sqrt(
            flat.var(axis=2, keepdims=True) + eps)
        np.testing.assert_allclose(got, want.reshape(xv.shape), rtol=1e-4, atol=1e-5)


def test_lrn_and_instance_norm_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [6, 3, 2])
        with pytest.raises(ValueError, match="must be 4-D"):
            layers.lrn(layers.data("v", [6]))
        with pytest.raises(ValueError, match="data_format must be 'NCHW' or 'NHWC'"):
            layers.lrn(x, data_format="NCWH")
        with pytest.raises(ValueError, match="n must be a positive odd int, got 4"):
            layers.lrn(x, n=4)
        with pytest.raises(ValueError, match="alpha must be a number > 0"):
            layers.lrn(x, alpha=0)
        with pytest.raises(TypeError, match="The type of 'input' in lrn must be Variable"):
            layers.lrn(np.ones((1, 2, 3, 4)))
        # Fluid 1.8's layer takes float32 only (its CPU kernel is float32 only)
        with pytest.raises(TypeError, match="'input' in lrn must be float32, but received "
                                            "float64"):
            layers.lrn(layers.data("x64", [6, 3, 2], dtype="float64"))
        with pytest.raises(ValueError, match="epsilon must be between 0.0 and 0.001"):
            layers.instance_norm(x, epsilon=0.1)
        with pytest.raises(ValueError, match="param_attr and bias_attr must be False together"):
            layers.instance_norm(x, param_attr=False)
        with pytest.raises(ValueError, match="rank 2 to 5"):
            layers.instance_norm(layers.data("w", [1, 2, 3, 4, 5]))


def test_affine_channel_shuffle_space_to_depth():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 2, 6])
        s = layers.data("s", [4], append_batch_size=False)
        b = layers.data("b", [4], append_batch_size=False)
        s6 = layers.data("s6", [6], append_batch_size=False)
        b6 = layers.data("b6", [6], append_batch_size=False)
        aff = layers.affine_channel(x, s, b, act="relu")
        last = layers.affine_channel(x, scale=s6, bias=b6, data_layout="NHWC")
        shuf = layers.shuffle_channel(x, group=2)
        s2d = layers.space_to_depth(x, 2)
        unknown = layers.space_to_depth(layers.data("u", [-1, 8, -1, 4]), 2)
    op = _ops(main, "affine_channel")[0]
    assert op.input("Scale") == [s.name] and op.input("Bias") == [b.name]
    assert op.attr("data_layout") == "NCHW" and _ops(main, "relu")
    assert _ops(main, "affine_channel")[1].attr("data_layout") == "NHWC"
    assert _ops(main, "shuffle_channel")[0].attr("group") == 2
    assert _ops(main, "space_to_depth")[0].attr("blocksize") == 2
    assert aff.shape == (-1, 4, 2, 6) and last.shape == (-1, 4, 2, 6)
    assert shuf.shape == (-1, 4, 2, 6) and s2d.shape == (-1, 16, 1, 3)
    assert unknown.shape == (-1, 32, -1, 2)
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((2, 4, 2, 6)).astype(np.float32)
    sv, bv = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    s6v, b6v = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
    got_aff, got_last, got_shuf, got_s2d = _run(
        main, startup, {"x": xv, "s": sv, "b": bv, "s6": s6v, "b6": b6v,
                        "u": np.zeros((1, 8, 2, 4), np.float32)},
        [aff, last, shuf, s2d])
    np.testing.assert_allclose(got_aff, np.maximum(xv * sv[:, None, None] + bv[:, None, None],
                                                   0), rtol=1e-6)
    np.testing.assert_allclose(got_last, xv * s6v + b6v, rtol=1e-6)
    np.testing.assert_array_equal(got_shuf, xv[:, [0, 2, 1, 3]])
    # Paddle's reorg: input channel k = offset·C2 + c2 (C2 = 1 here) lands at row
    # j·2 + offset // 2, column i·2 + offset % 2 of a [B, 1, 4, 12] buffer
    buf = np.zeros((2, 1, 4, 12), np.float32)
    for k in range(4):
        for j in range(2):
            for i in range(6):
                buf[:, 0, j * 2 + k // 2, i * 2 + k % 2] = xv[:, k, j, i]
    np.testing.assert_array_equal(got_s2d, buf.reshape(2, 16, 1, 3))


def test_affine_channel_shuffle_space_to_depth_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4, 2, 6])
        s = layers.data("s", [3], append_batch_size=False)
        with pytest.raises(TypeError, match="scale must be a Variable"):
            layers.affine_channel(x, bias=s)
        with pytest.raises(ValueError, match=r"scale must have shape \[4\]"):
            layers.affine_channel(x, s, s)
        with pytest.raises(ValueError, match="data_layout must be 'NCHW' or 'NHWC'"):
            layers.affine_channel(x, s, s, data_layout="HWC")
        with pytest.raises(TypeError, match="group must be int"):
            layers.shuffle_channel(x, 2.0)
        with pytest.raises(ValueError, match="group=3 must be a positive divisor of the 4"):
            layers.shuffle_channel(x, 3)
        with pytest.raises(ValueError, match="blocksize must be a python int"):
            layers.space_to_depth(x, 2.0)
        with pytest.raises(ValueError, match="blocksize must be > 1"):
            layers.space_to_depth(x, 1)
        with pytest.raises(ValueError, match=r"the width of .* \(6\) must be a positive "
                                             r"multiple of 4|channels of .* \(4\) must be"):
            layers.space_to_depth(x, 4)
        with pytest.raises(ValueError, match=r"the height of .* \(2\) must be a positive "
                                             r"multiple of 3"):
            layers.space_to_depth(layers.data("y", [9, 2, 3]), 3)


def test_adaptive_pool2d_builds_fluids_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 5, 7])
        mx = layers.adaptive_pool2d(x, [3, 2])
        av = layers.adaptive_pool2d(x, 2, pool_type="avg")
        mx2, mask = layers.adaptive_pool2d(x, (2, 3), require_index=True)
    # as Fluid 1.8: max pooling is max_pool2d_with_index (with a Mask), avg is pool2d
    op = _ops(main, "max_pool2d_with_index")[0]
    assert op.attr("ksize") == [3, 2] and op.attr("adaptive") is True
    assert op.attr("pooling_type") == "max" and op.output("Mask")
    pool = _ops(main, "pool2d")[0]
    assert pool.attr("ksize") == [2, 2] and pool.attr("adaptive") is True
    assert pool.attr("pooling_type") == "avg" and not pool.outputs.get("Mask")
    assert mx.shape == (-1, 3, 3, 2) and av.shape == (-1, 3, 2, 2)
    assert mx2.shape == (-1, 3, 2, 3) and mask.shape == (-1, 3, 2, 3)
    assert mask.dtype in ("int32", np.int32) or str(mask.dtype).endswith("int32")
    xv = np.random.default_rng(2).standard_normal((2, 3, 5, 7)).astype(np.float32)
    got_mx, got_av, got_mask = _run(main, startup, {"x": xv}, [mx, av, mask])

    def windows(size, out):
        return [(math.floor(i * size / out), math.ceil((i + 1) * size / out))
                for i in range(out)]

    for i, (hs, he) in enumerate(windows(5, 3)):
        for j, (ws, we) in enumerate(windows(7, 2)):
            np.testing.assert_array_equal(got_mx[:, :, i, j], xv[:, :, hs:he, ws:we].max((2, 3)))
    for i, (hs, he) in enumerate(windows(5, 2)):
        for j, (ws, we) in enumerate(windows(7, 2)):
            np.testing.assert_allclose(got_av[:, :, i, j],
                                       xv[:, :, hs:he, ws:we].mean((2, 3)), rtol=1e-6)
    for i, (hs, he) in enumerate(windows(5, 2)):
        for j, (ws, we) in enumerate(windows(7, 3)):
            flat = xv.reshape(2, 3, -1)
            np.testing.assert_array_equal(
                np.take_along_axis(flat, got_mask[:, :, i, j, None].astype(np.int64), 2)[..., 0],
                xv[:, :, hs:he, ws:we].max((2, 3)))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        v = layers.data("v", [3, 5, 7])
        with pytest.raises(ValueError, match="require_index=True needs pool_type='max'"):
            layers.adaptive_pool2d(v, 2, pool_type="avg", require_index=True)
        with pytest.raises(ValueError, match="pool_type must be 'max' or 'avg'"):
            layers.adaptive_pool2d(v, 2, pool_type="sum")
        with pytest.raises(ValueError, match="pool_size must be an int or a pair"):
            layers.adaptive_pool2d(v, [1, 2, 3])
        with pytest.raises(TypeError, match="require_index must be a bool"):
            layers.adaptive_pool2d(v, 2, require_index=1)
        with pytest.raises(ValueError, match="must be 4-D NCHW"):
            layers.adaptive_pool2d(layers.data("w", [3, 5]), 2)


def test_gradients_through_the_channel_layers():
    """conv2d → affine_channel → instance_norm → shuffle_channel → space_to_depth →
    adaptive max and avg pooling → a weighted sum: the parameters' gradients equal central
    differences of the loss (in float64; Fluid's lrn layer refuses float64, so lrn's gradient
    is checked by tests/ops/test_grad_check.py instead)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 5, 5))
    weights = rng.standard_normal((2, 32, 2, 1))
    scale, shift = rng.uniform(0.5, 1.5, 8), rng.standard_normal(8)

    def build():
        xv = layers.data("x", [2, 5, 5], dtype="float64")
        wv = layers.data("wt", [2, 32, 2, 1], dtype="float64", append_batch_size=False)
        sv = layers.data("sc", [8], dtype="float64", append_batch_size=False)
        bv = layers.data("sh", [8], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 8, 2, param_attr="filt", bias_attr=False)  # [N, 8, 4, 4]
        h = layers.affine_channel(h, sv, bv)
        h = layers.instance_norm(h, param_attr="ins", bias_attr="inb")
        h = layers.shuffle_channel(h, 2)
        h = layers.space_to_depth(h, 2)  # [N, 32, 2, 2]
        mx = layers.adaptive_pool2d(h, [2, 1])
        av = layers.adaptive_pool2d(h, [2, 1], pool_type="avg")
        return layers.reduce_sum(layers.elementwise_mul(
            layers.elementwise_add(mx, layers.scale(av, 0.5)), wv))

    got = program_grads_and_numeric(build, {"x": x, "wt": weights, "sc": scale, "sh": shift},
                                    ["filt", "ins", "inb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["inb"][0]).sum() > 0 and np.abs(got["filt"][0]).sum() > 0
