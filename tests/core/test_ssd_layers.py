"""SSD's composite layers (multi_box_head, detection_output, ssd_loss): the programs Fluid 1.8
builds, their values against numpy written from the SSD recipe, gradients through ssd_loss
against central differences, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def _types(main):
    return [op.type for op in main.global_block().ops]


# -- multi_box_head ----------------------------------------------------------------------------

def test_multi_box_head_builds_fluids_heads_and_matches_numpy():
    rng = np.random.default_rng(0)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        img = layers.data("img", [3, 32, 32])
        c1 = layers.data("c1", [4, 4, 4])
        c2 = layers.data("c2", [4, 2, 2])
        c3 = layers.data("c3", [4, 1, 1])
        loc, conf, box, var = layers.multi_box_head(
            [c1, c2, c3], img, base_size=32, num_classes=3,
            aspect_ratios=[[2.0], [2.0, 3.0], [2.0]], min_ratio=20, max_ratio=90,
            flip=True, clip=True)
    # sizes from the ratios: 10 % and 20 % of base_size, then 20 % + k * 70 % (step 70)
    ops = [op for op in main.global_block().ops if op.type == "prior_box"]
    assert [op.attr("min_sizes") for op in ops] == [[3.2], [6.4], [28.8]]
    assert [op.attr("max_sizes") for op in ops] == [[6.4], [28.8], [51.2]]
    assert [op.attr("aspect_ratios") for op in ops] == [[2.0], [2.0, 3.0], [2.0]]
    types = _types(main)
    assert types.count("conv2d") == 6 and types.count("transpose2") == 6
    assert types.count("reshape2") == 6 and types.count("flatten2") == 6
    assert types[-4:] == ["concat"] * 4
    # priors per cell: 1, max, then each ratio and its flip: 4, 6, 4
    p = 16 * 4 + 4 * 6 + 1 * 4
    assert tuple(loc.shape) == (-1, p, 4) and tuple(conf.shape) == (-1, p, 3)
    assert tuple(box.shape) == (p, 4) and tuple(var.shape) == (p, 4)
    assert box.stop_gradient and var.stop_gradient
    convs = [op for op in main.global_block().ops if op.type == "conv2d"]
    assert [main.global_block().var(op.input("Filter")[0]).shape[0] for op in convs] == \
        [16, 12, 24, 18, 16, 12]

    feed = {"img": rng.standard_normal((2, 3, 32, 32)).astype("float32")}
    for name, hw in (("c1", 4), ("c2", 2), ("c3", 1)):
        feed[name] = rng.standard_normal((2, 4, hw, hw)).astype("float32")
    filters = [op.input("Filter")[0] for op in convs]
    (lv, cv, bv, vv), scope = _run(main, startup, feed, [loc, conf, box, var])
    assert lv.shape == (2, p, 4) and cv.shape == (2, p, 3) and bv.shape == (p, 4)
    np.testing.assert_allclose(vv, np.tile([0.1, 0.1, 0.2, 0.2], (p, 1)), rtol=1e-6)
    assert (bv >= 0).all() and (bv <= 1).all()  # clip=True

    # a 1x1 conv (biases start at zero) laid out cell by cell, prior by prior
    def head(x, w, per):
        out = np.einsum("nchw,oc->nhwo", x, w[:, :, 0, 0])
        return out.reshape(x.shape[0], -1, per)

    ws = [np.asarray(scope.vars[f]) for f in filters]
    want_loc = np.concatenate([head(feed[c], ws[2 * i], 4)
                               for i, c in enumerate(("c1", "c2", "c3"))], axis=1)
    want_conf = np.concatenate([head(feed[c], ws[2 * i + 1], 3)
                                for i, c in enumerate(("c1", "c2", "c3"))], axis=1)
    np.testing.assert_allclose(lv, want_loc, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cv, want_conf, rtol=1e-4, atol=1e-5)


def test_multi_box_head_single_map_keeps_prior_box_layout():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        img = layers.data("img", [3, 16, 16])
        c1 = layers.data("c1", [2, 2, 2])
        loc, conf, box, var = layers.multi_box_head([c1], img, base_size=16, num_classes=2,
                                                    aspect_ratios=[2.0], min_sizes=[4.0],
                                                    max_sizes=[8.0], steps=[8.0])
    (op,) = [op for op in main.global_block().ops if op.type == "prior_box"]
    assert op.attr("step_w") == 8.0 and op.attr("step_h") == 8.0
    assert tuple(box.shape) == (2, 2, 4, 4) and tuple(loc.shape) == (-1, 16, 4)
    assert "concat" not in _types(main)


def test_multi_box_head_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        img = layers.data("img", [3, 16, 16])
        c = [layers.data(f"c{i}", [2, 2, 2]) for i in range(3)]
        with pytest.raises(ValueError, match="inputs must be a non-empty list"):
            layers.multi_box_head(c[0], img, 16, 2, [2.0])
        with pytest.raises(ValueError, match="min_sizes and max_sizes must be given"):
            layers.multi_box_head(c[:2], img, 16, 2, [[2.0], [2.0]])
        with pytest.raises(ValueError, match="aspect_ratios must be a list"):
            layers.multi_box_head(c, img, 16, 2, [[2.0]], min_ratio=20, max_ratio=90)
        with pytest.raises(ValueError, match="or min_ratio and max_ratio"):
            layers.multi_box_head(c, img, 16, 2, [[2.0]] * 3)
        with pytest.raises(ValueError, match="num_classes must be a positive int"):
            layers.multi_box_head(c, img, 16, 0, [[2.0]] * 3, min_ratio=20, max_ratio=90)


# -- detection_output ----------------------------------------------------------------------------

def _decode(prior, var, loc):
    pw, ph = prior[:, 2] - prior[:, 0], prior[:, 3] - prior[:, 1]
    px, py = prior[:, 0] + pw / 2, prior[:, 1] + ph / 2
    cx = var[:, 0] * loc[..., 0] * pw + px
    cy = var[:, 1] * loc[..., 1] * ph + py
    w = np.exp(var[:, 2] * loc[..., 2]) * pw
    h = np.exp(var[:, 3] * loc[..., 3]) * ph
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_detection_output_decodes_softmaxes_and_keeps_the_best():
    rng = np.random.default_rng(1)
    # four priors far apart: no box overlaps another, so NMS suppresses nothing
    prior = np.array([[0.0, 0.0, 0.2, 0.2], [0.5, 0.0, 0.7, 0.2], [0.0, 0.5, 0.2, 0.7],
                      [0.5, 0.5, 0.7, 0.7]], np.float32)
    pvar = np.tile(np.float32([0.1, 0.1, 0.2, 0.2]), (4, 1))
    loc = rng.uniform(-0.5, 0.5, (2, 4, 4)).astype(np.float32)
    scores = rng.standard_normal((2, 4, 3)).astype(np.float32) * 2
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        lv = layers.data("loc", [4, 4])
        sv = layers.data("scores", [4, 3])
        pb = layers.data("pb", [4, 4], append_batch_size=False)
        pbv = layers.data("pbv", [4, 4], append_batch_size=False)
        out = layers.detection_output(lv, sv, pb, pbv, score_threshold=0.3, nms_top_k=10,
                                      keep_top_k=5, background_label=1, nms_eta=0.5)
        out2, index = layers.detection_output(lv, sv, pb, pbv, score_threshold=0.3,
                                              return_index=True)
    types = _types(main)
    assert types[:4] == ["box_coder", "softmax", "transpose2", "multiclass_nms"]
    assert types[-1] == "multiclass_nms2"
    nms = [op for op in main.global_block().ops if op.type == "multiclass_nms"][0]
    # Fluid 1.8's layer always passes background 0 and eta 1 to the op
    assert nms.attr("background_label") == 0 and nms.attr("nms_eta") == 1.0
    assert nms.attr("keep_top_k") == 5 and nms.attr("nms_top_k") == 10
    assert out.stop_gradient and tuple(out.shape) == (-1, 6)
    feed = {"loc": loc, "scores": scores, "pb": prior, "pbv": pvar}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got, got2, idx = exe.run(main, feed=feed, fetch_list=[out, out2, index], scope=scope,
                             return_numpy=False)
    boxes = _decode(prior, pvar, loc)
    probs = _softmax(scores)
    rows, counts, all_rows, all_idx = [], [], [], []
    for n in range(2):
        kept = [(c, probs[n, m, c], m) for c in (1, 2) for m in range(4)
                if probs[n, m, c] > 0.3]
        all_rows += [[c, s, *boxes[n, m]] for c, s, m in
                     sorted(kept, key=lambda r: (r[0], -r[1]))]
        all_idx += [n * 4 + m for c, s, m in sorted(kept, key=lambda r: (r[0], -r[1]))]
        best = sorted(kept, key=lambda r: -r[1])[:5]
        best = sorted(best, key=lambda r: (r[0], -r[1]))
        rows += [[c, s, *boxes[n, m]] for c, s, m in best]
        counts.append(len(best))
    np.testing.assert_allclose(np.asarray(got), np.array(rows), rtol=1e-5, atol=1e-6)
    assert got.lod() == [[0, counts[0], counts[0] + counts[1]]]
    np.testing.assert_allclose(np.asarray(got2), np.array(all_rows), rtol=1e-5, atol=1e-6)
    assert np.asarray(idx).ravel().tolist() == all_idx


# -- ssd_loss --------------------------------------------------------------------------------------

def _iou(a, b):
    ix = np.maximum(0, np.minimum(a[:, None, 2], b[None, :, 2])
                    - np.maximum(a[:, None, 0], b[None, :, 0]))
    iy = np.maximum(0, np.minimum(a[:, None, 3], b[None, :, 3])
                    - np.maximum(a[:, None, 1], b[None, :, 1]))
    inter = ix * iy
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


def _match(dist, threshold):
    """Greedy bipartite matching (largest distance first), then each free prior's best
    ground truth at or above ``threshold`` (per_prediction)."""
    rows, cols = dist.shape
    idx, best = -np.ones(cols, int), np.zeros(cols)
    d = dist.copy()
    for _ in range(min(rows, cols)):
        r, c = np.unravel_index(np.argmax(d), d.shape)
        if d[r, c] < 1e-6:
            break
        idx[c], best[c] = r, dist[r, c]
        d[r, :] = -1
        d[:, c] = -1
    for c in range(cols):
        if idx[c] == -1 and dist[:, c].max() >= threshold:
            idx[c], best[c] = int(np.argmax(dist[:, c])), dist[:, c].max()
    return idx, best


def _ssd_loss_ref(loc, conf, gt_boxes, gt_labels, prior, pvar, neg_pos_ratio=3.0,
                  overlap=0.5, neg_overlap=0.5, normalize=True):
    n, p, _ = conf.shape
    total = np.zeros((n, 1))
    matched = 0
    for i in range(n):
        idx, dist = _match(_iou(gt_boxes[i], prior), overlap)
        labels = np.where(idx >= 0, gt_labels[i][np.maximum(idx, 0)], 0)
        logp = np.log(_softmax(conf[i].astype(np.float64)))
        ce = -logp[np.arange(p), labels]
        # hard negatives: the unmatched priors of highest loss, 3 per matched prior
        free = [m for m in range(p) if idx[m] == -1 and dist[m] < neg_overlap]
        free.sort(key=lambda m: (-ce[m], m))
        neg = set(free[:min(int((idx >= 0).sum() * neg_pos_ratio), len(free))])
        conf_w = np.array([(idx[m] >= 0) or (m in neg) for m in range(p)], float)
        # regression targets: the matched ground truth encoded against the prior
        g = gt_boxes[i][np.maximum(idx, 0)]
        pw, ph = prior[:, 2] - prior[:, 0], prior[:, 3] - prior[:, 1]
        px, py = prior[:, 0] + pw / 2, prior[:, 1] + ph / 2
        gw, gh = g[:, 2] - g[:, 0], g[:, 3] - g[:, 1]
        gx, gy = g[:, 0] + gw / 2, g[:, 1] + gh / 2
        target = np.stack([(gx - px) / pw / pvar[:, 0], (gy - py) / ph / pvar[:, 1],
                           np.log(np.abs(gw / pw)) / pvar[:, 2],
                           np.log(np.abs(gh / ph)) / pvar[:, 3]], axis=1)
        diff = np.abs(loc[i] - target)
        sl1 = np.where(diff < 1, 0.5 * diff ** 2, diff - 0.5).sum(1)
        loc_w = (idx >= 0).astype(float)
        total[i, 0] = (ce * conf_w + sl1 * loc_w).sum()
        matched += loc_w.sum()
    return total / matched if normalize else total


def _ssd_problem():
    rng = np.random.default_rng(3)
    prior = np.array([[0.0, 0.0, 0.4, 0.4], [0.3, 0.0, 0.7, 0.4], [0.6, 0.0, 1.0, 0.4],
                      [0.0, 0.5, 0.4, 0.9], [0.3, 0.5, 0.7, 0.9], [0.6, 0.5, 1.0, 0.9]],
                     np.float64)
    pvar = np.tile([0.1, 0.1, 0.2, 0.2], (6, 1))
    gt = [np.array([[0.05, 0.05, 0.45, 0.4], [0.55, 0.5, 0.95, 0.95]]),
          np.array([[0.25, 0.45, 0.75, 0.85]])]
    labels = [np.array([1, 2]), np.array([2])]
    loc = rng.uniform(-1, 1, (2, 6, 4))
    conf = rng.standard_normal((2, 6, 3))
    return prior, pvar, gt, labels, loc, conf


def _gt_feed(gt, labels, dtype):
    place = fluid.CPUPlace()
    lens = [[len(g) for g in gt]]
    return (fluid.create_lod_tensor(np.concatenate(gt).astype(dtype), lens, place),
            fluid.create_lod_tensor(np.concatenate(labels).reshape(-1, 1).astype("int32"),
                                    lens, place))


def test_ssd_loss_builds_fluids_program_and_matches_the_recipe():
    prior, pvar, gt, labels, loc, conf = _ssd_problem()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        lv = layers.data("loc", [6, 4])
        cv = layers.data("conf", [6, 3])
        gb = layers.data("gt_box", [4], lod_level=1)
        gl = layers.data("gt_label", [1], lod_level=1, dtype="int32")
        pb = layers.data("pb", [6, 4], append_batch_size=False)
        pbv = layers.data("pbv", [6, 4], append_batch_size=False)
        loss = layers.ssd_loss(lv, cv, gb, gl, pb, pbv)
        raw = layers.ssd_loss(lv, cv, gb, gl, pb, pbv, normalize=False, neg_pos_ratio=1.0)
    types = _types(main)
    for t in ("iou_similarity", "bipartite_match", "target_assign", "mine_hard_examples",
              "box_coder", "softmax_with_cross_entropy", "smooth_l1_loss", "reduce_sum"):
        assert t in types, t
    assert types.count("target_assign") == 6 and types.count("mine_hard_examples") == 2
    mine = [op for op in main.global_block().ops if op.type == "mine_hard_examples"][0]
    assert mine.attr("neg_pos_ratio") == 3.0 and mine.attr("neg_dist_threshold") == 0.5
    assert mine.attr("mining_type") == "max_negative"
    match = [op for op in main.global_block().ops if op.type == "bipartite_match"][0]
    assert match.attr("match_type") == "per_prediction"
    assert match.attr("dist_threshold") == 0.5
    gtb, gtl = _gt_feed(gt, labels, "float32")
    feed = {"loc": loc.astype("float32"), "conf": conf.astype("float32"), "gt_box": gtb,
            "gt_label": gtl, "pb": prior.astype("float32"), "pbv": pvar.astype("float32")}
    (got, got_raw), _ = _run(main, startup, feed, [loss, raw])
    assert got.shape == (2, 1)
    want = _ssd_loss_ref(loc, conf, gt, labels, prior, pvar)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    want_raw = _ssd_loss_ref(loc, conf, gt, labels, prior, pvar, neg_pos_ratio=1.0,
                             normalize=False)
    np.testing.assert_allclose(got_raw, want_raw, rtol=1e-4)


def test_ssd_loss_gradients_match_central_differences():
    prior, pvar, gt, labels, loc, conf = _ssd_problem()
    gtb, gtl = _gt_feed(gt, labels, "float64")
    x = np.random.default_rng(5).standard_normal((2, 6, 5))

    def build():
        xv = layers.data("x", [6, 5], dtype="float64")
        gb = layers.data("gt_box", [4], lod_level=1, dtype="float64")
        gl = layers.data("gt_label", [1], lod_level=1, dtype="int32")
        pb = layers.data("pb", [6, 4], append_batch_size=False, dtype="float64")
        pbv = layers.data("pbv", [6, 4], append_batch_size=False, dtype="float64")
        lv = layers.fc(xv, 4, num_flatten_dims=2, name="loc_fc")
        cv = layers.fc(xv, 3, num_flatten_dims=2, name="conf_fc")
        return layers.reduce_sum(layers.ssd_loss(lv, cv, gb, gl, pb, pbv))

    res = program_grads_and_numeric(build, {"x": x, "gt_box": gtb, "gt_label": gtl,
                                            "pb": prior, "pbv": pvar},
                                    ["loc_fc.w_0", "loc_fc.b_0", "conf_fc.w_0",
                                     "conf_fc.b_0"])
    for analytic, numeric in res.values():
        assert np.abs(analytic).max() > 0
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_ssd_loss_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        lv = layers.data("loc", [6, 4])
        cv = layers.data("conf", [6, 3])
        gb = layers.data("gt_box", [4], lod_level=1)
        gl = layers.data("gt_label", [1], lod_level=1, dtype="int32")
        pb = layers.data("pb", [6, 4], append_batch_size=False)
        with pytest.raises(ValueError, match="mining_type must be 'max_negative'"):
            layers.ssd_loss(lv, cv, gb, gl, pb, mining_type="hard_example")
        with pytest.raises(ValueError, match=r"confidence must be 3-D \[N, Np, C\]"):
            layers.ssd_loss(lv, layers.data("c2", [3]), gb, gl, pb)
        with pytest.raises(TypeError, match="location"):
            layers.ssd_loss("loc", cv, gb, gl, pb)
