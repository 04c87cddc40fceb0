"""``gather_tree`` (beam-search backtracking) against the loop of Paddle 1.8's
``gather_tree_op.h`` written element by element, Paddle's documented example, and its
errors. It has no gradient."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops import registry

from . import run_op


def gather_tree_by_loops(ids, parents):
    max_time, batch, beam = ids.shape
    out = np.zeros_like(ids)
    for b in range(batch):
        for k in range(beam):
            out[max_time - 1, b, k] = ids[max_time - 1, b, k]
            parent = parents[max_time - 1, b, k]
            for t in range(max_time - 2, -1, -1):
                out[t, b, k] = ids[t, b, parent]
                parent = parents[t, b, parent]
    return out


def test_gather_tree_paddle_example():
    ids = np.array([[[2, 2], [6, 1]], [[3, 9], [6, 1]], [[0, 1], [9, 0]]], np.int64)
    parents = np.array([[[0, 0], [1, 1]], [[1, 0], [1, 0]], [[0, 0], [0, 1]]], np.int64)
    got = run_op("gather_tree", {"Ids": [ids], "Parents": [parents]})["Out"][0]
    np.testing.assert_array_equal(got, [[[2, 2], [1, 6]], [[3, 3], [6, 1]], [[0, 1], [9, 0]]])
    assert got.dtype == np.int64


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(1, 2, 3), (5, 3, 4), (7, 1, 1)])
def test_gather_tree_random_against_loops(dtype, shape):
    rng = np.random.default_rng(sum(shape))
    ids = rng.integers(0, 50, shape).astype(dtype)
    parents = rng.integers(0, shape[2], shape).astype(dtype)
    got = run_op("gather_tree", {"Ids": [ids], "Parents": [parents]})["Out"][0]
    np.testing.assert_array_equal(got, gather_tree_by_loops(ids, parents))
    assert got.dtype == dtype


def test_gather_tree_has_no_gradient():
    assert registry.get("gather_tree").grad is None


def test_gather_tree_errors():
    ids = np.zeros((2, 2, 2), np.int64)
    with pytest.raises(ValueError, match=r"must both be \[max_time, batch, beam\]"):
        run_op("gather_tree", {"Ids": [ids], "Parents": [np.zeros((2, 2, 3), np.int64)]})
    with pytest.raises(ValueError, match=r"must both be \[max_time, batch, beam\]"):
        run_op("gather_tree", {"Ids": [ids[0]], "Parents": [ids[0]]})
    with pytest.raises(TypeError, match="must be int32/int64"):
        run_op("gather_tree", {"Ids": [ids.astype(np.float32)], "Parents": [ids]})
    bad = np.zeros((2, 2, 2), np.int64)
    bad[0, 1, 0] = 2
    with pytest.raises(ValueError, match=r"beam index in \[0, 2\), got values in \[0, 2\]"):
        run_op("gather_tree", {"Ids": [ids], "Parents": [bad]})
