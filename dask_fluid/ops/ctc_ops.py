"""CTC kernels of Fluid 1.8: warpctc (the CTC loss and its gradient), ctc_align (greedy
decoding's merge) and edit_distance, plus sequence_erase (which edit_distance's
``ignored_tokens`` uses).

``warpctc`` does what Paddle's kernel gets from the warp-ctc library: a softmax over the
classes of every time step, then the CTC forward–backward recursion in log space, giving each
sequence's loss −log p(label | logits) and the gradient of that loss w.r.t. the *unnormalised*
logits (``softmax − posterior occupancy of each class``), stored in ``WarpCTCGrad`` as
``[max_T, batch, num_classes + 1]``. ``warpctc_grad`` only scales it by ``Loss@GRAD`` per
sequence (and by 1 / length with ``norm_by_times``), as ``WarpCTCGradKernel`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots

# ---------------------------------------------------------------------------------------------
# helpers


def _lod_of(attrs: dict, slot: str) -> tuple | None:
    lods = (attrs.get("_lods") or {}).get(slot) or []
    return lods[0] if lods and lods[0] else None


def _need_lod(attrs: dict, slot: str, op: str, hint: str) -> tuple:
    lod = _lod_of(attrs, slot)
    if lod is None:
        raise ValueError(
            f"{op}: Input({slot}) has no LoD: feed it as a LoD tensor (fluid.create_lod_tensor) "
            f"or {hint}")
    return lod


def _lengths_of(t: Any, n: int, op: str, slot: str) -> np.ndarray:
    """A lengths tensor (``[n]`` or ``[n, 1]``) on the host, checked."""
    lengths = to_host(t).astype(np.int64, copy=False).reshape(-1)
    if len(lengths) != n or (lengths < 0).any():
        raise ValueError(f"{op}: Input({slot}) must hold {n} non-negative lengths (one per "
                         f"sequence), got {lengths.tolist()}")
    return lengths


def _offsets(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# warpctc

_CTC_ATTRS = {"blank": 0, "norm_by_times": False}


def _ctc_inputs(ins: dict, attrs: dict, logits: Any) -> tuple[Any, np.ndarray, list, np.ndarray]:
    """The logits as ``[max_T, batch, C]``, each sequence's length, its labels (host int
    arrays) and, in LoD mode, the logits' offsets (None when padded)."""
    xp = array_module(logits)
    padded = ins.get("LogitsLength") and ins["LogitsLength"][0] is not None
    has_label_length = ins.get("LabelLength") and ins["LabelLength"][0] is not None
    if bool(padded) != bool(has_label_length):
        raise ValueError("warpctc: give both LogitsLength and LabelLength (padded input) or "
                         "neither (LoD input)")
    label = to_host(ins["Label"][0]).astype(np.int64, copy=False)
    if padded:
        if logits.ndim != 3:
            raise ValueError(f"warpctc: with LogitsLength, Logits must be [max_T, batch, "
                             f"num_classes + 1], got {list(logits.shape)}")
        batch = logits.shape[1]
        t_len = _lengths_of(ins["LogitsLength"][0], batch, "warpctc", "LogitsLength")
        l_len = _lengths_of(ins["LabelLength"][0], batch, "warpctc", "LabelLength")
        if (t_len > logits.shape[0]).any():
            raise ValueError(f"warpctc: LogitsLength {t_len.tolist()} exceeds max_T "
                             f"{logits.shape[0]} of Logits")
        label = label.reshape(batch, -1) if label.size else np.zeros((batch, 0), np.int64)
        if (l_len > label.shape[1]).any():
            raise ValueError(f"warpctc: LabelLength {l_len.tolist()} exceeds the "
                             f"{label.shape[1]} columns of Label")
        labels = [label[b, :l_len[b]] for b in range(batch)]
        return logits, t_len, labels, None
    lod = _need_lod(attrs, "Logits", "warpctc", "give LogitsLength and LabelLength")
    label_lod = _need_lod(attrs, "Label", "warpctc", "give LogitsLength and LabelLength")
    o = np.asarray(lod[0], dtype=np.int64)
    lo = np.asarray(label_lod[0], dtype=np.int64)
    if int(o[-1]) != logits.shape[0]:
        raise ValueError(f"warpctc: the LoD of Logits ends at {int(o[-1])}, but Logits has "
                         f"{logits.shape[0]} rows")
    if len(o) != len(lo):
        raise ValueError(f"warpctc: Logits has {len(o) - 1} sequences but Label has "
                         f"{len(lo) - 1}: they must match")
    if label.size != label.shape[0]:
        raise ValueError(f"warpctc: a LoD Label must be [Lg, 1], got {list(label.shape)}")
    flat = label.reshape(-1)
    labels = [flat[lo[b]:lo[b + 1]] for b in range(len(lo) - 1)]
    t_len = np.diff(o)
    batch, max_t = len(t_len), int(t_len.max()) if len(t_len) else 0
    x2 = logits.reshape(logits.shape[0], -1)
    # warp-ctc's layout: time-major padded; the padding rows are zeros and never read
    t_idx, b_idx = np.nonzero(np.arange(max_t)[:, None] < t_len[None, :])
    padded_x = xp.zeros((max_t, batch, x2.shape[1]), dtype=logits.dtype)
    if len(t_idx):
        padded_x[xp.asarray(t_idx), xp.asarray(b_idx)] = x2[xp.asarray(o[b_idx] + t_idx)]
    return padded_x, t_len, labels, o


def _lse(xp: Any, *terms: Any) -> Any:
    """log Σ exp(terms), elementwise, −inf where every term is −inf."""
    m = terms[0]
    for t in terms[1:]:
        m = xp.maximum(m, t)
    safe = xp.where(xp.isfinite(m), m, 0.0)
    total = xp.exp(terms[0] - safe)
    for t in terms[1:]:
        total = total + xp.exp(t - safe)
    return xp.log(total) + safe


def ctc_loss_and_grad(x: Any, t_len: np.ndarray, labels: list, blank: int) -> tuple[Any, Any]:
    """CTC loss ``[batch]`` and its gradient w.r.t. the logits ``x`` (``[max_T, batch, C]``,
    softmax taken here) for sequences of ``t_len`` steps and the given label sequences.

    Forward (alpha) and backward (beta) variables are kept in log space over the
    label-extended states ``blank l1 blank l2 ... blank`` of every sequence (padded to the
    longest, −inf outside), looping over time. A sequence whose labels cannot fit its steps
    (``L + repeats > T``) gets loss 0 and gradient 0, as warp-ctc's CPU kernel returns
    ("TODO, not right to return 0" in warp-ctc).
    """
    xp = array_module(x)
    max_t, batch, classes = x.shape
    l_len = np.array([len(lab) for lab in labels], dtype=np.int64)
    for b, lab in enumerate(labels):
        if len(lab) and (lab.min() < 0 or lab.max() >= classes or (lab == blank).any()):
            raise ValueError(f"warpctc: the labels of sequence {b} must lie in [0, {classes}) "
                             f"and differ from blank={blank}, got {lab.tolist()}")
    repeats = np.array([int((lab[1:] == lab[:-1]).sum()) for lab in labels], dtype=np.int64)
    feasible = (l_len + repeats <= t_len) & (t_len > 0)
    s_max = 2 * int(l_len.max(initial=0)) + 1
    s_len = 2 * l_len + 1
    ext = np.full((batch, s_max), blank, dtype=np.int64)
    for b, lab in enumerate(labels):
        ext[b, 1:2 * len(lab):2] = lab
    valid = np.arange(s_max)[None, :] < s_len[:, None]
    skip = np.zeros((batch, s_max), dtype=bool)  # s may come from s - 2
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    skip &= valid
    neg = -np.inf

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        peak = x.max(axis=2, keepdims=True)
        logp = x - peak
        logp = logp - xp.log(xp.exp(logp).sum(axis=2, keepdims=True))
        ext_d = xp.asarray(ext)
        lp = xp.take_along_axis(logp, xp.broadcast_to(ext_d[None], (max_t, batch, s_max)),
                                axis=2)  # [T, B, S]
        valid_d = xp.asarray(valid)
        skip_d = xp.asarray(skip)
        neg_row = xp.full((batch, 1), neg, dtype=x.dtype)
        neg_row2 = xp.full((batch, 2), neg, dtype=x.dtype)

        alpha = xp.full((max_t, batch, s_max), neg, dtype=x.dtype)
        start = np.zeros((batch, s_max), dtype=bool)
        start[:, 0] = True
        start[:, 1] = s_max > 1
        start &= valid
        if max_t:
            alpha[0] = xp.where(xp.asarray(start), lp[0], neg)
        for t in range(1, max_t):
            prev = alpha[t - 1]
            shift1 = xp.concatenate([neg_row, prev[:, :-1]], axis=1)
            shift2 = xp.concatenate([neg_row2, prev[:, :-2]], axis=1)[:, :s_max]
            shift2 = xp.where(skip_d, shift2, neg)
            alpha[t] = xp.where(valid_d, _lse(xp, prev, shift1, shift2) + lp[t], neg)

        # beta[t, s]: log-probability of the emissions after t, from state s at t
        beta = xp.full((max_t, batch, s_max), neg, dtype=x.dtype)
        end = np.zeros((batch, s_max), dtype=bool)
        end[np.arange(batch), s_len - 1] = True
        end[np.arange(batch)[l_len > 0], (s_len - 2)[l_len > 0]] = True
        end_d = xp.asarray(end)
        skip_next = np.zeros((batch, s_max), dtype=bool)  # s + 2 may come from s
        skip_next[:, :-2] = skip[:, 2:]
        skip_next_d = xp.asarray(skip_next)
        for t in range(max_t - 1, -1, -1):
            init = xp.where(end_d, 0.0, neg)
            if t + 1 < max_t:
                nxt = beta[t + 1] + lp[t + 1]
                s1 = xp.concatenate([nxt[:, 1:], neg_row], axis=1)
                s2 = xp.concatenate([nxt[:, 2:], neg_row2], axis=1)[:, :s_max]
                s2 = xp.where(skip_next_d, s2, neg)
                rec = xp.where(valid_d, _lse(xp, nxt, s1, s2), neg)
            else:
                rec = xp.full((batch, s_max), neg, dtype=x.dtype)
            here = xp.asarray((t == t_len - 1)[:, None])
            inside = xp.asarray((t < t_len - 1)[:, None])
            beta[t] = xp.where(here, init, xp.where(inside, rec, neg))

        last = np.clip(t_len - 1, 0, None)
        a_last = alpha[xp.asarray(last), xp.asarray(np.arange(batch))] if max_t else \
            xp.full((batch, s_max), neg, dtype=x.dtype)
        ends = xp.where(end_d, a_last, neg)
        top = ends.max(axis=1)
        safe_top = xp.where(xp.isfinite(top), top, 0.0)
        loglik = xp.log(xp.exp(ends - safe_top[:, None]).sum(axis=1)) + safe_top
        feas_d = xp.asarray(feasible)
        safe_ll = xp.where(feas_d, loglik, 0.0)
        # the posterior of each state at each step, summed into its class
        gamma = xp.exp(alpha + beta - safe_ll[None, :, None])
        gamma = xp.where(xp.isfinite(gamma), gamma, 0.0)
        onehot = xp.asarray((ext[:, :, None] == np.arange(classes)[None, None, :])
                            & valid[:, :, None]).astype(x.dtype)
        occupancy = xp.einsum("tbs,bsc->tbc", gamma, onehot)
        grad = xp.exp(logp) - occupancy
    live = (np.arange(max_t)[:, None] < t_len[None, :]) & feasible[None, :]
    grad = xp.where(xp.asarray(live)[:, :, None], grad, 0.0).astype(x.dtype)
    loss = xp.where(feas_d, -loglik, 0.0).astype(x.dtype)
    return loss, grad


@register("warpctc", ("Logits", "Label", "LogitsLength", "LabelLength"),
          ("WarpCTCGrad", "Loss"), _CTC_ATTRS, optional=("LogitsLength", "LabelLength"),
          lod="kernel",
          grad=grad_maker(("WarpCTCGrad", "Logits", "LogitsLength"), ("Loss",), ("Logits",)))
def warpctc(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Loss ``[batch, 1]``: the CTC loss of every sequence (softmax over the last dim inside);
    WarpCTCGrad ``[max_T, batch, C]``: its gradient w.r.t. the logits (zeros past each
    sequence's end and for sequences whose labels cannot fit)."""
    logits = ins["Logits"][0]
    blank = int(attrs.get("blank", 0))
    width = logits.shape[-1] if logits.ndim == 3 else \
        int(np.prod(logits.shape[1:], dtype=np.int64))
    if not 0 <= blank < width:
        raise ValueError(f"warpctc: blank={blank} must lie in [0, {width}) (num_classes + 1)")
    x, t_len, labels, _ = _ctc_inputs(ins, attrs, logits)
    loss, grad = ctc_loss_and_grad(x, t_len, labels, blank)
    return {"WarpCTCGrad": [grad], "Loss": [loss.reshape(-1, 1)],
            LOD_KEY: {"WarpCTCGrad": [None], "Loss": [None]}}


@register("warpctc_grad", *grad_slots(("WarpCTCGrad", "Logits", "LogitsLength"), ("Loss",),
                                      ("Logits",)), _CTC_ATTRS,
          optional=("LogitsLength",), lod="kernel")
def warpctc_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dLogits: WarpCTCGrad times each sequence's Loss@GRAD, divided by the sequence's length
    with ``norm_by_times``; in LoD mode unpadded back to ``[Lp, C]`` with Logits' LoD."""
    g, logits, d = ins["WarpCTCGrad"][0], ins["Logits"][0], ins["Loss" + GRAD][0]
    xp = array_module(g)
    norm = bool(attrs.get("norm_by_times", False))
    batch = g.shape[1]
    dloss = xp.zeros((batch,), dtype=g.dtype) if d is None else d.reshape(-1).astype(g.dtype)
    length = ins.get("LogitsLength")
    if length and length[0] is not None:
        t_len = _lengths_of(length[0], batch, "warpctc_grad", "LogitsLength")
        scale = dloss
        if norm:  # Paddle 1.8 (PR 21033) normalises the padded form by LogitsLength too
            scale = scale / xp.asarray(np.maximum(t_len, 1).astype(g.dtype))
        dx = g * scale[None, :, None]
        return {"Logits" + GRAD: [dx.reshape(logits.shape)],
                LOD_KEY: {"Logits" + GRAD: [None]}}
    lod = _need_lod(attrs, "Logits", "warpctc_grad", "give LogitsLength")
    o = np.asarray(lod[0], dtype=np.int64)
    t_len = np.diff(o)
    seg = np.repeat(np.arange(len(t_len)), t_len)
    pos = np.arange(int(o[-1])) - o[:-1][seg]
    rows = g[xp.asarray(pos), xp.asarray(seg)]
    scale = dloss[xp.asarray(seg)]
    if norm:
        scale = scale / xp.asarray(t_len[seg].astype(g.dtype))
    dx = rows * scale[:, None]
    return {"Logits" + GRAD: [dx.reshape(logits.shape)], LOD_KEY: {"Logits" + GRAD: [lod]}}


# ---------------------------------------------------------------------------------------------
# ctc_align


def _align(seq: np.ndarray, blank: int, merge: bool) -> list:
    out, prev = [], -1
    for v in seq.tolist():
        if v != blank and not (merge and v == prev):
            out.append(v)
        prev = v
    return out


@register("ctc_align", ("Input", "InputLength"), ("Output", "OutputLength"),
          {"blank": 0, "merge_repeated": True, "padding_value": 0}, optional=("InputLength",),
          lod="kernel")
def ctc_align(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Merge repeated tokens (``merge_repeated``) then drop the blanks of every sequence.

    LoD input ``[Lp, 1]``: Output ``[Lo, 1]`` with the new LoD; when every sequence comes out
    empty, Output is ``[[-1]]`` (one row) with an all-zero LoD, as Paddle's kernel writes.
    Padded input ``[batch, T]`` with InputLength: Output ``[batch, T]`` padded with
    ``padding_value``, OutputLength ``[batch, 1]``.
    """
    x = ins["Input"][0]
    xp = array_module(x)
    blank = int(attrs.get("blank", 0))
    merge = bool(attrs.get("merge_repeated", True))
    host = to_host(x)
    length = ins.get("InputLength")
    if length and length[0] is not None:
        if host.ndim != 2:
            raise ValueError(f"ctc_align: with InputLength, Input must be [batch, T], got "
                             f"{list(host.shape)}")
        lengths = _lengths_of(length[0], host.shape[0], "ctc_align", "InputLength")
        if (lengths > host.shape[1]).any():
            raise ValueError(f"ctc_align: InputLength {lengths.tolist()} exceeds the "
                             f"{host.shape[1]} steps of Input")
        out = np.full(host.shape, int(attrs.get("padding_value", 0)), dtype=host.dtype)
        out_len = np.zeros((host.shape[0], 1), dtype=to_host(length[0]).dtype)
        for b in range(host.shape[0]):
            kept = _align(host[b, :lengths[b]], blank, merge)
            out[b, :len(kept)] = kept
            out_len[b, 0] = len(kept)
        return {"Output": [xp.asarray(out)], "OutputLength": [xp.asarray(out_len)],
                LOD_KEY: {"Output": [None], "OutputLength": [None]}}
    lod = _need_lod(attrs, "Input", "ctc_align", "give InputLength with a padded Input")
    o = np.asarray(lod[0], dtype=np.int64)
    if int(o[-1]) != host.shape[0]:
        raise ValueError(f"ctc_align: the LoD of Input ends at {int(o[-1])}, but Input has "
                         f"{host.shape[0]} rows")
    flat = host.reshape(-1) if host.size == host.shape[0] else None
    if flat is None:
        raise ValueError(f"ctc_align: a LoD Input must be [Lp, 1], got {list(host.shape)}")
    kept, offsets = [], [0]
    for b in range(len(o) - 1):
        kept.extend(_align(flat[o[b]:o[b + 1]], blank, merge))
        offsets.append(len(kept))
    # Paddle writes a single -1 when nothing is left (its LoD stays all zeros)
    data = np.asarray(kept if kept else [-1], dtype=host.dtype).reshape(-1, 1)
    return {"Output": [xp.asarray(data)], LOD_KEY: {"Output": [(tuple(offsets),)]}}


# ---------------------------------------------------------------------------------------------
# edit_distance, sequence_erase


def _levenshtein(a: np.ndarray, b: np.ndarray) -> int:
    """Edit distance by rows of the DP table, vectorised along ``b``."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return max(m, n)
    row = np.arange(n + 1)
    for i in range(1, m + 1):
        sub = row[:-1] + (b != a[i - 1])
        new = np.empty_like(row)
        new[0] = i
        best = np.minimum(sub, row[1:] + 1)
        # insertions chain along the row: new[j] = min(best[j-1], new[j-1] + 1)
        for j in range(1, n + 1):
            new[j] = min(best[j - 1], new[j - 1] + 1)
        row = new
    return int(row[-1])


@register("edit_distance", ("Hyps", "Refs", "HypsLength", "RefsLength"),
          ("Out", "SequenceNum"), {"normalized": False},
          optional=("HypsLength", "RefsLength"), lod="kernel")
def edit_distance(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[batch, 1]`` float32: the Levenshtein distance of every hypothesis to its
    reference (divided by the reference length with ``normalized``); SequenceNum ``[1]``
    int64: the number of pairs."""
    hyps, refs = to_host(ins["Hyps"][0]), to_host(ins["Refs"][0])
    xp = array_module(ins["Hyps"][0])
    hl, rl = ins.get("HypsLength"), ins.get("RefsLength")
    padded = bool(hl and hl[0] is not None)
    if padded != bool(rl and rl[0] is not None):
        raise ValueError("edit_distance: give both HypsLength and RefsLength (padded input) "
                         "or neither (LoD input)")
    if padded:
        if hyps.ndim != 2 or refs.ndim != 2 or hyps.shape[0] != refs.shape[0]:
            raise ValueError(f"edit_distance: padded Hyps and Refs must be 2-D with the same "
                             f"batch, got {list(hyps.shape)} and {list(refs.shape)}")
        batch = hyps.shape[0]
        h_len = _lengths_of(hl[0], batch, "edit_distance", "HypsLength")
        r_len = _lengths_of(rl[0], batch, "edit_distance", "RefsLength")
        if (h_len > hyps.shape[1]).any() or (r_len > refs.shape[1]).any():
            raise ValueError(f"edit_distance: lengths {h_len.tolist()} / {r_len.tolist()} "
                             f"exceed the columns of Hyps ({hyps.shape[1]}) / Refs "
                             f"({refs.shape[1]})")
        pairs = [(hyps[b, :h_len[b]], refs[b, :r_len[b]]) for b in range(batch)]
    else:
        for name, t in (("Hyps", hyps), ("Refs", refs)):
            if t.ndim != 2 or t.shape[1] != 1:
                raise ValueError(f"edit_distance: a LoD Input({name}) must be [L, 1], got "
                                 f"{list(t.shape)}")
        ho = np.asarray(_need_lod(attrs, "Hyps", "edit_distance", "give HypsLength")[0])
        ro = np.asarray(_need_lod(attrs, "Refs", "edit_distance", "give RefsLength")[0])
        if len(ho) != len(ro):
            raise ValueError(f"edit_distance: Hyps has {len(ho) - 1} sequences but Refs has "
                             f"{len(ro) - 1}: they must match")
        h, r = hyps.reshape(-1), refs.reshape(-1)
        pairs = [(h[ho[b]:ho[b + 1]], r[ro[b]:ro[b + 1]]) for b in range(len(ho) - 1)]
    normalized = bool(attrs.get("normalized", False))
    out = np.zeros((len(pairs), 1), dtype=np.float32)
    for b, (a, ref) in enumerate(pairs):
        dist = float(_levenshtein(a, ref))
        if normalized:
            if len(ref) == 0:
                raise ValueError(f"edit_distance: reference string #{b} is empty, which "
                                 "normalized=True cannot divide by")
            dist /= len(ref)
        out[b, 0] = dist
    return {"Out": [xp.asarray(out)],
            "SequenceNum": [xp.asarray(np.array([len(pairs)], dtype=np.int64))],
            LOD_KEY: {"Out": [None], "SequenceNum": [None]}}


@register("sequence_erase", ("X",), ("Out",), {"tokens": []}, lod="kernel")
def sequence_erase(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: the rows of X (a LoD tensor ``[N, 1]`` of ids) whose id is not in ``tokens``.

    As in Fluid's SequenceEraseKernel, X may have any number of LoD levels: only the last
    (finest) level is shrunk to match the erased rows; the upper levels count sequences of
    that level, whose number does not change, so they are kept as they are."""
    x = ins["X"][0]
    xp = array_module(x)
    lod = _need_lod(attrs, "X", "sequence_erase", "compute it with an op that keeps the LoD")
    host = to_host(x)
    if host.ndim != 2 or host.shape[1] != 1:
        raise ValueError(f"sequence_erase: X must be [N, 1], got {list(host.shape)}")
    o = np.asarray(lod[-1], dtype=np.int64)
    if int(o[-1]) != host.shape[0]:
        raise ValueError(f"sequence_erase: the last LoD level of X ends at {int(o[-1])}, but "
                         f"X has {host.shape[0]} rows")
    keep = ~np.isin(host.reshape(-1), np.asarray(list(attrs.get("tokens") or []), np.int64))
    kept_before = np.concatenate([[0], np.cumsum(keep)])
    offsets = tuple(int(v) for v in kept_before[o])
    out_lod = tuple(tuple(int(v) for v in level) for level in lod[:-1]) + (offsets,)
    return {"Out": [xp.asarray(host[keep])], LOD_KEY: {"Out": [out_lod]}}
