"""The pserver startup program: each block starts as the exact slice of its parameter.

Fluid re-runs the parameter's init op with the block's shape, so a sliced parameter starts from
different random values than the unsliced one. Here the copied init op keeps the original op
and gets ``shape`` = the block shape plus, for random ops, ``full_shape`` (the whole
parameter), ``row_offset`` (the block's first row) and ``rng_key`` (the original parameter
name): the kernel draws the full tensor with the generator keyed by (seed, crc32(rng_key)) and
returns the block's rows, which equal the same rows of the local startup's draw. Accumulators
(``fill_constant``) just get the block shape.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from ..framework import OP_ROLE_KEY, OpRole, Program
from .plan import TranspilePlan
from .pserver_builder import PserverBuild, clone_var

RANDOM_INIT_OPS = ("uniform_random", "gaussian_random", "truncated_gaussian_random")
SKIPPED_OPS = ("recv", "fetch_barrier", "concat")


def build_pserver_startup(plan: TranspilePlan, endpoint: str, build: PserverBuild,
                          log: Callable[..., None]) -> Program:
    """Startup program of the pserver at ``endpoint`` for its program ``build``."""
    pserver = build.program
    startup = Program()
    startup.random_seed = plan.origin_startup.random_seed
    sblock = startup.global_block()
    for var in pserver.global_block().vars.values():
        clone_var(sblock, var)
    # original var -> [(pserver var, geometry)], in the pserver's declaration order
    targets: dict[str, list] = {}
    for name, (orig, geometry) in build.origin_of.items():
        targets.setdefault(orig, []).append((name, geometry))
    table = plan.table.name if plan.table else None
    for op in plan.origin_startup.global_block().ops:
        if op.type in SKIPPED_OPS:
            continue
        outs = op.output_arg_names
        if len(outs) != 1 or outs[0] not in targets:
            continue
        for name, geometry in targets[outs[0]]:
            var = sblock.var(name)
            attrs = copy.deepcopy(op.attrs)
            if "shape" in attrs and var.shape is not None:
                attrs["shape"] = list(var.shape)
            if op.type in RANDOM_INIT_OPS:
                if geometry is not None:
                    attrs.update(full_shape=list(geometry.full_shape),
                                 row_offset=geometry.row_offset, rng_key=geometry.varname)
                elif name != outs[0]:
                    attrs["rng_key"] = outs[0]
                if name == table:
                    # Shard k holds ids k, k + P, ...: draw the whole table as the local
                    # startup does and keep those rows, so sharding never changes the start.
                    full = list(op.attrs.get("shape", var.shape))
                    attrs.update(full_shape=full, row_offset=plan.endpoints.index(endpoint),
                                 row_stride=len(plan.endpoints), rng_key=table)
            ins = {s: list(v) for s, v in op.inputs.items()}
            sblock.append_op(op.type, ins, {s: [name] for s in op.outputs}, attrs)
            log("pserver %s startup: %s -> %s %s", endpoint, op.type, name, attrs.get("shape"))
    for param_block, bak in build.dc_asgd_backups:
        sblock.append_op("assign", inputs={"X": [param_block]}, outputs={"Out": [bak]},
                         attrs={OP_ROLE_KEY: OpRole.Forward})
    return startup
