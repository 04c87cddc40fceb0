"""``layers.deformable_conv`` as Fluid 1.8 builds it: the op (v2 ``deformable_conv`` or, with
``modulated=False``, ``deformable_conv_v1``), its slots, attributes and parameters, the
output's static shape, values through the executor against numpy (zero offsets and a unit
mask make it conv2d), the errors, and a whole program's gradients against central
differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.initializer import NumpyArrayInitializer

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def _conv_np(x, w, stride, pad):
    """A plain correlation with zero padding, by shifted windows."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    m, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // stride[0] + 1
    ow = (xp.shape[3] - kw) // stride[1] + 1
    out = np.zeros((x.shape[0], m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i:i + stride[0] * oh:stride[0], j:j + stride[1] * ow:stride[1]]
            out += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j])
    return out


def test_deformable_conv_builds_fluids_op_and_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 6, 5])
        off = layers.data("off", [18, 3, 3])
        mask = layers.data("mask", [9, 3, 3])
        y = layers.deformable_conv(x, off, mask, num_filters=6, filter_size=3, stride=2,
                                   padding=1)
        off2 = layers.data("off2", [16, 6, 4])
        v1 = layers.deformable_conv(x, off2, None, 4, [2, 2], groups=2, deformable_groups=2,
                                    im2col_step=1, bias_attr=False, modulated=False)
    ops = main.global_block().ops
    op = ops[0]
    assert op.type == "deformable_conv"
    assert op.input("Input") == ["x"] and op.input("Offset") == ["off"]
    assert op.input("Mask") == ["mask"] and op.input("Filter") == ["deformable_conv_0.w_0"]
    assert op.attr("strides") == [2, 2] and op.attr("paddings") == [1, 1]
    assert op.attr("dilations") == [1, 1] and op.attr("groups") == 1
    assert op.attr("deformable_groups") == 1 and op.attr("im2col_step") == 64
    assert ops[1].type == "elementwise_add" and ops[1].attr("axis") == 1
    assert ops[1].input("Y") == ["deformable_conv_0.b_0"]
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["deformable_conv_0.w_0"].shape == (6, 4, 3, 3)
    assert params["deformable_conv_0.b_0"].shape == (6,)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["deformable_conv_0.w_0"].type == "gaussian_random"
    assert init["deformable_conv_0.w_0"].attr("std") == pytest.approx((2.0 / 36) ** 0.5)
    assert y.shape == (-1, 6, 3, 3)
    v1_op = ops[2]
    assert v1_op.type == "deformable_conv_v1" and "Mask" not in v1_op.inputs
    assert v1_op.attr("groups") == 2 and v1_op.attr("deformable_groups") == 2
    assert v1_op.attr("im2col_step") == 1 and len(ops) == 3  # no bias
    assert params["deformable_conv_1.w_0"].shape == (4, 2, 2, 2)
    assert v1.shape == (-1, 4, 5, 4)


def test_deformable_conv_values_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [4, 5, 5])
        off = layers.data("off", [8, 6, 6])
        mask = layers.data("mask", [4, 6, 6])
        y = layers.deformable_conv(x, off, mask, 3, 2, padding=1, param_attr="dw",
                                   bias_attr=fluid.ParamAttr(
                                       "db", initializer=fluid.initializer.Constant(0.5)))
        with pytest.raises(ValueError, match="channels must be a multiple of groups=3"):
            layers.deformable_conv(x, off, mask, 3, 2, groups=3)
        with pytest.raises(ValueError, match="param_attr must not be False"):
            layers.deformable_conv(x, off, mask, 3, 2, param_attr=False)
        with pytest.raises(ValueError, match="filter_size must be an int or a pair"):
            layers.deformable_conv(x, off, mask, 3, [2, 2, 2])
        with pytest.raises(ValueError, match="deformable_groups must be a positive int"):
            layers.deformable_conv(x, off, mask, 3, 2, deformable_groups=0)
        with pytest.raises(TypeError, match="mask"):
            layers.deformable_conv(x, off, None, 3, 2)
        with pytest.raises(ValueError, match="num_filters must be a positive int"):
            layers.deformable_conv(x, off, mask, 0, 2)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    feed = {"x": xv, "off": np.zeros((2, 8, 6, 6), np.float32),
            "mask": np.ones((2, 4, 6, 6), np.float32)}
    (got,), scope = _run(main, startup, feed, [y])
    w = np.asarray(scope.vars["dw"], np.float64)
    want = _conv_np(xv.astype(np.float64), w, (1, 1), (1, 1)) + 0.5
    assert got.shape == (2, 3, 6, 6)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_gradients_through_deformable_conv():
    """Learnt offsets (off the sampling grid) and a sigmoid mask feed deformable_conv, then
    deformable_conv_v1: every parameter's gradient equals central differences."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 4, 4))
    weights = rng.standard_normal((2, 2, 5, 4))
    offsets = rng.integers(-1, 2, (1, 8, 5, 4)) + rng.uniform(0.2, 0.8, (1, 8, 5, 4))
    offsets1 = rng.integers(-1, 2, (1, 2, 5, 4)) + rng.uniform(0.2, 0.8, (1, 2, 5, 4))

    def build():
        xv = layers.data("x", [2, 4, 4], dtype="float64")
        wv = layers.data("wt", [2, 2, 5, 4], dtype="float64", append_batch_size=False)
        # assign_value carries float32 only; the helper makes every parameter float64
        off = layers.create_parameter([1, 8, 5, 4], "float32", name="off",
                                      default_initializer=NumpyArrayInitializer(offsets))
        off1 = layers.create_parameter([1, 2, 5, 4], "float32", name="off1",
                                       default_initializer=NumpyArrayInitializer(offsets1))
        logits = layers.create_parameter([1, 4, 5, 4], "float64", name="mk")
        # the same offsets and mask for both images
        off_b = layers.expand(off, [2, 1, 1, 1])
        mask_b = layers.expand(layers.sigmoid(logits), [2, 1, 1, 1])
        h = layers.deformable_conv(xv, off_b, mask_b, 2, 2, padding=1, dilation=[1, 2],
                                   param_attr="dcw", bias_attr="dcb")  # [N, 2, 5, 4]
        h = layers.deformable_conv(h, layers.expand(off1, [2, 1, 1, 1]), None, 2, 1,
                                   stride=[1, 1], param_attr="dcw1", bias_attr=False,
                                   modulated=False)
        return layers.reduce_sum(layers.elementwise_mul(h, wv))

    got = program_grads_and_numeric(build, {"x": x, "wt": weights},
                                    ["dcw", "dcb", "off", "mk", "off1", "dcw1"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


# ---------------------------------------------------------------------------------------------
# deformable_roi_pooling

D_ROIS = np.array([[1.0, 1.0, 4.0, 3.0], [2.0, 0.6, 5.0, 4.0], [0.8, 1.2, 3.0, 4.4]])


def test_deformable_roi_pooling_builds_fluids_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [8, 6, 7])
        rois = layers.data("rois", [4], lod_level=1)
        trans = layers.data("trans", [4, 2, 2])
        ps = layers.deformable_roi_pooling(x, rois, trans, group_size=[2, 2], pooled_height=2,
                                           pooled_width=2, sample_per_part=2,
                                           position_sensitive=True)
        plain = layers.deformable_roi_pooling(x, rois, trans, no_trans=True,
                                              spatial_scale=0.5, pooled_height=3,
                                              pooled_width=2, part_size=(2, 2), trans_std=0.2)
    ops = main.global_block().ops
    op = ops[0]
    assert op.type == "deformable_psroi_pooling"
    assert op.input("Input") == ["x"] and op.input("ROIs") == ["rois"]
    assert op.input("Trans") == ["trans"]
    assert op.attr("output_dim") == 2 and op.attr("group_size") == [2, 2]
    assert op.attr("part_size") == [2, 2] and op.attr("sample_per_part") == 2
    assert op.attr("no_trans") is False and op.attr("trans_std") == pytest.approx(0.1)
    assert op.attr("spatial_scale") == 1.0
    assert ps.shape == (-1, 2, 2, 2) and plain.shape == (-1, 8, 3, 2)
    count = main.global_block().var(op.output("TopCount")[0])
    assert count.shape == (-1, 2, 2, 2)
    assert ops[1].attr("no_trans") is True and ops[1].attr("output_dim") == 8
    assert ops[1].attr("part_size") == [2, 2] and ops[1].attr("group_size") == [1, 1]
    assert ops[1].attr("trans_std") == pytest.approx(0.2)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [6, 6, 7])
        rois = layers.data("rois", [4], lod_level=1)
        trans = layers.data("trans", [2, 2, 2])
        with pytest.raises(ValueError, match="the input's 6 channels must be a multiple of "
                                             "pooled_height × pooled_width = 4"):
            layers.deformable_roi_pooling(x, rois, trans, pooled_height=2, pooled_width=2,
                                          position_sensitive=True)
        with pytest.raises(TypeError, match="group_size must be a list or tuple of 2 ints"):
            layers.deformable_roi_pooling(x, rois, trans, group_size=2)
        with pytest.raises(ValueError, match="part_size must hold 2 ints"):
            layers.deformable_roi_pooling(x, rois, trans, part_size=[1, 2, 3])
        with pytest.raises(TypeError, match="sample_per_part must be an int, got 1.5"):
            layers.deformable_roi_pooling(x, rois, trans, sample_per_part=1.5)
        with pytest.raises(ValueError, match="trans 'x2' must be 4-D"):
            layers.deformable_roi_pooling(x, rois, layers.data("x2", [3]))
        with pytest.raises(ValueError, match="trans_std must be a float >= 0"):
            layers.deformable_roi_pooling(x, rois, trans, trans_std=-0.1)


def test_deformable_roi_pooling_values():
    from ..ops.test_deformable_ops import ref_dpsroi  # noqa: PLC0415

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [8, 6, 7], dtype="float64")
        rois = layers.data("rois", [4], dtype="float64", lod_level=1)
        trans = layers.data("trans", [4, 2, 2], dtype="float64")
        out = layers.deformable_roi_pooling(x, rois, trans, group_size=[2, 2],
                                            pooled_height=2, pooled_width=2,
                                            sample_per_part=3, trans_std=0.3,
                                            position_sensitive=True)
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 8, 6, 7))
    tv = rng.uniform(-1.0, 1.0, (3, 4, 2, 2))
    place = fluid.CPUPlace()
    feed = {"x": xv, "trans": tv, "rois": fluid.create_lod_tensor(D_ROIS, [[2, 1]], place)}
    (got,), _ = _run(main, startup, feed, [out])
    want, _, _, _ = ref_dpsroi(xv, D_ROIS, [0, 0, 1], tv, False, 1.0, 2, [2, 2], 2, 2, [2, 2],
                               3, 0.3)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_gradients_through_deformable_roi_pooling():
    """conv2d → deformable_roi_pooling with learnt shifts: the gradients of the conv's
    filter and of the shifts equal central differences (ROIs and shifts keep every sample
    inside the map)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 2, 6, 7))
    weights = rng.standard_normal((3, 2, 2, 2))
    shifts = rng.uniform(-0.5, 0.5, (3, 4, 2, 2))
    rois = fluid.create_lod_tensor(D_ROIS, [[2, 1]], fluid.CPUPlace())

    def build():
        xv = layers.data("x", [2, 6, 7], dtype="float64")
        rv = layers.data("rois", [4], dtype="float64", lod_level=1)
        wv = layers.data("wt", [3, 2, 2, 2], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 8, 1, param_attr="cw", bias_attr=False)
        # assign_value carries float32 only; the helper makes every parameter float64
        tr = layers.create_parameter([3, 4, 2, 2], "float32", name="tr",
                                     default_initializer=NumpyArrayInitializer(shifts))
        out = layers.deformable_roi_pooling(h, rv, tr, group_size=[2, 2], pooled_height=2,
                                            pooled_width=2, sample_per_part=2,
                                            position_sensitive=True)
        return layers.reduce_sum(layers.elementwise_mul(out, wv))

    got = program_grads_and_numeric(build, {"x": x, "rois": rois, "wt": weights},
                                    ["cw", "tr"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name
