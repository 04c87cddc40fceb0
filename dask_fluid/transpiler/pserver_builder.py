"""What builds one pserver program: :class:`PserverBuilder` adds its variables and blocks, and
:class:`PserverBuild` is the result (:mod:`.pserver_program` says what the program holds).

Its own module so that the builders of the distributed-table blocks (:mod:`.lookup_table`) and
of the rest (:mod:`.pserver_program`) both stand above it."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ..framework import OP_ROLE_KEY, Block, Operator, OpRole, Program, Variable
from .plan import (
    SLICED_ACCUMULATORS,
    TRAINER_ID_VAR,
    ParamPlan,
    TranspilePlan,
    is_optimizer_op,
)
from .slicing import VarBlock

logger = logging.getLogger("dask_fluid.transpiler")

@dataclass
class PserverBuild:
    """A pserver program and where each of its variables comes from (read by the startup)."""

    program: Program
    #: pserver var name -> (original var name, the block geometry when it is a slice)
    origin_of: dict[str, tuple[str, VarBlock | None]] = field(default_factory=dict)
    #: (param block, backup var) pairs initialised with ``assign`` (DC-ASGD)
    dc_asgd_backups: list[tuple[str, str]] = field(default_factory=list)


def clone_var(block: Block, var: Variable, name: str | None = None,
              shape: tuple[int, ...] | None = None, **overrides) -> Variable:
    """Create (or return) ``name`` in ``block`` with ``var``'s dtype and type."""
    name = name or var.name
    if block.has_var(name):
        return block.var(name)
    kwargs = dict(shape=var.shape if shape is None else shape, dtype=var.dtype,
                  persistable=var.persistable, type=var.type, lod_level=var.lod_level,
                  stop_gradient=var.stop_gradient)
    kwargs.update(overrides)
    return block.create_var(name=name, **kwargs)


class PserverBuilder:
    """Adds one pserver's variables and blocks to :attr:`build` (its program)."""

    def __init__(self, plan: TranspilePlan, endpoint: str, log: Callable[..., None]) -> None:
        self.plan = plan
        self.ep = endpoint
        self.log = log
        self.origin = plan.origin.global_block()
        self.build = PserverBuild(Program())
        self.prog = self.build.program
        self.prog.random_seed = plan.origin.random_seed
        self.gblock = self.prog.global_block()
        self.recv_inputs: list[str] = []
        self.grad_to_block_id: list[str] = []
        self.sparse_grad_to_param: list[str] = []
        self.optimize_blocks: list[int] = []

    # -- variables ----------------------------------------------------------------------------
    def _global(self, name: str, origin_name: str | None = None, block: VarBlock | None = None,
                shape=None, **overrides) -> str:
        src = self.origin._var_recursive(origin_name or name)
        clone_var(self.gblock, src, name, shape, **overrides)
        self.build.origin_of.setdefault(name, (origin_name or name, block))
        return name

    def _declare_param_block(self, pp: ParamPlan, k: int) -> None:
        b = pp.blocks[k]
        pname, merged = pp.param_block_names[k], pp.grad_block_names[k]
        self._global(pname, pp.param, None if b.is_whole else b, b.shape, persistable=True)
        self._global(merged, pp.grad, None, b.shape, persistable=True)
        if pp.per_trainer:
            for t in range(self.plan.trainer_num):
                name = f"{merged}.trainer_{t}"
                self._global(name, pp.grad, None, b.shape, persistable=True)
                self.recv_inputs.append(name)
        else:
            self.recv_inputs.append(merged)

    # -- learning-rate block ------------------------------------------------------------------
    def _clone_op(self, op: Operator, dst: Block, rename: Callable[[str], str]) -> Operator:
        ins = {s: [rename(n) for n in names] for s, names in op.inputs.items()}
        outs = {s: [rename(n) for n in names] for s, names in op.outputs.items()}
        return dst.append_op(op.type, ins, outs, copy.deepcopy(op.attrs))

    def _clone_with_sub_blocks(self, op: Operator, dst: Block) -> None:
        src_block = op.block

        def ensure(name: str) -> str:
            if src_block.has_var(name) and src_block.idx != 0:
                clone_var(dst, src_block.var(name))
            else:
                self._global(name)
            return name

        cloned = self._clone_op(op, dst, ensure)
        if "sub_block" in op.attrs and op.attrs["sub_block"] >= 0:
            sub_src = op.block.program.block(op.attrs["sub_block"])
            sub = self.prog._create_block(dst.idx)
            for inner in sub_src.ops:
                self._clone_with_sub_blocks(inner, sub)
            cloned.attrs["sub_block"] = sub.idx

    def add_lr_block(self) -> int:
        if not self.plan.lr_ops:
            return -1
        lr_block = self.prog._create_block(0)
        for op in self.plan.lr_ops:
            self._clone_with_sub_blocks(op, lr_block)
        self.optimize_blocks.append(lr_block.idx)
        self.log("pserver %s: LR block %d with %s", self.ep, lr_block.idx,
                 [op.type for op in lr_block.ops])
        return lr_block.idx

    # -- optimize blocks ----------------------------------------------------------------------
    def add_param_block(self, pp: ParamPlan, k: int, parent: int, shared_on_ep: bool) -> None:
        plan = self.plan
        blk = self.prog._create_block(parent)
        b = pp.blocks[k]
        pname, merged = pp.param_block_names[k], pp.grad_block_names[k]
        self.optimize_blocks.append(blk.idx)
        self.grad_to_block_id.append(f"{merged}:{blk.idx}")
        if pp.sparse:
            self.sparse_grad_to_param.append(f"{merged}:{pname}")
        if pp.per_trainer:
            blk.append_op("sum", inputs={"X": [f"{merged}.trainer_{t}"
                                               for t in range(plan.trainer_num)]},
                          outputs={"Out": [merged]}, attrs={OP_ROLE_KEY: OpRole.Optimize})
            blk.append_op("scale", inputs={"X": [merged]}, outputs={"Out": [merged]},
                          attrs={"scale": 1.0 / plan.trainer_num, OP_ROLE_KEY: OpRole.Optimize})
        ops = plan.ops_of_param(pp.param)
        local = {n for op in ops for n in op.output_arg_names if n != pp.param}
        suffix = f".block{k}" if shared_on_ep else ""

        def rename(name: str, slot: str | None = None, op: Operator | None = None) -> str:
            if name == pp.param:
                return pname
            if name == pp.grad:
                return merged
            var = self.origin._var_recursive(name)
            if name not in local:
                return self._global(name)
            sliced = (op is not None and slot in SLICED_ACCUMULATORS.get(op.type, ())) or (
                var.shape is not None and tuple(var.shape) == b.full_shape)
            new = name + suffix
            geometry = None
            shape = var.shape
            if sliced and not b.is_whole:
                shape = b.shape
                geometry = VarBlock(name, b.index, b.offset, b.size, b.shape, b.full_shape)
            self._global(new, name, geometry, shape)
            return new

        for op in ops:
            ins = {s: [rename(n, s, op) for n in names] for s, names in op.inputs.items()}
            outs = {s: [rename(n, s.removesuffix("Out"), op) for n in names]
                    for s, names in op.outputs.items()}
            if is_optimizer_op(op) and plan.dc_asgd:
                ins["Grad"] = [self._dc_asgd(blk, pname, ins["Grad"][0], b)]
            blk.append_op(op.type, ins, outs, copy.deepcopy(op.attrs))
        self.log("pserver %s: block %d for %s %s: %s", self.ep, blk.idx, pname, list(b.shape),
                 [op.type for op in blk.ops])

    def _dc_asgd(self, blk: Block, pname: str, grad: str, b: VarBlock) -> str:
        """g' = g + (p - bak[trainer]) * g * g (DC-ASGD, lambda = 1, as Fluid)."""
        backups = []
        for t in range(self.plan.trainer_num):
            bak = f"{pname}.trainer_{t}_bak"
            clone_var(self.gblock, self.gblock.var(pname), bak, persistable=True)
            self.build.dc_asgd_backups.append((pname, bak))
            backups.append(bak)
        if not self.gblock.has_var(TRAINER_ID_VAR):
            self.gblock.create_var(name=TRAINER_ID_VAR, shape=[1], dtype="int64")
        dtype = self.gblock.var(pname).dtype
        tmp = {}
        for key in ("local_bak", "dc_o1", "dc_o2", "dc_o3", "dc_o4"):
            tmp[key] = blk.create_var(name=f"{pname}.{key}", shape=b.shape, dtype=dtype).name
        role = {OP_ROLE_KEY: OpRole.Optimize}
        blk.append_op("ref_by_trainer_id", inputs={"X": backups, "TrainerId": [TRAINER_ID_VAR]},
                      outputs={"Out": [tmp["local_bak"]]}, attrs=role)
        blk.append_op("elementwise_sub", inputs={"X": [pname], "Y": [tmp["local_bak"]]},
                      outputs={"Out": [tmp["dc_o1"]]}, attrs=role)
        blk.append_op("elementwise_mul", inputs={"X": [grad], "Y": [grad]},
                      outputs={"Out": [tmp["dc_o2"]]}, attrs=role)
        blk.append_op("elementwise_mul", inputs={"X": [tmp["dc_o1"]], "Y": [tmp["dc_o2"]]},
                      outputs={"Out": [tmp["dc_o3"]]}, attrs=role)
        blk.append_op("elementwise_add", inputs={"X": [grad], "Y": [tmp["dc_o3"]]},
                      outputs={"Out": [tmp["dc_o4"]]}, attrs=role)
        return tmp["dc_o4"]

    # -- GEO-SGD ------------------------------------------------------------------------------
    def add_geo_block(self, pp: ParamPlan, k: int) -> None:
        """``sum(P, P.delta) -> P``: a trainer's delta (already divided by the number of
        trainers) is added to the parameter block as it arrives."""
        b = pp.blocks[k]
        pname, delta = pp.param_block_names[k], pp.delta_names[k]
        self._global(pname, pp.param, None if b.is_whole else b, b.shape, persistable=True)
        # not through _global: a delta is received, never initialised by the startup
        clone_var(self.gblock, self.origin._var_recursive(pp.param), delta, b.shape,
                  persistable=False)
        self.recv_inputs.append(delta)
        blk = self.prog._create_block(0)
        blk.append_op("sum", inputs={"X": [pname, delta]}, outputs={"Out": [pname]},
                      attrs={OP_ROLE_KEY: OpRole.Optimize})
        self.optimize_blocks.append(blk.idx)
        self.grad_to_block_id.append(f"{delta}:{blk.idx}")
        self.log("pserver %s: GEO block %d adds %s to %s %s", self.ep, blk.idx, delta, pname,
                 list(b.shape))

    # -- listen_and_serv ----------------------------------------------------------------------
    def finish(self, lr_block_id: int, table_attrs: dict) -> None:
        if not self.optimize_blocks:
            logger.warning("pserver %s holds no block: it takes no step of any trainer", self.ep)
            self.optimize_blocks.append(self.prog._create_block(0).idx)
        attrs = {
            "endpoint": self.ep,
            "pserver_id": self.plan.endpoints.index(self.ep),
            "Fanin": self.plan.trainer_num,
            "sync_mode": self.plan.sync_mode,
            "distributed_mode": int(self.plan.mode.distributed_mode),
            "optimize_blocks": list(self.optimize_blocks),
            "grad_to_block_id": sorted(set(self.grad_to_block_id),
                                       key=self.grad_to_block_id.index),
            "sparse_grad_to_param": list(self.sparse_grad_to_param),
            "lr_decay_block_id": lr_block_id,
            "dc_asgd": self.plan.dc_asgd,
            "prefetch_var_name_to_block_id": [],
            "checkpint_block_id": -1,
            "param_varnames": [pp.param_block_names[k] for pp, k in self.plan.blocks_on(self.ep)],
            OP_ROLE_KEY: OpRole.RPC,
        }
        attrs.update(self.plan.server_attrs)
        attrs.update(table_attrs)
        self.gblock.append_op("listen_and_serv", inputs={"X": list(self.recv_inputs)},
                              outputs={}, attrs=attrs)
        self.prog.current_block_idx = 0


__all__ = ["PserverBuild", "PserverBuilder", "clone_var"]
