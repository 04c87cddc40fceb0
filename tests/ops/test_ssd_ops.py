"""mine_hard_examples against a reference written as Fluid's kernel loops (Paddle 1.8's
mine_hard_examples_op.cc), hand-worked cases, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY, get

OUTS = ("NegIndices", "UpdatedMatchIndices")


def run(cls, match, dist, loc=None, **attrs):
    ins = {"ClsLoss": [cls], "MatchIndices": [match], "MatchDist": [dist]}
    if loc is not None:
        ins["LocLoss"] = [loc]
    return get("mine_hard_examples").kernel(ins, attrs, OUTS)


def reference(cls, match, dist, loc, mining, ratio, threshold, sample_size):
    """Fluid's loops: gather (loss, index) of the eligible boxes, sort by loss descending
    (ties by index here), take the first ``neg_sel``, collect them as a set."""
    updated = [list(row) for row in match]
    all_neg, starts = [], [0]
    for n in range(len(match)):
        pairs = []
        for m in range(len(match[n])):
            if mining == "max_negative":
                ok = match[n][m] == -1 and dist[n][m] < threshold
            else:
                ok = True
            if ok:
                loss = cls[n][m]
                if mining == "hard_example" and loc is not None:
                    loss = cls[n][m] + loc[n][m]
                pairs.append((loss, m))
        neg_sel = len(pairs)
        if mining == "max_negative":
            num_pos = sum(1 for m in range(len(match[n])) if match[n][m] != -1)
            neg_sel = min(int(num_pos * ratio), neg_sel)
        else:
            neg_sel = min(sample_size, neg_sel)
        pairs.sort(key=lambda p: (-p[0], p[1]))
        selected = {m for _, m in pairs[:neg_sel]}
        negs = []
        if mining == "hard_example":
            for m in range(len(match[n])):
                if match[n][m] > -1:
                    if m not in selected:
                        updated[n][m] = -1
                elif m in selected:
                    negs.append(m)
        else:
            negs = sorted(selected)
        all_neg.extend(negs)
        starts.append(starts[-1] + len(negs))
    return all_neg, starts, updated


def test_max_negative_by_hand():
    match = np.array([[0, -1, -1, -1, 1, -1], [-1, -1, 2, -1, -1, -1]], np.int32)
    dist = np.array([[.8, .1, .6, .2, .7, .3], [.1, .2, .9, .4, .3, .45]], np.float32)
    cls = np.array([[1., 5., 9., 3., 2., 3.], [4., 4., 1., 2., 8., 7.]], np.float32)
    r = run(cls, match, dist, neg_pos_ratio=1.0, neg_dist_threshold=0.5,
            mining_type="max_negative")
    # image 0: 2 matched boxes, so 2 negatives among the eligible 1, 3, 5 (box 2 is too
    # close to a ground truth); box 3 and 5 tie at loss 3, the lower index wins
    assert r["NegIndices"][0].ravel().tolist() == [1, 3, 4]
    assert r["NegIndices"][0].dtype == np.int32
    assert r[LOD_KEY]["NegIndices"] == [((0, 2, 3),)]
    np.testing.assert_array_equal(r["UpdatedMatchIndices"][0], match)


def test_hard_example_by_hand():
    match = np.array([[0, -1, -1, -1, 1, -1]], np.int32)
    dist = np.zeros((1, 6), np.float32)
    cls = np.array([[1., 5., 9., 3., 2., 3.]], np.float32)
    loc = np.array([[4., 0., 0., 0., 0., 0.]], np.float32)
    r = run(cls, match, dist, loc, sample_size=3, mining_type="hard_example")
    # losses with LocLoss: 5, 5, 9, 3, 2, 3 -> boxes 2, 0, 1; matched box 4 is dropped
    assert r["NegIndices"][0].ravel().tolist() == [1, 2]
    assert r["UpdatedMatchIndices"][0].tolist() == [[0, -1, -1, -1, -1, -1]]
    # LocLoss does not count in max_negative mode
    r = run(cls, match, dist + 0.1, loc, neg_pos_ratio=1.0, mining_type="max_negative")
    assert r["NegIndices"][0].ravel().tolist() == [1, 2]


@pytest.mark.parametrize("mining", ["max_negative", "hard_example"])
@pytest.mark.parametrize("seed", range(6))
def test_against_fluid_loops(mining, seed):
    rng = np.random.default_rng(seed)
    n, p = 3, 17
    match = np.where(rng.uniform(size=(n, p)) < 0.3, rng.integers(0, 4, (n, p)), -1)
    match = match.astype(np.int32)
    dist = rng.uniform(size=(n, p)).astype(np.float32)
    cls = rng.integers(0, 6, (n, p)).astype(np.float32)  # integer losses: many ties
    loc = rng.uniform(size=(n, p)).astype(np.float32)
    ratio, threshold, size = 2.5, 0.6, 5
    r = run(cls, match, dist, loc, neg_pos_ratio=ratio, neg_dist_threshold=threshold,
            sample_size=size, mining_type=mining)
    negs, starts, updated = reference(cls.tolist(), match.tolist(), dist.tolist(),
                                      loc.tolist(), mining, ratio, threshold, size)
    assert r["NegIndices"][0].ravel().tolist() == negs
    assert r[LOD_KEY]["NegIndices"] == [(tuple(starts),)]
    assert r["UpdatedMatchIndices"][0].tolist() == updated


def test_no_negatives_gives_an_empty_tensor_with_its_lod():
    match = np.array([[-1, -1]], np.int32)
    r = run(np.ones((1, 2), np.float32), match, np.zeros((1, 2), np.float32))
    assert r["NegIndices"][0].shape == (0, 1)
    assert r[LOD_KEY]["NegIndices"] == [((0, 0),)]


def test_errors():
    m = np.array([[0, -1]], np.int32)
    z = np.zeros((1, 2), np.float32)
    with pytest.raises(ValueError, match="mining_type must be one of"):
        run(z, m, z, mining_type="random")
    with pytest.raises(ValueError, match="neg_pos_ratio must be greater than 0"):
        run(z, m, z, neg_pos_ratio=0.0)
    with pytest.raises(ValueError, match=r"neg_dist_threshold must be in \(0, 1\)"):
        run(z, m, z, neg_dist_threshold=1.0)
    with pytest.raises(ValueError, match="sample_size must be greater than 0"):
        run(z, m, z, mining_type="hard_example")
    with pytest.raises(ValueError, match=r"ClsLoss has shape \[1, 3\], but MatchIndices"):
        run(np.zeros((1, 3), np.float32), m, z)
    with pytest.raises(ValueError, match=r"MatchIndices must be \[N, Np\]"):
        run(z, m.ravel(), z)
