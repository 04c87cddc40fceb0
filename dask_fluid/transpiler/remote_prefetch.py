"""Sparse tables left on the pservers (Fluid 1.8's remote prefetch).

``embedding(is_sparse=True)`` without ``is_distributed`` marks its ``lookup_table`` op
``remote_prefetch``. Once transpiled in a pserver mode, such a table is sliced into blocks like
any parameter and optimized on the pservers, but the trainer's step no longer receives it
whole: each lookup asks the pservers holding the looked-up rows for those rows only (the op
keeps its type and gets ``epmap``, ``height_sections``, ``table_names`` and ``trainer_id``, as
in Fluid). The trainer startup still receives the table once.

A table stays received whole (the plain path) when some other op reads it in the forward pass
(a tied embedding used by a ``matmul``): that op needs every row. GEO-SGD trainers optimize
locally and keep their tables.
"""

from __future__ import annotations

from ..framework import Block, OpRole, Program
from .plan import ParamPlan, TranspilePlan, op_role

#: ops that can look up rows of their parameter on the pservers (slot of the table)
REMOTE_OPS = {"lookup_table": "W"}


def remote_tables(block: Block, params: list[ParamPlan]) -> set[str]:
    """The sparse parameters whose every forward reader is a remote-prefetch lookup."""
    readers: dict[str, list] = {}
    for op in block.ops:
        if op_role(op) != OpRole.Forward:
            continue
        for name in op.input_arg_names:
            readers.setdefault(name, []).append(op)
    out = set()
    for pp in params:
        ops = readers.get(pp.param, [])
        if pp.sparse and ops and all(
                op.type in REMOTE_OPS and op.input(REMOTE_OPS[op.type])[0] == pp.param
                and op.attrs.get("remote_prefetch") and op.attrs.get("is_sparse", True)
                for op in ops):
            out.add(pp.param)
    return out


def mark_lookups(program: Program, plan: TranspilePlan) -> None:
    """Give every lookup of a remote table the blocks it asks for."""
    remote = {pp.param: pp for pp in plan.params if pp.remote}
    for op in program.global_block().ops:
        slot = REMOTE_OPS.get(op.type)
        if slot is None or op.input(slot)[0] not in remote:
            continue
        pp = remote[op.input(slot)[0]]
        op._set_attr("epmap", list(pp.endpoints))
        op._set_attr("height_sections", list(pp.sections))
        op._set_attr("table_names", list(pp.param_block_names))
        op._set_attr("trainer_id", plan.trainer_id)
