"""What a transpile decided: the parameters, their blocks and where each block lives.

The :class:`TranspilePlan` is the one place the trainer rewrite, the pserver programs and the
startup programs read from; nothing reaches them through hidden mutable attributes. It also
fixes every variable name the trainer and the pservers must agree on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, Block, Operator, OpRole, Program
from .modes import TrainingMode
from .slicing import VarBlock

#: Fluid's pserver optimizer whitelist (``_is_optimizer_op`` plus the supported types)
OPTIMIZER_TYPES = ("sgd", "adam", "adagrad", "adamax", "momentum", "lars_momentum", "rmsprop",
                   "decayed_adagrad", "ftrl", "dpsgd")

#: optimizer input slots whose state has the parameter's shape and is sliced with it (§4.3)
SLICED_ACCUMULATORS = {
    "adam": ("Moment1", "Moment2"),
    "adagrad": ("Moment",),
    "decayed_adagrad": ("Moment",),
    "adamax": ("Moment", "InfNorm"),
    "momentum": ("Velocity",),
    "lars_momentum": ("Velocity",),
    "rmsprop": ("Moment", "MeanSquare", "MeanGrad"),
    "ftrl": ("SquaredAccumulator", "LinearAccumulator"),
}

RPC_OP_TYPES = ("send", "recv", "send_barrier", "fetch_barrier", "prefetch", "listen_and_serv",
                "gen_nccl_id", "checkpoint_notify")

#: the scope variable holding the sending trainer's id while a DC-ASGD block runs
TRAINER_ID_VAR = "@TRAINER_ID@"


def is_optimizer_op(op: Operator) -> bool:
    """An op that updates a parameter from a learning rate (Fluid's ``_is_optimizer_op``)."""
    return "Param" in op.inputs and "LearningRate" in op.inputs


def op_role(op: Operator) -> int:
    return int(op.attrs.get(OP_ROLE_KEY, 0))


def optimize_ops(block: Block) -> list[Operator]:
    """Ops whose role is exactly Optimize (clip, decay, optimizer, beta-power scales)."""
    return [op for op in block.ops if op_role(op) == OpRole.Optimize]


def lr_ops(block: Block) -> list[Operator]:
    """Learning-rate schedule ops (role LRSched, or LRSched|Optimize)."""
    return [op for op in block.ops
            if op_role(op) in (OpRole.LRSched, OpRole.LRSched | OpRole.Optimize)]


def params_grads_of(opt_ops: list[Operator]) -> list[tuple[str, str]]:
    """(param, grad) names from ``op_role_var``, first seen wins, in optimize-op order."""
    seen: dict[str, str] = {}
    for op in opt_ops:
        role_var = op.attrs.get(OP_ROLE_VAR_KEY) or []
        if len(role_var) >= 2 and role_var[0] not in seen:
            seen[role_var[0]] = role_var[1]
    return list(seen.items())


@dataclass
class ParamPlan:
    """One parameter: its blocks, their endpoints and every name derived from them.

    Attributes
    ----------
    param, grad : str
        Names in the original program.
    blocks : list of VarBlock
        Param blocks (the gradient is cut identically).
    endpoints : list of str
        Endpoint of each block.
    sparse : bool
        The gradient is a SelectedRows (``embedding(is_sparse=True)``).
    per_trainer : bool
        Sync mode with more than one trainer: each trainer's gradient has its own name on the
        pserver (``.trainer_{i}`` suffix).
    remote : bool
        A sparse table whose lookups fetch their rows from the pservers: the trainer's step
        does not receive it (:mod:`.remote_prefetch`).
    """

    param: str
    grad: str
    blocks: list[VarBlock]
    endpoints: list[str] = field(default_factory=list)
    sparse: bool = False
    per_trainer: bool = False
    remote: bool = False

    @property
    def split(self) -> bool:
        return len(self.blocks) > 1

    @property
    def param_block_names(self) -> list[str]:
        """``P.block{i}``, or ``P`` when the parameter is whole."""
        if not self.split:
            return [self.param]
        return [f"{self.param}.block{b.index}" for b in self.blocks]

    @property
    def grad_block_names(self) -> list[str]:
        """The pserver's merged gradient per block: ``G.block{i}``, or ``G``."""
        if not self.split:
            return [self.grad]
        return [f"{self.grad}.block{b.index}" for b in self.blocks]

    def trainer_grad_names(self, trainer_id: int) -> list[str]:
        """What trainer ``trainer_id`` sends for each block (``G[.block{i}].trainer_{t}``)."""
        if not self.per_trainer:
            return self.grad_block_names
        return [f"{n}.trainer_{trainer_id}" for n in self.grad_block_names]

    @property
    def sections(self) -> list[int]:
        """Rows per block (``split_byref``'s ``sections``)."""
        return [b.rows for b in self.blocks]

    @property
    def delta_names(self) -> list[str]:
        """GEO-SGD: what the trainer sends for each block (``P[.block{i}].delta``)."""
        return [f"{n}.delta" for n in self.param_block_names]


@dataclass
class TablePlan:
    """The distributed lookup table (§6): sharded by ``id % P`` over all pservers."""

    name: str
    grad: str
    shape: tuple[int, ...]
    dtype: str
    #: (ids var, output var) of each lookup_table op on the table, in program order
    lookups: list[tuple[str, str]]
    endpoints: list[str]
    sync_mode: bool

    @property
    def shard_rows(self) -> int:
        """Declared rows of each pserver's shard: ``ceil(H / P)``."""
        return math.ceil(self.shape[0] / len(self.endpoints))

    def trainer_grad_names(self, trainer_id: int) -> list[str]:
        """Per-pserver pieces of the table gradient sent by ``trainer_id``."""
        if self.sync_mode:
            return [f"{self.grad}.trainer_{trainer_id}.pserver_{k}"
                    for k in range(len(self.endpoints))]
        return [f"{self.grad}.pserver_{k}" for k in range(len(self.endpoints))]

    @staticmethod
    def prefetch_names(shard: int) -> tuple[str, str]:
        """(ids, rows) variables exchanged with pserver ``shard`` by the one prefetch that
        serves all the table's lookups (Fluid's names)."""
        return f"prefetch_compress_in_tmp_{shard}", f"prefetch_compress_out_tmp_{shard}"


@dataclass
class TranspilePlan:
    """Everything ``transpile()`` decided, read by the program builders."""

    origin: Program
    origin_startup: Program
    endpoints: list[str]
    trainer_id: int
    trainer_num: int
    mode: TrainingMode
    slice_var_up: bool
    dc_asgd: bool
    opt_ops: list[Operator]
    lr_ops: list[Operator]
    params: list[ParamPlan]
    table: TablePlan | None = None
    #: the listen_and_serv thread attrs (the transpiler's ServerRuntimeConfig)
    server_attrs: dict[str, int] = field(default_factory=dict)
    #: async mode with a decay schedule: the step counter the trainers' own counters sum to
    #: (:mod:`.lr_counter`), else None
    decay_counter: str | None = None

    @property
    def sync_mode(self) -> bool:
        """Synchronous rounds (sync mode, or sync through the runtime split)."""
        return self.mode.sync

    def param_plan(self, param: str) -> ParamPlan:
        for pp in self.params:
            if pp.param == param:
                return pp
        raise KeyError(f"{param!r} is not a transpiled parameter")

    def blocks_on(self, endpoint: str) -> list[tuple[ParamPlan, int]]:
        """(param plan, block index) of every block placed on ``endpoint``, in the order of
        the parameters' optimizer ops (Fluid's pserver block order: a parameter whose
        gradient clip comes first is still placed by its optimizer op), then block order."""
        rank: dict[str, int] = {}
        for i, op in enumerate(self.opt_ops):
            if is_optimizer_op(op):
                rank.setdefault(op.input("Param")[0], i)
        params = sorted(self.params, key=lambda pp: rank.get(pp.param, len(self.opt_ops)))
        return [(pp, k) for pp in params for k, ep in enumerate(pp.endpoints)
                if ep == endpoint]

    def ops_of_param(self, param: str) -> list[Operator]:
        """The optimize ops that belong to ``param`` (``op_role_var[0] == param``)."""
        return [op for op in self.opt_ops
                if (op.attrs.get(OP_ROLE_VAR_KEY) or [None])[0] == param]
