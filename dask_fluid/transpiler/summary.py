"""A short human summary of a transpile: what each pserver owns and does."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .distribute_transpiler import DistributeTranspiler


def summarize(transpiler: DistributeTranspiler) -> str:
    """Per endpoint: the parameter blocks it owns (with shapes) and the op types of each of its
    optimize blocks.

    Parameters
    ----------
    transpiler : DistributeTranspiler
        After ``transpile()`` in pserver mode.

    Returns
    -------
    str
        Several lines, one section per endpoint.
    """
    plan = transpiler.plan
    mode = plan.mode.name
    lines = [f"{len(plan.endpoints)} pserver(s), {plan.trainer_num} trainer(s), {mode}"]
    for ep in plan.endpoints:
        # the program built last for ep (the one a job runs), not a new one each time
        prog = transpiler._build(ep).program
        owned = [f"{pp.param_block_names[k]} {list(pp.blocks[k].shape)}"
                 for pp, k in plan.blocks_on(ep)]
        if plan.table is not None:
            owned.append(f"{plan.table.name} shard [{plan.table.shard_rows}, "
                         f"{plan.table.shape[1]}]")
        lines.append(f"{ep}: {', '.join(owned) or '(nothing)'}")
        serv = prog.global_block().ops[-1]
        for idx in serv.attrs["optimize_blocks"]:
            ops = [op.type for op in prog.block(idx).ops]
            lines.append(f"  block {idx}: {', '.join(ops) or '(empty)'}")
    return "\n".join(lines)
