"""Recurrent kernels over LoD sequences: ``gru`` and ``lstm`` (Fluid's ``dynamic_gru`` and
``dynamic_lstm``).

Every sequence of the input's last LoD level is one recurrence; the steps of all sequences run
together, one matrix product a time step over the sequences still running (Fluid batches them
the same way, sorted by length). ``is_reverse`` runs each sequence from its end.

GRU (Paddle's ``gru_compute``): the input row ``x`` holds the projections of the update,
reset and candidate gates (``[u | r | c]``, ``3D`` wide); with ``h`` the previous state,

    u = gate_act(x_u + h W_u + b_u),  r = gate_act(x_r + h W_r + b_r)
    c = act(x_c + (r * h) W_c + b_c)
    h' = (1 - u) * h + u * c          (origin_mode: h' = u * h + (1 - u) * c)

``Weight`` is ``[D, 3D]`` as Fluid stores it: its first ``2D * D`` values are ``[W_u | W_r]``
(``[D, 2D]``) and the last ``D * D`` are ``W_c`` (``[D, D]``), so weights trained by real
Fluid load unchanged. ``BatchGate`` (the activated gates), ``BatchResetHiddenPrev`` (``r * h``)
and ``BatchHidden`` (each row's previous state) are kept, in row order, for the gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register
from .selected_rows import grad_maker, grad_slots
from .sequence_ops import input_lod

_ACTS = ("sigmoid", "tanh", "relu", "identity")
_GRU_ATTRS = {"activation": "tanh", "gate_activation": "sigmoid", "is_reverse": False,
              "origin_mode": False}


def _act(xp: Any, name: str, z: Any) -> Any:
    if name == "sigmoid":
        return 1.0 / (1.0 + xp.exp(-z))
    if name == "tanh":
        return xp.tanh(z)
    if name == "relu":
        return xp.maximum(z, 0)
    return z


def _act_grad(name: str, y: Any) -> Any:
    """The activation's derivative, from its output."""
    if name == "sigmoid":
        return y * (1 - y)
    if name == "tanh":
        return 1 - y * y
    if name == "relu":
        return (y > 0).astype(y.dtype)
    return 1.0


def _check_acts(attrs: dict, op: str) -> tuple[str, str]:
    act, gate = str(attrs.get("activation", "tanh")), str(attrs.get("gate_activation",
                                                                    "sigmoid"))
    for name in (act, gate):
        if name not in _ACTS:
            raise ValueError(f"{op}: activation {name!r} is not one of {_ACTS}")
    return act, gate


def time_steps(offsets: tuple, reverse: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each time step: the sequences still running and the row each reads at that step
    (from the end of the sequence when ``reverse``)."""
    o = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(o)
    steps = []
    for t in range(int(lengths.max()) if lengths.size else 0):
        seqs = np.flatnonzero(lengths > t)
        rows = (o[1:][seqs] - 1 - t) if reverse else (o[:-1][seqs] + t)
        steps.append((seqs, rows))
    return steps


def _split_weight(w: Any, d: int) -> tuple[Any, Any]:
    flat = w.reshape(-1)
    return flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)


@register("gru", ("Input", "H0", "Weight", "Bias"),
          ("BatchGate", "BatchResetHiddenPrev", "BatchHidden", "Hidden"), _GRU_ATTRS,
          optional=("H0", "Bias"), lod="kernel",
          grad=grad_maker(("Input", "H0", "Weight", "Bias", "Hidden", "BatchGate",
                           "BatchResetHiddenPrev", "BatchHidden"), ("Hidden",),
                          ("Input", "H0", "Weight", "Bias")))
def gru(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Hidden ``[T, D]``: the GRU state after every row of every sequence (see the module
    docstring); it keeps the input's LoD."""
    x, w = ins["Input"][0], ins["Weight"][0]
    h0 = (ins.get("H0") or [None])[0]
    bias = (ins.get("Bias") or [None])[0]
    xp = array_module(x, w)
    act, gate_act = _check_acts(attrs, "gru")
    lod = input_lod(attrs, "Input", "gru")
    d = int(w.shape[0])
    if tuple(w.shape) != (d, 3 * d) or x.shape[1] != 3 * d:
        raise ValueError(f"gru: Weight must be [D, 3D] and Input [T, 3D]; got Weight "
                         f"{list(w.shape)}, Input {list(x.shape)}")
    n_seq = len(lod[-1]) - 1
    if h0 is not None and tuple(h0.shape) != (n_seq, d):
        raise ValueError(f"gru: H0 must be [{n_seq}, {d}] (a state per sequence), got "
                         f"{list(h0.shape)}")
    wg, wc = _split_weight(w, d)
    z = x + (bias.reshape(1, -1) if bias is not None else 0)
    gates = xp.zeros_like(z)
    reset_prev = xp.zeros((x.shape[0], d), dtype=x.dtype)
    prev = xp.zeros((x.shape[0], d), dtype=x.dtype)
    hidden = xp.zeros((x.shape[0], d), dtype=x.dtype)
    state = h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    state = state.copy()
    origin = bool(attrs.get("origin_mode", False))
    for seqs, rows in time_steps(lod[-1], bool(attrs.get("is_reverse", False))):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        h = state[s]
        ur = _act(xp, gate_act, z[r, :2 * d] + h @ wg)
        u, rr = ur[:, :d], ur[:, d:]
        rh = rr * h
        c = _act(xp, act, z[r, 2 * d:] + rh @ wc)
        new = u * h + (1 - u) * c if origin else (1 - u) * h + u * c
        gates[r, :2 * d], gates[r, 2 * d:] = ur, c
        reset_prev[r], prev[r], hidden[r] = rh, h, new
        state[s] = new
    return {"Hidden": [hidden], "BatchGate": [gates], "BatchResetHiddenPrev": [reset_prev],
            "BatchHidden": [prev],
            LOD_KEY: {"Hidden": [lod], "BatchGate": [lod], "BatchResetHiddenPrev": [lod],
                      "BatchHidden": [lod]}}


@register("gru_grad", *grad_slots(("Input", "H0", "Weight", "Bias", "Hidden", "BatchGate",
                                   "BatchResetHiddenPrev", "BatchHidden"), ("Hidden",),
                                  ("Input", "H0", "Weight", "Bias")),
          _GRU_ATTRS, optional=("H0", "Bias"), lod="kernel")
def gru_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time over every sequence, from its last step to its first."""
    x, w = ins["Input"][0], ins["Weight"][0]
    h0 = (ins.get("H0") or [None])[0]
    gates, reset_prev = ins["BatchGate"][0], ins["BatchResetHiddenPrev"][0]
    prev = ins["BatchHidden"][0]
    dhidden = ins["Hidden" + GRAD][0]
    xp = array_module(x, w)
    act, gate_act = _check_acts(attrs, "gru_grad")
    lod = input_lod(attrs, "Input", "gru_grad")
    d = int(w.shape[0])
    n_seq = len(lod[-1]) - 1
    wg, wc = _split_weight(w, d)
    dz = xp.zeros_like(x)
    dwg, dwc = xp.zeros_like(wg), xp.zeros_like(wc)
    carry = xp.zeros((n_seq, d), dtype=x.dtype)  # dL/dh flowing back from later steps
    dh_all = dhidden if dhidden is not None else xp.zeros((x.shape[0], d), dtype=x.dtype)
    origin = bool(attrs.get("origin_mode", False))
    for seqs, rows in reversed(time_steps(lod[-1], bool(attrs.get("is_reverse", False)))):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        dh = dh_all[r] + carry[s]
        h, u, rr, c = prev[r], gates[r, :d], gates[r, d:2 * d], gates[r, 2 * d:]
        if origin:
            du, dc, dhp = dh * (h - c), dh * (1 - u), dh * u
        else:
            du, dc, dhp = dh * (c - h), dh * u, dh * (1 - u)
        dzc = dc * _act_grad(act, c)
        dwc += reset_prev[r].T @ dzc
        drh = dzc @ wc.T
        dhp = dhp + drh * rr
        dzur = xp.concatenate([du * _act_grad(gate_act, u),
                               drh * h * _act_grad(gate_act, rr)], axis=1)
        dwg += h.T @ dzur
        dhp = dhp + dzur @ wg.T
        dz[r, :2 * d], dz[r, 2 * d:] = dzur, dzc
        carry[s] = dhp
    res: dict = {LOD_KEY: {"Input" + GRAD: [lod]}}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [dz]
    if "Weight" + GRAD in outs:
        res["Weight" + GRAD] = [xp.concatenate([dwg.reshape(-1), dwc.reshape(-1)]).reshape(
            w.shape)]
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dz.sum(axis=0, keepdims=True)]
    if "H0" + GRAD in outs and h0 is not None:
        res["H0" + GRAD] = [carry]
    return res


# ---------------------------------------------------------------------------------------------
# lstm (Fluid's dynamic_lstm). The input row holds the preactivations of the candidate, input,
# forget and output gates, in that order (``[c~ | i | f | o]``, 4D wide, Paddle's
# lstm_compute); ``Weight`` is ``[D, 4D]``; ``Bias`` is ``[1, 4D]``, or ``[1, 7D]`` with the
# peephole weights ``W_ic, W_fc, W_oc`` after the gate biases:
#
#     c~ = cand_act(x_c + h W_c + b_c)
#     i = gate_act(x_i + h W_i + b_i + W_ic * c),  f = gate_act(x_f + h W_f + b_f + W_fc * c)
#     c' = c~ * i + c * f
#     o = gate_act(x_o + h W_o + b_o + W_oc * c'),  h' = o * cell_act(c')

_LSTM_ATTRS = {"use_peepholes": True, "is_reverse": False, "gate_activation": "sigmoid",
               "cell_activation": "tanh", "candidate_activation": "tanh"}
_LSTM_IN = ("Input", "H0", "C0", "Weight", "Bias")


def _lstm_acts(attrs: dict, op: str) -> tuple[str, str, str]:
    names = tuple(str(attrs.get(k, _LSTM_ATTRS[k])) for k in
                  ("gate_activation", "cell_activation", "candidate_activation"))
    for name in names:
        if name not in _ACTS:
            raise ValueError(f"{op}: activation {name!r} is not one of {_ACTS}")
    return names  # type: ignore[return-value]


def _lstm_setup(ins: dict, attrs: dict, op: str):
    x, w = ins["Input"][0], ins["Weight"][0]
    bias = (ins.get("Bias") or [None])[0]
    xp = array_module(x, w)
    lod = input_lod(attrs, "Input", op)
    d = int(w.shape[0])
    if tuple(w.shape) != (d, 4 * d) or x.shape[1] != 4 * d:
        raise ValueError(f"{op}: Weight must be [D, 4D] and Input [T, 4D]; got Weight "
                         f"{list(w.shape)}, Input {list(x.shape)}")
    peep = bool(attrs.get("use_peepholes", True))
    width = 7 * d if peep else 4 * d
    if bias is not None and bias.size != width:
        raise ValueError(f"{op}: Bias must be [1, {width}] (use_peepholes={peep}), got "
                         f"{list(bias.shape)}")
    if peep and bias is None:
        raise ValueError(f"{op}: use_peepholes needs the Bias, whose last 3D values are the "
                         "peephole weights")
    b = bias.reshape(-1) if bias is not None else None
    n_seq = len(lod[-1]) - 1
    for name in ("H0", "C0"):
        v = (ins.get(name) or [None])[0]
        if v is not None and tuple(v.shape) != (n_seq, d):
            raise ValueError(f"{op}: {name} must be [{n_seq}, {d}] (a state per sequence), "
                             f"got {list(v.shape)}")
    return x, w, b, xp, lod, d, peep, n_seq


@register("lstm", _LSTM_IN, ("Hidden", "Cell", "BatchGate", "BatchCellPreAct"), _LSTM_ATTRS,
          optional=("H0", "C0", "Bias"), lod="kernel",
          grad=grad_maker((*_LSTM_IN, "Hidden", "Cell", "BatchGate"), ("Hidden", "Cell"),
                          ("Input", "H0", "C0", "Weight", "Bias")))
def lstm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Hidden and Cell ``[T, D]`` after every row of every sequence; both keep the LoD.
    BatchGate holds the activated gates (row order), BatchCellPreAct the cell states."""
    x, w, b, xp, lod, d, peep, n_seq = _lstm_setup(ins, attrs, "lstm")
    gate_act, cell_act, cand_act = _lstm_acts(attrs, "lstm")
    h0, c0 = (ins.get("H0") or [None])[0], (ins.get("C0") or [None])[0]
    z = x + (b[:4 * d].reshape(1, -1) if b is not None else 0)
    wi, wf, wo = ((b[4 * d:5 * d], b[5 * d:6 * d], b[6 * d:]) if peep else (0, 0, 0))
    h = (h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)).copy()
    c = (c0 if c0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)).copy()
    hidden = xp.zeros((x.shape[0], d), dtype=x.dtype)
    cell = xp.zeros_like(hidden)
    gates = xp.zeros_like(x)
    for seqs, rows in time_steps(lod[-1], bool(attrs.get("is_reverse", False))):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        g = z[r] + h[s] @ w
        cand = _act(xp, cand_act, g[:, :d])
        i = _act(xp, gate_act, g[:, d:2 * d] + wi * c[s])
        f = _act(xp, gate_act, g[:, 2 * d:3 * d] + wf * c[s])
        new_c = cand * i + c[s] * f
        o = _act(xp, gate_act, g[:, 3 * d:] + wo * new_c)
        new_h = o * _act(xp, cell_act, new_c)
        gates[r] = xp.concatenate([cand, i, f, o], axis=1)
        hidden[r], cell[r] = new_h, new_c
        h[s], c[s] = new_h, new_c
    return {"Hidden": [hidden], "Cell": [cell], "BatchGate": [gates], "BatchCellPreAct": [cell],
            LOD_KEY: {"Hidden": [lod], "Cell": [lod], "BatchGate": [lod],
                      "BatchCellPreAct": [lod]}}


@register("lstm_grad", *grad_slots((*_LSTM_IN, "Hidden", "Cell", "BatchGate"),
                                   ("Hidden", "Cell"), ("Input", "H0", "C0", "Weight", "Bias")),
          _LSTM_ATTRS, optional=("H0", "C0", "Bias"), lod="kernel")
def lstm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time (Paddle's lstm backward, peepholes included)."""
    x, w, b, xp, lod, d, peep, n_seq = _lstm_setup(ins, attrs, "lstm_grad")
    gate_act, cell_act, cand_act = _lstm_acts(attrs, "lstm_grad")
    h0, c0 = (ins.get("H0") or [None])[0], (ins.get("C0") or [None])[0]
    hidden, cell, gates = ins["Hidden"][0], ins["Cell"][0], ins["BatchGate"][0]
    zeros = xp.zeros((x.shape[0], d), dtype=x.dtype)
    dh_all = ins["Hidden" + GRAD][0] if ins["Hidden" + GRAD][0] is not None else zeros
    dc_all = ins["Cell" + GRAD][0] if ins["Cell" + GRAD][0] is not None else zeros
    wi, wf, wo = ((b[4 * d:5 * d], b[5 * d:6 * d], b[6 * d:]) if peep else (0, 0, 0))
    steps = time_steps(lod[-1], bool(attrs.get("is_reverse", False)))
    h_init = h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    c_init = c0 if c0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    # the row each sequence read at the step before (None: the initial state)
    prev_rows: list[np.ndarray | None] = [None]
    last = {}
    for seqs, rows in steps[:-1]:
        last.update(zip(seqs.tolist(), rows.tolist(), strict=True))
        prev_rows.append(np.asarray([last[q] for q in steps[len(prev_rows)][0]]))
    dz = xp.zeros_like(x)
    dw = xp.zeros_like(w)
    dpeep = xp.zeros((3, d), dtype=x.dtype)
    carry_h = xp.zeros((n_seq, d), dtype=x.dtype)
    carry_c = xp.zeros((n_seq, d), dtype=x.dtype)
    for (seqs, rows), before in zip(reversed(steps), reversed(prev_rows), strict=True):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        if before is None:
            hp, cp = h_init[s], c_init[s]
        else:
            hp, cp = hidden[xp.asarray(before)], cell[xp.asarray(before)]
        cand, i, f, o = (gates[r, k * d:(k + 1) * d] for k in range(4))
        new_c = cell[r]
        act_c = _act(xp, cell_act, new_c)
        dh = dh_all[r] + carry_h[s]
        do = dh * act_c * _act_grad(gate_act, o)
        dc = dc_all[r] + carry_c[s] + dh * o * _act_grad(cell_act, act_c) + do * wo
        dcand = dc * i * _act_grad(cand_act, cand)
        di = dc * cand * _act_grad(gate_act, i)
        df = dc * cp * _act_grad(gate_act, f)
        carry_c[s] = dc * f + di * wi + df * wf
        if peep:
            dpeep += xp.stack([(di * cp).sum(0), (df * cp).sum(0), (do * new_c).sum(0)])
        dg = xp.concatenate([dcand, di, df, do], axis=1)
        dw += hp.T @ dg
        carry_h[s] = dg @ w.T
        dz[r] = dg
    res: dict = {LOD_KEY: {"Input" + GRAD: [lod]}}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [dz]
    if "Weight" + GRAD in outs:
        res["Weight" + GRAD] = [dw]
    if "Bias" + GRAD in outs and b is not None:
        gate_bias = dz.sum(axis=0)
        full = xp.concatenate([gate_bias, dpeep.reshape(-1)]) if peep else gate_bias
        res["Bias" + GRAD] = [full.reshape(ins["Bias"][0].shape)]
    if "H0" + GRAD in outs and h0 is not None:
        res["H0" + GRAD] = [carry_h]
    if "C0" + GRAD in outs and c0 is not None:
        res["C0" + GRAD] = [carry_c]
    return res


# ---------------------------------------------------------------------------------------------
# gru_unit and lstm_unit: one step of a GRU or an LSTM on plain [N, ...] tensors (Fluid's
# gru_unit_op.h and lstm_unit_op.h), the cells of hand-written recurrences.

#: gru_unit's activation attrs are Fluid's enum
_UNIT_ACTS = {0: "identity", 1: "sigmoid", 2: "tanh", 3: "relu"}
_GRU_UNIT_ATTRS = {"activation": 2, "gate_activation": 1, "origin_mode": False}
_GRU_UNIT_FWD = ("Input", "HiddenPrev", "Weight", "Bias", "Gate", "ResetHiddenPrev", "Hidden")


def _unit_act(attrs: dict, name: str) -> str:
    value = attrs.get(name, _GRU_UNIT_ATTRS[name])
    act = _UNIT_ACTS.get(value, value) if not isinstance(value, bool) else None
    if act not in _ACTS:
        raise ValueError(f"gru_unit: {name} {value!r} is not one of {_UNIT_ACTS} (Fluid's "
                         "enum) or their names")
    return act


def _gru_unit_shapes(x: Any, h_p: Any, w: Any) -> int:
    d = int(w.shape[0])
    if tuple(w.shape) != (d, 3 * d) or x.ndim != 2 or x.shape[1] != 3 * d or \
            tuple(h_p.shape) != (x.shape[0], d):
        raise ValueError(f"gru_unit: Input must be [N, 3D], HiddenPrev [N, D] and Weight "
                         f"[D, 3D]; got Input {list(x.shape)}, HiddenPrev {list(h_p.shape)}, "
                         f"Weight {list(w.shape)}")
    return d


@register("gru_unit", ("Input", "HiddenPrev", "Weight", "Bias"),
          ("Gate", "ResetHiddenPrev", "Hidden"), _GRU_UNIT_ATTRS, optional=("Bias",),
          grad=grad_maker(_GRU_UNIT_FWD, ("Hidden",), ("Input", "HiddenPrev", "Weight", "Bias")))
def gru_unit(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Hidden ``[N, D]``: one GRU step from HiddenPrev (the gru recurrence above); Gate holds
    the activated ``[u | r | c]`` and ResetHiddenPrev ``r * h_prev``."""
    x, h_p, w = ins["Input"][0], ins["HiddenPrev"][0], ins["Weight"][0]
    bias = (ins.get("Bias") or [None])[0]
    xp = array_module(x, w)
    d = _gru_unit_shapes(x, h_p, w)
    act, gate_act = _unit_act(attrs, "activation"), _unit_act(attrs, "gate_activation")
    wg, wc = _split_weight(w, d)
    z = x + (bias.reshape(1, -1) if bias is not None else 0)
    ur = _act(xp, gate_act, z[:, :2 * d] + h_p @ wg)
    u, r = ur[:, :d], ur[:, d:]
    rh = r * h_p
    c = _act(xp, act, z[:, 2 * d:] + rh @ wc)
    h = u * h_p + (1 - u) * c if attrs.get("origin_mode") else (1 - u) * h_p + u * c
    return {"Gate": [xp.concatenate([ur, c], axis=1)], "ResetHiddenPrev": [rh], "Hidden": [h]}


@register("gru_unit_grad", *grad_slots(_GRU_UNIT_FWD, ("Hidden",),
                                       ("Input", "HiddenPrev", "Weight", "Bias")),
          _GRU_UNIT_ATTRS, optional=("Bias", "Hidden", "Hidden" + GRAD))
def gru_unit_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x, h_p, w = ins["Input"][0], ins["HiddenPrev"][0], ins["Weight"][0]
    gate, rh = ins["Gate"][0], ins["ResetHiddenPrev"][0]
    xp = array_module(x, w)
    d = _gru_unit_shapes(x, h_p, w)
    act, gate_act = _unit_act(attrs, "activation"), _unit_act(attrs, "gate_activation")
    wg, wc = _split_weight(w, d)
    dh = ins.get("Hidden" + GRAD, [None])[0]
    dh = xp.zeros_like(h_p) if dh is None else dh
    u, r, c = gate[:, :d], gate[:, d:2 * d], gate[:, 2 * d:]
    if attrs.get("origin_mode"):
        du, dc, dhp = dh * (h_p - c), dh * (1 - u), dh * u
    else:
        du, dc, dhp = dh * (c - h_p), dh * u, dh * (1 - u)
    dzc = dc * _act_grad(act, c)
    drh = dzc @ wc.T
    dzur = xp.concatenate([du * _act_grad(gate_act, u), drh * h_p * _act_grad(gate_act, r)],
                          axis=1)
    res = {}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [xp.concatenate([dzur, dzc], axis=1)]
    if "HiddenPrev" + GRAD in outs:
        res["HiddenPrev" + GRAD] = [dhp + drh * r + dzur @ wg.T]
    if "Weight" + GRAD in outs:
        res["Weight" + GRAD] = [xp.concatenate([(h_p.T @ dzur).reshape(-1),
                                                (rh.T @ dzc).reshape(-1)]).reshape(w.shape)]
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [xp.concatenate([dzur, dzc], axis=1).sum(axis=0, keepdims=True)]
    return res


def _lstm_unit_gates(x: Any, c_prev: Any, forget_bias: float) -> tuple:
    xp = array_module(x)
    d = c_prev.shape[1]
    if x.ndim != 2 or x.shape != (c_prev.shape[0], 4 * d):
        raise ValueError(f"lstm_unit: X must be [N, 4D] with C_prev [N, D]; got X "
                         f"{list(x.shape)}, C_prev {list(c_prev.shape)}")
    i = _act(xp, "sigmoid", x[:, :d])
    f = _act(xp, "sigmoid", x[:, d:2 * d] + forget_bias)
    o = _act(xp, "sigmoid", x[:, 2 * d:3 * d])
    g = xp.tanh(x[:, 3 * d:])
    return i, f, o, g


@register("lstm_unit", ("X", "C_prev"), ("C", "H"), {"forget_bias": 0.0},
          grad=grad_maker(("X", "C_prev", "C", "H"), ("C", "H"), ("X", "C_prev")))
def lstm_unit(ins: dict, attrs: dict, outs: tuple) -> dict:
    """One LSTM step: X ``[N, 4D]`` holds the input, forget, output and candidate
    preactivations (``[i | f | o | g]``, lstm_unit's order), ``c = f * c_prev + i * g`` with
    ``f = sigmoid(x_f + forget_bias)``, ``h = o * tanh(c)``."""
    x, c_prev = ins["X"][0], ins["C_prev"][0]
    i, f, o, g = _lstm_unit_gates(x, c_prev, float(attrs.get("forget_bias", 0.0)))
    c = f * c_prev + i * g
    return {"C": [c], "H": [o * array_module(c).tanh(c)]}


@register("lstm_unit_grad", *grad_slots(("X", "C_prev", "C", "H"), ("C", "H"), ("X", "C_prev")),
          {"forget_bias": 0.0}, optional=("H", "C" + GRAD, "H" + GRAD))
def lstm_unit_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    x, c_prev, c = ins["X"][0], ins["C_prev"][0], ins["C"][0]
    xp = array_module(x)
    i, f, o, g = _lstm_unit_gates(x, c_prev, float(attrs.get("forget_bias", 0.0)))
    dh = (ins.get("H" + GRAD) or [None])[0]
    dc = (ins.get("C" + GRAD) or [None])[0]
    tc = xp.tanh(c)
    dh = xp.zeros_like(c) if dh is None else dh
    dc = (xp.zeros_like(c) if dc is None else dc) + dh * o * (1 - tc * tc)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [xp.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                                           dh * tc * o * (1 - o), dc * i * (1 - g * g)],
                                          axis=1)]
    if "C_prev" + GRAD in outs:
        res["C_prev" + GRAD] = [dc * f]
    return res
