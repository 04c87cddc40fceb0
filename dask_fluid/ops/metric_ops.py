"""Metric kernels: ``auc`` (Fluid 1.8's op: bucketed positive/negative counts kept in
persistable state, the area under the ROC curve by trapezoids over the buckets)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import array_module, register, to_host

_AUC_ATTRS = {"curve": "ROC", "num_thresholds": 2**12 - 1, "slide_steps": 1}


def _buckets(predict: Any, label: Any, num_thresholds: int) -> tuple[np.ndarray, np.ndarray]:
    """This batch's counts per bucket ``int(p * num_thresholds)`` of the positive-class
    probability (the last column), for positive (label > 0) and negative (0) samples."""
    p = to_host(predict).astype(np.float64, copy=False)
    lab = to_host(label).reshape(-1)
    p = p.reshape(p.shape[0], -1)[:, -1]
    if p.size and (p.min() < 0 or p.max() > 1):
        bad = p[(p < 0) | (p > 1)][0]
        raise ValueError(f"auc: predictions must be probabilities in [0, 1], got {bad}")
    if lab.size != p.size:
        raise ValueError(f"auc: {p.size} predictions but {lab.size} labels")
    idx = (p * num_thresholds).astype(np.uint32).astype(np.int64)
    length = num_thresholds + 1
    pos = np.bincount(idx[lab > 0], minlength=length)[:length]
    neg = np.bincount(idx[lab == 0], minlength=length)[:length]
    return pos.astype(np.int64), neg.astype(np.int64)


def _area(pos: np.ndarray, neg: np.ndarray) -> float:
    """Trapezoids from the highest bucket down (Paddle's calcAuc), over tot_pos * tot_neg."""
    tot_pos = np.cumsum(pos[::-1], dtype=np.float64)
    tot_neg = np.cumsum(neg[::-1], dtype=np.float64)
    prev_pos = np.concatenate([[0.0], tot_pos[:-1]])
    prev_neg = np.concatenate([[0.0], tot_neg[:-1]])
    area = float(np.sum(np.abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0))
    if tot_pos[-1] > 0 and tot_neg[-1] > 0:
        area = area / tot_pos[-1] / tot_neg[-1]
    return area


@register("auc", ("Predict", "Label", "StatPos", "StatNeg"), ("AUC", "StatPosOut", "StatNegOut"),
          _AUC_ATTRS)
def auc(ins: dict, attrs: dict, outs: tuple) -> dict:
    """AUC of the counts so far. ``slide_steps == 0``: StatPos/StatNeg ``[1, T + 1]``
    accumulate every batch. ``slide_steps = s > 0``: ``(1 + s) (T + 1) + 1`` entries, ``s``
    buckets of recent batches (the batch counter in the last entry picks the one to replace),
    then their sum, from which the AUC of the last ``s`` batches is computed."""
    if str(attrs.get("curve", "ROC")).upper() != "ROC":
        raise NotImplementedError(f"auc: curve={attrs.get('curve')!r} is not implemented in "
                                  "dask_fluid (only 'ROC', Fluid's default)")
    predict, label = ins["Predict"][0], ins["Label"][0]
    xp = array_module(ins["StatPos"][0])
    t = int(attrs.get("num_thresholds", 2**12 - 1))
    steps = int(attrs.get("slide_steps", 1))
    length = t + 1
    stat_pos = np.array(to_host(ins["StatPos"][0]), dtype=np.int64).reshape(-1)
    stat_neg = np.array(to_host(ins["StatNeg"][0]), dtype=np.int64).reshape(-1)
    want = (1 + steps) * length + (1 if steps > 0 else 0)
    if stat_pos.size != want or stat_neg.size != want:
        raise ValueError(f"auc: StatPos/StatNeg must hold {want} counts for num_thresholds={t}"
                         f" and slide_steps={steps}, got {stat_pos.size}/{stat_neg.size}")
    pos, neg = _buckets(predict, label, t)
    if steps == 0:
        stat_pos += pos
        stat_neg += neg
        total_pos, total_neg = stat_pos, stat_neg
    else:
        cur = (int(stat_pos[(steps + 1) * length]) % steps) * length
        total = steps * length
        for stat, new in ((stat_pos, pos), (stat_neg, neg)):
            stat[total:total + length] -= stat[cur:cur + length]
            stat[cur:cur + length] = new
            stat[total:total + length] += new
            stat[(steps + 1) * length] += 1
        total_pos, total_neg = (stat_pos[total:total + length], stat_neg[total:total + length])
    value = np.array([_area(total_pos, total_neg)], dtype=np.float64)
    shape = ins["StatPos"][0].shape
    return {"AUC": [xp.asarray(value)], "StatPosOut": [xp.asarray(stat_pos.reshape(shape))],
            "StatNegOut": [xp.asarray(stat_neg.reshape(shape))]}
