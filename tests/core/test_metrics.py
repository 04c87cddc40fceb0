"""fluid.metrics, fluid.average and fluid.evaluator (Fluid 1.8's Python-side metrics) against
references computed another way: sklearn, explicit loops, and the numpy accumulation of what
the programs compute batch by batch."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest
from sklearn.metrics import precision_score, recall_score, roc_auc_score

import dask_fluid as fluid
import dask_fluid.average as average
import dask_fluid.evaluator as evaluator
import dask_fluid.metrics as metrics
from dask_fluid import layers

from ..ops.test_detection_assign_ops import _map_data, _tp_fp, map_reference

# ---------------------------------------------------------------------------------------------
# MetricBase, CompositeMetric


class _Counter(metrics.MetricBase):
    def __init__(self, name=None):
        super().__init__(name)
        self.count = 3
        self.total = 2.5
        self.arr = np.ones((2, 3), dtype=np.float32)
        self.scalar = np.float32(4.0)
        self.other = ["x"]
        self._private = 7


def test_metric_base_name_config_and_reset():
    m = _Counter()
    assert str(m) == "_Counter" and str(_Counter("acc")) == "acc"
    cfg = m.get_config()
    assert cfg["name"] == "_Counter"
    assert set(cfg["states"]) == {"count", "total", "arr", "scalar", "other"}
    cfg["states"]["arr"][0, 0] = 9  # a deep copy: the metric is untouched
    assert m.arr[0, 0] == 1
    m.reset()
    assert m.count == 0 and isinstance(m.count, int)
    assert m.total == 0.0 and isinstance(m.total, float)
    assert m.arr.shape == (2, 3) and m.arr.dtype == np.float32 and not m.arr.any()
    assert m.scalar == 0 and m.other is None and m._private == 7
    base = metrics.MetricBase(None)
    with pytest.raises(NotImplementedError, match="Should not use it directly"):
        base.update(None, None)
    with pytest.raises(NotImplementedError, match="Should not use it directly"):
        base.eval()


def test_composite_metric():
    preds = np.array([[0.1], [0.7], [0.8], [0.9], [0.2], [0.2], [0.3], [0.5], [0.8], [0.6]])
    labels = np.array([[0], [1], [1], [1], [1], [0], [0], [0], [0], [0]])
    comp = metrics.CompositeMetric()
    comp.add_metric(metrics.Precision())
    comp.add_metric(metrics.Recall())
    comp.update(preds=preds, labels=labels)
    # Fluid 1.8's docstring example: 3 of 5 predicted positives are right, 3 of 4 positives found
    np.testing.assert_allclose(comp.eval(), [3.0 / 5, 3.0 / 4])
    with pytest.raises(ValueError, match="SubMetric should be inherit from MetricBase"):
        comp.add_metric(object())


# ---------------------------------------------------------------------------------------------
# Precision, Recall, Accuracy


def _batches(seed, n_batches=4, size=17):
    rng = np.random.default_rng(seed)
    return [(rng.random((size, 1)), rng.integers(0, 2, (size, 1))) for _ in range(n_batches)]


def test_precision_and_recall_match_sklearn_over_batches():
    batches = _batches(0)
    p, r = metrics.Precision("p"), metrics.Recall()
    for preds, labels in batches:
        p.update(preds, labels)
        r.update(preds, labels)
    y_pred = np.concatenate([np.rint(b[0]).astype(int) for b in batches]).ravel()
    y_true = np.concatenate([b[1] for b in batches]).ravel()
    assert p.eval() == pytest.approx(precision_score(y_true, y_pred))
    assert r.eval() == pytest.approx(recall_score(y_true, y_pred))
    # the counters themselves, counted the other way round
    assert p.tp == r.tp == int(np.sum((y_pred == 1) & (y_true == 1)))
    assert p.fp == int(np.sum((y_pred == 1) & (y_true == 0)))
    assert r.fn == int(np.sum((y_pred == 0) & (y_true == 1)))
    p.reset()
    r.reset()
    assert (p.tp, p.fp, r.tp, r.fn) == (0, 0, 0, 0)
    assert p.eval() == 0.0 and r.eval() == 0.0  # no positives: 0.0, not a ZeroDivisionError


def test_precision_recall_errors_and_lodtensor():
    for m in (metrics.Precision(), metrics.Recall()):
        with pytest.raises(ValueError, match="The 'preds' must be a numpy ndarray"):
            m.update([[0.9]], np.array([[1]]))
        with pytest.raises(ValueError, match="The 'labels' must be a numpy ndarray"):
            m.update(np.array([[0.9]]), [[1]])
    t = fluid.LoDTensor()
    t.set(np.array([[0.9], [0.2]], dtype=np.float32), fluid.CPUPlace())
    m = metrics.Precision()
    m.update(t, np.array([[1], [1]]))
    assert (m.tp, m.fp) == (1, 0)


def test_accuracy_weighted_mean_reset_and_errors():
    acc = metrics.Accuracy()
    vals, weights = [0.9, np.array([0.8]), 0.5], [128, 128, np.array([64])]
    for v, w in zip(vals, weights, strict=True):
        acc.update(value=v, weight=w)
    want = (0.9 * 128 + 0.8 * 128 + 0.5 * 64) / (128 + 128 + 64)
    np.testing.assert_allclose(acc.eval(), want)
    acc.reset()
    assert acc.value == 0.0 and acc.weight == 0.0
    with pytest.raises(ValueError, match="There is no data in Accuracy Metrics"):
        acc.eval()
    with pytest.raises(ValueError, match=r"The 'value' must be a number\(int, float\) or a "
                                         "numpy ndarray"):
        acc.update("0.5", 3)
    with pytest.raises(ValueError, match=r"The 'weight' must be a number\(int, float\)"):
        acc.update(0.5, "3")
    with pytest.raises(ValueError, match="The 'weight' can not be negative"):
        acc.update(0.5, -1)


def test_accuracy_from_program_fetches():
    """Accuracy over the fetched ``layers.accuracy`` of several batches equals the accuracy of
    all samples at once."""
    rng = np.random.default_rng(3)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        y = layers.data("y", [1], dtype="int64")
        batch_acc = layers.accuracy(input=x, label=y)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    acc = metrics.Accuracy()
    hits = total = 0
    for size in (5, 8, 3):
        xs = rng.random((size, 4)).astype(np.float32)
        ys = rng.integers(0, 4, (size, 1)).astype(np.int64)
        (a,) = exe.run(main, feed={"x": xs, "y": ys}, fetch_list=[batch_acc])
        acc.update(value=a, weight=size)
        hits += int(np.sum(xs.argmax(1) == ys[:, 0]))
        total += size
    np.testing.assert_allclose(acc.eval(), [hits / total], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# ChunkEvaluator, EditDistance (metrics)


def test_chunk_evaluator_metric():
    m = metrics.ChunkEvaluator()
    counts = [(10, 9, 8), (np.array([3]), np.array([3]), np.array([3])), (0, 2, 0)]
    for c in counts:
        m.update(*c)
    infer, label, correct = (sum(int(np.sum(c[i])) for c in counts) for i in range(3))
    p, r, f1 = m.eval()
    assert p == pytest.approx(correct / infer) and r == pytest.approx(correct / label)
    assert f1 == pytest.approx(2 * correct / (infer + label))  # F1 = 2c / (i + l)
    m.reset()
    assert m.eval() == (0, 0, 0)
    with pytest.raises(ValueError, match="The 'num_infer_chunks' must be a number"):
        m.update("1", 1, 1)
    with pytest.raises(ValueError, match="The 'num_label_chunks' must be a number"):
        m.update(1, None, 1)
    with pytest.raises(ValueError, match="The 'num_correct_chunks' must be a number"):
        m.update(1, 1, [1])


def test_edit_distance_metric():
    rng = np.random.default_rng(5)
    m = metrics.EditDistance("ed")
    all_d = []
    for _ in range(3):
        d = rng.integers(0, 3, (16, 1)).astype(np.float32)
        m.update(d, 16)
        all_d.append(d)
    d = np.concatenate(all_d)
    avg, err = m.eval()
    assert avg == pytest.approx(float(d.mean()))
    assert err == pytest.approx(float(np.count_nonzero(d)) / d.size)
    m.reset()
    with pytest.raises(ValueError, match="There is no data in EditDistance Metric"):
        m.eval()
    with pytest.raises(ValueError, match="The 'distances' must be a numpy ndarray"):
        m.update([0.0], 1)
    with pytest.raises(ValueError, match=r"The 'seq_num' must be a number\(int, float\)"):
        m.update(np.zeros((2, 1)), np.array([2, 2]))


# ---------------------------------------------------------------------------------------------
# Auc


def _auc_data(seed, n=400):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, (n, 1))
    # informative scores so the AUC is far from 0.5
    p1 = np.clip(rng.normal(0.35 + 0.3 * labels[:, 0], 0.2), 0, 1).astype(np.float32)
    return np.stack([1 - p1, p1], axis=1), labels


def test_auc_matches_sklearn_on_buckets():
    preds, labels = _auc_data(0)
    m = metrics.Auc("auc")
    for lo in range(0, len(labels), 100):
        m.update(preds[lo:lo + 100], labels[lo:lo + 100])
    got = m.eval()
    # exactly the AUC of the bucketed scores (ties counted as half, as the trapezoids do)
    buckets = np.floor(preds[:, 1] * 4095).astype(int)
    assert got == pytest.approx(roc_auc_score(labels[:, 0], buckets), abs=1e-12)
    # and within the discretisation of the exact AUC
    assert got == pytest.approx(roc_auc_score(labels[:, 0], preds[:, 1]), abs=2e-3)
    assert 0.7 < got < 1.0
    assert m._stat_pos.sum() == labels.sum() and m._stat_neg.sum() == (labels == 0).sum()


def test_auc_coarse_buckets_and_reset():
    preds, labels = _auc_data(1)
    m = metrics.Auc("auc", num_thresholds=10)
    m.update(preds, labels)
    buckets = (preds[:, 1] * 10).astype(int)
    assert m.eval() == pytest.approx(roc_auc_score(labels[:, 0], buckets), abs=1e-12)
    # an explicit loop over the pairs: P(pos bucket > neg bucket) + 0.5 P(equal)
    pos, neg = buckets[labels[:, 0] == 1], buckets[labels[:, 0] == 0]
    pairs = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    assert m.eval() == pytest.approx(pairs / (len(pos) * len(neg)))
    m.reset()
    assert m.eval() == 0.0 and not m._stat_pos.any()
    m.update(np.array([[0.1, 0.9]]), np.array([[1]]))
    assert m.eval() == 0.0  # a single class: 0.0 as in Fluid


def test_auc_errors_and_curve_warning():
    m = metrics.Auc("auc")
    with pytest.raises(ValueError, match="The 'labels' must be a numpy ndarray"):
        m.update(np.array([[0.5, 0.5]]), [1])
    with pytest.raises(ValueError, match="The 'predictions' must be a numpy ndarray"):
        m.update([[0.5, 0.5]], np.array([[1]]))
    with pytest.raises(ValueError, match=r"preds\[:, 1\] must lie in \[0, 1\]"):
        m.update(np.array([[0.5, 1.5]]), np.array([[1]]))
    with pytest.raises(ValueError, match=r"preds\[:, 1\] must lie in \[0, 1\]"):
        m.update(np.array([[0.5, -0.1]]), np.array([[1]]))
    with pytest.raises(ValueError, match=r"'preds' must be \[batch, 2\]"):
        m.update(np.array([0.5, 0.5]), np.array([[1], [0]]))
    m.update(np.array([[0.0, 1.0]]), np.array([[1]]))  # 1.0 falls in the top bucket
    assert m._stat_pos[4095] == 1
    with pytest.warns(UserWarning, match="ROC curve whatever the curve"):
        pr = metrics.Auc("pr", curve="PR")
    preds, labels = _auc_data(2)
    pr.update(preds, labels)
    roc = metrics.Auc("roc")
    roc.update(preds, labels)
    assert pr.eval() == roc.eval()


# ---------------------------------------------------------------------------------------------
# WeightedAverage


def test_weighted_average():
    with pytest.warns(Warning, match="WeightedAverage is deprecated"):
        avg = average.WeightedAverage()
    with pytest.raises(ValueError, match="There is no data to be averaged"):
        avg.eval()
    avg.add(value=2.0, weight=1)
    avg.add(value=4.0, weight=2)
    assert avg.eval() == pytest.approx(10.0 / 3)
    avg.reset()
    avg.add(np.array([1.0, 3.0]), np.array([2]))
    avg.add(np.array([3.0, 5.0]), 2)
    np.testing.assert_allclose(avg.eval(), [2.0, 4.0])
    with pytest.raises(ValueError, match=r"The 'value' must be a number\(int, float\)"):
        avg.add("1", 1)
    with pytest.raises(ValueError, match=r"The 'weight' must be a number\(int, float\)"):
        avg.add(1.0, np.array([1, 2]))


# ---------------------------------------------------------------------------------------------
# the program-side evaluators


def _iob_chunks(tags, num_types):
    """(start, end, type) chunks of an IOB tag sequence: tag id = type * 2 + (0 B, 1 I), the
    id num_types * 2 is outside every chunk."""
    chunks, cur = [], None
    for i, t in enumerate([*tags, num_types * 2]):
        typ, tag = divmod(t, 2)
        outside = t == num_types * 2
        if cur is not None and (outside or tag == 0 or typ != cur[2]):
            chunks.append((cur[0], i - 1, cur[2]))
            cur = None
        if not outside and cur is None:
            cur = (i, None, typ)
    return set(chunks)


def _levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def _lod(seqs, place):
    flat = np.array([v for s in seqs for v in s], dtype=np.int64).reshape(-1, 1)
    return fluid.create_lod_tensor(flat, [[len(s) for s in seqs]], place)


def test_chunk_and_edit_distance_evaluators_over_batches():
    rng = np.random.default_rng(7)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), pytest.warns(Warning, match="is deprecated"):
        inp = layers.data("inp", [1], dtype="int64", lod_level=1)
        lab = layers.data("lab", [1], dtype="int64", lod_level=1)
        chunk = evaluator.ChunkEvaluator(inp, lab, "IOB", 3)
        hyp = layers.data("hyp", [1], dtype="int64", lod_level=1)
        ref = layers.data("ref", [1], dtype="int64", lod_level=1)
        dist = evaluator.EditDistance(hyp, ref)
    assert len(chunk.states) == 3 and all(s.persistable for s in chunk.states)
    assert len(chunk.metrics) == 3 and len(dist.metrics) == 2
    exe, place = fluid.Executor(fluid.CPUPlace()), fluid.CPUPlace()
    exe.run(startup)
    for _ in range(2):  # two passes: reset must zero the states between them
        chunk.reset(exe)
        dist.reset(exe)
        n_inf = n_lab = n_cor = 0
        total_d, n_seq, n_wrong = 0.0, 0, 0
        for _ in range(3):
            seqs_i, seqs_l, seqs_h, seqs_r = [], [], [], []
            for _ in range(4):
                n = int(rng.integers(3, 9))
                seqs_i.append(rng.integers(0, 7, n).tolist())
                seqs_l.append(rng.integers(0, 7, n).tolist())
                seqs_h.append(rng.integers(0, 4, int(rng.integers(1, 6))).tolist())
                seqs_r.append(rng.integers(0, 4, int(rng.integers(1, 6))).tolist())
            exe.run(main, feed={"inp": _lod(seqs_i, place), "lab": _lod(seqs_l, place),
                                "hyp": _lod(seqs_h, place), "ref": _lod(seqs_r, place)})
            for si, sl in zip(seqs_i, seqs_l, strict=True):
                ci, cl = _iob_chunks(si, 3), _iob_chunks(sl, 3)
                n_inf, n_lab, n_cor = n_inf + len(ci), n_lab + len(cl), n_cor + len(ci & cl)
            for sh, sr in zip(seqs_h, seqs_r, strict=True):
                d = _levenshtein(sh, sr) / len(sr)  # edit_distance normalizes by default
                total_d, n_seq, n_wrong = total_d + d, n_seq + 1, n_wrong + (d != 0)
        p, r, f1 = chunk.eval(exe)
        assert p.dtype == np.float32 and p.shape == (1,)
        want_p, want_r = n_cor / n_inf, n_cor / n_lab
        np.testing.assert_allclose([p[0], r[0], f1[0]],
                                   [want_p, want_r, 2 * want_p * want_r / (want_p + want_r)],
                                   rtol=1e-6)
        avg_d, err = dist.eval(exe)
        np.testing.assert_allclose(avg_d.ravel(), [total_d / n_seq], rtol=1e-5)
        np.testing.assert_allclose(err.ravel(), [n_wrong / n_seq], rtol=1e-6)


def test_evaluator_base_and_root_block():
    with pytest.warns(Warning, match="is deprecated"):
        ev = evaluator.Evaluator("custom")
    with pytest.raises(NotImplementedError):
        ev.eval(None)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        inp = layers.data("inp", [1], dtype="int64", lod_level=1)
        main._create_block()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with pytest.raises(ValueError, match="only invoke Evaluator in root block"):
                    evaluator.ChunkEvaluator(inp, inp, "IOB", 2)
        finally:
            main._rollback()


def _map_feed(place, labels, l_lens, dets, d_lens):
    def lt(a, lens):
        return fluid.create_lod_tensor(np.asarray(a, dtype=np.float32), [lens], place)
    return {"det": lt(dets, d_lens), "gt_label": lt(labels[:, :1], l_lens),
            "gt_difficult": lt(labels[:, 1:2], l_lens), "gt_box": lt(labels[:, 2:], l_lens)}


@pytest.mark.parametrize("kind", ["metrics", "evaluator"])
def test_detection_map_accumulates_and_resets(kind):
    labels, l_lod, dets, d_lod = _map_data()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        det = layers.data("det", [6], lod_level=1)
        gt_label = layers.data("gt_label", [1], lod_level=1)
        gt_difficult = layers.data("gt_difficult", [1], lod_level=1)
        gt_box = layers.data("gt_box", [4], lod_level=1)
        cls = metrics.DetectionMAP if kind == "metrics" else evaluator.DetectionMAP
        m = cls(det, gt_label, gt_box, gt_difficult, class_num=4, overlap_threshold=0.5,
                ap_version="11point")
    cur_map, accum_map = m.get_map_var()
    exe, place = fluid.Executor(fluid.CPUPlace()), fluid.CPUPlace()
    exe.run(startup)
    # image 0 then image 1: the accumulated mAP after both is the mAP of the two together
    halves = [(labels[:3], [3], dets[:6], [6]), (labels[3:], [3], dets[6:], [4])]
    for _ in range(2):
        m.reset(exe)
        got = [exe.run(main, feed=_map_feed(place, *h), fetch_list=[cur_map, accum_map])
               for h in halves]
        for i, (lab, _, d, _) in enumerate(halves):
            pos, tps = _tp_fp(lab.astype(np.float32).tolist(), (0, 3),
                              d.astype(np.float32).tolist(), (0, len(d)), 0.5, True)
            np.testing.assert_allclose(got[i][0], [map_reference(pos, tps, "11point")],
                                       rtol=1e-5)
        pos, tps = _tp_fp(labels.astype(np.float32).tolist(), l_lod,
                          dets.astype(np.float32).tolist(), d_lod, 0.5, True)
        whole = map_reference(pos, tps, "11point")
        np.testing.assert_allclose(got[0][1], got[0][0], rtol=1e-6)  # first batch: no state
        np.testing.assert_allclose(got[1][1], [whole], rtol=1e-5)
        assert abs(whole - float(got[1][0][0])) > 1e-3  # the check above is not vacuous


# ---------------------------------------------------------------------------------------------
# import paddle.fluid as fluid


def test_paddle_fluid_metrics_alias():
    from dask_fluid import compat
    compat.install()
    try:
        pm = importlib.import_module("paddle.fluid.metrics")
        pa = importlib.import_module("paddle.fluid.average")
        pe = importlib.import_module("paddle.fluid.evaluator")
        assert pm.Auc is metrics.Auc and pm.DetectionMAP is metrics.DetectionMAP
        assert pa.WeightedAverage is average.WeightedAverage
        assert pe.ChunkEvaluator is evaluator.ChunkEvaluator
    finally:
        compat.uninstall()
    assert "paddle.fluid.metrics" not in sys.modules
