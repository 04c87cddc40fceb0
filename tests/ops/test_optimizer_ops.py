"""Optimizer kernels against hand-written numpy updates: 5 dense steps, then a SelectedRows
gradient with a duplicate row (only the touched rows change, exactly as a dense update would
change them)."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows

from . import run_op

SHAPE = (6, 3)
LR = 0.05


# ---------------------------------------------------------------------------------------------
# hand-written references: (param, grad, state dict, attrs, step) -> new param, new state


def ref_sgd(p, g, s, a, t):
    return p - LR * g, s


def ref_momentum(p, g, s, a, t):
    v = a["mu"] * s["Velocity"] + g
    if a.get("use_nesterov"):
        p = p - (g + a["mu"] * v) * LR
    else:
        p = p - LR * v
    return p, {"Velocity": v}


def ref_adam(p, g, s, a, t):
    b1, b2, eps = 0.9, 0.999, 1e-8
    b1p, b2p = b1 ** (t + 1), b2 ** (t + 1)
    m1 = b1 * s["Moment1"] + (1 - b1) * g
    m2 = b2 * s["Moment2"] + (1 - b2) * g * g
    lr_t = LR * np.sqrt(1 - b2p) / (1 - b1p)
    p = p - lr_t * m1 / (np.sqrt(m2) + eps * np.sqrt(1 - b2p))
    return p, {"Moment1": m1, "Moment2": m2}


def ref_adagrad(p, g, s, a, t):
    m = s["Moment"] + g * g
    return p - LR * g / (np.sqrt(m) + 1e-6), {"Moment": m}


def ref_rmsprop(p, g, s, a, t):
    rho, mu, eps = a["decay"], a["momentum"], a["epsilon"]
    ms = rho * s["MeanSquare"] + (1 - rho) * g * g
    new = {"MeanSquare": ms}
    if a.get("centered"):
        mg = rho * s["MeanGrad"] + (1 - rho) * g
        mom = mu * s["Moment"] + LR * g / np.sqrt(ms - mg * mg + eps)
        new["MeanGrad"] = mg
    else:
        mom = mu * s["Moment"] + LR * g / np.sqrt(ms + eps)
    new["Moment"] = mom
    return p - mom, new


def ref_adamax(p, g, s, a, t):
    b1, b2, eps = 0.9, 0.999, 1e-8
    m = b1 * s["Moment"] + (1 - b1) * g
    u = np.maximum(b2 * s["InfNorm"] + eps, np.abs(g))
    return p - LR / (1 - b1 ** (t + 1)) * m / u, {"Moment": m, "InfNorm": u}


def ref_decayed_adagrad(p, g, s, a, t):
    m = 0.95 * s["Moment"] + 0.05 * g * g
    return p - LR * g / (np.sqrt(m) + 1e-6), {"Moment": m}


def ref_ftrl(p, g, s, a, t):
    # Paddle's ftrl_op.h with lr_power = -0.5, written out
    l1, l2 = a["l1"], a["l2"]
    n, z = s["SquaredAccumulator"], s["LinearAccumulator"]
    new_n = n + g * g
    z = z + g - (np.sqrt(new_n) - np.sqrt(n)) / LR * p
    y = np.sqrt(new_n) / LR + 2 * l2
    p = np.where(np.abs(z) > l1, (l1 * np.sign(z) - z) / y, 0.0)
    return p, {"SquaredAccumulator": new_n, "LinearAccumulator": z}


def ref_lamb(p, g, s, a, t):
    b1, b2, eps, wd = 0.9, 0.999, 1e-6, a["weight_decay"]
    m1 = b1 * s["Moment1"] + (1 - b1) * g
    m2 = b2 * s["Moment2"] + (1 - b2) * g * g
    # Paddle 1.8's lamb_op.h: no bias correction (the beta powers are passed, not used)
    r = m1 / (np.sqrt(m2) + eps) + wd * p
    ratio = np.linalg.norm(p) / np.linalg.norm(r)
    return p - LR * ratio * r, {"Moment1": m1, "Moment2": m2}


def ref_lars(p, g, s, a, t):
    # Paddle's lars_momentum_op.h, written out
    p_norm, g_norm = np.linalg.norm(p), np.linalg.norm(g)
    rate = LR
    if p_norm > 0 and g_norm > 0:
        rate = LR * a["lars_coeff"] * p_norm / (g_norm + a["lars_weight_decay"] * p_norm)
    v = a["mu"] * s["Velocity"] + rate * (g + a["lars_weight_decay"] * p)
    return p - v, {"Velocity": v}


#: the output slot of each state input (Paddle names ftrl's differently)
OUT_SLOT = {"SquaredAccumulator": "SquaredAccumOut", "LinearAccumulator": "LinearAccumOut"}


def _out(slot: str) -> str:
    return OUT_SLOT.get(slot, slot + "Out")


# op, attrs, state slots, state slot -> output slot, reference
OPTIMIZERS = {
    "sgd": ("sgd", {}, [], ref_sgd),
    "momentum": ("momentum", {"mu": 0.9}, ["Velocity"], ref_momentum),
    "momentum_nesterov": ("momentum", {"mu": 0.9, "use_nesterov": True}, ["Velocity"],
                          ref_momentum),
    "lars_momentum": ("lars_momentum", {"mu": 0.9, "lars_coeff": 0.01,
                                        "lars_weight_decay": 0.0005}, ["Velocity"], ref_lars),
    "adam": ("adam", {}, ["Moment1", "Moment2"], ref_adam),
    "adagrad": ("adagrad", {}, ["Moment"], ref_adagrad),
    "adamax": ("adamax", {}, ["Moment", "InfNorm"], ref_adamax),
    "decayed_adagrad": ("decayed_adagrad", {}, ["Moment"], ref_decayed_adagrad),
    "ftrl": ("ftrl", {"l1": 0.01, "l2": 0.1}, ["SquaredAccumulator", "LinearAccumulator"],
             ref_ftrl),
    "lamb": ("lamb", {"weight_decay": 0.01}, ["Moment1", "Moment2"], ref_lamb),
    "rmsprop": ("rmsprop", {"decay": 0.9, "momentum": 0.5, "epsilon": 1e-6},
                ["MeanSquare", "Moment"], ref_rmsprop),
    "rmsprop_centered": ("rmsprop",
                         {"decay": 0.9, "momentum": 0.5, "epsilon": 1e-6, "centered": True},
                         ["MeanSquare", "Moment", "MeanGrad"], ref_rmsprop),
}


def _initial_state(slots, rng, dtype=np.float64):
    # second-moment states start positive (and MeanSquare above MeanGrad²) so every square
    # root stays real
    return {s: (rng.uniform(0.5, 1.0, SHAPE) if s in ("MeanSquare", "Moment", "Moment2",
                                                    "InfNorm", "SquaredAccumulator")
                else rng.uniform(-0.1, 0.1, SHAPE)).astype(dtype) for s in slots}


def _step(op, attrs, param, grad, state, t, dtype=np.float64):
    ins = {"Param": [param], "Grad": [grad], "LearningRate": [np.array([LR], dtype)]}
    ins.update({s: [a] for s, a in state.items()})
    if op in ("adam", "lamb", "adamax"):
        ins["Beta1Pow"] = [np.array([0.9 ** (t + 1)], dtype)]
    if op in ("adam", "lamb"):
        ins["Beta2Pow"] = [np.array([0.999 ** (t + 1)], dtype)]
    outs = ["ParamOut"] + [_out(s) for s in state]
    return run_op(op, ins, attrs, tuple(outs))


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_dense_five_steps_match_reference(name):
    op, attrs, slots, ref = OPTIMIZERS[name]
    rng = np.random.default_rng(0)
    param = rng.standard_normal(SHAPE)
    state = _initial_state(slots, rng)
    exp_p, exp_s = param.copy(), {s: a.copy() for s, a in state.items()}
    for t in range(5):
        g = rng.standard_normal(SHAPE)
        res = _step(op, attrs, param, g, state, t)
        exp_p, exp_s = ref(exp_p, g, exp_s, attrs, t)
        # in place: the outputs are the very input arrays
        assert res["ParamOut"][0] is param
        for s in slots:
            assert res[_out(s)][0] is state[s]
        assert np.isfinite(param).all()
        np.testing.assert_allclose(param, exp_p, rtol=1e-12, atol=1e-12)
        for s in slots:
            np.testing.assert_allclose(state[s], exp_s[s], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in OPTIMIZERS if n not in ("lars_momentum",
                                                                       "lamb")])
def test_sparse_grad_updates_only_touched_rows(name):
    op, attrs, slots, ref = OPTIMIZERS[name]
    rng = np.random.default_rng(1)
    param = rng.standard_normal(SHAPE)
    state = _initial_state(slots, rng)
    p0, s0 = param.copy(), {s: a.copy() for s, a in state.items()}
    grad = SelectedRows(np.array([3, 1, 3], np.int64), rng.standard_normal((3, SHAPE[1])),
                        SHAPE[0])
    _step(op, attrs, param, grad, state, 0)
    exp_p, exp_s = ref(p0, grad.to_dense(), s0, attrs, 0)
    touched = [1, 3]
    untouched = [0, 2, 4, 5]
    np.testing.assert_allclose(param[touched], exp_p[touched], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(param[untouched], p0[untouched])
    for s in slots:
        np.testing.assert_allclose(state[s][touched], exp_s[s][touched], rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_array_equal(state[s][untouched], s0[s][untouched])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_float32_stays_float32(name):
    op, attrs, slots, _ = OPTIMIZERS[name]
    rng = np.random.default_rng(2)
    param = rng.standard_normal(SHAPE).astype(np.float32)
    state = _initial_state(slots, rng, np.float32)
    res = _step(op, attrs, param, rng.standard_normal(SHAPE).astype(np.float32), state, 0,
                np.float32)
    assert all(v[0].dtype == np.float32 for v in res.values())


def test_rmsprop_centered_without_mean_grad_raises():
    p = np.zeros(SHAPE)
    with pytest.raises(ValueError, match="rmsprop: centered=True needs the MeanGrad"):
        run_op("rmsprop", {"Param": [p], "Grad": [p], "MeanSquare": [p.copy()],
                           "Moment": [p.copy()], "LearningRate": [np.array([LR])]},
               {"centered": True})


def test_adam_advances_beta_pows_only_where_the_op_binds_them():
    """Fluid 1.8's adam op writes Beta1PowOut/Beta2PowOut (β^t·β, after the update); an op of
    an older program, which binds no such outputs, leaves the powers to its scale ops."""
    def step(outs):
        p = np.ones(SHAPE)
        b1p, b2p = np.array([0.9]), np.array([0.999])
        res = run_op("adam", {"Param": [p], "Grad": [p.copy()],
                              "LearningRate": [np.array([LR])], "Moment1": [np.zeros(SHAPE)],
                              "Moment2": [np.zeros(SHAPE)], "Beta1Pow": [b1p],
                              "Beta2Pow": [b2p]}, {}, outs)
        assert b1p[0] == 0.9 and b2p[0] == 0.999  # the inputs themselves are not written
        return res

    res = step(("ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"))
    np.testing.assert_allclose(res["Beta1PowOut"][0], [0.81])
    np.testing.assert_allclose(res["Beta2PowOut"][0], [0.999 * 0.999])
    older = step(("ParamOut", "Moment1Out", "Moment2Out"))
    assert set(older) == {"ParamOut", "Moment1Out", "Moment2Out"}
    np.testing.assert_array_equal(older["ParamOut"][0], res["ParamOut"][0])


def test_sparse_height_mismatch_raises():
    p = np.zeros(SHAPE)
    g = SelectedRows(np.array([0]), np.ones((1, SHAPE[1])), SHAPE[0] + 1)
    with pytest.raises(ValueError, match="height 7 does not match"):
        run_op("sgd", {"Param": [p], "Grad": [g], "LearningRate": [np.array([LR])]})


def test_lamb_with_a_sparse_gradient_is_dense_lamb_of_the_merged_gradient():
    # Paddle 1.8's lamb_op.h: duplicate rows merged, missing rows read as zero, so every
    # row's moments decay and the trust ratio covers the whole parameter
    op, attrs, slots, ref = OPTIMIZERS["lamb"]
    rng = np.random.default_rng(3)
    param = rng.standard_normal(SHAPE)
    state = _initial_state(slots, rng)
    p0, s0 = param.copy(), {k: a.copy() for k, a in state.items()}
    grad = SelectedRows(np.array([3, 1, 3], np.int64), rng.standard_normal((3, SHAPE[1])),
                        SHAPE[0])
    _step(op, attrs, param, grad, state, 0)
    exp_p, exp_s = ref(p0, grad.to_dense(), s0, attrs, 0)
    np.testing.assert_allclose(param, exp_p, rtol=1e-12, atol=1e-12)
    for k in slots:
        np.testing.assert_allclose(state[k], exp_s[k], rtol=1e-12, atol=1e-12)
    assert not np.allclose(state["Moment1"][0], s0["Moment1"][0])  # an untouched row decays
    empty = SelectedRows(np.zeros(0, np.int64), np.zeros((0, SHAPE[1])), SHAPE[0])
    before = param.copy(), {k: a.copy() for k, a in state.items()}
    _step(op, attrs, param, empty, state, 1)  # no rows: nothing changes, as lamb_op.h returns
    np.testing.assert_array_equal(param, before[0])
    for k in slots:
        np.testing.assert_array_equal(state[k], before[1][k])


def test_lars_with_a_sparse_gradient_is_refused_as_in_paddle():
    p = np.zeros(SHAPE)
    g = SelectedRows(np.array([0]), np.ones((1, SHAPE[1])), SHAPE[0])
    with pytest.raises(NotImplementedError, match="lars_momentum with a sparse"):
        run_op("lars_momentum", {"Param": [p], "Grad": [g], "Velocity": [p.copy()],
                                 "LearningRate": [np.array([LR])]})


def test_lars_falls_back_to_the_plain_rate_for_a_zero_parameter():
    p, g, v = np.zeros(SHAPE), np.ones(SHAPE), np.zeros(SHAPE)
    run_op("lars_momentum", {"Param": [p], "Grad": [g], "Velocity": [v],
                             "LearningRate": [np.array([LR])]},
           {"mu": 0.9, "lars_coeff": 0.001, "lars_weight_decay": 0.0005})
    np.testing.assert_allclose(v, LR * g)
