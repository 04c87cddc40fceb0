"""Kernels of the LoD contrib ops of dask_fluid.ops.contrib_ops (match_matrix_tensor,
sequence_topk_avg_pooling, var_conv_2d, fused_embedding_seq_pool) against element-by-element
numpy references ported from Paddle's unit tests (test_match_matrix_tensor_op.py,
test_sequence_topk_avg_pooling.py, test_var_conv_2d.py, test_fused_emb_seq_pool_op.py), their
grad kernels against the loops of Paddle's CPU grad kernels, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows, registry

from . import run_op

rng = np.random.default_rng(7)
GRAD = registry.GRAD
LOD = registry.LOD_KEY


def _offsets(lengths):
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)]))


# -- match_matrix_tensor -------------------------------------------------------------------------

def _ref_mmt(x, xl, y, yl, w, dim_t):
    """test_match_matrix_tensor_op.py's reference: per pair, per channel, x_b · W_t · y_b^T."""
    out = []
    ox, oy = _offsets(xl), _offsets(yl)
    for b in range(len(xl)):
        xb, yb = x[ox[b]:ox[b + 1]], y[oy[b]:oy[b + 1]]
        for t in range(dim_t):
            out.append((xb @ w[:, t, :] @ yb.T).reshape(-1))
    return np.concatenate(out).reshape(-1, 1)


@pytest.mark.parametrize("xl, yl, dim_t, h", [([2, 3], [3, 1], 2, 2), ([1, 4, 2], [3, 3, 2], 3, 4),
                                              ([2, 0, 3], [1, 2, 0], 2, 3)])
def test_match_matrix_tensor_matches_reference(xl, yl, dim_t, h):
    x, y = rng.random((sum(xl), h)), rng.random((sum(yl), h))
    w = rng.random((h, dim_t, h))
    res = run_op("match_matrix_tensor", {"X": [x], "Y": [y], "W": [w]},
                 {"dim_t": dim_t, "_lods": {"X": [(_offsets(xl),)], "Y": [(_offsets(yl),)]}})
    np.testing.assert_allclose(res["Out"][0], _ref_mmt(x, xl, y, yl, w, dim_t), rtol=1e-12)
    assert res[LOD]["Out"] == [(_offsets([dim_t * a * b for a, b in zip(xl, yl, strict=True)]),)]
    np.testing.assert_allclose(res["Tmp"][0].reshape(-1),
                               (x @ w.reshape(h, -1)).reshape(-1), rtol=1e-12)


def test_match_matrix_tensor_doc_example_shapes():
    # Fluid's doc: x.lod [[2, 3]], y.lod [[3, 1]], channel_num 2 -> out.lod [[12, 6]], [18, 1]
    x, y, w = rng.random((5, 2)), rng.random((4, 2)), rng.random((2, 2, 2))
    res = run_op("match_matrix_tensor", {"X": [x], "Y": [y], "W": [w]},
                 {"dim_t": 2, "_lods": {"X": [((0, 2, 5),)], "Y": [((0, 3, 4),)]}})
    assert res["Out"][0].shape == (18, 1) and res[LOD]["Out"] == [((0, 12, 18),)]
    assert res["Tmp"][0].shape == (5 * 2 * 2, 1)


def test_match_matrix_tensor_grad_matches_paddle_loops():
    xl, yl, dim_t, h = [2, 3], [3, 1], 2, 3
    x, y, w = rng.random((5, h)), rng.random((4, h)), rng.random((h, dim_t, h))
    lods = {"X": [(_offsets(xl),)], "Y": [(_offsets(yl),)]}
    fwd = run_op("match_matrix_tensor", {"X": [x], "Y": [y], "W": [w]},
                 {"dim_t": dim_t, "_lods": lods})
    d = rng.random(fwd["Out"][0].shape)
    g = run_op("match_matrix_tensor_grad",
               {"X": [x], "Y": [y], "W": [w], "Tmp": [fwd["Tmp"][0]], "Out" + GRAD: [d]},
               {"dim_t": dim_t, "_lods": lods})
    # CPUMatchMatrixTensorOPGradKernel's loops (axpy per output element)
    tmp = (x @ w.reshape(h, -1)).reshape(5, dim_t, h)
    dtmp, dy = np.zeros_like(tmp), np.zeros_like(y)
    ox, oy, top = _offsets(xl), _offsets(yl), 0
    for b in range(2):
        for t in range(dim_t):
            for i in range(xl[b]):
                for j in range(yl[b]):
                    diff = d[top + t * xl[b] * yl[b] + i * yl[b] + j, 0]
                    dtmp[ox[b] + i, t] += diff * y[oy[b] + j]
                    dy[oy[b] + j] += diff * tmp[ox[b] + i, t]
        top += dim_t * xl[b] * yl[b]
    d2 = dtmp.reshape(5, -1)
    np.testing.assert_allclose(g["X" + GRAD][0], d2 @ w.reshape(h, -1).T, rtol=1e-12)
    np.testing.assert_allclose(g["Y" + GRAD][0], dy, rtol=1e-12)
    np.testing.assert_allclose(g["W" + GRAD][0], (x.T @ d2).reshape(w.shape), rtol=1e-12)
    assert g[LOD]["X" + GRAD] == lods["X"] and g[LOD]["Y" + GRAD] == lods["Y"]
    # without Tmp the grad kernel recomputes it
    g2 = run_op("match_matrix_tensor_grad", {"X": [x], "Y": [y], "W": [w], "Out" + GRAD: [d]},
                {"dim_t": dim_t, "_lods": lods})
    np.testing.assert_allclose(g2["W" + GRAD][0], g["W" + GRAD][0], rtol=1e-12)


@pytest.mark.parametrize("ins, attrs, err", [
    ({"X": [np.ones((3, 2))], "Y": [np.ones((2, 2))], "W": [np.ones((2, 1, 2))]},
     {"_lods": {"X": [None], "Y": [((0, 2),)]}}, "Input\\(X\\) has no LoD"),
    ({"X": [np.ones((3, 2))], "Y": [np.ones((2, 2))], "W": [np.ones((2, 1, 2))]},
     {"_lods": {"X": [((0, 1, 3),)], "Y": [((0, 2),)]}}, "different numbers of sequences"),
    ({"X": [np.ones((3, 2))], "Y": [np.ones((2, 2))], "W": [np.ones((2, 2, 2))]},
     {"dim_t": 1, "_lods": {"X": [((0, 3),)], "Y": [((0, 2),)]}}, "W must be"),
    ({"X": [np.ones((3, 2))], "Y": [np.ones((2, 2))], "W": [np.ones((2, 1, 2))]},
     {"_lods": {"X": [((0, 2),)], "Y": [((0, 2),)]}}, "last offset"),
])
def test_match_matrix_tensor_errors(ins, attrs, err):
    with pytest.raises(ValueError, match=err):
        run_op("match_matrix_tensor", ins, attrs)


# -- sequence_topk_avg_pooling -------------------------------------------------------------------

def _ref_topk(x, x_len, row, col, topks, channel_num):
    """test_sequence_topk_avg_pooling.py's compute (argsort-based top-k, -1 / 0 padding)."""
    max_k = topks[-1]
    out, pos, offset = [], [], 0
    for idx in range(len(x_len)):
        assert x_len[idx] == channel_num * row[idx] * col[idx]
        out_tmp, pos_tmp = [], []
        for _ in range(channel_num):
            for _ in range(row[idx]):
                sub = x[offset:offset + col[idx]]
                real = min(max_k, len(sub))
                p = np.argsort(-sub, kind="stable")[:real]
                v = sub[p]
                p = np.concatenate([p, np.full(max_k - real, -1)])
                v = np.concatenate([v, np.zeros(max_k - real)])
                s = np.concatenate([[0.0], np.cumsum(np.where(p >= 0, v, 0.0))])
                out_tmp.append([s[k] / k for k in topks])
                pos_tmp.append(p)
                offset += col[idx]
        out.append(np.array(out_tmp).reshape(channel_num, -1, len(topks)).transpose(1, 0, 2)
                   .reshape(-1, len(topks) * channel_num))
        pos.append(np.array(pos_tmp).reshape(channel_num, -1, max_k).transpose(1, 0, 2)
                   .reshape(-1))
    return np.vstack(out), np.concatenate(pos)


@pytest.mark.parametrize("topks, channel_num, row, col", [
    ([2], 3, [2, 4], [3, 2]), ([2, 3], 3, [3], [4]), ([1, 3, 5], 5, [2, 3], [3, 1]),
    ([1, 2], 2, [2, 1, 3], [4, 2, 1])])
def test_sequence_topk_avg_pooling_matches_reference(topks, channel_num, row, col):
    x_len = [channel_num * r * c for r, c in zip(row, col, strict=True)]
    x = rng.random(sum(x_len))
    lods = {"X": [(_offsets(x_len),)], "ROW": [(_offsets(row),)],
            "COLUMN": [(_offsets(col),)]}
    res = run_op("sequence_topk_avg_pooling",
                 {"X": [x.reshape(-1, 1)], "ROW": [rng.random((sum(row), 4))],
                  "COLUMN": [rng.random((sum(col), 4))]},
                 {"topks": topks, "channel_num": channel_num, "_lods": lods})
    out, pos = _ref_topk(x, x_len, row, col, topks, channel_num)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_array_equal(res["pos"][0], pos)
    assert res["pos"][0].dtype == np.int32
    assert res[LOD]["Out"] == lods["ROW"]


def test_sequence_topk_avg_pooling_ties_take_the_first():
    x = np.array([1.0, 3.0, 3.0, 2.0]).reshape(-1, 1)
    res = run_op("sequence_topk_avg_pooling", {"X": [x], "ROW": [x[:1]], "COLUMN": [x]},
                 {"topks": [1, 2], "channel_num": 1,
                  "_lods": {"X": [((0, 4),)], "ROW": [((0, 1),)], "COLUMN": [((0, 4),)]}})
    np.testing.assert_array_equal(res["pos"][0], [1, 2])
    np.testing.assert_allclose(res["Out"][0], [[3.0, 3.0]])


def test_sequence_topk_avg_pooling_grad_matches_paddle_loops():
    topks, channel_num, row, col = [1, 3, 5], 2, [2, 3], [4, 2]
    x_len = [channel_num * r * c for r, c in zip(row, col, strict=True)]
    x = rng.random((sum(x_len), 1))
    lods = {"X": [(_offsets(x_len),)], "ROW": [(_offsets(row),)], "COLUMN": [(_offsets(col),)]}
    attrs = {"topks": topks, "channel_num": channel_num, "_lods": lods}
    ins = {"X": [x], "ROW": [rng.random((sum(row), 1))], "COLUMN": [rng.random((sum(col), 1))]}
    fwd = run_op("sequence_topk_avg_pooling", ins, attrs)
    d = rng.random(fwd["Out"][0].shape)
    g = run_op("sequence_topk_avg_pooling_grad",
               {**ins, "pos": [fwd["pos"][0]], "Out" + GRAD: [d]}, attrs)
    # SequenceTopkAvgPoolingGradKernel's loops
    ref = np.zeros(sum(x_len))
    pos, ox, orow = fwd["pos"][0], _offsets(x_len), _offsets(row)
    nk, max_k = len(topks), topks[-1]
    for i in range(len(row)):
        for j in range(channel_num):
            for r in range(row[i]):
                pslice = pos[(orow[i] + r) * channel_num * max_k + j * max_k:][:max_k]
                for m in range(nk):
                    for k in range(topks[m]):
                        if pslice[k] == -1:
                            break
                        at = ox[i] + j * row[i] * col[i] + r * col[i] + pslice[k]
                        ref[at] += d[orow[i] + r, j * nk + m] / topks[m]
    np.testing.assert_allclose(g["X" + GRAD][0].reshape(-1), ref, rtol=1e-12)
    assert g[LOD]["X" + GRAD] == lods["X"]


@pytest.mark.parametrize("attrs, lods, err", [
    ({"topks": [3, 1]}, None, "largest last"),
    ({"topks": []}, None, "at least one"),
    ({"topks": [1], "channel_num": 0}, None, "channel_num must be > 0"),
    ({"topks": [1], "channel_num": 2}, None, "channel_num \\* row \\* col"),
    ({"topks": [1]}, {"X": [((0, 4),)], "ROW": [((0, 1, 1),)], "COLUMN": [((0, 4),)]},
     "different numbers"),
])
def test_sequence_topk_avg_pooling_errors(attrs, lods, err):
    x = np.ones((4, 1))
    lods = lods or {"X": [((0, 4),)], "ROW": [((0, 1),)], "COLUMN": [((0, 4),)]}
    with pytest.raises(ValueError, match=err):
        run_op("sequence_topk_avg_pooling", {"X": [x], "ROW": [x[:1]], "COLUMN": [x]},
               {**attrs, "_lods": lods})


# -- var_conv_2d ---------------------------------------------------------------------------------

def _ref_var_conv(x, x_off, row, col, w, ic, kh, kw, sh, sw):
    """var_conv_2d_op.cc's Im2Col + GEMM (test_var_conv_2d.py's reference), element by element,
    reading image b at ``x_off[b] + z·H·W + y·W + x`` of X's flat data, as Fluid does whatever
    the sequence holds; reads past X's end give 0 (undefined in C++)."""
    out, cols = [], []
    for b in range(len(row)):
        h, wd = row[b], col[b]
        if h == 0 or wd == 0:
            continue
        oh, ow = (h - 1) // sh + 1, (wd - 1) // sw + 1
        col_b = np.zeros((ic * kh * kw, oh * ow))
        for z in range(ic):
            for y in range(0, h, sh):
                for xx in range(0, wd, sw):
                    c = xx // sw + y // sh * ow
                    for ky in range(kh):
                        for kx in range(kw):
                            iy, ix = y + ky - kh // 2, xx + kx - kw // 2
                            if 0 <= iy < h and 0 <= ix < wd:
                                k = x_off[b] + z * h * wd + iy * wd + ix
                                col_b[z * kh * kw + ky * kw + kx, c] = \
                                    x[k] if k < len(x) else 0.0
        cols.append(col_b.reshape(-1))
        out.append((w @ col_b).reshape(-1))
    return np.concatenate(out).reshape(-1, 1), np.concatenate(cols).reshape(-1, 1)


@pytest.mark.parametrize("ic, oc, row, col, k, s", [
    (2, 3, [5, 4], [6, 7], (3, 3), (1, 1)), (1, 2, [3, 4], [5, 2], (2, 3), (2, 1)),
    (3, 1, [4, 0, 2], [3, 2, 5], (3, 1), (1, 2)), (2, 2, [1], [1], (3, 3), (2, 2))])
def test_var_conv_2d_matches_reference(ic, oc, row, col, k, s):
    x_lod = [ic * r * c for r, c in zip(row, col, strict=True)]
    x = rng.random((sum(x_lod), 1))
    w = rng.random((oc, ic * k[0] * k[1]))
    attrs = {"InputChannel": ic, "OutputChannel": oc, "KernelH": k[0], "KernelW": k[1],
             "StrideH": s[0], "StrideW": s[1],
             "_lods": {"X": [(_offsets(x_lod),)], "ROW": [(_offsets(row),)],
                       "COLUMN": [(_offsets(col),)]}}
    ins = {"X": [x], "ROW": [rng.random((sum(row), 1))], "COLUMN": [rng.random((sum(col), 1))],
           "W": [w]}
    res = run_op("var_conv_2d", ins, attrs)
    out, cols = _ref_var_conv(x.reshape(-1), _offsets(x_lod), row, col, w, ic, *k, *s)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_allclose(res["Col"][0], cols, rtol=1e-12)
    oh = [(r - 1) // s[0] + 1 if r and c else 0 for r, c in zip(row, col, strict=True)]
    ow = [(c - 1) // s[1] + 1 if r and c else 0 for r, c in zip(row, col, strict=True)]
    assert res[LOD]["Out"] == [(_offsets([oc * a * b for a, b in zip(oh, ow, strict=True)]),)]
    # the grad kernel against the adjoint of the reference's linear map, by columns
    d = rng.random(res["Out"][0].shape)
    g = run_op("var_conv_2d_grad", {**ins, "Col": res["Col"], "Out": res["Out"],
                                    "Out" + GRAD: [d]}, attrs)
    jac = np.stack([_ref_var_conv(e, _offsets(x_lod), row, col, w, ic, *k, *s)[0].reshape(-1)
                    for e in np.eye(x.shape[0])], axis=1)
    np.testing.assert_allclose(g["X" + GRAD][0].reshape(-1), jac.T @ d.reshape(-1),
                               rtol=1e-10)
    dw = np.zeros_like(w)
    co, oo = 0, 0
    for a, b in zip(oh, ow, strict=True):
        if a * b == 0:
            continue
        cb = cols[co:co + ic * k[0] * k[1] * a * b].reshape(-1, a * b)
        dw += d[oo:oo + oc * a * b].reshape(oc, a * b) @ cb.T
        co, oo = co + cb.size, oo + oc * a * b
    np.testing.assert_allclose(g["W" + GRAD][0], dw, rtol=1e-10)


def test_var_conv_2d_doc_example_lod():
    # Fluid's doc: row [5, 4], col [6, 7], ic 2, oc 3, 3x3, stride 1 -> out.lod [[90, 84]]
    x = rng.random((116, 1))
    res = run_op("var_conv_2d", {"X": [x], "ROW": [x[:9]], "COLUMN": [x[:13]],
                                 "W": [rng.random((3, 18))]},
                 {"InputChannel": 2, "OutputChannel": 3, "KernelH": 3, "KernelW": 3,
                  "_lods": {"X": [((0, 60, 116),)], "ROW": [((0, 5, 9),)],
                            "COLUMN": [((0, 6, 13),)]}})
    assert res["Out"][0].shape == (174, 1) and res[LOD]["Out"] == [((0, 90, 174),)]


@pytest.mark.parametrize("w_shape, x_rows, x_lod, err", [
    ((3, 17), 116, (0, 60, 116), "W must be"),
    ((3, 18), 115, (0, 60, 116), "last offset")])
def test_var_conv_2d_errors(w_shape, x_rows, x_lod, err):
    x = np.ones((x_rows, 1))
    with pytest.raises(ValueError, match=err):
        run_op("var_conv_2d", {"X": [x], "ROW": [x[:9]], "COLUMN": [x[:13]],
                               "W": [np.ones(w_shape)]},
               {"InputChannel": 2, "OutputChannel": 3, "KernelH": 3, "KernelW": 3,
                "_lods": {"X": [(x_lod,)], "ROW": [((0, 5, 9),)], "COLUMN": [((0, 6, 13),)]}})


# -- fused_embedding_seq_pool --------------------------------------------------------------------

def _ref_fesp(w, ids, lod, padding_idx=-1):
    """test_fused_emb_seq_pool_op.py: lookup_table then sequence_pool sum, padding rows 0."""
    emb = w[ids.reshape(ids.shape[0], -1)]  # [N, idx_width, D]
    if padding_idx != -1:
        emb[ids.reshape(ids.shape[0], -1) == padding_idx] = 0
    emb = emb.reshape(ids.shape[0], -1)
    o = _offsets(lod)
    return np.stack([emb[o[i]:o[i + 1]].sum(axis=0) for i in range(len(lod))])


@pytest.mark.parametrize("ids_shape, lod, pad", [((6, 1), [2, 4], -1), ((6, 1), [3, 0, 3], 2),
                                                 ((5, 2, 1), [1, 4], 3)])
def test_fused_embedding_seq_pool_matches_reference(ids_shape, lod, pad):
    w = rng.random((6, 4))
    ids = rng.integers(0, 6, ids_shape).astype(np.int64)
    attrs = {"padding_idx": pad, "_lods": {"Ids": [(_offsets(lod),)]}}
    res = run_op("fused_embedding_seq_pool", {"W": [w], "Ids": [ids]}, attrs)
    np.testing.assert_allclose(res["Out"][0], _ref_fesp(w, ids, lod, pad), rtol=1e-12)
    assert res[LOD]["Out"] == [None]
    d = rng.random(res["Out"][0].shape)
    dense = run_op("fused_embedding_seq_pool_grad",
                   {"W": [w], "Ids": [ids], "Out" + GRAD: [d]}, attrs)["W" + GRAD][0]
    # the dense grad: each id's row gets its sequence's block of dOut (CSR AXPY loop)
    ref = np.zeros_like(w)
    o, width = _offsets(lod), ids.size // ids.shape[0]
    for b in range(len(lod)):
        for r in range(o[b], o[b + 1]):
            for i in range(width):
                idx = ids.reshape(ids.shape[0], -1)[r, i]
                if idx != pad:
                    ref[idx] += d[b, i * 4:(i + 1) * 4]
    np.testing.assert_allclose(dense, ref, rtol=1e-12)
    sparse = run_op("fused_embedding_seq_pool_grad",
                    {"W": [w], "Ids": [ids], "Out" + GRAD: [d]},
                    {**attrs, "is_sparse": True})["W" + GRAD][0]
    assert isinstance(sparse, SelectedRows) and sparse.height == 6
    np.testing.assert_array_equal(sparse.rows, ids.reshape(-1))
    np.testing.assert_allclose(sparse.to_dense(), ref, rtol=1e-12)


@pytest.mark.parametrize("ids, attrs, err, exc", [
    (np.array([[1], [7]]), {}, "out of range", ValueError),
    (np.array([[1], [2]]), {"combiner": "mean"}, "combiner must be 'sum'", ValueError),
    (np.array([[1, 2], [2, 3]]), {}, "last dimension of Ids must be 1", ValueError),
    (np.array([[1.0], [2.0]]), {}, "integer ids", TypeError),
])
def test_fused_embedding_seq_pool_errors(ids, attrs, err, exc):
    with pytest.raises(exc, match=err):
        run_op("fused_embedding_seq_pool", {"W": [np.ones((6, 2))], "Ids": [ids]},
               {**attrs, "_lods": {"Ids": [((0, 2),)]}})


def test_fused_embedding_seq_pool_needs_one_level_lod():
    with pytest.raises(ValueError, match="1-level LoD"):
        run_op("fused_embedding_seq_pool", {"W": [np.ones((6, 2))], "Ids": [np.ones((3, 1),
                                                                                      np.int64)]},
               {"_lods": {"Ids": [((0, 1, 2), (0, 1, 3))]}})
