"""Fluid 1.8 op features that Paddle 1.8's own op tests exercise: fill_constant's
``ShapeTensorList`` / ``ShapeTensor`` / ``ValueTensor`` / ``str_value`` (and the layer's
Variable shapes and values), bicubic_interp computed in the kernel's dtype, data_norm's
``enable_scale_and_shift`` (``scale_w``, ``bias``) and pow's ``FactorTensor``.

References are plain numpy (``np.full``, loops over Paddle's bicubic taps, a per-column
affine); gradients are checked against central differences with the machinery of
``test_grad_check``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.layer_helper import LayerHelper
from tests.programs import run_program

from . import run_op
from .test_grad_check import TOL, analytic_grads, forward, max_rel_err, numeric_grad

I32, I64 = np.int32, np.int64




def grad_check_slots(op_type: str, ins: dict, attrs: dict, slots: list[str]) -> None:
    """Central differences against the grad op for the float inputs in ``slots`` only (the
    other inputs may get non-derivative "gradients", as data_norm's statistics do)."""
    ins = {s: [a.copy() for a in v] for s, v in ins.items()}
    op, env = forward(op_type, ins, attrs)
    rng = np.random.default_rng(1)
    seeds = {n: rng.standard_normal(env[n].shape) for n in op.outputs["Y" if "Y" in op.outputs
                                                                      else "Out"]}
    grads = analytic_grads(op, env, seeds)
    for slot in slots:
        name = op.inputs[slot][0]
        err = max_rel_err(grads[name], numeric_grad(op, ins, attrs, seeds, slot, 0))
        assert err <= TOL, f"{op_type} d{slot}: max rel err {err:.2e}"


# ---------------------------------------------------------------------------------------------
# fill_constant: the op


def test_fill_constant_shape_tensor_list_int32_and_int64():
    out = run_op("fill_constant", {"ShapeTensorList": [np.array([3], I32), np.array([2], I64)]},
                 {"shape": [-1, -1], "value": 1.5})["Out"][0]
    np.testing.assert_array_equal(out, np.full((3, 2), 1.5, np.float32))
    assert out.dtype == np.float32


def test_fill_constant_shape_tensor_wins_over_list_and_attr():
    ins = {"ShapeTensor": [np.array([2, 4], I32)], "ShapeTensorList": [np.array([5], I32)]}
    out = run_op("fill_constant", ins, {"shape": [7], "value": 2.0})["Out"][0]
    assert out.shape == (2, 4)
    out = run_op("fill_constant", {"ShapeTensorList": [np.array([5], I32)]},
                 {"shape": [7], "value": 2.0})["Out"][0]
    assert out.shape == (5,)


def test_fill_constant_shape_tensor_list_items_must_be_one_int():
    with pytest.raises(ValueError, match=r"shape \[1\]"):
        run_op("fill_constant", {"ShapeTensorList": [np.array([3, 2], I32)]}, {"shape": [-1]})
    with pytest.raises(TypeError, match="int32 or int64"):
        run_op("fill_constant", {"ShapeTensorList": [np.array([3.0], np.float32)]},
               {"shape": [-1]})


def test_fill_constant_str_value_keeps_int64_and_float64_precision():
    big = 2 ** 53 + 1  # not a float64: the float attr alone would give 2**53
    out = run_op("fill_constant", {}, {"shape": [2], "dtype": "int64", "value": float(big),
                                       "str_value": str(big)})["Out"][0]
    np.testing.assert_array_equal(out, np.full(2, big, I64))
    out = run_op("fill_constant", {}, {"shape": [1], "dtype": "float64", "value": 0.0,
                                       "str_value": "0.1"})["Out"][0]
    assert out[0] == 0.1


def test_fill_constant_value_tensor_wins_and_holds_one_value():
    ins = {"ValueTensor": [np.array([3.0], np.float32)], "ShapeTensor": [np.array([2], I32)]}
    out = run_op("fill_constant", ins, {"value": 9.0, "str_value": "9.0"})["Out"][0]
    np.testing.assert_array_equal(out, np.full(2, 3.0, np.float32))
    with pytest.raises(ValueError, match="1 element"):
        run_op("fill_constant", {"ValueTensor": [np.array([1.0, 2.0], np.float32)]},
               {"shape": [2]})


# ---------------------------------------------------------------------------------------------
# fill_constant: the layer


def test_fill_constant_layer_variable_shapes_and_value():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        two32 = fluid.layers.fill_constant([1], "int32", 2)
        two64 = fluid.layers.fill_constant([1], "int64", 2)
        shape32 = fluid.data(name="s32", shape=[2], dtype="int32")
        shape64 = fluid.data(name="s64", shape=[2], dtype="int64")
        outs = [fluid.layers.fill_constant(shape=[1, two32], dtype="float32", value=1.1),
                fluid.layers.fill_constant(shape=(1, two64), dtype="float32", value=1.1),
                fluid.layers.fill_constant(shape=shape32, dtype="float32", value=1.1),
                fluid.layers.fill_constant(shape=shape64, dtype="float64", value=1.1)]
        val = fluid.layers.fill_constant([1], "float32", 1.1)
        outs.append(fluid.layers.fill_constant(shape=shape64, dtype="float32", value=val))
        big = fluid.layers.fill_constant([1], "int64", 2 ** 53 + 1)
    op_types = [op.type for op in main.global_block().ops]
    assert op_types.count("cast") == 3  # each use of an int64 shape Variable: to int32
    listed = [op for op in main.global_block().ops
              if op.type == "fill_constant" and op.input("ShapeTensorList")]
    assert [op.attr("shape") for op in listed] == [[1, -1], [1, -1]]
    assert outs[0].shape in ((1, -1), [1, -1])
    assert all(o.stop_gradient for o in outs)
    feed = {"s32": np.array([1, 2], I32), "s64": np.array([1, 2], I64)}
    res = run_program(main, startup, feed, [*outs, big])
    for r, dtype in zip(res[:5], ("float32", "float32", "float32", "float64", "float32"),
                        strict=True):
        np.testing.assert_array_equal(r, np.full((1, 2), 1.1, dtype))
    assert res[3][0, 0] == 1.1  # float64 1.1, not float32's 1.100000023841858
    assert int(res[5][0]) == 2 ** 53 + 1


def test_fill_constant_layer_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x2 = fluid.data(name="x2", shape=[1], dtype="int32")
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=1, dtype="float32", value=1)
        with pytest.raises(AssertionError):
            fluid.layers.fill_constant(shape=[], dtype="float32", value=1)
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=[1], dtype="uint8", value=5)
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=[1], dtype="float64", value=5, out=x2)
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=[100], dtype="float64", value=5,
                                       out=np.zeros(100, I32))
        shape = fluid.data(name="shape_f", shape=[2], dtype="float32")
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=shape, dtype="float32", value=1)
        item = fluid.data(name="item_b", shape=[1], dtype="bool")
        with pytest.raises(TypeError):
            fluid.layers.fill_constant(shape=[item, 2], dtype="float32", value=1)


# ---------------------------------------------------------------------------------------------
# bicubic_interp: the kernel's dtype


def _keys(t: float, a: float = -0.75) -> list[float]:
    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic_ref(x: np.ndarray, oh: int, ow: int, align_corners: bool) -> np.ndarray:
    """Paddle's BicubicInterpolation<double> element by element: the position is the float
    ratio·k (or the double ratio·(k + 0.5) − 0.5), the tap floorf of it, the rest double."""
    n, c, ih, iw = x.shape

    def pos(n_in, n_out, k):
        if n_out <= 1:
            ratio = np.float32(0)
        elif align_corners:
            ratio = np.float32(n_in - 1) / np.float32(n_out - 1)
        else:
            ratio = np.float32(n_in) / np.float32(n_out)
        p = float(ratio * np.float32(k)) if align_corners else float(ratio) * (k + 0.5) - 0.5
        base = math.floor(np.float32(p))
        return base, p - base

    out = np.zeros((n, c, oh, ow))
    for k in range(oh):
        y0, yt = pos(ih, oh, k)
        for ll in range(ow):
            x0, xt = pos(iw, ow, ll)
            rows = []
            for ii in range(4):
                yy = min(max(y0 - 1 + ii, 0), ih - 1)
                taps = [x[:, :, yy, min(max(x0 - 1 + j, 0), iw - 1)] for j in range(4)]
                rows.append(sum(v * w for v, w in zip(taps, _keys(xt), strict=True)))
            out[:, :, k, ll] = sum(v * w for v, w in zip(rows, _keys(yt), strict=True))
    return out


@pytest.mark.parametrize("align_corners, shape, oh, ow", [
    (True, (2, 3, 9, 6), 10, 8), (False, (2, 2, 5, 7), 12, 4), (True, (1, 2, 4, 4), 7, 3)])
def test_bicubic_float64_carries_no_float32_rounding(align_corners, shape, oh, ow):
    x = np.random.default_rng(0).random(shape)
    out = run_op("bicubic_interp", {"X": [x]}, {"interp_method": "bicubic", "out_h": oh,
                                                "out_w": ow,
                                                "align_corners": align_corners})["Out"][0]
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, _bicubic_ref(x, oh, ow, align_corners), rtol=0,
                               atol=1e-13)


def test_bicubic_float32_stays_close_to_the_double_reference():
    x = np.random.default_rng(1).random((1, 2, 6, 5)).astype(np.float32)
    out = run_op("bicubic_interp", {"X": [x]}, {"interp_method": "bicubic", "out_h": 9,
                                                "out_w": 7, "align_corners": False})["Out"][0]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, _bicubic_ref(x.astype(np.float64), 9, 7, False),
                               atol=2e-6)


# ---------------------------------------------------------------------------------------------
# data_norm(enable_scale_and_shift)


def _dn_inputs(rng, x: np.ndarray) -> dict:
    c = x.shape[1]
    return {"X": [x], "BatchSize": [rng.uniform(50, 100, c)],
            "BatchSum": [rng.uniform(-5, 5, c)], "BatchSquareSum": [rng.uniform(50, 100, c)],
            "scale_w": [rng.uniform(0.5, 2.0, c)], "bias": [rng.standard_normal(c)]}


def _dn_ref(ins: dict, slot_dim: int) -> np.ndarray:
    x = ins["X"][0]
    mean = ins["BatchSum"][0] / ins["BatchSize"][0]
    scale = np.sqrt(ins["BatchSize"][0] / ins["BatchSquareSum"][0])
    y = np.empty_like(x)
    for r in range(x.shape[0]):
        for j in range(x.shape[1]):
            show = x[r, j - j % slot_dim] if slot_dim > 0 else 1.0
            y[r, j] = 0.0 if abs(show) < 1e-7 else (
                (x[r, j] - mean[j]) * scale[j] * ins["scale_w"][0][j] + ins["bias"][0][j])
    return y


@pytest.mark.parametrize("slot_dim", [-1, 2])
def test_data_norm_scale_and_shift_forward(slot_dim):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6))
    x[1, 2] = 0.0  # an empty slot (show 0) when slot_dim = 2: Y 0 there
    ins = _dn_inputs(rng, x)
    res = run_op("data_norm", ins, {"enable_scale_and_shift": True, "slot_dim": slot_dim})
    np.testing.assert_allclose(res["Y"][0], _dn_ref(ins, slot_dim), rtol=1e-12, atol=1e-12)
    if slot_dim > 0:
        np.testing.assert_array_equal(res["Y"][0][1, 2:4], 0.0)
    # without the flag scale_w and bias are not read
    plain = run_op("data_norm", ins, {"slot_dim": slot_dim})["Y"][0]
    ins1 = {**ins, "scale_w": [np.ones(6)], "bias": [np.zeros(6)]}
    np.testing.assert_allclose(plain, _dn_ref(ins1, slot_dim), rtol=1e-12, atol=1e-12)


def test_data_norm_scale_and_shift_needs_both_inputs():
    rng = np.random.default_rng(3)
    ins = _dn_inputs(rng, rng.standard_normal((2, 3)))
    del ins["bias"]
    with pytest.raises(ValueError, match="bias"):
        run_op("data_norm", ins, {"enable_scale_and_shift": True})


@pytest.mark.parametrize("slot_dim", [-1, 2])
def test_data_norm_scale_and_shift_grads(slot_dim):
    rng = np.random.default_rng(4)
    x = rng.uniform(0.5, 2.0, (3, 4))
    grad_check_slots("data_norm", _dn_inputs(rng, x),
                     {"enable_scale_and_shift": True, "slot_dim": slot_dim},
                     ["X", "scale_w", "bias"])


def test_data_norm_scale_and_shift_grads_skip_empty_slots():
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 2.0, (3, 4))
    x[0, 0] = 0.0  # row 0's first slot is empty: no gradient flows through it
    ins = _dn_inputs(rng, x)
    op, env = forward("data_norm", ins, {"enable_scale_and_shift": True, "slot_dim": 2})
    dy = np.ones((3, 4))
    grads = analytic_grads(op, env, {op.outputs["Y"][0]: dy})
    dx = grads[op.inputs["X"][0]]
    np.testing.assert_array_equal(dx[0, :2], 0.0)
    np.testing.assert_array_equal(grads[op.inputs["bias"][0]], [2, 2, 3, 3])


# ---------------------------------------------------------------------------------------------
# pow(FactorTensor)


def test_pow_factor_tensor_wins_over_the_attr():
    x = np.random.default_rng(6).uniform(1, 2, (3, 5))
    out = run_op("pow", {"X": [x], "FactorTensor": [np.array([3.0], np.float32)]},
                 {"factor": 7.0})["Out"][0]
    np.testing.assert_allclose(out, x ** 3, rtol=1e-14)
    with pytest.raises(ValueError, match=r"\[1\]"):
        run_op("pow", {"X": [x], "FactorTensor": [np.array([2.0, 3.0], np.float32)]})


def test_pow_factor_tensor_grad():
    x = np.random.default_rng(7).uniform(0.5, 2.0, (3, 4))
    grad_check_slots("pow", {"X": [x], "FactorTensor": [np.array([2.5], np.float32)]},
                     {"factor": 1.0}, ["X"])


def test_pow_factor_tensor_in_a_program_with_backward():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[3, 4], dtype="float32")
        x.stop_gradient = False
        factor = fluid.layers.fill_constant([1], "float32", 3.0)
        helper = LayerHelper("pow")  # the op as Fluid 1.8's pow(x, factor=Variable) builds it
        out = helper.create_tmp(dtype="float32", shape=[3, 4])
        helper.append_op("pow", inputs={"X": [x], "FactorTensor": [factor]},
                         outputs={"Out": [out]}, attrs={})
        loss = fluid.layers.reduce_sum(out)
        dx = fluid.gradients([loss], [x])[0]
    xv = np.random.default_rng(8).uniform(1, 2, (3, 4)).astype(np.float32)
    res_out, res_dx = run_program(main, startup, {"x": xv}, [out, dx])
    np.testing.assert_allclose(res_out, xv ** 3, rtol=1e-6)
    np.testing.assert_allclose(res_dx, 3 * xv ** 2, rtol=1e-6)


def test_pow_layer_takes_a_factor_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[3, 4], dtype="float32")
        factor = fluid.layers.fill_constant([1], "float32", 3.0)
        out = fluid.layers.pow(x, factor=factor)
        with pytest.raises(TypeError, match="'factor' in pow must be float32"):
            fluid.layers.pow(x, factor=fluid.layers.fill_constant([1], "int32", 3))
    op = next(o for o in main.global_block().ops if o.type == "pow")
    assert op.input("FactorTensor") == [factor.name]  # the attr keeps its default, unread
    assert factor.stop_gradient
    xv = np.random.default_rng(9).uniform(1, 2, (3, 4)).astype(np.float32)
    (got,) = run_program(main, startup, {"x": xv}, [out])
    np.testing.assert_allclose(got, xv ** 3, rtol=1e-6)


def test_data_norm_layer_enable_scale_and_shift_makes_fluids_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[-1, 4], dtype="float32")
        y = fluid.layers.data_norm(x, name="dn", enable_scale_and_shift=True,
                                   param_attr={"scale_w": 2.0, "bias": 0.5})
    op = next(o for o in main.global_block().ops if o.type == "data_norm")
    assert op.input("scale_w") == ["dn.scale_w"] and op.input("bias") == ["dn.bias"]
    assert op.attr("enable_scale_and_shift") is True
    xv = np.random.default_rng(10).standard_normal((5, 4)).astype(np.float32)
    (got,) = run_program(main, startup, {"x": xv}, [y])
    # fresh statistics: mean 0, scale sqrt(1e4 / 1e4) = 1; then · 2 + 0.5
    np.testing.assert_allclose(got, xv * 2.0 + 0.5, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# positive_negative_pair, precision_recall


def _pnp_ref(score, label, query, weight, column, start=(0.0, 0.0, 0.0)):
    pos, neg, neu = start
    n = len(label)
    for i in range(n):
        for j in range(i + 1, n):
            if query[i] != query[j] or label[i] == label[j]:
                continue
            w = (weight[i] + weight[j]) / 2
            si, sj = score[i, column], score[j, column]
            if si == sj:
                neu += w
                neg += w  # Fluid counts a tie as negative too
            elif (si - sj) * (label[i] - label[j]) > 0:
                pos += w
            else:
                neg += w
    return pos, neg, neu


def test_positive_negative_pair_counts_pairs_within_queries():
    rng = np.random.default_rng(9)
    n = 30
    score = rng.integers(0, 4, (n, 3)).astype(np.float64)  # ties on purpose
    label = rng.integers(0, 3, (n, 1)).astype(np.float64)
    query = rng.integers(0, 5, (n, 1)).astype(I64)
    weight = rng.uniform(0.5, 2, (n, 1))
    res = run_op("positive_negative_pair",
                 {"Score": [score], "Label": [label], "QueryID": [query], "Weight": [weight]},
                 {"column": -1})
    want = _pnp_ref(score, label[:, 0], query[:, 0], weight[:, 0], 2)
    got = [res[s][0] for s in ("PositivePair", "NegativePair", "NeutralPair")]
    assert all(g.shape == (1,) and g.dtype == np.float64 for g in got)
    np.testing.assert_allclose([g[0] for g in got], want, rtol=1e-12)
    assert want[2] > 0  # the case has ties


def test_positive_negative_pair_accumulates_and_checks_inputs():
    rng = np.random.default_rng(10)
    score = rng.random((8, 1)).astype(np.float32)
    label = rng.integers(0, 2, (8, 1)).astype(np.float32)
    query = np.zeros((8, 1), I64)
    acc = {s: [np.array([v], np.float32)] for s, v in zip(
        ("AccumulatePositivePair", "AccumulateNegativePair", "AccumulateNeutralPair"),
        (1.0, 2.0, 3.0), strict=True)}
    res = run_op("positive_negative_pair",
                 {"Score": [score], "Label": [label], "QueryID": [query], **acc})
    want = _pnp_ref(score, label[:, 0], query[:, 0], np.ones(8), 0, (1.0, 2.0, 3.0))
    np.testing.assert_allclose([res["PositivePair"][0][0], res["NegativePair"][0][0],
                                res["NeutralPair"][0][0]], want, rtol=1e-6)
    assert res["PositivePair"][0].dtype == np.float32
    with pytest.raises(ValueError, match="required"):
        run_op("positive_negative_pair", {"Score": [score], "Label": [label],
                                          "QueryID": [query],
                                          "AccumulatePositivePair": [np.ones(1, np.float32)]})
    with pytest.raises(ValueError, match="column"):
        run_op("positive_negative_pair", {"Score": [score], "Label": [label],
                                          "QueryID": [query]}, {"column": 1})


def _pr_ref(idx, lab, w, cls_num, prior=None):
    st = np.zeros((cls_num, 4))
    for p, t, wi in zip(idx, lab, w, strict=True):
        for k in range(cls_num):
            if k == p == t:
                st[k, 0] += wi
            elif k == p:
                st[k, 1] += wi
            elif k == t:
                st[k, 3] += wi
            else:
                st[k, 2] += wi

    def metrics(s):
        def ratio(a, b):
            return a / (a + b) if a + b > 0 else 1.0

        def f1(p, r):
            return 2 * p * r / (p + r) if p + r > 0 else 0.0

        mp = np.mean([ratio(s[k, 0], s[k, 1]) for k in range(cls_num)])
        mr = np.mean([ratio(s[k, 0], s[k, 3]) for k in range(cls_num)])
        tp, fp, fn = s[:, 0].sum(), s[:, 1].sum(), s[:, 3].sum()
        return [mp, mr, f1(mp, mr), ratio(tp, fp), ratio(tp, fn),
                f1(ratio(tp, fp), ratio(tp, fn))]

    acc = st if prior is None else st + prior
    return metrics(st), metrics(acc), acc


@pytest.mark.parametrize("weighted, with_states", [(False, False), (True, False), (True, True)])
def test_precision_recall_against_counts(weighted, with_states):
    rng = np.random.default_rng(11)
    n, cls_num = 40, 6
    idx = rng.integers(0, cls_num, (n, 1)).astype(I32)
    lab = rng.integers(0, cls_num, (n, 1)).astype(I32)
    idx[lab == 5] = 5  # class 5: no FP or FN; class... some classes may have no samples
    ins = {"MaxProbs": [rng.random((n, 1))], "Indices": [idx], "Labels": [lab]}
    w = rng.uniform(0, 1, (n, 1)) if weighted else np.ones((n, 1))
    if weighted:
        ins["Weights"] = [w]
    prior = rng.uniform(0, 10, (cls_num, 4)) if with_states else None
    if with_states:
        ins["StatesInfo"] = [prior]
    res = run_op("precision_recall", ins, {"class_number": cls_num})
    batch, accum, states = _pr_ref(idx[:, 0], lab[:, 0], w[:, 0], cls_num, prior)
    np.testing.assert_allclose(res["BatchMetrics"][0], batch, rtol=1e-12)
    np.testing.assert_allclose(res["AccumMetrics"][0], accum, rtol=1e-12)
    np.testing.assert_allclose(res["AccumStatesInfo"][0], states, rtol=1e-12, atol=1e-12)
    assert res["BatchMetrics"][0].dtype == np.float64


def test_precision_recall_refuses_out_of_range_classes():
    ins = {"MaxProbs": [np.ones((2, 1), np.float32)], "Indices": [np.array([[0], [3]], I32)],
           "Labels": [np.array([[0], [1]], I32)]}
    with pytest.raises(ValueError, match="Class index"):
        run_op("precision_recall", ins, {"class_number": 3})
