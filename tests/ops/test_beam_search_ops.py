"""``beam_search`` and ``beam_search_decode``: Paddle 1.8's own cases (test_beam_search_op.py,
test_beam_search_decode_op.py, their inputs and expected outputs), and random steps against an
independent reference (every candidate sorted, rather than inserted one by one), and the
errors."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.lod import LoDTensor, LoDTensorArray
from dask_fluid.ops.registry import LOD_KEY

from . import run_op

LOD = [[0, 2, 4], [0, 1, 2, 3, 4]]
IDS2 = [[4, 2], [7, 3], [3, 5], [8, 1]]
SCORES2 = [[0.6, 0.9], [0.5, 0.3], [0.9, 0.5], [0.1, 0.7]]

# (pre_ids, pre_scores, ids, scores, lod, beam_size, is_accumulated,
#  expected ids, scores, lod, parent_idx): Paddle 1.8's BeamSearchOpTester 1-6, end_id 0
PADDLE_CASES = {
    "three_candidates": ([[1, 2, 3, 4]], [[0.1, 0.2, 0.3, 0.4]],
                         [[4, 2, 5], [2, 1, 3], [3, 5, 2], [8, 2, 1]],
                         [[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.9, 0.5, 0.1], [0.7, 0.5, 0.1]],
                         LOD, 2, True, [4, 2, 3, 8], [0.5, 0.6, 0.9, 0.7], LOD, [0, 1, 2, 3]),
    "one_prefix_takes_both": ([[1], [2], [3], [4]], [[0.1, 0.2, 0.3, 0.4]], IDS2, SCORES2, LOD,
                              2, True, [2, 4, 3, 1], [0.9, 0.6, 0.9, 0.7],
                              [[0, 2, 4], [0, 2, 2, 3, 4]], [0, 0, 2, 3]),
    "ended_prefixes": ([[1], [0], [0], [4]], [[0.1], [1.2], [0.5], [0.4]], IDS2,
                       [[0.6, 0.9], [0.5, 0.3], [0.9, 0.5], [0.6, 0.7]], LOD, 2, True,
                       [2, 0, 1, 8], [0.9, 1.2, 0.7, 0.6], [[0, 2, 4], [0, 1, 2, 2, 4]],
                       [0, 1, 3, 3]),
    "ended_source_pruned": ([[0], [0], [0], [4]], [[0.1], [1.2], [0.5], [0.4]], IDS2,
                            [[0.6, 0.9], [0.5, 0.3], [0.9, 0.5], [0.6, 0.7]], LOD, 2, True,
                            [1, 8], [0.7, 0.6], [[0, 2, 4], [0, 0, 0, 0, 2]], [3, 3]),
    "not_accumulated": ([[1], [2], [3], [4]], [[0.1, 2.2, 0.3, 0.4]], IDS2, SCORES2, LOD, 2,
                        False, [7, 3, 3, 1], [1.50685, 0.996027, 0.194639, 0.043325],
                        [[0, 2, 4], [0, 0, 2, 3, 4]], [1, 1, 2, 3]),
    "beam_of_one": ([[1], [2], [3], [4]], [[0.1, 0.2, 0.3, 0.4]], IDS2, SCORES2,
                    [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]], 1, True, [2, 7, 3, 1],
                    [0.9, 0.5, 0.9, 0.7], [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4]], [0, 1, 2, 3]),
}


def _search(pre_ids, pre_scores, ids, scores, lod, beam, accumulated=True, end_id=0):
    attrs = {"beam_size": beam, "end_id": end_id, "is_accumulated": accumulated,
             "_lods": {"scores": [lod], "pre_ids": [lod], "ids": [lod], "pre_scores": [lod]}}
    ins = {"pre_ids": [np.array(pre_ids, np.int64)],
           "pre_scores": [np.array(pre_scores, np.float32)],
           "ids": [None if ids is None else np.array(ids, np.int64)],
           "scores": [np.array(scores, np.float32)]}
    return run_op("beam_search", ins, attrs)


@pytest.mark.parametrize("case", PADDLE_CASES)
def test_paddle_18_cases(case):
    (pre_ids, pre_scores, ids, scores, lod, beam, accumulated, want_ids, want_scores,
     want_lod, want_parent) = PADDLE_CASES[case]
    out = _search(pre_ids, pre_scores, ids, scores, tuple(map(tuple, lod)), beam, accumulated)
    np.testing.assert_array_equal(out["selected_ids"][0], np.array(want_ids)[:, None])
    np.testing.assert_allclose(out["selected_scores"][0], np.array(want_scores)[:, None],
                               rtol=1e-5)
    np.testing.assert_array_equal(out["parent_idx"][0], want_parent)
    got_lod = out[LOD_KEY]["selected_ids"][0]
    assert [list(level) for level in got_lod] == want_lod
    assert out[LOD_KEY]["selected_scores"][0] == got_lod
    assert out["selected_ids"][0].dtype == np.int64 and out["parent_idx"][0].dtype == np.int32


def _reference(pre_ids, pre_scores, ids, scores, prefixes_of, beam, end_id):
    """Every candidate of a source sorted by (score, prefix) descending, the order candidates
    were offered breaking the rest; then grouped by prefix; sources whose picks all end an
    ended prefix are dropped."""
    picked = [[] for _ in pre_ids]
    for first, last in prefixes_of:
        offered = []
        for p in range(first, last):
            if pre_ids[p] == end_id:
                offered.append((pre_scores[p], p, end_id))
            else:
                offered += [(scores[p][k], p, ids[p][k]) for k in range(len(ids[p]))]
        ranked = sorted(range(len(offered)),
                        key=lambda i: (-offered[i][0], -offered[i][1], i))[:beam]
        chosen = [offered[i] for i in ranked]
        if all(t == end_id and pre_ids[p] == end_id for _, p, t in chosen):
            continue
        for s, p, t in chosen:
            picked[p].append((t, s))
    return picked


@pytest.mark.parametrize("seed", range(6))
def test_random_steps_against_the_reference(seed):
    rng = np.random.default_rng(seed)
    n_src, beam, k, end_id = 3, int(rng.integers(1, 4)), 3, 0
    per_src = rng.integers(1, 4, n_src)
    lod0 = np.concatenate([[0], np.cumsum(per_src)])
    n = int(lod0[-1])
    # ties on purpose: scores on a coarse grid, some prefixes ended
    pre_ids = np.where(rng.random(n) < 0.3, end_id, rng.integers(1, 9, n))
    pre_scores = rng.integers(0, 4, n) / 4
    ids = rng.integers(0, 9, (n, k))
    scores = rng.integers(0, 4, (n, k)) / 4
    # level 0: each source's prefixes; level 1: one row per prefix (a step's pre_ids)
    lod = (tuple(int(v) for v in lod0), tuple(range(n + 1)))
    out = _search(pre_ids[:, None], pre_scores[:, None], ids, scores, lod, beam,
                  end_id=end_id)
    want = _reference(list(pre_ids), list(pre_scores.astype(np.float32)), ids.tolist(),
                      scores.astype(np.float32).tolist(),
                      [(int(lod0[i]), int(lod0[i + 1])) for i in range(n_src)], beam, end_id)
    got_lod = out[LOD_KEY]["selected_ids"][0]
    counts = np.diff(got_lod[1])
    assert list(counts) == [len(p) for p in want]
    assert got_lod[0] == lod[0]  # level 0 passes through
    flat = [pair for p in want for pair in p]
    np.testing.assert_array_equal(out["selected_ids"][0][:, 0], [t for t, _ in flat])
    np.testing.assert_allclose(out["selected_scores"][0][:, 0], [s for _, s in flat])


def _array(steps):
    arr = LoDTensorArray()
    for lod, data, dtype in steps:
        arr.append(LoDTensor._of(np.array(data, dtype), tuple(map(tuple, lod))))
    return arr


def test_decode_paddle_18_case():
    """Paddle 1.8's TestBeamSearchDecodeOp: 5 steps, 2 sources, beam 2, end id 1."""
    steps = [([[0, 1, 2], [0, 1, 2]], [0, 0]),
             ([[0, 1, 2], [0, 2, 4]], [2, 3, 4, 5]),
             ([[0, 2, 4], [0, 2, 2, 4, 4]], [3, 1, 5, 4]),
             ([[0, 2, 4], [0, 1, 2, 3, 4]], [1, 1, 3, 5]),
             ([[0, 2, 4], [0, 0, 0, 2, 2]], [5, 1])]
    ids = _array([(lod, data, np.int64) for lod, data in steps])
    scores = _array([(lod, data, np.float32) for lod, data in steps])
    out = run_op("beam_search_decode", {"Ids": [ids], "Scores": [scores]},
                 {"beam_size": 2, "end_id": 1})
    expected = [0, 2, 3, 1, 0, 2, 1, 0, 4, 5, 3, 5, 0, 4, 5, 3, 1]
    np.testing.assert_array_equal(out["SentenceIds"][0], expected)
    np.testing.assert_array_equal(out["SentenceScores"][0], np.array(expected, np.float32))
    lod = [[0, 2, 4], [0, 4, 7, 12, 17]]
    assert [list(v) for v in out[LOD_KEY]["SentenceIds"][0]] == lod
    assert [list(v) for v in out[LOD_KEY]["SentenceScores"][0]] == lod


def test_errors():
    with pytest.raises(ValueError, match="scores must carry a LoD of 1 levels"):
        run_op("beam_search", {"pre_ids": [np.zeros((2, 1), np.int64)],
                               "pre_scores": [np.zeros((2, 1), np.float32)], "ids": [None],
                               "scores": [np.zeros((2, 3), np.float32)]},
               {"beam_size": 2, "_lods": {"scores": [None]}})
    with pytest.raises(ValueError, match="3 prefixes in pre_ids, 3 rows of scores and 2 "
                                         "prefixes in the LoD must agree"):
        _search([[1], [2], [3]], [[0], [0], [0]], None, np.zeros((3, 2)),
                ((0, 2), (0, 1, 2)), 2)
    with pytest.raises(ValueError, match="beam_size must be >= 1"):
        _search([[1]], [[0]], None, np.zeros((1, 2)), ((0, 1), (0, 1)), 0)
    with pytest.raises(ValueError, match="Ids and Scores must be tensor arrays"):
        run_op("beam_search_decode", {"Ids": [np.zeros(2)], "Scores": [np.zeros(2)]})
    one = _array([([[0, 1], [0, 1]], [0], np.int64)])
    with pytest.raises(ValueError, match="1 steps of ids and 0 of scores"):
        run_op("beam_search_decode", {"Ids": [one], "Scores": [LoDTensorArray()]})
    flat = _array([([[0, 1]], [0], np.int64)])
    with pytest.raises(ValueError, match="step 0 of Ids has a LoD of 1 levels"):
        run_op("beam_search_decode", {"Ids": [flat], "Scores": [flat]})
