"""Fluid 1.8's collective transpilers (``fluid.transpiler.collective``): what
``DistributeTranspilerConfig.mode = "collective"`` and the collective fleet's
``DistributedStrategy.mode = "collective"`` write into the programs.

- :class:`GradAllReduce` (``collective_mode = "grad_allreduce"``): the loss gradient is scaled
  by ``1 / nranks`` and every parameter gradient is summed over the trainers by a
  ``c_allreduce_sum`` right after the backward op that produced it, so each optimizer op sees
  the mean gradient of the global batch;
- :class:`LocalSGD` (``"local_sgd"``): each trainer takes its optimizer step alone, then the
  parameters' moves since the last step are averaged (``param = snapshot - mean(snapshot -
  param)``) and the snapshot taken again.

Both give the startup program one ``c_gen_nccl_id`` + ``c_comm_init`` pair per ring and a
``c_broadcast`` of every parameter from rank 0. The ops' kernels are the trainer
communicator's (:mod:`dask_fluid.distributed.collective.c_ops`): a TCP ring between the
trainer endpoints on CPUs, NCCL on GPUs. Fluid's rings are CUDA streams of one device; here
every ring of a process is one communicator, so ``nccl_comm_num`` changes the program, not the
numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import unique_name
from ..framework import (
    OP_ROLE_KEY,
    OP_ROLE_VAR_KEY,
    Operator,
    OpRole,
    Program,
    Variable,
    VarType,
)

__all__ = ["Collective", "GradAllReduce", "LocalSGD", "MultiThread"]


class Collective:
    """What both collective transpilers do to the startup program.

    Parameters
    ----------
    nrings : int
        Communicators (Fluid's ``nccl_comm_num``): the all-reduces take them in turn.
    """

    mode = ""

    def __init__(self, nrings: int) -> None:
        if isinstance(nrings, bool) or not isinstance(nrings, int) or nrings < 1:
            raise ValueError(f"nrings must be an int >= 1, got {nrings!r}")
        self.nrings = nrings
        self.endpoints: list[str] = []
        self.current_endpoint = ""
        self.other_endpoints: list[str] = []
        self.nranks = 0
        self.rank = 0
        self.wait_port = True
        self.startup_program: Program | None = None
        self.main_program: Program | None = None

    def transpile(self, startup_program: Program, main_program: Program, rank: int,
                  endpoints: str | Sequence[str], current_endpoint: str,
                  wait_port: bool = True) -> None:
        """Rewrite both programs in place for trainer ``rank`` of ``endpoints``.

        Raises
        ------
        ValueError
            Fewer than two endpoints, a rank out of range, or ``current_endpoint`` not the
            rank's endpoint.
        """
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        endpoints = [str(e).strip() for e in endpoints]
        if len(endpoints) < 2:
            raise ValueError(f"collective mode needs at least two trainer endpoints, got "
                             f"{endpoints}; train one process with the plain Executor")
        if len(set(endpoints)) != len(endpoints):
            raise ValueError(f"the trainer endpoints {endpoints} repeat an endpoint")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(endpoints):
            raise ValueError(f"rank must be an int in [0, {len(endpoints) - 1}] for "
                             f"{len(endpoints)} trainers, got {rank!r}")
        if current_endpoint != endpoints[rank]:
            raise ValueError(f"current endpoint {current_endpoint!r} is not trainer {rank}'s "
                             f"endpoint in {endpoints}; pass current_endpoint = "
                             "endpoints[trainer_id]")
        self.startup_program, self.main_program = startup_program, main_program
        self.endpoints, self.nranks, self.rank = endpoints, len(endpoints), rank
        self.current_endpoint = current_endpoint
        self.other_endpoints = [e for e in endpoints if e != current_endpoint]
        self.wait_port = bool(wait_port)
        startup_program._origin_program = startup_program.clone()
        self._transpile_startup_program()
        main_program._origin_program = main_program.clone()
        self._transpile_main_program()

    def _transpile_main_program(self) -> None:
        raise NotImplementedError("call the inherited method of subclasses")

    def _transpile_startup_program(self) -> None:
        for ring_id in range(self.nrings):
            self._init_communicator(ring_id)
        self._broadcast_params()

    def _init_communicator(self, ring_id: int) -> None:
        block = self.startup_program.global_block()
        nccl_id = block.create_var(name=unique_name.generate("nccl_id"), persistable=True,
                                   type=VarType.RAW)
        block.append_op("c_gen_nccl_id", outputs={"Out": [nccl_id]},
                        attrs={"rank": self.rank, "endpoint": self.current_endpoint,
                               "other_endpoints": list(self.other_endpoints),
                               OP_ROLE_KEY: OpRole.Forward})
        block.append_op("c_comm_init", inputs={"X": [nccl_id]},
                        attrs={"nranks": self.nranks, "rank": self.rank, "ring_id": ring_id,
                               OP_ROLE_KEY: OpRole.Forward})

    def _startup_params(self) -> list[Variable]:
        """The startup program's parameters, in its order (its variables of the main program's
        parameters: a startup block keeps plain variables for them)."""
        params = {p.name for p in self.main_program.global_block().all_parameters()
                  if not getattr(p, "is_distributed", False)}
        return [v for name, v in self.startup_program.global_block().vars.items()
                if name in params]

    def _broadcast_params(self) -> None:
        block = self.startup_program.global_block()
        params = self._startup_params()
        ring_id = -1
        for param in params:
            ring_id = (ring_id + 1) % self.nrings
            block.append_op("c_broadcast", inputs={"X": [param]}, outputs={"Out": [param]},
                            attrs={"ring_id": ring_id, "root": 0, OP_ROLE_KEY: OpRole.Forward})
        if not params:
            return
        for ring_id in range(self.nrings):
            block.append_op("c_sync_comm_stream", inputs={"X": [params[-1]]},
                            outputs={"Out": [params[-1]]},
                            attrs={"ring_id": ring_id, OP_ROLE_KEY: OpRole.Forward})

    @staticmethod
    def _role(op: Operator) -> int:
        return int(op.attr(OP_ROLE_KEY)) if op.has_attr(OP_ROLE_KEY) else 0

    def _is_loss_grad_op(self, op: Operator) -> bool:
        role = self._role(op)
        return bool(role & OpRole.Backward and role & OpRole.Loss)

    def _is_backward_op(self, op: Operator) -> bool:
        return bool(self._role(op) & OpRole.Backward)

    @staticmethod
    def _is_update_op(op: Operator) -> bool:
        return {"Param", "Grad", "LearningRate"} <= set(op.input_names)

    def _is_optimizer_op(self, op: Operator) -> bool:
        return bool(self._role(op) & OpRole.Optimize)


class GradAllReduce(Collective):
    """Sum every parameter gradient over the trainers after the op that makes it (Fluid's
    ``GradAllReduce``); the loss gradient is scaled by ``1 / nranks`` first, so the sum is the
    global batch's mean gradient."""

    mode = "grad_allreduce"

    def __init__(self, nrings: int = 2) -> None:
        super().__init__(nrings)

    def _transpile_main_program(self) -> None:
        self._insert_scale_loss_grad_ops()
        self._insert_allreduce_ops()

    def _insert_scale_loss_grad_ops(self) -> None:
        block = self.main_program.global_block()
        for idx, op in reversed(list(enumerate(block.ops))):
            if self._is_loss_grad_op(op):
                loss_grad = block.vars[op.output_arg_names[0]]
                block._insert_op(idx + 1, "scale", inputs={"X": [loss_grad]},
                                 outputs={"Out": [loss_grad]},
                                 attrs={"scale": 1.0 / self.nranks,
                                        OP_ROLE_KEY: OpRole.Backward})

    def _insert_allreduce_ops(self) -> None:
        block = self.main_program.global_block()
        ring_id, grad = -1, None
        for idx, op in reversed(list(enumerate(block.ops))):
            if not (self._is_backward_op(op) and op.has_attr(OP_ROLE_VAR_KEY)):
                continue
            role_var = list(op.attr(OP_ROLE_VAR_KEY) or ())
            if not role_var:
                continue
            if len(role_var) % 2:
                raise ValueError(f"op {op.type!r} has an odd op_role_var {role_var}: it must "
                                 "list (parameter, gradient) pairs")
            offset = idx
            for i in range(0, len(role_var), 2):
                param = block.vars[role_var[i]]
                grad = block.vars[role_var[i + 1]]
                if getattr(param, "is_distributed", False):
                    continue
                if offset == idx:
                    offset += 1
                    block._insert_op(offset, "c_sync_calc_stream", inputs={"X": [grad]},
                                     outputs={"Out": [grad]},
                                     attrs={OP_ROLE_KEY: OpRole.Backward})
                    offset += 1
                # the ops are walked backwards: inserting at the same offset keeps the
                # ring ids alternating in program order
                ring_id = (ring_id + 1) % self.nrings
                block._insert_op(offset, "c_allreduce_sum", inputs={"X": [grad]},
                                 outputs={"Out": [grad]},
                                 attrs={"ring_id": ring_id, OP_ROLE_KEY: OpRole.Backward})
        if grad is None:
            return
        for idx, op in enumerate(block.ops):
            if self._is_optimizer_op(op):
                for ring_id in range(self.nrings):
                    block._insert_op(idx + ring_id, "c_sync_comm_stream",
                                     inputs={"X": [grad]}, outputs={"Out": [grad]},
                                     attrs={"ring_id": ring_id,
                                            OP_ROLE_KEY: OpRole.Backward})
                break


class LocalSGD(Collective):
    """Each trainer steps alone; after its optimizer ops the parameters' moves are averaged
    over the trainers (Fluid's ``LocalSGD``, every step)."""

    mode = "local_sgd"
    snapshot_key = "@SNAPSHOT"

    def __init__(self, nrings: int = 2) -> None:
        super().__init__(nrings)

    def snapshot_name(self, param_name: str) -> str:
        """The persistable copy of ``param_name`` as of the last average."""
        return param_name + self.snapshot_key

    def _transpile_startup_program(self) -> None:
        super()._transpile_startup_program()
        block = self.startup_program.global_block()
        for param in self._startup_params():
            snapshot = block.create_var(name=self.snapshot_name(param.name), shape=param.shape,
                                        dtype=param.dtype, persistable=True,
                                        stop_gradient=True)
            block.append_op("assign", inputs={"X": [param]}, outputs={"Out": [snapshot]},
                            attrs={OP_ROLE_KEY: OpRole.Forward})

    def _transpile_main_program(self) -> None:
        block = self.main_program.global_block()
        pairs: list[tuple[Variable, Variable]] = []
        ring_id, param = -1, None
        for idx, op in reversed(list(enumerate(block.ops))):
            if not self._is_update_op(op):
                continue
            param = block.vars[op.input("Param")[0]]
            if getattr(param, "is_distributed", False):
                continue
            snapshot = block.create_var(name=self.snapshot_name(param.name), shape=param.shape,
                                        dtype=param.dtype, persistable=True,
                                        stop_gradient=True)
            # the move since the last average: snapshot - param, summed over the trainers
            block._insert_op(idx + 1, "elementwise_sub", inputs={"X": [snapshot], "Y": [param]},
                             outputs={"Out": [param]}, attrs={OP_ROLE_KEY: OpRole.Optimize})
            block._insert_op(idx + 2, "c_sync_calc_stream", inputs={"X": [param]},
                             outputs={"Out": [param]}, attrs={OP_ROLE_KEY: OpRole.Optimize})
            ring_id = (ring_id + 1) % self.nrings
            block._insert_op(idx + 3, "c_allreduce_sum", inputs={"X": [param]},
                             outputs={"Out": [param]},
                             attrs={"ring_id": ring_id, OP_ROLE_KEY: OpRole.Optimize})
            pairs.append((param, snapshot))
        if param is None:
            return
        for ring_id in range(self.nrings):
            block.append_op("c_sync_comm_stream", inputs={"X": [param]}, outputs={"Out": [param]},
                            attrs={"ring_id": ring_id, OP_ROLE_KEY: OpRole.Optimize})
        for param, snapshot in reversed(pairs):
            block.append_op("scale", inputs={"X": [param]}, outputs={"Out": [param]},
                            attrs={"scale": 1.0 / self.nranks, OP_ROLE_KEY: OpRole.Optimize})
            block.append_op("elementwise_sub", inputs={"X": [snapshot], "Y": [param]},
                            outputs={"Out": [param]}, attrs={OP_ROLE_KEY: OpRole.Optimize})
            block.append_op("assign", inputs={"X": [param]}, outputs={"Out": [snapshot]},
                            attrs={OP_ROLE_KEY: OpRole.Optimize})


class MultiThread(GradAllReduce):
    """Fluid's one-process, several-GPU collective (``c_comm_init_all``); not implemented."""

    mode = "box"

    def __init__(self, nrings: int = 1, trans_mode: str = "all_reduce") -> None:
        raise NotImplementedError(
            "collective.MultiThread (one process driving several GPUs through "
            "c_comm_init_all) is not implemented in dask_fluid: run one trainer process per "
            "device (collective_mode 'grad_allreduce'), or a CompiledProgram with_data_parallel "
            "over several places in one process")
