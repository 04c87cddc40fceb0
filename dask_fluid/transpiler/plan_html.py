"""An HTML view of a transpile (``DistributeTranspiler._repr_html_``, for Jupyter).

Built from the :class:`~.plan.TranspilePlan` alone: the mode and the counts, then per pserver
what it holds, then one row per parameter block (which block of which parameter, its rows,
shape and size, and the pserver that holds it), and the distributed lookup table's shards.
"""

from __future__ import annotations

import html
import math

import numpy as np

from .plan import ParamPlan, TranspilePlan

__all__ = ["nccl2_html", "plan_html", "plan_rows"]

_STYLE = "text-align:right"


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n:,} B"
    value = n / 1024
    for unit in ("KiB", "MiB"):
        if value < 1024:
            return f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} GiB"


def _itemsize(plan: TranspilePlan, name: str) -> int:
    var = plan.origin.global_block().vars.get(name)
    return np.dtype(getattr(var, "dtype", None) or "float32").itemsize


def plan_rows(plan: TranspilePlan) -> list[dict]:
    """One dict per parameter block, in the order of the parameters: ``param``, ``block`` (the
    block's variable on the pserver), ``index``, ``rows`` (first and end row), ``shape``,
    ``elements``, ``bytes``, ``endpoint`` and ``kind`` (of its gradient: dense or sparse)."""
    rows = []
    for pp in plan.params:
        size = _itemsize(plan, pp.param)
        for k, (b, ep) in enumerate(zip(pp.blocks, pp.endpoints, strict=True)):
            rows.append({"param": pp.param, "block": pp.param_block_names[k], "index": b.index,
                         "rows": (b.row_offset, b.row_offset + b.shape[0]),
                         "shape": tuple(b.shape), "elements": b.size, "bytes": b.size * size,
                         "endpoint": ep, "kind": _kind(pp)})
    return rows


def _kind(pp: ParamPlan) -> str:
    if pp.remote:
        return "sparse, rows prefetched"
    return "sparse" if pp.sparse else "dense"


def _cell(value: object, right: bool = False) -> str:
    style = f" style='{_STYLE}'" if right else ""
    return f"<td{style}>{html.escape(str(value))}</td>"


def _table(head: list[str], body: list[str]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><tr>{th}</tr>{''.join(body)}</table>"


def plan_html(plan: TranspilePlan) -> str:
    """The plan of a pserver-mode transpile as an HTML fragment."""
    rows = plan_rows(plan)
    table = plan.table
    title = (f"DistributeTranspiler: pserver mode, {html.escape(plan.mode.name)}; "
             f"{len(plan.endpoints)} pserver(s), {plan.trainer_num} trainer(s) "
             f"(this is trainer {plan.trainer_id}); {len(plan.params)} parameter(s) in "
             f"{len(rows)} block(s)")
    options = [f"slice_var_up={plan.slice_var_up}"] + (["DC-ASGD"] if plan.dc_asgd else [])
    per_ps = []
    for ep in plan.endpoints:
        mine = [r for r in rows if r["endpoint"] == ep]
        elements = sum(r["elements"] for r in mine)
        nbytes = sum(r["bytes"] for r in mine)
        shards = ""
        if table is not None:
            shard = table.shard_rows * math.prod(table.shape[1:])
            elements += shard
            nbytes += shard * np.dtype(table.dtype).itemsize
            shards = f"{table.name} shard"
        per_ps.append("<tr>" + _cell(ep) + _cell(len(mine), True) + _cell(f"{elements:,}", True)
                      + _cell(_bytes(nbytes), True)
                      + _cell(", ".join(filter(None, [", ".join(r["block"] for r in mine),
                                                      shards])) or "(nothing)") + "</tr>")
    blocks = ["<tr>" + _cell(r["param"]) + _cell(r["index"], True)
              + _cell(f"{r['rows'][0]:,}-{r['rows'][1]:,}", True) + _cell(list(r["shape"]))
              + _cell(f"{r['elements']:,}", True) + _cell(_bytes(r["bytes"]), True)
              + _cell(r["endpoint"]) + _cell(r["kind"]) + "</tr>" for r in rows]
    parts = [f"<div class='dask-fluid-transpile-plan'><b>{title}</b>",
             f"<div>{html.escape(', '.join(options))}</div>",
             _table(["pserver", "blocks", "elements", "size", "holds"], per_ps),
             _table(["parameter", "block", "rows", "shape", "elements", "size", "pserver",
                     "gradient"], blocks)]
    if table is not None:
        shard_rows = ["<tr>" + _cell(ep) + _cell(f"id % {len(table.endpoints)} == {k}")
                      + _cell([table.shard_rows, *table.shape[1:]]) + "</tr>"
                      for k, ep in enumerate(table.endpoints)]
        parts.append(f"<div>distributed lookup table {html.escape(table.name)} "
                     f"{list(table.shape)}, sharded by id over every pserver</div>")
        parts.append(_table(["pserver", "ids", "shard shape"], shard_rows))
    return "".join(parts) + "</div>"


def nccl2_html(endpoints: list[str], trainer_id: int, collective_mode: str | None = None) -> str:
    """An nccl2- or collective-mode transpile: the trainers, no pservers."""
    items = "".join(f"<li>{html.escape(ep)}{' (this trainer)' if i == trainer_id else ''}</li>"
                    for i, ep in enumerate(endpoints))
    if collective_mode is None:
        title, what = "nccl2 mode", ("the program is not rewritten: every gradient is "
                                     "all-reduced over the trainers each step")
    elif collective_mode == "local_sgd":
        title, what = "collective mode (local_sgd)", (
            "each trainer steps alone, then c_allreduce_sum ops average the parameters")
    else:
        title, what = f"collective mode ({html.escape(collective_mode)})", (
            "a c_allreduce_sum op after each gradient sums it over the trainers")
    return (f"<div class='dask-fluid-transpile-plan'><b>DistributeTranspiler: {title}; "
            f"{len(endpoints)} trainer(s), no pservers</b><div>{what}</div>"
            f"<ol start='0'>{items}</ol></div>")
