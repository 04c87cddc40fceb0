"""``split_lod_tensor`` and ``merge_lod_tensor`` (what Fluid 1.8's ``IfElse`` runs around its
two branches): the rows of X, or its sequences when it has a LoD, parted by a bool mask of
one entry each, and the two parts put back in the mask's order.

As Fluid's kernels: ``split_lod_tensor`` gives ``OutTrue`` the items whose mask is true and
``OutFalse`` the others, each with the LoD of the sequences it took; ``merge_lod_tensor``
takes item after item from ``InTrue`` or ``InFalse`` as the mask says. Each one's gradient
is the other (the items' rows read from the forward inputs' LoDs); a part that got no
gradient counts as zeros. Only ``level`` 0 and
inputs of at most one LoD level are implemented here; a deeper LoD raises
``NotImplementedError`` naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots


def _mask(mask: Any, op: str) -> np.ndarray:
    m = to_host(mask).reshape(-1)
    if m.dtype != np.bool_:
        raise TypeError(f"{op}: Mask must be bool, got {m.dtype}")
    return m


def _offsets(lod: Any, rows: int, op: str, slot: str, level: int) -> np.ndarray:
    """Each item's rows: one row each, or the sequences of a one-level LoD."""
    if level != 0:
        raise NotImplementedError(f"{op}(level={level}) is not implemented in dask_fluid: "
                                  "IfElse parts at level 0")
    if not lod:
        return np.arange(rows + 1)
    if len(lod) > 1:
        raise NotImplementedError(f"{op}: {slot} with a LoD of {len(lod)} levels is not "
                                  "implemented in dask_fluid (one level or none)")
    return np.asarray(lod[0], dtype=np.int64)


_SPLIT_GRAD = (("X", "Mask"), ("OutTrue", "OutFalse"), ("X",))
_MERGE_GRAD = (("Mask", "InTrue", "InFalse"), ("Out",), ("InTrue", "InFalse"))


@register("split_lod_tensor", ("X", "Mask"), ("OutTrue", "OutFalse"), {"level": 0},
          lod="kernel", grad=grad_maker(*_SPLIT_GRAD))
def split_lod_tensor(ins: dict, attrs: dict, outs: tuple) -> dict:
    """OutTrue / OutFalse: the items of X whose mask is true / false (module docstring)."""
    x = ins["X"][0]
    lod = (attrs.get("_lods") or {}).get("X", [None])[0]
    offsets = _offsets(lod, x.shape[0], "split_lod_tensor", "X", int(attrs.get("level", 0)))
    mask = _mask(ins["Mask"][0], "split_lod_tensor")
    if mask.size != len(offsets) - 1:
        raise ValueError(f"split_lod_tensor: Mask has {mask.size} entries for "
                         f"{len(offsets) - 1} {'sequences' if lod else 'rows'} of X")
    xp = array_module(x)
    out, out_lods = {}, {}
    for slot, side in (("OutTrue", True), ("OutFalse", False)):
        items = np.flatnonzero(mask == side)
        rows = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in items]) \
            if len(items) else np.zeros(0, np.int64)
        out[slot] = [x[xp.asarray(rows)]]
        lengths = offsets[items + 1] - offsets[items]
        out_lods[slot] = [(tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)])),)
                          if lod else None]
    out[LOD_KEY] = out_lods
    return out


@register("merge_lod_tensor", ("X", "Mask", "InTrue", "InFalse"), ("Out",), {"level": 0},
          lod="kernel", grad=grad_maker(*_MERGE_GRAD))
def merge_lod_tensor(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: item after item from InTrue or InFalse, in the mask's order (module docstring)."""
    mask = _mask(ins["Mask"][0], "merge_lod_tensor")
    lods = attrs.get("_lods") or {}
    level = int(attrs.get("level", 0))
    parts, offsets, used = {}, {}, {True: 0, False: 0}
    for slot, side in (("InTrue", True), ("InFalse", False)):
        part = ins[slot][0]
        parts[side] = part
        offsets[side] = _offsets(lods.get(slot, [None])[0], part.shape[0], "merge_lod_tensor",
                                 slot, level)
        expected = int(np.count_nonzero(mask == side))
        if len(offsets[side]) - 1 != expected:
            raise ValueError(f"merge_lod_tensor: the mask has {expected} "
                             f"{str(side).lower()} entries but {slot} has "
                             f"{len(offsets[side]) - 1} items")
    pieces, lengths = [], []
    for side in mask:
        side = bool(side)
        i = used[side]
        start, end = offsets[side][i], offsets[side][i + 1]
        pieces.append(parts[side][int(start):int(end)])
        lengths.append(int(end - start))
        used[side] += 1
    template = parts[True] if parts[True].shape[0] else parts[False]
    xp = array_module(template)
    merged = xp.concatenate(pieces) if pieces else template[:0]
    has_lod = bool(lods.get("InTrue", [None])[0] or lods.get("InFalse", [None])[0])
    lod = (tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)])),) if has_lod \
        else None
    return {"Out": [merged], LOD_KEY: {"Out": [lod]}}


def _item_rows(offsets: np.ndarray, i: int) -> tuple[int, int]:
    return int(offsets[i]), int(offsets[i + 1])


@register("split_lod_tensor_grad", *grad_slots(*_SPLIT_GRAD), {"level": 0}, lod="kernel")
def split_lod_tensor_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each item's rows from dOutTrue or dOutFalse (zeros for a part without one)."""
    x = ins["X"][0]
    lod = (attrs.get("_lods") or {}).get("X", [None])[0]
    offsets = _offsets(lod, x.shape[0], "split_lod_tensor_grad", "X", int(attrs.get("level", 0)))
    mask = _mask(ins["Mask"][0], "split_lod_tensor_grad")
    xp = array_module(x)
    dx = xp.zeros_like(x)
    at = {True: 0, False: 0}
    for i, side in enumerate(mask.tolist()):
        start, end = _item_rows(offsets, i)
        d = ins["OutTrue" + GRAD if side else "OutFalse" + GRAD][0]
        if d is not None:
            dx[start:end] = d[at[side]:at[side] + end - start]
        at[side] += end - start
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [lod]}}


@register("merge_lod_tensor_grad", *grad_slots(*_MERGE_GRAD), {"level": 0}, lod="kernel")
def merge_lod_tensor_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInTrue / dInFalse: the rows of dOut that each part's items filled."""
    mask = _mask(ins["Mask"][0], "merge_lod_tensor_grad")
    lods = attrs.get("_lods") or {}
    level = int(attrs.get("level", 0))
    d = ins["Out" + GRAD][0]
    grads, out_lods = {}, {}
    pos = 0
    offsets = {}
    for slot, side in (("InTrue", True), ("InFalse", False)):
        part = ins[slot][0]
        lod = lods.get(slot, [None])[0]
        offsets[side] = _offsets(lod, part.shape[0], "merge_lod_tensor_grad", slot, level)
        grads[side] = array_module(part).zeros_like(part)
        out_lods[slot + GRAD] = [lod]
    used = {True: 0, False: 0}
    for side in mask.tolist():
        start, end = _item_rows(offsets[side], used[side])
        if d is not None:
            grads[side][start:end] = d[pos:pos + end - start]
        pos += end - start
        used[side] += 1
    return {"InTrue" + GRAD: [grads[True]], "InFalse" + GRAD: [grads[False]],
            LOD_KEY: out_lods}
