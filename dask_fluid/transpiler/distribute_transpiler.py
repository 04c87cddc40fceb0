"""``DistributeTranspiler``: rewrite a single-process program for pserver or NCCL2 training.

``transpile()`` runs named steps, in Fluid's order:

1. ``_check_arguments``: config, endpoints, trainer count and id, the training mode
   (:func:`.modes.resolve_mode`: sync, half-async, async, GEO-SGD);
2. ``_make_plan``: optimize and LR ops, (param, grad) pairs, the distributed table, blocks;
3. ``_place_blocks``: one endpoint per block (RoundRobin or HashName; shuffled first when
   ``slice_var_up`` is off);
4. ``_rewrite_trainer``: sends, barriers, recvs, concats (and the table's prefetches); for
   GEO-SGD, the delta sends and merging recvs after the local optimizer;
5. ``_rewrite_trainer_startup``: the trainers pull their initial parameters;
6. program attributes.

Like Fluid, ``transpile()`` mutates ``program`` and ``startup_program`` in place and returns
None; ``get_trainer_program()`` then removes the optimize ops from them. The pserver programs
are built from a copy of the programs taken at the start of ``transpile()``, so the getters can
be called in any order.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..framework import (
    Parameter,
    Program,
    VarType,
    default_main_program,
    default_startup_program,
)
from . import collective, lookup_table, remote_prefetch, trainer_rewrite, vars_distributed
from .config import DistributeTranspilerConfig, ServerRuntimeConfig, parse_endpoints
from .lr_counter import split_decay_counter
from .modes import DistributedMode, TrainingMode, resolve_mode
from .nccl2 import transpile_nccl2
from .plan import (
    OPTIMIZER_TYPES,
    ParamPlan,
    TranspilePlan,
    is_optimizer_op,
    lr_ops,
    optimize_ops,
    params_grads_of,
)
from .plan_html import nccl2_html, plan_html
from .pserver_program import PserverBuild, build_pserver_program
from .slicing import VarBlock, slice_variable
from .startup import build_pserver_startup

# DistributedMode and ServerRuntimeConfig: where Fluid 1.8's scripts import them from
__all__ = ["DistributeTranspiler", "DistributedMode", "ServerRuntimeConfig"]

logger = logging.getLogger("dask_fluid.transpiler")


#: modes that only annotate or rewrite the trainers' programs: there are no pserver programs
_TRAINERS_ONLY = ("nccl2", "collective")


def _no_log(*args: Any, **kwargs: Any) -> None:
    return None


class DistributeTranspiler:
    """Fluid's ``DistributeTranspiler`` (pserver, nccl2 and collective modes).

    Parameters
    ----------
    config : DistributeTranspilerConfig, optional

    Examples
    --------
    >>> t = DistributeTranspiler()                                        # doctest: +SKIP
    >>> t.transpile(0, pservers="127.0.0.1:6174,127.0.0.1:6175", trainers=2)  # doctest: +SKIP
    >>> trainer_prog = t.get_trainer_program()                            # doctest: +SKIP
    >>> ps_main, ps_startup = t.get_pserver_programs("127.0.0.1:6174")    # doctest: +SKIP
    """

    def __init__(self, config: DistributeTranspilerConfig | None = None) -> None:
        if config is None:
            config = DistributeTranspilerConfig()
        if not isinstance(config, DistributeTranspilerConfig):
            raise TypeError("config must be a DistributeTranspilerConfig, got "
                            f"{type(config).__name__}")
        self.config = config
        self._set_server_config()
        self._plan: TranspilePlan | None = None
        self._builds: dict[str, PserverBuild] = {}
        self._program: Program | None = None
        self._startup: Program | None = None
        self._mode: str | None = None
        self._current_endpoint = ""
        self._log = _no_log

    def _set_server_config(self, server_config: ServerRuntimeConfig | None = None) -> None:
        """The pserver thread counts its programs get (Fluid 1.8's: a fresh
        :class:`ServerRuntimeConfig` of the flags by default; fleet passes its strategy's)."""
        if server_config is None:
            server_config = ServerRuntimeConfig()
        elif not isinstance(server_config, ServerRuntimeConfig):
            raise TypeError("In DistributeTranspiler, server_config must be an instance of "
                            f"ServerRuntimeConfig, got {type(server_config).__name__}")
        self.server_config = server_config

    # ------------------------------------------------------------------------------------------
    # transpile
    # ------------------------------------------------------------------------------------------
    def transpile(self, trainer_id: int, program: Program | None = None,
                  pservers: str = "127.0.0.1:6174", trainers: int | str = 1,
                  sync_mode: bool = True, startup_program: Program | None = None,
                  current_endpoint: str = "127.0.0.1:6174") -> None:
        """Rewrite ``program`` and ``startup_program`` **in place** for distributed training.

        Parameters
        ----------
        trainer_id : int
            This trainer's id, in ``[0, trainers)``.
        program, startup_program : Program, optional
            Default to the default main and startup programs.
        pservers : str
            pserver mode: comma-separated ``host:port`` endpoints of the pservers (Dask worker
            addresses such as ``tcp://10.0.0.5:40123`` are accepted too).
        trainers : int or str
            pserver mode: the number of trainers. nccl2 and collective modes: the trainer
            endpoints (comma-separated; collective mode takes a list too).
        sync_mode : bool
            Synchronous training (barriers, gradients averaged over the trainers). Once
            ``config.sync_mode`` has been assigned, the config decides instead (Fluid 1.4/1.5's
            precedence; Fluid 1.8 would take the pserver's mode from the config and the
            trainer's ops from this argument, which only trains when they agree).
        current_endpoint : str
            nccl2 and collective modes: this trainer's endpoint, one of ``trainers``. pserver
            mode: stored as the program's ``_ps_endpoint``.
        """
        self.config.validate()
        self._log = logger.info if self.config.print_log else _no_log
        program = default_main_program() if program is None else program
        startup = default_startup_program() if startup_program is None else startup_program
        for arg, prog in (("program", program), ("startup_program", startup)):
            if not isinstance(prog, Program):
                raise TypeError(f"{arg} must be a Program, got {type(prog).__name__}")
        if isinstance(trainer_id, bool) or not isinstance(trainer_id, (int, np.integer)):
            raise TypeError(f"trainer_id must be an int, got {trainer_id!r}")
        trainer_id = int(trainer_id)
        self._program, self._startup, self._mode = program, startup, self.config.mode
        self._current_endpoint = current_endpoint
        if self.config.mode != "nccl2" and any(op.type == "dgc"
                                               for op in program.global_block().ops):
            raise ValueError(
                f"the program was built with DGCMomentumOptimizer, which compresses gradients "
                f"in the all-reduce of nccl2 trainers; config.mode is {self.config.mode!r}: set "
                "config.mode = 'nccl2' (or use Momentum)")
        if self.config.mode == "collective":
            self._refuse_pserver_fields()
            self._endpoints = self._transpile_collective(trainer_id, trainers, program, startup,
                                                         current_endpoint)
            self._trainer_id, self._trainer_num = trainer_id, len(self._endpoints)
            return None
        if self.config.mode == "nccl2":
            self._refuse_pserver_fields()
            self._endpoints = transpile_nccl2(program, startup, trainer_id, trainers,
                                              current_endpoint, self.config, self._log)
            self._trainer_id, self._trainer_num = trainer_id, len(self._endpoints)
            return None
        endpoints, trainer_num, mode = self._check_arguments(trainer_id, pservers, trainers,
                                                             sync_mode)
        plan = self._make_plan(program, startup, endpoints, trainer_id, trainer_num, mode)
        order = self._place_blocks(plan)
        self._rewrite_trainer(program, plan, order)
        trainer_rewrite.set_program_attrs(program, plan, current_endpoint)
        for prog in (program, startup):
            trainer_rewrite.set_wait_port(prog, self.config.wait_port)
        self._plan, self._builds = plan, {}
        return None

    # Fluid's public attributes of a pserver-mode transpile
    @property
    def table_name(self) -> str | None:
        """The distributed lookup table's name (``embedding(is_distributed=True)``), or None."""
        plan = self._plan
        return plan.table.name if plan is not None and plan.table is not None else None

    @property
    def has_distributed_lookup_table(self) -> bool:
        """Whether the transpiled program has a distributed lookup table."""
        return self.table_name is not None

    def _transpile_collective(self, trainer_id: int, trainers: Any, program: Program,
                              startup: Program, current_endpoint: str) -> list[str]:
        """``config.mode = "collective"``: Fluid's collective transpilers
        (:mod:`.collective`) rewrite both programs; returns the trainer endpoints."""
        kind = self.config.collective_mode
        if kind == "grad_allreduce":
            transpiler = collective.GradAllReduce(self.config.nccl_comm_num)
        elif kind == "local_sgd":
            transpiler = collective.LocalSGD(self.config.nccl_comm_num)
        elif kind == "single_process_multi_thread":
            raise NotImplementedError(
                "collective_mode 'single_process_multi_thread' (one process driving every "
                "device through c_comm_init_all) is not implemented in dask_fluid: run one "
                "trainer process per device with 'grad_allreduce'")
        else:
            raise ValueError("config.mode = 'collective' needs config.collective_mode = "
                             f"'grad_allreduce' or 'local_sgd', got {kind!r}")
        if isinstance(trainers, str):
            endpoints = parse_endpoints(trainers, "trainers")
        elif isinstance(trainers, (list, tuple)):
            endpoints = parse_endpoints(",".join(map(str, trainers)), "trainers")
        else:
            raise TypeError("in collective mode, trainers must be the trainer endpoints "
                            f"('ip:port,ip:port' or a list), got {type(trainers).__name__}")
        transpiler.transpile(startup_program=startup, main_program=program, rank=trainer_id,
                             endpoints=endpoints, current_endpoint=current_endpoint,
                             wait_port=self.config.wait_port)
        self._log("collective (%s): trainer %d of %s, %d ring(s)", kind, trainer_id, endpoints,
                  self.config.nccl_comm_num)
        return endpoints

    def _refuse_pserver_fields(self) -> None:
        """nccl2 and collective modes all-reduce every step: the pserver-mode training modes do
        not apply."""
        for field in ("runtime_split_send_recv", "half_async", "completely_not_async",
                      "geo_sgd_mode"):
            if getattr(self.config, field):
                raise ValueError(f"config.{field} is a pserver-mode option, but config.mode is "
                                 f"{self.config.mode!r} (synchronous all-reduce): unset it, or "
                                 "use mode='pserver'")

    def _check_arguments(self, trainer_id: int, pservers: Any, trainers: Any,
                         sync_mode: Any) -> tuple[list[str], int, TrainingMode]:
        endpoints = parse_endpoints(pservers, "pservers")
        if isinstance(trainers, bool) or not isinstance(trainers, (int, np.integer)):
            raise TypeError(f"in pserver mode, trainers must be the number of trainers (an int), "
                            f"got {trainers!r}; trainer endpoints are for mode='nccl2'")
        if trainers < 1:
            raise ValueError(f"trainers must be >= 1, got {trainers}")
        if not 0 <= trainer_id < trainers:
            raise ValueError(f"trainer_id {trainer_id} is out of range: {trainers} trainers, so "
                             f"it must be in [0, {int(trainers) - 1}]")
        mode = resolve_mode(self.config, sync_mode)
        self._log("transpile: trainer %d of %d, pservers %s, %s (distributed_mode %d)",
                  trainer_id, trainers, endpoints, mode.name, mode.distributed_mode)
        return endpoints, int(trainers), mode

    def _make_plan(self, program: Program, startup: Program, endpoints: list[str],
                   trainer_id: int, trainer_num: int, mode: TrainingMode) -> TranspilePlan:
        opt = optimize_ops(program.global_block())
        if not any(is_optimizer_op(op) for op in opt):
            unrecognised = sorted({op.type for op in opt if "Param" in op.inputs})
            if unrecognised:
                # Fluid 1.8's _is_optimizer_op wants a LearningRate input: adadelta has none
                raise NotImplementedError(
                    f"distributed training with {', '.join(unrecognised)}: the transpiler, "
                    "as Fluid 1.8's, recognises only optimizers that read a LearningRate "
                    f"(supported: {', '.join(OPTIMIZER_TYPES)})")
            raise ValueError("the program has no optimize ops: call optimizer.minimize(loss) "
                             "before transpile()")
        for op in opt:
            if is_optimizer_op(op) and op.type not in OPTIMIZER_TYPES:
                raise ValueError(f"Not supported optimizer for distributed training: {op.type!r}"
                                 f"; supported: {', '.join(OPTIMIZER_TYPES)}")
        # async: the pservers count every trainer's steps (before the copies: the pserver LR
        # block and startup need the rewritten counter too)
        counter = (split_decay_counter(program, startup, trainer_num)
                   if not mode.sync and not mode.geo else None)
        # The pserver programs are built from these copies, so later getters see the program
        # as it was before the trainer rewrite, whatever order they are called in.
        origin, origin_startup = program.clone(), startup.clone()
        block = origin.global_block()
        opt = optimize_ops(block)
        table = lookup_table.find_distributed_table(block)
        if table is not None and mode.geo:
            raise ValueError(f"geo_sgd_mode does not support the distributed lookup table "
                             f"{table!r} (nor does Fluid 1.8's GeoStrategy): use "
                             "embedding(is_sparse=True) without is_distributed, or another mode")
        count = len(endpoints) if self.config.slice_var_up else 1
        params: list[ParamPlan] = []
        for pname, gname in params_grads_of(opt):
            param = block.var(pname)
            if (isinstance(param, Parameter) and not param.trainable) or pname == table:
                continue
            blocks = slice_variable([(pname, param.shape)], count, self.config.min_block_size)
            if not self.config.slice_var_up and len(blocks) != 1:
                raise AssertionError("slice_var_up=False must give one block per variable")
            sparse = block.var(gname).type == VarType.SELECTED_ROWS
            params.append(ParamPlan(pname, gname, blocks, sparse=sparse,
                                    per_trainer=mode.sync and trainer_num > 1))
            self._log("slice %s %s into %s", pname, list(param.shape),
                      [list(b.shape) for b in blocks])
        if not mode.geo:  # GEO trainers optimize their tables locally
            remote = remote_prefetch.remote_tables(block, params)
            for pp in params:
                pp.remote = pp.param in remote
                if pp.remote:
                    self._log("%s stays on the pservers: its lookups prefetch rows", pp.param)
        plan = TranspilePlan(origin, origin_startup, endpoints, trainer_id, trainer_num, mode,
                             self.config.slice_var_up, self.config.enable_dc_asgd, opt,
                             lr_ops(block), params,
                             server_attrs=self.server_config.op_attrs(),
                             decay_counter=counter)
        if table is not None:
            plan.table = lookup_table.make_table_plan(block, table, endpoints, mode.sync)
            self._log("distributed table %s %s: %d shards of %d rows", table,
                      list(plan.table.shape), len(endpoints), plan.table.shard_rows)
        return plan

    def _place_blocks(self, plan: TranspilePlan) -> list[ParamPlan]:
        """Dispatch every parameter block; returns the parameters in dispatch order.

        Without slicing, the order is shuffled first by ``RandomState(program.random_seed)``
        (the same permutation as Fluid's ``np.random.seed(seed); np.random.shuffle``), so that
        every node, using the same seed, places the blocks the same way and weights and biases
        do not cluster on one pserver. Gradients follow their parameters: HashName hashes the
        parameter block name (``fc_0.w_0.block1``).
        """
        order = list(range(len(plan.params)))
        if not self.config.slice_var_up:
            np.random.RandomState(plan.origin.random_seed).shuffle(order)
        dispatcher = self.config.split_method(plan.endpoints)
        dispatcher.reset()
        ordered = [plan.params[i] for i in order]
        for pp in ordered:
            eps = list(dispatcher.dispatch(pp.param_block_names))
            bad = [ep for ep in eps if ep not in plan.endpoints]
            if len(eps) != len(pp.blocks) or bad:
                raise ValueError(f"{type(dispatcher).__name__}.dispatch returned {eps} for "
                                 f"{pp.param_block_names}: it must return one of "
                                 f"{plan.endpoints} per block")
            pp.endpoints = eps
            for name, ep in zip(pp.param_block_names, eps, strict=True):
                self._log("place %s on %s", name, ep)
        return ordered

    def _rewrite_trainer(self, program: Program, plan: TranspilePlan,
                         order: list[ParamPlan]) -> None:
        control = trainer_rewrite.ControlVars()
        if plan.mode.geo:  # the trainer keeps its optimizer: nothing to cut out of the step
            trainer_rewrite.append_geo_exchange(program, plan, control)
            # no pull at start-up: a trainer starting after another's first exchange would
            # start from that trainer's progress. Its own initial values are the pservers'
            # (pserver blocks are slices of the same seeded initialisation), as each GEO
            # trainer of Fluid starts from its own startup program.
            trainer_rewrite.append_geo_param_init(self._startup, plan, control)
            return
        trainer_rewrite.create_trainer_vars(program, plan)
        dummies = {}
        if plan.table is not None:
            table_dummy = lookup_table.rewrite_trainer(program, plan, control)
        dummies.update(trainer_rewrite.insert_sends(program, plan, order, control,
                                                    self._log))
        if plan.decay_counter is not None:
            dummies.update(trainer_rewrite.append_counter_send(program, plan, control))
        if plan.table is not None:
            dummies[plan.table.name] = table_dummy
        trainer_rewrite.append_param_fetch(program, plan, control, dummies)
        remote_prefetch.mark_lookups(program, plan)
        trainer_rewrite.append_param_fetch(self._startup, plan, control, None)

    # ------------------------------------------------------------------------------------------
    # getters
    # ------------------------------------------------------------------------------------------
    def _require_pserver_plan(self) -> TranspilePlan:
        if self._mode in _TRAINERS_ONLY:
            raise RuntimeError(f"this transpiler ran in {self._mode} mode: there are no pserver "
                               "programs")
        if self._plan is None:
            raise RuntimeError("call transpile() first")
        return self._plan

    def _check_endpoint(self, endpoint: str) -> None:
        plan = self._require_pserver_plan()
        if endpoint not in plan.endpoints:
            raise ValueError(f"endpoint {endpoint!r} is not a pserver of this transpile; known "
                             f"endpoints: {plan.endpoints}")

    def get_trainer_program(self, wait_port: bool = True) -> Program:
        """The trainer program: the transpiled program without its optimize and LR ops
        (GEO-SGD keeps them: its trainers optimize locally).

        Mutates (and returns) the program given to ``transpile()``, and removes the
        optimizer-only variables and their init ops from the startup program, as Fluid 1.8.

        Parameters
        ----------
        wait_port : bool
            Fluid blocks here until every pserver accepts TCP. dask_fluid records the choice
            on the RPC ops of the trainer and its startup program (``wait_port`` attr, also
            False when ``config.wait_port`` is): with True, a trainer started by hand retries
            connecting to a pserver that is not listening yet until ``FLAGS_rpc_deadline``;
            with False it tries once and fails at once, naming the pserver. Under
            ``train_pserver`` the launcher starts the pservers with the trainers, and a
            trainer always waits for its pservers' services.
        """
        if self._program is None:
            raise RuntimeError("call transpile() first")
        if self._mode in _TRAINERS_ONLY:
            return self._program
        plan = self._require_pserver_plan()
        if not isinstance(wait_port, bool):
            raise TypeError(f"wait_port must be a bool, got {wait_port!r}")
        if not plan.mode.geo:
            tables = ([plan.table.name] if plan.table else []) + [
                pp.param for pp in plan.params if pp.remote]
            trainer_rewrite.strip_optimizer(self._program, self._startup, tables, self._log)
        trainer_rewrite.set_program_attrs(self._program, plan, self._current_endpoint)
        self._program._parameters_on_pservers = vars_distributed.from_plan(plan)
        for prog in (self._program, self._startup):
            trainer_rewrite.set_wait_port(prog, wait_port and self.config.wait_port)
        return self._program

    def get_pserver_program(self, endpoint: str) -> Program:
        """A new program for the pserver at ``endpoint`` (§4.3)."""
        self._check_endpoint(endpoint)
        build = build_pserver_program(self._plan, endpoint, self._log)
        self._builds[endpoint] = build
        # as Fluid: every pserver program carries the overview of all parameter blocks, and
        # the distributed attributes (fluid.io's distributed save and load read them)
        prog = build.program
        prog._parameters_on_pservers = vars_distributed.from_plan(self._plan)
        prog._is_distributed = True
        prog._endpoints = list(self._plan.endpoints)
        prog._ps_endpoint = endpoint
        prog._is_chief = self._plan.trainer_id == 0
        prog._distributed_lookup_table = self._plan.table.name if self._plan.table else None
        return prog

    def get_pserver_programs(self, endpoint: str) -> tuple[Program, Program]:
        """``(pserver main program, pserver startup program)`` for ``endpoint``."""
        main = self.get_pserver_program(endpoint)
        return main, self.get_startup_program(endpoint, main)

    def get_startup_program(self, endpoint: str, pserver_program: Program | None = None,
                            startup_program: Program | None = None) -> Program:
        """The startup program of the pserver at ``endpoint``: its blocks start as exact
        slices of the parameters the original startup program draws. ``startup_program`` is
        accepted for Fluid compatibility and ignored (the copy taken by ``transpile()`` is
        used)."""
        self._check_endpoint(endpoint)
        build = self._builds.get(endpoint)
        if build is None or (pserver_program is not None and build.program is not pserver_program):
            build = build_pserver_program(self._plan, endpoint, self._log)
            if pserver_program is not None:
                build.program = pserver_program
            self._builds[endpoint] = build
        return build_pserver_startup(self._plan, endpoint, build, self._log)

    def _build(self, endpoint: str) -> PserverBuild:
        """The pserver program at ``endpoint`` with where its variables come from (the last
        one built, else a new one): :mod:`.pserver_state` reads it."""
        self._check_endpoint(endpoint)
        if endpoint not in self._builds:
            self.get_pserver_program(endpoint)
        return self._builds[endpoint]

    def _repr_html_(self) -> str:
        """Jupyter: which block of which parameter lives on which pserver (:mod:`.plan_html`)."""
        if self._mode in _TRAINERS_ONLY:
            return nccl2_html(list(self._endpoints), self._trainer_id,
                              self.config.collective_mode if self._mode == "collective" else None)
        if self._plan is None:
            return ("<div class='dask-fluid-transpile-plan'><b>DistributeTranspiler</b>: not "
                    "transpiled yet; call transpile()</div>")
        return plan_html(self._plan)

    # ------------------------------------------------------------------------------------------
    # metadata for runtimes
    # ------------------------------------------------------------------------------------------
    @property
    def plan(self) -> TranspilePlan:
        """The full plan (parameters, blocks, endpoints, names)."""
        return self._require_pserver_plan()

    @property
    def pserver_endpoints(self) -> list[str]:
        return list(self._require_pserver_plan().endpoints)

    @property
    def trainer_num(self) -> int:
        if self._mode in _TRAINERS_ONLY:
            return self._trainer_num
        return self._require_pserver_plan().trainer_num

    @property
    def trainer_id(self) -> int:
        if self._mode in _TRAINERS_ONLY:
            return self._trainer_id
        return self._require_pserver_plan().trainer_id

    @property
    def sync_mode(self) -> bool:
        """Synchronous rounds (sync mode, also through the runtime split)."""
        return self._require_pserver_plan().sync_mode

    @property
    def training_mode(self) -> TrainingMode:
        """The mode :func:`.modes.resolve_mode` chose (``distributed_mode``, ``name``...)."""
        return self._require_pserver_plan().mode

    @property
    def param_blocks(self) -> dict[str, list[VarBlock]]:
        """Parameter name -> its blocks (``VarBlock.varname`` is the parameter)."""
        return {pp.param: list(pp.blocks) for pp in self._require_pserver_plan().params}

    @property
    def grad_blocks(self) -> dict[str, list[VarBlock]]:
        """Gradient name -> its blocks (same geometry as the parameter's)."""
        return {pp.grad: [VarBlock(pp.grad, b.index, b.offset, b.size, b.shape, b.full_shape)
                          for b in pp.blocks] for pp in self._require_pserver_plan().params}

    @property
    def param_endpoints(self) -> dict[str, list[str]]:
        """Parameter name -> endpoint of each of its blocks."""
        return {pp.param: list(pp.endpoints) for pp in self._require_pserver_plan().params}

    @property
    def block_endpoint(self) -> dict[str, str]:
        """Block variable name (parameter blocks and pserver-side merged gradients) ->
        endpoint."""
        out: dict[str, str] = {}
        for pp in self._require_pserver_plan().params:
            for names in (pp.param_block_names, pp.grad_block_names):
                out.update(zip(names, pp.endpoints, strict=True))
        return out
