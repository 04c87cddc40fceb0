"""Layer tests of dask_fluid/layers/detection_assign.py: roi_perspective_transform's program
structure, static shapes, values through the executor and gradients through a program."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_detection_assign_ops import (
    QUADS,
    _map_data,
    _rdo_data,
    _rpn_data,
    _tp_fp,
    map_reference,
    rdo_reference,
    reference,
    rpn_reference,
)
from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch, return_numpy=True):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, return_numpy=return_numpy)


def test_roi_perspective_transform_builds_fluids_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 7, 8])
        rois = layers.data("rois", [8], lod_level=1)
        out, mask, matrix = layers.roi_perspective_transform(x, rois, 4, 5, 0.5)
    op = main.global_block().ops[-1]
    assert op.type == "roi_perspective_transform"
    assert op.input("X") == [x.name] and op.input("ROIs") == [rois.name]
    assert op.output("Out") == [out.name] and op.output("Mask") == [mask.name]
    assert op.output("TransformMatrix") == [matrix.name]
    assert len(op.output("Out2InIdx")) == 1 and len(op.output("Out2InWeights")) == 1
    assert {k: op.attr(k) for k in ("transformed_height", "transformed_width",
                                    "spatial_scale")} == {
        "transformed_height": 4, "transformed_width": 5, "spatial_scale": 0.5}
    assert tuple(out.shape) == (-1, 3, 4, 5) and out.dtype == "float32"
    assert tuple(mask.shape) == (-1, 1, 4, 5) and mask.dtype == "int32"
    assert tuple(matrix.shape) == (-1, 9)
    assert mask.stop_gradient and matrix.stop_gradient and not out.stop_gradient


def test_roi_perspective_transform_values_and_lod():
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 7, 8])
        rois = layers.data("rois", [8], lod_level=1)
        outs = layers.roi_perspective_transform(x, rois, 3, 6, spatial_scale=0.8)
    feed = {"x": xv, "rois": fluid.create_lod_tensor(QUADS.astype(np.float32), [[1, 3]],
                                                     fluid.CPUPlace())}
    lod_out, mask, matrix = _run(main, startup, feed, list(outs), return_numpy=False)
    out, mask, matrix = (np.array(v) for v in (lod_out, mask, matrix))
    ref_out, ref_mask, ref_mat, _ = reference(xv.astype(np.float64), QUADS, (0, 1, 4), 3, 6,
                                              0.8)
    np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(mask, ref_mask)
    np.testing.assert_allclose(matrix, ref_mat, rtol=1e-4, atol=1e-5)
    assert lod_out.recursive_sequence_lengths() == [[1, 3]]


def test_roi_perspective_transform_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = layers.data("x", [3, 7, 8])
        rois = layers.data("rois", [8], lod_level=1)
        with pytest.raises(TypeError, match="transformed_height must be an int"):
            layers.roi_perspective_transform(x, rois, 2.0, 3)
        with pytest.raises(ValueError, match="transformed_width must be greater than 0"):
            layers.roi_perspective_transform(x, rois, 2, 0)
        with pytest.raises(TypeError, match="spatial_scale must be a float"):
            layers.roi_perspective_transform(x, rois, 2, 3, spatial_scale=1)
        with pytest.raises(TypeError, match="input 'xi' must be float32 or float64"):
            layers.roi_perspective_transform(layers.data("xi", [3, 7, 8], dtype="int32"),
                                             rois, 2, 3)
        with pytest.raises(ValueError, match=r"must have shape \(num_rois, 8\)"):
            layers.roi_perspective_transform(x, layers.data("r4", [4], lod_level=1), 2, 3)
        with pytest.raises(ValueError, match="NCHW"):
            layers.roi_perspective_transform(layers.data("x3", [7, 8]), rois, 2, 3)
        with pytest.raises(TypeError, match="rois"):
            layers.roi_perspective_transform(x, QUADS, 2, 3)


def test_gradients_through_conv2d_roi_perspective_transform():
    """conv2d → roi_perspective_transform (two images, three quads, one running off the
    map) → a weighted sum: the conv parameters' gradients equal central differences."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 2, 8, 9))
    weights = rng.standard_normal((3, 3, 3, 4))
    rois = fluid.create_lod_tensor(QUADS[[0, 1, 3]], [[2, 1]], fluid.CPUPlace())

    def build():
        xv = layers.data("x", [2, 8, 9], dtype="float64")
        rv = layers.data("rois", [8], dtype="float64", lod_level=1)
        wv = layers.data("wt", [3, 3, 3, 4], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 3, 2, param_attr="filt", bias_attr="cb")  # [N, 3, 7, 8]
        h, _, _ = layers.roi_perspective_transform(h, rv, 3, 4)  # [3, 3, 3, 4]
        return layers.reduce_sum(layers.elementwise_mul(h, wv))

    got = program_grads_and_numeric(build, {"x": x, "rois": rois, "wt": weights},
                                    ["filt", "cb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["filt"][0]).sum() > 0


# ---------------------------------------------------------------------------------------------
# rpn_target_assign

def _rpn_program(use_random=False, dtype="float32"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        bbox_pred = layers.data("bbox_pred", [140, 4], dtype=dtype)
        cls_logits = layers.data("cls_logits", [140, 1], dtype=dtype)
        anchor = layers.data("anchor", [140, 4], dtype=dtype, append_batch_size=False)
        var = layers.data("var", [140, 4], dtype=dtype, append_batch_size=False)
        gt = layers.data("gt", [4], dtype=dtype, lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        info = layers.data("info", [3], dtype=dtype)
        outs = layers.rpn_target_assign(bbox_pred, cls_logits, anchor, var, gt, crowd, info,
                                        rpn_batch_size_per_im=12, rpn_straddle_thresh=2.0,
                                        rpn_fg_fraction=0.5, rpn_positive_overlap=0.5,
                                        rpn_negative_overlap=0.3, use_random=use_random)
    return main, startup, outs


def _rpn_feed(dtype=np.float32):
    anchor, gt, crowd, lod, im_info = _rpn_data(np.random.default_rng(0))
    rng = np.random.default_rng(3)
    place = fluid.CPUPlace()
    lens = [[lod[1] - lod[0], lod[2] - lod[1]]]
    return {"bbox_pred": rng.standard_normal((2, 140, 4)).astype(dtype),
            "cls_logits": rng.standard_normal((2, 140, 1)).astype(dtype),
            "anchor": anchor.astype(dtype), "var": np.ones((140, 4), dtype),
            "gt": fluid.create_lod_tensor(gt.astype(dtype), lens, place),
            "crowd": fluid.create_lod_tensor(crowd, lens, place),
            "info": im_info.astype(dtype)}, (anchor, gt, crowd, lod, im_info)


def test_rpn_target_assign_builds_fluids_program():
    main, _, outs = _rpn_program()
    ops = main.global_block().ops
    op = next(o for o in ops if o.type == "rpn_target_assign")
    assert [o.type for o in ops[-5:]] == ["rpn_target_assign", "reshape2", "reshape2",
                                          "gather", "gather"]
    assert op.input("Anchor") == ["anchor"] and op.input("GtBoxes") == ["gt"]
    assert op.input("IsCrowd") == ["crowd"] and op.input("ImInfo") == ["info"]
    assert {k: op.attr(k) for k in ("rpn_batch_size_per_im", "rpn_straddle_thresh",
                                    "rpn_positive_overlap", "rpn_negative_overlap",
                                    "rpn_fg_fraction", "use_random")} == {
        "rpn_batch_size_per_im": 12, "rpn_straddle_thresh": 2.0, "rpn_positive_overlap": 0.5,
        "rpn_negative_overlap": 0.3, "rpn_fg_fraction": 0.5, "use_random": False}
    scores, location, label, bbox, weight = outs
    assert op.output("TargetLabel") == [label.name] and op.output("TargetBBox") == [bbox.name]
    assert op.output("BBoxInsideWeight") == [weight.name]
    gathers = [o for o in ops if o.type == "gather"]
    assert gathers[0].input("Index") == op.output("ScoreIndex")
    assert gathers[1].input("Index") == op.output("LocationIndex")
    assert tuple(label.shape) == (-1, 1) and label.dtype == "int32"
    assert tuple(bbox.shape) == (-1, 4) and tuple(weight.shape) == (-1, 4)
    assert label.stop_gradient and bbox.stop_gradient and weight.stop_gradient


def test_rpn_target_assign_values():
    main, startup, outs = _rpn_program()
    feed, (anchor, gt, crowd, lod, im_info) = _rpn_feed()
    got = [np.array(v) for v in _run(main, startup, feed, list(outs), return_numpy=False)]
    ref = rpn_reference(anchor.tolist(), gt.tolist(), crowd.ravel().tolist(), lod,
                        im_info.tolist(), 12, 2.0, 0.5, 0.3, 0.5)
    loc = [v for r in ref for v in r[0]]
    score = [v for r in ref for v in r[1]]
    np.testing.assert_allclose(got[0], feed["cls_logits"].reshape(-1, 1)[score])
    np.testing.assert_allclose(got[1], feed["bbox_pred"].reshape(-1, 4)[loc])
    np.testing.assert_array_equal(got[2], np.array([v for r in ref for v in r[3]])[:, None])
    np.testing.assert_allclose(got[3], np.array([v for r in ref for v in r[2]]), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_array_equal(got[4], np.array([v for r in ref for v in r[4]]))


def test_rpn_target_assign_use_random_runs():
    main, startup, outs = _rpn_program(use_random=True)
    feed, _ = _rpn_feed()
    got = _run(main, startup, feed, [outs[2]], return_numpy=False)[0]
    lens = got.recursive_sequence_lengths()[0]
    assert len(lens) == 2 and all(0 < n <= 12 for n in lens)
    assert int(np.array(got).sum()) <= 12  # at most 6 foreground per image


def test_rpn_target_assign_use_random_draws_from_the_programs_stream():
    """The sample is a per-op stream kept with the scope and seeded by the program's
    random_seed, as the random ops': a fresh scope replays it, a second run draws anew."""
    main, startup, outs = _rpn_program(use_random=True)
    main.random_seed = 7
    feed, _ = _rpn_feed()
    exe = fluid.Executor(fluid.CPUPlace())

    def two_runs():
        scope = fluid.Scope()
        exe.run(startup, scope=scope)
        return [np.array(exe.run(main, feed=feed, fetch_list=[outs[0]], scope=scope,
                                 return_numpy=False)[0])
                for _ in range(2)]

    first, again = two_runs(), two_runs()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert first[0].shape != first[1].shape or not np.array_equal(first[0], first[1])


def test_rpn_target_assign_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        f = layers.data("f", [4])
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        with pytest.raises(TypeError, match="is_crowd 'f' must be int32"):
            layers.rpn_target_assign(f, f, f, f, f, f, f)
        with pytest.raises(TypeError, match="use_random must be a bool"):
            layers.rpn_target_assign(f, f, f, f, f, crowd, f, use_random=1)
        with pytest.raises(TypeError, match="gt_boxes 'i' must be float32 or float64"):
            layers.rpn_target_assign(f, f, f, f, layers.data("i", [4], dtype="int64"), crowd,
                                     f)
        with pytest.raises(ValueError, match="anchor_box 'a3' must be 2-D"):
            layers.rpn_target_assign(f, f, layers.data("a3", [2, 4]), f, f, crowd, f)


def test_gradients_through_rpn_target_assign():
    """fc heads → rpn_target_assign's gathers → a loss: the heads' gradients equal central
    differences (only the sampled rows get gradient)."""
    feed, _ = _rpn_feed(np.float64)
    rng = np.random.default_rng(4)
    feats = rng.standard_normal((2, 140, 3))
    feed = {k: v for k, v in feed.items() if k not in ("bbox_pred", "cls_logits")}
    feed["feats"] = feats

    def build():
        x = layers.data("feats", [140, 3], dtype="float64")
        anchor = layers.data("anchor", [140, 4], dtype="float64", append_batch_size=False)
        var = layers.data("var", [140, 4], dtype="float64", append_batch_size=False)
        gt = layers.data("gt", [4], dtype="float64", lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        info = layers.data("info", [3], dtype="float64")
        cls = layers.fc(x, 1, num_flatten_dims=2, param_attr="cw", bias_attr="cb")
        box = layers.fc(x, 4, num_flatten_dims=2, param_attr="bw", bias_attr="bb")
        scores, loc, _, tbox, weight = layers.rpn_target_assign(
            box, cls, anchor, var, gt, crowd, info, rpn_batch_size_per_im=12,
            rpn_straddle_thresh=2.0, rpn_positive_overlap=0.5, use_random=False)
        diff = layers.elementwise_mul(layers.elementwise_sub(loc, tbox), weight)
        return layers.elementwise_add(layers.reduce_sum(layers.elementwise_mul(diff, diff)),
                                      layers.reduce_sum(scores))

    got = program_grads_and_numeric(build, feed, ["cw", "cb", "bw", "bb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["bw"][0]).sum() > 0


# ---------------------------------------------------------------------------------------------
# retinanet_target_assign

def test_retinanet_target_assign_program_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        bbox_pred = layers.data("bbox_pred", [140, 4])
        cls_logits = layers.data("cls_logits", [140, 3])
        anchor = layers.data("anchor", [140, 4], append_batch_size=False)
        var = layers.data("var", [140, 4], append_batch_size=False)
        gt = layers.data("gt", [4], lod_level=1)
        labels = layers.data("labels", [1], dtype="int32", lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        info = layers.data("info", [3])
        outs = layers.retinanet_target_assign(bbox_pred, cls_logits, anchor, var, gt, labels,
                                              crowd, info, num_classes=3,
                                              positive_overlap=0.45, negative_overlap=0.3)
    ops = main.global_block().ops
    op = next(o for o in ops if o.type == "retinanet_target_assign")
    assert [o.type for o in ops[-5:]] == ["retinanet_target_assign", "reshape2", "reshape2",
                                          "gather", "gather"]
    assert op.input("GtLabels") == ["labels"] and op.input("IsCrowd") == ["crowd"]
    assert op.output("ForegroundNumber") == [outs[5].name]
    assert {k: op.attr(k) for k in ("positive_overlap", "negative_overlap")} == {
        "positive_overlap": 0.45, "negative_overlap": 0.3}
    assert outs[2].dtype == "int32" and outs[5].dtype == "int32" and outs[5].stop_gradient
    reshape_op = next(o for o in ops if o.type == "reshape2")
    assert list(reshape_op.attr("shape")) == [-1, 3]

    feed, (anchor_v, gt_v, crowd_v, lod, im_info) = _rpn_feed()
    rng = np.random.default_rng(2)
    feed["cls_logits"] = rng.standard_normal((2, 140, 3)).astype(np.float32)
    lab = np.array([[3], [1], [7], [2], [5]], np.int32)
    feed["labels"] = fluid.create_lod_tensor(lab, [[3, 2]], fluid.CPUPlace())
    got = [np.array(v) for v in _run(main, startup, feed, list(outs), return_numpy=False)]
    ref = rpn_reference(anchor_v.tolist(), gt_v.tolist(), crowd_v.ravel().tolist(), lod,
                        im_info.tolist(), -1, -1.0, 0.45, 0.3, -1.0,
                        gt_labels=lab.ravel().tolist())
    loc = [v for r in ref for v in r[0]]
    score = [v for r in ref for v in r[1]]
    np.testing.assert_allclose(got[0], feed["cls_logits"].reshape(-1, 3)[score])
    np.testing.assert_allclose(got[1], feed["bbox_pred"].reshape(-1, 4)[loc])
    np.testing.assert_array_equal(got[2].ravel(), [v for r in ref for v in r[3]])
    np.testing.assert_allclose(got[3], np.array([v for r in ref for v in r[2]]), rtol=1e-4,
                               atol=1e-5)
    np.testing.assert_array_equal(got[5], [[len(r[0]) + 1] for r in ref])


def test_retinanet_target_assign_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        f = layers.data("f", [4])
        i = layers.data("i", [1], dtype="int32", lod_level=1)
        with pytest.raises(TypeError, match="gt_labels 'f' must be int32"):
            layers.retinanet_target_assign(f, f, f, f, f, f, i, f)
        with pytest.raises(ValueError, match="num_classes must be a positive int"):
            layers.retinanet_target_assign(f, f, f, f, f, i, i, f, num_classes=0)


# ---------------------------------------------------------------------------------------------
# retinanet_detection_output

def test_retinanet_detection_output_program_and_values():
    levels, info = _rdo_data(np.random.default_rng(11))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        bs = [layers.data(f"b{i}", [lv[0].shape[1], 4], dtype="float64")
              for i, lv in enumerate(levels)]
        ss = [layers.data(f"s{i}", [lv[1].shape[1], 3], dtype="float64")
              for i, lv in enumerate(levels)]
        an = [layers.data(f"a{i}", list(lv[2].shape), dtype="float64", append_batch_size=False)
              for i, lv in enumerate(levels)]
        im = layers.data("im", [3], dtype="float64")
        out = layers.retinanet_detection_output(bs, ss, an, im, score_threshold=0.3,
                                                nms_top_k=10, keep_top_k=8,
                                                nms_threshold=0.4)
    op = main.global_block().ops[-1]
    assert op.type == "retinanet_detection_output"
    assert op.input("BBoxes") == ["b0", "b1"] and op.input("Scores") == ["s0", "s1"]
    assert op.input("Anchors") == ["a0", "a1"] and op.input("ImInfo") == ["im"]
    assert {k: op.attr(k) for k in ("score_threshold", "nms_top_k", "keep_top_k",
                                    "nms_threshold", "nms_eta")} == {
        "score_threshold": 0.3, "nms_top_k": 10, "keep_top_k": 8, "nms_threshold": 0.4,
        "nms_eta": 1.0}
    assert tuple(out.shape) == (12, 6) and out.dtype == "float64" and out.stop_gradient
    feed = {"im": info}
    for i, (d, s, a) in enumerate(levels):
        feed.update({f"b{i}": d, f"s{i}": s, f"a{i}": a})
    got = _run(main, startup, feed, [out], return_numpy=False)[0]
    ref, lod = rdo_reference([lv[0].tolist() for lv in levels],
                             [lv[1].tolist() for lv in levels],
                             [lv[2].tolist() for lv in levels], info.tolist(), 0.3, 10, 0.4, 8)
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-12, atol=1e-12)
    assert got.recursive_sequence_lengths() == [list(np.diff(lod))]


def test_retinanet_detection_output_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        b = layers.data("b", [5, 4])
        s = layers.data("s", [5, 3])
        a = layers.data("a", [5, 4], append_batch_size=False)
        im = layers.data("im", [3])
        with pytest.raises(TypeError, match="bboxes must be a list"):
            layers.retinanet_detection_output(b, [s], [a], im)
        with pytest.raises(ValueError, match="same length"):
            layers.retinanet_detection_output([b], [s, s], [a], im)
        with pytest.raises(NotImplementedError, match=r"nms_eta=0\.5"):
            layers.retinanet_detection_output([b], [s], [a], im, nms_eta=0.5)
        with pytest.raises(TypeError, match=r"scores\[0\] 'i' must be float32 or float64"):
            layers.retinanet_detection_output([b], [layers.data("i", [5, 3], dtype="int32")],
                                              [a], im)


# ---------------------------------------------------------------------------------------------
# detection_map

def test_detection_map_program_values_and_states():
    labels, l_lod, dets, d_lod = _map_data()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        det_a = layers.data("det_a", [6], lod_level=1)
        lab_a = layers.data("lab_a", [6], lod_level=1)
        det_b = layers.data("det_b", [6], lod_level=1)
        lab_b = layers.data("lab_b", [6], lod_level=1)
        block = main.global_block()
        states = [block.create_var(name="pos_count", dtype="int32"),
                  block.create_var(name="true_pos", dtype="float32"),
                  block.create_var(name="false_pos", dtype="float32")]
        map_a = layers.detection_map(det_a, lab_a, 4, overlap_threshold=0.5,
                                     out_states=states, ap_version="11point")
        one = layers.fill_constant([1], "int32", 1)
        map_ab = layers.detection_map(det_b, lab_b, 4, overlap_threshold=0.5, has_state=one,
                                      input_states=states, ap_version="11point")
        whole_det = layers.data("det", [6], lod_level=1)
        whole_lab = layers.data("lab", [6], lod_level=1)
        map_whole = layers.detection_map(whole_det, whole_lab, 4, overlap_threshold=0.5,
                                         ap_version="11point", evaluate_difficult=False)
    ops = [o for o in main.global_block().ops if o.type == "detection_map"]
    assert ops[0].output("AccumPosCount") == ["pos_count"]
    assert ops[0].output("AccumTruePos") == ["true_pos"] and "HasState" not in ops[0].inputs
    assert ops[1].input("PosCount") == ["pos_count"] and ops[1].input("FalsePos") == ["false_pos"]
    assert ops[1].input("HasState") == [one.name]
    assert {k: ops[2].attr(k) for k in ("overlap_threshold", "evaluate_difficult", "ap_type",
                                        "class_num")} == {
        "overlap_threshold": 0.5, "evaluate_difficult": False, "ap_type": "11point",
        "class_num": 4}
    assert ops[2].attr("background_label") == 0  # the op's default: the layer never sets it
    assert tuple(map_a.shape) == (1,) and map_a.dtype == "float32"
    place = fluid.CPUPlace()

    def lt(a, lens):
        return fluid.create_lod_tensor(a.astype(np.float32), [lens], place)

    feed = {"det_a": lt(dets[:6], [6]), "lab_a": lt(labels[:3], [3]),
            "det_b": lt(dets[6:], [4]), "lab_b": lt(labels[3:], [3]),
            "det": lt(dets, [6, 4]), "lab": lt(labels, [3, 3])}
    got_a, got_ab, got_whole = _run(main, startup, feed, [map_a, map_ab, map_whole])
    for got, (lab, ll, det, dl, diff) in (
            (got_a, (labels[:3], (0, 3), dets[:6], (0, 6), True)),
            (got_ab, (labels, l_lod, dets, d_lod, True)),
            (got_whole, (labels, l_lod, dets, d_lod, False))):
        pos, tps = _tp_fp(lab.astype(np.float32).tolist(), ll,
                          det.astype(np.float32).tolist(), dl, 0.5, diff)
        np.testing.assert_allclose(got, [map_reference(pos, tps, "11point")], rtol=1e-5)


def test_detection_map_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        d = layers.data("d", [6], lod_level=1)
        lab = layers.data("l", [6], lod_level=1)
        with pytest.raises(ValueError, match="ap_version must be"):
            layers.detection_map(d, lab, 3, ap_version="voc")
        with pytest.raises(NotImplementedError, match=r"background_label=1"):
            layers.detection_map(d, lab, 3, background_label=1)
        with pytest.raises(ValueError, match="input_states must be a list of 3"):
            layers.detection_map(d, lab, 3, input_states=[d])
        with pytest.raises(ValueError, match=r"detect_res 'd4' must be \[M, 6\]"):
            layers.detection_map(layers.data("d4", [4], lod_level=1), lab, 3)
        with pytest.raises(TypeError, match="class_num must be an int"):
            layers.detection_map(d, lab, 3.0)
