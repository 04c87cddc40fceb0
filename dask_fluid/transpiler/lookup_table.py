"""The distributed lookup table (§6): ``embedding(is_distributed=True)``.

The table is sharded by id modulo the number of pservers: ids with ``id % P == k`` live on
pserver ``k``, which declares a SELECTED_ROWS table of ``ceil(H / P)`` rows (the runtime keeps
rows by global id; ``id // P`` is a dense local row). On the trainer:

- forward: the table's ``lookup_table`` ops are replaced by one ``split_ids -> prefetch ->
  merge_ids`` at the first one's place, which fetches the union of their ids, one request
  per pserver, and writes every lookup's output;
- backward: after the op that last writes the table gradient, ``split_ids`` cuts it into one
  piece per pserver and one ``send`` ships them; the table is never received, and its startup
  init becomes ``fake_init``.

On each pserver: a table optimize block (sync: ``sum`` of the trainers' pieces, then ``sgd``
with **no 1/N scale**, as Fluid; async: ``sgd``), one prefetch block
(``lookup_sparse_table``) and a checkpoint block (``save``). Only SGD is supported for the
table, as in Fluid: another optimizer is replaced by SGD with a warning.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..distributed_table import LOOKUP_TABLE_TYPE, distributed_table_name
from ..framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, Block, OpRole, Program, VarType, grad_var_name
from .plan import TablePlan, TranspilePlan, is_optimizer_op
from .trainer_rewrite import ControlVars, last_writer

if TYPE_CHECKING:
    from .pserver_builder import PserverBuilder

logger = logging.getLogger("dask_fluid.transpiler")

CHECKPOINT_PATH_VAR = "kLookupTablePath"


def find_distributed_table(block: Block) -> str | None:
    """The one table looked up with ``is_distributed=True`` (None if there is none).

    Raises
    ------
    RuntimeError
        If several tables are distributed, or a lookup of the distributed table lacks the flag.
    ValueError
        If a lookup of the distributed table is not ``is_sparse`` (its gradient must be sparse
        to be split by id).
    """
    table = distributed_table_name(block)
    if table is None:
        return None
    for op in block.ops:
        if op.type != LOOKUP_TABLE_TYPE or op.input("W")[0] != table:
            continue
        if not op.attrs.get("is_distributed"):
            raise RuntimeError(f"every lookup_table op on the distributed table {table!r} must "
                               "set is_distributed=True")
        if not op.attrs.get("is_sparse"):
            raise ValueError(f"the distributed table {table!r} must be looked up with "
                             "is_sparse=True: use embedding(..., is_sparse=True, "
                             "is_distributed=True)")
    return table


def make_table_plan(block: Block, table: str, endpoints: list[str], sync_mode: bool
                    ) -> TablePlan:
    var = block.var(table)
    lookups = [(op.input("Ids")[0], op.output("Out")[0]) for op in block.ops
               if op.type == LOOKUP_TABLE_TYPE and op.input("W")[0] == table]
    return TablePlan(table, grad_var_name(table), tuple(var.shape), var.dtype, lookups,
                     list(endpoints), sync_mode)


def rewrite_trainer(program: Program, plan: TranspilePlan, control: ControlVars) -> str:
    """Replace the table's lookups by prefetches and send its gradient; returns the send's
    control output."""
    table = plan.table
    block = program.global_block()
    p = len(table.endpoints)
    # as Fluid: all lookups go away and one split_ids -> prefetch -> merge_ids at the first
    # one's place serves them all (one round trip per pserver for the union of their ids)
    def is_lookup(op) -> bool:
        return op.type == LOOKUP_TABLE_TYPE and op.input("W")[0] == table.name

    first = next(i for i, op in enumerate(block.ops) if is_lookup(op))
    for i, op in enumerate(block.ops[first:], first):
        if is_lookup(op):
            late = [o for o in block.ops[first:i] if op.input("Ids")[0] in o.output_arg_names]
            if late:
                raise ValueError(
                    f"the ids {op.input('Ids')[0]!r} of a lookup of the distributed table "
                    f"{table.name!r} are written by a {late[0].type} op after the table's "
                    "first lookup, where the one prefetch of all its lookups runs: compute "
                    "every lookup's ids before the first lookup of the table")
    block.ops = [op for op in block.ops if not is_lookup(op)]
    ids = [i for i, _ in table.lookups]
    embs = [o for _, o in table.lookups]
    ins, fetched = [], []
    for k in range(p):
        in_name, out_name = TablePlan.prefetch_names(k)
        block.create_var(name=in_name, shape=[-1, 1], dtype=block.var(ids[0]).dtype)
        block.create_var(name=out_name, shape=[-1, table.shape[1]],
                         dtype=block.var(embs[0]).dtype)
        ins.append(in_name)
        fetched.append(out_name)
    block._insert_op(first, "split_ids", inputs={"Ids": ids}, outputs={"Out": ins})
    block._insert_op(first + 1, "prefetch", inputs={"X": ins}, outputs={"Out": fetched},
                     attrs={"epmap": list(table.endpoints), "table_names": [table.name] * p,
                            "trainer_id": plan.trainer_id})
    block._insert_op(first + 2, "merge_ids", inputs={"Ids": ids, "Rows": ins, "X": fetched},
                     outputs={"Out": embs})
    idx = last_writer(block, table.grad)
    if idx < 0:
        raise ValueError(f"no op writes the gradient {table.grad!r} of the distributed table")
    grad = block.var(table.grad)
    names = table.trainer_grad_names(plan.trainer_id)
    for name in names:
        block.create_var(name=name, shape=grad.shape, dtype=grad.dtype, type=grad.type)
    role_var = [table.name, table.grad]
    block._insert_op(idx + 1, "split_ids", inputs={"Ids": [table.grad]}, outputs={"Out": names},
                     attrs={OP_ROLE_KEY: OpRole.Dist, OP_ROLE_VAR_KEY: role_var})
    dummy = control.new(block)
    block._insert_op(idx + 2, "send", inputs={"X": names}, outputs={"Out": [dummy]},
                     attrs={"epmap": list(table.endpoints), "send_varnames": list(names),
                            "sections": [], "sync_mode": plan.sync_mode,
                            "trainer_id": plan.trainer_id, OP_ROLE_KEY: OpRole.RPC,
                            OP_ROLE_VAR_KEY: role_var})
    return dummy


def add_table_blocks(builder: PserverBuilder, parent: int) -> dict:
    """Append the table's optimize, prefetch and checkpoint blocks to a pserver program;
    returns the listen_and_serv attrs they set."""
    plan, table, gblock = builder.plan, builder.plan.table, builder.gblock
    k = plan.endpoints.index(builder.ep)
    origin = builder.origin
    opt = [op for op in plan.opt_ops if is_optimizer_op(op) and op.input("Param")[0] == table.name]
    if not opt:
        raise ValueError(f"no optimizer op updates the distributed table {table.name!r}")
    if opt[0].type != "sgd":
        logger.warning("the distributed lookup table %r only supports sgd: its %s optimizer is "
                       "replaced by sgd on the pservers", table.name, opt[0].type)
    lr = builder._global(opt[0].input("LearningRate")[0])
    shard_shape = (table.shard_rows,) + tuple(table.shape[1:])
    builder._global(table.name, shape=shard_shape, type=VarType.SELECTED_ROWS,
                    persistable=True)
    builder.build.origin_of[table.name] = (table.name, None)
    blk = builder.prog._create_block(parent)
    builder.optimize_blocks.append(blk.idx)
    role = {OP_ROLE_KEY: OpRole.Optimize}
    if plan.sync_mode:
        grad = builder._global(table.grad)
        pieces = [f"{table.grad}.trainer_{t}.pserver_{k}" for t in range(plan.trainer_num)]
        for name in pieces:
            builder._global(name, table.grad)
            builder.recv_inputs.append(name)
        blk.append_op("sum", inputs={"X": pieces}, outputs={"Out": [grad]}, attrs=role)
    else:
        grad = builder._global(table.trainer_grad_names(0)[k], table.grad)
        builder.recv_inputs.append(grad)
    blk.append_op("sgd", inputs={"Param": [table.name], "Grad": [grad], "LearningRate": [lr]},
                  outputs={"ParamOut": [table.name]},
                  attrs={**role, OP_ROLE_VAR_KEY: [table.name, table.grad]})
    builder.grad_to_block_id.append(f"{grad}:{blk.idx}")
    builder.sparse_grad_to_param.append(f"{grad}:{table.name}")
    in_name, out_name = TablePlan.prefetch_names(k)
    gblock.create_var(name=in_name, shape=[-1, 1], dtype=origin.var(table.lookups[0][0]).dtype)
    gblock.create_var(name=out_name, shape=[-1, table.shape[1]], dtype=table.dtype)
    pblk = builder.prog._create_block(blk.idx)
    pblk.append_op("lookup_sparse_table", inputs={"W": [table.name], "Ids": [in_name]},
                   outputs={"Out": [out_name]},
                   attrs={"is_test": False, "padding_idx": -1, "auto_grown_table": True})
    prefetch = [f"{in_name}:{pblk.idx}"]
    gblock.create_var(name=CHECKPOINT_PATH_VAR, type=VarType.RAW, persistable=True)
    cblk = builder.prog._create_block(blk.idx)
    cblk.append_op("save", inputs={"X": [table.name]}, attrs={"file_path": "none"})
    builder.log("pserver %s: table %s shard %d %s, optimize block %d, prefetch %s, "
                "checkpoint block %d", builder.ep, table.name, k, list(shard_shape), blk.idx,
                prefetch, cblk.idx)
    # what the pserver needs to serve its shard (not a Fluid attr: Fluid's table is keyed by
    # global id and grows, here shard k holds the ids id % P == k at row id // P)
    return {"prefetch_var_name_to_block_id": prefetch, "checkpint_block_id": cblk.idx,
            "param_varnames": [*_params_on(builder), table.name],
            "lookup_table_shard": [table.name, table.grad, len(plan.endpoints),
                                   table.shard_rows]}


def _params_on(builder: PserverBuilder) -> list[str]:
    return [pp.param_block_names[k] for pp, k in builder.plan.blocks_on(builder.ep)]
