"""nce and hierarchical_sigmoid against loops written from Fluid's nce_op.h and
matrix_bit_code.h (one sample, one class, one tree node at a time), and their samplers against
the distributions they claim; gradients are in test_grad_check.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows

from . import run_op

rng = np.random.default_rng(0)


def _nce_reference(x, label, w, b, sw, samples, prob, num_neg):
    """nce_op.h's forward cost for given SampleLabels, with P(c) from ``prob``."""
    n, s = samples.shape
    t = label.shape[1]
    cost = np.zeros((n, 1))
    for i in range(n):
        for j in range(s):
            c = samples[i, j]
            z = float(x[i] @ w[c]) + (float(b[c, 0]) if b is not None else 0.0)
            o = 1 / (1 + math.exp(-z))
            q = prob(c) * num_neg
            cost[i, 0] += (1.0 if sw is None else sw[i, 0]) * (
                -math.log(o / (o + q)) if j < t else -math.log(q / (o + q)))
    return cost


@pytest.mark.parametrize("sampler, prob", [
    (0, lambda c: 1 / 8),
    (1, lambda c: math.log((c + 2) / (c + 1)) / math.log(8)),
])
def test_nce_cost_matches_a_loop_over_samples_and_classes(sampler, prob):
    x, w, b = rng.standard_normal((5, 3)), rng.standard_normal((8, 3)), rng.standard_normal((8, 1))
    label, sw = np.array([[1, 2], [0, 7], [3, 3], [6, 5], [4, 0]]), rng.uniform(0.5, 2, (5, 1))
    res = run_op("nce", {"Input": [x], "Label": [label], "Weight": [w], "Bias": [b],
                         "SampleWeight": [sw]},
                 {"num_total_classes": 8, "num_neg_samples": 4, "sampler": sampler, "seed": 5})
    samples = res["SampleLabels"][0]
    assert samples.shape == (5, 6) and samples.dtype == np.int64
    np.testing.assert_array_equal(samples[:, :2], label)  # true labels first, then negatives
    assert samples.min() >= 0 and samples.max() < 8
    np.testing.assert_allclose(res["Cost"][0], _nce_reference(x, label, w, b, sw, samples, prob, 4),
                               rtol=1e-12)
    z = np.einsum("nd,nsd->ns", x, w[samples]) + b[samples, 0]
    np.testing.assert_allclose(res["SampleLogits"][0], 1 / (1 + np.exp(-z)), rtol=1e-12)


def test_nce_a_fixed_seed_draws_the_same_negatives_every_call_and_seed_0_does_not():
    ins = {"Input": [np.ones((64, 2))], "Label": [np.zeros((64, 1), np.int64)],
           "Weight": [np.ones((50, 2))]}
    attrs = {"num_total_classes": 50, "num_neg_samples": 5}
    one, two = (run_op("nce", ins, {**attrs, "seed": 7})["SampleLabels"][0] for _ in range(2))
    np.testing.assert_array_equal(one, two)
    one, two = (run_op("nce", ins, {**attrs, "seed": 0})["SampleLabels"][0] for _ in range(2))
    assert (one != two).any()


def _frequencies(attrs, ins_extra=None, classes=6, draws=40000):
    ins = {"Input": [np.zeros((draws // 10, 1))], "Label": [np.zeros((draws // 10, 1), np.int64)],
           "Weight": [np.zeros((classes, 1))], **(ins_extra or {})}
    got = run_op("nce", ins, {"num_total_classes": classes, "num_neg_samples": 10, "seed": 11,
                              **attrs})["SampleLabels"][0][:, 1:]
    return np.bincount(got.reshape(-1), minlength=classes) / got.size


def test_nce_samplers_draw_from_the_distributions_they_score_with():
    np.testing.assert_allclose(_frequencies({"sampler": 0}), np.full(6, 1 / 6), atol=0.01)
    log_uniform = np.log((np.arange(6) + 2) / (np.arange(6) + 1)) / np.log(6)
    # Fluid draws c = floor(exp(u log 6)) - 1, which never reaches the last class (it still
    # scores it with log(7/6) / log 6)
    expected = log_uniform.copy()
    expected[5] = 0
    np.testing.assert_allclose(_frequencies({"sampler": 1}), expected, atol=0.01)
    probs = np.array([0.3, 0.1, 0.2, 0.1, 0.2, 0.1])
    # an alias table for ``probs``: class 0 keeps its column and takes what 1, 2 and 4 give
    alias = {"CustomDistProbs": [probs.astype(np.float32)],
             "CustomDistAlias": [np.array([-1, 0, 0, 2, 0, 4], np.int32)],
             "CustomDistAliasProbs": [np.array([1.0, 0.6, 0.8, 0.6, 0.8, 0.6], np.float32)]}
    np.testing.assert_allclose(_frequencies({"sampler": 2}, alias), probs, atol=0.01)


def test_nce_sparse_weight_gradient_holds_the_sampled_rows_once_each():
    x, w = rng.standard_normal((3, 2)), rng.standard_normal((10, 2))
    ins = {"Input": [x], "Label": [np.array([[1], [1], [4]])], "Weight": [w]}
    attrs = {"num_total_classes": 10, "num_neg_samples": 2, "seed": 3}
    fwd = run_op("nce", ins, {**attrs, "is_sparse": True})
    grad_ins = {**ins, "SampleLogits": fwd["SampleLogits"], "SampleLabels": fwd["SampleLabels"],
                "Cost@GRAD": [np.ones((3, 1))]}
    sparse = run_op("nce_grad", grad_ins, {**attrs, "is_sparse": True}, outs=("Weight@GRAD",))
    dense = run_op("nce_grad", grad_ins, attrs, outs=("Weight@GRAD",))
    g = sparse["Weight@GRAD"][0]
    assert isinstance(g, SelectedRows) and g.height == 10
    np.testing.assert_array_equal(g.rows, np.unique(fwd["SampleLabels"][0]))
    np.testing.assert_allclose(g.to_dense(), dense["Weight@GRAD"][0], rtol=1e-12)


def test_nce_refuses_bad_labels_shapes_and_samplers():
    ins = {"Input": [np.ones((2, 3))], "Label": [np.array([[0], [9]])],
           "Weight": [np.ones((6, 3))]}
    with pytest.raises(ValueError, match=r"label 9 is out of range: labels must lie in \[0, 6\)"):
        run_op("nce", ins, {"num_total_classes": 6})
    with pytest.raises(ValueError, match="Weight has 6 rows but num_total_classes=7"):
        run_op("nce", {**ins, "Label": [np.array([[0], [1]])]}, {"num_total_classes": 7})
    with pytest.raises(ValueError, match="sampler 5 is not one of"):
        run_op("nce", {**ins, "Label": [np.array([[0], [1]])]},
               {"num_total_classes": 6, "sampler": 5})
    with pytest.raises(ValueError, match="custom_dist sampler needs CustomDistProbs"):
        run_op("nce", {**ins, "Label": [np.array([[0], [1]])]},
               {"num_total_classes": 6, "sampler": 2})


def _simple_code(label, num_classes):
    """matrix_bit_code.h's SimpleCode, from the binary digits of label + num_classes."""
    digits = bin(label + num_classes)[2:]  # most significant first; drop the leading 1
    c = label + num_classes
    return [((c >> (j + 1)) - 1, digits[::-1][j] == "1") for j in range(len(digits) - 1)]


def _hs_reference(x, w, b, paths, width):
    out, pre = np.zeros((len(paths), 1)), np.zeros((len(paths), width))
    for i, path in enumerate(paths):
        z = np.zeros(width)
        for j, (node, _) in enumerate(path):
            z[j] = np.clip(x[i] @ w[node] + (b[node, 0] if b is not None else 0), -40, 40)
        pre[i] = np.log1p(np.exp(z))
        out[i, 0] = pre[i].sum() - sum(z[j] for j, (_, bit) in enumerate(path) if bit)
    return out, pre


def test_hsigmoid_default_tree_matches_the_bit_code_loop():
    x, w, b = rng.standard_normal((6, 4)), rng.standard_normal((6, 4)), rng.standard_normal((6, 1))
    label = np.array([[0], [6], [3], [1], [5], [2]])
    res = run_op("hierarchical_sigmoid", {"X": [x], "W": [w], "Label": [label], "Bias": [b]},
                 {"num_classes": 7})
    out, pre = _hs_reference(x, w, b, [_simple_code(int(c), 7) for c in label[:, 0]], 3)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_allclose(res["PreOut"][0], pre, rtol=1e-12)
    assert res["W_Out"][0] is w


def test_hsigmoid_custom_tree_stops_each_path_at_its_first_negative_node():
    x, w = rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    table = np.array([[0, 2, -1, 3], [1, 3, 0, 2], [-1, 0, 1, 2]])
    code = np.array([[1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 1, 1]])
    res = run_op("hierarchical_sigmoid",
                 {"X": [x], "W": [w], "Label": [np.zeros((3, 1), np.int64)],
                  "PathTable": [table], "PathCode": [code]}, {"num_classes": 4})
    paths = [[(0, True), (2, False)], [(1, False), (3, True), (0, True), (2, False)], []]
    out, pre = _hs_reference(x, w, None, paths, 4)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_allclose(res["Out"][0][2], 4 * math.log(2))  # an empty path: only log 2s


def test_hsigmoid_refuses_bad_labels_and_trees():
    ins = {"X": [np.ones((2, 2))], "W": [np.ones((3, 2))], "Label": [np.array([[0], [4]])]}
    with pytest.raises(ValueError, match=r"label 4 is out of range: labels must lie in \[0, 4\)"):
        run_op("hierarchical_sigmoid", ins, {"num_classes": 4})
    with pytest.raises(ValueError, match="PathTable node 5 is out of range: W has 3 rows"):
        run_op("hierarchical_sigmoid", {**ins, "PathTable": [np.array([[0, 5], [1, -1]])],
                                        "PathCode": [np.zeros((2, 2), np.int64)]},
               {"num_classes": 4})
    with pytest.raises(ValueError, match="a custom tree needs PathCode"):
        run_op("hierarchical_sigmoid", {**ins, "PathTable": [np.array([[0, 1], [1, -1]])]},
               {"num_classes": 4})
