"""``row_conv``, ``im2sequence``, ``sequence_scatter`` and ``chunk_eval`` against references
written independently (explicit loops, and cases ported from Paddle's own unit tests
``test_row_conv_op.py``, ``test_im2sequence_op.py``, ``test_sequence_scatter_op.py`` and
``test_chunk_eval_op.py``); the gradients are in test_grad_check.py."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

# ---------------------------------------------------------------------------------------------
# row_conv


def _row_conv_loops(x: np.ndarray, lengths: list[int], w: np.ndarray) -> np.ndarray:
    """Paddle's test reference: out[t] += x[t + k] * w[k] while t + k stays in the sequence."""
    out = np.zeros_like(x)
    start = 0
    for length in lengths:
        for t in range(length):
            for k in range(w.shape[0]):
                if t + k < length:
                    out[start + t] += x[start + t + k] * w[k]
        start += length
    return out


def test_row_conv_lod_matches_paddles_reference():
    # TestRowConvOp1: lod [[2, 3, 2]], D = 16, context 2
    rng = np.random.default_rng(0)
    x = rng.random((7, 16)).astype(np.float32)
    w = rng.random((2, 16)).astype(np.float32)
    lod = ((0, 2, 5, 7),)
    res = run_op("row_conv", {"X": [x], "Filter": [w]}, {"_lods": {"X": [lod]}})
    np.testing.assert_allclose(res["Out"][0], _row_conv_loops(x, [2, 3, 2], w), rtol=1e-6)
    assert res["Out"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [lod]}


def test_row_conv_long_filter_empty_sequence_and_padded_input():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 3))
    w = rng.standard_normal((5, 3))  # longer than every sequence
    res = run_op("row_conv", {"X": [x], "Filter": [w]}, {"_lods": {"X": [((0, 3, 3, 6),)]}})
    np.testing.assert_allclose(res["Out"][0], _row_conv_loops(x, [3, 0, 3], w), rtol=1e-12)
    # padded [B, T, D] without LoD: every batch row is one sequence of T steps
    xb = rng.standard_normal((3, 4, 2))
    wb = rng.standard_normal((3, 2))
    res = run_op("row_conv", {"X": [xb], "Filter": [wb]}, {"_lods": {"X": [None]}})
    want = _row_conv_loops(xb.reshape(12, 2), [4, 4, 4], wb).reshape(3, 4, 2)
    np.testing.assert_allclose(res["Out"][0], want, rtol=1e-12)
    assert res[LOD_KEY] == {"Out": [None]}


def test_row_conv_grad_matches_loops():
    rng = np.random.default_rng(2)
    x, w, d = rng.standard_normal((5, 2)), rng.standard_normal((3, 2)), rng.standard_normal((5, 2))
    res = run_op("row_conv_grad", {"X": [x], "Filter": [w], "Out@GRAD": [d]},
                 {"_lods": {"X": [((0, 4, 5),)]}})
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for start, length in ((0, 4), (4, 1)):
        for t in range(length):
            for k in range(3):
                if t + k < length:
                    dx[start + t + k] += w[k] * d[start + t]
                    dw[k] += x[start + t + k] * d[start + t]
    np.testing.assert_allclose(res["X@GRAD"][0], dx, rtol=1e-12)
    np.testing.assert_allclose(res["Filter@GRAD"][0], dw, rtol=1e-12)
    only = run_op("row_conv_grad", {"X": [x], "Filter": [w], "Out@GRAD": [d]},
                  {"_lods": {"X": [((0, 4, 5),)]}}, outs=("Filter@GRAD",))
    assert "X@GRAD" not in only


def test_row_conv_errors():
    lods = {"_lods": {"X": [((0, 2),)]}}
    with pytest.raises(ValueError, match="Filter must be 2-D"):
        run_op("row_conv", {"X": [np.ones((2, 3))], "Filter": [np.ones(3)]}, lods)
    with pytest.raises(ValueError, match="Filter has 4 columns but Input\\(X\\) has 3"):
        run_op("row_conv", {"X": [np.ones((2, 3))], "Filter": [np.ones((2, 4))]}, lods)
    with pytest.raises(ValueError, match="without LoD must be padded 3-D"):
        run_op("row_conv", {"X": [np.ones((2, 3))], "Filter": [np.ones((2, 3))]})
    with pytest.raises(ValueError, match="a LoD Input\\(X\\) must be 2-D"):
        run_op("row_conv", {"X": [np.ones((2, 1, 3))], "Filter": [np.ones((2, 3))]}, lods)


# ---------------------------------------------------------------------------------------------
# im2sequence


def _im2col_loops(img: np.ndarray, oh: int, ow: int, kernels, strides, paddings) -> np.ndarray:
    """One CHW image's ``[oh * ow, C * kh * kw]`` patches (Paddle's test im2col, kOCF order),
    zeros outside the image."""
    c, h, w = img.shape
    kh, kw = kernels
    out = np.zeros((oh, ow, c, kh, kw))
    for i in range(oh):
        for j in range(ow):
            for ch in range(c):
                for a in range(kh):
                    for e in range(kw):
                        r = i * strides[0] + a - paddings[0]
                        s = j * strides[1] + e - paddings[1]
                        if 0 <= r < h and 0 <= s < w:
                            out[i, j, ch, a, e] = img[ch, r, s]
    return out.reshape(oh * ow, c * kh * kw)


def _im2seq_reference(x, attrs, real=None):
    n, _, h, w = x.shape
    kh, kw = attrs["kernels"]
    sh, sw = attrs["strides"]
    up, left, down, right = attrs["paddings"]
    rows, lod = [], [0]
    for b in range(n):
        rh, rw = h, w
        if real is not None and n > 1:
            rh = int(np.ceil(real[b, 0] / attrs["out_stride"][0]))
            rw = int(np.ceil(real[b, 1] / attrs["out_stride"][1]))
        # C++ int division truncates toward zero: a real size below the kernel still gives
        # one row of patches (the last case below)
        oh = int((rh + up + down - kh) / sh) + 1
        ow = int((rw + left + right - kw) / sw) + 1
        rows.append(_im2col_loops(x[b], oh, ow, (kh, kw), (sh, sw), (up, left)))
        lod.append(lod[-1] + oh * ow)
    return np.concatenate(rows), (tuple(lod),)


def test_im2sequence_docstring_example():
    x = np.array([[[[6, 2, 1], [8, 3, 5], [0, 2, 6]], [[2, 4, 4], [6, 3, 0], [6, 4, 7]]],
                  [[[6, 7, 1], [5, 7, 9], [2, 4, 8]], [[1, 2, 1], [1, 3, 5], [9, 0, 8]]]],
                 dtype=np.float32)
    res = run_op("im2sequence", {"X": [x]}, {"kernels": [2, 2]})
    want = np.array([[6, 2, 8, 3, 2, 4, 6, 3], [2, 1, 3, 5, 4, 4, 3, 0],
                     [8, 3, 0, 2, 6, 3, 6, 4], [3, 5, 2, 6, 3, 0, 4, 7],
                     [6, 7, 5, 7, 1, 2, 1, 3], [7, 1, 7, 9, 2, 1, 3, 5],
                     [5, 7, 2, 4, 1, 3, 9, 0], [7, 9, 4, 8, 3, 5, 0, 8]], dtype=np.float32)
    np.testing.assert_array_equal(res["Out"][0], want)
    assert res["Out"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [((0, 4, 8),)]}


# the configurations of Paddle's TestBlockExpandOp, Case2, Case3 and Case4
@pytest.mark.parametrize("shape, attrs", [
    ((1, 3, 4, 4), {"kernels": [2, 2], "strides": [1, 1], "paddings": [1, 1, 1, 1]}),
    ((2, 3, 4, 5), {"kernels": [2, 1], "strides": [2, 1], "paddings": [2, 1, 2, 1]}),
    ((2, 1, 4, 5), {"kernels": [2, 1], "strides": [2, 1], "paddings": [2, 0, 2, 0]}),
    ((2, 2, 3, 3), {"kernels": [2, 2], "strides": [1, 1], "paddings": [0, 0, 0, 0]}),
    ((2, 2, 5, 4), {"kernels": [3, 2], "strides": [2, 3], "paddings": [0, 1, 2, 0]}),
])
def test_im2sequence_matches_paddles_im2col_loops(shape, attrs):
    x = np.random.default_rng(3).uniform(0.1, 1, shape)
    res = run_op("im2sequence", {"X": [x]}, attrs)
    want, lod = _im2seq_reference(x, attrs)
    np.testing.assert_array_equal(res["Out"][0], want)
    assert res[LOD_KEY] == {"Out": [lod]}


# Paddle's TestBlockExpandOpCase6 and Case7 (real image sizes); Case5's batch of one ignores Y
@pytest.mark.parametrize("shape, attrs, real", [
    ((3, 1, 4, 5), {"kernels": [2, 1], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                    "out_stride": [1, 1]}, [[8, 10], [5, 8], [5, 8]]),
    ((2, 2, 3, 3), {"kernels": [2, 2], "strides": [1, 1], "paddings": [1, 0, 1, 0],
                    "out_stride": [2, 2]}, [[6, 6], [4, 4]]),
    ((1, 3, 4, 5), {"kernels": [2, 1], "strides": [2, 1], "paddings": [2, 1, 2, 1],
                    "out_stride": [2, 2]}, [[8, 10]]),
    ((2, 1, 4, 4), {"kernels": [2, 2], "strides": [2, 2], "paddings": [0, 0, 0, 0],
                    "out_stride": [3, 2]}, [[7, 5], [2, 8]]),
])
def test_im2sequence_with_real_image_sizes(shape, attrs, real):
    x = np.random.default_rng(4).uniform(0.1, 1, shape)
    real = np.array(real, dtype=np.float64)
    res = run_op("im2sequence", {"X": [x], "Y": [real]}, attrs)
    want, lod = _im2seq_reference(x, attrs, real)
    np.testing.assert_array_equal(res["Out"][0], want)
    assert res[LOD_KEY] == {"Out": [lod]}
    if shape[0] > 1:  # the real sizes changed the sequence lengths
        assert lod != _im2seq_reference(x, attrs)[1]


def test_im2sequence_grad_is_col2im():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 3, 4))
    attrs = {"kernels": [2, 2], "strides": [1, 2], "paddings": [1, 0, 0, 1]}
    out = run_op("im2sequence", {"X": [x]}, attrs)["Out"][0]
    d = rng.standard_normal(out.shape)
    dx = run_op("im2sequence_grad", {"X": [x], "Out@GRAD": [d]}, attrs)["X@GRAD"][0]
    # <dOut, im2seq(x)> is linear in x: its gradient is dX for every x
    np.testing.assert_allclose((dx * x).sum(), (d * out).sum(), rtol=1e-12)
    for j in range(x.size):
        e = np.zeros(x.size)
        e[j] = 1.0
        col = run_op("im2sequence", {"X": [e.reshape(x.shape)]}, attrs)["Out"][0]
        assert dx.flat[j] == pytest.approx((col * d).sum(), rel=1e-12)


def test_im2sequence_errors():
    with pytest.raises(ValueError, match="Input\\(X\\) must be 4-D NCHW"):
        run_op("im2sequence", {"X": [np.ones((2, 3, 4))]}, {"kernels": [2, 2]})
    with pytest.raises(ValueError, match="attribute kernels must hold 2 ints"):
        run_op("im2sequence", {"X": [np.ones((1, 1, 3, 3))]})
    with pytest.raises(ValueError, match="gives an empty output"):
        run_op("im2sequence", {"X": [np.ones((1, 1, 3, 3))]}, {"kernels": [5, 1]})
    with pytest.raises(ValueError, match="Input\\(Y\\) must be \\[N, 2\\]"):
        run_op("im2sequence", {"X": [np.ones((2, 1, 3, 3))], "Y": [np.ones((2, 3))]},
               {"kernels": [1, 1]})


# ---------------------------------------------------------------------------------------------
# sequence_scatter


@pytest.mark.parametrize("lengths", [[3, 5, 4], [6, 0, 6], [0, 6, 6], [6, 6, 0]])
def test_sequence_scatter_matches_paddles_test(lengths):
    rng = np.random.default_rng(6)
    x = rng.uniform(0.1, 1.0, (3, 6)).astype(np.float32)
    ids = np.array([[0], [1], [2], [5], [4], [3], [0], [1], [3], [2], [5], [4]], np.int64)
    upd = rng.uniform(0.1, 1.0, (12, 1)).astype(np.float32)
    lod = (tuple(np.cumsum([0, *lengths]).tolist()),)
    res = run_op("sequence_scatter", {"X": [x], "Ids": [ids], "Updates": [upd]},
                 {"_lods": {"Ids": [lod], "Updates": [lod]}})
    want = x.copy()
    offset = 0
    for i, length in enumerate(lengths):
        want[i][ids[offset:offset + length, 0]] += upd[offset:offset + length, 0]
        offset += length
    np.testing.assert_allclose(res["Out"][0], want, rtol=1e-6)
    assert res["Out"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [None]}


def test_sequence_scatter_repeated_ids_add_up_and_grad_reads_back():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 2, 2))
    ids = np.array([[3], [3], [0], [1], [3]], np.int64)
    upd = rng.standard_normal((5, 1))
    lod = ((0, 3, 3, 5),)
    attrs = {"_lods": {"Ids": [lod], "Updates": [lod]}}
    out = run_op("sequence_scatter", {"X": [x], "Ids": [ids], "Updates": [upd]}, attrs)["Out"][0]
    want = x.copy().reshape(3, 4)
    seq_of_row = [0, 0, 0, 2, 2]
    for r in range(5):
        want[seq_of_row[r], ids[r, 0]] += upd[r, 0]
    np.testing.assert_allclose(out, want.reshape(3, 2, 2), rtol=1e-12)
    d = rng.standard_normal(x.shape)
    g = run_op("sequence_scatter_grad", {"X": [x], "Ids": [ids], "Updates": [upd],
                                         "Out@GRAD": [d]}, attrs)
    np.testing.assert_array_equal(g["X@GRAD"][0], d)
    flat = d.reshape(3, 4)
    np.testing.assert_array_equal(g["Updates@GRAD"][0][:, 0],
                                  [flat[seq_of_row[r], ids[r, 0]] for r in range(5)])
    assert g[LOD_KEY]["Updates@GRAD"] == [lod]


def test_sequence_scatter_errors():
    x = np.zeros((2, 3))
    ids, upd = np.array([[0], [2], [1]], np.int64), np.ones((3, 1))
    lod = ((0, 1, 3),)

    def run(x=x, ids=ids, upd=upd, ids_lod=lod, upd_lod=lod):
        return run_op("sequence_scatter", {"X": [x], "Ids": [ids], "Updates": [upd]},
                      {"_lods": {"Ids": [ids_lod], "Updates": [upd_lod]}})

    with pytest.raises(ValueError, match="Input\\(Ids\\) has no LoD"):
        run(ids_lod=None)
    with pytest.raises(ValueError, match="Input\\(Ids\\) must have one LoD level, got 2"):
        run(ids_lod=((0, 1), (0, 3)))
    with pytest.raises(ValueError, match="Ids holds 3, outside the 3 columns"):
        run(ids=np.array([[0], [3], [1]], np.int64))
    with pytest.raises(ValueError, match="Ids has 3 sequences but Input\\(X\\) only 2 rows"):
        run(ids_lod=((0, 1, 2, 3),))
    with pytest.raises(ValueError, match="covers 2 rows but Ids has 3"):
        run(ids_lod=((0, 1, 2),))
    with pytest.raises(ValueError, match="Updates\\) must be \\[N, 1\\]"):
        run(upd=np.ones((3, 2)))


# ---------------------------------------------------------------------------------------------
# chunk_eval

_LETTERS = {"IOB": "BI", "IOE": "IE", "IOBES": "BIES", "plain": "I"}


def _chunks_reference(seq, scheme: str, num_types: int) -> set[tuple[int, int, int]]:
    """The chunks ``(begin, end, type)`` of a tag sequence, read as letters: a chunk runs
    until an O, a change of type, a B or S, or an I/E right after an E or S."""
    letters = _LETTERS[scheme]
    outside = num_types * len(letters)
    chunks, cur = set(), None  # cur = [begin, type, last letter]
    for i, v in enumerate(seq):
        if v == outside:
            if cur:
                chunks.add((cur[0], i - 1, cur[1]))
            cur = None
            continue
        letter, kind = letters[v % len(letters)], v // len(letters)
        new = (cur is None or kind != cur[1] or letter in "BS"
               or (letter in "IE" and cur[2] in "ES"))
        if new:
            if cur:
                chunks.add((cur[0], i - 1, cur[1]))
            cur = [i, kind, letter]
        cur[2] = letter
    if cur:
        chunks.add((cur[0], len(seq) - 1, cur[1]))
    return chunks


def _counts_reference(infer, label, offsets, scheme, num_types, excluded=()):
    n_inf = n_lab = n_cor = 0
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        ci = {c for c in _chunks_reference(infer[a:b], scheme, num_types) if c[2] not in excluded}
        cl = {c for c in _chunks_reference(label[a:b], scheme, num_types) if c[2] not in excluded}
        n_inf, n_lab, n_cor = n_inf + len(ci), n_lab + len(cl), n_cor + len(ci & cl)
    return n_inf, n_lab, n_cor


def _check_outputs(res, n_inf, n_lab, n_cor):
    assert res["NumInferChunks"][0].tolist() == [n_inf]
    assert res["NumLabelChunks"][0].tolist() == [n_lab]
    assert res["NumCorrectChunks"][0].tolist() == [n_cor]
    assert res["NumInferChunks"][0].dtype == np.int64
    p = n_cor / n_inf if n_inf else 0.0
    r = n_cor / n_lab if n_lab else 0.0
    f1 = 2 * p * r / (p + r) if n_cor else 0.0
    for slot, v in (("Precision", p), ("Recall", r), ("F1-Score", f1)):
        assert res[slot][0].dtype == np.float32 and res[slot][0].shape == (1,)
        np.testing.assert_allclose(res[slot][0], [v], rtol=1e-6)


def test_chunk_eval_docstring_example():
    # IOB, 3 types: B-ORG 0 I-ORG 1 B-PER 2 I-PER 3 B-LOC 4 I-LOC 5 O 6
    infer = np.array([[2], [3], [6], [6], [0], [1], [1], [1], [6], [4]], np.int64)
    label = np.array([[2], [3], [6], [6], [0], [1], [6], [1], [6], [4]], np.int64)
    lod = ((0, 10),)
    res = run_op("chunk_eval", {"Inference": [infer], "Label": [label]},
                 {"num_chunk_types": 3, "_lods": {"Inference": [lod], "Label": [lod]}})
    _check_outputs(res, 3, 4, 2)  # I-ORG after O starts a chunk of its own


@pytest.mark.parametrize("scheme", ["IOB", "IOE", "IOBES", "plain"])
def test_chunk_eval_random_tags_match_the_letter_reference(scheme):
    rng = np.random.default_rng({"IOB": 0, "IOE": 1, "IOBES": 2, "plain": 3}[scheme])
    num_types = 3
    top = num_types * len(_LETTERS[scheme])
    offsets = (0, 7, 7, 19, 40, 41)
    label = rng.integers(0, top + 1, offsets[-1])
    infer = np.where(rng.random(offsets[-1]) < 0.7, label, rng.integers(0, top + 1, offsets[-1]))
    for excluded in ([], [1]):
        res = run_op("chunk_eval", {"Inference": [infer[:, None]], "Label": [label[:, None]]},
                     {"num_chunk_types": num_types, "chunk_scheme": scheme,
                      "excluded_chunk_types": excluded,
                      "_lods": {"Inference": [(offsets,)], "Label": [(offsets,)]}})
        want = _counts_reference(infer, label, offsets, scheme, num_types, excluded)
        assert want[2] > 0
        _check_outputs(res, *want)


def _paddle_style_case(rng, scheme, num_types, excluded, counts, padded):
    """Paddle's test_chunk_eval_op generator: non-overlapping random chunks, ``correct`` of
    them in both sequences, the rest in only one, filled in as IOB or IOE tags."""
    n_correct, n_infer, n_label = counts
    ntag, size = 2, 50
    infer = np.full(size, num_types * ntag, np.int64)
    label = infer.copy()
    starts = sorted([0, size, *rng.choice(np.arange(1, size), 4, replace=False).tolist()])
    total = n_infer + n_label - n_correct
    begins = sorted(rng.choice(size, total, replace=False).tolist())
    chunks = []
    for k, b in enumerate(begins):
        seq_end = next(s for s in starts if s > b)
        limit = min(begins[k + 1], seq_end) if k + 1 < len(begins) else seq_end
        chunks.append((int(rng.integers(num_types)), b, int(rng.integers(b, limit))))
    order = rng.permutation(total)
    correct = order[:n_correct].tolist()
    only_infer = order[n_correct:n_infer].tolist()
    only_label = order[n_infer:].tolist()

    def fill(data, picked):
        for kind, b, e in (chunks[i] for i in picked):
            if scheme == "IOB":
                data[b] = kind * ntag
                data[b + 1:e + 1] = kind * ntag + 1
            else:
                data[b:e] = kind * ntag
                data[e] = kind * ntag + 1

    fill(infer, correct + only_infer)
    fill(label, correct + only_label)
    want = [sum(chunks[i][0] not in excluded for i in group)
            for group in (correct + only_infer, correct + only_label, correct)]
    lengths = np.diff(starts)
    attrs = {"num_chunk_types": num_types, "chunk_scheme": scheme,
             "excluded_chunk_types": excluded}
    if not padded:
        lod = (tuple(starts),)
        attrs["_lods"] = {"Inference": [lod], "Label": [lod]}
        return {"Inference": [infer[:, None]], "Label": [label[:, None]]}, attrs, want
    width = int(lengths.max())
    pad_i = np.full((len(lengths), width, 1), -1, np.int64)
    pad_l = pad_i.copy()
    for k, (a, b) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
        pad_i[k, :b - a, 0], pad_l[k, :b - a, 0] = infer[a:b], label[a:b]
    ins = {"Inference": [pad_i], "Label": [pad_l], "SeqLength": [lengths.astype(np.int64)]}
    return ins, attrs, want


# TestChunkEvalOp (IOB, 2 types, counts 4/5/9), TestChunkEvalOpWithExclude (IOE, 3 types,
# excluding type 1, 15/18/20), TestChunkEvalOpWithTensorInput (padded with -1, SeqLength)
@pytest.mark.parametrize("scheme, num_types, excluded, counts, padded", [
    ("IOB", 2, [], (4, 5, 9), False),
    ("IOE", 3, [1], (15, 18, 20), False),
    ("IOB", 2, [], (4, 5, 9), True),
])
def test_chunk_eval_paddles_generated_cases(scheme, num_types, excluded, counts, padded):
    ins, attrs, (n_inf, n_lab, n_cor) = _paddle_style_case(
        np.random.default_rng(8), scheme, num_types, excluded, counts, padded)
    res = run_op("chunk_eval", ins, attrs)
    _check_outputs(res, n_inf, n_lab, n_cor)


def test_chunk_eval_no_chunks_gives_zeros():
    o = np.full((4, 1), 4, np.int64)  # IOB, 2 types: 4 is O
    lod = ((0, 4),)
    res = run_op("chunk_eval", {"Inference": [o], "Label": [o]},
                 {"num_chunk_types": 2, "_lods": {"Inference": [lod], "Label": [lod]}})
    _check_outputs(res, 0, 0, 0)


def test_chunk_eval_errors():
    tags = np.zeros((3, 1), np.int64)
    lod = ((0, 3),)
    both = {"_lods": {"Inference": [lod], "Label": [lod]}}
    with pytest.raises(ValueError, match="chunk_scheme must be one of"):
        run_op("chunk_eval", {"Inference": [tags], "Label": [tags]},
               {"num_chunk_types": 2, "chunk_scheme": "BIO", **both})
    with pytest.raises(ValueError, match="num_chunk_types must be a positive int"):
        run_op("chunk_eval", {"Inference": [tags], "Label": [tags]}, both)
    with pytest.raises(ValueError, match="Input\\(Label\\) holds 5, above num_chunk_types"):
        run_op("chunk_eval", {"Inference": [tags], "Label": [np.array([[0], [5], [1]])]},
               {"num_chunk_types": 2, **both})
    with pytest.raises(ValueError, match="must have the same LoD"):
        run_op("chunk_eval", {"Inference": [tags], "Label": [tags]},
               {"num_chunk_types": 2, "_lods": {"Inference": [((0, 1, 3),)], "Label": [lod]}})
    with pytest.raises(ValueError, match="SeqLength \\(seq_length\\) must be given"):
        run_op("chunk_eval", {"Inference": [tags], "Label": [tags]}, {"num_chunk_types": 2})
    with pytest.raises(ValueError, match="does not fit the padded inputs"):
        run_op("chunk_eval", {"Inference": [tags.reshape(1, 3)], "Label": [tags.reshape(1, 3)],
                              "SeqLength": [np.array([4])]}, {"num_chunk_types": 2})


def test_chunk_eval_on_the_device_module(device_xp):
    cp = device_xp
    infer = np.array([[0], [1], [4], [2], [3], [3], [4]], np.int64)
    label = np.array([[0], [1], [4], [2], [4], [3], [4]], np.int64)
    lod = ((0, 3, 7),)
    attrs = {"num_chunk_types": 2, "_lods": {"Inference": [lod], "Label": [lod]}}
    host = run_op("chunk_eval", {"Inference": [infer], "Label": [label]}, attrs)
    dev = run_op("chunk_eval", {"Inference": [cp.asarray(infer)], "Label": [cp.asarray(label)]},
                 attrs)
    for slot, (value,) in host.items():
        assert isinstance(dev[slot][0], cp.ndarray), slot
        np.testing.assert_array_equal(cp.asnumpy(dev[slot][0]), value, err_msg=slot)
    padded = {"Inference": [cp.asarray(infer.reshape(1, 7))],
              "Label": [cp.asarray(label.reshape(1, 7))], "SeqLength": [cp.asarray([7])]}
    res = run_op("chunk_eval", padded, {"num_chunk_types": 2})
    assert cp.asnumpy(res["NumLabelChunks"][0]).tolist() == [3]
