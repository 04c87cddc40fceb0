"""``layers.sigmoid_focal_loss``, ``bipartite_match``, ``target_assign`` and ``yolo_box`` as
Fluid 1.8 builds them: op types, slots, attributes and output shapes, values through the
executor (LoD inputs included) against numpy, the errors, and a whole program's gradient
through sigmoid_focal_loss against central differences."""

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


def _op(main, type):
    return next(o for o in main.global_block().ops if o.type == type)


def test_sigmoid_focal_loss_builds_op_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3])
        label = layers.data("label", [1], dtype="int32")
        fg = layers.data("fg", [1], dtype="int32", append_batch_size=False)
        out = layers.sigmoid_focal_loss(x, label, fg, gamma=1.0, alpha=0.5)
    op = _op(main, "sigmoid_focal_loss")
    assert op.input("X") == [x.name] and op.input("Label") == [label.name]
    assert op.input("FgNum") == [fg.name] and op.output("Out") == [out.name]
    assert op.attr("gamma") == 1.0 and op.attr("alpha") == 0.5
    assert out.shape == (-1, 3) and out.dtype == "float32"
    xv = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5]], np.float32)
    lv = np.array([[2], [0]], np.int32)
    (got,) = _run(main, startup, {"x": xv, "label": lv, "fg": np.array([2], np.int32)}, [out])
    p = 1 / (1 + np.exp(-xv.astype(np.float64)))
    pos = (np.arange(1, 4) == lv).astype(float)
    want = (-pos * 0.5 * (1 - p) * np.log(p) - (1 - pos) * 0.5 * p * np.log(1 - p)) / 2
    np.testing.assert_allclose(got, want, rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        xi = layers.data("xi", [3], dtype="int32")
        lf = layers.data("lf", [1])
        with pytest.raises(TypeError, match="x 'xi' must be float32 or float64, got int32"):
            layers.sigmoid_focal_loss(xi, label, fg)
        with pytest.raises(TypeError, match="label 'lf' must be int32, got float32"):
            layers.sigmoid_focal_loss(x, lf, fg)
        with pytest.raises(ValueError, match="last dimension of label must be 1"):
            layers.sigmoid_focal_loss(x, layers.data("l2", [2], dtype="int32"), fg)


def test_gradient_through_fc_and_sigmoid_focal_loss():
    """fc → sigmoid_focal_loss → sum: the fc parameters' gradients equal central
    differences of the loss."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 4))
    label = np.array([[1], [0], [3], [-1], [2]], np.int32)

    def build():
        xv = layers.data("x", [4], dtype="float64")
        lv = layers.data("label", [1], dtype="int32")
        fv = layers.data("fg", [1], dtype="int32", append_batch_size=False)
        logits = layers.fc(xv, 3, param_attr="w", bias_attr="b")
        return layers.reduce_sum(layers.sigmoid_focal_loss(logits, lv, fv, gamma=2.0,
                                                           alpha=0.3))

    got = program_grads_and_numeric(build, {"x": x, "label": label,
                                            "fg": np.array([3], np.int32)}, ["w", "b"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8, err_msg=name)
        assert np.abs(analytic).sum() > 0


def test_bipartite_match_and_target_assign_with_lod():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        dist = layers.data("dist", [4], lod_level=1)
        gt = layers.data("gt", [1, 2], lod_level=1)
        idx, mdist = layers.bipartite_match(dist)
        idx2, _ = layers.bipartite_match(dist, "per_prediction", 0.3)
        out, wt = layers.target_assign(gt, idx, mismatch_value=-5)
    op = _op(main, "bipartite_match")
    assert op.input("DistMat") == [dist.name]
    assert op.output("ColToRowMatchIndices") == [idx.name]
    assert op.output("ColToRowMatchDist") == [mdist.name]
    assert op.attr("match_type") == "bipartite" and op.attr("dist_threshold") == 0.5
    per = [o for o in main.global_block().ops if o.type == "bipartite_match"][1]
    assert per.attr("match_type") == "per_prediction" and per.attr("dist_threshold") == 0.3
    assert idx.dtype == "int32" and idx.shape == (-1, 4) and mdist.dtype == "float32"
    ta = _op(main, "target_assign")
    assert ta.input("X") == [gt.name] and ta.input("MatchIndices") == [idx.name]
    assert not ta.inputs.get("NegIndices") and ta.attr("mismatch_value") == -5
    assert out.shape == (-1, 4, 2) and wt.shape == (-1, 4, 1) and wt.dtype == "float32"
    dv = np.array([[0.1, 0.8, 0.2, 0.0], [0.7, 0.3, 0.4, 0.1],  # instance 0: 2 rows
                   [0.2, 0.1, 0.6, 0.35]], np.float32)  # instance 1: 1 row
    gv = np.arange(6, dtype=np.float32).reshape(3, 1, 2)
    place = fluid.CPUPlace()
    feed = {"dist": fluid.create_lod_tensor(dv, [[2, 1]], place),
            "gt": fluid.create_lod_tensor(gv, [[2, 1]], place)}
    gi, gd, gi2, go, gw = _run(main, startup, feed, [idx, mdist, idx2, out, wt])
    np.testing.assert_array_equal(gi, [[1, 0, -1, -1], [-1, -1, 0, -1]])
    np.testing.assert_allclose(gd, [[0.7, 0.8, 0, 0], [0, 0, 0.6, 0]], rtol=1e-6)
    # per_prediction: the free columns take their best row at >= 0.3
    np.testing.assert_array_equal(gi2, [[1, 0, 1, -1], [-1, -1, 0, 0]])
    want = np.full((2, 4, 2), -5.0, np.float32)
    want[0, 0], want[0, 1], want[1, 2] = gv[1, 0], gv[0, 0], gv[2, 0]
    np.testing.assert_array_equal(go, want)
    np.testing.assert_array_equal(gw[:, :, 0], [[1, 1, 0, 0], [0, 0, 1, 0]])


def test_target_assign_negative_indices_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        gt = layers.data("gt", [2, 1], lod_level=1)
        match = layers.data("m", [3], dtype="int32")
        neg = layers.data("neg", [1], dtype="int32", lod_level=1)
        out, wt = layers.target_assign(gt, match, negative_indices=neg)
    ta = _op(main, "target_assign")
    assert ta.input("NegIndices") == [neg.name] and ta.attr("mismatch_value") == 0
    assert out.shape == (-1, 3, 1)
    gv = np.array([[[1.0], [2.0]], [[3.0], [4.0]]], np.float32)
    mv = np.array([[0, -1, -1], [-1, -1, 0]], np.int32)
    place = fluid.CPUPlace()
    feed = {"gt": fluid.create_lod_tensor(gv, [[1, 1]], place), "m": mv,
            "neg": fluid.create_lod_tensor(np.array([[2], [0]], np.int32), [[1, 1]], place)}
    go, gw = _run(main, startup, feed, [out, wt])
    np.testing.assert_array_equal(go[:, :, 0], [[1, 0, 0], [0, 0, 3]])  # column 2 % P = 0
    np.testing.assert_array_equal(gw[:, :, 0], [[1, 0, 1], [1, 0, 1]])
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match="matched_indices 'mf' must be int32, got float32"):
            layers.target_assign(gt, layers.data("mf", [3]))
        with pytest.raises(ValueError, match="input must have rank 3"):
            layers.target_assign(layers.data("g2", [2]), match)
        with pytest.raises(ValueError, match="match_type must be 'bipartite' or"):
            layers.bipartite_match(layers.data("d", [3]), match_type="greedy")
        with pytest.raises(TypeError, match="dist_matrix must be a Variable"):
            layers.bipartite_match(np.zeros((2, 2)))


def test_yolo_box_builds_op_and_decodes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [2 * 7, 2, 3])
        img = layers.data("img", [2], dtype="int32")
        boxes, scores = layers.yolo_box(x, img, [10, 20, 30, 40], 2, 0.01, 16,
                                        clip_bbox=False)
    op = _op(main, "yolo_box")
    assert op.input("X") == [x.name] and op.input("ImgSize") == [img.name]
    assert op.output("Boxes") == [boxes.name] and op.output("Scores") == [scores.name]
    assert op.attr("anchors") == [10, 20, 30, 40] and op.attr("class_num") == 2
    assert op.attr("conf_thresh") == 0.01 and op.attr("downsample_ratio") == 16
    assert op.attr("clip_bbox") is False and op.attr("scale_x_y") == 1.0
    assert boxes.shape == (-1, 12, 4) and scores.shape == (-1, 12, 2)
    xv = np.random.default_rng(0).standard_normal((1, 14, 2, 3)).astype(np.float32)
    gb, gs = _run(main, startup, {"x": xv, "img": np.array([[64, 96]], np.int32)},
                  [boxes, scores])
    # anchor 1, row 1, column 2 is box 1·6 + 1·3 + 2 = 11
    t = xv[0, 7:14, 1, 2].astype(np.float64)

    def sig(v):
        return 1 / (1 + math.exp(-v))

    cx, cy = (2 + sig(t[0])) * 96 / 2, (1 + sig(t[1])) * 64 / 2  # 1.8 divides by H
    bw, bh = math.exp(t[2]) * 30 * 96 / 32, math.exp(t[3]) * 40 * 64 / 32
    np.testing.assert_allclose(gb[0, 11], [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2],
                               rtol=1e-5)
    np.testing.assert_allclose(gs[0, 11], [sig(t[4]) * sig(t[5]), sig(t[4]) * sig(t[6])],
                               rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(TypeError, match="conf_thresh must be a float"):
            layers.yolo_box(x, img, [10, 20, 30, 40], 2, 1, 16)
        with pytest.raises(ValueError, match="must have len\\(anchors\\) / 2 \\* \\(5 \\+ "
                                             "class_num\\) = 21 channels, got 14"):
            layers.yolo_box(x, img, [10, 20, 30, 40, 5, 5], 2, 0.1, 16)
        with pytest.raises(TypeError, match="img_size 'imf' must be int32"):
            layers.yolo_box(x, layers.data("imf", [2]), [10, 20, 30, 40], 2, 0.1, 16)


ANCHORS = [10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119]
GT_BOX = np.array([[[0.2, 0.3, 0.15, 0.2], [0.7, 0.6, 0.4, 0.3], [0.0, 0.0, 0.0, 0.0]],
                   [[0.45, 0.15, 0.3, 0.5], [0.85, 0.75, 0.1, 0.12], [0.1, 0.9, 0.25, 0.2]]])
GT_LABEL = np.array([[0, 2, 1], [1, 1, 0]], np.int32)


def test_yolov3_loss_builds_op_and_computes():
    from ..ops.test_detection_target_ops import ref_yolov3

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [16, 4, 4], dtype="float64")
        box = layers.data("box", [3, 4], dtype="float64")
        label = layers.data("label", [3], dtype="int32")
        score = layers.data("score", [3], dtype="float64")
        loss = layers.yolov3_loss(x, box, label, ANCHORS, [1, 2], 3, 0.5, 32,
                                  gt_score=score, use_label_smooth=False, scale_x_y=1.05)
    op = _op(main, "yolov3_loss")
    assert op.input("X") == [x.name] and op.input("GTBox") == [box.name]
    assert op.input("GTLabel") == [label.name] and op.input("GTScore") == [score.name]
    assert op.output("Loss") == [loss.name]
    assert op.attr("anchors") == ANCHORS and op.attr("anchor_mask") == [1, 2]
    assert op.attr("class_num") == 3 and op.attr("ignore_thresh") == 0.5
    assert op.attr("downsample_ratio") == 32 and op.attr("use_label_smooth") is False
    assert op.attr("scale_x_y") == 1.05
    block = main.global_block()
    assert loss.shape == (-1,)
    assert block.var(op.output("ObjectnessMask")[0]).shape == (-1, 2, 4, 4)
    gm = block.var(op.output("GTMatchMask")[0])
    assert gm.shape == (-1, 3) and gm.dtype == "int32"
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((2, 16, 4, 4)) * 0.5
    sv = rng.uniform(0.5, 1.0, (2, 3))
    (got,) = _run(main, startup, {"x": xv, "box": GT_BOX, "label": GT_LABEL, "score": sv},
                  [loss])
    want, _, _ = ref_yolov3(xv, GT_BOX, GT_LABEL, sv, ANCHORS, [1, 2], 3, 0.5, 32, False,
                            float(np.float32(1.05)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="anchor_mask must index the 6 anchors, got \\[6\\]"):
            layers.yolov3_loss(x, box, label, ANCHORS, [6], 3, 0.5, 32)
        with pytest.raises(TypeError, match="ignore_thresh must be a float, got 1"):
            layers.yolov3_loss(x, box, label, ANCHORS, [1, 2], 3, 1, 32)
        with pytest.raises(ValueError, match="= 24 channels, got 16"):
            layers.yolov3_loss(x, box, label, ANCHORS, [0, 1, 2], 3, 0.5, 32)
        with pytest.raises(ValueError, match="x must have H == W"):
            layers.yolov3_loss(layers.data("x2", [16, 4, 5], dtype="float64"), box, label,
                               ANCHORS, [1, 2], 3, 0.5, 32)


def test_gradient_through_conv_and_yolov3_loss():
    """conv2d → yolov3_loss → sum: the filter's and bias's gradients equal central
    differences of the loss (no prediction sits near the ignore threshold)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 4, 4)) * 0.5

    def build():
        xv = layers.data("x", [3, 4, 4], dtype="float64")
        bv = layers.data("box", [3, 4], dtype="float64")
        lv = layers.data("label", [3], dtype="int32")
        head = layers.conv2d(xv, 16, 1, param_attr=fluid.ParamAttr(
            "filt", initializer=fluid.initializer.Normal(0.0, 0.3)), bias_attr="hb")
        return layers.reduce_sum(layers.yolov3_loss(head, bv, lv, ANCHORS, [0, 1], 3, 0.7, 32))

    got = program_grads_and_numeric(build, {"x": x, "box": GT_BOX, "label": GT_LABEL},
                                    ["filt", "hb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0
