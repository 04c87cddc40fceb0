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
Fluid load unchanged. ``BatchGate`` (the activated gates ``[u | r | c]``),
``BatchResetHiddenPrev`` (``r * h``) and ``BatchHidden`` (the new state ``h'``) are kept for
the gradient in Fluid's batch order: time step after time step, the running sequences longest
first (:func:`batch_order`). The lstm and lstmp ops keep their ``Batch*`` outputs in the same
order. The gate sigmoids clamp their input to [-40, 13] as Fluid's math/detail kernels do
(gru, lstm, lstmp).
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


#: math/detail/activation_functions.h clamps a sigmoid's input to [-40, 13]
SIGMOID_THRESHOLD = (-40.0, 13.0)


def _act(xp: Any, name: str, z: Any, clip: bool = False) -> Any:
    """The activation ``name`` of ``z``; ``clip`` clamps a sigmoid's input to
    :data:`SIGMOID_THRESHOLD` as the gru/lstm kernels (math/detail) do, so a saturated gate is
    ``1 / (1 + e^-13)``, not 1."""
    if name == "sigmoid":
        if clip:
            z = xp.clip(z, *SIGMOID_THRESHOLD)
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


def _lstm_cell_grad(acts: tuple[str, str, str], cand: Any, i: Any, f: Any, o: Any,
                    c_prev: Any, new_c: Any, act_c: Any, dh: Any, dc: Any,
                    peeps: tuple = (0, 0, 0), cell_clip: float = 0.0) -> tuple:
    """One LSTM cell's backward (Paddle's ``lstm_kernel.h``), from the activated candidate and
    gates, the previous and new cell states and ``cell_act(new_c)``: given the gradients of the
    hidden output ``dh`` and of the new cell state ``dc`` (from later steps and outputs), the
    candidate's and the gates' pre-activation gradients and the previous cell state's,
    ``(dcand, di, df, do, dc_prev)``. A cell state at ``cell_clip`` passes no gradient."""
    gate_act, cell_act, cand_act = acts
    wi, wf, wo = peeps
    do = dh * act_c * _act_grad(gate_act, o)
    dc = dc + dh * o * _act_grad(cell_act, act_c) + do * wo
    if cell_clip > 0:
        dc = dc * (abs(new_c) < cell_clip)
    dcand = dc * i * _act_grad(cand_act, cand)
    di = dc * cand * _act_grad(gate_act, i)
    df = dc * c_prev * _act_grad(gate_act, f)
    return dcand, di, df, do, dc * f + di * wi + df * wf


def _check_acts(attrs: dict, op: str) -> tuple[str, str]:
    act, gate = str(attrs.get("activation", "tanh")), str(attrs.get("gate_activation",
                                                                    "sigmoid"))
    for name in (act, gate):
        if name not in _ACTS:
            raise ValueError(f"{op}: activation {name!r} is not one of {_ACTS}")
    return act, gate


def _split_weight(w: Any, d: int) -> tuple[Any, Any]:
    flat = w.reshape(-1)
    return flat[:2 * d * d].reshape(d, 2 * d), flat[2 * d * d:].reshape(d, d)


def batch_order(offsets: tuple, reverse: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fluid's sequence2batch order (math/sequence2batch.h): the sequences sorted by length,
    longest first (ties keep their order), and for each time step the sequences still running
    in that order with the row each reads. The ``Batch*`` outputs of gru, lstm and lstmp hold
    the steps' rows one after another in this order.

    Parameters
    ----------
    offsets : tuple
        The sequences' LoD offsets.
    reverse : bool
        Whether each sequence runs from its end.

    Returns
    -------
    list of (ndarray, ndarray)
        Per time step: the running sequences' indices and the input rows they read. The
        sequences running at a step are the first ones of those running at the step before.
    """
    o = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(o)
    # Fluid's std::sort is not stable, but libstdc++ sorts 16 sequences or fewer by insertion,
    # which keeps ties in order: a stable sort matches it there
    order = np.argsort(-lengths, kind="stable")
    steps = []
    for t in range(int(lengths.max()) if lengths.size else 0):
        seqs = order[lengths[order] > t]
        rows = (o[1:][seqs] - 1 - t) if reverse else (o[:-1][seqs] + t)
        steps.append((seqs, rows))
    return steps


def batch_lod(offsets: tuple, reverse: bool) -> tuple:
    """The LoD Fluid's ``LoDTensor2BatchFunctor`` sets on a ``BatchGate``: the offsets of the
    time steps' rows, the input row of every batch row, and the sequences' sort order (empty
    sequences last). Its levels are not nested sequences: Fluid's grad kernels read the
    batch layout from it (these recompute it from the Input's LoD).

    Parameters
    ----------
    offsets : tuple
        The sequences' LoD offsets.
    reverse : bool
        Whether each sequence runs from its end.

    Returns
    -------
    tuple of three tuples of int
        ``(batch_starts, seq2batch_idx, seq_order)``, as sequence2batch.h names them.
    """
    steps = batch_order(offsets, reverse)
    starts = np.cumsum([0] + [len(rows) for _, rows in steps])
    rows = np.concatenate([rows for _, rows in steps]) if steps else np.zeros(0, np.int64)
    # every sequence, the empty ones too (step 0 lists only those with a row)
    order = np.argsort(-np.diff(np.asarray(offsets, dtype=np.int64)), kind="stable")
    return (tuple(int(v) for v in starts), tuple(int(v) for v in rows),
            tuple(int(v) for v in order))


def _batch_slices(steps: list) -> list[slice]:
    """The rows of each time step in the ``Batch*`` outputs."""
    starts = np.cumsum([0] + [len(rows) for _, rows in steps])
    return [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]


@register("gru", ("Input", "H0", "Weight", "Bias"),
          ("BatchGate", "BatchResetHiddenPrev", "BatchHidden", "Hidden"), _GRU_ATTRS,
          optional=("H0", "Bias"), lod="kernel",
          grad=grad_maker(("Input", "H0", "Weight", "Bias", "Hidden", "BatchGate",
                           "BatchResetHiddenPrev", "BatchHidden"), ("Hidden",),
                          ("Input", "H0", "Weight", "Bias")))
def gru(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Hidden ``[T, D]``: the GRU state after every row of every sequence (see the module
    docstring); it keeps the input's LoD. The Batch* outputs are in Fluid's batch order
    (:func:`batch_order`)."""
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
    batch_hidden = xp.zeros((x.shape[0], d), dtype=x.dtype)
    hidden = xp.zeros((x.shape[0], d), dtype=x.dtype)
    state = h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    state = state.copy()
    origin = bool(attrs.get("origin_mode", False))
    start = 0
    for seqs, rows in batch_order(lod[-1], bool(attrs.get("is_reverse", False))):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        b = slice(start, start + len(rows))  # this step's rows of the Batch* outputs
        start += len(rows)
        h = state[s]
        ur = _act(xp, gate_act, z[r, :2 * d] + h @ wg, clip=True)
        u, rr = ur[:, :d], ur[:, d:]
        rh = rr * h
        c = _act(xp, act, z[r, 2 * d:] + rh @ wc, clip=True)
        new = u * h + (1 - u) * c if origin else (1 - u) * h + u * c
        gates[b, :2 * d], gates[b, 2 * d:] = ur, c
        reset_prev[b], batch_hidden[b], hidden[r] = rh, new, new
        state[s] = new
    # the Batch* rows are in batch order: as gru_op.cc, BatchGate (to_batch) and BatchHidden
    # (set_lod of BatchGate's) carry the batch LoD, BatchResetHiddenPrev none
    blod = batch_lod(lod[-1], bool(attrs.get("is_reverse", False)))
    return {"Hidden": [hidden], "BatchGate": [gates], "BatchResetHiddenPrev": [reset_prev],
            "BatchHidden": [batch_hidden],
            LOD_KEY: {"Hidden": [lod], "BatchGate": [blod], "BatchHidden": [blod]}}


@register("gru_grad", *grad_slots(("Input", "H0", "Weight", "Bias", "Hidden", "BatchGate",
                                   "BatchResetHiddenPrev", "BatchHidden"), ("Hidden",),
                                  ("Input", "H0", "Weight", "Bias")),
          _GRU_ATTRS, optional=("H0", "Bias"), lod="kernel")
def gru_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time over every sequence, from its last step to its first; the
    Batch* inputs are in the forward's batch order."""
    x, w = ins["Input"][0], ins["Weight"][0]
    h0 = (ins.get("H0") or [None])[0]
    gates, reset_prev = ins["BatchGate"][0], ins["BatchResetHiddenPrev"][0]
    batch_hidden = ins["BatchHidden"][0]
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
    steps = batch_order(lod[-1], bool(attrs.get("is_reverse", False)))
    starts = np.cumsum([0] + [len(rows) for _, rows in steps])
    for t in range(len(steps) - 1, -1, -1):
        seqs, rows = steps[t]
        s, r = xp.asarray(seqs), xp.asarray(rows)
        b = slice(int(starts[t]), int(starts[t + 1]))
        # the previous state: the previous step's hidden rows (its running sequences come
        # first in the same order), or H0 / zeros at the first step
        if t:
            h = batch_hidden[int(starts[t - 1]):int(starts[t - 1]) + len(rows)]
        elif h0 is not None:
            h = h0[s]
        else:
            h = xp.zeros((len(rows), d), dtype=x.dtype)
        dh = dh_all[r] + carry[s]
        u, rr, c = gates[b, :d], gates[b, d:2 * d], gates[b, 2 * d:]
        if origin:
            du, dc, dhp = dh * (h - c), dh * (1 - u), dh * u
        else:
            du, dc, dhp = dh * (c - h), dh * u, dh * (1 - u)
        dzc = dc * _act_grad(act, c)
        dwc += reset_prev[b].T @ dzc
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
          grad=grad_maker((*_LSTM_IN, "Hidden", "Cell", "BatchGate", "BatchCellPreAct"),
                          ("Hidden", "Cell"), ("Input", "H0", "C0", "Weight", "Bias")))
def lstm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Hidden and Cell ``[T, D]`` after every row of every sequence; both keep the LoD.
    BatchGate holds the activated gates ``[c~ | i | f | o]`` and BatchCellPreAct
    ``cell_act(c)`` (lstm_kernel.h's ``state_atv``, despite the name), both in Fluid's batch
    order (:func:`batch_order`); BatchGate has Fluid's batch LoD (:func:`batch_lod`)."""
    x, w, b, xp, lod, d, peep, n_seq = _lstm_setup(ins, attrs, "lstm")
    gate_act, cell_act, cand_act = _lstm_acts(attrs, "lstm")
    h0, c0 = (ins.get("H0") or [None])[0], (ins.get("C0") or [None])[0]
    reverse = bool(attrs.get("is_reverse", False))
    z = x + (b[:4 * d].reshape(1, -1) if b is not None else 0)
    wi, wf, wo = ((b[4 * d:5 * d], b[5 * d:6 * d], b[6 * d:]) if peep else (0, 0, 0))
    h = (h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)).copy()
    c = (c0 if c0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)).copy()
    hidden = xp.zeros((x.shape[0], d), dtype=x.dtype)
    cell, act_cell = xp.zeros_like(hidden), xp.zeros_like(hidden)
    gates = xp.zeros_like(x)
    steps = batch_order(lod[-1], reverse)
    for (seqs, rows), bs in zip(steps, _batch_slices(steps), strict=True):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        g = z[r] + h[s] @ w
        cand = _act(xp, cand_act, g[:, :d], clip=True)
        i = _act(xp, gate_act, g[:, d:2 * d] + wi * c[s], clip=True)
        f = _act(xp, gate_act, g[:, 2 * d:3 * d] + wf * c[s], clip=True)
        new_c = cand * i + c[s] * f
        o = _act(xp, gate_act, g[:, 3 * d:] + wo * new_c, clip=True)
        a_c = _act(xp, cell_act, new_c, clip=True)
        new_h = o * a_c
        gates[bs] = xp.concatenate([cand, i, f, o], axis=1)
        act_cell[bs] = a_c
        hidden[r], cell[r] = new_h, new_c
        h[s], c[s] = new_h, new_c
    # Fluid sets the batch LoD on BatchGate only (to_batch); BatchCellPreAct gets none
    return {"Hidden": [hidden], "Cell": [cell], "BatchGate": [gates],
            "BatchCellPreAct": [act_cell],
            LOD_KEY: {"Hidden": [lod], "Cell": [lod], "BatchGate": [batch_lod(lod[-1], reverse)]}}


@register("lstm_grad", *grad_slots((*_LSTM_IN, "Hidden", "Cell", "BatchGate", "BatchCellPreAct"),
                                   ("Hidden", "Cell"), ("Input", "H0", "C0", "Weight", "Bias")),
          _LSTM_ATTRS, optional=("H0", "C0", "Bias"), lod="kernel")
def lstm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time (Paddle's lstm backward, peepholes included). BatchGate
    and BatchCellPreAct are in the forward's batch order; Hidden and Cell in row order."""
    x, w, b, xp, lod, d, peep, n_seq = _lstm_setup(ins, attrs, "lstm_grad")
    gate_act, cell_act, cand_act = _lstm_acts(attrs, "lstm_grad")
    h0, c0 = (ins.get("H0") or [None])[0], (ins.get("C0") or [None])[0]
    hidden, cell, gates = ins["Hidden"][0], ins["Cell"][0], ins["BatchGate"][0]
    act_cell = ins["BatchCellPreAct"][0]
    zeros = xp.zeros((x.shape[0], d), dtype=x.dtype)
    dh_all = ins["Hidden" + GRAD][0] if ins["Hidden" + GRAD][0] is not None else zeros
    dc_all = ins["Cell" + GRAD][0] if ins["Cell" + GRAD][0] is not None else zeros
    wi, wf, wo = ((b[4 * d:5 * d], b[5 * d:6 * d], b[6 * d:]) if peep else (0, 0, 0))
    steps = batch_order(lod[-1], bool(attrs.get("is_reverse", False)))
    slices = _batch_slices(steps)
    h_init = h0 if h0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    c_init = c0 if c0 is not None else xp.zeros((n_seq, d), dtype=x.dtype)
    dz = xp.zeros_like(x)
    dw = xp.zeros_like(w)
    dpeep = xp.zeros((3, d), dtype=x.dtype)
    carry_h = xp.zeros((n_seq, d), dtype=x.dtype)
    carry_c = xp.zeros((n_seq, d), dtype=x.dtype)
    for t in range(len(steps) - 1, -1, -1):
        seqs, rows = steps[t]
        s, r, bs = xp.asarray(seqs), xp.asarray(rows), slices[t]
        if t == 0:
            hp, cp = h_init[s], c_init[s]
        else:
            # the sequences running now are the first of those running at step t - 1
            before = xp.asarray(steps[t - 1][1][:len(rows)])
            hp, cp = hidden[before], cell[before]
        cand, i, f, o = (gates[bs, k * d:(k + 1) * d] for k in range(4))
        new_c = cell[r]
        dcand, di, df, do, carry_c[s] = _lstm_cell_grad(
            (gate_act, cell_act, cand_act), cand, i, f, o, cp, new_c, act_cell[bs],
            dh_all[r] + carry_h[s], dc_all[r] + carry_c[s], (wi, wf, wo))
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


# ---------------------------------------------------------------------------------------------
# lstmp (Fluid's dynamic_lstmp, lstmp_op.h): the lstm above whose recurrent state is the
# projection ``r = proj(h ProjWeight)`` (``[T, P]``) instead of ``h``. ``Weight`` is ``[P, 4D]``
# and multiplies the previous projection, ``ProjWeight`` is ``[D, P]``, ``H0`` is the initial
# projection ``[N, P]`` and ``C0`` the initial cell ``[N, D]``; ``Bias`` is required
# (``[1, 7D]`` with peepholes, ``[1, 4D]`` without). ``cell_clip > 0`` clips the cell state
# to ``[-cell_clip, cell_clip]`` before the output gate reads it (lstm_kernel.h), and
# ``proj_clip > 0`` clips the projection after its activation.
#
# Fluid 1.8's kernel applies ``cell_activation`` to the projection whenever
# ``proj_activation`` is not ``identity`` (``ActCompute(cell_act, ...)`` in LSTMPKernel and
# LSTMPGradKernel): ``proj_activation`` only switches the activation on or off. That is kept,
# so weights trained by Fluid give the same projections.

_LSTMP_ATTRS = {**_LSTM_ATTRS, "proj_activation": "tanh", "cell_clip": 0.0, "proj_clip": 0.0}
_LSTMP_IN = ("Input", "H0", "C0", "Weight", "ProjWeight", "Bias")
_LSTMP_FWD = (*_LSTMP_IN, "Projection", "Cell", "BatchGate", "BatchCellPreAct", "BatchHidden")


def _lstmp_setup(ins: dict, attrs: dict, op: str):
    x, w, pw = ins["Input"][0], ins["Weight"][0], ins["ProjWeight"][0]
    bias = (ins.get("Bias") or [None])[0]
    xp = array_module(x, w, pw)
    lod = input_lod(attrs, "Input", op)
    if x.ndim != 2 or x.shape[1] % 4:
        raise ValueError(f"{op}: Input must be [T, 4D], got {list(x.shape)}")
    d = x.shape[1] // 4
    if pw.ndim != 2 or pw.shape[0] != d:
        raise ValueError(f"{op}: ProjWeight must be [D, P] = [{d}, P], got {list(pw.shape)}")
    p = int(pw.shape[1])
    if tuple(w.shape) != (p, 4 * d):
        raise ValueError(f"{op}: Weight must be [P, 4D] = [{p}, {4 * d}], got {list(w.shape)}")
    peep = bool(attrs.get("use_peepholes", True))
    width = 7 * d if peep else 4 * d
    if bias is None or bias.size != width:
        raise ValueError(f"{op}: Bias [1, {width}] is required (use_peepholes={peep}), got "
                         f"{None if bias is None else list(bias.shape)}")
    n_seq = len(lod[-1]) - 1
    h0, c0 = (ins.get("H0") or [None])[0], (ins.get("C0") or [None])[0]
    if h0 is not None and c0 is None:
        raise ValueError(f"{op}: H0 needs C0 as well (Fluid's lstmp op rule)")
    for name, v, width_ in (("H0", h0, p), ("C0", c0, d)):
        if v is not None and tuple(v.shape) != (n_seq, width_):
            raise ValueError(f"{op}: {name} must be [{n_seq}, {width_}] (a state per sequence), "
                             f"got {list(v.shape)}")
    acts = _lstm_acts(attrs, op)
    proj = str(attrs.get("proj_activation", "tanh"))
    if proj not in _ACTS:
        raise ValueError(f"{op}: proj_activation {proj!r} is not one of {_ACTS}")
    # 1.8's quirk (see above): a non-identity proj_activation means cell_activation
    proj_act = "identity" if proj == "identity" else acts[1]
    clips = float(attrs.get("cell_clip", 0.0) or 0.0), float(attrs.get("proj_clip", 0.0) or 0.0)
    b = bias.reshape(-1)
    peeps = (b[4 * d:5 * d], b[5 * d:6 * d], b[6 * d:]) if peep else (0, 0, 0)
    zeros = (xp.zeros((n_seq, p), dtype=x.dtype), xp.zeros((n_seq, d), dtype=x.dtype))
    init = (h0 if h0 is not None else zeros[0], c0 if c0 is not None else zeros[1])
    return x, w, pw, b, xp, lod, d, p, peep, peeps, acts, proj_act, clips, init


@register("lstmp", _LSTMP_IN,
          ("Projection", "Cell", "BatchGate", "BatchCellPreAct", "BatchHidden"), _LSTMP_ATTRS,
          optional=("H0", "C0"), lod="kernel",
          grad=grad_maker(_LSTMP_FWD, ("Projection", "Cell"),
                          ("Input", "H0", "C0", "Weight", "ProjWeight", "Bias")))
def lstmp(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Projection ``[T, P]`` and Cell ``[T, D]`` after every row of every sequence (both keep
    the LoD). BatchGate holds the activated gates ``[c~ | i | f | o]``, BatchCellPreAct
    ``cell_act(c)`` (lstm_kernel.h's ``state_atv``) and BatchHidden ``h = o * cell_act(c)``,
    all in Fluid's batch order (:func:`batch_order`); BatchGate has Fluid's batch LoD
    (:func:`batch_lod`)."""
    (x, w, pw, b, xp, lod, d, p, peep, (wi, wf, wo), (gate_act, cell_act, cand_act),
     proj_act, (cell_clip, proj_clip), (h_init, c_init)) = _lstmp_setup(ins, attrs, "lstmp")
    reverse = bool(attrs.get("is_reverse", False))
    z = x + b[:4 * d].reshape(1, -1)
    r_state, c_state = h_init.copy(), c_init.copy()
    proj = xp.zeros((x.shape[0], p), dtype=x.dtype)
    cell = xp.zeros((x.shape[0], d), dtype=x.dtype)
    act_cell, hidden, gates = xp.zeros_like(cell), xp.zeros_like(cell), xp.zeros_like(x)
    steps = batch_order(lod[-1], reverse)
    for (seqs, rows), bs in zip(steps, _batch_slices(steps), strict=True):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        g = z[r] + r_state[s] @ w
        c_prev = c_state[s]
        cand = _act(xp, cand_act, g[:, :d], clip=True)
        i = _act(xp, gate_act, g[:, d:2 * d] + wi * c_prev, clip=True)
        f = _act(xp, gate_act, g[:, 2 * d:3 * d] + wf * c_prev, clip=True)
        new_c = cand * i + c_prev * f
        if cell_clip > 0:
            new_c = xp.clip(new_c, -cell_clip, cell_clip)
        o = _act(xp, gate_act, g[:, 3 * d:] + wo * new_c, clip=True)
        a_c = _act(xp, cell_act, new_c, clip=True)
        h = o * a_c
        new_r = _act(xp, proj_act, h @ pw)
        if proj_clip > 0:
            new_r = xp.clip(new_r, -proj_clip, proj_clip)
        gates[bs] = xp.concatenate([cand, i, f, o], axis=1)
        act_cell[bs], hidden[bs] = a_c, h
        cell[r], proj[r] = new_c, new_r
        r_state[s], c_state[s] = new_r, new_c
    # Fluid sets the batch LoD on BatchGate only (to_batch); the other Batch* get none
    return {"Projection": [proj], "Cell": [cell], "BatchGate": [gates],
            "BatchCellPreAct": [act_cell], "BatchHidden": [hidden],
            LOD_KEY: {"Projection": [lod], "Cell": [lod],
                      "BatchGate": [batch_lod(lod[-1], reverse)]}}


@register("lstmp_grad", *grad_slots(_LSTMP_FWD, ("Projection", "Cell"),
                                    ("Input", "H0", "C0", "Weight", "ProjWeight", "Bias")),
          _LSTMP_ATTRS, optional=("H0", "C0"), lod="kernel")
def lstmp_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time, as LSTMPGradKernel and lstm_kernel.h: a clipped
    projection or cell value passes no gradient (its whole state gradient is zeroed). Unlike
    Fluid 1.8 (which drops it, a TODO in its kernel) the gradient of Cell is used. BatchGate,
    BatchCellPreAct and BatchHidden are in the forward's batch order; Projection and Cell in
    row order."""
    (x, w, pw, b, xp, lod, d, p, peep, (wi, wf, wo), (gate_act, cell_act, cand_act),
     proj_act, (cell_clip, proj_clip), (h_init, c_init)) = _lstmp_setup(ins, attrs,
                                                                        "lstmp_grad")
    proj, cell, gates = ins["Projection"][0], ins["Cell"][0], ins["BatchGate"][0]
    act_cell, hidden = ins["BatchCellPreAct"][0], ins["BatchHidden"][0]
    n_seq = len(lod[-1]) - 1
    dr_all = (ins.get("Projection" + GRAD) or [None])[0]
    dc_all = (ins.get("Cell" + GRAD) or [None])[0]
    dz, dw, dpw = xp.zeros_like(x), xp.zeros_like(w), xp.zeros_like(pw)
    dpeep = xp.zeros((3, d), dtype=x.dtype)
    carry_r = xp.zeros((n_seq, p), dtype=x.dtype)  # dL/dr flowing back from later steps
    carry_c = xp.zeros((n_seq, d), dtype=x.dtype)
    steps = batch_order(lod[-1], bool(attrs.get("is_reverse", False)))
    slices = _batch_slices(steps)
    for t in range(len(steps) - 1, -1, -1):
        seqs, rows = steps[t]
        s, r, bs = xp.asarray(seqs), xp.asarray(rows), slices[t]
        if t == 0:
            rp, cp = h_init[s], c_init[s]
        else:
            # the sequences running now are the first of those running at step t - 1
            before = xp.asarray(steps[t - 1][1][:len(rows)])
            rp, cp = proj[before], cell[before]
        dr = carry_r[s] + (dr_all[r] if dr_all is not None else 0)
        r_out = proj[r]
        if proj_clip > 0:  # _ClipGradFunctor: only strictly inside the clip range
            dr = dr * ((r_out > -proj_clip) & (r_out < proj_clip))
        dr = dr * _act_grad(proj_act, r_out)
        dpw += hidden[bs].T @ dr
        dh = dr @ pw.T
        cand, i, f, o = (gates[bs, k * d:(k + 1) * d] for k in range(4))
        new_c = cell[r]
        dc = carry_c[s] if dc_all is None else carry_c[s] + dc_all[r]
        dcand, di, df, do, carry_c[s] = _lstm_cell_grad(
            (gate_act, cell_act, cand_act), cand, i, f, o, cp, new_c, act_cell[bs], dh, dc,
            (wi, wf, wo), cell_clip)
        if peep:
            dpeep += xp.stack([(di * cp).sum(0), (df * cp).sum(0), (do * new_c).sum(0)])
        dg = xp.concatenate([dcand, di, df, do], axis=1)
        dw += rp.T @ dg
        carry_r[s] = dg @ w.T
        dz[r] = dg
    res: dict = {LOD_KEY: {"Input" + GRAD: [lod]}}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [dz]
    if "Weight" + GRAD in outs:
        res["Weight" + GRAD] = [dw]
    if "ProjWeight" + GRAD in outs:
        res["ProjWeight" + GRAD] = [dpw]
    if "Bias" + GRAD in outs:
        full = dz.sum(axis=0)
        if peep:
            full = xp.concatenate([full, dpeep.reshape(-1)])
        res["Bias" + GRAD] = [full.reshape(ins["Bias"][0].shape)]
    if "H0" + GRAD in outs and (ins.get("H0") or [None])[0] is not None:
        res["H0" + GRAD] = [carry_r]
    if "C0" + GRAD in outs and (ins.get("C0") or [None])[0] is not None:
        res["C0" + GRAD] = [carry_c]
    return res


# ---------------------------------------------------------------------------------------------
# cudnn_lstm (Fluid's layers.lstm, cudnn_lstm_op.cc): a multi-layer LSTM, optionally
# bidirectional, over a padded time-major Input ``[T, B, I]`` with every sequence T long.
# ``InitH``/``InitC`` and ``LastH``/``LastC`` are ``[L * dirs, B, H]``, indexed
# ``layer * dirs + direction`` (cuDNN's pseudo-layers); ``Out`` is the last layer's
# ``[T, B, dirs * H]`` (forward then backward halves). Per step, with cuDNN's gate order
# ``[i | f | c | o]``:
#
#     z = x W_ih^T + b_ih + h W_hh^T + b_hh
#     i, f, o = sigmoid(z_i, z_f, z_o),  c~ = tanh(z_c)
#     c' = f * c + i * c~,  h' = o * tanh(c')
#
# ``W`` is cuDNN's flat blob as Paddle lays it out (test_lstm_cudnn_op.py, and paddle.nn's
# flatten_parameters: "all bias following all weights"): first, for every pseudo-layer in
# order, ``W_ih`` (``[4H, in]`` row-major, in = I for layer 0, dirs * H above) then ``W_hh``
# (``[4H, H]``); then, for every pseudo-layer, ``b_ih`` (``4H``) then ``b_hh`` (``4H``).
# ``Reserve`` and ``StateOut`` (cuDNN's workspace and dropout state) are empty uint8
# placeholders: the gradient here recomputes the forward pass and reads neither.

_CUDNN_LSTM_ATTRS = {"dropout_prob": 0.0, "is_bidirec": False, "input_size": 10,
                     "hidden_size": 100, "num_layers": 1, "is_test": False, "seed": 0}
_CUDNN_LSTM_IN = ("Input", "InitH", "InitC", "W")


def cudnn_lstm_weight_size(input_size: int, hidden_size: int, num_layers: int,
                           bidirec: bool) -> int:
    """The number of values in cuDNN's flat weight blob."""
    dirs = 2 if bidirec else 1
    size = 0
    for layer in range(num_layers):
        width = input_size if layer == 0 else dirs * hidden_size
        size += dirs * (4 * hidden_size * (width + hidden_size) + 8 * hidden_size)
    return size


def _cudnn_lstm_slices(input_size: int, hidden: int, layers: int, dirs: int) -> list:
    """For every pseudo-layer: the (offset, shape) of W_ih, W_hh, b_ih and b_hh in W."""
    mats, off = [], 0
    for layer in range(layers):
        width = input_size if layer == 0 else dirs * hidden
        for _ in range(dirs):
            mats.append([(off, (4 * hidden, width)), (off + 4 * hidden * width,
                                                       (4 * hidden, hidden))])
            off += 4 * hidden * (width + hidden)
    for entry in mats:
        entry += [(off, (4 * hidden,)), (off + 4 * hidden, (4 * hidden,))]
        off += 8 * hidden
    return mats


def _cudnn_lstm_setup(ins: dict, attrs: dict, op: str):
    x, h0, c0, w = (ins[k][0] for k in _CUDNN_LSTM_IN)
    xp = array_module(x, w)
    hidden, layers = int(attrs.get("hidden_size", 100)), int(attrs.get("num_layers", 1))
    bidirec = bool(attrs.get("is_bidirec", False))
    dirs = 2 if bidirec else 1
    if x.ndim != 3:
        raise ValueError(f"{op}: Input must be [T, B, input_size] (time-major), got "
                         f"{list(x.shape)}")
    if int(attrs.get("input_size", x.shape[2])) != x.shape[2]:
        raise ValueError(f"{op}: input_size {attrs.get('input_size')} does not match Input's "
                         f"last dimension {x.shape[2]}")
    if hidden < 1 or layers < 1:
        raise ValueError(f"{op}: hidden_size and num_layers must be >= 1, got {hidden} and "
                         f"{layers}")
    want = (layers * dirs, x.shape[1], hidden)
    for name, v in (("InitH", h0), ("InitC", c0)):
        if tuple(v.shape) != want:
            raise ValueError(f"{op}: {name} must be [num_layers * dirs, B, hidden_size] = "
                             f"{list(want)}, got {list(v.shape)}")
    size = cudnn_lstm_weight_size(int(x.shape[2]), hidden, layers, bidirec)
    if w.size != size:
        raise ValueError(f"{op}: W must hold {size} values (cuDNN's flat weights for "
                         f"input_size={x.shape[2]}, hidden_size={hidden}, num_layers={layers}, "
                         f"is_bidirec={bidirec}), got {w.size}")
    prob = float(attrs.get("dropout_prob", 0.0))
    if not 0.0 <= prob < 1.0:
        raise ValueError(f"{op}: dropout_prob must be in [0, 1), got {prob}")
    flat = w.reshape(-1)
    params = [[flat[o:o + int(np.prod(shape))].reshape(shape) for o, shape in entry]
              for entry in _cudnn_lstm_slices(int(x.shape[2]), hidden, layers, dirs)]
    return x, h0, c0, xp, hidden, layers, dirs, params


def _cudnn_dir_forward(xp: Any, x: Any, prm: list, h: Any, c: Any, reverse: bool):
    """One pseudo-layer over all T steps: hs, cells and activated gates ``[T, B, .]``."""
    w_ih, w_hh, b_ih, b_hh = prm
    hid = h.shape[1]
    zx = x @ w_ih.T + (b_ih + b_hh)
    n_t = x.shape[0]
    hs = xp.zeros((n_t, *h.shape), dtype=x.dtype)
    cs, gates = xp.zeros_like(hs), xp.zeros((n_t, h.shape[0], 4 * hid), dtype=x.dtype)
    for t in (range(n_t - 1, -1, -1) if reverse else range(n_t)):
        z = zx[t] + h @ w_hh.T
        i, f = _act(xp, "sigmoid", z[:, :hid]), _act(xp, "sigmoid", z[:, hid:2 * hid])
        cand, o = xp.tanh(z[:, 2 * hid:3 * hid]), _act(xp, "sigmoid", z[:, 3 * hid:])
        c = f * c + i * cand
        h = o * xp.tanh(c)
        hs[t], cs[t] = h, c
        gates[t] = xp.concatenate([i, f, cand, o], axis=1)
    return hs, cs, gates


def drops_between_layers(attrs: dict, layers: int | None = None) -> bool:
    """Whether a ``cudnn_lstm`` op with ``attrs`` drops out between its layers (training,
    ``dropout_prob > 0``, several layers)."""
    layers = int(attrs.get("num_layers", 1)) if layers is None else layers
    return (float(attrs.get("dropout_prob", 0.0)) > 0 and not attrs.get("is_test", False)
            and layers > 1)


def _cudnn_lstm_masks(x: Any, xp: Any, attrs: dict, layers: int, dirs: int, hid: int) -> Any:
    """The scaled dropout masks between the layers, ``[layers - 1, T, B, dirs * H]`` (each
    entry 0 or ``1 / (1 - p)``: cuDNN's dropout scales in training), or None without dropout
    (inference, one layer, ``p = 0``). Drawn from the executor's stream for the op (its
    ``seed`` attr, or the program's ``random_seed``), or from ``seed`` alone when there is
    none."""
    if not drops_between_layers(attrs, layers):
        return None
    prob = float(attrs.get("dropout_prob", 0.0))
    rng = attrs.get("_rng") or np.random.default_rng(max(int(attrs.get("seed", 0)), 0))
    keep = rng.random((layers - 1, x.shape[0], x.shape[1], dirs * hid)) >= prob
    return xp.asarray(keep.astype(x.dtype) / x.dtype.type(1.0 - prob))


def _cudnn_lstm_run(x: Any, h0: Any, c0: Any, xp: Any, layers: int, dirs: int, params: list,
                    masks: Any = None):
    """Every layer in turn, the outputs below the last one through ``masks`` when given;
    returns Out, LastH, LastC and, per pseudo-layer, (its input, hs, cells, gates) for the
    gradient."""
    tape, last_h, last_c = [], [], []
    inp = x
    for layer in range(layers):
        if layer and masks is not None:
            inp = inp * masks[layer - 1]
        outs = []
        for dr in range(dirs):
            k = layer * dirs + dr
            hs, cs, gates = _cudnn_dir_forward(xp, inp, params[k], h0[k], c0[k], dr == 1)
            tape.append((inp, hs, cs, gates))
            outs.append(hs)
            end = 0 if dr == 1 else -1
            last_h.append(hs[end])
            last_c.append(cs[end])
        inp = xp.concatenate(outs, axis=2) if dirs == 2 else outs[0]
    return inp, xp.stack(last_h), xp.stack(last_c), tape


#: the grad op reads the forward's Reserve: the dropout masks it drew (cuDNN's reserve space
#: holds them there too)
_CUDNN_LSTM_GRAD_FWD = (*_CUDNN_LSTM_IN, "Reserve")


@register("cudnn_lstm", _CUDNN_LSTM_IN, ("Out", "LastH", "LastC", "Reserve", "StateOut"),
          _CUDNN_LSTM_ATTRS,
          grad=grad_maker(_CUDNN_LSTM_GRAD_FWD, ("Out", "LastH", "LastC"), _CUDNN_LSTM_IN))
def cudnn_lstm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[T, B, dirs * H]``, LastH and LastC ``[L * dirs, B, H]`` (see above); in training
    with ``dropout_prob`` and several layers, each layer's output but the last's goes through
    dropout (scaled by ``1 / (1 - p)``), the masks kept in Reserve for the gradient."""
    x, h0, c0, xp, hid, layers, dirs, params = _cudnn_lstm_setup(ins, attrs, "cudnn_lstm")
    masks = _cudnn_lstm_masks(x, xp, attrs, layers, dirs, hid)
    out, last_h, last_c, _ = _cudnn_lstm_run(x, h0, c0, xp, layers, dirs, params, masks)
    empty = xp.zeros((0,), dtype=xp.uint8)
    return {"Out": [out], "LastH": [last_h], "LastC": [last_c],
            "Reserve": [empty if masks is None else masks], "StateOut": [empty.copy()]}


@register("cudnn_lstm_grad", *grad_slots(_CUDNN_LSTM_GRAD_FWD, ("Out", "LastH", "LastC"),
                                         _CUDNN_LSTM_IN),
          _CUDNN_LSTM_ATTRS, optional=("Reserve",))
def cudnn_lstm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Backpropagation through time, top layer first, over the recomputed forward pass (with
    the forward's dropout masks, from Reserve)."""
    x, h0, c0, xp, hid, layers, dirs, params = _cudnn_lstm_setup(ins, attrs,
                                                                 "cudnn_lstm_grad")
    reserve = (ins.get("Reserve") or [None])[0]
    masks = reserve if reserve is not None and reserve.size else None
    if masks is None and drops_between_layers(attrs, layers):
        raise ValueError("cudnn_lstm_grad: the forward op dropped out between layers but its "
                         "Reserve (the masks) is not given; build the gradient with "
                         "append_backward")
    _, _, _, tape = _cudnn_lstm_run(x, h0, c0, xp, layers, dirs, params, masks)
    d_out = (ins.get("Out" + GRAD) or [None])[0]
    d_lh = (ins.get("LastH" + GRAD) or [None])[0]
    d_lc = (ins.get("LastC" + GRAD) or [None])[0]
    n_t, batch = x.shape[0], x.shape[1]
    d_out = d_out if d_out is not None else xp.zeros((n_t, batch, dirs * hid), dtype=x.dtype)
    dw = xp.zeros(ins["W"][0].size, dtype=x.dtype)
    dh0, dc0 = xp.zeros_like(h0), xp.zeros_like(c0)
    slices = _cudnn_lstm_slices(int(x.shape[2]), hid, layers, dirs)
    for layer in range(layers - 1, -1, -1):
        d_in = None
        for dr in range(dirs):
            k = layer * dirs + dr
            inp, hs, cs, gates = tape[k]
            w_ih, w_hh = params[k][0], params[k][1]
            dhs = d_out[:, :, dr * hid:(dr + 1) * hid]
            dh = d_lh[k] if d_lh is not None else xp.zeros_like(h0[k])
            dc = d_lc[k] if d_lc is not None else xp.zeros_like(c0[k])
            dz = xp.zeros_like(gates)
            order = range(n_t) if dr == 1 else range(n_t - 1, -1, -1)
            for t in order:
                prev = t + 1 if dr == 1 else t - 1
                c_prev = cs[prev] if 0 <= prev < n_t else c0[k]
                i, f = gates[t, :, :hid], gates[t, :, hid:2 * hid]
                cand, o = gates[t, :, 2 * hid:3 * hid], gates[t, :, 3 * hid:]
                dcand, di, df, do, dc = _lstm_cell_grad(
                    ("sigmoid", "tanh", "tanh"), cand, i, f, o, c_prev, cs[t],
                    xp.tanh(cs[t]), dh + dhs[t], dc)
                dz[t] = xp.concatenate([di, df, dcand, do], axis=1)
                dh = dz[t] @ w_hh
            dh0[k], dc0[k] = dh, dc
            h_prev = (xp.concatenate([hs[1:], h0[k][None]], axis=0) if dr == 1 else
                      xp.concatenate([h0[k][None], hs[:-1]], axis=0))
            dz2 = dz.reshape(-1, 4 * hid)
            grads = (dz2.T @ inp.reshape(-1, inp.shape[2]),
                     dz2.T @ h_prev.reshape(-1, hid), dz2.sum(axis=0), dz2.sum(axis=0))
            for (off, shape), g in zip(slices[k], grads, strict=True):
                dw[off:off + int(np.prod(shape))] = g.reshape(-1)
            part = dz @ w_ih
            d_in = part if d_in is None else d_in + part
        d_out = d_in if not layer or masks is None else d_in * masks[layer - 1]
    res: dict = {}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [d_out]
    if "W" + GRAD in outs:
        res["W" + GRAD] = [dw.reshape(ins["W"][0].shape)]
    if "InitH" + GRAD in outs:
        res["InitH" + GRAD] = [dh0]
    if "InitC" + GRAD in outs:
        res["InitC" + GRAD] = [dc0]
    return res
