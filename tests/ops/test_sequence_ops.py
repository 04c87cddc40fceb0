"""Sequence ops against loops written from Fluid's definitions (one sequence at a time);
their gradients are in test_grad_check.py."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

LOD = ((0, 2, 2, 5, 7),)  # four sequences, the second empty


def _pool_reference(x: np.ndarray, offsets, kind: str, pad: float = 0.0):
    out, index = [], []
    for a, b in zip(offsets[:-1], offsets[1:], strict=True):
        seq = x[a:b].reshape(b - a, int(np.prod(x.shape[1:])))
        if b == a:
            out.append(np.full(seq.shape[1], pad))
            index.append(np.full(seq.shape[1], -1))
            continue
        if kind == "SUM":
            row = seq.sum(0)
        elif kind == "AVERAGE":
            row = seq.mean(0)
        elif kind == "SQRT":
            row = seq.sum(0) / np.sqrt(b - a)
        elif kind == "MAX":
            row = seq.max(0)
            index.append(a + np.array([int(np.flatnonzero(seq[:, j] == row[j])[0])
                                       for j in range(seq.shape[1])]))
        elif kind == "FIRST":
            row = seq[0]
        else:
            row = seq[-1]
        out.append(row)
    return np.array(out).reshape((len(offsets) - 1, *x.shape[1:])), np.array(index)


@pytest.mark.parametrize("kind", ["SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST"])
def test_sequence_pool_matches_a_loop_over_sequences(kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 2, 3)).astype(np.float32)
    x[3, 0, 0] = x[4, 0, 0] = 9.0  # a tie: MAX keeps the first row, as Paddle's ">" does
    res = run_op("sequence_pool", {"X": [x]}, {"pooltype": kind, "pad_value": -2.0,
                                                "_lods": {"X": [LOD]}})
    expected, index = _pool_reference(x, LOD[0], kind, pad=-2.0)
    np.testing.assert_allclose(res["Out"][0], expected, rtol=1e-6)
    assert res["Out"][0].dtype == np.float32
    assert res[LOD_KEY] == {"Out": [None]}  # one level pooled away: no LoD left
    if kind == "MAX":
        np.testing.assert_array_equal(res["MaxIndex"][0].reshape(4, -1), index.reshape(4, -1))
        assert res["MaxIndex"][0].reshape(4, -1)[2, 0] == 3


def test_sequence_pool_of_two_levels_keeps_the_top_level():
    x = np.arange(14, dtype=np.float64).reshape(7, 2)
    lod = ((0, 1, 3), (0, 3, 4, 7))
    res = run_op("sequence_pool", {"X": [x]}, {"pooltype": "SUM", "_lods": {"X": [lod]}})
    np.testing.assert_array_equal(res["Out"][0], [x[0:3].sum(0), x[3:4].sum(0), x[4:7].sum(0)])
    assert res[LOD_KEY] == {"Out": [((0, 1, 3),)]}


def test_sequence_pool_says_what_is_missing_or_wrong():
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"sequence_pool: Input\(X\) has no LoD: feed it as a "
                                         "LoD tensor"):
        run_op("sequence_pool", {"X": [x]}, {"_lods": {"X": [None]}})
    with pytest.raises(ValueError, match="pooltype 'MEDIAN' is not one of"):
        run_op("sequence_pool", {"X": [x]}, {"pooltype": "median",
                                             "_lods": {"X": [((0, 3),)]}})
    with pytest.raises(ValueError, match="has 3 levels; at most 2"):
        run_op("sequence_pool", {"X": [x]}, {"_lods": {"X": [((0, 1), (0, 1), (0, 3))]}})


@pytest.mark.parametrize("start, length", [(-1, 3), (0, 2), (-2, 2), (-3, 5)])
def test_sequence_conv_matches_a_window_loop(start, length):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((7, 3))
    w = rng.standard_normal((length * 3, 4))
    res = run_op("sequence_conv", {"X": [x], "Filter": [w]},
                 {"contextStart": start, "contextLength": length, "_lods": {"X": [LOD]}})
    expected = np.zeros((7, 4))
    for a, b in zip(LOD[0][:-1], LOD[0][1:], strict=True):
        for r in range(a, b):
            window = [x[r + start + j] if a <= r + start + j < b else np.zeros(3)
                      for j in range(length)]
            expected[r] = np.concatenate(window) @ w
    np.testing.assert_allclose(res["Out"][0], expected, rtol=1e-12, atol=1e-12)
    assert res[LOD_KEY] == {"Out": [LOD]}


def test_sequence_conv_refuses_what_fluid_refuses():
    x, lod = np.zeros((3, 2)), {"_lods": {"X": [((0, 3),)]}}
    with pytest.raises(ValueError, match="contextStride must be 1"):
        run_op("sequence_conv", {"X": [x], "Filter": [np.zeros((6, 1))]},
               {"contextStride": 2, **lod})
    with pytest.raises(ValueError, match="Filter has 4 rows, but contextLength 3 x the 2 "
                                         "columns of X need 6"):
        run_op("sequence_conv", {"X": [x], "Filter": [np.zeros((4, 1))]}, lod)
    # paddingTrainable is implemented (test_sequence_fluid18.py); without PaddingData it fails
    with pytest.raises(ValueError, match="paddingTrainable=True needs Input\\(PaddingData\\)"):
        run_op("sequence_conv", {"X": [x], "Filter": [np.zeros((6, 1))]},
               {"paddingTrainable": True, **lod})


def test_sequence_softmax_reverse_and_concat_match_loops_over_sequences():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((7, 1))
    soft = run_op("sequence_softmax", {"X": [x]}, {"_lods": {"X": [LOD]}})["Out"][0]
    rev = run_op("sequence_reverse", {"X": [x]}, {"_lods": {"X": [LOD]}})["Y"][0]
    for a, b in zip(LOD[0][:-1], LOD[0][1:], strict=True):
        e = np.exp(x[a:b] - x[a:b].max()) if b > a else x[a:b]
        np.testing.assert_allclose(soft[a:b], e / e.sum() if b > a else e)
        np.testing.assert_array_equal(rev[a:b], x[a:b][::-1])
    y = rng.standard_normal((4, 1))
    y_lod = ((0, 1, 2, 2, 4),)
    res = run_op("sequence_concat", {"X": [x, y]}, {"_lods": {"X": [LOD, y_lod]}})
    parts = []
    for i in range(4):
        parts += [x[LOD[0][i]:LOD[0][i + 1]], y[y_lod[0][i]:y_lod[0][i + 1]]]
    np.testing.assert_array_equal(res["Out"][0], np.concatenate(parts))
    assert res[LOD_KEY]["Out"] == [((0, 3, 4, 7, 11),)]  # lengths 2+1, 0+1, 3+0, 2+2
    with pytest.raises(ValueError, match="same number of sequences"):
        run_op("sequence_concat", {"X": [x, y]}, {"_lods": {"X": [LOD, ((0, 4),)]}})


def test_lod_reset_takes_y_lod_y_values_or_target_lod():
    x = np.arange(6.0).reshape(6, 1)
    res = run_op("lod_reset", {"X": [x], "Y": [np.zeros((6, 1))]},
                 {"_lods": {"X": [None], "Y": [((0, 1, 6),)]}})
    assert res[LOD_KEY]["Out"] == [((0, 1, 6),)]  # Y's own LoD
    res = run_op("lod_reset", {"X": [x], "Y": [np.array([0, 4, 6], np.int32)]},
                 {"_lods": {"X": [None], "Y": [None]}})
    assert res[LOD_KEY]["Out"] == [((0, 4, 6),)] and res["Out"][0] is x
    res = run_op("lod_reset", {"X": [x]}, {"target_lod": [0, 2, 6], "_lods": {"X": [None]}})
    assert res[LOD_KEY]["Out"] == [((0, 2, 6),)]
    with pytest.raises(ValueError, match="level 0 ends at 5, but must end at the first "
                                         r"dimension \(6 rows\)"):
        run_op("lod_reset", {"X": [x]}, {"target_lod": [0, 5], "_lods": {"X": [None]}})


def test_sequence_mask_matches_a_comparison_per_row():
    lengths = np.array([[3], [0], [5]], np.int64)
    y = run_op("sequence_mask", {"X": [lengths]}, {"out_dtype": "float32"})["Y"][0]
    assert y.shape == (3, 1, 5) and y.dtype == np.float32
    np.testing.assert_array_equal(y[:, 0], [[1, 1, 1, 0, 0], [0] * 5, [1] * 5])
    fixed = run_op("sequence_mask", {"X": [lengths[:, 0]]}, {"maxlen": 7})["Y"][0]
    assert fixed.shape == (3, 7) and fixed.dtype == np.int64 and fixed[2].sum() == 5


def test_sequence_expand_repeats_sequences_as_fluids_examples_say():
    # Fluid's doc, case 1: x.lod [[0, 2, 4]] repeated by y's level 0 [[0, 2, 4]] (2 and 2)
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    res = run_op("sequence_expand", {"X": [x], "Y": [np.zeros((8, 1))]},
                 {"ref_level": 0, "_lods": {"X": [((0, 2, 4),)],
                                            "Y": [((0, 2, 4), (0, 3, 6, 7, 8))]}})
    np.testing.assert_array_equal(res["Out"][0][:, 0], [1, 2, 1, 2, 3, 4, 3, 4])
    assert res[LOD_KEY]["Out"] == [((0, 2, 4, 6, 8),)]
    # case 2: x without LoD, y.lod [[0, 2, 2, 5]]: row i repeated by y's sequence i
    x = np.array([[1.0], [2.0], [3.0]])
    res = run_op("sequence_expand", {"X": [x], "Y": [np.zeros((5, 1))]},
                 {"_lods": {"X": [None], "Y": [((0, 2, 2, 5),)]}})
    np.testing.assert_array_equal(res["Out"][0][:, 0], [1, 1, 3, 3, 3])
    as_ = run_op("sequence_expand_as", {"X": [x], "Y": [np.zeros((5, 1))]},
                 {"_lods": {"X": [None], "Y": [((0, 2, 2, 5),)]}})
    np.testing.assert_array_equal(as_["Out"][0][:, 0], [1, 1, 3, 3, 3])
    assert as_[LOD_KEY]["Out"] == [((0, 2, 2, 5),)]
    with pytest.raises(ValueError, match="X has 3 sequences but level 0 of Y's LoD has 2"):
        run_op("sequence_expand", {"X": [x], "Y": [np.zeros((3, 1))]},
               {"_lods": {"X": [None], "Y": [((0, 1, 3),)]}})


def test_sequence_pad_and_unpad_are_inverse_and_match_a_loop():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((7, 2))
    res = run_op("sequence_pad", {"X": [x], "PadValue": [np.array([-1.0])]},
                 {"padded_length": 4, "_lods": {"X": [LOD]}})
    out, length = res["Out"][0], res["Length"][0]
    assert out.shape == (4, 4, 2) and length.tolist() == [2, 0, 3, 2]
    for i, (a, b) in enumerate(zip(LOD[0][:-1], LOD[0][1:], strict=True)):
        np.testing.assert_array_equal(out[i, :b - a], x[a:b])
        assert (out[i, b - a:] == -1).all()
    back = run_op("sequence_unpad", {"X": [out], "Length": [length]})
    np.testing.assert_array_equal(back["Out"][0], x)
    assert back[LOD_KEY]["Out"] == [LOD]
    with pytest.raises(ValueError, match="padded_length 2 is shorter than the longest"):
        run_op("sequence_pad", {"X": [x], "PadValue": [np.array([0.0])]},
               {"padded_length": 2, "_lods": {"X": [LOD]}})


def test_sequence_slice_reshape_and_enumerate_match_loops():
    x = np.arange(14.0).reshape(7, 2)
    res = run_op("sequence_slice", {"X": [x], "Offset": [np.array([[1], [0], [1], [0]])],
                                    "Length": [np.array([[1], [0], [2], [1]])]},
                 {"_lods": {"X": [LOD]}})
    np.testing.assert_array_equal(res["Out"][0], np.concatenate([x[1:2], x[3:5], x[5:6]]))
    assert res[LOD_KEY]["Out"] == [((0, 1, 1, 3, 4),)]
    with pytest.raises(ValueError, match="a slice leaves its sequence"):
        run_op("sequence_slice", {"X": [x], "Offset": [np.array([[1], [0], [2], [0]])],
                                  "Length": [np.array([[2], [0], [2], [1]])]},
               {"_lods": {"X": [LOD]}})
    res = run_op("sequence_reshape", {"X": [x[:6]]},
                 {"new_dim": 4, "_lods": {"X": [((0, 2, 6),)]}})
    np.testing.assert_array_equal(res["Out"][0], x[:6].reshape(3, 4))
    assert res[LOD_KEY]["Out"] == [((0, 1, 3),)]
    ids = np.array([[1], [2], [3], [4], [5]], np.int64)
    res = run_op("sequence_enumerate", {"X": [ids]},
                 {"win_size": 3, "pad_value": 0, "_lods": {"X": [((0, 3, 5),)]}})
    np.testing.assert_array_equal(res["Out"][0], [[1, 2, 3], [2, 3, 0], [3, 0, 0],
                                                  [4, 5, 0], [5, 0, 0]])
