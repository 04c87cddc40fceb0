"""Forward kernels against plain numpy references, determinism of the random ops, the split and
merge ops of the distributed runtime, and the error messages of bad inputs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.ops import SelectedRows, registry
from dask_fluid.ops.registry import LOD_KEY
from tests.programs import build as build_program
from tests.programs import run as run_program

from . import central_differences, run_op


def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---------------------------------------------------------------------------------------------
# math


def test_mul_flattens_by_num_col_dims():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    out = run_op("mul", {"X": [x], "Y": [y]}, {"x_num_col_dims": 2})["Out"][0]
    np.testing.assert_allclose(out, x @ y)
    out = run_op("mul", {"X": [x], "Y": [rng.standard_normal((12, 5))]})["Out"][0]
    assert out.shape == (2, 5)


@pytest.mark.parametrize("xs, ys, axis, bshape", [
    ((2, 3, 4, 5), (3, 4), 1, (1, 3, 4, 1)),
    ((2, 3, 4, 5), (4, 5), -1, (1, 1, 4, 5)),
    ((2, 3), (2,), 0, (2, 1)),
    ((2, 3), (2, 1), -1, (2, 1)),
    ((2, 3), (1,), -1, (1, 1)),
    # Fluid 1.8's common broadcast (test_elementwise_add_op.py's commonuse cases)
    ((2, 3, 4), (1, 1), -1, (1, 1, 1)),
    ((10, 3, 1, 4), (10, 1, 12, 1), -1, (10, 1, 12, 1)),
    ((2, 1, 4), (3, 1), 1, (1, 3, 1)),
])
def test_elementwise_fluid_broadcasting(xs, ys, axis, bshape):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(xs), rng.standard_normal(ys)
    out = run_op("elementwise_add", {"X": [x], "Y": [y]}, {"axis": axis})["Out"][0]
    np.testing.assert_allclose(out, x + y.reshape(bshape))


def test_elementwise_x_of_lower_rank_is_aligned_in_y_at_axis():
    # ElementwiseComputeEx with is_xsize_larger false: X, its trailing 1s dropped, at axis
    x, y = np.arange(3.0).reshape(3, 1), np.ones((2, 3, 4))
    out = run_op("elementwise_sub", {"X": [x], "Y": [y]}, {"axis": 1})["Out"][0]
    np.testing.assert_array_equal(out, x.reshape(1, 3, 1) - y)
    out = run_op("elementwise_mul", {"X": [np.arange(2.0)], "Y": [y]}, {"axis": 0})["Out"][0]
    np.testing.assert_array_equal(out, np.arange(2.0).reshape(2, 1, 1) * y)


def test_elementwise_bad_broadcast_names_op_and_shapes():
    with pytest.raises(ValueError, match=r"elementwise_mul: Y of shape \[5\] cannot broadcast "
                                         r"with X of shape \[2, 3\] at axis 1"):
        run_op("elementwise_mul", {"X": [np.ones((2, 3))], "Y": [np.ones(5)]})
    with pytest.raises(ValueError, match=r"X of shape \[2, 3\] cannot broadcast with Y"):
        run_op("elementwise_add", {"X": [np.ones((2, 3))], "Y": [np.ones((2, 2, 2))]})


def test_elementwise_out_shape_before_the_run_is_the_broadcast_shape():
    import dask_fluid as fluid

    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", shape=[3, 1], dtype="float32")  # [-1, 3, 1]
        y = fluid.layers.data("y", shape=[1, 4], dtype="float32")
        assert fluid.layers.elementwise_add(x, y).shape == (-1, 3, 4)
        assert (x * y).shape == (-1, 3, 4)
        b = fluid.layers.data("b", shape=[5, 1, 1], dtype="float32", append_batch_size=False)
        assert fluid.layers.elementwise_max(x, b).shape == (5, 3, 1)  # -1 meets 5
        assert fluid.layers.elementwise_add(x, fluid.layers.data("z", shape=[1])).shape == (
            -1, 3, 1)


def test_activations_and_reductions():
    x = np.array([[-2.0, -0.5, 0.0, 1.5], [3.0, -1.0, 2.0, 0.25]])
    np.testing.assert_allclose(run_op("relu", {"X": [x]})["Out"][0], np.maximum(x, 0))
    np.testing.assert_allclose(run_op("sigmoid", {"X": [x]})["Out"][0], 1 / (1 + np.exp(-x)))
    big = run_op("sigmoid", {"X": [np.array([-1000.0, 1000.0], np.float32)]})["Out"][0]
    np.testing.assert_array_equal(big, [0.0, 1.0])
    np.testing.assert_allclose(run_op("mean", {"X": [x]})["Out"][0], [x.mean()])
    assert run_op("mean", {"X": [x]})["Out"][0].shape == (1,)
    np.testing.assert_allclose(run_op("reduce_sum", {"X": [x]}, {"dim": [1]})["Out"][0],
                               x.sum(1))
    assert run_op("reduce_mean", {"X": [x]}, {"reduce_all": True})["Out"][0].shape == (1,)
    np.testing.assert_allclose(run_op("clip", {"X": [x]}, {"min": -1.0, "max": 1.0})["Out"][0],
                               np.clip(x, -1, 1))
    np.testing.assert_array_equal(run_op("sign", {"X": [x]})["Out"][0], np.sign(x))
    np.testing.assert_array_equal(run_op("floor", {"X": [x]})["Out"][0], np.floor(x))


def test_sign_passes_a_zero_gradient_through_a_program():
    def net():
        x = layers.data("x", [3])
        h = layers.fc(x, 4, bias_attr=False)
        s = layers.sign(h)
        assert not s.stop_gradient  # as Fluid 1.8's layer: the zero gradient flows
        loss = layers.reduce_sum(s)
        return h, s, fluid.backward.append_backward(loss)

    main, startup, (h, s, param_grads) = build_program(net)
    # Fluid's SignGradMaker: a scale op by 0 from Out@GRAD to X@GRAD
    (op,) = [op for op in main.global_block().ops if op.input("X") == [s.name + "@GRAD"]]
    assert op.type == "scale" and op.attr("scale") == 0.0
    assert op.output("Out") == [h.name + "@GRAD"]
    assert [p.name for p, _ in param_grads] == ["fc_0.w_0"]
    xv = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    (w, dw), _ = run_program(main, startup, {"x": xv}, ["fc_0.w_0", param_grads[0][1]])
    assert dw.shape == w.shape and dw.dtype == np.float32
    np.testing.assert_array_equal(dw, np.zeros_like(w))


def test_sign_grad_maker_scales_by_zero():
    op = SimpleNamespace(type="sign", inputs={"X": ["x"]}, outputs={"Out": ["out"]},
                         attrs={"op_role": 1})
    (desc,) = registry.get("sign").grad(op)
    assert desc == {"type": "scale", "inputs": {"X": ["out@GRAD"]},
                    "outputs": {"Out": ["x@GRAD"]}, "attrs": {"scale": 0.0}}
    d = np.array([[1.5, -2.0], [0.0, 3.0]])
    got = run_op("scale", {"X": [d]}, desc["attrs"])["Out"][0]
    np.testing.assert_array_equal(got, np.zeros_like(d))


def test_scale_sum_cast_compare_increment_assign():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(
        run_op("scale", {"X": [x]}, {"scale": 2.0, "bias": 1.0, "bias_after_scale": False})
        ["Out"][0], (x + 1) * 2)
    out = run_op("sum", {"X": [x, x, x]})["Out"][0]
    np.testing.assert_array_equal(out, 3 * x)
    assert run_op("cast", {"X": [x]}, {"out_dtype": "int64"})["Out"][0].dtype == np.int64
    assert run_op("cast", {"X": [x]}, {"out_dtype": 6})["Out"][0].dtype == np.float64
    lt = run_op("less_than", {"X": [x], "Y": [np.full((1,), 2.5, np.float32)]})["Out"][0]
    np.testing.assert_array_equal(lt, x < 2.5)
    eq = run_op("equal", {"X": [x], "Y": [x[:1].copy()]}, {"axis": 0})["Out"][0]
    np.testing.assert_array_equal(eq, x == x[:1])
    np.testing.assert_array_equal(
        run_op("equal", {"X": [np.arange(4)], "Y": [np.array([2])]})["Out"][0],
        [False, False, True, False])
    np.testing.assert_array_equal(run_op("logical_not", {"X": [lt]})["Out"][0], ~lt)
    np.testing.assert_array_equal(run_op("logical_and", {"X": [lt], "Y": [~lt]})["Out"][0],
                                  np.zeros_like(lt))
    step = run_op("increment", {"X": [np.array([3], np.int64)]}, {"step": 2.0})["Out"][0]
    assert step.dtype == np.int64 and step[0] == 5
    a = run_op("assign", {"X": [x]})["Out"][0]
    assert a is not x and not np.shares_memory(a, x)
    np.testing.assert_array_equal(a, x)


def test_sum_and_scale_with_selected_rows():
    v1, v2 = np.ones((2, 3)), 2 * np.ones((1, 3))
    s1 = SelectedRows(np.array([0, 2]), v1, 4)
    s2 = SelectedRows(np.array([2]), v2, 4)
    out = run_op("sum", {"X": [s1, s2]})["Out"][0]
    assert isinstance(out, SelectedRows)
    np.testing.assert_array_equal(out.rows, [0, 2, 2])
    np.testing.assert_array_equal(out.to_dense(), s1.to_dense() + s2.to_dense())
    dense = np.full((4, 3), 10.0)
    out = run_op("sum", {"X": [dense, s1, s2]})["Out"][0]
    np.testing.assert_array_equal(out, dense + s1.to_dense() + s2.to_dense())
    assert dense[0, 0] == 10.0  # inputs untouched
    sc = run_op("scale", {"X": [s1]}, {"scale": 0.5})["Out"][0]
    assert isinstance(sc, SelectedRows) and sc.height == 4
    np.testing.assert_array_equal(sc.value, 0.5 * v1)


def test_selected_rows_merged_and_dense():
    s = SelectedRows(np.array([5, 1, 5, 0]), np.arange(8.0).reshape(4, 2), 6)
    assert s.shape == (6, 2) and s.dtype == np.float64
    m = s.merged()
    np.testing.assert_array_equal(m.rows, [0, 1, 5])
    np.testing.assert_array_equal(m.value, [[6, 7], [2, 3], [0 + 4, 1 + 5]])
    np.testing.assert_array_equal(m.to_dense(), s.to_dense())
    with pytest.raises(ValueError, match="one value row per row index"):
        SelectedRows(np.array([0, 1]), np.ones((3, 2)), 4)


def test_scatter_add_gives_the_bits_of_np_add_at_on_every_path():
    # layered adds (many wide rows, few repeats) and every fallback to np.add.at: few rows,
    # narrow rows, an index repeated more than _LAYER_MAX_REPEAT times, a negative index,
    # a broadcast value; float32 and float64, rows of 1 to 3 dimensions
    from dask_fluid.ops import selected_rows as sr

    rng = np.random.default_rng(3)
    cases = [((300, 16), rng.integers(0, 300, 500)),  # layered
             ((300, 4, 3), rng.integers(0, 300, 500)),  # layered, 3-D rows
             ((50, 16), rng.integers(0, 5, 500)),  # too many repeats
             ((300, 16), rng.integers(0, 300, 20)),  # few rows
             ((300, 2), rng.integers(0, 300, 500)),  # narrow rows
             ((300,), rng.integers(0, 300, 500)),  # scalars
             ((300, 16), np.r_[rng.integers(0, 300, 499), -1])]  # negative index
    for shape, idx in cases:
        for dtype in (np.float32, np.float64):
            v = rng.standard_normal((len(idx), *shape[1:])).astype(dtype)
            a = rng.standard_normal(shape).astype(dtype)
            want, got = a.copy(), a.copy()
            np.add.at(want, idx, v)
            sr.scatter_add(np, got, idx, v)
            assert np.array_equal(want.view(np.uint8), got.view(np.uint8)), (shape, dtype)
    got = np.zeros((300, 16))
    sr.scatter_add(np, got, rng.integers(0, 300, 500), 1.0)  # broadcast value
    assert got.sum() == 500 * 16
    assert sr._LAYER_MAX_REPEAT < 500 / 5  # the repeat case above does fall back
    with pytest.raises(IndexError):
        sr.scatter_add(np, np.zeros((10, 16)), np.arange(100) % 11, np.ones((100, 16)))


# ---------------------------------------------------------------------------------------------
# nn


def test_softmax_and_cross_entropies():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 4)) * 3
    label = np.array([[0], [3], [1], [1], [2]], np.int64)
    sm = run_op("softmax", {"X": [logits]})["Out"][0]
    np.testing.assert_allclose(sm, np_softmax(logits))
    np.testing.assert_allclose(run_op("softmax", {"X": [logits]}, {"axis": 0})["Out"][0],
                               np_softmax(logits, 0))
    ce = run_op("cross_entropy", {"X": [sm], "Label": [label]})["Y"][0]
    expected = -np.log(sm[np.arange(5), label[:, 0]])[:, None]
    np.testing.assert_allclose(ce, expected)
    res = run_op("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]})
    np.testing.assert_allclose(res["Softmax"][0], sm)
    np.testing.assert_allclose(res["Loss"][0], expected)
    ign = run_op("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]},
                 {"ignore_index": 1})["Loss"][0]
    np.testing.assert_allclose(ign[:, 0], np.where(label[:, 0] == 1, 0.0, expected[:, 0]))


def test_cross_entropy2_equals_cross_entropy_and_keeps_what_its_gradient_needs():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.1, 1, (2, 3, 4)).astype(np.float32)
    label = np.array([[[0], [3], [1]], [[2], [2], [0]]], np.int64)
    res = run_op("cross_entropy2", {"X": [x], "Label": [label]}, {"ignore_index": 0})
    picked = np.take_along_axis(x, label, axis=-1)
    np.testing.assert_allclose(res["Y"][0], np.where(label == 0, 0, -np.log(picked)),
                               rtol=1e-6)
    np.testing.assert_allclose(res["MatchX"][0], np.where(label == 0, 0, picked))
    assert res["XShape"][0].shape == (0, 2, 3, 4) and res["XShape"][0].size == 0
    plain = run_op("cross_entropy", {"X": [x], "Label": [label]}, {"ignore_index": 0})
    np.testing.assert_allclose(res["Y"][0], plain["Y"][0])


def test_cos_sim_matches_scipy_cosine_distance():
    from scipy.spatial.distance import cosine

    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    res = run_op("cos_sim", {"X": [x], "Y": [y]})
    expected = [1 - cosine(a, b) for a, b in zip(x, y, strict=True)]
    np.testing.assert_allclose(res["Out"][0][:, 0], expected)
    np.testing.assert_allclose(res["XNorm"][0][:, 0], np.linalg.norm(x, axis=1))
    one = run_op("cos_sim", {"X": [x], "Y": [y[:1]]})["Out"][0][:, 0]
    np.testing.assert_allclose(one, [1 - cosine(a, y[0]) for a in x])
    with pytest.raises(ValueError, match="cos_sim: Y must have the shape of X or one row"):
        run_op("cos_sim", {"X": [x], "Y": [y[:2]]})


def test_lookup_table_refuses_float_ids_when_it_runs():
    with pytest.raises(TypeError, match="lookup_table: Ids must hold integer ids, got float32"):
        run_op("lookup_table", {"W": [np.zeros((3, 2))], "Ids": [np.zeros((2, 1), np.float32)]})


def test_cross_entropy_of_a_zero_probability_is_paddles_1e20():
    # Paddle's TolerableValue: -log(0) is 1e20 (hard and soft labels), not inf
    x = np.array([[0.0, 1.0], [0.5, 0.5]], np.float32)
    hard = run_op("cross_entropy", {"X": [x], "Label": [np.array([[0], [1]], np.int64)]})
    np.testing.assert_allclose(hard["Y"][0][:, 0], [1e20, np.log(2)], rtol=1e-6)
    soft = run_op("cross_entropy", {"X": [x], "Label": [np.array([[1, 0], [0, 1]], np.float32)]},
                  {"soft_label": True})
    np.testing.assert_allclose(soft["Y"][0][:, 0], [1e20, np.log(2)], rtol=1e-6)


def test_softmax_with_cross_entropy_is_stable_for_huge_logits():
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 1e4, 0.0]], np.float32)
    label = np.array([[2], [1]], np.int64)
    res = run_op("softmax_with_cross_entropy", {"Logits": [logits], "Label": [label]})
    np.testing.assert_allclose(res["Loss"][0][:, 0], [2000.0, 0.0])
    assert np.isfinite(res["Softmax"][0]).all()


@pytest.mark.parametrize("op, x_slot", [("cross_entropy", "X"),
                                        ("softmax_with_cross_entropy", "Logits")])
def test_bad_label_raises_naming_op_value_and_range(op, x_slot):
    x = np.full((3, 4), 0.25)
    bad = np.array([[1], [7], [0]], np.int64)
    with pytest.raises(ValueError, match=rf"{op}: label 7 is out of range: labels must lie in "
                                         r"\[0, 4\) or equal ignore_index=-100"):
        run_op(op, {x_slot: [x], "Label": [bad]})
    with pytest.raises(ValueError, match=rf"{op}: label -1 is out of range"):
        run_op(op, {x_slot: [x], "Label": [np.array([[-1], [0], [0]], np.int64)]})
    # the ignore index itself is never an error, even outside [0, C)
    ok = run_op(op, {x_slot: [x], "Label": [np.array([[-100], [0], [3]], np.int64)]})
    out = next(iter(ok.values())) if op == "cross_entropy" else ok["Loss"]
    assert out[0][0, 0] == 0.0


def test_top_k_and_accuracy():
    x = np.array([[0.1, 0.5, 0.4], [0.7, 0.2, 0.1], [0.3, 0.3, 0.4], [0.2, 0.2, 0.6]])
    res = run_op("top_k", {"X": [x]}, {"k": 2})
    np.testing.assert_array_equal(res["Indices"][0], [[1, 2], [0, 1], [2, 0], [2, 0]])
    assert res["Indices"][0].dtype == np.int64
    np.testing.assert_array_equal(res["Out"][0], [[0.5, 0.4], [0.7, 0.2], [0.4, 0.3],
                                                  [0.6, 0.2]])
    label = np.array([[1], [1], [1], [2]], np.int64)
    top1 = run_op("top_k", {"X": [x]}, {"k": 1})
    acc = run_op("accuracy", {"Out": top1["Out"], "Indices": top1["Indices"], "Label": [label]})
    assert acc["Accuracy"][0].dtype == np.float32 and acc["Accuracy"][0].shape == (1,)
    np.testing.assert_allclose(acc["Accuracy"][0], [0.5])
    assert acc["Correct"][0].dtype == np.int32 and acc["Correct"][0][0] == 2
    assert acc["Total"][0][0] == 4
    acc2 = run_op("accuracy", {"Out": res["Out"], "Indices": res["Indices"], "Label": [label]})
    np.testing.assert_allclose(acc2["Accuracy"][0], [0.75])
    with pytest.raises(ValueError, match=r"top_k: k=4 must lie in \[1, 3\]"):
        run_op("top_k", {"X": [x]}, {"k": 4})


def _top_k_grad_reference(x: np.ndarray, k: int, dout: np.ndarray) -> np.ndarray:
    """dX by loops: per row (the last axis) the k largest values, the lower index first among
    equal ones, each getting its dOut (Fluid 1.8's TopkGradKernel)."""
    dx = np.zeros_like(x)
    for row in np.ndindex(x.shape[:-1]):
        line = list(x[row])
        order = sorted(range(len(line)), key=lambda j: (-line[j], j))
        for j in range(k):
            dx[row + (order[j],)] = dout[row + (j,)]
    return dx


@pytest.mark.parametrize("shape, k, ties", [
    ((1, 4), 2, False),
    ((5, 6), 3, False),  # several rows
    ((4, 5), 3, True),  # equal values, inside and across the top-k boundary
    ((2, 3, 5), 2, False),  # 3-D: the last axis
    ((2, 3, 4), 4, True),  # k = the full width
    ((7,), 3, False),  # 1-D
])
def test_top_k_grad_scatters_out_grad_to_the_indices(shape, k, ties):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, shape).astype(np.float64) if ties else rng.standard_normal(shape)
    fwd = run_op("top_k", {"X": [x]}, {"k": k})
    dout = rng.standard_normal(fwd["Out"][0].shape)
    op = SimpleNamespace(type="top_k", inputs={"X": ["x"]},
                         outputs={"Out": ["out"], "Indices": ["idx"]}, attrs={"k": k})
    (desc,) = registry.get("top_k").grad(op)
    # Fluid's TopkGradMaker: X, Indices and Out@GRAD in, X@GRAD out, no attrs
    assert desc == {"type": "top_k_grad",
                    "inputs": {"X": ["x"], "Indices": ["idx"], "Out@GRAD": ["out@GRAD"]},
                    "outputs": {"X@GRAD": ["x@GRAD"]}, "attrs": {}}
    dx = run_op("top_k_grad", {"X": [x], "Indices": fwd["Indices"],
                               "Out@GRAD": [dout]})["X@GRAD"][0]
    assert dx.shape == x.shape and dx.dtype == x.dtype
    np.testing.assert_array_equal(dx, _top_k_grad_reference(x, k, dout))
    if not ties:  # away from ties top_k is differentiable: dX is the central difference
        num = central_differences(
            lambda: float((run_op("top_k", {"X": [x]}, {"k": k})["Out"][0] * dout).sum()), x)
        np.testing.assert_allclose(dx, num, atol=1e-6)


def test_top_k_grad_float32_and_missing_out_grad():
    x = np.array([[0.5, 2.0, 1.0]], np.float32)
    idx = np.array([[1, 2]], np.int64)
    dx = run_op("top_k_grad", {"X": [x], "Indices": [idx],
                               "Out@GRAD": [np.array([[3.0, 4.0]], np.float32)]})["X@GRAD"][0]
    assert dx.dtype == np.float32
    np.testing.assert_array_equal(dx, [[0.0, 3.0, 4.0]])
    none = run_op("top_k_grad", {"X": [x], "Indices": [idx], "Out@GRAD": [None]})
    np.testing.assert_array_equal(none["X@GRAD"][0], np.zeros_like(x))
    with pytest.raises(ValueError, match="top_k_grad: Indices"):
        run_op("top_k_grad", {"X": [x], "Indices": [idx.T],
                              "Out@GRAD": [np.ones((2, 1), np.float32)]})


def test_top_k_gradient_reaches_a_parameter_through_a_program():
    def net():
        x = layers.data("x", [6])
        h = layers.fc(x, 5, bias_attr=False)
        values, indices = layers.topk(h, k=2)
        # Fluid 1.8's layers.topk stops both outputs' gradients; a user lets Out's through
        values.stop_gradient = False
        loss = layers.reduce_sum(values)
        return h, indices, fluid.backward.append_backward(loss)

    main, startup, (h, indices, param_grads) = build_program(net)
    assert indices.stop_gradient
    (grad_op,) = [op for op in main.global_block().ops if op.type == "top_k_grad"]
    assert grad_op.input("Indices") == [indices.name]
    assert [p.name for p, _ in param_grads] == ["fc_0.w_0"]
    xv = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    (hv, iv, w, dw), _ = run_program(main, startup, {"x": xv},
                                     [h, indices, "fc_0.w_0", param_grads[0][1]])
    dh = np.zeros_like(hv)
    for r in range(hv.shape[0]):  # d(sum of the top 2) / dh: 1 at the two largest
        dh[r, np.argsort(-hv[r], kind="stable")[:2]] = 1
    np.testing.assert_array_equal(iv, np.argsort(-hv, axis=1, kind="stable")[:, :2])
    np.testing.assert_allclose(dw, xv.T @ dh, rtol=1e-5, atol=1e-6)
    assert w.shape == dw.shape


def test_topk_layer_stops_the_gradient_by_default_as_fluid():
    def net():
        h = layers.fc(layers.data("x", [6]), 5, bias_attr=False)
        values, _ = layers.topk(h, k=2)
        loss = layers.reduce_sum(values) + layers.reduce_sum(h)
        return fluid.backward.append_backward(loss)

    main, _, _ = build_program(net)
    assert "top_k_grad" not in [op.type for op in main.global_block().ops]


def test_dropout_determinism_and_test_mode():
    x = np.ones((50, 40), np.float32)
    a = run_op("dropout", {"X": [x]}, {"_rng": np.random.default_rng(7), "dropout_prob": 0.3})
    b = run_op("dropout", {"X": [x]}, {"_rng": np.random.default_rng(7), "dropout_prob": 0.3})
    c = run_op("dropout", {"X": [x]}, {"_rng": np.random.default_rng(8), "dropout_prob": 0.3})
    np.testing.assert_array_equal(a["Mask"][0], b["Mask"][0])
    assert not np.array_equal(a["Mask"][0], c["Mask"][0])
    mask = a["Mask"][0]
    assert set(np.unique(mask)) <= {0.0, 1.0} and mask.dtype == np.float32
    assert 0.6 < mask.mean() < 0.8
    np.testing.assert_array_equal(a["Out"][0], x * mask)
    up = run_op("dropout", {"X": [x]}, {"_rng": np.random.default_rng(7), "dropout_prob": 0.3,
                                        "dropout_implementation": "upscale_in_train"})
    np.testing.assert_allclose(up["Out"][0], x * mask / np.float32(0.7), rtol=1e-6)
    test = run_op("dropout", {"X": [x]}, {"is_test": True, "dropout_prob": 0.3})["Out"][0]
    np.testing.assert_allclose(test, x * 0.7, rtol=1e-6)
    assert test.dtype == np.float32
    test_up = run_op("dropout", {"X": [x]}, {"is_test": True, "dropout_prob": 0.3,
                                             "dropout_implementation": "upscale_in_train"})
    np.testing.assert_array_equal(test_up["Out"][0], x)
    # the gradient at test time is the derivative of that scaling (regression test: it was
    # the mask's, 1 and 1 / (1 - p))
    d = np.full_like(x, 2.0)
    for impl, factor in (("downgrade_in_infer", 0.7), ("upscale_in_train", 1.0)):
        grad = run_op("dropout_grad", {"Mask": [np.ones_like(x)], "Out@GRAD": [d]},
                      {"is_test": True, "dropout_prob": 0.3, "dropout_implementation": impl})
        np.testing.assert_allclose(grad["X@GRAD"][0], d * factor, rtol=1e-6)
    fixed = [run_op("dropout", {"X": [x]}, {"fix_seed": True, "seed": 5,
                                            "_rng": np.random.default_rng(i)})["Mask"][0]
             for i in range(2)]
    np.testing.assert_array_equal(fixed[0], fixed[1])


def test_lookup_table_shapes_padding_and_range():
    w = np.arange(12.0).reshape(4, 3)
    ids = np.array([[1], [3], [1]], np.int64)
    out = run_op("lookup_table", {"W": [w], "Ids": [ids]})["Out"][0]
    np.testing.assert_array_equal(out, w[[1, 3, 1]])
    assert run_op("lookup_table", {"W": [w], "Ids": [ids.reshape(-1)]})["Out"][0].shape == (3, 3)
    assert run_op("lookup_table", {"W": [w], "Ids": [ids.reshape(3, 1, 1)]})["Out"][0].shape \
        == (3, 1, 3)
    pad = run_op("lookup_table", {"W": [w], "Ids": [ids]}, {"padding_idx": 3})["Out"][0]
    np.testing.assert_array_equal(pad, [w[1], [0, 0, 0], w[1]])
    g = run_op("lookup_table_grad", {"W": [w], "Ids": [ids], "Out@GRAD": [np.ones((3, 3))]},
               {"is_sparse": True})["W@GRAD"][0]
    assert isinstance(g, SelectedRows) and g.height == 4
    np.testing.assert_array_equal(g.rows, [1, 3, 1])
    with pytest.raises(ValueError, match=r"lookup_table: id 4 is out of range: ids must lie in "
                                         r"\[0, 4\)"):
        run_op("lookup_table", {"W": [w], "Ids": [np.array([[0], [4]], np.int64)]})


# ---------------------------------------------------------------------------------------------
# tensor


def test_fill_ops_and_reshape2():
    out = run_op("fill_constant", {}, {"shape": [2, 3], "dtype": "int64", "value": 7.0})
    assert out["Out"][0].dtype == np.int64 and (out["Out"][0] == 7).all()
    assert run_op("fill_constant", {}, {"shape": [1], "dtype": 5})["Out"][0].dtype == np.float32
    x = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(run_op("fill_zeros_like", {"X": [x]})["Out"][0], 0 * x)
    res = run_op("reshape2", {"X": [x]}, {"shape": [0, -1]})
    assert res["Out"][0].shape == (2, 12) and np.shares_memory(res["Out"][0], x)
    assert res["XShape"][0].shape == (0, 2, 3, 4) and res["XShape"][0].size == 0
    assert run_op("reshape2", {"X": [x]}, {"shape": [-1, 0, 2]})["Out"][0].shape == (4, 3, 2)
    with pytest.raises(ValueError, match="at most one -1"):
        run_op("reshape2", {"X": [x]}, {"shape": [-1, -1]})
    with pytest.raises(ValueError, match=r"cannot reshape an input of shape \[2, 3, 4\]"):
        run_op("reshape2", {"X": [x]}, {"shape": [5, 5]})


def test_split_byref_concat_round_trip():
    x = np.arange(20.0).reshape(10, 2)
    parts = run_op("split_byref", {"X": [x]}, {"sections": [3, 3, 4]})["Out"]
    assert [p.shape[0] for p in parts] == [3, 3, 4]
    assert all(np.shares_memory(p, x) for p in parts)  # views, no copy
    np.testing.assert_array_equal(run_op("concat", {"X": parts})["Out"][0], x)
    with pytest.raises(ValueError, match=r"sections \[3, 3\] sum to 6, but X has 10 rows"):
        run_op("split_byref", {"X": [x]}, {"sections": [3, 3]})
    sp = run_op("split", {"X": [x]}, {"sections": [2, -1], "axis": 0})["Out"]
    assert [p.shape[0] for p in sp] == [2, 8]


def test_split_selected_rows_rebases_rows():
    s = SelectedRows(np.array([0, 4, 7, 2, 5]), np.arange(10.0).reshape(5, 2), 8)
    out = run_op("split_selected_rows", {"X": [s]}, {"height_sections": [3, 2, 3]})["Out"]
    assert [o.height for o in out] == [3, 2, 3]
    np.testing.assert_array_equal(out[0].rows, [0, 2])
    np.testing.assert_array_equal(out[1].rows, [1])
    np.testing.assert_array_equal(out[2].rows, [2, 0])
    np.testing.assert_array_equal(out[2].value, [[4, 5], [8, 9]])
    dense = np.concatenate([o.to_dense() for o in out])
    np.testing.assert_array_equal(dense, s.to_dense())


def test_split_ids_merge_ids_round_trip():
    table = np.arange(40.0).reshape(20, 2)
    ids_a = np.array([[7], [3], [7], [12]], np.int64)
    ids_b = np.array([[4], [19], [3]], np.int64)
    shards = run_op("split_ids", {"Ids": [ids_a, ids_b]}, {"_out_counts": {"Out": 3}})["Out"]
    assert len(shards) == 3
    for k, s in enumerate(shards):
        assert (s % 3 == k).all() and s.shape[1] == 1
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)[:, 0]), [3, 4, 7, 12, 19])
    prefetched = [table[s[:, 0]] for s in shards]  # what each pserver sends back
    merged = run_op("merge_ids", {"Ids": [ids_a, ids_b], "Rows": shards, "X": prefetched})
    np.testing.assert_array_equal(merged["Out"][0], table[ids_a[:, 0]])
    np.testing.assert_array_equal(merged["Out"][1], table[ids_b[:, 0]])
    # each output has its own ids' LoD (Paddle's kernel: out->set_lod(out_ids->lod()))
    lods = {"Ids": [((0, 3, 4),), None]}
    merged = run_op("merge_ids", {"Ids": [ids_a, ids_b], "Rows": shards, "X": prefetched},
                    {"_lods": lods})
    assert merged[LOD_KEY] == {"Out": [((0, 3, 4),), None]}
    with pytest.raises(ValueError, match="merge_ids: id 5 is in Ids but in none"):
        run_op("merge_ids", {"Ids": [np.array([[5]])], "Rows": shards, "X": prefetched})
    with pytest.raises(ValueError, match="number of shards is unknown"):
        run_op("split_ids", {"Ids": [ids_a]})


def test_split_ids_on_a_sparse_gradient_merges_rows():
    g = SelectedRows(np.array([4, 1, 4, 2]), np.ones((4, 2)), 10)
    out = run_op("split_ids", {"Ids": [g]}, {"num_shards": 2})["Out"]
    assert all(isinstance(o, SelectedRows) and o.height == 10 for o in out)
    np.testing.assert_array_equal(out[0].rows, [2, 4])
    np.testing.assert_array_equal(out[0].value, [[1, 1], [2, 2]])
    np.testing.assert_array_equal(out[1].rows, [1])


def test_ref_by_trainer_id():
    xs = [np.zeros(2), np.ones(2)]
    out = run_op("ref_by_trainer_id", {"X": xs, "TrainerId": [np.array([1], np.int64)]})
    assert out["Out"][0] is xs[1]


# ---------------------------------------------------------------------------------------------
# random


@pytest.mark.parametrize("op", ["uniform_random", "gaussian_random",
                                "truncated_gaussian_random"])
def test_random_ops_are_deterministic_and_slice_exactly(op):
    attrs = {"shape": [10, 3], "seed": 11, "_out_name": "fc_0.w_0"}
    a = run_op(op, {}, attrs)["Out"][0]
    b = run_op(op, {}, attrs)["Out"][0]
    assert a.dtype == np.float32 and a.shape == (10, 3)
    np.testing.assert_array_equal(a, b)
    other = run_op(op, {}, {**attrs, "_out_name": "fc_1.w_0"})["Out"][0]
    assert not np.array_equal(a, other)
    keyed = run_op(op, {}, {**attrs, "_out_name": "x.block1", "rng_key": "fc_0.w_0"})["Out"][0]
    np.testing.assert_array_equal(keyed, a)
    part = run_op(op, {}, {**attrs, "shape": [4, 3], "full_shape": [10, 3], "row_offset": 6,
                           "_out_name": "fc_0.w_0.block1", "rng_key": "fc_0.w_0"})["Out"][0]
    np.testing.assert_array_equal(part, a[6:10])
    if op == "truncated_gaussian_random":
        assert np.abs(a).max() <= 2.0


def test_random_op_values_and_errors():
    u = run_op("uniform_random", {}, {"shape": [1000], "min": 2.0, "max": 3.0,
                                      "dtype": "float64", "_out_name": "u"})["Out"][0]
    assert u.dtype == np.float64 and 2.0 <= u.min() and u.max() < 3.0
    g = run_op("gaussian_random", {}, {"shape": [4000], "mean": 1.0, "std": 2.0,
                                       "_out_name": "g"})["Out"][0]
    assert abs(g.mean() - 1.0) < 0.15 and abs(g.std() - 2.0) < 0.15
    with pytest.raises(ValueError, match="uniform_random: no rng_key attr and no _out_name"):
        run_op("uniform_random", {}, {"shape": [2]})
    with pytest.raises(ValueError, match="does not fit in full_shape"):
        run_op("uniform_random", {}, {"shape": [4, 3], "full_shape": [5, 3], "row_offset": 3,
                                      "_out_name": "w"})
    z = run_op("fake_init", {}, {"shape": [3, 2]})["Out"][0]
    assert z.shape == (3, 2) and not z.any()


def test_host_ops_are_registered_as_host_ops():
    # the executor or the runtime may already have attached kernels with set_kernel
    for t in ("send", "recv", "send_barrier", "fetch_barrier", "listen_and_serv", "prefetch",
              "gen_nccl_id", "lookup_sparse_table", "save", "checkpoint_notify"):
        d = registry.get(t)
        assert d.host and d.grad is None, t
    # loops and arrays: host ops with gradients (dask_fluid.control_flow_ops)
    for t in ("while", "write_to_array", "read_from_array"):
        d = registry.get(t)
        assert d.host and d.grad is not None, t
    for t in ("while_grad", "while_step_state", "read_from_array_grad", "write_to_array_grad"):
        assert registry.get(t).host, t
    assert registry.get("listen_and_serv").attrs["checkpint_block_id"] == -1


def test_auc_matches_scikit_learn_when_every_score_has_its_own_bucket():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(7)
    # scores on distinct buckets: the bucketed ROC area is then the exact one
    p = (rng.permutation(4000)[:200] + 0.5) / 4095
    label = (rng.random(200) < p).astype(np.int64).reshape(-1, 1)
    predict = np.stack([1 - p, p], axis=1).astype(np.float32)
    t = 4095
    zeros = np.zeros((1, t + 1), np.int64)
    res = run_op("auc", {"Predict": [predict], "Label": [label], "StatPos": [zeros],
                         "StatNeg": [zeros]}, {"slide_steps": 0})
    assert res["AUC"][0].dtype == np.float64 and res["AUC"][0].shape == (1,)
    np.testing.assert_allclose(res["AUC"][0][0], roc_auc_score(label[:, 0], p), rtol=1e-6)
    assert res["StatPosOut"][0].sum() == label.sum() and res["StatNegOut"][0].shape == (1, t + 1)


def test_auc_over_a_sliding_window_of_batches():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(8)
    t, steps = 999, 2
    batches = []
    for _ in range(4):
        p = (rng.permutation(1000)[:50] + 0.5) / 1000
        batches.append((np.stack([1 - p, p], 1), (rng.random(50) < p).astype(np.int64)))
    state = [np.zeros((1 + steps) * (t + 1) + 1, np.int64) for _ in range(2)]
    for i, (predict, label) in enumerate(batches):
        res = run_op("auc", {"Predict": [predict], "Label": [label[:, None]],
                             "StatPos": [state[0]], "StatNeg": [state[1]]},
                     {"num_thresholds": t, "slide_steps": steps})
        state = [res["StatPosOut"][0], res["StatNegOut"][0]]
        window = batches[max(0, i - steps + 1):i + 1]
        scores = np.concatenate([b[0][:, 1] for b in window])
        labels = np.concatenate([b[1] for b in window])
        np.testing.assert_allclose(res["AUC"][0][0], roc_auc_score(labels, scores), rtol=1e-6)
    assert state[0][-1] == 4  # the batch counter
    with pytest.raises(ValueError, match=r"auc: predictions must be probabilities in \[0, 1\]"):
        run_op("auc", {"Predict": [np.array([[1.5]])], "Label": [np.array([[1]])],
                       "StatPos": [np.zeros((1, t + 1), np.int64)],
                       "StatNeg": [np.zeros((1, t + 1), np.int64)]},
               {"num_thresholds": t, "slide_steps": 0})


def test_reductions_against_numpy():
    x = np.random.default_rng(4).standard_normal((2, 3, 4))
    for op, fn in (("reduce_max", np.max), ("reduce_min", np.min), ("reduce_prod", np.prod)):
        np.testing.assert_allclose(run_op(op, {"X": [x]}, {"dim": [1]})["Out"][0],
                                   fn(x, axis=1))
        np.testing.assert_allclose(run_op(op, {"X": [x]}, {"dim": [0, -1], "keep_dim": True})
                                   ["Out"][0], fn(x, axis=(0, 2), keepdims=True))
        assert run_op(op, {"X": [x]}, {"reduce_all": True})["Out"][0].shape == (1,)
    b = x > 0
    np.testing.assert_array_equal(run_op("reduce_all", {"X": [b]}, {"dim": [2]})["Out"][0],
                                  b.all(axis=2))
    np.testing.assert_array_equal(run_op("reduce_any", {"X": [b]}, {"reduce_all": True})
                                  ["Out"][0], [b.any()])
    with pytest.raises(TypeError, match="X must be bool"):
        run_op("reduce_any", {"X": [x]})
    # every tie of the maximum gets the whole gradient, as Fluid's (X == Out) * dOut
    ties = np.array([[1.0, 3.0, 3.0]])
    out = run_op("reduce_max", {"X": [ties]}, {"dim": [1]})["Out"][0]
    g = run_op("reduce_max_grad", {"X": [ties], "Out": [out], "Out@GRAD": [np.ones(1)]},
               {"dim": [1]})["X@GRAD"][0]
    np.testing.assert_array_equal(g, [[0.0, 1.0, 1.0]])


def test_flatten_shape_logical_and_integer_elementwise_against_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    res = run_op("flatten2", {"X": [x]}, {"axis": 2})
    np.testing.assert_array_equal(res["Out"][0], x.reshape(6, 4))
    assert res["XShape"][0].shape == (0, 2, 3, 4)
    assert run_op("flatten2", {"X": [x]}, {"axis": 0})["Out"][0].shape == (1, 24)
    assert run_op("flatten2", {"X": [x]}, {"axis": 3})["Out"][0].shape == (24, 1)
    with pytest.raises(ValueError, match=r"axis must be in \[0, 3\]"):
        run_op("flatten2", {"X": [x]}, {"axis": 4})
    out = run_op("shape", {"Input": [x]})["Out"][0]
    assert out.dtype == np.int32 and out.tolist() == [2, 3, 4]
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(run_op("logical_or", {"X": [a], "Y": [b]})["Out"][0], a | b)
    np.testing.assert_array_equal(run_op("logical_xor", {"X": [a], "Y": [b]})["Out"][0], a ^ b)
    xi, yi = np.array([7, -7, 7, -7, 6]), np.array([2, 2, -2, -2, 3])
    # Fluid 1.8: mod takes the divisor's sign (Python's %); floordiv truncates
    np.testing.assert_array_equal(
        run_op("elementwise_mod", {"X": [xi], "Y": [yi]})["Out"][0], [1, 1, -1, -1, 0])
    np.testing.assert_array_equal(
        run_op("elementwise_floordiv", {"X": [xi], "Y": [yi]})["Out"][0], [3, -3, -3, 3, 2])
    np.testing.assert_array_equal(
        run_op("elementwise_floordiv", {"X": [xi * 1.0], "Y": [yi * 1.0]})["Out"][0],
        [3, -3, -3, 3, 2])
    with pytest.raises(ZeroDivisionError, match="Integer division by zero"):
        run_op("elementwise_floordiv", {"X": [xi], "Y": [np.zeros(5, int)]})
    v = np.array([[3.0, 4.0], [0.0, 2.0]])
    normed = run_op("norm", {"X": [v]}, {"axis": 1, "epsilon": 0.0})
    np.testing.assert_allclose(normed["Out"][0], [[0.6, 0.8], [0.0, 1.0]])
    np.testing.assert_allclose(normed["Norm"][0], [[5.0], [2.0]])


def test_more_activations_against_their_formulas():
    x = np.linspace(-8, 8, 33)
    checks = {
        "selu": ({}, 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 *
                                                   (np.exp(x) - 1))),
        "hard_swish": ({}, x * np.clip(x + 3, 0, 6) / 6),
        "brelu": ({"t_min": -1.0, "t_max": 5.0}, np.clip(x, -1, 5)),
        "soft_relu": ({"threshold": 4.0}, np.log(1 + np.exp(np.clip(x, -4, 4)))),
        "stanh": ({}, 1.7159 * np.tanh(0.67 * x)),
    }
    for op, (attrs, want) in checks.items():
        np.testing.assert_allclose(run_op(op, {"X": [x]}, attrs)["Out"][0], want, rtol=1e-12,
                                   err_msg=op)


def test_losses_and_prelu_against_their_formulas():
    p, y = np.array([[0.2], [0.9]]), np.array([[0.0], [1.0]])
    np.testing.assert_allclose(run_op("log_loss", {"Predicted": [p], "Labels": [y]})["Loss"][0],
                               [[-np.log(0.8 + 1e-4)], [-np.log(0.9 + 1e-4)]])
    x, t = np.array([0.0, 0.0, 0.0]), np.array([0.5, -2.0, 3.0])
    res = run_op("huber_loss", {"X": [x], "Y": [t]}, {"delta": 1.0})
    np.testing.assert_allclose(res["Out"][0], [0.125, 1.5, 2.5])
    np.testing.assert_array_equal(res["Residual"][0], t)
    v = np.array([[[-2.0, 1.0]], [[3.0, -4.0]]])  # [N=2, C=1, 2]
    np.testing.assert_allclose(run_op("prelu", {"X": [v], "Alpha": [np.array([0.5])]},
                                      {"mode": "all"})["Out"][0],
                               np.where(v > 0, v, 0.5 * v))
    alpha = np.array([[[0.1, 0.2]]])
    np.testing.assert_allclose(run_op("prelu", {"X": [v], "Alpha": [alpha]},
                                      {"mode": "element"})["Out"][0],
                               np.where(v > 0, v, alpha * v))
    with pytest.raises(ValueError, match="mode must be 'all', 'channel' or 'element'"):
        run_op("prelu", {"X": [v], "Alpha": [alpha]}, {"mode": "row"})


def test_unstack_expand_as_where_scatter_kldiv_against_numpy():
    x = np.arange(24.0).reshape(2, 3, 4)
    parts = run_op("unstack", {"X": [x]}, {"axis": 1, "num": 3})["Y"]
    assert len(parts) == 3 and all(np.array_equal(p, x[:, i]) for i, p in enumerate(parts))
    small = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(
        run_op("expand_as", {"X": [small], "target_tensor": [np.zeros((4, 6))]})["Out"][0],
        np.tile(small, (2, 2)))
    with pytest.raises(ValueError, match="must be a multiple of X's"):
        run_op("expand_as", {"X": [small], "target_tensor": [np.zeros((3, 6))]})
    cond = np.array([[True, False], [False, True]])
    np.testing.assert_array_equal(run_op("where_index", {"Condition": [cond]})["Out"][0],
                                  [[0, 0], [1, 1]])
    base, ids, upd = np.zeros((4, 2)), np.array([1, 3, 1]), np.array([[1.0] * 2, [2.0] * 2,
                                                                       [5.0] * 2])
    over = run_op("scatter", {"X": [base], "Ids": [ids], "Updates": [upd]})["Out"][0]
    np.testing.assert_array_equal(over, [[0, 0], [5, 5], [0, 0], [2, 2]])  # last id wins
    acc = run_op("scatter", {"X": [base + 9], "Ids": [ids], "Updates": [upd]},
                 {"overwrite": False})["Out"][0]
    np.testing.assert_array_equal(acc, [[9, 9], [6, 6], [9, 9], [2, 2]])  # zeroed, summed
    with pytest.raises(ValueError, match=r"Ids must be in \[0, 4\)"):
        run_op("scatter", {"X": [base], "Ids": [np.array([4])], "Updates": [upd[:1]]})
    lx, t = np.log(np.array([[0.2, 0.8], [0.5, 0.5]])), np.array([[0.0, 1.0], [0.5, 0.5]])
    pointwise = np.where(t > 0, t * (np.log(np.where(t > 0, t, 1)) - lx), 0)
    for r, want in (("none", pointwise), ("sum", [pointwise.sum()]),
                    ("mean", [pointwise.mean()]), ("batchmean", [pointwise.sum() / 2])):
        np.testing.assert_allclose(run_op("kldiv_loss", {"X": [lx], "Target": [t]},
                                          {"reduction": r})["Loss"][0], want, err_msg=r)


def test_pad_pad2d_smooth_l1_against_numpy():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(
        run_op("pad", {"X": [x]}, {"paddings": [1, 0, 0, 2], "pad_value": -1.0})["Out"][0],
        np.pad(x, ((1, 0), (0, 2)), constant_values=-1.0))
    img = np.arange(24.0).reshape(1, 2, 3, 4)
    for mode in ("constant", "reflect", "edge"):
        got = run_op("pad2d", {"X": [img]}, {"paddings": [1, 2, 2, 1], "mode": mode,
                                             "pad_value": 7.0})["Out"][0]
        kw = {"constant_values": 7.0} if mode == "constant" else {}
        np.testing.assert_array_equal(got, np.pad(img, ((0, 0), (0, 0), (1, 2), (2, 1)),
                                                  mode=mode, **kw), err_msg=mode)
    nhwc = img.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(
        run_op("pad2d", {"X": [nhwc]}, {"paddings": [1, 0, 0, 1], "mode": "edge",
                                        "data_format": "NHWC"})["Out"][0],
        np.pad(nhwc, ((0, 0), (1, 0), (0, 1), (0, 0)), mode="edge"))
    with pytest.raises(ValueError, match="reflect padding must be smaller than the dim"):
        run_op("pad2d", {"X": [img]}, {"paddings": [3, 0, 0, 0], "mode": "reflect"})
    a, b = np.array([[0.5, -3.0], [1.5, 0.0]]), np.zeros((2, 2))
    res = run_op("smooth_l1_loss", {"X": [a], "Y": [b]}, {"sigma": 1.0})
    per = np.where(np.abs(a) < 1, 0.5 * a * a, np.abs(a) - 0.5)
    np.testing.assert_allclose(res["Out"][0], per.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(res["Diff"][0], a)


def test_group_norm_gather_nd_pixel_shuffle_maxout_against_loops():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 3, 2))
    scale, bias = rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)
    want = np.empty_like(x)
    for i in range(2):
        for g in range(3):
            block = x[i, 2 * g:2 * g + 2]
            normed = (block - block.mean()) / np.sqrt(block.var() + 1e-5)
            for k in range(2):
                want[i, 2 * g + k] = normed[k] * scale[2 * g + k] + bias[2 * g + k]
    res = run_op("group_norm", {"X": [x], "Scale": [scale], "Bias": [bias]}, {"groups": 3})
    np.testing.assert_allclose(res["Y"][0], want, rtol=1e-10)
    assert res["Mean"][0].shape == res["Variance"][0].shape == (2, 3)
    nhwc = run_op("group_norm", {"X": [x.transpose(0, 2, 3, 1)], "Scale": [scale],
                                 "Bias": [bias]}, {"groups": 3, "data_layout": "NHWC"})
    np.testing.assert_allclose(nhwc["Y"][0], want.transpose(0, 2, 3, 1), rtol=1e-10)
    with pytest.raises(ValueError, match="groups \\(4\\) must divide the 6 channels"):
        run_op("group_norm", {"X": [x]}, {"groups": 4})

    table = rng.standard_normal((4, 3, 2))
    index = np.array([[[0, 2], [3, 1]], [[0, 2], [2, 0]]])
    got = run_op("gather_nd", {"X": [table], "Index": [index]}, {})["Out"][0]
    assert got.shape == (2, 2, 2)
    for a in range(2):
        for b in range(2):
            np.testing.assert_array_equal(got[a, b], table[index[a, b, 0], index[a, b, 1]])
    with pytest.raises(ValueError, match="Index\\[..., 1\\] must be in \\[0, 3\\)"):
        run_op("gather_nd", {"X": [table], "Index": [np.array([[0, 3]])]}, {})

    img = rng.standard_normal((2, 8, 2, 3))
    got = run_op("pixel_shuffle", {"X": [img]}, {"upscale_factor": 2})["Out"][0]
    assert got.shape == (2, 2, 4, 6)
    for c in range(2):
        for h in range(4):
            for w in range(6):
                np.testing.assert_array_equal(
                    got[:, c, h, w], img[:, c * 4 + (h % 2) * 2 + w % 2, h // 2, w // 2])

    feat = rng.standard_normal((2, 6, 2, 2))
    got = run_op("maxout", {"X": [feat]}, {"groups": 3})["Out"][0]
    for c in range(2):
        np.testing.assert_array_equal(got[:, c], feat[:, 3 * c:3 * c + 3].max(axis=1))
    tie = np.ones((1, 2, 1, 1))
    dx = run_op("maxout_grad", {"X": [tie], "Out": [np.ones((1, 1, 1, 1))],
                                "Out@GRAD": [np.full((1, 1, 1, 1), 5.0)]},
                {"groups": 2})["X@GRAD"][0]
    np.testing.assert_array_equal(dx.ravel(), [5.0, 0.0])  # a tie: the first maximum only
    # Fluid 1.8's MaxOutOp::InferShape: X is 4-D and groups > 1
    with pytest.raises(ValueError, match=r"X must be 4-D .* got shape \[2, 6\]"):
        run_op("maxout", {"X": [np.ones((2, 6))]}, {"groups": 3})
    with pytest.raises(ValueError, match=r"groups \(1\) must be larger than 1"):
        run_op("maxout", {"X": [feat]}, {"groups": 1})


def test_integer_elementwise_div_truncates_as_cpp_and_refuses_zero():
    # Fluid's DivFunctor on int tensors is C++ integer division (test_elementwise_div_op's
    # TestElementwiseDivOp_INT), not a float quotient
    x, y = np.array([7, -7, 6, 1], np.int32), np.array([2, 2, -4, 3], np.int32)
    out = run_op("elementwise_div", {"X": [x], "Y": [y]})["Out"][0]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [3, -3, -1, 0])
    with pytest.raises(ZeroDivisionError, match="elementwise_div: Integer division by zero"):
        run_op("elementwise_div", {"X": [x], "Y": [np.zeros(4, np.int32)]})


def test_elementwise_grads_keep_the_variables_dtype():
    # test_elementwise_pow_op's TestElementwisePowGradOpInt: dY = dOut·log(X)·X^Y, truncated
    x, y = np.array([1, 3, 6]), np.array([1, 1, 1])
    g = run_op("elementwise_pow_grad", {"X": [x], "Y": [y], "Out": [x ** y],
                                        "Out@GRAD": [np.ones(3, x.dtype)]})
    assert g["Y@GRAD"][0].dtype == y.dtype
    np.testing.assert_array_equal(g["Y@GRAD"][0], [0, 3, 10])
    np.testing.assert_array_equal(g["X@GRAD"][0], [1, 1, 1])


@pytest.mark.parametrize("op, fn", [("reduce_sum", np.sum), ("reduce_mean", np.mean),
                                    ("reduce_max", np.max), ("reduce_prod", np.prod)])
def test_reduce_out_dtype_casts_x_before_reducing(op, fn):
    # Fluid's ReduceKernel with out_dtype >= 0 (a code, as int(VarType.FP64), or a name)
    x = np.random.default_rng(0).uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    for out_dtype in (6, "float64"):
        out = run_op(op, {"X": [x]}, {"dim": [1], "out_dtype": out_dtype})["Out"][0]
        assert out.dtype == np.float64
        np.testing.assert_allclose(out, fn(x.astype(np.float64), axis=1), rtol=1e-12)
    assert run_op(op, {"X": [x]}, {"dim": [1]})["Out"][0].dtype == np.float32
    g = run_op(op + "_grad", {"X": [x], "Out": [fn(x.astype(np.float64), axis=1)],
                              "Out@GRAD": [np.ones(3)]},
               {"dim": [1], "out_dtype": 6})["X@GRAD"][0]
    assert g.dtype == np.float32 and g.shape == x.shape
