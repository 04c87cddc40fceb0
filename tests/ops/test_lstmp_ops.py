"""lstmp (dynamic_lstmp) and cudnn_lstm (layers.lstm) kernels against independent references:
plain per-sequence, per-step loops of the equations, and the existing lstm op (an identity
projection for lstmp; one cuDNN layer with its weights rearranged into the lstm op's)."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY
from dask_fluid.ops.rnn_ops import cudnn_lstm_weight_size

from . import central_differences, run_op
from .test_rnn_ops import fluid_batch_lod

ACT = {"sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "tanh": np.tanh,
       "relu": lambda v: np.maximum(v, 0.0), "identity": lambda v: v}


def lstmp_by_loops(x, offsets, w, pw, bias, h0, c0, *, peep=True, reverse=False,
                   gate="sigmoid", cell="tanh", cand="tanh", proj="tanh", cell_clip=0.0,
                   proj_clip=0.0, rows_out=None):
    """One sequence at a time, one step at a time, element-wise clips in Python. A
    ``rows_out`` dict receives, per input row, the activated gates ``[c~ | i | f | o]``
    (``"gate"``), ``cell_act(c)`` (``"act_cell"``) and ``h`` (``"hidden"``)."""
    d = x.shape[1] // 4
    p = pw.shape[1]
    b = bias.reshape(-1)
    proj_act = ACT["identity" if proj == "identity" else cell]  # Fluid 1.8's kernel
    out_r, out_c = np.zeros((x.shape[0], p)), np.zeros((x.shape[0], d))
    if rows_out is not None:
        rows_out.update(gate=np.zeros((x.shape[0], 4 * d)), act_cell=np.zeros_like(out_c),
                        hidden=np.zeros_like(out_c))
    for q in range(len(offsets) - 1):
        rows = list(range(offsets[q], offsets[q + 1]))
        if reverse:
            rows = rows[::-1]
        r_prev = h0[q].copy() if h0 is not None else np.zeros(p)
        c_prev = c0[q].copy() if c0 is not None else np.zeros(d)
        for row in rows:
            g = x[row] + b[:4 * d] + r_prev @ w
            gc, gi, gf, go = g[:d], g[d:2 * d], g[2 * d:3 * d], g[3 * d:]
            if peep:
                gi = gi + b[4 * d:5 * d] * c_prev
                gf = gf + b[5 * d:6 * d] * c_prev
            c = ACT[gate](gf) * c_prev + ACT[gate](gi) * ACT[cand](gc)
            if cell_clip > 0:
                c = np.array([min(max(v, -cell_clip), cell_clip) for v in c])
            if peep:
                go = go + b[6 * d:] * c
            h = ACT[gate](go) * ACT[cell](c)
            r = proj_act(h @ pw)
            if proj_clip > 0:
                r = np.array([min(max(v, -proj_clip), proj_clip) for v in r])
            out_r[row], out_c[row] = r, c
            r_prev, c_prev = r, c
            if rows_out is not None:
                rows_out["gate"][row] = np.concatenate(
                    [ACT[cand](gc), ACT[gate](gi), ACT[gate](gf), ACT[gate](go)])
                rows_out["act_cell"][row], rows_out["hidden"][row] = ACT[cell](c), h
    return out_r, out_c


def _lod(offsets):
    return {"_lods": {"Input": [(tuple(offsets),)]}}


@pytest.mark.parametrize("kw", [
    {},
    {"reverse": True, "proj": "identity"},
    {"peep": False, "cell": "sigmoid", "proj": "relu", "gate": "tanh"},
    {"cell_clip": 0.3, "proj_clip": 0.25},
    {"reverse": True, "cand": "relu", "cell_clip": 0.5},
])
@pytest.mark.parametrize("initial", [False, True])
def test_lstmp_matches_a_loop_reference(kw, initial):
    rng = np.random.default_rng(3)
    offsets = [0, 3, 3, 7, 8]  # an empty sequence and one of a single step
    d, p = 3, 2
    peep = kw.get("peep", True)
    x, w, pw = rng.normal(size=(8, 4 * d)), rng.normal(size=(p, 4 * d)), rng.normal(size=(d, p))
    bias = rng.normal(size=(1, 7 * d if peep else 4 * d))
    h0 = rng.normal(size=(4, p)) if initial else None
    c0 = rng.normal(size=(4, d)) if initial else None
    attrs = {"use_peepholes": peep, "is_reverse": kw.get("reverse", False),
             "gate_activation": kw.get("gate", "sigmoid"),
             "cell_activation": kw.get("cell", "tanh"),
             "candidate_activation": kw.get("cand", "tanh"),
             "proj_activation": kw.get("proj", "tanh"),
             "cell_clip": kw.get("cell_clip", 0.0), "proj_clip": kw.get("proj_clip", 0.0),
             **_lod(offsets)}
    ins = {"Input": [x], "Weight": [w], "ProjWeight": [pw], "Bias": [bias]}
    if initial:
        ins.update(H0=[h0], C0=[c0])
    res = run_op("lstmp", ins, attrs)
    want_r, want_c = lstmp_by_loops(x, offsets, w, pw, bias, h0, c0, **kw)
    np.testing.assert_allclose(res["Projection"][0], want_r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["Cell"][0], want_c, rtol=1e-12, atol=1e-12)
    if kw.get("proj_clip"):
        assert np.abs(res["Projection"][0]).max() == pytest.approx(kw["proj_clip"])
    if kw.get("cell_clip"):
        assert np.abs(res["Cell"][0]).max() == pytest.approx(kw["cell_clip"])


def test_proj_activation_applies_cell_activation_as_fluid_1_8():
    """Fluid 1.8's LSTMPKernel runs ActCompute(cell_act, ...) on the projection whenever
    proj_activation is not identity: relu as proj_activation gives tanh (the cell's)."""
    rng = np.random.default_rng(5)
    ins = {"Input": [rng.normal(size=(4, 8))], "Weight": [rng.normal(size=(3, 8))],
           "ProjWeight": [rng.normal(size=(2, 3))], "Bias": [rng.normal(size=(1, 14))]}
    relu = run_op("lstmp", ins, {"proj_activation": "relu", **_lod([0, 4])})["Projection"][0]
    tanh = run_op("lstmp", ins, {"proj_activation": "tanh", **_lod([0, 4])})["Projection"][0]
    np.testing.assert_array_equal(relu, tanh)
    assert (relu < 0).any()  # not a relu


def test_lstmp_with_an_identity_projection_is_the_lstm_op():
    rng = np.random.default_rng(7)
    d, offsets = 3, [0, 2, 6, 7]
    x, w = rng.normal(size=(7, 4 * d)), rng.normal(size=(d, 4 * d))
    bias, h0, c0 = rng.normal(size=(1, 7 * d)), rng.normal(size=(3, d)), rng.normal(size=(3, d))
    common = {"is_reverse": True, **_lod(offsets)}
    got = run_op("lstmp", {"Input": [x], "Weight": [w], "ProjWeight": [np.eye(d)],
                           "Bias": [bias], "H0": [h0], "C0": [c0]},
                 {"proj_activation": "identity", **common})
    ref = run_op("lstm", {"Input": [x], "Weight": [w], "Bias": [bias], "H0": [h0], "C0": [c0]},
                 common)
    np.testing.assert_allclose(got["Projection"][0], ref["Hidden"][0], rtol=1e-12)
    np.testing.assert_allclose(got["Cell"][0], ref["Cell"][0], rtol=1e-12)
    # both in the same batch order: lstmp's h is lstm's Hidden, lstmp's cell_act(c) lstm's
    np.testing.assert_allclose(got["BatchHidden"][0],
                               ref["Hidden"][0][list(fluid_batch_lod(offsets, True)[1])],
                               rtol=1e-12)
    for slot in ("BatchGate", "BatchCellPreAct"):
        np.testing.assert_allclose(got[slot][0], ref[slot][0], rtol=1e-12, err_msg=slot)
    # and the gradients agree with lstm_grad's (identity projection: dr = dh)
    dh, dc = rng.normal(size=(7, d)), rng.normal(size=(7, d))
    gins = {"Input": [x], "Weight": [w], "ProjWeight": [np.eye(d)], "Bias": [bias],
            "H0": [h0], "C0": [c0], "Projection@GRAD": [dh], "Cell@GRAD": [dc],
            **{k: got[k] for k in ("Projection", "Cell", "BatchGate", "BatchCellPreAct",
                                   "BatchHidden")}}
    slots = ("Input@GRAD", "Weight@GRAD", "Bias@GRAD", "H0@GRAD", "C0@GRAD")
    g = run_op("lstmp_grad", gins, {"proj_activation": "identity", **common}, slots)
    rins = {"Input": [x], "Weight": [w], "Bias": [bias], "H0": [h0], "C0": [c0],
            "Hidden": ref["Hidden"], "Cell": ref["Cell"], "BatchGate": ref["BatchGate"],
            "BatchCellPreAct": ref["BatchCellPreAct"], "Hidden@GRAD": [dh], "Cell@GRAD": [dc]}
    rg = run_op("lstm_grad", rins, common, slots)
    for slot in slots:
        np.testing.assert_allclose(g[slot][0], rg[slot][0], rtol=1e-10, atol=1e-12,
                                   err_msg=slot)


@pytest.mark.parametrize("kw", [
    {},
    {"reverse": True},
    {"reverse": True, "cell": "sigmoid", "proj": "relu", "cell_clip": 0.4, "proj_clip": 0.3},
])
def test_lstmp_batch_outputs_are_in_fluids_batch_order(kw):
    """BatchGate, BatchCellPreAct (cell_act(c): lstmp_op.h hands it to LstmUnitFunctor as
    state_active_value) and BatchHidden (h) stay in sequence2batch order, as LSTMPKernel leaves
    them (only Projection and Cell go back through to_seq)."""
    rng = np.random.default_rng(17)
    d, p, offsets = 3, 2, [0, 2, 6, 6, 10, 11]  # lengths 2, 4, 0, 4, 1: a tie, an empty one
    x, w, pw = rng.normal(size=(11, 4 * d)), rng.normal(size=(p, 4 * d)), rng.normal(size=(d, p))
    bias, h0, c0 = rng.normal(size=(1, 7 * d)), rng.normal(size=(5, p)), rng.normal(size=(5, d))
    attrs = {"is_reverse": kw.get("reverse", False), "cell_activation": kw.get("cell", "tanh"),
             "proj_activation": kw.get("proj", "tanh"), "cell_clip": kw.get("cell_clip", 0.0),
             "proj_clip": kw.get("proj_clip", 0.0), **_lod(offsets)}
    res = run_op("lstmp", {"Input": [x], "Weight": [w], "ProjWeight": [pw], "Bias": [bias],
                           "H0": [h0], "C0": [c0]}, attrs)
    rows: dict = {}
    want_r, want_c = lstmp_by_loops(x, offsets, w, pw, bias, h0, c0, rows_out=rows, **kw)
    lod = fluid_batch_lod(offsets, kw.get("reverse", False))
    order = list(lod[1])
    np.testing.assert_allclose(res["Projection"][0], want_r, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["Cell"][0], want_c, rtol=1e-12, atol=1e-12)
    for slot, key in (("BatchGate", "gate"), ("BatchCellPreAct", "act_cell"),
                      ("BatchHidden", "hidden")):
        np.testing.assert_allclose(res[slot][0], rows[key][order], rtol=1e-12, atol=1e-12,
                                   err_msg=slot)
    assert res[LOD_KEY]["BatchGate"] == [lod]  # LoDTensor2BatchFunctor's, on BatchGate only
    assert "BatchCellPreAct" not in res[LOD_KEY] and "BatchHidden" not in res[LOD_KEY]
    assert res[LOD_KEY]["Projection"] == res[LOD_KEY]["Cell"] == [(tuple(offsets),)]


@pytest.mark.parametrize("reverse", [False, True])
def test_lstmp_grad_reads_the_batch_order_and_matches_finite_differences(reverse):
    rng = np.random.default_rng(19)
    d, p, offsets = 3, 2, [0, 1, 4, 4, 7]  # lengths 1, 3, 0, 3: batch order is not row order
    ins = {"Input": [rng.normal(size=(7, 4 * d))], "Weight": [0.5 * rng.normal(size=(p, 4 * d))],
           "ProjWeight": [rng.normal(size=(d, p))], "Bias": [rng.normal(size=(1, 7 * d))],
           "H0": [rng.normal(size=(4, p))], "C0": [rng.normal(size=(4, d))]}
    attrs = {"is_reverse": reverse, **_lod(offsets)}
    dr, dc = rng.normal(size=(7, p)), rng.normal(size=(7, d))
    fwd = run_op("lstmp", ins, attrs)
    slots = ("Input", "Weight", "ProjWeight", "Bias", "H0", "C0")
    grads = run_op("lstmp_grad", {**ins, **{k: fwd[k] for k in (
        "Projection", "Cell", "BatchGate", "BatchCellPreAct", "BatchHidden")},
        "Projection@GRAD": [dr], "Cell@GRAD": [dc]}, attrs, tuple(s + "@GRAD" for s in slots))

    def loss():
        out = run_op("lstmp", ins, attrs)
        return float((out["Projection"][0] * dr).sum() + (out["Cell"][0] * dc).sum())

    for slot in slots:
        np.testing.assert_allclose(grads[slot + "@GRAD"][0],
                                   central_differences(loss, ins[slot][0]),
                                   rtol=1e-6, atol=1e-8, err_msg=slot)


def test_lstmp_errors():
    rng = np.random.default_rng(0)
    x, w, pw = rng.normal(size=(3, 8)), rng.normal(size=(3, 8)), rng.normal(size=(2, 3))
    lod = _lod([0, 1, 3])
    good = {"Input": [x], "Weight": [w], "ProjWeight": [pw], "Bias": [rng.normal(size=(1, 14))]}
    with pytest.raises(ValueError, match=r"Bias \[1, 8\] is required"):
        run_op("lstmp", {**good, "Bias": [rng.normal(size=(1, 14))]},
               {"use_peepholes": False, **lod})
    with pytest.raises(ValueError, match=r"Weight must be \[P, 4D\] = \[3, 8\]"):
        run_op("lstmp", {**good, "Weight": [rng.normal(size=(2, 8))]}, lod)
    with pytest.raises(ValueError, match=r"ProjWeight must be \[D, P\] = \[2, P\]"):
        run_op("lstmp", {**good, "ProjWeight": [rng.normal(size=(3, 3))]}, lod)
    with pytest.raises(ValueError, match="H0 needs C0"):
        run_op("lstmp", {**good, "H0": [rng.normal(size=(2, 3))]}, lod)
    with pytest.raises(ValueError, match=r"H0 must be \[2, 3\]"):
        run_op("lstmp", {**good, "H0": [rng.normal(size=(2, 2))],
                         "C0": [rng.normal(size=(2, 2))]}, lod)
    with pytest.raises(ValueError, match="proj_activation 'softmax'"):
        run_op("lstmp", good, {"proj_activation": "softmax", **lod})
    with pytest.raises(ValueError, match=r"Input\(Input\) has no LoD"):
        run_op("lstmp", good, {})


# ---------------------------------------------------------------------------------------------
# cudnn_lstm


def cudnn_weights(rng, input_size, hidden, layers, dirs):
    """Per pseudo-layer (W_ih, W_hh, b_ih, b_hh) and the flat blob in cuDNN's layout."""
    prm = []
    for layer in range(layers):
        width = input_size if layer == 0 else dirs * hidden
        for _ in range(dirs):
            prm.append((rng.normal(size=(4 * hidden, width)) * 0.5,
                        rng.normal(size=(4 * hidden, hidden)) * 0.5,
                        rng.normal(size=4 * hidden), rng.normal(size=4 * hidden)))
    flat = np.concatenate([a.reshape(-1) for m in prm for a in m[:2]]
                          + [a for m in prm for a in m[2:]])
    return prm, flat


def cudnn_lstm_by_loops(x, h0, c0, prm, layers, dirs):
    """Batch element by batch element, step by step, with the gates picked out by name."""
    n_t, batch, _ = x.shape
    hid = h0.shape[2]
    sig = ACT["sigmoid"]
    last_h, last_c = np.zeros_like(h0), np.zeros_like(c0)
    inp = x
    for layer in range(layers):
        out = np.zeros((n_t, batch, dirs * hid))
        for dr in range(dirs):
            k = layer * dirs + dr
            w_ih, w_hh, b_ih, b_hh = prm[k]
            for bi in range(batch):
                h, c = h0[k, bi].copy(), c0[k, bi].copy()
                for t in (range(n_t - 1, -1, -1) if dr else range(n_t)):
                    z = w_ih @ inp[t, bi] + b_ih + w_hh @ h + b_hh
                    gate = {name: z[j * hid:(j + 1) * hid] for j, name in enumerate("ifco")}
                    c = sig(gate["f"]) * c + sig(gate["i"]) * np.tanh(gate["c"])
                    h = sig(gate["o"]) * np.tanh(c)
                    out[t, bi, dr * hid:(dr + 1) * hid] = h
                last_h[k, bi], last_c[k, bi] = h, c
        inp = out
    return inp, last_h, last_c


@pytest.mark.parametrize("layers, bidirec", [(1, False), (3, False), (1, True), (2, True)])
def test_cudnn_lstm_matches_a_loop_reference(layers, bidirec):
    rng = np.random.default_rng(11)
    n_t, batch, isz, hid = 4, 3, 5, 2
    dirs = 2 if bidirec else 1
    prm, flat = cudnn_weights(rng, isz, hid, layers, dirs)
    assert flat.size == cudnn_lstm_weight_size(isz, hid, layers, bidirec)
    x = rng.normal(size=(n_t, batch, isz))
    h0, c0 = rng.normal(size=(2, layers * dirs, batch, hid))
    res = run_op("cudnn_lstm", {"Input": [x], "InitH": [h0], "InitC": [c0], "W": [flat]},
                 {"input_size": isz, "hidden_size": hid, "num_layers": layers,
                  "is_bidirec": bidirec})
    out, lh, lc = cudnn_lstm_by_loops(x, h0, c0, prm, layers, dirs)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["LastH"][0], lh, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["LastC"][0], lc, rtol=1e-12, atol=1e-12)
    assert res["Reserve"][0].size == 0 and res["StateOut"][0].dtype == np.uint8


def _as_lstm_op(w_ih, w_hh, b_ih, b_hh, x_b):
    """One cuDNN direction as the lstm op's inputs: gates [i f c o] -> [c i f o]."""
    hid = w_hh.shape[1]
    order = np.concatenate([np.arange(2 * hid, 3 * hid), np.arange(0, 2 * hid),
                            np.arange(3 * hid, 4 * hid)])
    z = x_b @ w_ih.T + b_ih + b_hh
    return z[:, order], w_hh.T[:, order], order


@pytest.mark.parametrize("bidirec", [False, True])
def test_one_cudnn_layer_is_the_lstm_op(bidirec):
    """Each batch element a sequence of the lstm op (reverse for the backward direction);
    the gradients of W (through the blob's layout) and of Input agree too."""
    rng = np.random.default_rng(13)
    n_t, batch, isz, hid = 5, 2, 3, 4
    dirs = 2 if bidirec else 1
    prm, flat = cudnn_weights(rng, isz, hid, 1, dirs)
    x = rng.normal(size=(n_t, batch, isz))
    h0, c0 = rng.normal(size=(2, dirs, batch, hid))
    attrs = {"input_size": isz, "hidden_size": hid, "num_layers": 1, "is_bidirec": bidirec}
    ins = {"Input": [x], "InitH": [h0], "InitC": [c0], "W": [flat]}
    res = run_op("cudnn_lstm", ins, attrs)
    d_out = rng.normal(size=res["Out"][0].shape)
    grads = run_op("cudnn_lstm_grad", {**ins, "Out@GRAD": [d_out]}, attrs,
                   ("Input@GRAD", "W@GRAD"))
    x_rows = x.transpose(1, 0, 2).reshape(batch * n_t, isz)  # sequence b: rows b*T ... b*T+T-1
    lod = {"_lods": {"Input": [(tuple(range(0, batch * n_t + 1, n_t)),)]}}
    dx = np.zeros_like(x)
    for dr in range(dirs):
        w_ih, w_hh, b_ih, b_hh = prm[dr]
        inp, weight, order = _as_lstm_op(w_ih, w_hh, b_ih, b_hh, x_rows)
        lins = {"Input": [inp], "Weight": [weight], "H0": [h0[dr]], "C0": [c0[dr]]}
        lattrs = {"use_peepholes": False, "is_reverse": dr == 1, **lod}
        ref = run_op("lstm", lins, lattrs)
        hidden = ref["Hidden"][0].reshape(batch, n_t, hid).transpose(1, 0, 2)
        np.testing.assert_allclose(res["Out"][0][:, :, dr * hid:(dr + 1) * hid], hidden,
                                   rtol=1e-12, atol=1e-12)
        last = 0 if dr == 1 else n_t - 1
        np.testing.assert_allclose(res["LastH"][0][dr], hidden[last], rtol=1e-12)
        dh = d_out[:, :, dr * hid:(dr + 1) * hid].transpose(1, 0, 2).reshape(-1, hid)
        lg = run_op("lstm_grad", {**lins, "Hidden": ref["Hidden"], "Cell": ref["Cell"],
                                  "BatchGate": ref["BatchGate"],
                                  "BatchCellPreAct": ref["BatchCellPreAct"],
                                  "Hidden@GRAD": [dh], "Cell@GRAD": [None]}, lattrs,
                    ("Input@GRAD", "Weight@GRAD"))
        dz = np.zeros_like(lg["Input@GRAD"][0])
        dz[:, order] = lg["Input@GRAD"][0]  # back to [i f c o]
        # W_hh's gradient sits right after W_ih's in the blob (pseudo-layer dr)
        off = dr * 4 * hid * (isz + hid) + 4 * hid * isz
        dw_hh = grads["W@GRAD"][0][off:off + 4 * hid * hid].reshape(4 * hid, hid)
        np.testing.assert_allclose(dw_hh.T[:, order], lg["Weight@GRAD"][0], rtol=1e-10)
        dx += (dz @ w_ih).reshape(batch, n_t, isz).transpose(1, 0, 2)
    np.testing.assert_allclose(grads["Input@GRAD"][0], dx, rtol=1e-10, atol=1e-12)


def test_cudnn_lstm_errors():
    rng = np.random.default_rng(0)
    x, h = rng.normal(size=(2, 3, 4)), rng.normal(size=(1, 3, 2))
    size = cudnn_lstm_weight_size(4, 2, 1, False)
    attrs = {"input_size": 4, "hidden_size": 2, "num_layers": 1}
    ins = {"Input": [x], "InitH": [h], "InitC": [h], "W": [rng.normal(size=size)]}
    with pytest.raises(ValueError, match=f"W must hold {size} values"):
        run_op("cudnn_lstm", {**ins, "W": [rng.normal(size=size + 1)]}, attrs)
    with pytest.raises(ValueError, match=r"InitH must be \[num_layers \* dirs, B, hidden_size\] "
                                         r"= \[2, 3, 2\]"):
        run_op("cudnn_lstm", ins, {**attrs, "is_bidirec": True})
    with pytest.raises(ValueError, match="input_size 5 does not match"):
        run_op("cudnn_lstm", ins, {**attrs, "input_size": 5})
    with pytest.raises(ValueError, match="time-major"):
        run_op("cudnn_lstm", {**ins, "Input": [x[0]]}, attrs)
    two = cudnn_lstm_weight_size(4, 2, 2, False)
    deep = {"Input": [x], "InitH": [np.zeros((2, 3, 2))], "InitC": [np.zeros((2, 3, 2))],
            "W": [rng.normal(size=two)]}
    with pytest.raises(ValueError, match=r"dropout_prob must be in \[0, 1\)"):
        run_op("cudnn_lstm", deep, {**attrs, "num_layers": 2, "dropout_prob": 1.0})
    # in test mode, or with a single layer, cuDNN applies no dropout: no masks
    for case in ({**attrs, "num_layers": 2, "dropout_prob": 0.2, "is_test": True},
                 {**attrs, "dropout_prob": 0.2}):
        assert run_op("cudnn_lstm", deep if case.get("is_test") else ins,
                      case)["Reserve"][0].size == 0
    with pytest.raises(ValueError, match="Reserve .the masks. is not given"):
        run_op("cudnn_lstm_grad", {**deep, "Out@GRAD": [np.zeros((4, 3, 2))]},
               {**attrs, "num_layers": 2, "dropout_prob": 0.2})


@pytest.mark.parametrize("bidirec", [False, True])
def test_cudnn_lstm_dropout_between_layers(bidirec):
    """Two layers with dropout: the second layer reads the first's output times the mask
    in Reserve (0 or 1 / (1 - p), about p of them 0); the same as two one-layer ops with the
    mask applied between them; the top layer's output is not dropped."""
    rng = np.random.default_rng(21)
    n_t, batch, isz, hid, p = 6, 5, 3, 4, 0.3
    dirs = 2 if bidirec else 1
    prm, flat = cudnn_weights(rng, isz, hid, 2, dirs)
    x = rng.normal(size=(n_t, batch, isz))
    h0, c0 = rng.normal(size=(2, 2 * dirs, batch, hid))
    attrs = {"input_size": isz, "hidden_size": hid, "num_layers": 2, "is_bidirec": bidirec,
             "dropout_prob": p, "seed": 7}
    res = run_op("cudnn_lstm", {"Input": [x], "InitH": [h0], "InitC": [c0], "W": [flat]}, attrs)
    mask = res["Reserve"][0]
    assert mask.shape == (1, n_t, batch, dirs * hid)
    assert set(np.unique(mask).round(6)) == {0.0, round(1 / (1 - p), 6)}
    assert 0.15 < (mask == 0).mean() < 0.45
    # the same masks again for the same seed without an executor stream (the grad op's and
    # the gradient checker's forward runs), another seed other masks
    again = run_op("cudnn_lstm", {"Input": [x], "InitH": [h0], "InitC": [c0], "W": [flat]},
                   attrs)["Reserve"][0]
    np.testing.assert_array_equal(again, mask)
    first, _, _ = cudnn_lstm_by_loops(x, h0[:dirs], c0[:dirs], prm[:dirs], 1, dirs)
    out, lh, lc = cudnn_lstm_by_loops(first * mask[0], h0[dirs:], c0[dirs:], prm[dirs:], 1,
                                      dirs)
    np.testing.assert_allclose(res["Out"][0], out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res["LastH"][0][dirs:], lh, rtol=1e-12, atol=1e-12)
