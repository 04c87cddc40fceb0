"""Linear-chain CRF: ``linear_chain_crf`` (the negative log-likelihood of each tag sequence,
with its gradient) and ``crf_decoding`` (Viterbi), as Fluid 1.8's linear_chain_crf_op.h and
crf_decoding_op.h compute them.

``Emission`` holds each row's tag scores ``x[k, i]``: a LoD tensor ``[T, D]`` whose sequences
are the chains, or ``[N, S, D]`` padded with ``Length`` ``[N]``. ``Transition`` is
``[D + 2, D]``: row 0 the start scores ``a``, row 1 the end scores ``b``, rows ``2 + j`` the
scores ``w[j, i]`` of tag ``j`` followed by ``i``. A tag sequence ``y`` of a chain of length
``L`` scores ``a[y_0] + b[y_{L-1}] + sum_k x[k, y_k] + sum_k w[y_{k-1}, y_k]``, and
``LogLikelihood`` is ``log Z - score(label)`` (an empty chain costs 0).

The forward pass keeps Fluid's outputs: ``EmissionExps = exp(x - max of its row)``,
``TransitionExps = exp(Transition)`` and ``Alpha``, the forward variables normalised to sum to
1 on every row. The gradient is the expected feature counts under the model (from ``Alpha`` and
the matching backward variables) minus the counts of the label.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots
from .sequence_ops import input_lod


def _chains(ins: dict, attrs: dict, op: str) -> tuple[np.ndarray, np.ndarray, tuple, tuple]:
    """(first row, length) of every chain over the emission rows flattened to ``[R, D]``, the
    emission's leading shape, and its LoD (None when padded)."""
    x = ins["Emission"][0]
    length = (ins.get("Length") or [None])[0]
    if length is not None:
        if x.ndim != 3:
            raise ValueError(f"{op}: with Length, Emission must be [N, S, D], got "
                             f"{list(x.shape)}")
        lens = to_host(length).reshape(-1).astype(np.int64)
        n, s = x.shape[:2]
        if lens.size != n or (lens < 0).any() or (lens > s).any():
            raise ValueError(f"{op}: Length must give each of the {n} rows of Emission a "
                             f"length in [0, {s}], got {lens.tolist()}")
        return np.arange(n, dtype=np.int64) * s, lens, (n, s), None
    if x.ndim != 2:
        raise ValueError(f"{op}: Emission must be a [T, D] LoD tensor, or [N, S, D] with "
                         f"Length; got {list(x.shape)}")
    lod = input_lod(attrs, "Emission", op)
    offsets = np.asarray(lod[-1], dtype=np.int64)
    return offsets[:-1], np.diff(offsets), (x.shape[0],), lod


def _steps(starts: np.ndarray, lens: np.ndarray):
    """For each position ``t``: the chains at least ``t + 1`` long and their row there."""
    for t in range(int(lens.max()) if lens.size else 0):
        seqs = np.flatnonzero(lens > t)
        yield t, seqs, starts[seqs] + t


def _labels(ins: dict, rows: int, tags: int, op: str) -> np.ndarray:
    label = to_host(ins["Label"][0]).reshape(-1)
    if label.size != rows:
        raise ValueError(f"{op}: Label has {label.size} entries for {rows} emission rows")
    if label.dtype.kind not in "iu":
        raise TypeError(f"{op}: Label must hold int64 tags, got {label.dtype}")
    return label.astype(np.int64)


def _check_transition(w: Any, tags: int, op: str) -> None:
    if tuple(w.shape) != (tags + 2, tags):
        raise ValueError(f"{op}: Transition must be [D + 2, D] = [{tags + 2}, {tags}] for "
                         f"{tags} tags, got {list(w.shape)}")


def _out_lods(lod: tuple | None, slots: tuple[str, ...]) -> dict:
    return {slot: [lod] for slot in slots}


_CRF_IN = ("Emission", "Transition", "Label", "Length")
_CRF_GRAD_FWD = _CRF_IN + ("Alpha", "EmissionExps", "TransitionExps")


@register("linear_chain_crf", _CRF_IN,
          ("Alpha", "EmissionExps", "TransitionExps", "LogLikelihood"), {},
          optional=("Length",), lod="kernel",
          grad=grad_maker(_CRF_GRAD_FWD, ("LogLikelihood",), ("Emission", "Transition")))
def linear_chain_crf(ins: dict, attrs: dict, outs: tuple) -> dict:
    """LogLikelihood ``[num_chains, 1]``: ``log Z - score(Label)`` of each chain."""
    x, w = ins["Emission"][0], ins["Transition"][0]
    xp = array_module(x, w)
    tags = int(x.shape[-1])
    _check_transition(w, tags, "linear_chain_crf")
    starts, lens, lead, lod = _chains(ins, attrs, "linear_chain_crf")
    x2 = x.reshape(-1, tags)
    label = _labels(ins, x2.shape[0], tags, "linear_chain_crf")
    in_chain = np.concatenate([s + np.arange(n) for s, n in zip(starts, lens, strict=True)]
                              + [np.zeros(0, np.int64)])
    bad = label[in_chain][(label[in_chain] < 0) | (label[in_chain] >= tags)]
    if bad.size:
        raise ValueError(f"linear_chain_crf: tag {int(bad[0])} is out of range: labels must "
                         f"lie in [0, {tags})")
    row_max = x2.max(axis=1, keepdims=True) if x2.shape[0] else x2[:, :1]
    x_exps = xp.exp(x2 - row_max)
    w_exps = xp.exp(w)
    alpha = xp.zeros_like(x2)
    ll = xp.zeros(len(starts), dtype=x.dtype)
    lab = xp.asarray(label)
    for t, seqs, rows in _steps(starts, lens):
        s, r = xp.asarray(seqs), xp.asarray(rows)
        if t == 0:
            a = w_exps[0] * x_exps[r]
            ll[s] += w[0][lab[r]]
        else:
            p = xp.asarray(rows - 1)
            a = x_exps[r] * (alpha[p] @ w_exps[2:])
            ll[s] += w[2:][lab[p], lab[r]]
        norm = a.sum(axis=1)
        alpha[r] = a / norm[:, None]
        ll[s] += x2[r, lab[r]] - row_max[r, 0] - xp.log(norm)
    has = np.flatnonzero(lens > 0)
    if has.size:
        last = xp.asarray(starts[has] + lens[has] - 1)
        s = xp.asarray(has)
        ll[s] += w[1][lab[last]] - xp.log(alpha[last] @ w_exps[1])
    return {"Alpha": [alpha.reshape(x.shape)], "EmissionExps": [x_exps.reshape(x.shape)],
            "TransitionExps": [w_exps], "LogLikelihood": [(-ll).reshape(-1, 1)],
            LOD_KEY: {**_out_lods(lod, ("Alpha", "EmissionExps")), "TransitionExps": [None],
                      "LogLikelihood": [None]}}


@register("linear_chain_crf_grad", *grad_slots(_CRF_GRAD_FWD, ("LogLikelihood",),
                                               ("Emission", "Transition")),
          {}, optional=("Length", "LogLikelihood" + GRAD), lod="kernel")
def linear_chain_crf_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Expected minus observed counts, per chain scaled by its LogLikelihood gradient."""
    x, w = ins["Emission"][0], ins["Transition"][0]
    xp = array_module(x, w)
    tags = int(x.shape[-1])
    starts, lens, lead, lod = _chains(ins, attrs, "linear_chain_crf_grad")
    x_exps = ins["EmissionExps"][0].reshape(-1, tags)
    alpha = ins["Alpha"][0].reshape(-1, tags)
    w_exps = ins["TransitionExps"][0]
    label = xp.asarray(_labels(ins, x_exps.shape[0], tags, "linear_chain_crf_grad"))
    d = (ins.get("LogLikelihood" + GRAD) or [None])[0]
    d = xp.zeros(len(starts), x.dtype) if d is None else d.reshape(-1)
    steps = list(_steps(starts, lens))
    # beta[k, i]: the normalised backward variables, the chain's end score included
    beta = xp.zeros_like(x_exps)
    for t, seqs, rows in reversed(steps):
        r = xp.asarray(rows)
        is_last = xp.asarray(lens[seqs] == t + 1)
        nxt = xp.asarray(np.where(lens[seqs] == t + 1, rows, rows + 1))
        b = xp.where(is_last[:, None], w_exps[1][None, :],
                     (x_exps[nxt] * beta[nxt]) @ w_exps[2:].T)
        beta[r] = b / b.sum(axis=1, keepdims=True)
    dx = xp.zeros_like(x_exps)
    dw = xp.zeros_like(w)
    onehot = xp.eye(tags, dtype=x.dtype)
    for t, seqs, rows in steps:
        r, s = xp.asarray(rows), xp.asarray(seqs)
        scale = d[s][:, None]
        marg = alpha[r] * beta[r]
        marg = marg / marg.sum(axis=1, keepdims=True)
        dx[r] = scale * (marg - onehot[label[r]])
        if t == 0:
            dw[0] += (scale * (marg - onehot[label[r]])).sum(axis=0)
        else:
            p = xp.asarray(rows - 1)
            pair = alpha[p][:, :, None] * w_exps[2:][None] * (x_exps[r] * beta[r])[:, None, :]
            pair = pair / pair.sum(axis=(1, 2), keepdims=True)
            observed = onehot[label[p]][:, :, None] * onehot[label[r]][:, None, :]
            dw[2:] += (scale[:, :, None] * (pair - observed)).sum(axis=0)
        ends = np.flatnonzero(lens[seqs] == t + 1)
        if ends.size:
            e = xp.asarray(ends)
            dw[1] += (scale[e] * (marg[e] - onehot[label[r[e]]])).sum(axis=0)
    res: dict = {LOD_KEY: _out_lods(lod, ("Emission" + GRAD,)) | {"Transition" + GRAD: [None]}}
    if "Emission" + GRAD in outs:
        res["Emission" + GRAD] = [dx.reshape(x.shape)]
    if "Transition" + GRAD in outs:
        res["Transition" + GRAD] = [dw]
    return res


@register("crf_decoding", ("Emission", "Transition", "Label", "Length"), ("ViterbiPath",), {},
          optional=("Label", "Length"), lod="kernel")
def crf_decoding(ins: dict, attrs: dict, outs: tuple) -> dict:
    """ViterbiPath: the best tag of every row (``[T, 1]`` int64 with the emission's LoD, or
    ``[N, S]`` padded with 0); with Label, 1 where the best tag is the label and 0 elsewhere.
    Ties go to the lowest tag, as in Fluid."""
    x, w = ins["Emission"][0], ins["Transition"][0]
    xp = array_module(x, w)
    tags = int(x.shape[-1])
    _check_transition(w, tags, "crf_decoding")
    starts, lens, lead, lod = _chains(ins, attrs, "crf_decoding")
    x2 = x.reshape(-1, tags)
    score = xp.zeros_like(x2)
    track = xp.zeros(x2.shape, dtype=np.int64)
    for t, _, rows in _steps(starts, lens):
        r = xp.asarray(rows)
        if t == 0:
            score[r] = w[0] + x2[r]
        else:
            cand = score[r - 1][:, :, None] + w[2:][None]  # [chains, from, to]
            track[r] = cand.argmax(axis=1)
            score[r] = cand.max(axis=1) + x2[r]
    path = np.zeros(x2.shape[0], dtype=np.int64)
    host_score, host_track = to_host(score), to_host(track)
    for start, n in zip(starts, lens, strict=True):
        if n == 0:
            continue
        best = int(np.argmax(host_score[start + n - 1] + to_host(w[1])))
        for k in range(start + n - 1, start - 1, -1):
            path[k] = best
            best = int(host_track[k, best])
    if ins.get("Label") and ins["Label"][0] is not None:
        label = _labels(ins, x2.shape[0], tags, "crf_decoding")
        path = (label == path).astype(np.int64)
        if lod is None:  # padding stays 0
            path[np.arange(x2.shape[0]) % lead[1] >= np.repeat(lens, lead[1])] = 0
    out = xp.asarray(path.reshape(lead + (1,) if lod is not None else lead))
    return {"ViterbiPath": [out], LOD_KEY: _out_lods(lod, ("ViterbiPath",))}
