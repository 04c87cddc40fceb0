"""Split and merge kernels of the distributed runtime: split_byref, split_selected_rows,
split_ids, merge_ids and ref_by_trainer_id.

Kernels whose output count is not fixed by their attrs (``split_ids``) read it from
``attrs["_out_counts"]["Out"]`` (the executor passes the number of variables bound to each
output slot) or from a ``num_shards`` attr.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import LOD_KEY, array_module, register
from .selected_rows import SelectedRows, xp_of


@register("split_byref", ("X",), ("Out",), {"sections": [], "num": 0, "axis": 0})
def split_byref(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[k] = rows [start_k, start_k + sections[k]) of X: views, no copy."""
    x = ins["X"][0]
    sections = [int(s) for s in attrs.get("sections", []) or []]
    if not sections:
        num = int(attrs.get("num", 0) or attrs.get("_out_counts", {}).get("Out", 0) or 0)
        if num <= 0 or x.shape[0] % num:
            raise ValueError(f"split_byref: cannot split {x.shape[0]} rows into num={num} "
                             f"equal blocks; give sections")
        sections = [x.shape[0] // num] * num
    if sum(sections) != x.shape[0]:
        raise ValueError(f"split_byref: sections {sections} sum to {sum(sections)}, but X has "
                         f"{x.shape[0]} rows")
    out, start = [], 0
    for s in sections:
        out.append(x[start:start + s])
        start += s
    return {"Out": out}


@register("split_selected_rows", ("X",), ("Out",), {"height_sections": []})
def split_selected_rows(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[k] = the rows r of X with start_k ≤ r < start_k + height_sections[k], rebased to
    r − start_k, with height height_sections[k]."""
    x = ins["X"][0]
    if not isinstance(x, SelectedRows):
        raise TypeError(f"split_selected_rows: X must be a SelectedRows, got {type(x).__name__}")
    sections = [int(s) for s in attrs.get("height_sections", [])]
    if not sections:
        sections = [x.height]
    if sum(sections) != x.height:
        raise ValueError(f"split_selected_rows: height_sections {sections} sum to "
                         f"{sum(sections)}, but X has height {x.height}")
    out, start = [], 0
    for h in sections:
        keep = (x.rows >= start) & (x.rows < start + h)
        out.append(SelectedRows(x.rows[keep] - start, x.value[keep], h))
        start += h
    return {"Out": out}


def _num_shards(attrs: dict) -> int:
    n = attrs.get("_out_counts", {}).get("Out") or attrs.get("num_shards")
    if not n:
        raise ValueError("split_ids: the number of shards is unknown: the executor must pass "
                         "attrs['_out_counts'] = {'Out': n} (or set a num_shards attr)")
    return int(n)


@register("split_ids", ("Ids",), ("Out",))
def split_ids(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[k] = the unique sorted ids with id % P == k (global ids kept, shape [n_k, 1]).

    A SelectedRows input (a sparse gradient) is split by the same rule into SelectedRows with
    duplicate rows merged.
    """
    ids = [i for i in ins["Ids"] if i is not None]
    p = _num_shards(attrs)
    xp = xp_of(*ids)
    if any(isinstance(i, SelectedRows) for i in ids):
        if not all(isinstance(i, SelectedRows) for i in ids):
            raise TypeError("split_ids: Ids mixes SelectedRows and dense tensors")
        merged = SelectedRows(xp.concatenate([i.rows for i in ids]),
                              xp.concatenate([i.value for i in ids]), ids[0].height).merged()
        shard = merged.rows % p
        return {"Out": [SelectedRows(merged.rows[shard == k], merged.value[shard == k],
                                     merged.height) for k in range(p)]}
    flat = xp.unique(xp.concatenate([i.reshape(-1) for i in ids]).astype(np.int64))
    shard = flat % p
    return {"Out": [flat[shard == k].reshape(-1, 1) for k in range(p)]}


def _lead_shape(ids: Any) -> tuple:
    return tuple(ids.shape[:-1]) if ids.ndim > 1 and ids.shape[-1] == 1 else tuple(ids.shape)


@register("merge_ids", ("Ids", "Rows", "X"), ("Out",), lod="kernel")
def merge_ids(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i][j] = the prefetched row of id Ids[i][j], found among (Rows[k], X[k]) shards;
    Out[i] has the LoD of Ids[i] (Paddle's kernel: ``out->set_lod(out_ids->lod())``)."""
    rows = [r for r in ins["Rows"] if r is not None]
    xs = [x for x in ins["X"] if x is not None]
    xp = array_module(*xs)
    all_rows = xp.concatenate([r.reshape(-1) for r in rows]).astype(np.int64)
    all_vals = xp.concatenate(xs)
    order = xp.argsort(all_rows)
    sorted_rows = all_rows[order]
    out = []
    for ids in ins["Ids"]:
        flat = ids.reshape(-1).astype(np.int64)
        pos = xp.searchsorted(sorted_rows, flat)
        pos = xp.minimum(pos, max(len(sorted_rows) - 1, 0))
        if flat.size and (len(sorted_rows) == 0 or not bool((sorted_rows[pos] == flat).all())):
            missing = flat if len(sorted_rows) == 0 else flat[sorted_rows[pos] != flat]
            raise ValueError(f"merge_ids: id {int(missing[0])} is in Ids but in none of the "
                             f"prefetched Rows")
        vals = all_vals[order[pos]]
        out.append(vals.reshape(_lead_shape(ids) + tuple(all_vals.shape[1:])))
    # the executor passes one LoD (or None) per Ids; a bare kernel call passes none
    ids_lods = (attrs.get("_lods") or {}).get("Ids") or [None] * len(out)
    return {"Out": out, LOD_KEY: {"Out": list(ids_lods)}}


@register("ref_by_trainer_id", ("X", "TrainerId"), ("Out",))
def ref_by_trainer_id(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X[trainer_id] (the same array, no copy)."""
    xs = ins["X"]
    tid = int(np.asarray(ins["TrainerId"][0].tolist()).reshape(-1)[0])
    if not 0 <= tid < len(xs):
        raise ValueError(f"ref_by_trainer_id: trainer id {tid} is not in [0, {len(xs)})")
    return {"Out": [xs[tid]]}
