"""``paddle.fluid.incubate.fleet.parameter_server.distribute_transpiler``: Fluid 1.8's
parameter-server fleet over the DistributeTranspiler.

``fleet.init(role_maker)`` learns this process's role; ``fleet.distributed_optimizer(opt,
strategy).minimize(loss)`` minimises and transpiles with the strategy's configuration
(:mod:`.distributed_strategy`); then a pserver runs ``fleet.init_server()`` and
``fleet.run_server()`` (its startup and ``listen_and_serv`` programs), a trainer runs
``fleet.startup_program`` and ``fleet.main_program`` (the trainer program) and ends with
``fleet.stop_worker()``. ``save_inference_model`` and ``save_persistables`` save as
``fluid.io`` does for distributed programs.
"""

from __future__ import annotations

import os
from typing import Any

import dask_fluid as _df
from dask_fluid import io as _io
from dask_fluid.executor import Executor
from dask_fluid.framework import Program, default_main_program, default_startup_program
from dask_fluid.optimizer import Optimizer
from dask_fluid.parallel_executor import ParallelExecutor
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

from ...base.fleet_base import DistributedOptimizer, Fleet, Mode
from ...base.role_maker import RoleMakerBase
from .distributed_strategy import DistributedStrategy, StrategyFactory

__all__ = ["FleetTranspiler", "ParameterServerOptimizer", "TranspilerOptimizer", "fleet"]


class FleetTranspiler(Fleet):
    """The parameter-server fleet (Fluid 1.8's ``FleetTranspiler``; use the ``fleet``
    instance)."""

    def __init__(self) -> None:
        super().__init__(Mode.TRANSPILER)
        self._executor: Executor | None = None
        self._transpiler: DistributeTranspiler | None = None
        self._strategy: DistributedStrategy | None = None
        self._origin_main_program: Program | None = None
        self._origin_startup_program: Program | None = None
        self.main_program: Program | None = None
        self.startup_program: Program | None = None

    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        """Learn this process's role (default: ``PaddleCloudRoleMaker`` from the
        environment)."""
        super().init(role_maker)
        self._executor = Executor(_df.CPUPlace())
        # a new role: the programs of an earlier minimize are not this role's
        self._transpiler = self.main_program = self.startup_program = None

    # -- optimizer and transpile ------------------------------------------------------------
    def distributed_optimizer(self, optimizer: Optimizer,
                              strategy: DistributedStrategy | DistributeTranspilerConfig |
                              dict | None = None) -> ParameterServerOptimizer:
        """Wrap ``optimizer``: its ``minimize`` also transpiles for this role."""
        if not isinstance(optimizer, Optimizer):
            raise ValueError("optimizer must be an instance of Optimizer")
        self._role()
        if strategy is None:
            strategy = StrategyFactory.create_async_strategy()
        elif isinstance(strategy, dict):
            dict_config, strategy = strategy, StrategyFactory.create_async_strategy()
            strategy.set_program_config(dict_config)
        self._strategy = _as_strategy(strategy)
        return ParameterServerOptimizer(optimizer, self._strategy)

    def _transpile(self, config: DistributeTranspilerConfig) -> None:
        t = DistributeTranspiler(config=config)
        t._set_server_config(self._strategy.get_server_runtime_config())
        t.transpile(trainer_id=self.worker_index() if self.is_worker() else 0,
                    pservers=self.server_endpoints(to_string=True), trainers=self.worker_num(),
                    sync_mode=config.sync_mode)
        self._transpiler = t
        if self.is_worker():
            self.main_program = t.get_trainer_program()
            self.startup_program = default_startup_program()
        else:
            ep = self.server_endpoints()[self.server_index()]
            self.main_program, self.startup_program = t.get_pserver_programs(ep)

    # -- running ----------------------------------------------------------------------------
    def _require_programs(self, what: str) -> None:
        if self.main_program is None or self.startup_program is None:
            raise ValueError(f"fleet.{what}: the programs are None, need invoke "
                             "DistributedOptimizer.minimize first")

    def init_worker(self) -> None:
        """A trainer is ready: its pserver client connects on its first RPC op (the
        communicator Fluid starts here for async modes is the client's own)."""
        self._require_programs("init_worker")

    def init_server(self, model_dir: str | None = None, **kwargs: Any) -> None:
        """Run the pserver's startup program, then load ``model_dir``'s persistables."""
        self._require_programs("init_server")
        self._executor.run(self.startup_program)
        if model_dir:
            if not os.path.isdir(model_dir):
                raise ValueError(f"There is no directory named {model_dir!r}")
            _io.load_persistables(self._executor, model_dir, self.main_program)

    def run_server(self) -> None:
        """Serve until every trainer is done (the pserver program's ``listen_and_serv``)."""
        self._require_programs("run_server")
        self._executor.run(self.main_program)

    def stop_worker(self) -> None:
        """Tell the pservers this trainer is done, and close fleet's executor."""
        from dask_fluid.distributed.pserver.client import finish_clients  # the runtime's

        finish_clients(self.worker_index())
        self._executor.close()

    # -- saving -----------------------------------------------------------------------------
    def save_inference_model(self, executor: Executor, dirname: str,
                             feeded_var_names: list[str], target_vars: Any,
                             main_program: Program | None = None,
                             export_for_deployment: bool = True) -> None:
        """The inference model of the original program, and the trainer's persistables."""
        if isinstance(executor, ParallelExecutor):
            raise TypeError("in fleet.save_inference_model() function, executor must be as "
                            "Executor type, ParallelExecutor is not allowed")
        if not isinstance(executor, Executor):
            raise TypeError("in fleet.save_inference_model() function, executor must be as "
                            "Executor type")
        program = main_program if main_program is not None else self._origin_main_program
        _io.save_inference_model(dirname, feeded_var_names, target_vars, executor, program,
                                 export_for_deployment=export_for_deployment)
        if main_program is None:
            with open(os.path.join(dirname, _io.MODEL_FILENAME), "rb") as f:
                saved = Program.parse_from_string(f.read())
            saved._copy_dist_param_info_from(self.main_program)
            self.save_persistables(executor, dirname, saved)

    def save_persistables(self, executor: Executor, dirname: str,
                          main_program: Program | None = None, **kwargs: Any) -> None:
        """``fluid.io.save_persistables`` of a distributed program (default: fleet's)."""
        program = main_program if main_program is not None else self.main_program
        if program is None or not program._is_distributed:
            raise ValueError("main_program is for local, may not use fleet.save_persistables")
        _io.save_persistables(executor, dirname, program)


class ParameterServerOptimizer(DistributedOptimizer):
    """An optimizer whose ``minimize`` also transpiles (Fluid's ``ParameterServerOptimizer``;
    ``TranspilerOptimizer`` is its name before 1.8's release, kept as an alias).

    Raises
    ------
    TypeError
        ``strategy`` is not a DistributedStrategy (as Fluid checks it).
    """

    def __init__(self, optimizer: Optimizer,
                 strategy: DistributedStrategy | DistributeTranspilerConfig | None = None
                 ) -> None:
        # Fluid's own default, when made directly: the sync strategy
        super().__init__(optimizer, _as_strategy(
            StrategyFactory.create_sync_strategy() if strategy is None else strategy))

    def minimize(self, losses: Any, scopes: Any = None, startup_programs: Any = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> Any:
        """Minimise ``losses`` (one loss), then transpile for this process's role."""
        if isinstance(losses, list):
            raise ValueError("need implement later")
        result = self._optimizer.minimize(losses, startup_programs, parameter_list,
                                          no_grad_set)
        fleet._origin_main_program = default_main_program().clone(for_test=False)
        fleet._origin_startup_program = default_startup_program().clone(for_test=False)
        fleet._transpile(self._strategy.get_program_config())
        return result


TranspilerOptimizer = ParameterServerOptimizer


def _as_strategy(strategy: Any) -> DistributedStrategy:
    """``strategy`` as a DistributedStrategy: a DistributeTranspilerConfig becomes the sync or
    async strategy of its ``sync_mode``, carrying it."""
    if isinstance(strategy, DistributeTranspilerConfig):
        config, strategy = strategy, (StrategyFactory.create_sync_strategy()
                                      if strategy.sync_mode else
                                      StrategyFactory.create_async_strategy())
        strategy.set_program_config(config)
    if not isinstance(strategy, DistributedStrategy):
        raise TypeError("In parameter server mode, strategy must be an instance of "
                        "DistributeTranspilerConfig, SyncStrategy, HalfAsyncStrategy, "
                        f"AsyncStrategy, or GeoStrategy, got {type(strategy).__name__}")
    return strategy

fleet = FleetTranspiler()
