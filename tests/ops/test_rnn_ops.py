"""The gru and lstm kernels against step-by-step loops over each sequence written from Paddle's
gru_compute and lstm_compute (weight layouts included); gradients are in test_grad_check.py."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dask_fluid.ops import registry
from dask_fluid.ops.registry import LOD_KEY

from . import central_differences, run_op


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def _reference(x, w, b, h0, offsets, reverse, origin):
    d = w.shape[0]
    flat = w.reshape(-1)
    w_ur, w_c = flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)
    out = np.zeros((x.shape[0], d))
    for i, (a, e) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        h = h0[i].copy() if h0 is not None else np.zeros(d)
        rows = range(e - 1, a - 1, -1) if reverse else range(a, e)
        for row in rows:
            g = x[row] + b[0]
            u = _sigmoid(g[:d] + h @ w_ur[:, :d])
            r = _sigmoid(g[d:2 * d] + h @ w_ur[:, d:])
            c = np.tanh(g[2 * d:] + (r * h) @ w_c)
            h = u * h + (1 - u) * c if origin else (1 - u) * h + u * c
            out[row] = h
    return out


@pytest.mark.parametrize("reverse, origin, with_h0", [(False, False, False), (True, False, True),
                                                      (False, True, True)])
def test_gru_matches_a_loop_over_each_sequence(reverse, origin, with_h0):
    rng = np.random.default_rng(1)
    d, offsets = 3, (0, 4, 4, 7, 8)
    x = rng.standard_normal((8, 3 * d))
    w = 0.5 * rng.standard_normal((d, 3 * d))
    b = rng.standard_normal((1, 3 * d))
    h0 = rng.standard_normal((4, d)) if with_h0 else None
    ins = {"Input": [x], "Weight": [w], "Bias": [b]}
    if with_h0:
        ins["H0"] = [h0]
    res = run_op("gru", ins, {"is_reverse": reverse, "origin_mode": origin,
                              "_lods": {"Input": [(offsets,)]}})
    np.testing.assert_allclose(res["Hidden"][0], _reference(x, w, b, h0, offsets, reverse,
                                                            origin), rtol=1e-10)
    assert res[LOD_KEY]["Hidden"] == [(offsets,)]


def test_gru_refuses_wrong_shapes_and_activations():
    lod = {"_lods": {"Input": [((0, 2),)]}}
    with pytest.raises(ValueError, match=r"Weight must be \[D, 3D\] and Input \[T, 3D\]"):
        run_op("gru", {"Input": [np.zeros((2, 6))], "Weight": [np.zeros((3, 9))]}, lod)
    with pytest.raises(ValueError, match=r"H0 must be \[1, 2\]"):
        run_op("gru", {"Input": [np.zeros((2, 6))], "Weight": [np.zeros((2, 6))],
                       "H0": [np.zeros((2, 2))]}, lod)
    with pytest.raises(ValueError, match="activation 'softsign' is not one of"):
        run_op("gru", {"Input": [np.zeros((2, 6))], "Weight": [np.zeros((2, 6))]},
               {"activation": "softsign", **lod})


def _lstm_reference(x, w, b, h0, c0, offsets, reverse, peep):
    """Paddle's lstm_compute, one sequence and one row at a time."""
    d = w.shape[0]
    out_h, out_c = np.zeros((x.shape[0], d)), np.zeros((x.shape[0], d))
    w_ic, w_fc, w_oc = (b[0, 4 * d:5 * d], b[0, 5 * d:6 * d], b[0, 6 * d:]) if peep else (0, 0, 0)
    for k, (a, e) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        h = h0[k].copy() if h0 is not None else np.zeros(d)
        c = c0[k].copy() if c0 is not None else np.zeros(d)
        for row in (range(e - 1, a - 1, -1) if reverse else range(a, e)):
            g = x[row] + b[0, :4 * d] + h @ w
            cand = np.tanh(g[:d])
            i = _sigmoid(g[d:2 * d] + w_ic * c)
            f = _sigmoid(g[2 * d:3 * d] + w_fc * c)
            c = cand * i + c * f
            o = _sigmoid(g[3 * d:] + w_oc * c)
            h = o * np.tanh(c)
            out_h[row], out_c[row] = h, c
    return out_h, out_c


@pytest.mark.parametrize("reverse, peep, with_state", [(False, True, False), (True, True, True),
                                                       (False, False, True)])
def test_lstm_matches_a_loop_over_each_sequence(reverse, peep, with_state):
    rng = np.random.default_rng(2)
    d, offsets = 3, (0, 4, 4, 7, 8)
    x = rng.standard_normal((8, 4 * d))
    w = 0.5 * rng.standard_normal((d, 4 * d))
    b = rng.standard_normal((1, (7 if peep else 4) * d))
    h0 = rng.standard_normal((4, d)) if with_state else None
    c0 = rng.standard_normal((4, d)) if with_state else None
    ins = {"Input": [x], "Weight": [w], "Bias": [b]}
    if with_state:
        ins.update(H0=[h0], C0=[c0])
    res = run_op("lstm", ins, {"is_reverse": reverse, "use_peepholes": peep,
                               "_lods": {"Input": [(offsets,)]}})
    want_h, want_c = _lstm_reference(x, w, b, h0, c0, offsets, reverse, peep)
    np.testing.assert_allclose(res["Hidden"][0], want_h, rtol=1e-10)
    np.testing.assert_allclose(res["Cell"][0], want_c, rtol=1e-10)
    assert res[LOD_KEY]["Hidden"] == [(offsets,)] and res[LOD_KEY]["Cell"] == [(offsets,)]


def test_lstm_refuses_wrong_shapes():
    lod = {"_lods": {"Input": [((0, 2),)]}}
    with pytest.raises(ValueError, match=r"Weight must be \[D, 4D\] and Input \[T, 4D\]"):
        run_op("lstm", {"Input": [np.zeros((2, 6))], "Weight": [np.zeros((2, 8))],
                        "Bias": [np.zeros((1, 14))]}, lod)
    with pytest.raises(ValueError, match=r"Bias must be \[1, 14\] \(use_peepholes=True\)"):
        run_op("lstm", {"Input": [np.zeros((2, 8))], "Weight": [np.zeros((2, 8))],
                        "Bias": [np.zeros((1, 8))]}, lod)
    with pytest.raises(ValueError, match="use_peepholes needs the Bias"):
        run_op("lstm", {"Input": [np.zeros((2, 8))], "Weight": [np.zeros((2, 8))]}, lod)
    with pytest.raises(ValueError, match=r"C0 must be \[1, 2\]"):
        run_op("lstm", {"Input": [np.zeros((2, 8))], "Weight": [np.zeros((2, 8))],
                        "Bias": [np.zeros((1, 8))], "C0": [np.zeros((3, 2))]},
               {"use_peepholes": False, **lod})


@pytest.mark.parametrize("origin", [False, True])
def test_gru_unit_is_one_step_of_the_gru_loop(origin):
    rng = np.random.default_rng(4)
    d, n = 3, 4
    x, h_p = rng.standard_normal((n, 3 * d)), rng.standard_normal((n, d))
    w, b = 0.5 * rng.standard_normal((d, 3 * d)), rng.standard_normal((1, 3 * d))
    res = run_op("gru_unit", {"Input": [x], "HiddenPrev": [h_p], "Weight": [w], "Bias": [b]},
                 {"origin_mode": origin})
    # n sequences of one step each, starting from HiddenPrev
    expected = _reference(x, w, b, h_p, tuple(range(n + 1)), False, origin)
    np.testing.assert_allclose(res["Hidden"][0], expected, rtol=1e-12)
    u = _sigmoid(x[:, :d] + b[0, :d] + h_p @ w.reshape(-1)[:2 * d * d].reshape(d, 2 * d)[:, :d])
    np.testing.assert_allclose(res["Gate"][0][:, :d], u, rtol=1e-12)


def test_gru_unit_takes_fluids_activation_enum_and_refuses_unknown_ones():
    rng = np.random.default_rng(5)
    ins = {"Input": [rng.standard_normal((2, 6))], "HiddenPrev": [np.zeros((2, 2))],
           "Weight": [np.zeros((2, 6))]}
    res = run_op("gru_unit", ins, {"activation": 0, "gate_activation": 1})  # identity
    x = ins["Input"][0]
    np.testing.assert_allclose(res["Hidden"][0], _sigmoid(x[:, :2]) * x[:, 4:], rtol=1e-12)
    with pytest.raises(ValueError, match="activation 7 is not one of"):
        run_op("gru_unit", ins, {"activation": 7})
    with pytest.raises(ValueError, match=r"Input must be \[N, 3D\], HiddenPrev \[N, D\]"):
        run_op("gru_unit", {**ins, "HiddenPrev": [np.zeros((3, 2))]})


def test_lstm_unit_matches_the_textbook_step_in_its_gate_order():
    rng = np.random.default_rng(6)
    x, c_prev = rng.standard_normal((3, 8)), rng.standard_normal((3, 2))
    res = run_op("lstm_unit", {"X": [x], "C_prev": [c_prev]}, {"forget_bias": 0.5})
    i, f = _sigmoid(x[:, 0:2]), _sigmoid(x[:, 2:4] + 0.5)
    o, g = _sigmoid(x[:, 4:6]), np.tanh(x[:, 6:8])
    c = f * c_prev + i * g
    np.testing.assert_allclose(res["C"][0], c, rtol=1e-12)
    np.testing.assert_allclose(res["H"][0], o * np.tanh(c), rtol=1e-12)
    with pytest.raises(ValueError, match=r"X must be \[N, 4D\] with C_prev \[N, D\]"):
        run_op("lstm_unit", {"X": [x], "C_prev": [np.zeros((3, 3))]})


# ---------------------------------------------------------------------------------------------
# gru's Batch* outputs in Fluid's sequence2batch order, and the gate sigmoid's clamp


def _clamped_sigmoid(z):
    """math/detail/activation_functions.h's Sigmoid: the input clamped to [-40, 13]."""
    return 1 / (1 + np.exp(-np.clip(z, -40.0, 13.0)))


def _gru_rows(x, w, b, h0, offsets, reverse, origin):
    """Per input row: the activated gates [u | r | c], r * h_prev and the new state, by a loop
    over each sequence (row order)."""
    d = w.shape[0]
    flat = w.reshape(-1)
    w_ur, w_c = flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)
    gate, rh, hid = np.zeros((len(x), 3 * d)), np.zeros((len(x), d)), np.zeros((len(x), d))
    for i, (a, e) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        h = h0[i].copy() if h0 is not None else np.zeros(d)
        for row in (range(e - 1, a - 1, -1) if reverse else range(a, e)):
            g = x[row] + b[0]
            u = _clamped_sigmoid(g[:d] + h @ w_ur[:, :d])
            r = _clamped_sigmoid(g[d:2 * d] + h @ w_ur[:, d:])
            c = np.tanh(g[2 * d:] + (r * h) @ w_c)
            gate[row], rh[row] = np.concatenate([u, r, c]), r * h
            h = u * h + (1 - u) * c if origin else (1 - u) * h + u * c
            hid[row] = h
    return gate, rh, hid


@pytest.mark.parametrize("reverse, origin", [(False, False), (True, True)])
def test_gru_batch_outputs_are_in_fluids_batch_order(reverse, origin):
    rng = np.random.default_rng(3)
    d, offsets = 3, (0, 2, 6, 6, 10, 11)  # lengths 2, 4, 0, 4, 1: a tie and an empty one
    x = rng.standard_normal((11, 3 * d))
    w = 0.5 * rng.standard_normal((d, 3 * d))
    b = rng.standard_normal((1, 3 * d))
    h0 = rng.standard_normal((5, d))
    res = run_op("gru", {"Input": [x], "Weight": [w], "Bias": [b], "H0": [h0]},
                 {"is_reverse": reverse, "origin_mode": origin,
                  "_lods": {"Input": [(offsets,)]}})
    gate, rh, hid = _gru_rows(x, w, b, h0, offsets, reverse, origin)
    lod = fluid_batch_lod(offsets, reverse)
    order = list(lod[1])
    np.testing.assert_allclose(res["Hidden"][0], hid, rtol=1e-10)
    np.testing.assert_allclose(res["BatchGate"][0], gate[order], rtol=1e-10)
    np.testing.assert_allclose(res["BatchResetHiddenPrev"][0], rh[order], rtol=1e-10)
    np.testing.assert_allclose(res["BatchHidden"][0], hid[order], rtol=1e-10)
    # gru_op.cc: to_batch sets the batch LoD on BatchGate, set_lod copies it to BatchHidden
    assert res[LOD_KEY]["BatchGate"] == res[LOD_KEY]["BatchHidden"] == [lod]
    assert "BatchResetHiddenPrev" not in res[LOD_KEY]
    assert res[LOD_KEY]["Hidden"] == [(offsets,)]


def test_gru_gate_sigmoid_clamps_its_input_at_13():
    d, offsets = 2, (0, 2)
    x = np.full((2, 3 * d), 20.0)  # gate preactivations far above 13
    w, b = np.zeros((d, 3 * d)), np.zeros((1, 3 * d))
    res = run_op("gru", {"Input": [x], "Weight": [w], "Bias": [b]},
                 {"_lods": {"Input": [(offsets,)]}})
    u = 1 / (1 + np.exp(-13.0))  # not 1 - 2e-9 (sigmoid(20))
    np.testing.assert_allclose(res["BatchGate"][0][:, :d], u, rtol=1e-15)
    np.testing.assert_allclose(res["Hidden"][0], _gru_rows(x, w, b, None, offsets, False,
                                                           False)[2], rtol=1e-12)


def test_gru_grad_reads_the_batch_order_and_matches_finite_differences():
    rng = np.random.default_rng(4)
    d, offsets = 2, (0, 1, 4, 4, 7)  # lengths 1, 3, 0, 3: batch order differs from row order
    ins = {"Input": [rng.standard_normal((7, 3 * d))], "Weight": [0.5 * rng.standard_normal(
        (d, 3 * d))], "Bias": [rng.standard_normal((1, 3 * d))],
        "H0": [rng.standard_normal((4, d))]}
    attrs = {"is_reverse": True, "_lods": {"Input": [(offsets,)]}}
    seed = rng.standard_normal((7, d))
    fwd = run_op("gru", ins, attrs)
    grads = run_op("gru_grad", {**ins, "Hidden": fwd["Hidden"], "BatchGate": fwd["BatchGate"],
                                "BatchResetHiddenPrev": fwd["BatchResetHiddenPrev"],
                                "BatchHidden": fwd["BatchHidden"], "Hidden@GRAD": [seed]},
                   attrs)
    for slot in ("Input", "Weight", "Bias", "H0"):
        v = ins[slot][0]
        num = np.zeros_like(v)
        for j in range(v.size):
            orig = v.flat[j]
            v.flat[j] = orig + 1e-6
            fp = float((run_op("gru", ins, attrs)["Hidden"][0] * seed).sum())
            v.flat[j] = orig - 1e-6
            fm = float((run_op("gru", ins, attrs)["Hidden"][0] * seed).sum())
            v.flat[j] = orig
            num.flat[j] = (fp - fm) / 2e-6
        np.testing.assert_allclose(grads[slot + "@GRAD"][0], num, rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# lstm's Batch* outputs in Fluid's sequence2batch order


def fluid_batch_lod(offsets, reverse):
    """LoDTensor2BatchFunctor (math/sequence2batch.h) line by line: SeqInfo sorted by length,
    longest first (its std::sort keeps ties in order for up to 16 sequences), then for each
    step n the sorted sequences with n < length until the first that has ended. Returns the
    batch LoD ``(batch_starts, seq2batch_idx, seq_order)``."""
    seq_info = [(offsets[i], offsets[i + 1] - offsets[i], i) for i in range(len(offsets) - 1)]
    seq_info.sort(key=lambda info: -info[1])  # list.sort is stable
    batch_starts, seq2batch_idx = [0], []
    for n in range(seq_info[0][1]):
        for start, seq_len, _ in seq_info:
            if n >= seq_len:
                break
            seq2batch_idx.append(start + seq_len - 1 - n if reverse else start + n)
        batch_starts.append(len(seq2batch_idx))
    return tuple(batch_starts), tuple(seq2batch_idx), tuple(i for _, _, i in seq_info)


ACTS = {"sigmoid": _clamped_sigmoid, "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0),
        "identity": lambda v: v}


def _lstm_rows(x, w, b, h0, c0, offsets, reverse, cell_act="tanh"):
    """Per input row, by a loop over each sequence (lstm_kernel.h's forward with peepholes):
    the activated gates [c~ | i | f | o], cell_act(c) (the kernel's state_atv), h and c."""
    d = w.shape[0]
    gates, act_c = np.zeros((len(x), 4 * d)), np.zeros((len(x), d))
    hid, cel = np.zeros((len(x), d)), np.zeros((len(x), d))
    w_ic, w_fc, w_oc = b[0, 4 * d:5 * d], b[0, 5 * d:6 * d], b[0, 6 * d:]
    for k in range(len(offsets) - 1):
        h, c = h0[k].copy(), c0[k].copy()
        rows = range(offsets[k], offsets[k + 1])
        for row in (reversed(rows) if reverse else rows):
            g = x[row] + b[0, :4 * d] + h @ w
            cand = np.tanh(g[:d])
            i = _clamped_sigmoid(g[d:2 * d] + w_ic * c)
            f = _clamped_sigmoid(g[2 * d:3 * d] + w_fc * c)
            c = cand * i + c * f
            o = _clamped_sigmoid(g[3 * d:] + w_oc * c)
            h = o * ACTS[cell_act](c)
            gates[row] = np.concatenate([cand, i, f, o])
            act_c[row], hid[row], cel[row] = ACTS[cell_act](c), h, c
    return gates, act_c, hid, cel


def test_fluid_batch_lod_reproduces_sequence2batch_h_example():
    # the comment's example: s0 of 4, s1 of 5, s2 of 3 rows, sequence order {1, 0, 2}
    starts, idx, order = fluid_batch_lod((0, 4, 9, 12), False)
    assert starts == (0, 3, 6, 9, 11, 12)
    assert idx == (4, 0, 9, 5, 1, 10, 6, 2, 11, 7, 3, 8) and order == (1, 0, 2)


@pytest.mark.parametrize("reverse, cell_act", [(False, "tanh"), (True, "tanh"),
                                               (True, "sigmoid")])
def test_lstm_batch_outputs_are_in_fluids_batch_order(reverse, cell_act):
    rng = np.random.default_rng(7)
    d, offsets = 3, (0, 2, 6, 6, 10, 11)  # lengths 2, 4, 0, 4, 1: a tie and an empty one
    x = rng.standard_normal((11, 4 * d))
    w, b = 0.5 * rng.standard_normal((d, 4 * d)), rng.standard_normal((1, 7 * d))
    h0, c0 = rng.standard_normal((5, d)), rng.standard_normal((5, d))
    res = run_op("lstm", {"Input": [x], "Weight": [w], "Bias": [b], "H0": [h0], "C0": [c0]},
                 {"is_reverse": reverse, "cell_activation": cell_act,
                  "_lods": {"Input": [(offsets,)]}})
    gates, act_c, hid, cel = _lstm_rows(x, w, b, h0, c0, offsets, reverse, cell_act)
    lod = fluid_batch_lod(offsets, reverse)
    order = list(lod[1])
    assert lod[0] == (0, 4, 7, 9, 11) and lod[2] == (1, 3, 0, 4, 2)  # steps of 4, 3, 2, 2
    np.testing.assert_allclose(res["Hidden"][0], hid, rtol=1e-10)
    np.testing.assert_allclose(res["Cell"][0], cel, rtol=1e-10)
    np.testing.assert_allclose(res["BatchGate"][0], gates[order], rtol=1e-10)
    # cell_act(c), not c: lstm_kernel.h writes state_atv into state_active_value
    np.testing.assert_allclose(res["BatchCellPreAct"][0], act_c[order], rtol=1e-10)
    assert res[LOD_KEY]["BatchGate"] == [lod]  # Fluid's to_batch sets it on BatchGate only
    assert "BatchCellPreAct" not in res[LOD_KEY]
    assert res[LOD_KEY]["Hidden"] == res[LOD_KEY]["Cell"] == [(offsets,)]


def test_lstm_grad_op_reads_batch_cell_pre_act_as_fluids_grad_maker():
    op = SimpleNamespace(type="lstm", attrs={},
                         inputs={"Input": ["x"], "Weight": ["w"], "Bias": ["b"]},
                         outputs={"Hidden": ["h"], "Cell": ["c"], "BatchGate": ["g"],
                                  "BatchCellPreAct": ["a"]})
    (desc,) = registry.get("lstm").grad(op)
    assert desc["inputs"]["BatchGate"] == ["g"] and desc["inputs"]["BatchCellPreAct"] == ["a"]
    assert "BatchCellPreAct" in registry.get("lstm_grad").inputs


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_grad_reads_the_batch_order_and_matches_finite_differences(reverse):
    rng = np.random.default_rng(8)
    d, offsets = 2, (0, 1, 4, 4, 7)  # lengths 1, 3, 0, 3: batch order differs from row order
    ins = {"Input": [rng.standard_normal((7, 4 * d))],
           "Weight": [0.5 * rng.standard_normal((d, 4 * d))],
           "Bias": [rng.standard_normal((1, 7 * d))], "H0": [rng.standard_normal((4, d))],
           "C0": [rng.standard_normal((4, d))]}
    attrs = {"is_reverse": reverse, "_lods": {"Input": [(offsets,)]}}
    dh, dc = rng.standard_normal((7, d)), rng.standard_normal((7, d))
    fwd = run_op("lstm", ins, attrs)
    slots = ("Input", "Weight", "Bias", "H0", "C0")
    gins = {**ins, **{k: fwd[k] for k in ("Hidden", "Cell", "BatchGate", "BatchCellPreAct")},
            "Hidden@GRAD": [dh], "Cell@GRAD": [dc]}
    grads = run_op("lstm_grad", gins, attrs, tuple(s + "@GRAD" for s in slots))

    def loss():
        out = run_op("lstm", ins, attrs)
        return float((out["Hidden"][0] * dh).sum() + (out["Cell"][0] * dc).sum())

    for slot in slots:
        np.testing.assert_allclose(grads[slot + "@GRAD"][0],
                                   central_differences(loss, ins[slot][0]),
                                   rtol=1e-6, atol=1e-8, err_msg=slot)
