"""Layer tests of dask_fluid/layers/rcnn_targets.py: generate_proposal_labels and
generate_mask_labels as Fluid 1.8 builds them, values through the executor with LoD feeds,
errors, and a Faster/Mask R-CNN head composing them."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_rcnn_target_ops import _GPL, _gml_data, _gml_ref, _gpl_data, _ref_sample_rois


def _run(main, startup, feed, fetch, return_numpy=True):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, return_numpy=return_numpy)


def _gpl_program(**kw):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        rois = layers.data("rois", [4], lod_level=1)
        cls = layers.data("cls", [1], dtype="int32", lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        gt = layers.data("gt", [4], lod_level=1)
        info = layers.data("info", [3])
        args = {"batch_size_per_im": 100, "fg_fraction": 0.25, "fg_thresh": 0.5,
                "bg_thresh_hi": 0.5, "bg_thresh_lo": 0.0, "class_nums": 81,
                "use_random": False, **kw}
        outs = layers.generate_proposal_labels(rois, cls, crowd, gt, info, **args)
    return main, startup, outs


def _gpl_feed():
    rois, gts, classes, crowds, im_info = _gpl_data()
    place = fluid.CPUPlace()
    rl, gl = [[len(r) for r in rois]], [[len(g) for g in gts]]
    return {"rois": fluid.create_lod_tensor(np.concatenate(rois), rl, place),
            "cls": fluid.create_lod_tensor(np.concatenate(classes)[:, None], gl, place),
            "crowd": fluid.create_lod_tensor(np.concatenate(crowds)[:, None], gl, place),
            "gt": fluid.create_lod_tensor(np.concatenate(gts), gl, place),
            "info": im_info}, (rois, gts, classes, crowds, im_info)


def test_generate_proposal_labels_builds_fluids_op():
    main, _, outs = _gpl_program(bbox_reg_weights=[1.0, 1.0, 2.0, 2.0])
    op = main.global_block().ops[-1]
    assert op.type == "generate_proposal_labels"
    assert {s: op.input(s) for s in ("RpnRois", "GtClasses", "IsCrowd", "GtBoxes", "ImInfo")} \
        == {"RpnRois": ["rois"], "GtClasses": ["cls"], "IsCrowd": ["crowd"],
            "GtBoxes": ["gt"], "ImInfo": ["info"]}
    slots = ("Rois", "LabelsInt32", "BboxTargets", "BboxInsideWeights", "BboxOutsideWeights")
    assert [op.output(s) for s in slots] == [[v.name] for v in outs]
    assert {k: op.attr(k) for k in _GPL} == {
        **_GPL, "bbox_reg_weights": [1.0, 1.0, 2.0, 2.0], "fg_thresh": 0.5}
    rois, labels, targets, inside, outside = outs
    assert tuple(rois.shape) == (-1, 4) and rois.dtype == "float32"
    assert tuple(labels.shape) == (-1, 1) and labels.dtype == "int32"
    for v in (targets, inside, outside):
        assert tuple(v.shape) == (-1, 324) and v.dtype == "float32"
    # Fluid's create_variable_for_type_inference: LoD level 0 at build time
    assert all(v.stop_gradient and v.lod_level == 0 for v in outs)


def test_generate_proposal_labels_values_and_lod():
    main, startup, outs = _gpl_program()
    feed, (rois, gts, classes, crowds, im_info) = _gpl_feed()
    got = _run(main, startup, feed, list(outs), return_numpy=False)
    refs = [_ref_sample_rois(rois[i], classes[i], crowds[i], gts[i], im_info[i], 100, 0.25,
                             0.5, 0.5, 0.0, [0.1, 0.1, 0.2, 0.2], 81, False) for i in range(2)]
    for k, t in enumerate(got):
        want = np.concatenate([r[k] for r in refs])
        arr = np.array(t)
        np.testing.assert_allclose(arr.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
        assert t.recursive_sequence_lengths() == [[len(r[0]) for r in refs]]


def test_generate_proposal_labels_use_random_follows_random_seed():
    main, startup, outs = _gpl_program(use_random=True, fg_fraction=0.05, fg_thresh=0.2,
                                       batch_size_per_im=32)
    main.random_seed = 11
    feed, _ = _gpl_feed()
    exe = fluid.Executor(fluid.CPUPlace())

    def two_runs():
        scope = fluid.Scope()
        exe.run(startup, scope=scope)
        return [np.array(exe.run(main, feed=feed, fetch_list=[outs[0]], scope=scope,
                                 return_numpy=False)[0]) for _ in range(2)]

    first, again = two_runs(), two_runs()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1])


def test_generate_proposal_labels_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        rois = layers.data("rois", [4], lod_level=1)
        cls = layers.data("cls", [1], dtype="int32", lod_level=1)
        f_cls = layers.data("f_cls", [1], lod_level=1)
        gt = layers.data("gt", [4], lod_level=1)
        info = layers.data("info", [3])
        gpl = layers.generate_proposal_labels
        with pytest.raises(NotImplementedError,
                           match=r"generate_proposal_labels\(is_cascade_rcnn=True\)"):
            gpl(rois, cls, cls, gt, info, class_nums=81, is_cascade_rcnn=True)
        with pytest.raises(ValueError, match="class_nums is required"):
            gpl(rois, cls, cls, gt, info)
        with pytest.raises(TypeError, match="gt_classes 'f_cls' must be int32, got float32"):
            gpl(rois, f_cls, cls, gt, info, class_nums=81)
        with pytest.raises(TypeError, match="rpn_rois must be a Variable"):
            gpl(np.zeros((2, 4)), cls, cls, gt, info, class_nums=81)
        with pytest.raises(ValueError, match="fg_fraction must be in"):
            gpl(rois, cls, cls, gt, info, class_nums=81, fg_fraction=2.0)
        with pytest.raises(ValueError, match="bbox_reg_weights must be 4 numbers"):
            gpl(rois, cls, cls, gt, info, class_nums=81, bbox_reg_weights=[1.0])
        with pytest.raises(TypeError, match="use_random must be a bool"):
            gpl(rois, cls, cls, gt, info, class_nums=81, use_random=1)
        with pytest.raises(ValueError, match="class_nums must be >= 2"):
            gpl(rois, cls, cls, gt, info, class_nums=1, is_cls_agnostic=True)


def _gml_program(num_classes=81, resolution=14):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        info = layers.data("info", [3])
        cls = layers.data("cls", [1], dtype="int32", lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        segms = layers.data("segms", [2], lod_level=3)
        rois = layers.data("rois", [4], lod_level=1)
        labels = layers.data("labels", [1], dtype="int32", lod_level=1)
        outs = layers.generate_mask_labels(info, cls, crowd, segms, rois, labels,
                                           num_classes=num_classes, resolution=resolution)
    return main, startup, outs


def test_generate_mask_labels_builds_fluids_op():
    main, _, outs = _gml_program(num_classes=5, resolution=7)
    op = main.global_block().ops[-1]
    assert op.type == "generate_mask_labels"
    assert {s: op.input(s) for s in ("ImInfo", "GtClasses", "IsCrowd", "GtSegms", "Rois",
                                     "LabelsInt32")} == {
        "ImInfo": ["info"], "GtClasses": ["cls"], "IsCrowd": ["crowd"], "GtSegms": ["segms"],
        "Rois": ["rois"], "LabelsInt32": ["labels"]}
    assert [op.output(s) for s in ("MaskRois", "RoiHasMaskInt32", "MaskInt32")] == [
        [v.name] for v in outs]
    assert op.attr("num_classes") == 5 and op.attr("resolution") == 7
    mask_rois, has_mask, masks = outs
    assert tuple(mask_rois.shape) == (-1, 4) and mask_rois.dtype == "float32"
    assert tuple(has_mask.shape) == (-1, 1) and has_mask.dtype == "int32"
    assert tuple(masks.shape) == (-1, 5 * 49) and masks.dtype == "int32"
    assert all(v.stop_gradient and v.lod_level == 0 for v in outs)


def test_generate_mask_labels_values_with_a_3_level_lod_feed():
    d = _gml_data(1)
    main, startup, outs = _gml_program()
    place = fluid.CPUPlace()
    gl = [list(d["lens"][0])]
    feed = {"info": d["im_info"],
            "cls": fluid.create_lod_tensor(d["gt_classes"][:, None], gl, place),
            "crowd": fluid.create_lod_tensor(d["crowd"][:, None], gl, place),
            "segms": fluid.create_lod_tensor(d["segms"], [list(v) for v in d["lens"]], place),
            "rois": fluid.create_lod_tensor(d["rois"], [d["rois_lens"]], place),
            "labels": fluid.create_lod_tensor(d["labels"][:, None], [d["rois_lens"]], place)}
    got = _run(main, startup, feed, list(outs), return_numpy=False)
    rois, has_mask, masks, lod = _gml_ref(d)
    np.testing.assert_array_equal(np.array(got[0]), rois)
    np.testing.assert_array_equal(np.array(got[1]), has_mask)
    np.testing.assert_array_equal(np.array(got[2]), masks)
    assert got[2].recursive_sequence_lengths() == [np.diff(lod).tolist()]


def test_generate_mask_labels_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        info = layers.data("info", [3])
        cls = layers.data("cls", [1], dtype="int32", lod_level=1)
        segms = layers.data("segms", [2], lod_level=3)
        segms3 = layers.data("segms3", [3], lod_level=3)
        rois = layers.data("rois", [4], lod_level=1)
        rois64 = layers.data("rois64", [4], dtype="float64", lod_level=1)
        gml = layers.generate_mask_labels
        with pytest.raises(TypeError, match="rois 'rois64' must be float32, got float64"):
            gml(info, cls, cls, segms, rois64, cls, 81, 14)
        with pytest.raises(ValueError, match=r"gt_segms 'segms3' must be \[-1, 2\]"):
            gml(info, cls, cls, segms3, rois, cls, 81, 14)
        with pytest.raises(ValueError, match="resolution must be greater than 0"):
            gml(info, cls, cls, segms, rois, cls, 81, 0)
        with pytest.raises(TypeError, match="num_classes must be an int"):
            gml(info, cls, cls, segms, rois, cls, 81.0, 14)


def test_faster_and_mask_rcnn_heads_run_end_to_end():
    """generate_proposals -> generate_proposal_labels -> roi_align, and the sampled rois ->
    generate_mask_labels -> roi_align, in one program."""
    rng = np.random.default_rng(0)
    n, a, h, w = 1, 3, 8, 8
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        feat = layers.data("feat", [4, h, w])
        scores = layers.data("scores", [a, h, w])
        deltas = layers.data("deltas", [4 * a, h, w])
        info = layers.data("info", [3])
        gt = layers.data("gt", [4], lod_level=1)
        cls = layers.data("cls", [1], dtype="int32", lod_level=1)
        crowd = layers.data("crowd", [1], dtype="int32", lod_level=1)
        segms = layers.data("segms", [2], lod_level=3)
        anchors, variances = layers.anchor_generator(feat, anchor_sizes=[8.0, 16.0, 32.0],
                                                     aspect_ratios=[1.0], stride=[4.0, 4.0])
        rpn_rois, _ = layers.generate_proposals(scores, deltas, info, anchors, variances,
                                                pre_nms_top_n=100, post_nms_top_n=30)
        rois, labels, targets, _, _ = layers.generate_proposal_labels(
            rpn_rois, cls, crowd, gt, info, batch_size_per_im=16, class_nums=3,
            use_random=False)
        pooled = layers.roi_align(feat, rois, 2, 2, spatial_scale=0.25)
        mask_rois, _, mask_int32 = layers.generate_mask_labels(info, cls, crowd, segms, rois,
                                                               labels, 3, 4)
        mask_feat = layers.roi_align(feat, mask_rois, 4, 4, spatial_scale=0.25)
    place = fluid.CPUPlace()
    poly = np.array([[4, 4], [20, 5], [18, 22], [6, 20]], np.float32)
    feed = {"feat": rng.standard_normal((n, 4, h, w)).astype(np.float32),
            "scores": rng.random((n, a, h, w)).astype(np.float32),
            "deltas": (0.1 * rng.standard_normal((n, 4 * a, h, w))).astype(np.float32),
            "info": np.array([[32, 32, 1.0]], np.float32),
            "gt": fluid.create_lod_tensor(np.array([[4, 4, 20, 22]], np.float32), [[1]], place),
            "cls": fluid.create_lod_tensor(np.array([[2]], np.int32), [[1]], place),
            "crowd": fluid.create_lod_tensor(np.array([[0]], np.int32), [[1]], place),
            "segms": fluid.create_lod_tensor(poly, [[1], [1], [4]], place)}
    got = _run(main, startup, feed, [rois, labels, targets, pooled, mask_int32, mask_feat],
               return_numpy=False)
    r, lbl, tg, pf, mi, mf = (np.array(t) for t in got)
    assert r.shape[0] == lbl.shape[0] == tg.shape[0] == pf.shape[0] > 0
    assert pf.shape[1:] == (4, 2, 2) and np.isfinite(pf).all()
    assert (lbl == 2).any()  # the gt itself is a foreground
    assert mi.shape == (int((lbl > 0).sum()), 3 * 16) and set(np.unique(mi)) <= {-1, 0, 1}
    assert (mi[:, 32:] == 1).any() and (mi[:, :32] == -1).all()
    assert mf.shape == (mi.shape[0], 4, 4, 4)
