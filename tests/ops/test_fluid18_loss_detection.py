"""Loss, metric and detection kernels against Fluid 1.8's arithmetic, found by running Paddle
1.8's own op tests: box_coder's prior centre, list attrs given as numpy arrays (affine_grid,
box_coder, yolo_box, yolov3_loss, chunk_eval), and the ops Paddle tests that were missing
(hinge_loss, modified_huber_loss, dequantize_log). References are written out element by
element after the C++ kernels; gradients are also in test_grad_check.py."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op
from .test_box_ops import ref_decode, ref_encode
from .test_grad_check import analytic_grads, forward, max_rel_err, numeric_grad, objective_outputs

# ---------------------------------------------------------------------------------------------
# box_coder: box_coder_op.h takes a prior's centre as x0 + w / 2 with w = x1 − x0 + 1 for not
# normalised boxes, half a pixel right of the corners' midpoint; a target's centre (encode)
# stays the midpoint.


@pytest.mark.parametrize("axis", [0, 1])
def test_box_coder_decode_unnormalised_prior_centre(axis):
    rng = np.random.default_rng(0)
    prior = rng.random((6, 4))  # unordered corners, as Paddle's test draws them
    target = rng.random((6, 6, 4))
    var = rng.random((6, 4))
    got = run_op("box_coder", {"PriorBox": [prior], "PriorBoxVar": [var], "TargetBox": [target]},
                 {"code_type": "decode_center_size", "box_normalized": False, "axis": axis})
    np.testing.assert_allclose(got["OutputBox"][0],
                               ref_decode(target, prior, var, False, axis),
                               rtol=1e-12, atol=1e-12)


def test_box_coder_encode_unnormalised_prior_centre():
    rng = np.random.default_rng(1)
    prior = rng.random((5, 4)) * 10
    prior[:, 2:] += prior[:, :2]
    target = rng.random((3, 4)) * 10
    target[:, 2:] += target[:, :2]
    var = rng.uniform(0.1, 1.0, (5, 4))
    got = run_op("box_coder", {"PriorBox": [prior], "PriorBoxVar": [var], "TargetBox": [target]},
                 {"code_type": "encode_center_size", "box_normalized": False})
    np.testing.assert_allclose(got["OutputBox"][0],
                               ref_encode(target, prior, var, False), rtol=1e-12)


def test_box_coder_variance_attr_as_numpy_array():
    # Paddle's TestBoxCoderOpWithVariance passes the attr as a float64 numpy array
    rng = np.random.default_rng(2)
    prior = rng.random((4, 4)).astype(np.float32)
    target = rng.random((4, 3, 4)).astype(np.float32)
    var = rng.random(4).astype(np.float32)
    got = run_op("box_coder", {"PriorBox": [prior], "TargetBox": [target]},
                 {"code_type": "decode_center_size", "box_normalized": False, "axis": 1,
                  "variance": var.astype(np.float64)})["OutputBox"][0]
    want = ref_decode(target.astype(np.float64), prior.astype(np.float64),
                                 var.astype(np.float64), False, 1)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# list attrs given as numpy arrays


def test_affine_grid_output_shape_attr_as_numpy_array():
    rng = np.random.default_rng(3)
    theta = rng.standard_normal((2, 2, 3))
    shape = np.array([2, 3, 4, 5], np.int32)
    got = run_op("affine_grid", {"Theta": [theta]}, {"output_shape": shape})["Output"][0]
    want = np.zeros((2, 4, 5, 2))
    ys, xs = np.linspace(-1, 1, 4), np.linspace(-1, 1, 5)
    for n in range(2):
        for i in range(4):
            for j in range(5):
                want[n, i, j] = theta[n] @ np.array([xs[j], ys[i], 1.0])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_yolo_attrs_as_numpy_arrays_match_lists():
    rng = np.random.default_rng(4)
    anchors, mask = [10, 13, 16, 30, 33, 23], [0, 2]
    x = rng.standard_normal((1, 2 * 7, 3, 3))
    img = np.array([[96, 96]], np.int32)
    attrs = {"anchors": anchors[:4], "class_num": 2, "conf_thresh": 0.1, "downsample_ratio": 32}
    as_list = run_op("yolo_box", {"X": [x], "ImgSize": [img]}, attrs)
    as_array = run_op("yolo_box", {"X": [x], "ImgSize": [img]},
                      {**attrs, "anchors": np.array(anchors[:4], np.int32)})
    np.testing.assert_array_equal(as_array["Boxes"][0], as_list["Boxes"][0])
    box = np.array([[[0.5, 0.5, 0.3, 0.4], [0.2, 0.7, 0.2, 0.2]]])
    label = np.array([[0, 1]], np.int32)
    ins = {"X": [x], "GTBox": [box], "GTLabel": [label]}
    attrs = {"anchors": anchors, "anchor_mask": mask, "class_num": 2, "ignore_thresh": 0.7,
             "downsample_ratio": 32}
    want = run_op("yolov3_loss", ins, attrs)["Loss"][0]
    got = run_op("yolov3_loss", ins, {**attrs, "anchors": np.array(anchors, np.int32),
                                      "anchor_mask": np.array(mask, np.int32)})["Loss"][0]
    np.testing.assert_array_equal(got, want)


def test_chunk_eval_excluded_chunk_types_as_numpy_array():
    # IOB with 2 chunk types: tag ids 0 B-0, 1 I-0, 2 B-1, 3 I-1, 4 O
    infer = np.array([[0, 1, 4, 2, 3]], np.int64)
    label = np.array([[0, 1, 4, 2, 4]], np.int64)
    ins = {"Inference": [infer], "Label": [label], "SeqLength": [np.array([5], np.int64)]}
    attrs = {"num_chunk_types": 2, "chunk_scheme": "IOB"}
    base = run_op("chunk_eval", ins, {**attrs, "excluded_chunk_types": [1]})
    got = run_op("chunk_eval", ins, {**attrs, "excluded_chunk_types": np.array([1], np.int32)})
    for slot in ("NumInferChunks", "NumLabelChunks", "NumCorrectChunks"):
        np.testing.assert_array_equal(got[slot][0], base[slot][0])
    # only the type-0 chunk (rows 0-1) is left, found by both
    assert int(got["NumInferChunks"][0][0]) == 1 and int(got["NumCorrectChunks"][0][0]) == 1


# ---------------------------------------------------------------------------------------------
# hinge_loss, modified_huber_loss (hinge_loss_op.h, modified_huber_loss_op.h)


def _grad_check(op_type, ins, attrs, slot):
    op, env = forward(op_type, ins, attrs)
    rng = np.random.default_rng(1)
    seeds = {n: rng.standard_normal(env[n].shape) for n in objective_outputs(op)}
    grads = analytic_grads(op, env, seeds)
    name = op.inputs[slot][0]
    num = numeric_grad(op, ins, attrs, seeds, slot, 0)
    assert max_rel_err(grads[name], num) <= 1e-6


def _away(x, points, gap=0.05):
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + np.where(x[near] >= p, 2 * gap, -2 * gap)
    return x


def test_hinge_loss_forward_and_grad():
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, (12, 1))
    y = rng.integers(0, 2, (12, 1)).astype(np.float64)
    got = run_op("hinge_loss", {"Logits": [x], "Labels": [y]})["Loss"][0]
    want = np.array([[max(0.0, 1 - x[i, 0] * (2 * y[i, 0] - 1))] for i in range(12)])
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert got.shape == (12, 1)
    # away from the kink at x·(2y − 1) = 1
    x = _away(x * (2 * y - 1), [1.0]) * (2 * y - 1)
    _grad_check("hinge_loss", {"Logits": [x], "Labels": [y]}, {}, "Logits")


def _mhl(v):
    if v < -1:
        return -4 * v
    if v < 1:
        return (1 - v) ** 2
    return 0.0


def test_modified_huber_loss_forward_and_grad():
    rng = np.random.default_rng(6)
    x = rng.uniform(-3, 3, (20, 1))
    y = rng.integers(0, 2, (20, 1)).astype(np.float64)
    res = run_op("modified_huber_loss", {"X": [x], "Y": [y]})
    v = x * (2 * y - 1)
    np.testing.assert_allclose(res["IntermediateVal"][0], v, rtol=1e-15)
    np.testing.assert_allclose(res["Out"][0], np.vectorize(_mhl)(v), rtol=1e-15)
    x = _away(v, [-1.0, 1.0]) * (2 * y - 1)
    _grad_check("modified_huber_loss", {"X": [x], "Y": [y]}, {}, "X")


@pytest.mark.parametrize("op,slots", [("hinge_loss", ("Logits", "Labels")),
                                      ("modified_huber_loss", ("X", "Y"))])
def test_pair_losses_check_shapes(op, slots):
    with pytest.raises(ValueError, match=r"must have shape \[N, 1\]"):
        run_op(op, {slots[0]: [np.zeros((3, 2))], slots[1]: [np.zeros((3, 2))]})
    with pytest.raises(ValueError, match="shape"):
        run_op(op, {slots[0]: [np.zeros((3, 1))], slots[1]: [np.zeros((4, 1))]})


# ---------------------------------------------------------------------------------------------
# dequantize_log (dequantize_log_op.cc)


def test_dequantize_log_matches_loop():
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (6, 7)).astype(np.int8)
    x[0, :3] = [-128, 0, 127]
    table = rng.random(128).astype(np.float32)
    got = run_op("dequantize_log", {"X": [x], "Dict": [table]})["Out"][0]
    want = np.zeros(x.shape, np.float32)
    for idx in np.ndindex(x.shape):
        q = int(x[idx])
        want[idx] = -2.0 ** float(table[q + 128]) if q < 0 else 2.0 ** float(table[q])
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got, want)


def test_dequantize_log_needs_int8():
    with pytest.raises(TypeError, match="int8"):
        run_op("dequantize_log", {"X": [np.zeros(3, np.int32)],
                                  "Dict": [np.zeros(128, np.float32)]})


# ---------------------------------------------------------------------------------------------
# cross_entropy / cross_entropy2 with a label whose trailing 1 is dropped (cross_entropy_op.cc:
# Y takes Label's shape, its last dim set to 1 only when Label has X's rank)


@pytest.mark.parametrize("op", ["cross_entropy", "cross_entropy2"])
@pytest.mark.parametrize("lead", [(6,), (2, 3)])
def test_cross_entropy_y_takes_the_labels_shape(op, lead):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.1, 1.0, (*lead, 5))
    x /= x.sum(-1, keepdims=True)
    label = rng.integers(0, 5, lead)
    want = -np.log(np.take_along_axis(x, label[..., None], -1))[..., 0]
    y = run_op(op, {"X": [x], "Label": [label]})["Y"][0]
    assert y.shape == lead  # Paddle's *RemoveLastDim cases
    np.testing.assert_allclose(y, want, rtol=1e-12)
    kept = run_op(op, {"X": [x], "Label": [label[..., None]]})["Y"][0]
    assert kept.shape == (*lead, 1)
    np.testing.assert_allclose(kept[..., 0], want, rtol=1e-12)
    _grad_check(op, {"X": [x], "Label": [label]}, {}, "X")


def test_cross_entropy_label_rank_must_be_xs_or_one_less():
    x = np.full((2, 3, 4), 0.25)
    with pytest.raises(ValueError, match="must have X's shape"):
        run_op("cross_entropy", {"X": [x], "Label": [np.zeros((2,), np.int64)]})


def test_cross_entropy_layer_shape_follows_the_label():
    import dask_fluid as fluid

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        p = fluid.data("p", [None, 5], "float32")
        assert fluid.layers.cross_entropy(p, fluid.data("l1", [None, 1], "int64")).shape == (
            -1, 1)
        assert fluid.layers.cross_entropy(p, fluid.data("l0", [None], "int64")).shape == (-1,)
