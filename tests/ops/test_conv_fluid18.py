"""Fluid 1.8 conv semantics that Paddle's own op tests (test_conv2d_op.py,
test_conv2d_transpose_op.py, test_pool2d_op.py, test_conv3d_transpose_op.py) found wrong, each
against an independent loop reference:

- ``padding_algorithm="SAME"`` resets the dilations to 1 and pads by the undilated kernel
  (conv_op.h's ``UpdatePaddingAndDilation``), for conv2d, depthwise_conv2d and
  conv2d_transpose, and in the layers' static shapes;
- ``depthwise_conv2d_transpose`` (what ``layers.conv2d_transpose`` emits for ``groups == C ==
  num_filters`` without cuDNN) computes as the grouped conv2d_transpose, NCHW and NHWC, with
  gradients checked by central differences;
- the layer errors Fluid raises: conv2d's dtype check (a TypeError before any shape check) and
  ``use_cudnn`` check (ValueError), pool2d's ``use_cudnn`` (TypeError) and VALID with
  ``ceil_mode`` (ValueError);
- ``layers.conv3d_transpose`` with ``data_format="NDHWC"``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from tests.programs import build as _build
from tests.programs import run as _run

from . import central_differences, conv2d_by_loops, run_op

GRAD = "@GRAD"


def _same_pads(in_hw, kernel, strides):
    """Fluid's SAME paddings ``(top, bottom, left, right)``: by the undilated kernel."""
    pads = []
    for size, k, s in zip(in_hw, kernel, strides, strict=True):
        total = max((math.ceil(size / s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def conv2d_transpose_by_loops(x, w, stride, pads, dilation, groups, out_hw=None):
    """Grouped conv2d_transpose (NCHW; ``w`` is ``[C, M/groups, KH, KW]``) element by element:
    each input element scatters ``x * w`` onto the full output, which is then cropped by
    ``pads`` (top, bottom, left, right) to ``out_hw`` (the natural size when None)."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // groups
    full_h = (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1
    full_w = (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1
    top, bottom, left, right = pads
    oh, ow = out_hw or (full_h - top - bottom, full_w - left - right)
    full = np.zeros((n, mg * groups, max(full_h, top + oh), max(full_w, left + ow)))
    for b in range(n):
        for ch in range(c):
            g = ch // cg
            for k in range(mg):
                for i in range(h):
                    for j in range(wd):
                        for a in range(kh):
                            for e in range(kw):
                                full[b, g * mg + k, i * stride[0] + a * dilation[0],
                                     j * stride[1] + e * dilation[1]] += x[b, ch, i, j] * \
                                    w[ch, k, a, e]
    return full[:, :, top:top + oh, left:left + ow]


# ---------------------------------------------------------------------------------------------
# SAME resets the dilations


@pytest.mark.parametrize("op", ["conv2d", "depthwise_conv2d"])
@pytest.mark.parametrize("stride", [(1, 1), (2, 2), (2, 1)])
def test_same_conv_ignores_dilations(op, stride):
    # Paddle's TestDepthwiseConvWithDilation_AsyPadding_PaddingSAMEOp: groups 3, dilation 2
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6))
    w = rng.standard_normal((6, 1, 3, 3))
    attrs = {"strides": list(stride), "paddings": [1, 1, 2, 1], "dilations": [2, 2],
             "groups": 3, "padding_algorithm": "SAME"}
    out = run_op(op, {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    pads = _same_pads((5, 6), (3, 3), stride)
    dout = rng.standard_normal(out.shape)
    ref, ref_dx, ref_dw = conv2d_by_loops(x, w, stride, pads, (1, 1), 3, dout)
    assert out.shape == (2, 6, math.ceil(5 / stride[0]), math.ceil(6 / stride[1]))
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)
    grads = run_op(op + "_grad", {"Input": [x], "Filter": [w], "Output" + GRAD: [dout]},
                   attrs, ("Input" + GRAD, "Filter" + GRAD))
    np.testing.assert_allclose(grads["Input" + GRAD][0], ref_dx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(grads["Filter" + GRAD][0], ref_dw, rtol=1e-10, atol=1e-10)


def test_same_conv_nhwc_ignores_dilations():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 5))
    w = rng.standard_normal((6, 1, 3, 3))
    attrs = {"strides": [2, 2], "dilations": [2, 2], "groups": 3, "padding_algorithm": "SAME",
             "data_format": "NHWC"}
    out = run_op("depthwise_conv2d", {"Input": [x.transpose(0, 2, 3, 1)], "Filter": [w]},
                 attrs)["Output"][0]
    ref, _, _ = conv2d_by_loops(x, w, (2, 2), _same_pads((5, 5), (3, 3), (2, 2)), (1, 1), 3)
    np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 1), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op", ["conv2d_transpose", "depthwise_conv2d_transpose"])
def test_same_conv_transpose_ignores_dilations(op):
    # Paddle's TestWithSAMEPad: stride [2, 1], dilation [1, 2], a 4x3 filter
    rng = np.random.default_rng(3)
    groups, c = (1, 3) if op == "conv2d_transpose" else (3, 3)
    x = rng.standard_normal((2, c, 6, 5))
    w = rng.standard_normal((c, 6 if groups == 1 else 1, 4, 3))
    attrs = {"strides": [2, 1], "dilations": [1, 2], "groups": groups,
             "padding_algorithm": "SAME"}
    out = run_op(op, {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    # SAME pads by the op's input, as conv_transpose_op.cc
    ref = conv2d_transpose_by_loops(x, w, (2, 1), _same_pads((6, 5), (4, 3), (2, 1)), (1, 1),
                                    groups)
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------------
# depthwise_conv2d_transpose

_DW_CASES = {  # id: (x shape NCHW, kernel, attrs, pads for the reference or None: SAME/VALID)
    "plain": ((2, 4, 4, 5), (3, 3), {"strides": [1, 1], "paddings": [1, 1]}),
    "asymmetric_stride": ((2, 3, 4, 4), (3, 2),
                          {"strides": [2, 2], "paddings": [1, 0, 1, 2]}),
    "same": ((1, 3, 5, 4), (3, 3), {"strides": [2, 2], "padding_algorithm": "SAME"}),
    "valid_dilation": ((1, 2, 3, 4), (2, 2), {"strides": [1, 2], "dilations": [2, 1],
                                              "padding_algorithm": "VALID"}),
    "output_size": ((1, 2, 3, 3), (3, 3), {"strides": [2, 2], "paddings": [1, 1],
                                           "output_size": [6, 6]}),
}


def _dw_reference(x, w, attrs):
    c, h, wd = x.shape[1], x.shape[2], x.shape[3]
    kh, kw = w.shape[2:]
    stride = attrs.get("strides", [1, 1])
    dilation = attrs.get("dilations", [1, 1])
    algorithm = attrs.get("padding_algorithm", "EXPLICIT")
    if algorithm == "SAME":
        pads, dilation = _same_pads((h, wd), (kh, kw), stride), (1, 1)
    elif algorithm == "VALID":
        pads = (0, 0, 0, 0)
    else:
        p = attrs["paddings"]
        pads = (p[0], p[0], p[1], p[1]) if len(p) == 2 else tuple(p)
    return conv2d_transpose_by_loops(x, w, stride, pads, dilation, c,
                                     attrs.get("output_size") or None)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", list(_DW_CASES))
def test_depthwise_conv2d_transpose_forward(case, layout):
    rng = np.random.default_rng(4)
    xshape, (kh, kw), attrs = _DW_CASES[case]
    x = rng.standard_normal(xshape)
    w = rng.standard_normal((xshape[1], 1, kh, kw))
    attrs = {**attrs, "groups": xshape[1], "data_format": layout}
    feed = x.transpose(0, 2, 3, 1) if layout == "NHWC" else x
    out = run_op("depthwise_conv2d_transpose", {"Input": [feed], "Filter": [w]},
                 attrs)["Output"][0]
    ref = _dw_reference(x, w, attrs)
    np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 1) if layout == "NHWC" else ref,
                               rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", ["asymmetric_stride", "same", "output_size"])
def test_depthwise_conv2d_transpose_grad_matches_finite_differences(case, layout):
    rng = np.random.default_rng(5)
    xshape, (kh, kw), attrs = _DW_CASES[case]
    x = rng.standard_normal(xshape)
    if layout == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    w = rng.standard_normal((xshape[1], 1, kh, kw))
    attrs = {**attrs, "groups": xshape[1], "data_format": layout}
    ins = {"Input": [x], "Filter": [w]}
    out = run_op("depthwise_conv2d_transpose", ins, attrs)["Output"][0]
    seed = rng.standard_normal(out.shape)

    def f():
        return float((run_op("depthwise_conv2d_transpose", ins, attrs)["Output"][0] *
                      seed).sum())

    grads = run_op("depthwise_conv2d_transpose_grad",
                   {"Input": [x], "Filter": [w], "Output" + GRAD: [seed]}, attrs,
                   ("Input" + GRAD, "Filter" + GRAD))
    for slot, arr in (("Input", x), ("Filter", w)):
        np.testing.assert_allclose(grads[slot + GRAD][0], central_differences(f, arr),
                                   rtol=1e-6, atol=1e-6)


def test_depthwise_conv2d_transpose_grad_op_from_its_maker():
    from dask_fluid.ops import registry

    op = type("Op", (), {"type": "depthwise_conv2d_transpose",
                         "inputs": {"Input": ["x"], "Filter": ["w"]},
                         "outputs": {"Output": ["y"]}, "attrs": {"groups": 2}})()
    (desc,) = registry.get("depthwise_conv2d_transpose").grad(op)
    assert desc["type"] == "depthwise_conv2d_transpose_grad"
    assert desc["outputs"] == {"Input" + GRAD: ["x" + GRAD], "Filter" + GRAD: ["w" + GRAD]}


# ---------------------------------------------------------------------------------------------
# layers






@pytest.mark.parametrize("groups,num_filters,use_cudnn,want", [
    (3, 3, False, "depthwise_conv2d_transpose"),
    (3, 3, True, "conv2d_transpose"),
    (3, 6, False, "conv2d_transpose"),  # Fluid needs num_filters == C, not a multiple
    (None, 3, False, "conv2d_transpose"),
    (1, 3, False, "conv2d_transpose"),
])
def test_conv2d_transpose_layer_picks_the_op_as_fluid(groups, num_filters, use_cudnn, want):
    main, _, _ = _build(lambda: layers.conv2d_transpose(
        layers.data("x", [3, 4, 4]), num_filters, filter_size=3, groups=groups,
        use_cudnn=use_cudnn))
    ops = [op.type for op in main.global_block().ops]
    assert want in ops and ({"conv2d_transpose", "depthwise_conv2d_transpose"} - {want}
                            ).isdisjoint(ops)
    params = [p.name for p in main.global_block().all_parameters()]
    assert f"{want}_0.w_0" in params  # Fluid's LayerHelper is named after the op


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_depthwise_conv2d_transpose_layer_runs_and_trains(layout):
    rng = np.random.default_rng(6)
    shape = [3, 5, 4] if layout == "NCHW" else [5, 4, 3]

    def net():
        x = layers.data("x", shape)
        x.stop_gradient = False
        y = layers.conv2d_transpose(x, 3, filter_size=3, stride=2, padding=[1, 0, 1, 1],
                                    groups=3, use_cudnn=False, bias_attr=False,
                                    data_format=layout)
        loss = layers.reduce_sum(y * y)
        fluid.backward.append_backward(loss)
        return x, y

    main, startup, (x, y) = _build(net)
    xv = rng.standard_normal([2, *shape])
    (out, dx, w), scope = _run(main, startup, {"x": xv},
                               [y, x.name + GRAD, "depthwise_conv2d_transpose_0.w_0"])
    x_nchw = xv if layout == "NCHW" else xv.transpose(0, 3, 1, 2)
    ref = conv2d_transpose_by_loops(x_nchw, np.asarray(w, np.float64), (2, 2), (1, 0, 1, 1),
                                    (1, 1), 3)
    assert list(out.shape) == [d if d > 0 else 2 for d in y.shape]
    np.testing.assert_allclose(out, ref if layout == "NCHW" else ref.transpose(0, 2, 3, 1),
                               rtol=1e-5, atol=1e-5)
    assert dx.shape == xv.shape and np.abs(dx).sum() > 0


def test_conv2d_transpose_layer_same_shape_ignores_dilation():
    main, startup, y = _build(lambda: layers.conv2d_transpose(
        layers.data("x", [3, 6, 8]), 6, filter_size=[4, 3], stride=[2, 4], dilation=[1, 2],
        padding="SAME"))
    # SAME pads (6, 8) by the undilated (4, 3) and strides (2, 4): 2 rows, no columns (the
    # dilated kernel, 5 wide, would pad 1 column and give 32 columns)
    assert list(y.shape) == [-1, 6, (6 - 1) * 2 - 2 + 4, (8 - 1) * 4 - 0 + 3]
    (out,), _ = _run(main, startup, {"x": np.ones((1, 3, 6, 8), np.float32)}, [y])
    assert list(out.shape) == [1, *y.shape[1:]]


def test_conv2d_layer_same_dilated_runs_to_its_static_shape():
    main, startup, y = _build(lambda: layers.conv2d(
        layers.data("x", [3, 5, 7]), 6, 3, stride=2, dilation=2, padding="SAME", groups=3,
        use_cudnn=False))
    assert main.global_block().ops[0].type == "depthwise_conv2d"
    (out,), _ = _run(main, startup, {"x": np.ones((2, 3, 5, 7), np.float32)}, [y])
    assert list(out.shape) == [2, 6, 3, 4] and list(y.shape) == [-1, 6, 3, 4]


def test_conv2d_layer_errors_as_fluid():
    # the dtype is checked first: a 5-D int32 input is a TypeError, not a shape error
    with pytest.raises(TypeError, match="float16, float32 or float64"):
        _build(lambda: layers.conv2d(layers.data("x", [3, 4, 5, 6], dtype="int32"), 1, 1))
    with pytest.raises(ValueError, match="use_cudnn must be True or False"):
        _build(lambda: layers.conv2d(layers.data("x", [3, 5, 5]), 3, 3, use_cudnn=[0]))
    with pytest.raises(ValueError, match="use_cudnn must be True or False"):
        _build(lambda: layers.conv2d_transpose(layers.data("x", [3, 5, 5]), 3, filter_size=3,
                                               use_cudnn=1))


def test_conv2d_layer_without_groups_on_one_channel_stays_conv2d():
    # Fluid compares num_channels with groups as given: None never selects depthwise
    main, _, _ = _build(lambda: layers.conv2d(layers.data("x", [1, 5, 5]), 2, 3,
                                              use_cudnn=False))
    assert main.global_block().ops[0].type == "conv2d"
    main, _, _ = _build(lambda: layers.conv2d(layers.data("x", [3, 5, 5]), 6, 3, groups=3,
                                              use_cudnn=False))
    assert main.global_block().ops[0].type == "depthwise_conv2d"
    assert "depthwise_conv2d_0.w_0" in [p.name for p in main.global_block().all_parameters()]


def test_pool2d_layer_errors_as_fluid():
    with pytest.raises(TypeError, match="use_cudnn must be True or False"):
        _build(lambda: layers.pool2d(layers.data("x", [5, 5, 3]), 3, use_cudnn=[0],
                                     data_format="NHWC"))
    with pytest.raises(ValueError, match="'VALID' needs ceil_mode=False"):
        _build(lambda: layers.pool2d(layers.data("x", [3, 5, 5]), 3, pool_padding="VALID",
                                     ceil_mode=True))


def test_conv3d_transpose_layer_ndhwc_matches_ncdhw():
    rng = np.random.default_rng(8)
    xv = rng.standard_normal((2, 2, 3, 4, 3)).astype(np.float32)  # NCDHW
    w_init = fluid.initializer.NumpyArrayInitializer(
        rng.standard_normal((2, 3, 2, 2, 3)).astype(np.float32))

    def net(layout):
        shape = [2, 3, 4, 3] if layout == "NCDHW" else [3, 4, 3, 2]
        return layers.conv3d_transpose(
            layers.data("x", shape), 3, filter_size=[2, 2, 3], stride=[1, 2, 1],
            padding=[[0, 0], [1, 0], [0, 1], [1, 1], [0, 0]] if layout == "NDHWC" else
            [1, 0, 0, 1, 1, 1], param_attr=fluid.ParamAttr(initializer=w_init),
            bias_attr=fluid.ParamAttr(initializer=fluid.initializer.Constant(0.5)),
            data_format=layout)

    main, startup, y = _build(lambda: net("NCDHW"))
    (ref,), _ = _run(main, startup, {"x": xv}, [y])
    main, startup, y = _build(lambda: net("NDHWC"))
    op = main.global_block().ops[0]
    assert op.type == "conv3d_transpose" and op.attrs["data_format"] == "NHWC"
    assert list(y.shape) == [-1, *ref.shape[2:], 3]
    (out,), _ = _run(main, startup, {"x": xv.transpose(0, 2, 3, 4, 1)}, [y])
    np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 4, 1), rtol=1e-5, atol=1e-5)
