"""``matmul`` as Fluid 1.8 computes it where it differs from numpy's ``matmul``: 1-D operands
with transpose flags (a 1-D X is the row ``[1, K]`` and a 1-D Y the column ``[K, 1]`` before
the transpose, and Out drops such a dim only where it is 1), the build-time Out shape, and the
``head_number`` multi-head matmul (Blas::MatMulWithHead). The references are written from
the definitions with loops, independently of the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops import registry
from dask_fluid.ops.dense_ops import matmul_out_shape, matmul_shape

from . import run_op

GRAD = registry.GRAD
rng = np.random.default_rng(7)


def _as_fluid_matrix(v: np.ndarray, is_x: bool, trans: bool) -> np.ndarray:
    """op(v) as Fluid forms it: a vector is a row (X) or a column (Y), then transposed."""
    if v.ndim == 1:
        v = v.reshape(1, -1) if is_x else v.reshape(-1, 1)
    return np.swapaxes(v, -1, -2) if trans else v


def _loop_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Plain matrix products by loops (no batch dims)."""
    out = np.zeros((a.shape[0], b.shape[1]))
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            out[i, j] = sum(a[i, k] * b[k, j] for k in range(a.shape[1]))
    return out


# (X shape, Y shape, transpose_X, transpose_Y, expected Out shape): the cases of Paddle's
# test_matmul_op.py that differ from numpy, with K = 1 where a vector is transposed
VECTOR_CASES = [
    ((3,), (1,), True, False, (3,)),        # [3]ᵀ is a column [3, 1]; Y [1] the column [1, 1]
    ((1,), (4,), False, True, (4,)),        # X the row [1, 1]; [4]ᵀ the row [1, 4]
    ((3,), (4,), True, True, (3, 4)),       # column times row: an outer product
    ((3,), (1, 4), True, False, (3, 4)),
    ((3,), (4, 1), True, True, (3, 4)),
    ((3,), (2, 1, 4), True, False, (2, 3, 4)),
    ((3, 1), (4,), False, True, (3, 4)),
    ((1, 3), (4,), True, True, (3, 4)),
    ((2, 3, 1), (4,), False, True, (2, 3, 4)),
    ((1,), (1,), True, True, (1,)),         # [1, 1] @ [1, 1], both dims dropped
    ((5,), (5,), False, False, (1,)),
]


@pytest.mark.parametrize("xs,ys,tx,ty,expected", VECTOR_CASES)
def test_vectors_with_transposes_follow_fluids_row_and_column_rules(xs, ys, tx, ty, expected):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    out = run_op("matmul", {"X": [x], "Y": [y]},
                 {"transpose_X": tx, "transpose_Y": ty, "alpha": 2.0})["Out"][0]
    a, b = _as_fluid_matrix(x, True, tx), _as_fluid_matrix(y, False, ty)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    ref = np.stack([_loop_matmul(a[i], b[i]) for i in np.ndindex(*batch)]) if batch else \
        _loop_matmul(a, b)
    assert out.shape == expected
    np.testing.assert_allclose(out, 2.0 * ref.reshape(expected), rtol=1e-12)
    assert matmul_shape(xs, ys, tx, ty) == list(expected)


@pytest.mark.parametrize("xs,ys,tx,ty,expected", VECTOR_CASES)
def test_vector_gradients_match_finite_differences(xs, ys, tx, ty, expected):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    attrs = {"transpose_X": tx, "transpose_Y": ty, "alpha": 0.5}
    seed = rng.standard_normal(expected)

    def f(xv: np.ndarray, yv: np.ndarray) -> float:
        return float((run_op("matmul", {"X": [xv], "Y": [yv]}, attrs)["Out"][0] * seed).sum())

    g = run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [seed]}, attrs)
    for name, v, grad in (("X", x, g["X" + GRAD][0]), ("Y", y, g["Y" + GRAD][0])):
        assert grad.shape == v.shape
        num = np.zeros_like(v)
        for idx in np.ndindex(*v.shape):
            plus, minus = v.copy(), v.copy()
            plus[idx] += 1e-6
            minus[idx] -= 1e-6
            args = (plus, y) if name == "X" else (x, plus)
            margs = (minus, y) if name == "X" else (x, minus)
            num[idx] = (f(*args) - f(*margs)) / 2e-6
        np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("xs,ys,tx,ty,expected", [
    ((-1,), (1,), True, False, [-1]),       # X's height unknown: Y's dim 1 still drops
    ((-1,), (4,), False, True, [4]),        # X the row [1, -1]: its dim 1 drops
    ((3,), (-1,), True, True, [3, -1]),
    ((-1, 3, 1), (-1,), False, True, [-1, 3, -1]),
    ((3, -1), (-1, 4), False, False, [3, 4]),   # unknown inner dims fill from each other
])
def test_build_time_shape_with_unknown_dims(xs, ys, tx, ty, expected):
    assert matmul_out_shape(xs, ys, tx, ty) == expected


def test_build_time_shape_of_the_layer():
    import dask_fluid as fluid

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", shape=[3], dtype="float32")
        y = fluid.data("y", shape=[4], dtype="float32")
        assert list(fluid.layers.matmul(x, y, True, True).shape) == [3, 4]
        z = fluid.data("z", shape=[-1, 3, 1], dtype="float32")
        assert list(fluid.layers.matmul(z, y, False, True).shape) == [-1, 3, 4]


# ---------------------------------------------------------------------------------------------
# head_number


def _heads_reference(a: np.ndarray, b: np.ndarray, h: int) -> np.ndarray:
    """MatMulWithHead on 2-D op(X) ``a``, op(Y) ``b`` by loops over heads."""
    sub = a.shape[1] // h
    if a.shape[1] == b.shape[0]:   # Y's rows split: heads side by side, [M, h · N]
        blocks = [_loop_matmul(a[:, i * sub:(i + 1) * sub], b[i * sub:(i + 1) * sub])
                  for i in range(h)]
    else:                          # Y's columns split: [M, N]
        w = b.shape[1] // h
        blocks = [_loop_matmul(a[:, i * sub:(i + 1) * sub], b[:, i * w:(i + 1) * w])
                  for i in range(h)]
    return np.concatenate(blocks, axis=1)


@pytest.mark.parametrize("tx", [False, True])
@pytest.mark.parametrize("ty", [False, True])
@pytest.mark.parametrize("xs,ys,out", [
    ((3, 8), (8, 2), (3, 8)),          # rows of Y split with X's columns: [M, 4 · N]
    ((2, 3, 8), (2, 8, 2), (2, 3, 8)),
    ((3, 8), (2, 12), (3, 12)),        # Y's height is a head's width: Y's columns split
    ((2, 3, 8), (2, 2, 12), (2, 3, 12)),
    ((2, 3, 8), (8, 2), (2, 3, 8)),    # a batch against a matrix
])
def test_head_number_matches_a_loop_over_heads(xs, ys, out, tx, ty):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    xin = np.swapaxes(x, -1, -2).copy() if tx else x
    yin = np.swapaxes(y, -1, -2).copy() if ty else y
    attrs = {"transpose_X": tx, "transpose_Y": ty, "head_number": 4, "alpha": 0.5}
    got = run_op("matmul", {"X": [xin], "Y": [yin]}, attrs)["Out"][0]
    assert got.shape == out
    if x.ndim == 2:
        ref = _heads_reference(x, y, 4)
    else:
        ref = np.stack([_heads_reference(x[i], y[i] if y.ndim == 3 else y, 4)
                        for i in range(x.shape[0])])
    np.testing.assert_allclose(got, 0.5 * ref, rtol=1e-12)
    assert matmul_out_shape(xin.shape, yin.shape, tx, ty, head_number=4) == list(out)


def test_head_number_one_is_the_plain_product():
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    got = run_op("matmul", {"X": [x], "Y": [y]}, {"head_number": 1})["Out"][0]
    np.testing.assert_allclose(got, _loop_matmul(x, y), rtol=1e-12)


def test_head_number_rejects_incompatible_shapes():
    x = rng.standard_normal((3, 8))
    with pytest.raises(ValueError, match="does not divide"):
        run_op("matmul", {"X": [x], "Y": [rng.standard_normal((8, 2))]}, {"head_number": 3})
    with pytest.raises(ValueError, match="head_number"):
        run_op("matmul", {"X": [x], "Y": [rng.standard_normal((3, 8))]}, {"head_number": 4})


def test_head_number_has_no_gradient_as_in_fluid():
    x, y = rng.standard_normal((3, 8)), rng.standard_normal((8, 2))
    with pytest.raises(NotImplementedError, match="head_number"):
        run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [np.ones((3, 8))]},
               {"head_number": 4})
