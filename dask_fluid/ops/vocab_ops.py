"""Losses over large output vocabularies without a full softmax: ``nce`` (noise-contrastive
estimation) and ``hierarchical_sigmoid``, forward and gradient, as Fluid 1.8 computes them.

Both read their weight table only row by row (:func:`.registry.table_rows`): the sampled
classes' rows for ``nce``, the rows of the tree nodes on each label's path for
``hierarchical_sigmoid``. With ``is_sparse`` the table's gradient is a SelectedRows of those
rows, and once transpiled the rows can come from the pservers (remote prefetch).

``nce`` (Fluid's nce_op.h). Each row ``i`` of ``Input`` has ``T`` true labels (``Label``,
``[N, T]``) and ``K`` negative classes, drawn by the sampler (``num_neg_samples`` of them, or
``custom_neg_classes``); ``SampleLabels`` ``[N, T + K]`` holds both. With
``o = sigmoid(x_i · W[c] + b[c])`` (``SampleLogits``) and ``q = P(c) * num_neg_samples``, the
sampler's probability of the class times the number of negatives,

    Cost[i] = w_i * (sum over true c of -log(o / (o + q)) + sum over negatives of
              -log(q / (o + q)))

(``w_i`` from ``SampleWeight``, 1 without). A non-zero ``seed`` draws the same negatives at
every call, as Fluid's sampler (made anew at each run with that seed) does.

``hierarchical_sigmoid`` (Fluid's hierarchical_sigmoid_op.h with matrix_bit_code). Each label
has a path of tree nodes ``idx_j`` with a branch bit ``bit_j``: the default complete binary
tree over ``num_classes`` leaves (``c = label + num_classes``, ``idx_j = (c >> (j + 1)) - 1``,
``bit_j = (c >> j) & 1``, for ``j`` below ``bit_length(c) - 1``) or a custom tree
(``PathTable``/``PathCode`` rows, ending at the first negative node). With
``z_j = clip(x · W[idx_j] + b[idx_j], -40, 40)`` on the path and 0 past its end,

    Out = sum_j softplus(z_j) - sum_j bit_j z_j,   PreOut = softplus(z)

over the ``bit_length(num_classes - 1)`` (default) or ``PathTable``-width columns, the columns
past the path included (each adds log 2, as in Fluid). The gradient ignores the clipping, as
Fluid's does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .host_ops import PSERVER_OPS
from .registry import (
    GRAD,
    array_module,
    register,
    set_remote_provider,
    table_rows,
    to_host,
)
from .selected_rows import SelectedRows, grad_maker, grad_slots, scatter_add


def _rows_grad(xp: Any, idx: Any, contrib: Any, height: int, sparse: bool) -> Any:
    """The table gradient from per-row contributions ``contrib[k]`` to rows ``idx[k]``: a
    SelectedRows of the distinct rows (sorted, as Fluid's), or a dense ``[height, D]``."""
    if sparse:
        rows, inverse = xp.unique(idx, return_inverse=True)
        value = xp.zeros((rows.size, contrib.shape[1]), dtype=contrib.dtype)
        scatter_add(xp, value, inverse.reshape(-1), contrib)
        return SelectedRows(rows.astype(np.int64), value, height)
    g = xp.zeros((height, contrib.shape[1]), dtype=contrib.dtype)
    scatter_add(xp, g, idx, contrib)
    return g


# ---------------------------------------------------------------------------------------------
# nce

#: Fluid's sampler enum: 0 uniform, 1 log-uniform, 2 custom distribution (alias method)
_SAMPLERS = {0: "uniform", 1: "log_uniform", 2: "custom_dist"}
_NCE_ATTRS = {"num_total_classes": 0, "num_neg_samples": 10, "sampler": 0, "seed": 0,
              "is_sparse": False, "remote_prefetch": False, "custom_neg_classes": [],
              "is_test": False}
_NCE_IN = ("Input", "Label", "Weight", "Bias", "SampleWeight", "CustomDistProbs",
           "CustomDistAlias", "CustomDistAliasProbs")
_NCE_OPTIONAL = ("Bias", "SampleWeight", "CustomDistProbs", "CustomDistAlias",
                 "CustomDistAliasProbs")
_NCE_GRAD_FWD = _NCE_IN + ("SampleLogits", "SampleLabels")


class _Sampler:
    """Fluid's negative-class samplers over ``[0, num_total_classes)``: draws and the
    probability of each class."""

    def __init__(self, ins: dict, attrs: dict) -> None:
        self.n = int(attrs["num_total_classes"])
        if self.n < 2:
            raise ValueError(f"nce: num_total_classes must be at least 2, got {self.n}")
        kind = attrs.get("sampler", 0)
        if kind not in _SAMPLERS:
            raise ValueError(f"nce: sampler {kind!r} is not one of {_SAMPLERS} "
                             "(the layer takes 'uniform', 'log_uniform', 'custom_dist')")
        self.kind = _SAMPLERS[kind]
        seed = int(attrs.get("seed", 0))
        self.rng = np.random.default_rng(seed if seed else None)
        if self.kind == "custom_dist":
            got = [(ins.get(s) or [None])[0] for s in ("CustomDistProbs", "CustomDistAlias",
                                                        "CustomDistAliasProbs")]
            if any(a is None for a in got):
                raise ValueError("nce: the custom_dist sampler needs CustomDistProbs, "
                                 "CustomDistAlias and CustomDistAliasProbs")
            self.probs, self.alias, self.alias_probs = (to_host(a).reshape(-1) for a in got)
            if not self.probs.size == self.alias.size == self.alias_probs.size == self.n:
                raise ValueError(f"nce: the custom distribution must have num_total_classes="
                                 f"{self.n} entries, got {self.probs.size}")

    def sample(self, shape: tuple[int, int]) -> np.ndarray:
        if self.kind == "uniform":
            return self.rng.integers(0, self.n, size=shape, dtype=np.int64)
        if self.kind == "log_uniform":
            # inverse transform of P(c) = log((c + 2) / (c + 1)) / log(n)
            value = np.exp(self.rng.random(shape) * np.log(self.n)).astype(np.int64) - 1
            return value % (self.n - 1)
        index = self.rng.integers(0, self.n, size=shape, dtype=np.int64)
        take_alias = (self.rng.random(shape) > self.alias_probs[index]) & \
            (self.alias[index] != -1)
        return np.where(take_alias, self.alias[index], index).astype(np.int64)

    def probability(self, classes: np.ndarray) -> np.ndarray:
        if self.kind == "uniform":
            return np.full(classes.shape, 1.0 / self.n)
        if self.kind == "log_uniform":
            return np.log((classes + 2.0) / (classes + 1.0)) / np.log(self.n)
        return self.probs[classes].astype(np.float64)


def _true_labels(label: Any, n: int, num_classes: int) -> np.ndarray:
    lab = to_host(label).reshape(n, -1)
    if lab.dtype.kind not in "iu":
        raise TypeError(f"nce: Label must hold int64 class ids, got {lab.dtype}")
    lab = lab.astype(np.int64)
    bad = (lab < 0) | (lab >= num_classes)
    if bad.any():
        raise ValueError(f"nce: label {int(lab[bad][0])} is out of range: labels must lie in "
                         f"[0, {num_classes}) (num_total_classes)")
    return lab


def _nce_rows(ins: dict, attrs: dict, x: Any, samples: np.ndarray) -> Any:
    """``W[SampleLabels]`` as ``[N, S, D]``."""
    xp = array_module(x)
    flat = xp.asarray(samples.reshape(-1))
    return table_rows(ins, attrs, "Weight", flat).reshape(*samples.shape, x.shape[1])


def _sample_weight(ins: dict, n: int, xp: Any, dtype: Any) -> Any:
    sw = (ins.get("SampleWeight") or [None])[0]
    return xp.ones((n, 1), dtype=dtype) if sw is None else sw.reshape(n, 1).astype(dtype)


@register("nce", _NCE_IN, ("Cost", "SampleLogits", "SampleLabels"), _NCE_ATTRS,
          optional=_NCE_OPTIONAL, table_slot="Weight",
          grad=grad_maker(_NCE_GRAD_FWD, ("Cost",), ("Input", "Weight", "Bias")))
def nce(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Cost ``[N, 1]``, SampleLogits (the sigmoids) and SampleLabels ``[N, T + K]``."""
    x, w = ins["Input"][0], ins["Weight"][0]
    xp = array_module(x)
    if x.ndim != 2 or w.ndim != 2 or w.shape[1] != x.shape[1]:
        raise ValueError(f"nce: Input must be [N, D] and Weight [num_total_classes, D]; got "
                         f"Input {list(x.shape)}, Weight {list(w.shape)}")
    n, classes = x.shape[0], int(attrs["num_total_classes"])
    if w.shape[0] != classes:
        raise ValueError(f"nce: Weight has {w.shape[0]} rows but num_total_classes={classes}")
    sampler = _Sampler(ins, attrs)
    lab = _true_labels(ins["Label"][0], n, classes)
    custom = [int(c) for c in attrs.get("custom_neg_classes") or []]
    if custom:
        if min(custom) < 0 or max(custom) >= classes:
            raise ValueError(f"nce: custom_neg_classes {custom} must lie in [0, {classes})")
        neg = np.tile(np.asarray(custom, np.int64), (n, 1))
    else:
        neg = sampler.sample((n, int(attrs["num_neg_samples"])))
    samples = np.concatenate([lab, neg], axis=1)
    logits = xp.einsum("nd,nsd->ns", x, _nce_rows(ins, attrs, x, samples))
    bias = (ins.get("Bias") or [None])[0]
    if bias is not None:
        logits = logits + bias.reshape(-1)[xp.asarray(samples)]
    o = 1.0 / (1.0 + xp.exp(-logits))
    q = xp.asarray(sampler.probability(samples) * int(attrs["num_neg_samples"]), dtype=x.dtype)
    true = xp.asarray(np.arange(samples.shape[1]) < lab.shape[1])
    cost = xp.where(true, -xp.log(o / (o + q)), -xp.log(q / (o + q)))
    cost = (_sample_weight(ins, n, xp, x.dtype) * cost).sum(axis=1, keepdims=True)
    return {"Cost": [cost.astype(x.dtype)], "SampleLogits": [o.astype(x.dtype)],
            "SampleLabels": [xp.asarray(samples)]}


@register("nce_grad", *grad_slots(_NCE_GRAD_FWD, ("Cost",), ("Input", "Weight", "Bias")),
          _NCE_ATTRS, optional=_NCE_OPTIONAL + ("Cost" + GRAD,), table_slot="Weight",
          sparse_outputs=("Weight" + GRAD,))
def nce_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """d cost / d logit: ``w (q / (o + q)) (o - 1)`` for true labels, ``w o (1 - o) / (o + q)``
    for negatives; spread to the rows of W and b at SampleLabels and to the Input rows."""
    x, w = ins["Input"][0], ins["Weight"][0]
    xp = array_module(x)
    o, samples = ins["SampleLogits"][0], to_host(ins["SampleLabels"][0]).astype(np.int64)
    n, s = samples.shape
    t = to_host(ins["Label"][0]).reshape(n, -1).shape[1]
    d = (ins.get("Cost" + GRAD) or [None])[0]
    q = xp.asarray(_Sampler(ins, attrs).probability(samples) * int(attrs["num_neg_samples"]),
                   dtype=x.dtype)
    sw = _sample_weight(ins, n, xp, x.dtype)
    true = xp.asarray(np.arange(s) < t)
    g = sw * xp.where(true, (q / (o + q)) * (o - 1), o * (1 - o) / (o + q))
    g = g * (xp.zeros((n, 1), x.dtype) if d is None else d.reshape(n, 1))
    res = {}
    flat = xp.asarray(samples.reshape(-1))
    if "Bias" + GRAD in outs and ins.get("Bias"):
        bias = ins["Bias"][0]
        db = xp.zeros(bias.size, dtype=bias.dtype)
        scatter_add(xp, db, flat, g.reshape(-1))
        res["Bias" + GRAD] = [db.reshape(bias.shape)]
    if "Weight" + GRAD in outs:
        contrib = (g[:, :, None] * x[:, None, :]).reshape(n * s, x.shape[1])
        res["Weight" + GRAD] = [_rows_grad(xp, flat, contrib, w.shape[0],
                                           bool(attrs.get("is_sparse")))]
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [xp.einsum("ns,nsd->nd", g, _nce_rows(ins, attrs, x, samples))]
    return res


# ---------------------------------------------------------------------------------------------
# hierarchical_sigmoid

_HS_ATTRS = {"num_classes": 2, "is_sparse": False, "remote_prefetch": False}
_HS_IN = ("X", "W", "Label", "PathTable", "PathCode", "Bias")
_HS_OPTIONAL = ("PathTable", "PathCode", "Bias")
_HS_GRAD_FWD = _HS_IN + ("PreOut",)


def _paths(ins: dict, attrs: dict, n: int, height: int) -> tuple[np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """(node index, branch bit, on-path mask), each ``[N, code length]``, host arrays."""
    table = (ins.get("PathTable") or [None])[0]
    if table is not None:
        code = (ins.get("PathCode") or [None])[0]
        if code is None:
            raise ValueError("hierarchical_sigmoid: a custom tree needs PathCode with "
                             "PathTable")
        table, code = to_host(table).reshape(n, -1), to_host(code).reshape(n, -1)
        if table.shape != code.shape:
            raise ValueError(f"hierarchical_sigmoid: PathTable {list(table.shape)} and "
                             f"PathCode {list(code.shape)} must have the same shape")
        on = np.cumprod(table >= 0, axis=1).astype(bool)  # a path ends at its first -1
        if (table[on] >= height).any():
            raise ValueError(f"hierarchical_sigmoid: PathTable node {int(table[on].max())} is "
                             f"out of range: W has {height} rows")
        return np.where(on, table, 0).astype(np.int64), (code != 0) & on, on
    classes = int(attrs["num_classes"])
    label = to_host(ins["Label"][0]).reshape(-1).astype(np.int64)
    if label.size != n:
        raise ValueError(f"hierarchical_sigmoid: Label has {label.size} entries for {n} rows")
    if label.size and (label.min() < 0 or label.max() >= classes):
        bad = label[(label < 0) | (label >= classes)][0]
        raise ValueError(f"hierarchical_sigmoid: label {int(bad)} is out of range: labels "
                         f"must lie in [0, {classes}) (num_classes)")
    width = (classes - 1).bit_length()
    c = (label + classes)[:, None]
    j = np.arange(width)[None, :]
    length = sum(((c >> k) > 1).astype(np.int64) for k in range(width + 1))
    on = j < length
    idx = np.where(on, (c >> (j + 1)) - 1, 0).astype(np.int64)
    if (idx[on] >= height).any():
        raise ValueError(f"hierarchical_sigmoid: the default tree over num_classes={classes} "
                         f"needs W with {classes - 1} rows, it has {height}")
    return idx, (((c >> j) & 1) == 1) & on, on


def _hs_rows(ins: dict, attrs: dict, x: Any, idx: np.ndarray, on: np.ndarray) -> Any:
    """``W[idx]`` as ``[N, L, D]`` (zero rows off the path, which are never fetched)."""
    xp = array_module(x)
    rows = xp.zeros((*idx.shape, x.shape[1]), dtype=x.dtype)
    if on.any():
        rows[xp.asarray(on)] = table_rows(ins, attrs, "W", xp.asarray(idx[on]))
    return rows


@register("hierarchical_sigmoid", _HS_IN, ("Out", "PreOut", "W_Out"), _HS_ATTRS,
          optional=_HS_OPTIONAL, table_slot="W",
          grad=grad_maker(_HS_GRAD_FWD, ("Out",), ("X", "W", "Bias")))
def hierarchical_sigmoid(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[N, 1]``, PreOut ``[N, L]`` (softplus of the clipped node logits) and W_Out (W)."""
    x, w = ins["X"][0], ins["W"][0]
    xp = array_module(x)
    if x.ndim != 2 or w.ndim != 2 or w.shape[1] != x.shape[1]:
        raise ValueError(f"hierarchical_sigmoid: X must be [N, D] and W [nodes, D]; got X "
                         f"{list(x.shape)}, W {list(w.shape)}")
    idx, bits, on = _paths(ins, attrs, x.shape[0], w.shape[0])
    on_x = xp.asarray(on)
    z = xp.einsum("nd,nld->nl", x, _hs_rows(ins, attrs, x, idx, on))
    bias = (ins.get("Bias") or [None])[0]
    if bias is not None:
        z = z + bias.reshape(-1)[xp.asarray(idx)]
    z = xp.clip(xp.where(on_x, z, 0), -40.0, 40.0)
    pre = xp.logaddexp(0, z)  # softplus, log(1 + e^z)
    out = pre.sum(axis=1, keepdims=True) - (z * xp.asarray(bits)).sum(axis=1, keepdims=True)
    return {"Out": [out.astype(x.dtype)], "PreOut": [pre.astype(x.dtype)], "W_Out": [w]}


@register("hierarchical_sigmoid_grad", *grad_slots(_HS_GRAD_FWD, ("Out",), ("X", "W", "Bias")),
          _HS_ATTRS, optional=_HS_OPTIONAL + ("Out" + GRAD,), table_slot="W",
          sparse_outputs=("W" + GRAD,))
def hierarchical_sigmoid_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """d Out / d z_j = sigmoid(z_j) - bit_j on the path, spread to the path's W and b rows
    and to X."""
    x, w = ins["X"][0], ins["W"][0]
    xp = array_module(x)
    n = x.shape[0]
    idx, bits, on = _paths(ins, attrs, n, w.shape[0])
    d = (ins.get("Out" + GRAD) or [None])[0]
    # sigmoid(z) from PreOut = softplus(z): 1 - e^-softplus(z)
    g = (1 - xp.exp(-ins["PreOut"][0])) - xp.asarray(bits)
    g = xp.where(xp.asarray(on), g, 0) * (xp.zeros((n, 1), x.dtype) if d is None
                                           else d.reshape(n, 1))
    res = {}
    on_x = xp.asarray(on)
    node = xp.asarray(idx[on])
    if "Bias" + GRAD in outs and ins.get("Bias"):
        bias = ins["Bias"][0]
        db = xp.zeros(bias.size, dtype=bias.dtype)
        scatter_add(xp, db, node, g[on_x])
        res["Bias" + GRAD] = [db.reshape(bias.shape)]
    if "W" + GRAD in outs:
        contrib = (g[:, :, None] * x[:, None, :])[on_x]
        res["W" + GRAD] = [_rows_grad(xp, node, contrib, w.shape[0],
                                      bool(attrs.get("is_sparse")))]
    if "X" + GRAD in outs:
        res["X" + GRAD] = [xp.einsum("nl,nld->nd", g, _hs_rows(ins, attrs, x, idx, on))]
    return res


# a table the transpiler left on the pservers: these ops ask them for the rows they read
for _type in ("nce", "nce_grad", "hierarchical_sigmoid", "hierarchical_sigmoid_grad"):
    set_remote_provider(_type, PSERVER_OPS)
