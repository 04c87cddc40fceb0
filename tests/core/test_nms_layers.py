"""NMS and proposal layers (multiclass_nms, multiclass_nms2, matrix_nms, locality_aware_nms,
distribute_fpn_proposals, collect_fpn_proposals, generate_proposals): the ops they build, their
attrs and static shapes, values and LoDs through the executor, and argument errors. These
layers have no gradient (Fluid registers no grad op for them), so there is no gradient check."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.ops.registry import LOD_KEY

from ..ops import run_op
from ..ops.test_nms_ops import ATTRS, FPN, GP, MATRIX_ATTRS, random_boxes, ref_image


def _run(main, startup, feed, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, return_numpy=False)


def test_multiclass_nms_builds_op_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        b = layers.data("b", [6, 4])
        s = layers.data("s", [3, 6])
        out = layers.multiclass_nms(b, s, score_threshold=0.2, nms_top_k=4, keep_top_k=5,
                                    nms_threshold=0.4, nms_eta=0.9)
    op = main.global_block().ops[-1]
    assert op.type == "multiclass_nms"
    assert op.input("BBoxes") == [b.name] and op.input("Scores") == [s.name]
    assert op.output("Out") == [out.name]
    assert {k: op.attr(k) for k in ATTRS} == {
        "background_label": 0, "score_threshold": 0.2, "nms_top_k": 4, "nms_threshold": 0.4,
        "nms_eta": 0.9, "keep_top_k": 5, "normalized": True}
    # MultiClassNMSOp::InferShape: [M, box_size + 2]
    assert list(out.shape) == [6, 6] and out.stop_gradient and out.dtype == b.dtype
    rng = np.random.default_rng(4)
    boxes = random_boxes(rng, (2, 6)).astype(np.float32)
    scores = rng.uniform(0, 1, (2, 3, 6)).astype(np.float32)
    got, = _run(main, startup, {"b": boxes, "s": scores}, [out])
    a = {**ATTRS, "score_threshold": 0.2, "nms_top_k": 4, "keep_top_k": 5,
         "nms_threshold": 0.4, "nms_eta": 0.9}
    rows, lens = [], []
    for i in range(2):
        kept = ref_image(boxes[i].astype(np.float64), scores[i].astype(np.float64), a, False)
        rows += [[lab, scores[i, lab, j], *boxes[i, j]] for lab, j in kept]
        lens.append(len(kept))
    np.testing.assert_allclose(np.asarray(got), np.array(rows), rtol=1e-6)
    assert got.recursive_sequence_lengths() == [lens]


def test_multiclass_nms_lod_form_and_nms2_index():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        b = layers.data("b", [3, 4], lod_level=1)
        s = layers.data("s", [3])
        out = layers.multiclass_nms(b, s, 0.1, -1, -1, background_label=-1)
        out2, idx = layers.multiclass_nms2(b, s, 0.1, -1, -1, background_label=-1,
                                           return_index=True)
        only = layers.multiclass_nms2(b, s, 0.1, -1, -1)
    assert list(out.shape) == [-1, 6] and list(idx.shape) == [-1, 1]
    assert str(idx.dtype) == "int32"
    ops = main.global_block().ops
    assert [o.type for o in ops[-3:]] == ["multiclass_nms", "multiclass_nms2", "multiclass_nms2"]
    # Fluid's multiclass_nms2 always binds Index, returning it only with return_index
    assert ops[-1].output("Index") and isinstance(only, fluid.framework.Variable)
    rng = np.random.default_rng(6)
    boxes = random_boxes(rng, (7, 3)).astype(np.float32)
    scores = rng.uniform(0, 1, (7, 3)).astype(np.float32)
    feed = {"b": fluid.create_lod_tensor(boxes, [[4, 3]], fluid.CPUPlace()), "s": scores}
    got, got2, gidx = _run(main, startup, feed, [out, out2, idx])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(got2))
    a = {**ATTRS, "score_threshold": 0.1, "background_label": -1}
    lens, index = [], []
    for lo, hi in ((0, 4), (4, 7)):
        kept = ref_image(boxes[lo:hi].astype(np.float64), scores[lo:hi].astype(np.float64), a,
                         True)
        lens.append(len(kept))
        index += [(lo + j) * 3 + lab for lab, j in kept]
    assert got.recursive_sequence_lengths() == [lens]
    assert np.asarray(gidx).ravel().tolist() == index
    assert gidx.recursive_sequence_lengths() == [lens]


def test_multiclass_nms_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        b = layers.data("b", [6, 4])
        s = layers.data("s", [3, 6])
        i = layers.data("i", [3, 6], dtype="int32")
        with pytest.raises(TypeError, match="scores must have dtype"):
            layers.multiclass_nms(b, i, 0.1, 3, 3)
        with pytest.raises(TypeError, match="nms_top_k must be int"):
            layers.multiclass_nms(b, s, 0.1, 3.5, 3)
        with pytest.raises(TypeError, match="score_threshold must be float"):
            layers.multiclass_nms(b, s, "0.1", 3, 3)
        with pytest.raises(TypeError, match="normalized must be bool"):
            layers.multiclass_nms(b, s, 0.1, 3, 3, normalized=1)
        with pytest.raises(TypeError, match="return_index must be bool"):
            layers.multiclass_nms2(b, s, 0.1, 3, 3, return_index=None)
        with pytest.raises(TypeError):
            layers.multiclass_nms(np.zeros((1, 6, 4)), s, 0.1, 3, 3)


def test_matrix_nms_builds_op_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        b = layers.data("b", [5, 4], dtype="float64")
        s = layers.data("s", [3, 5], dtype="float64")
        out, idx = layers.matrix_nms(b, s, 0.1, 0.2, 4, 6, use_gaussian=True,
                                     gaussian_sigma=1.5, return_index=True)
        only = layers.matrix_nms(b, s, 0.1, 0.2, 4, 6)
    op = main.global_block().ops[-2]
    assert op.type == "matrix_nms" and op.output("Index") == [idx.name]
    assert {k: op.attr(k) for k in MATRIX_ATTRS} == {
        "background_label": 0, "score_threshold": 0.1, "post_threshold": 0.2, "nms_top_k": 4,
        "keep_top_k": 6, "normalized": True, "use_gaussian": True, "gaussian_sigma": 1.5}
    assert list(out.shape) == [5, 6] and list(idx.shape) == [5, 1]
    assert str(idx.dtype) == "int32" and out.stop_gradient
    assert isinstance(only, fluid.framework.Variable)
    rng = np.random.default_rng(9)
    boxes = random_boxes(rng, (2, 5))
    scores = rng.uniform(0, 1, (2, 3, 5))
    got, gidx = _run(main, startup, {"b": boxes, "s": scores}, [out, idx])
    ref = run_op("matrix_nms", {"BBoxes": [boxes], "Scores": [scores]},
                 {"score_threshold": 0.1, "post_threshold": 0.2, "nms_top_k": 4,
                  "keep_top_k": 6, "use_gaussian": True, "gaussian_sigma": 1.5})
    np.testing.assert_array_equal(np.asarray(got), ref["Out"][0])
    np.testing.assert_array_equal(np.asarray(gidx), ref["Index"][0])
    lod = ref[LOD_KEY]["Out"][0][0]
    assert got.recursive_sequence_lengths() == [[lod[1] - lod[0], lod[2] - lod[1]]]
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        b = layers.data("b", [5, 4])
        s = layers.data("s", [3, 5])
        with pytest.raises(TypeError, match="use_gaussian must be bool"):
            layers.matrix_nms(b, s, 0.1, 0.2, 4, 6, use_gaussian="yes")
        with pytest.raises(TypeError, match="post_threshold must be float"):
            layers.matrix_nms(b, s, 0.1, None, 4, 6)


def test_locality_aware_nms_builds_op_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        b = layers.data("b", [3, 4], dtype="float64")
        s = layers.data("s", [1, 3], dtype="float64")
        out = layers.locality_aware_nms(b, s, 0.1, 5, 5)
        with pytest.raises(ValueError, match=r"scores must be \[N, 1, M\]"):
            layers.locality_aware_nms(b, layers.data("s2", [2, 3]), 0.1, 5, 5)
    op = main.global_block().ops[-1]
    assert op.type == "locality_aware_nms" and op.output("Out") == [out.name]
    assert {k: op.attr(k) for k in ATTRS} == {
        "background_label": -1, "score_threshold": 0.1, "nms_top_k": 5, "nms_threshold": 0.3,
        "nms_eta": 1.0, "keep_top_k": 5, "normalized": True}
    assert list(out.shape) == [3, 6] and out.stop_gradient
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1.2], [3, 3, 4, 4]]])
    scores = np.array([[[.6, .4, .5]]])
    got, = _run(main, startup, {"b": boxes, "s": scores}, [out])
    np.testing.assert_allclose(np.asarray(got), [[0, 1.0, 0, 0, 1, 1.08], [0, .5, 3, 3, 4, 4]])
    assert got.recursive_sequence_lengths() == [[2]]


def test_distribute_then_collect_fpn_proposals():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        rois = layers.data("rois", [4], lod_level=1)
        multi, restore = layers.distribute_fpn_proposals(rois, 2, 5, 4, 224)
        # a score per RoI, keeping each level's LoD: the sum of its coordinates
        scores = [layers.reduce_sum(r, dim=1, keep_dim=True) for r in multi]
        fpn = layers.collect_fpn_proposals(multi, scores, 2, 5, post_nms_top_n=4)
        with pytest.raises(ValueError, match="needs 4 levels"):
            layers.collect_fpn_proposals(multi[:3], scores, 2, 5, 4)
        with pytest.raises(ValueError, match="max_level"):
            layers.distribute_fpn_proposals(rois, 5, 2, 4, 224)
        with pytest.raises(TypeError, match="multi_rois must be a non-empty list"):
            layers.collect_fpn_proposals(rois, scores, 2, 5, 4)
    ops = main.global_block().ops
    dist = next(o for o in ops if o.type == "distribute_fpn_proposals")
    assert dist.output("MultiFpnRois") == [m.name for m in multi]
    assert dist.output("RestoreIndex") == [restore.name]
    assert {k: dist.attr(k) for k in FPN} == {"min_level": 2, "max_level": 5,
                                              "refer_level": 4, "refer_scale": 224}
    col = ops[-1]
    assert col.type == "collect_fpn_proposals" and col.attr("post_nms_topN") == 4
    assert col.input("MultiLevelScores") == [s.name for s in scores]
    assert len(multi) == 4 and all(list(m.shape) == [-1, 4] for m in multi)
    assert list(restore.shape) == [-1, 1] and str(restore.dtype) == "int32"
    assert list(fpn.shape) == [-1, 4] and fpn.stop_gradient
    data = np.array([[0, 0, 223, 223], [0, 0, 447, 447], [0, 0, 111, 111], [5, 5, 15, 15],
                     [0, 0, 2000, 2000]], np.float32)
    feed = {"rois": fluid.create_lod_tensor(data, [[2, 3]], fluid.CPUPlace())}
    got = _run(main, startup, feed, [*multi, restore, fpn])
    assert [np.asarray(g).shape[0] for g in got[:4]] == [1, 1, 1, 2]
    assert got[3].recursive_sequence_lengths() == [[1, 1]]
    assert np.asarray(got[4]).ravel().tolist() == [2, 3, 1, 0, 4]
    # the 4 largest coordinate sums: rows 4, 1 (image 1, 0), 0 (image 0), 2 (image 1)
    np.testing.assert_array_equal(np.asarray(got[5]), data[[1, 0, 4, 2]])
    assert got[5].recursive_sequence_lengths() == [[2, 2]]


def test_generate_proposals_builds_op_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        s = layers.data("s", [1, 1, 2], dtype="float64")
        d = layers.data("d", [4, 1, 2], dtype="float64")
        im = layers.data("im", [3], dtype="float64")
        an = layers.data("an", [1, 2, 1, 4], dtype="float64", append_batch_size=False)
        va = layers.data("va", [1, 2, 1, 4], dtype="float64", append_batch_size=False)
        rois, probs, num = layers.generate_proposals(s, d, im, an, va, pre_nms_top_n=10,
                                                     post_nms_top_n=5, nms_thresh=0.3,
                                                     return_rois_num=True)
        pair = layers.generate_proposals(s, d, im, an, va)
        with pytest.raises(TypeError, match="im_info must have dtype"):
            layers.generate_proposals(s, d, layers.data("i32", [3], dtype="int32"), an, va)
        with pytest.raises(TypeError, match="pre_nms_top_n must be int"):
            layers.generate_proposals(s, d, im, an, va, pre_nms_top_n=1.5)
    op = main.global_block().ops[0]
    assert op.type == "generate_proposals" and len(pair) == 2
    assert op.output("RpnRois") == [rois.name] and op.output("RpnRoisLod") == [num.name]
    assert {k: op.attr(k) for k in GP} == {"pre_nms_topN": 10, "post_nms_topN": 5,
                                           "nms_thresh": 0.3, "min_size": 0.1, "eta": 1.0}
    assert list(rois.shape) == [-1, 4] and list(probs.shape) == [-1, 1]
    assert rois.stop_gradient and probs.stop_gradient and str(num.dtype) == "int32"
    anchors = np.array([[0, 0, 15, 15], [8, 0, 23, 15]], np.float64).reshape(1, 2, 1, 4)
    feed = {"s": np.array([0.3, 0.9, 0.8, 0.1]).reshape(2, 1, 1, 2),
            "d": np.zeros((2, 4, 1, 2)), "im": np.array([[20.0, 20.0, 1.0]] * 2),
            "an": anchors, "va": np.ones_like(anchors)}
    got_r, got_p, got_n = _run(main, startup, feed, [rois, probs, num])
    # image 0: IoU 0.4 > 0.3 keeps only the 0.9 box; image 1 only the 0.8 one
    np.testing.assert_array_equal(np.asarray(got_r), [[8, 0, 19, 15], [0, 0, 15, 15]])
    np.testing.assert_array_equal(np.asarray(got_p), [[0.9], [0.8]])
    assert got_r.recursive_sequence_lengths() == [[1, 1]]
    assert np.asarray(got_n).tolist() == [1, 1]
