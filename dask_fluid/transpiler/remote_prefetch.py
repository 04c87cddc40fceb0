"""Sparse tables left on the pservers (Fluid 1.8's remote prefetch).

``embedding(is_sparse=True)`` without ``is_distributed``, ``nce(is_sparse=True)`` and
``hsigmoid(is_sparse=True)`` mark their op ``remote_prefetch``. Once transpiled in a pserver
mode, such a table (the op's ``W`` or ``Weight``, whose gradient is a SelectedRows) is sliced
into blocks like any parameter and optimized on the pservers, but the trainer's step no longer
receives it whole: each op reading it asks the pservers holding the rows it reads for those
rows only (the op keeps its type and gets ``epmap``, ``height_sections``, ``table_names`` and
``trainer_id``, as in Fluid). The grad ops that read the table (``nce_grad``,
``hierarchical_sigmoid_grad``) are marked too, so that they read the same rows as their forward
op rather than the trainer's stale copy (Fluid's grad kernels read that copy). The trainer
startup does not receive the table either: ``get_trainer_program`` makes its init a
``fake_init``, as Fluid 1.8's ``_fake_init_sparsetable``.

A table stays received whole (the plain path) when some other op reads it in the forward pass
(a tied embedding used by a ``matmul``): that op needs every row. GEO-SGD trainers optimize
locally and keep their tables.
"""

from __future__ import annotations

from ..framework import Block, OpRole, Program
from ..ops import registry
from .plan import ParamPlan, TranspilePlan, op_role


def remote_tables(block: Block, params: list[ParamPlan]) -> set[str]:
    """The sparse parameters whose every forward reader is a remote-prefetch lookup."""
    remote_ops = registry.remote_table_ops()
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
                op.type in remote_ops and op.input(remote_ops[op.type])[0] == pp.param
                and op.attrs.get("remote_prefetch") and op.attrs.get("is_sparse", True)
                for op in ops):
            out.add(pp.param)
    return out


def mark_lookups(program: Program, plan: TranspilePlan) -> None:
    """Give every op reading rows of a remote table (forward or grad) the blocks it asks."""
    remote_ops = registry.remote_table_ops()
    remote = {pp.param: pp for pp in plan.params if pp.remote}
    for op in program.global_block().ops:
        slot = remote_ops.get(op.type)
        if slot is None or op.input(slot)[0] not in remote:
            continue
        pp = remote[op.input(slot)[0]]
        op._set_attr("epmap", list(pp.endpoints))
        op._set_attr("height_sections", list(pp.sections))
        op._set_attr("table_names", list(pp.param_block_names))
        op._set_attr("trainer_id", plan.trainer_id)
