"""``mine_hard_examples``: SSD's choice of the negative prior boxes that train the classifier
(Fluid 1.8's ``operators/detection/mine_hard_examples_op.cc``), used by ``layers.ssd_loss``.

It runs on the host: the choice is a sort per image of at most a few thousand losses, and its
result is a list of indices with a LoD, which the next ops read on the host anyway.
"""

from __future__ import annotations

import numpy as np

from .registry import LOD_KEY, array_module, register, to_host

_MINING_TYPES = ("max_negative", "hard_example")


def _check_2d(name: str, a: np.ndarray, shape: tuple[int, int] | None) -> None:
    if a.ndim != 2:
        raise ValueError(f"mine_hard_examples: {name} must be [N, Np], got shape "
                         f"{list(a.shape)}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"mine_hard_examples: {name} has shape {list(a.shape)}, but "
                         f"MatchIndices has {list(shape)}: both are [N, Np]")


@register("mine_hard_examples", ("ClsLoss", "LocLoss", "MatchIndices", "MatchDist"),
          ("NegIndices", "UpdatedMatchIndices"),
          {"neg_pos_ratio": 1.0, "neg_dist_threshold": 0.5, "sample_size": 0,
           "mining_type": "max_negative"},
          optional=("LocLoss",), lod="kernel")
def mine_hard_examples(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Per image, the eligible prior boxes of highest loss.

    ``max_negative``: the eligible boxes are the unmatched ones (index -1) whose match
    distance is under ``neg_dist_threshold``; ``neg_pos_ratio`` times the matched boxes of
    the image are kept (fewer if fewer are eligible), and ``UpdatedMatchIndices`` is
    ``MatchIndices``. ``hard_example``: every box is eligible, its loss is ``ClsLoss`` plus
    ``LocLoss`` when given, ``sample_size`` are kept; matched boxes not kept are unmatched
    (-1) in ``UpdatedMatchIndices`` and the kept unmatched ones are the negatives.

    ``NegIndices`` ``[Neg, 1]`` int32 holds the negatives' box indices in increasing order per
    image (Fluid gathers them in a ``std::set``), its LoD the count per image. Equal losses
    are taken lowest index first (Fluid's ``std::sort`` leaves their order unspecified).
    """
    mining = attrs.get("mining_type", "max_negative")
    if mining not in _MINING_TYPES:
        raise ValueError(f"mine_hard_examples: mining_type must be one of {_MINING_TYPES}, "
                         f"got {mining!r}")
    ratio = float(attrs.get("neg_pos_ratio", 1.0))
    threshold = float(attrs.get("neg_dist_threshold", 0.5))
    sample_size = int(attrs.get("sample_size", 0) or 0)
    if mining == "max_negative":
        if not ratio > 0:
            raise ValueError(f"mine_hard_examples: neg_pos_ratio must be greater than 0 in "
                             f"max_negative mode, got {ratio}")
        if not 0 < threshold < 1:
            raise ValueError(f"mine_hard_examples: neg_dist_threshold must be in (0, 1) in "
                             f"max_negative mode, got {threshold}")
    elif sample_size <= 0:
        raise ValueError(f"mine_hard_examples: sample_size must be greater than 0 in "
                         f"hard_example mode, got {sample_size}")

    match_dev = ins["MatchIndices"][0]
    xp = array_module(match_dev)
    match = to_host(match_dev)
    _check_2d("MatchIndices", match, None)
    cls = to_host(ins["ClsLoss"][0])
    dist = to_host(ins["MatchDist"][0])
    _check_2d("ClsLoss", cls, match.shape)
    _check_2d("MatchDist", dist, match.shape)
    loss = cls.astype(np.float64)
    loc = ins.get("LocLoss")
    if loc and loc[0] is not None:
        loc_loss = to_host(loc[0])
        _check_2d("LocLoss", loc_loss, match.shape)
        if mining == "hard_example":
            loss = loss + loc_loss

    updated = match.copy()
    negatives, offsets = [], [0]
    for n in range(match.shape[0]):
        if mining == "max_negative":
            eligible = np.flatnonzero((match[n] == -1) & (dist[n] < threshold))
            keep = min(int(np.count_nonzero(match[n] != -1) * ratio), len(eligible))
        else:
            eligible = np.arange(match.shape[1])
            keep = min(sample_size, len(eligible))
        # descending loss, ties by increasing index (a stable sort of the negated losses)
        order = eligible[np.argsort(-loss[n, eligible], kind="stable")]
        chosen = np.sort(order[:keep])
        if mining == "hard_example":
            picked = np.zeros(match.shape[1], dtype=bool)
            picked[chosen] = True
            updated[n, (match[n] > -1) & ~picked] = -1
            chosen = chosen[match[n, chosen] <= -1]
        negatives.extend(chosen.tolist())
        offsets.append(len(negatives))
    neg = np.asarray(negatives, dtype=np.int32).reshape(-1, 1)
    return {"NegIndices": [xp.asarray(neg)], "UpdatedMatchIndices": [xp.asarray(updated)],
            LOD_KEY: {"NegIndices": [(tuple(offsets),)], "UpdatedMatchIndices": [None]}}
