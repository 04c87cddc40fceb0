"""``paddle.fluid.incubate.fleet.collective``: Fluid 1.8's collective fleet.

Every process is a trainer; ``fleet.init(PaddleCloudRoleMaker(is_collective=True))`` reads
its id and the trainer endpoints from ``PADDLE_TRAINER_ID``, ``PADDLE_TRAINER_ENDPOINTS`` and
``PADDLE_CURRENT_ENDPOINT`` (``dask-fluid launch --mode nccl2`` sets them on Dask workers).
``fleet.distributed_optimizer(opt, strategy).minimize(loss)`` minimises, then transpiles for
the strategy's mode:

- ``strategy.mode = "nccl2"`` (the default): the startup program connects the trainers
  (``gen_nccl_id``) and ``fleet.main_program`` is a ``CompiledProgram`` whose build strategy
  all-reduces the gradients between backward and optimize;
- ``strategy.mode = "collective"`` (``collective_mode = "grad_allreduce"``, or
  ``use_local_sgd``): Fluid's collective transpilers write ``c_*`` ops into the program
  (:mod:`dask_fluid.transpiler.collective`) and ``fleet.main_program`` is that program.

Either way the trainers run ``fleet.startup_program`` and then ``fleet.main_program`` with
their own part of each batch, and end with the parameters of one process trained on the whole
batch (for SGD and momentum; local SGD with stateful optimizers averages the parameters only).
``fleet.save_persistables``/``save_inference_model`` save the original program.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from dask_fluid import io as _io
from dask_fluid.compiler import BuildStrategy, CompiledProgram, ExecutionStrategy
from dask_fluid.executor import Executor
from dask_fluid.framework import Program, default_startup_program
from dask_fluid.parallel_executor import ParallelExecutor
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

from ...._unsupported import not_implemented
from ....distributed.fs_wrapper import FS, LocalFS
from ..base.fleet_base import DistributedOptimizer, Fleet, Mode
from ..base.role_maker import RoleMakerBase

__all__ = ["Collective", "CollectiveOpBasedOptimizer", "CollectiveOptimizer", "DistFCConfig",
           "DistributedStrategy", "LambConfig", "TrainStatus", "fleet"]

logger = logging.getLogger(__name__)


class LambConfig:
    """Fluid 1.8's (empty) LAMB configuration of the fleet strategy."""


class DistFCConfig:
    """Fluid 1.8's (empty) distributed-FC configuration of the fleet strategy."""


class DistributedStrategy(BuildStrategy):
    """The fleet strategy: Fluid 1.8's BuildStrategy plus the collective fleet fields.

    Attributes
    ----------
    mode : {"nccl2", "collective"}
        ``"nccl2"`` (default): a CompiledProgram all-reduces the gradients. ``"collective"``:
        the program gets ``c_*`` ops (``collective_mode``).
    collective_mode : {None, "grad_allreduce", "local_sgd"}
    use_local_sgd : bool
        Average the parameters after every local step (sets ``mode = "collective"``,
        ``collective_mode = "local_sgd"``).
    nccl_comm_num : int
        Communicators (rings) of the transpile.
    forward_recompute : bool
        Wrap the optimizer in a ``RecomputeOptimizer`` with ``recompute_checkpoints``.
    recompute_checkpoints : list
    use_amp : bool
        Wrap the optimizer with ``fluid.contrib.mixed_precision.decorate`` (dynamic loss
        scaling from ``amp_loss_scaling``, default ``2 ** 15``).
    use_dist_fc : bool
        The distributed fully-connected layer (PLSC's); not implemented (``minimize`` raises).
    dist_fc_config : DistFCConfig or None
    exec_strategy : ExecutionStrategy
    """

    def __init__(self) -> None:
        super().__init__()
        self.use_local_sgd = False
        self.use_dist_fc = False
        self.dist_fc_config: DistFCConfig | None = None
        self.mode = "nccl2"
        self.collective_mode: str | None = None
        self.nccl_comm_num = 1
        self.forward_recompute = False
        self.recompute_checkpoints: list[Any] = []
        self.use_amp = False
        self.amp_loss_scaling = 2 ** 15
        self.exec_strategy = ExecutionStrategy()
        # for Fluid's unit tests: grad_allreduce in collective mode
        self._ut4grad_allreduce = False


class Collective(Fleet):
    """The collective fleet (Fluid 1.8's ``Collective``; use the ``fleet`` instance).

    Attributes
    ----------
    main_program : CompiledProgram or Program or None
        What the trainers run after ``minimize`` (nccl2 mode: a CompiledProgram).
    startup_program : Program or None
    _origin_program : Program or None
        The program as minimised, before the transpile (what the savers save).
    """

    def __init__(self) -> None:
        super().__init__(Mode.COLLECTIVE)
        self.startup_program: Program | None = None
        self._origin_program: Program | None = None
        self._transpiled_program: Program | None = None
        self.main_program: CompiledProgram | Program | None = None
        self._optimizer: CollectiveOptimizer | None = None

    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        """Learn this trainer's id and the trainer endpoints (default:
        ``PaddleCloudRoleMaker(is_collective=True)``)."""
        super().init(role_maker)
        if not self.is_worker():
            raise ValueError("the collective fleet has trainers only; its role maker says "
                             "this process is a server (use PaddleCloudRoleMaker("
                             "is_collective=True) or UserDefinedCollectiveRoleMaker)")
        self.startup_program = self._origin_program = self._transpiled_program = None
        self.main_program = None

    def node_num(self) -> int:
        """The number of distinct hosts among the trainer endpoints."""
        return len({ep.rsplit(":", 1)[0] for ep in self.worker_endpoints()})

    # Fluid's collective fleet warns and does nothing here: there is no server to start and
    # the trainers' communicator is the startup program's
    def init_worker(self) -> None:
        """Nothing to do in collective mode (Fluid warns)."""
        logger.warning("You should not call 'init_worker' method for collective mode.")

    def run_worker(self, main_programs: Any = None, scopes: Any = None) -> None:
        """Nothing to do in collective mode (Fluid warns)."""
        logger.warning("You should not call 'run_worker' method for collective mode.")

    def init_server(self, model_dir: str | None = None) -> None:
        """No servers in collective mode (Fluid warns)."""
        logger.warning("You should not call 'init_server' method for collective mode.")

    def run_server(self) -> None:
        """No servers in collective mode (Fluid warns)."""
        logger.warning("You should not call 'run_server' method for collective mode.")

    def stop_worker(self) -> None:
        """Nothing to do in collective mode (Fluid warns); ``exe.close()`` closes the
        trainer's communicator."""
        logger.warning("You should not call 'stop_worker' method for collective mode.")

    def distributed_optimizer(self, optimizer: Any,
                              strategy: DistributedStrategy | None = None
                              ) -> CollectiveOptimizer:
        """Wrap ``optimizer``: its ``minimize`` also transpiles for these trainers."""
        self._role()
        self._optimizer = CollectiveOptimizer(optimizer, strategy)
        return self._optimizer

    @staticmethod
    def _check_executor(executor: Any, what: str) -> None:
        if isinstance(executor, ParallelExecutor) or not isinstance(executor, Executor):
            raise TypeError(f"In fleet.{what}() function, executor must be as Executor type, "
                            f"got {type(executor).__name__}")

    def _saved_program(self, main_program: Program | None, what: str,
                       transpiled: bool = False) -> Program:
        """``main_program``, else the original program (the transpiled one, ``transpiled``:
        what Fluid's check points default to)."""
        if main_program is None:
            main_program = self._transpiled_program if transpiled else self._origin_program
        if not isinstance(main_program, Program):
            raise TypeError(f"In fleet.{what}() function, main_program must be as Program "
                            "type (call DistributedOptimizer.minimize first, or pass one)")
        return main_program

    def save_inference_model(self, executor: Executor, dirname: str,
                             feeded_var_names: list[str] | None = None,
                             target_vars: Any = None, main_program: Program | None = None,
                             export_for_deployment: bool = True) -> Any:
        """``fluid.io.save_inference_model`` of the original program (default)."""
        self._check_executor(executor, "save_inference_model")
        program = self._saved_program(main_program, "save_inference_model")
        return _io.save_inference_model(dirname, feeded_var_names, target_vars, executor,
                                        program, export_for_deployment=export_for_deployment)

    def save_persistables(self, executor: Executor, dirname: str,
                          main_program: Program | None = None,
                          filename: str | None = None) -> None:
        """``fluid.io.save_persistables`` of the original program (default)."""
        self._check_executor(executor, "save_persistables")
        program = self._saved_program(main_program, "save_persistables")
        _io.save_persistables(executor, dirname, program, filename=filename)

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Not Fluid 1.8's name: raises, naming :meth:`save_check_point`."""
        raise not_implemented("fleet.save_checkpoint", _NO_CHECKPOINT)

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Not Fluid 1.8's name: raises, naming :meth:`load_check_point`."""
        raise not_implemented("fleet.load_checkpoint", _NO_CHECKPOINT)

    # -- Fluid 1.8's checkpoints: <path>/__paddle_fleet_checkpoint__.<n>, each the persistables
    # in one file and the TrainStatus as JSON, written under a .tmp name and renamed
    def save_check_point(self, executor: Executor, path: str, train_status: TrainStatus,
                         main_program: Program | None = None, fs: FS | None = None,
                         local_cache_path: str = ".cache",
                         remain_all_checkpoint: bool = True) -> None:
        """Save the persistables of ``main_program`` (default: the transpiled program) and
        ``train_status`` as checkpoint n + 1 under ``path`` (Fluid 1.8's
        ``save_check_point``); with ``remain_all_checkpoint=False`` only the newest stays.

        ``fs`` is a :class:`~dask_fluid.compat.distributed.fs_wrapper.LocalFS` (default); one
        that needs upload and download saves in ``local_cache_path`` first, as Fluid does.
        """
        fs = LocalFS() if fs is None else fs
        if not isinstance(train_status, TrainStatus):
            raise TypeError(f"fleet.save_check_point: train_status must be a TrainStatus, got "
                            f"{type(train_status).__name__}")
        program = self._saved_program(main_program, "save_check_point", transpiled=True)
        if not fs.stat(path):
            fs.mkdir(path)
        number = max(self._get_last_checkpoint_no(path, fs), -1) + 1
        real_path = f"{path}/{_CHECKPOINT_PREFIX}.{number}"
        tmp_path = f"{real_path}.tmp"
        saved_path, cache_path = tmp_path, None
        if fs.need_upload_download():
            cache_path = f"{local_cache_path}/{_CHECKPOINT_PREFIX}.{number}.saved_cache"
            LocalFS().mkdir(cache_path)
            saved_path = cache_path
        self.save_persistables(executor, saved_path, program, filename=_PARAM_FILE)
        with open(os.path.join(saved_path, _STATUS_FILE), "w") as f:
            json.dump({"epoch_no": train_status._epoch_no}, f)
        if cache_path is not None:
            fs.delete(tmp_path)
            fs.upload(cache_path, tmp_path)
        fs.mv(tmp_path, real_path)
        if not remain_all_checkpoint:
            self.clean_redundant_check_points(path, fs)

    def load_check_point(self, executor: Executor, path: str, trainer_id: int,
                         main_program: Program | None = None, fs: FS | None = None,
                         local_cache_path: str = ".cache",
                         ignore_empty: bool = True) -> TrainStatus | None:
        """Load the newest checkpoint under ``path`` into the scope and return its
        TrainStatus (Fluid 1.8's ``load_check_point``); None when there is none and
        ``ignore_empty``.

        Raises
        ------
        FileNotFoundError
            No checkpoint under ``path`` and ``ignore_empty=False``.
        """
        fs = LocalFS() if fs is None else fs
        number = self._get_last_checkpoint_no(path, fs)
        if number < 0:
            if not ignore_empty:
                raise FileNotFoundError(f"fleet.load_check_point: no {_CHECKPOINT_PREFIX}.<n> "
                                        f"under {path!r}")
            return None
        load_path = f"{path}/{_CHECKPOINT_PREFIX}.{number}"
        if fs.need_upload_download():
            cache_path = (f"{local_cache_path}/{_CHECKPOINT_PREFIX}.{number}.load_cache."
                          f"{trainer_id}")
            LocalFS().delete(cache_path)
            fs.download(load_path, cache_path)
            load_path = cache_path
        program = self._saved_program(main_program, "load_check_point", transpiled=True)
        _io.load_persistables(executor, load_path, program, filename=_PARAM_FILE)
        return _load_train_status(load_path)

    def clean_redundant_check_points(self, root_path: str, fs: FS | None = None,
                                     checkpoint_num: int = 1) -> None:
        """Remove all but the newest ``checkpoint_num`` (at least 1) checkpoints."""
        fs = LocalFS() if fs is None else fs
        newest = self._get_last_checkpoint_no(root_path, fs)
        for number in _checkpoint_numbers(root_path, fs):
            if number <= newest - max(1, checkpoint_num):
                fs.rmr(f"{root_path}/{_CHECKPOINT_PREFIX}.{number}")

    @staticmethod
    def _get_last_checkpoint_no(root_path: str, fs: FS) -> int:
        """The newest checkpoint's number under ``root_path``, -1 when none."""
        return max(_checkpoint_numbers(root_path, fs), default=-1)


class TrainStatus:
    """How far training got (Fluid 1.8's ``TrainStatus``, which its collective checkpoints
    store): the last completed epoch, -1 before the first."""

    def __init__(self, epoch_no: int = -1) -> None:
        self._epoch_no = epoch_no

    def next(self) -> int:
        """The epoch to run next."""
        return self._epoch_no + 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TrainStatus) and self._epoch_no == other._epoch_no

    __hash__ = None  # type: ignore[assignment]  (mutable, compared by value)

    def __repr__(self) -> str:
        return f"TrainStatus(epoch_no={self._epoch_no})"


_NO_CHECKPOINT = ("Fluid 1.8's collective fleet has no such method; use its "
                  "fleet.save_check_point(exe, path, TrainStatus(epoch)) and "
                  "fleet.load_check_point(exe, path, trainer_id)")
_CHECKPOINT_PREFIX = "__paddle_fleet_checkpoint__"
_PARAM_FILE = "_paddle_fleet_param__"
_STATUS_FILE = "fleet_train_status"


def _checkpoint_numbers(root_path: str, fs: FS) -> list[int]:
    """The numbers n of the ``__paddle_fleet_checkpoint__.<n>`` directories in ``root_path``
    (the first level only; ``.tmp`` ones being written are not checkpoints)."""
    numbers = []
    for name in fs.list_dirs(root_path):
        prefix, _, number = name.partition(".")
        if prefix == _CHECKPOINT_PREFIX and number.isdigit():
            numbers.append(int(number))
    return numbers


def _load_train_status(path: str) -> TrainStatus:
    """The TrainStatus a checkpoint stored (a fresh one when it has none, as Fluid)."""
    file_name = os.path.join(path, _STATUS_FILE)
    if not os.path.isfile(file_name):
        return TrainStatus()
    with open(file_name) as f:
        saved = json.load(f)
    epoch = saved.get("epoch_no") if isinstance(saved, dict) else None
    if not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"{file_name}: not a checkpoint's train status (epoch_no >= 0 "
                         f"expected), got {saved!r}")
    return TrainStatus(epoch)

fleet = Collective()


class CollectiveOpBasedOptimizer(DistributedOptimizer):
    """The base of Fluid's op-based collective optimizers (a DistributedStrategy required)."""

    def __init__(self, optimizer: Any, strategy: DistributedStrategy | None = None) -> None:
        if not isinstance(strategy, DistributedStrategy):
            raise TypeError("strategy must be DistributedStrategy")
        super().__init__(optimizer, strategy)


class CollectiveOptimizer(DistributedOptimizer):
    """An optimizer whose ``minimize`` also transpiles for the collective fleet (Fluid 1.8's
    ``CollectiveOptimizer``).

    Parameters
    ----------
    optimizer : Optimizer
    strategy : DistributedStrategy, optional
    """

    def __init__(self, optimizer: Any, strategy: DistributedStrategy | None = None) -> None:
        if strategy is None:
            strategy = DistributedStrategy()
        if not isinstance(strategy, DistributedStrategy):
            raise TypeError(f"strategy must be a fleet.collective.DistributedStrategy, got "
                            f"{type(strategy).__name__}")
        super().__init__(optimizer, strategy)
        if not isinstance(strategy.recompute_checkpoints, list):
            raise ValueError("DistStrategy.recompute_checkpoints should be a List")
        self._loss: Any = None
        self.print_config = False

    def _check_collective_mode(self, main_program: Program) -> None:
        strategy = self._strategy
        dgc = bool(getattr(main_program, "_enable_dgc", False))
        lamb = bool(getattr(main_program, "_use_lamb", False))
        if strategy.use_dist_fc:
            raise not_implemented("DistributedStrategy.use_dist_fc",
                                  "the distributed fully-connected layer (PLSC's) is not part of "
                                  "dask_fluid; use a plain fc with use_dist_fc = False")
        if strategy.use_local_sgd:
            strategy.mode, strategy.collective_mode = "collective", "local_sgd"
            _refuse_together("use_local_sgd", use_dgc=dgc, use_lamb=lamb)
        if strategy._ut4grad_allreduce:
            strategy.mode, strategy.collective_mode = "collective", "grad_allreduce"
            _refuse_together("_ut4grad_allreduce", use_dgc=dgc, use_lamb=lamb)
        if strategy.mode not in ("nccl2", "collective"):
            raise ValueError(f"DistributedStrategy.mode must be 'nccl2' or 'collective', got "
                             f"{strategy.mode!r}")
        if strategy.collective_mode in ("local_sgd", "grad_allreduce") and \
                strategy.mode != "collective":
            raise ValueError("local_sgd and grad_allreduce can be used under collective mode: "
                             "set DistributedStrategy.mode = 'collective'")

    def _wrap_optimizer(self) -> None:
        """``forward_recompute`` and ``use_amp`` wrap the optimizer, as Fluid's minimize."""
        from dask_fluid.contrib import mixed_precision  # noqa: PLC0415 - only with use_amp
        from dask_fluid.meta_optimizers import RecomputeOptimizer  # noqa: PLC0415

        strategy = self._strategy
        name = type(self._optimizer).__name__
        if strategy.forward_recompute:
            if not strategy.recompute_checkpoints:
                raise ValueError("please set strategy.recompute_checkpoints when set "
                                 "strategy.forward_recompute as True")
            if name in ("RecomputeOptimizer", "OptimizerWithMixedPrecision"):
                raise ValueError(f"can not use {name} when you set DistStrategy."
                                 "forward_recompute as True")
            self._optimizer = RecomputeOptimizer(self._optimizer)
            self._optimizer._set_checkpoints(strategy.recompute_checkpoints)
        if strategy.use_amp:
            if name in ("OptimizerWithMixedPrecision", "DGCMomentumOptimizer"):
                raise ValueError(f"can not use {name} when you set DistStrategy.use_amp as "
                                 "True")
            self._optimizer = mixed_precision.decorate(
                self._optimizer, init_loss_scaling=strategy.amp_loss_scaling,
                use_dynamic_loss_scaling=True)

    def _transpile(self, startup_program: Program, main_program: Program) -> None:
        strategy = self._strategy
        endpoints = fleet.worker_endpoints()
        trainer_id = fleet.worker_index()
        config = DistributeTranspilerConfig()
        config.mode = strategy.mode
        config.collective_mode = strategy.collective_mode
        config.nccl_comm_num = strategy.nccl_comm_num
        config.use_hierarchical_allreduce = strategy.use_hierarchical_allreduce
        config.hierarchical_allreduce_inter_nranks = strategy.hierarchical_allreduce_inter_nranks
        if self.print_config:
            print(f"worker_endpoints:{endpoints} trainers_num:{len(endpoints)} "
                  f"current_endpoint:{endpoints[trainer_id]} trainer_id:{trainer_id}")
        DistributeTranspiler(config=config).transpile(
            trainer_id=trainer_id, trainers=",".join(endpoints), startup_program=startup_program,
            program=main_program, current_endpoint=endpoints[trainer_id])

    def _try_to_compile(self, startup_program: Program,
                        main_program: Program) -> CompiledProgram | Program:
        strategy = self._strategy
        if fleet.node_num() <= 1:  # one host: Fluid keeps one ring and no hierarchy
            if strategy.nccl_comm_num > 1:
                logger.warning("set nccl_comm_num=1 since you only have 1 node.")
            strategy.nccl_comm_num = 1
            if strategy.use_hierarchical_allreduce:
                logger.warning("set use_hierarchical_allreduce=False since you only have 1 "
                               "node.")
            strategy.use_hierarchical_allreduce = False
        exec_strategy = strategy.exec_strategy
        if os.getenv("FLAGS_sync_nccl_allreduce") in (None, "1"):
            exec_strategy.num_threads = strategy.nccl_comm_num + 1
            if strategy.use_hierarchical_allreduce:
                exec_strategy.num_threads = 2 * strategy.nccl_comm_num + 1
        self._transpile(startup_program, main_program)
        if strategy.mode == "collective":
            return main_program
        strategy.num_trainers = fleet.worker_num()
        strategy.trainer_id = fleet.worker_index()
        strategy.trainers_endpoints = fleet.worker_endpoints()
        strategy.enable_backward_optimizer_op_deps = True
        return CompiledProgram(main_program).with_data_parallel(
            loss_name=self._loss.name, build_strategy=strategy, exec_strategy=exec_strategy)

    def minimize(self, loss: Any, startup_program: Program | None = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> Any:
        """Minimise ``loss``, then transpile for these trainers; ``fleet.main_program`` and
        ``fleet.startup_program`` are what they run.

        Returns
        -------
        tuple
            ``(optimize_ops, params_grads)`` of the wrapped optimizer.

        Raises
        ------
        ValueError
            Conflicting strategy fields, or the role maker's trainers are not usable.
        NotImplementedError
            ``use_dist_fc``.
        """
        main_program = loss.block.program
        if startup_program is None:
            startup_program = default_startup_program()
        self._check_collective_mode(main_program)
        self._wrap_optimizer()
        fleet.startup_program = startup_program
        self._loss = loss
        optimize_ops, params_grads = self._optimizer.minimize(
            loss, startup_program, parameter_list, no_grad_set=no_grad_set)
        fleet._origin_program = main_program.clone(for_test=False)
        fleet._transpiled_program = main_program
        fleet.main_program = self._try_to_compile(startup_program, main_program)
        return optimize_ops, params_grads


def _refuse_together(name: str, **others: bool) -> None:
    for other, on in others.items():
        if on:
            raise ValueError(f"you can't use {name} and {other} together")
