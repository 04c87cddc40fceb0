"""The program of one pserver (§4.3): ``listen_and_serv`` and its optimize blocks.

Block 0 holds the pserver's variables and a single ``listen_and_serv`` op. Its sub-blocks, in
order: the learning-rate block (when the program has LR-schedule ops; its conditional
sub-blocks are cloned as its children), one optimize block per parameter block placed here
(Fluid makes one per optimizer op, which loses a second block of the same parameter on one
pserver), the distributed-table blocks, or a single empty block when there is nothing to do.

An optimize block, with ``G`` the merged gradient and ``P`` the parameter block:
``sum(G.trainer_*) -> G`` and ``scale(G, 1/N)`` (sync, N > 1), then the parameter's clip and
decay ops, the DC-ASGD compensation (async), the optimizer op with its accumulators sliced to
the block, and the ops that follow it (Adamax's beta power). Every name is rewritten so the
block reads and writes only this pserver's variables: the optimizer's ``Grad`` is whatever the
clip/decay ops produced (Fluid wires the raw merged gradient, skipping them).

GEO-SGD (Fluid 1.8's GeoSgdTranspiler): the trainers keep their optimizer, so a pserver holds
only its parameter blocks and one block per parameter block, ``sum(P, P.delta) -> P``, run when
a trainer's delta ``P.delta`` arrives (``grad_to_block_id`` names the deltas);
``distributed_mode`` is 3.

Variables local to a parameter's ops (accumulators, clip/decay temporaries, beta powers) keep
their names, as in Fluid, unless two blocks of one parameter live on the same pserver (possible
with HashName); then they get a ``.block{k}`` suffix so the blocks do not share state.
"""

from __future__ import annotations

from collections.abc import Callable

from .lookup_table import add_table_blocks
from .plan import TranspilePlan
from .pserver_builder import PserverBuild, PserverBuilder, clone_var


def build_pserver_program(plan: TranspilePlan, endpoint: str,
                          log: Callable[..., None]) -> PserverBuild:
    """Build the program of the pserver at ``endpoint``."""
    builder = PserverBuilder(plan, endpoint, log)
    on_ep = plan.blocks_on(endpoint)
    if plan.mode.geo:
        for pp, k in on_ep:
            builder.add_geo_block(pp, k)
        builder.finish(-1, {})
        return builder.build
    for pp, k in on_ep:
        builder._declare_param_block(pp, k)
    lr_block_id = builder.add_lr_block()
    parent = lr_block_id if lr_block_id >= 0 else 0
    for pp, k in on_ep:
        shared = sum(1 for q, _ in on_ep if q is pp) > 1
        builder.add_param_block(pp, k, parent, shared)
    table_attrs = add_table_blocks(builder, parent) if plan.table else {}
    builder.finish(lr_block_id, table_attrs)
    return builder.build


__all__ = ["PserverBuild", "build_pserver_program", "clone_var"]
