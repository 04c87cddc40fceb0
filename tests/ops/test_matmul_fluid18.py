"""``matmul`` as Fluid 1.8 computes it where it differs from numpy's ``matmul``: 1-D operands
with transpose flags (a 1-D X is the row ``[1, K]`` and a 1-D Y the column ``[K, 1]`` before
the transpose, and Out drops such a dim only where it is 1), batch dims folded into one batch
(their product) instead of broadcast, the build-time Out shape and checks, and the
``head_number`` multi-head matmul (Blas::MatMulWithHead). The references are written from
the definitions with loops, independently of the kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dask_fluid.ops import registry
from dask_fluid.ops.dense_ops import matmul_out_shape, matmul_shape

from . import central_differences, run_op

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


# ---------------------------------------------------------------------------------------------
# batch dims: Fluid folds the dims before the last two into one batch (blas.cc's
# CreateMatrixDescriptor: their product, 0 for a 1-D or 2-D operand); the two batch sizes must
# be equal or one of them 0 (MatMulOp::InferShape), and Out has X's leading dims when X is
# batched, else Y's


def _fluid_batched_reference(x: np.ndarray, y: np.ndarray, tx: bool, ty: bool) -> np.ndarray:
    """Fluid's rule written out: op(X) and op(Y) as matrices, each batch flattened to a list of
    matrices, matrix i with matrix i (or with the one matrix of an unbatched operand) by loops,
    reshaped back to the batched operand's leading dims (X's first), vector dims dropped."""
    a, b = _as_fluid_matrix(x, True, tx), _as_fluid_matrix(y, False, ty)
    bx, by = a.shape[:-2], b.shape[:-2]
    if bx and by:
        assert math.prod(bx) == math.prod(by), "not a shape Fluid runs"
    batch = bx if bx else by
    m, n = a.shape[-2], b.shape[-1]
    if batch:
        count = math.prod(batch)
        xa = a.reshape((count,) + a.shape[-2:]) if bx else [a] * count
        yb = b.reshape((count,) + b.shape[-2:]) if by else [b] * count
        out = np.zeros((count, m, n))
        for i in range(count):
            out[i] = _loop_matmul(xa[i], yb[i])
        out = out.reshape(batch + (m, n))
    else:
        out = _loop_matmul(a, b)
    shape = list(out.shape)
    if x.ndim == 1 and shape[-2] == 1:
        del shape[-2]
    if y.ndim == 1 and shape[-1] == 1:
        del shape[-1]
    return out.reshape(shape or [1])


# (X shape, Y shape, transpose_X, transpose_Y, expected Out shape)
BATCH_CASES = [
    # equal batch sizes, different batch shapes: X's leading dims, either side longer
    ((2, 3, 4, 5), (6, 5, 2), False, False, (2, 3, 4, 2)),
    ((6, 4, 5), (2, 3, 5, 2), False, False, (6, 4, 2)),
    ((2, 3, 5, 4), (3, 2, 2, 5), True, True, (2, 3, 4, 2)),
    ((3, 2, 4, 5), (2, 3, 2, 5), False, True, (3, 2, 4, 2)),  # numpy: 3 and 2 do not broadcast
    # numpy would broadcast these to [2, 2, 4, 3]: Fluid pairs the two matrices of each
    ((2, 1, 4, 5), (2, 5, 3), False, False, (2, 1, 4, 3)),
    # a 2-D operand with a batched one, both sides, with transposes
    ((2, 3, 4, 5), (5, 2), False, False, (2, 3, 4, 2)),
    ((2, 3, 5, 4), (2, 5), True, True, (2, 3, 4, 2)),
    ((2, 4, 5), (2, 5), False, True, (2, 4, 2)),
    ((4, 5), (2, 3, 5, 2), False, False, (2, 3, 4, 2)),
    ((5, 4), (3, 2, 5), True, True, (3, 4, 2)),
    ((5, 4), (3, 5, 2), True, False, (3, 4, 2)),
    # 1-D operands with batched ones: never a batch themselves
    ((5,), (2, 3, 5, 2), False, False, (2, 3, 2)),
    ((2, 3, 4, 5), (5,), False, False, (2, 3, 4)),
    ((3,), (2, 3, 1, 4), True, False, (2, 3, 3, 4)),
    ((2, 3, 1, 4), (5,), True, True, (2, 3, 4, 5)),
]


@pytest.mark.parametrize("xs,ys,tx,ty,expected", BATCH_CASES)
def test_batch_dims_fold_into_one_batch_as_in_fluid(xs, ys, tx, ty, expected):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    out = run_op("matmul", {"X": [x], "Y": [y]},
                 {"transpose_X": tx, "transpose_Y": ty, "alpha": 2.0})["Out"][0]
    assert out.shape == expected
    np.testing.assert_allclose(out, 2.0 * _fluid_batched_reference(x, y, tx, ty), rtol=1e-12)
    assert matmul_out_shape(xs, ys, tx, ty) == list(expected)


def test_an_empty_batch_against_a_matrix():
    x, y = np.zeros((0, 4, 5)), rng.standard_normal((5, 2))
    out = run_op("matmul", {"X": [x], "Y": [y]})["Out"][0]
    assert out.shape == (0, 4, 2)
    g = run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [out]})
    assert g["X" + GRAD][0].shape == (0, 4, 5)
    np.testing.assert_array_equal(g["Y" + GRAD][0], np.zeros((5, 2)))  # a sum over no matrix


def _check_gradients(xs: tuple, ys: tuple, attrs: dict, out_shape: tuple) -> None:
    """matmul_grad against central differences of ``Σ Out · seed`` (dX X's shape, dY Y's)."""
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    seed = rng.standard_normal(out_shape)

    def f() -> float:
        return float((run_op("matmul", {"X": [x], "Y": [y]}, attrs)["Out"][0] * seed).sum())

    g = run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [seed]}, attrs)
    for v, grad in ((x, g["X" + GRAD][0]), (y, g["Y" + GRAD][0])):
        assert grad.shape == v.shape
        np.testing.assert_allclose(grad, central_differences(f, v), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("xs,ys,tx,ty,expected", BATCH_CASES)
def test_batch_gradients_match_finite_differences(xs, ys, tx, ty, expected):
    _check_gradients(xs, ys, {"transpose_X": tx, "transpose_Y": ty, "alpha": 0.5}, expected)


def test_an_unbatched_operands_gradient_sums_over_the_batch():
    x, y = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((5, 2))
    d = rng.standard_normal((2, 3, 4, 2))
    g = run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [d]})
    ref = sum(_loop_matmul(x[i, j].T, d[i, j]) for i in range(2) for j in range(3))
    np.testing.assert_allclose(g["Y" + GRAD][0], ref, rtol=1e-12)


# (X shape, Y shape, transpose_X, transpose_Y, batch sizes): numpy broadcasts all of these
REFUSED = [
    ((1, 4, 5), (4, 5, 2), False, False, (1, 4)),
    ((4, 4, 5), (1, 5, 2), False, False, (4, 1)),
    ((2, 3, 4, 5), (3, 5, 2), False, False, (6, 3)),
    ((2, 1, 5, 4), (1, 3, 2, 5), True, True, (2, 3)),
    ((3, 1, 4, 5), (4, 5, 2), False, False, (3, 4)),
]


@pytest.mark.parametrize("xs,ys,tx,ty,sizes", REFUSED)
def test_different_batch_sizes_are_refused_when_run(xs, ys, tx, ty, sizes):
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    attrs = {"transpose_X": tx, "transpose_Y": ty}
    msg = (rf"X {list(xs)} and Y {list(ys)} have batch sizes {sizes[0]} and {sizes[1]}"
           .replace("[", r"\[").replace("]", r"\]"))
    with pytest.raises(ValueError, match=msg):
        run_op("matmul", {"X": [x], "Y": [y]}, attrs)
    seed = np.ones(xs[:-2] + (4, 2))
    with pytest.raises(ValueError, match="batch sizes"):
        run_op("matmul_grad", {"X": [x], "Y": [y], "Out" + GRAD: [seed]}, attrs)
    with pytest.raises(ValueError, match=msg):
        matmul_out_shape(xs, ys, tx, ty)


@pytest.mark.parametrize("xs,ys,expected", [
    ((-1, 4, 5), (6, 5, 2), [-1, 4, 2]),            # X's batch size unknown: checked when run
    ((6, 4, 5), (-1, 3, 5, 2), [6, 4, 2]),
    ((2, -1, 4, 5), (2, 3, 5, 2), [2, -1, 4, 2]),   # X batched: Out has X's leading dims
    ((4, 5), (-1, 3, 5, 2), [-1, 3, 4, 2]),
    ((-1, 5), (-1, 3, 5, 2), [-1, 3, -1, 2]),
])
def test_build_time_shape_with_unknown_batch_dims(xs, ys, expected):
    assert matmul_out_shape(xs, ys) == expected


def _program_matmul(xs: list, ys: list, tx: bool = False, ty: bool = False):
    import dask_fluid as fluid

    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", shape=xs, dtype="float64")
        y = fluid.data("y", shape=ys, dtype="float64")
        out = fluid.layers.matmul(x, y, tx, ty)
    return main, out


def test_the_layer_refuses_known_batch_sizes_that_differ():
    with pytest.raises(ValueError, match=r"batch sizes 1 and 4"):
        _program_matmul([1, 4, 5], [4, 5, 2])
    with pytest.raises(ValueError, match=r"batch sizes 6 and 3"):
        _program_matmul([2, 3, 4, 5], [3, 5, 2])


@pytest.mark.parametrize("xs,ys,tx,ty,message", [
    # equal batch sizes, which the op runs: Fluid 1.8's layer compares position by position
    ([2, 3, 4, 5], [6, 5, 2], False, False, "has 2 at dim 0 and Y .* has 6"),
    ([6, 4, 5], [2, 3, 5, 2], False, False, "has 6 at dim 0 and Y .* has 2"),
    ([3, 2, 4, 5], [2, 3, 5, 2], False, False, "has 3 at dim 0"),
    # past Y's batch dims Fluid's layer meets op(Y)'s matrix dims (here K = 5 against 1)
    ([2, 1, 4, 5], [2, 5, 3], False, False, "has 1 at dim 1 and Y .* has 5"),
    # and past Y's last dim (an IndexError in Fluid); K = N = 1 match the leading 1s
    ([2, 1, 1, 1, 4, 1], [2, 1, 1], False, False, "more leading dims"),
])
def test_the_layer_checks_leading_dims_position_by_position(xs, ys, tx, ty, message):
    with pytest.raises(ValueError, match=message):
        _program_matmul(xs, ys, tx, ty)


def test_the_layer_builds_and_runs_fluid_shapes():
    import dask_fluid as fluid

    cases = [  # (X, Y as declared, X, Y as fed, Out as declared)
        ([-1, 3, 4, 5], [-1, 3, 5, 2], (2, 3, 4, 5), (2, 3, 5, 2), [-1, 3, 4, 2]),
        ([2, 4, 5], [2, 1, 5, 3], (2, 4, 5), (2, 1, 5, 3), [2, 4, 3]),  # Out has X's dims
        ([-1, 4, 5], [6, 5, 2], (6, 4, 5), (6, 5, 2), [-1, 4, 2]),
        ([4, 5], [-1, 3, 5, 2], (4, 5), (2, 3, 5, 2), [-1, 3, 4, 2]),
        ([-1, 3, 4, 5], [5], (2, 3, 4, 5), (5,), [-1, 3, 4]),
    ]
    for xs, ys, xv_shape, yv_shape, declared in cases:
        main, out = _program_matmul(xs, ys)
        assert list(out.shape) == declared
        xv, yv = rng.standard_normal(xv_shape), rng.standard_normal(yv_shape)
        got, = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv, "y": yv},
                                                    fetch_list=[out])
        np.testing.assert_allclose(got, _fluid_batched_reference(xv, yv, False, False),
                                   rtol=1e-12)


def test_a_refused_batch_unknown_at_build_time_is_refused_when_run():
    import dask_fluid as fluid

    main, out = _program_matmul([-1, 4, 5], [4, 5, 2])  # X's batch size unknown: builds
    feed = {"x": rng.standard_normal((1, 4, 5)), "y": rng.standard_normal((4, 5, 2))}
    # the executor names the failed op and chains the kernel's ValueError
    with pytest.raises(RuntimeError, match=r"op 'matmul'.*batch sizes 1 and 4") as info:
        fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out])
    assert isinstance(info.value.__cause__, ValueError)


def test_dygraph_runs_what_only_the_layers_build_time_check_refuses():
    import dask_fluid as fluid
    from dask_fluid import dygraph

    xv, yv = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((6, 5, 2))
    with dygraph.guard(fluid.CPUPlace()):
        x, y = dygraph.to_variable(xv), dygraph.to_variable(yv)
        x.stop_gradient = y.stop_gradient = False
        out = fluid.layers.matmul(x, y)
        np.testing.assert_allclose(out.numpy(), _fluid_batched_reference(xv, yv, False, False),
                                   rtol=1e-12)
        fluid.layers.reduce_sum(out).backward()
        assert x.gradient().shape == xv.shape and y.gradient().shape == yv.shape
        with pytest.raises(ValueError, match=r"batch sizes 1 and 4"):
            fluid.layers.matmul(dygraph.to_variable(xv[:1, 0]), dygraph.to_variable(yv[:4]))
