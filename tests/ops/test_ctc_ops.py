"""CTC kernels (warpctc, ctc_align, edit_distance, sequence_erase) against independent
references: brute-force enumeration of CTC alignments, a port of the forward recursion of
Paddle's test_warpctc_op.py, and plain Python loops. warpctc's gradient is also checked by
finite differences in test_grad_check.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

# ---------------------------------------------------------------------------------------------
# references


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _collapse(path, blank: int) -> list:
    out, prev = [], None
    for v in path:
        if v != prev and v != blank:
            out.append(v)
        prev = v
    return out


def brute_ctc_loss(x: np.ndarray, label, blank: int) -> float:
    """−log Σ over every path of T classes that collapses to ``label``; 0 when none does
    (warp-ctc's value for an impossible sequence)."""
    p = _softmax(x.astype(np.float64))
    total = 0.0
    for path in itertools.product(range(x.shape[1]), repeat=x.shape[0]):
        if _collapse(path, blank) == list(label):
            total += math.prod(p[t, c] for t, c in enumerate(path))
    return -math.log(total) if total > 0 else 0.0


def paddle_forward_loss(probs: np.ndarray, label: np.ndarray, blank: int) -> float:
    """The alpha recursion of Paddle's test_warpctc_op.py (CTCForward.forward_a_sequence),
    rewritten: clamped logs, only the reachable segment window at each step."""
    log_zero = math.log(np.finfo(np.float64).tiny)

    def log_add(a, b):
        a, b = max(a, b), min(a, b)
        return a + math.log1p(math.exp(b - a)) if b - a > log_zero else a

    t_total, segs = probs.shape[0], 2 * len(label) + 1
    required = len(label) + sum(int(a == b) for a, b in zip(label[:-1], label[1:], strict=True))
    if t_total < required:
        return 0.0
    lg = np.log(np.maximum(probs, np.finfo(np.float64).tiny))
    fv = np.full((t_total, segs), log_zero)
    fv[0, 0] = lg[0, blank]
    if segs > 1:
        fv[0, 1] = lg[0, label[0]]
    for i in range(1, t_total):
        lo, hi = max(0, segs - 2 * (t_total - i)), min(segs, 2 * (i + 1))
        for j in range(lo, hi):
            if j % 2:
                v = log_add(fv[i - 1, j], fv[i - 1, j - 1])
                if j > 1 and label[j // 2] != label[j // 2 - 1]:
                    v = log_add(v, fv[i - 1, j - 2])
                fv[i, j] = v + lg[i, label[j // 2]]
            else:
                v = fv[i - 1, j] if j == 0 else log_add(fv[i - 1, j], fv[i - 1, j - 1])
                fv[i, j] = v + lg[i, blank]
    ll = fv[-1, -1] if segs == 1 else log_add(fv[-1, -1], fv[-1, -2])
    return -ll


def align_loop(seq, blank: int, merge: bool) -> list:
    out = []
    for i, v in enumerate(seq):
        if v == blank:
            continue
        if merge and i > 0 and seq[i - 1] == v:
            continue
        out.append(v)
    return out


def levenshtein_table(a, b) -> int:
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)]


def _lod(lengths) -> tuple:
    return (tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)])),)


# ---------------------------------------------------------------------------------------------
# warpctc


def test_warpctc_loss_matches_enumeration_of_alignments():
    rng = np.random.default_rng(0)
    lengths, labels = [4, 3, 5, 1, 2], [[1, 2], [2, 2], [1, 1, 2], [1, 2], []]
    x = rng.standard_normal((sum(lengths), 3))
    lab = np.array(sum(labels, []), np.int32).reshape(-1, 1)
    res = run_op("warpctc", {"Logits": [x], "Label": [lab]},
                 {"_lods": {"Logits": [_lod(lengths)], "Label": [_lod([len(v) for v in labels])]}})
    o = _lod(lengths)[0]
    expected = [brute_ctc_loss(x[o[i]:o[i + 1]], labels[i], 0) for i in range(len(lengths))]
    np.testing.assert_allclose(res["Loss"][0].ravel(), expected, rtol=1e-10)
    assert res["Loss"][0].shape == (5, 1)
    assert res["WarpCTCGrad"][0].shape == (5, 5, 3)
    assert res[LOD_KEY] == {"WarpCTCGrad": [None], "Loss": [None]}


def test_warpctc_blank_other_than_zero_and_float32():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)  # padded, time-major
    label = np.array([[0, 1], [1, 0]], np.int32)
    res = run_op("warpctc", {"Logits": [x], "Label": [label],
                             "LogitsLength": [np.array([4, 3], np.int64)],
                             "LabelLength": [np.array([2, 1], np.int64)]}, {"blank": 2})
    assert res["Loss"][0].dtype == np.float32
    expected = [brute_ctc_loss(x[:4, 0], [0, 1], 2), brute_ctc_loss(x[:3, 1], [1], 2)]
    np.testing.assert_allclose(res["Loss"][0].ravel(), expected, rtol=1e-5)
    assert not res["WarpCTCGrad"][0][3, 1].any()  # past sequence 1's end: no gradient


def test_warpctc_gradient_is_softmax_minus_posterior():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 3))
    res = run_op("warpctc", {"Logits": [x], "Label": [np.array([[1]], np.int32)]},
                 {"_lods": {"Logits": [((0, 3),)], "Label": [((0, 1),)]}})
    g = res["WarpCTCGrad"][0][:, 0]
    # each step's gradient sums to 0 (softmax and the posterior both sum to one)
    np.testing.assert_allclose(g.sum(axis=1), 0.0, atol=1e-12)
    eps = 1e-6
    num = np.zeros_like(x)
    for i in range(x.size):
        xp_, xm = x.copy(), x.copy()
        xp_.flat[i] += eps
        xm.flat[i] -= eps
        num.flat[i] = (brute_ctc_loss(xp_, [1], 0) - brute_ctc_loss(xm, [1], 0)) / (2 * eps)
    np.testing.assert_allclose(g, num, atol=1e-7)


@pytest.mark.parametrize("seed", [0, 1])
def test_warpctc_matches_paddle_unit_test_reference(seed):
    """TestWarpCTCOp's configuration: 12 classes, blank 11, logits_lod [4, 1, 3, 3],
    labels_lod [3, 1, 4, 4] (two sequences too short for their labels: loss 0)."""
    rng = np.random.default_rng(seed)
    t_len, l_len, classes = [4, 1, 3, 3], [3, 1, 4, 4], 12
    logits = rng.uniform(0.1, 1.0, (sum(t_len), classes)).astype(np.float32)
    labels = rng.integers(0, classes - 1, (sum(l_len), 1)).astype(np.int32)
    res = run_op("warpctc", {"Logits": [logits], "Label": [labels]},
                 {"blank": classes - 1, "_lods": {"Logits": [_lod(t_len)],
                                                  "Label": [_lod(l_len)]}})
    to, lo = _lod(t_len)[0], _lod(l_len)[0]
    probs = _softmax(logits.astype(np.float64))
    expected = [paddle_forward_loss(probs[to[i]:to[i + 1]], labels[lo[i]:lo[i + 1], 0].tolist(),
                                    classes - 1) for i in range(4)]
    np.testing.assert_allclose(res["Loss"][0].ravel(), expected, rtol=1e-5)
    assert expected[2] == 0.0 and expected[3] == 0.0

    # the padded form of TestWarpCTCOpWithPadding gives the same losses
    padded = np.zeros((max(t_len), 4, classes), np.float32)
    pad_labels = np.zeros((4, max(l_len)), np.int32)
    for b in range(4):
        padded[:t_len[b], b] = logits[to[b]:to[b + 1]]
        pad_labels[b, :l_len[b]] = labels[lo[b]:lo[b + 1], 0]
    res2 = run_op("warpctc", {"Logits": [padded], "Label": [pad_labels],
                              "LogitsLength": [np.array(t_len, np.int64)],
                              "LabelLength": [np.array(l_len, np.int64)]},
                  {"blank": classes - 1})
    np.testing.assert_allclose(res2["Loss"][0], res["Loss"][0], rtol=1e-6)
    np.testing.assert_allclose(res2["WarpCTCGrad"][0], res["WarpCTCGrad"][0], atol=1e-6)


def test_warpctc_impossible_sequence_gets_zero_loss_and_gradient():
    x = np.random.default_rng(3).standard_normal((3, 4))
    # labels 1 1 need 3 steps (a blank between the repeats): 2 steps are too few
    res = run_op("warpctc", {"Logits": [x[:2]], "Label": [np.array([[1], [1]], np.int32)]},
                 {"_lods": {"Logits": [((0, 2),)], "Label": [((0, 2),)]}})
    assert res["Loss"][0].tolist() == [[0.0]]
    assert not res["WarpCTCGrad"][0].any()
    ok = run_op("warpctc", {"Logits": [x], "Label": [np.array([[1], [1]], np.int32)]},
                {"_lods": {"Logits": [((0, 3),)], "Label": [((0, 2),)]}})
    assert ok["Loss"][0][0, 0] > 0


def test_warpctc_grad_scales_by_loss_grad_and_norm_by_times():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3))
    lods = {"Logits": [((0, 2, 5),)], "Label": [((0, 1, 2),)]}
    lab = np.array([[1], [2]], np.int32)
    fwd = run_op("warpctc", {"Logits": [x], "Label": [lab]}, {"_lods": lods})
    g = fwd["WarpCTCGrad"][0]
    dloss = np.array([[2.0], [-0.5]])
    unpadded = np.concatenate([g[:2, 0] * 2.0, g[:3, 1] * -0.5])
    for norm, scale in ((False, [1, 1, 1, 1, 1]), (True, [2, 2, 3, 3, 3])):
        res = run_op("warpctc_grad", {"WarpCTCGrad": [g], "Logits": [x], "Loss@GRAD": [dloss]},
                     {"norm_by_times": norm, "_lods": lods})
        np.testing.assert_allclose(res["Logits@GRAD"][0],
                                   unpadded / np.array(scale, float)[:, None])
        assert res[LOD_KEY] == {"Logits@GRAD": [lods["Logits"][0]]}
    # padded: normalised by LogitsLength (Paddle 1.8)
    gp = rng.standard_normal((3, 2, 4))
    res = run_op("warpctc_grad", {"WarpCTCGrad": [gp], "Logits": [gp],
                                  "LogitsLength": [np.array([3, 2], np.int64)],
                                  "Loss@GRAD": [dloss]}, {"norm_by_times": True})
    np.testing.assert_allclose(res["Logits@GRAD"][0],
                               gp * np.array([2.0 / 3, -0.5 / 2])[None, :, None])
    none = run_op("warpctc_grad", {"WarpCTCGrad": [g], "Logits": [x], "Loss@GRAD": [None]},
                  {"_lods": lods})
    assert not none["Logits@GRAD"][0].any()


def test_warpctc_errors():
    x = np.zeros((3, 4))
    lab = np.array([[1]], np.int32)
    lods = {"Logits": [((0, 3),)], "Label": [((0, 1),)]}
    with pytest.raises(ValueError, match=r"blank=4 must lie in \[0, 4\)"):
        run_op("warpctc", {"Logits": [x], "Label": [lab]}, {"blank": 4, "_lods": lods})
    with pytest.raises(ValueError, match=r"Input\(Logits\) has no LoD"):
        run_op("warpctc", {"Logits": [x], "Label": [lab]})
    with pytest.raises(ValueError, match="both LogitsLength and LabelLength"):
        run_op("warpctc", {"Logits": [x[None]], "Label": [lab],
                           "LogitsLength": [np.array([3], np.int64)]})
    with pytest.raises(ValueError, match="differ from blank=0"):
        run_op("warpctc", {"Logits": [x], "Label": [np.array([[0]], np.int32)]},
               {"_lods": lods})
    with pytest.raises(ValueError, match="2 sequences but Label has 1"):
        run_op("warpctc", {"Logits": [x], "Label": [lab]},
               {"_lods": {"Logits": [((0, 1, 3),)], "Label": [((0, 1),)]}})
    with pytest.raises(ValueError, match="exceeds max_T 1"):
        run_op("warpctc", {"Logits": [x[None, :1]], "Label": [lab],
                           "LogitsLength": [np.array([2], np.int64)],
                           "LabelLength": [np.array([1], np.int64)]})


# ---------------------------------------------------------------------------------------------
# ctc_align


def test_ctc_align_lod_matches_loop_and_paddle_doc_example():
    data = np.array([0, 1, 2, 2, 0, 4, 0, 4, 5, 0, 6, 6, 0, 0, 7, 7, 7, 0],
                    np.int32).reshape(-1, 1)
    lod = ((0, 11, 18),)
    res = run_op("ctc_align", {"Input": [data]}, {"_lods": {"Input": [lod]}})
    assert res["Output"][0].ravel().tolist() == [1, 2, 4, 4, 5, 6, 6, 7]
    assert res[LOD_KEY] == {"Output": [((0, 6, 8),)]}
    rng = np.random.default_rng(5)
    ids = rng.integers(0, 4, (20, 1)).astype(np.int64)
    lod = ((0, 6, 6, 13, 20),)
    for merge in (True, False):
        res = run_op("ctc_align", {"Input": [ids]},
                     {"blank": 2, "merge_repeated": merge, "_lods": {"Input": [lod]}})
        expected, offsets = [], [0]
        for a, b in zip(lod[0][:-1], lod[0][1:], strict=True):
            expected += align_loop(ids[a:b, 0].tolist(), 2, merge)
            offsets.append(len(expected))
        assert res["Output"][0].ravel().tolist() == expected
        assert res["Output"][0].dtype == np.int64
        assert res[LOD_KEY]["Output"] == [(tuple(offsets),)]


def test_ctc_align_all_blank_gives_minus_one_row():
    res = run_op("ctc_align", {"Input": [np.zeros((4, 1), np.int64)]},
                 {"_lods": {"Input": [((0, 1, 4),)]}})
    assert res["Output"][0].tolist() == [[-1]]
    assert res[LOD_KEY] == {"Output": [((0, 0, 0),)]}


def test_ctc_align_padded_matches_paddle_doc_example():
    x = np.array([[0, 1, 2, 2, 0, 4], [0, 4, 5, 0, 6, 0], [0, 7, 7, 7, 0, 0]], np.int32)
    length = np.array([[6], [5], [4]], np.int32)
    res = run_op("ctc_align", {"Input": [x], "InputLength": [length]}, {"padding_value": -3})
    assert res["Output"][0].tolist() == [[1, 2, 4, -3, -3, -3], [4, 5, 6, -3, -3, -3],
                                        [7, -3, -3, -3, -3, -3]]
    assert res["OutputLength"][0].tolist() == [[3], [3], [1]]
    with pytest.raises(ValueError, match="exceeds the 6 steps"):
        run_op("ctc_align", {"Input": [x], "InputLength": [length + 1]})
    with pytest.raises(ValueError, match=r"Input\(Input\) has no LoD"):
        run_op("ctc_align", {"Input": [x]})


# ---------------------------------------------------------------------------------------------
# edit_distance, sequence_erase


def test_edit_distance_lod_matches_dp_table_and_paddle_case():
    # three pairs, the second hypothesis empty (distance = the reference length)
    hyps = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9], np.int64).reshape(-1, 1)
    refs = np.array([1, 3, 4, 2, 5, 6, 9, 7], np.int64).reshape(-1, 1)
    h_lod, r_lod = ((0, 3, 3, 9),), ((0, 2, 5, 8),)
    for normalized in (False, True):
        res = run_op("edit_distance", {"Hyps": [hyps], "Refs": [refs]},
                     {"normalized": normalized, "_lods": {"Hyps": [h_lod], "Refs": [r_lod]}})
        expected = []
        for i in range(3):
            a = hyps[h_lod[0][i]:h_lod[0][i + 1], 0].tolist()
            b = refs[r_lod[0][i]:r_lod[0][i + 1], 0].tolist()
            d = levenshtein_table(a, b)
            expected.append(d / len(b) if normalized else d)
        np.testing.assert_allclose(res["Out"][0].ravel(), expected, rtol=1e-6)
        assert res["Out"][0].dtype == np.float32 and res["Out"][0].shape == (3, 1)
        assert res["SequenceNum"][0].tolist() == [3]
        assert res["SequenceNum"][0].dtype == np.int64
    kitten = run_op("edit_distance",
                    {"Hyps": [np.array([[1], [2], [3], [3], [4], [5]], np.int64)],
                     "Refs": [np.array([[6], [2], [3], [3], [2], [5], [7]], np.int64)]},
                    {"_lods": {"Hyps": [((0, 6),)], "Refs": [((0, 7),)]}})
    assert kitten["Out"][0].tolist() == [[3.0]]  # kitten -> sitting


def test_edit_distance_padded_and_random_against_dp_table():
    rng = np.random.default_rng(6)
    hyps = rng.integers(0, 3, (5, 6)).astype(np.int64)
    refs = rng.integers(0, 3, (5, 4)).astype(np.int64)
    hl, rl = np.array([6, 0, 3, 2, 5], np.int64), np.array([4, 2, 1, 4, 3], np.int64)
    res = run_op("edit_distance", {"Hyps": [hyps], "Refs": [refs], "HypsLength": [hl],
                                   "RefsLength": [rl]}, {"normalized": True})
    expected = [levenshtein_table(hyps[b, :hl[b]].tolist(), refs[b, :rl[b]].tolist()) / rl[b]
                for b in range(5)]
    np.testing.assert_allclose(res["Out"][0].ravel(), expected, rtol=1e-6)


def test_edit_distance_errors():
    h = np.array([[1]], np.int64)
    with pytest.raises(ValueError, match="reference string #0 is empty"):
        run_op("edit_distance", {"Hyps": [h], "Refs": [np.zeros((1, 0), np.int64)],
                                 "HypsLength": [np.array([1], np.int64)],
                                 "RefsLength": [np.array([0], np.int64)]}, {"normalized": True})
    with pytest.raises(ValueError, match="both HypsLength and RefsLength"):
        run_op("edit_distance", {"Hyps": [h], "Refs": [h],
                                 "HypsLength": [np.array([1], np.int64)]})
    with pytest.raises(ValueError, match=r"Input\(Hyps\) has no LoD"):
        run_op("edit_distance", {"Hyps": [h], "Refs": [h]})


def test_sequence_erase_matches_loop():
    x = np.array([2, 2, 6, 1, 3, 9, 6, 1, 0, 1], np.int64).reshape(-1, 1)
    lod = ((0, 3, 6, 10),)
    res = run_op("sequence_erase", {"X": [x]}, {"tokens": [2, 3, 5], "_lods": {"X": [lod]}})
    kept, offsets = [], [0]
    for a, b in zip(lod[0][:-1], lod[0][1:], strict=True):
        kept += [v for v in x[a:b, 0].tolist() if v not in (2, 3, 5)]
        offsets.append(len(kept))
    assert res["Out"][0].ravel().tolist() == kept
    assert res[LOD_KEY] == {"Out": [(tuple(offsets),)]}
    # Fluid's kernel takes any number of levels: the upper ones are kept as they are
    # (more cases in test_sequence_fluid18.py)
    res = run_op("sequence_erase", {"X": [x]},
                 {"tokens": [2, 3, 5], "_lods": {"X": [((0, 1, 3),) + lod]}})
    assert res[LOD_KEY] == {"Out": [((0, 1, 3), tuple(offsets))]}
