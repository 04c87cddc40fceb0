"""Sequence (LoD) kernels on the cases where Paddle 1.8's own op unit tests found them apart
from Fluid 1.8 (test_sequence_unpad_op.py, test_sequence_erase_op.py, test_var_conv_2d.py),
each against an independent numpy reference written from Fluid's C++ kernel, with a
finite-difference check of the gradient where there is one."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import GRAD, LOD_KEY

from . import central_differences, run_op
from .test_contrib_lod_ops import _ref_var_conv

rng = np.random.default_rng(18)


def _offsets(lengths):
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)]))


# -- sequence_unpad: a 2-D X gives Out [sum(Length), 1] -------------------------------------------

@pytest.mark.parametrize("lengths", [[2, 3, 4], [0, 5, 1]])
def test_sequence_unpad_2d_x_gives_one_wide_rows(lengths):
    x = rng.random((3, 6))
    length = np.array(lengths, np.int64)
    res = run_op("sequence_unpad", {"X": [x], "Length": [length]})
    # sequence_unpad_op.h: out dims {sum(Length), 1} when X is 2-D
    ref = np.concatenate([x[i, :n] for i, n in enumerate(lengths)]).reshape(-1, 1)
    assert res["Out"][0].shape == (sum(lengths), 1)
    np.testing.assert_array_equal(res["Out"][0], ref)
    assert res[LOD_KEY]["Out"] == [(_offsets(lengths),)]
    # the grad kernel reads dOut [sum, 1] and pads it back with zeros
    d = rng.random((sum(lengths), 1))
    g = run_op("sequence_unpad_grad", {"X": [x], "Length": [length], "Out" + GRAD: [d]})
    num = central_differences(
        lambda: float((run_op("sequence_unpad", {"X": [x], "Length": [length]})["Out"][0]
                       * d).sum()), x)
    np.testing.assert_allclose(g["X" + GRAD][0], num, atol=1e-8)
    dx_ref = np.zeros_like(x)
    pos = 0
    for i, n in enumerate(lengths):
        dx_ref[i, :n] = d[pos:pos + n, 0]
        pos += n
    np.testing.assert_array_equal(g["X" + GRAD][0], dx_ref)


def test_sequence_unpad_3d_x_keeps_trailing_dims():
    x = rng.random((2, 3, 4))
    res = run_op("sequence_unpad", {"X": [x], "Length": [np.array([1, 3], np.int64)]})
    np.testing.assert_array_equal(res["Out"][0], np.concatenate([x[0, :1], x[1, :3]]))


def test_sequence_unpad_layer_declares_one_wide_rows_for_2d_x():
    import dask_fluid as fluid

    prog, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(prog, start):
        x = fluid.layers.data(name="x", shape=[-1, 6], dtype="float64",
                              append_batch_size=False)
        length = fluid.layers.data(name="len", shape=[-1], dtype="int64",
                                   append_batch_size=False)
        out = fluid.layers.sequence_unpad(x, length)
    assert list(out.shape) == [-1, 1]
    exe = fluid.Executor(fluid.CPUPlace())
    xv = rng.random((2, 6))
    got, = exe.run(prog, feed={"x": xv, "len": np.array([2, 4], np.int64)},
                   fetch_list=[out], return_numpy=False)
    assert got.lod() == [[0, 2, 6]]
    np.testing.assert_array_equal(np.array(got),
                                  np.concatenate([xv[0, :2], xv[1, :4]]).reshape(-1, 1))


# -- sequence_erase: any number of LoD levels; only the last one shrinks --------------------------

def _erase_reference(x: np.ndarray, last: tuple, tokens: list[int]):
    """sequence_erase_op.h's loop: per sequence of the last level, the ids not in tokens."""
    kept, offsets = [], [0]
    for a, b in zip(last[:-1], last[1:], strict=True):
        kept += [int(v) for v in x[a:b, 0] if int(v) not in tokens]
        offsets.append(len(kept))
    return np.array(kept, x.dtype).reshape(-1, 1), tuple(offsets)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_sequence_erase_two_level_lod(dtype):
    x = rng.integers(0, 10, (30, 1)).astype(dtype)
    lod = ((0, 1, 4), _offsets([9, 4, 11, 6]))  # test_sequence_erase_op.py's LoD2 case
    tokens = [2, 3, 5]
    res = run_op("sequence_erase", {"X": [x]}, {"tokens": tokens, "_lods": {"X": [lod]}})
    out, last = _erase_reference(x, lod[-1], tokens)
    np.testing.assert_array_equal(res["Out"][0], out)
    assert res["Out"][0].dtype == np.dtype(dtype)
    assert res[LOD_KEY]["Out"] == [(lod[0], last)]


def test_sequence_erase_three_level_lod_keeps_upper_levels():
    x = np.array([[1], [2], [2], [7], [3], [2], [4]], np.int64)
    lod = ((0, 2), (0, 1, 3), (0, 2, 5, 7))
    res = run_op("sequence_erase", {"X": [x]}, {"tokens": [2], "_lods": {"X": [lod]}})
    assert res["Out"][0].ravel().tolist() == [1, 7, 3, 4]
    assert res[LOD_KEY]["Out"] == [((0, 2), (0, 1, 3), (0, 1, 3, 4))]


def test_sequence_erase_checks_the_last_level_against_x():
    x = np.zeros((5, 1), np.int64)
    with pytest.raises(ValueError, match="ends at 6"):
        run_op("sequence_erase", {"X": [x]}, {"_lods": {"X": [((0, 1), (0, 6))]}})


# -- var_conv_2d: X's sequence lengths are not checked; images read on from X's offsets -----------

@pytest.mark.parametrize("x_lens, row, col, ic, k, s", [
    # test_var_conv_2d.py's TestVarConv2dApi, scaled down: sequences shorter than ic·H·W, the
    # last image running past X's end
    ([6, 5], [2, 2], [2, 3], 3, (3, 3), (1, 1)),
    # longer sequences: the extra rows are never read
    ([10, 9], [2, 1], [2, 3], 2, (2, 3), (1, 2)),
    # a short first sequence reads into the second, an empty image in between
    ([3, 4, 8], [2, 0, 2], [2, 3, 2], 2, (3, 1), (2, 1)),
])
def test_var_conv_2d_reads_images_from_x_offsets(x_lens, row, col, ic, k, s):
    oc = 2
    x = rng.random((sum(x_lens), 1))
    w = rng.random((oc, ic * k[0] * k[1]))
    x_off = _offsets(x_lens)
    attrs = {"InputChannel": ic, "OutputChannel": oc, "KernelH": k[0], "KernelW": k[1],
             "StrideH": s[0], "StrideW": s[1],
             "_lods": {"X": [(x_off,)], "ROW": [(_offsets(row),)],
                       "COLUMN": [(_offsets(col),)]}}
    ins = {"X": [x], "ROW": [np.zeros((sum(row), 1))], "COLUMN": [np.zeros((sum(col), 1))],
           "W": [w]}
    res = run_op("var_conv_2d", ins, attrs)
    out, cols = _ref_var_conv(x.reshape(-1), x_off, row, col, w, ic, *k, *s)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12)
    np.testing.assert_allclose(res["Col"][0], cols, rtol=1e-12)
    d = rng.random(out.shape)
    g = run_op("var_conv_2d_grad", {**ins, "Col": res["Col"], "Out": res["Out"],
                                    "Out" + GRAD: [d]}, attrs)

    def f() -> float:
        return float((run_op("var_conv_2d", ins, attrs)["Out"][0] * d).sum())

    assert g["X" + GRAD][0].shape == x.shape
    np.testing.assert_allclose(g["X" + GRAD][0], central_differences(f, x), atol=1e-7)
    np.testing.assert_allclose(g["W" + GRAD][0], central_differences(f, w), atol=1e-7)


def test_var_conv_2d_api_case_runs_as_in_fluid():
    # TestVarConv2dApi: X [116, 1] with LoD [[60, 56]], ROW [[5, 4]], COLUMN [[6, 7]], ic 3
    x = rng.random((116, 1)).astype(np.float32)
    res = run_op("var_conv_2d", {"X": [x], "ROW": [x[:9]], "COLUMN": [x[:13]],
                                 "W": [rng.random((5, 27)).astype(np.float32)]},
                 {"InputChannel": 3, "OutputChannel": 5, "KernelH": 3, "KernelW": 3,
                  "_lods": {"X": [((0, 60, 116),)], "ROW": [((0, 5, 9),)],
                            "COLUMN": [((0, 6, 13),)]}})
    assert res["Out"][0].shape == (5 * 30 + 5 * 28, 1)
    assert res[LOD_KEY]["Out"] == [((0, 150, 290),)]
    assert res[LOD_KEY]["Col"] == [((0, 27 * 30, 27 * 58),)]


# -- sequence_conv with paddingTrainable: PaddingData rows stand in for rows past the ends --------

def _ref_seq_conv(x, lengths, w, start, length, pad):
    """test_sequence_conv.py's seqconv, one window position at a time: rows before a sequence
    read PaddingData[j : j + pad_size], rows after it PaddingData[up_pad + start + j -
    pad_size : up_pad + start + j]."""
    m = x.shape[1]
    col = np.zeros((x.shape[0], length * m))
    off = _offsets(lengths)
    up_pad = max(0, -start)
    for i in range(len(lengths)):
        for j in range(length):
            in_begin, in_end = off[i] + start + j, off[i + 1] + start + j
            out_begin, out_end = off[i], off[i + 1]
            if in_begin < off[i]:
                pad_size = min(off[i] - in_begin, off[i + 1] - off[i])
                col[off[i]:off[i] + pad_size, j * m:(j + 1) * m] = pad[j:j + pad_size]
                out_begin, in_begin = off[i] + pad_size, off[i]
            if in_end > off[i + 1]:
                pad_size = min(in_end - off[i + 1], off[i + 1] - off[i])
                col[off[i + 1] - pad_size:off[i + 1], j * m:(j + 1) * m] = \
                    pad[up_pad + start + j - pad_size:up_pad + start + j]
                in_end, out_end = off[i + 1], off[i + 1] - pad_size
            if in_end > in_begin:
                col[out_begin:out_end, j * m:(j + 1) * m] += x[in_begin:in_end]
    return col @ w


@pytest.mark.parametrize("lengths, start, length", [
    ([4, 1, 3, 2], -1, 3),       # TestSeqProjectCase1
    ([0, 4, 1, 0, 3, 2, 0], -1, 3),  # TestSeqProjectCase2Len0: empty sequences
    ([3, 1, 5, 2], 2, 3),        # TestSeqProjectCase3: a window wholly after short sequences
    ([2, 6], -4, 2),             # a window wholly before short sequences
    ([5, 1], 0, 4),              # down padding only
])
def test_sequence_conv_padding_trainable(lengths, start, length):
    d_in, d_out = 3, 2
    n = sum(lengths)
    total = max(0, -start) + max(0, start + length - 1)
    x, w = rng.random((n, d_in)), rng.random((length * d_in, d_out))
    pad = rng.random((total, d_in))
    attrs = {"contextStart": start, "contextLength": length, "paddingTrainable": True,
             "_lods": {"X": [(_offsets(lengths),)]}}
    ins = {"X": [x], "Filter": [w], "PaddingData": [pad]}
    res = run_op("sequence_conv", ins, attrs)
    np.testing.assert_allclose(res["Out"][0], _ref_seq_conv(x, lengths, w, start, length, pad),
                               rtol=1e-12)
    assert res[LOD_KEY]["Out"] == [(_offsets(lengths),)]
    d = rng.random((n, d_out))
    g = run_op("sequence_conv_grad", {**ins, "Out" + GRAD: [d]}, attrs)

    def f() -> float:
        return float((run_op("sequence_conv", ins, attrs)["Out"][0] * d).sum())

    for slot, arr in (("X", x), ("Filter", w), ("PaddingData", pad)):
        np.testing.assert_allclose(g[slot + GRAD][0], central_differences(f, arr), atol=1e-7,
                                   err_msg=slot)


def test_sequence_conv_without_padding_trainable_ignores_padding_data():
    x, w = rng.random((5, 2)), rng.random((6, 1))
    attrs = {"contextStart": -1, "contextLength": 3, "_lods": {"X": [((0, 2, 5),)]}}
    zero = run_op("sequence_conv", {"X": [x], "Filter": [w], "PaddingData": [np.ones((2, 2))]},
                  attrs)
    np.testing.assert_allclose(zero["Out"][0],
                               _ref_seq_conv(x, [2, 3], w, -1, 3, np.zeros((2, 2))))


@pytest.mark.parametrize("attrs, pad, err", [
    ({"contextStart": 0, "contextLength": 1}, np.zeros((0, 2)), "should be False"),
    ({"contextStart": -1, "contextLength": 3}, None, "needs Input\\(PaddingData\\)"),
    ({"contextStart": -1, "contextLength": 3}, np.zeros((3, 2)), "PaddingData must be"),
])
def test_sequence_conv_padding_trainable_errors(attrs, pad, err):
    x = np.zeros((3, 2))
    ins = {"X": [x], "Filter": [np.zeros((2 * attrs["contextLength"], 1))]}
    if pad is not None:
        ins["PaddingData"] = [pad]
    with pytest.raises(ValueError, match=err):
        run_op("sequence_conv", ins,
               {**attrs, "paddingTrainable": True, "_lods": {"X": [((0, 3),)]}})
