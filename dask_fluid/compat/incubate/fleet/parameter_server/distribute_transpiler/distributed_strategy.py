"""``...parameter_server.distribute_transpiler.distributed_strategy``: Fluid 1.8's fleet
strategies, each a DistributeTranspilerConfig with the runtime fields of its mode.

As in Fluid 1.8, the transpiler configuration of each mode is:

- ``SyncStrategy``: ``sync_mode=False, runtime_split_send_recv, half_async,
  completely_not_async`` (fleet's synchronous training, a barrier per step);
- ``AsyncStrategy``: ``sync_mode=False, runtime_split_send_recv``;
- ``HalfAsyncStrategy``: ``sync_mode=False, runtime_split_send_recv, half_async``;
- ``GeoStrategy(update_frequency)``: ``sync_mode=False, runtime_split_send_recv,
  geo_sgd_mode, geo_sgd_need_push_nums``.

Each also carries a BuildStrategy and an ExecutionStrategy (``CPU_NUM`` threads) for the
trainer's CompiledProgram, and the communicator settings Fluid's trainer runtime reads
(kept, with no effect: dask_fluid's pserver client has no separate communicator).
"""

from __future__ import annotations

import os
from typing import Any

from dask_fluid.compiler import BuildStrategy, ExecutionStrategy
from dask_fluid.transpiler import DistributeTranspilerConfig
from dask_fluid.transpiler.config import ServerRuntimeConfig

__all__ = ["AsyncStrategy", "DistributedStrategy", "GeoStrategy", "HalfAsyncStrategy",
           "StrategyFactory", "SyncStrategy", "TrainerRuntimeConfig"]


class TrainerRuntimeConfig:
    """The communicator flags of a fleet trainer (Fluid's ``TrainerRuntimeConfig``)."""

    def __init__(self) -> None:
        self.mode: str | None = None
        self.runtime_configs: dict[str, str] = {}

    def get_communicator_flags(self) -> dict[str, str]:
        return dict(self.runtime_configs)


class DistributedStrategy:
    """A fleet strategy: the transpiler config, trainer and server runtime configs, and the
    build and execution strategies of the trainer's CompiledProgram."""

    def __init__(self) -> None:
        self._program_config = DistributeTranspilerConfig()
        self._trainer_runtime_config = TrainerRuntimeConfig()
        self._server_runtime_config = ServerRuntimeConfig()
        self._execute_strategy = ExecutionStrategy()
        self._build_strategy = BuildStrategy()
        num_threads = int(os.getenv("CPU_NUM", "1"))
        self._execute_strategy.num_threads = num_threads
        if num_threads > 1:
            self._build_strategy.reduce_strategy = BuildStrategy.ReduceStrategy.Reduce
        self.debug_opt: dict | None = None

    def set_debug_opt(self, opt_info: dict) -> None:
        self.debug_opt = opt_info

    def get_debug_opt(self) -> dict:
        return dict(self.debug_opt or {})

    def get_program_config(self) -> DistributeTranspilerConfig:
        return self._program_config

    def set_program_config(self, config: DistributeTranspilerConfig | dict) -> None:
        self._program_config = _config_from(config, self._program_config,
                                            DistributeTranspilerConfig, "program_config")
        self.check_program_config()

    def get_trainer_runtime_config(self) -> TrainerRuntimeConfig:
        return self._trainer_runtime_config

    def get_server_runtime_config(self) -> ServerRuntimeConfig:
        """The pservers' RPC thread counts, which the transpiler writes on their programs."""
        return self._server_runtime_config

    def set_server_runtime_config(self, config: ServerRuntimeConfig | dict) -> None:
        """Replace the config, or set some of its fields (``{"_rpc_send_thread_num": 8}``)."""
        self._server_runtime_config = _config_from(config, self._server_runtime_config,
                                                   ServerRuntimeConfig, "server_runtime_config")
        self.check_server_runtime_config()

    def check_server_runtime_config(self) -> None:
        """Every mode takes any thread counts (as Fluid's strategies); the transpiler checks
        them positive."""

    def get_execute_strategy(self) -> ExecutionStrategy:
        return self._execute_strategy

    def set_execute_strategy(self, config: ExecutionStrategy) -> None:
        if not isinstance(config, ExecutionStrategy):
            raise TypeError("execute_strategy only accept an ExecutionStrategy")
        self._execute_strategy = config

    def get_build_strategy(self) -> BuildStrategy:
        return self._build_strategy

    def set_build_strategy(self, config: BuildStrategy) -> None:
        if not isinstance(config, BuildStrategy):
            raise TypeError("build_strategy only accept a BuildStrategy")
        self._build_strategy = config

    def check_program_config(self) -> None:
        raise NotImplementedError("a DistributedStrategy subclass sets its mode")


def _config_from(config: Any, current: Any, kind: type, what: str) -> Any:
    """What a strategy's ``set_*_config(config)`` keeps: ``config`` itself when it is a
    ``kind``; for a dict, ``current`` with those fields set (each one it has), as Fluid's."""
    if isinstance(config, kind):
        return config
    if not isinstance(config, dict):
        raise TypeError(f"{what} only accept input type: dict or {kind.__name__}")
    for key, value in config.items():
        if not hasattr(current, key):
            raise ValueError(f"{kind.__name__} doesn't have key: {key}")
        setattr(current, key, value)
    return current


class SyncStrategy(DistributedStrategy):
    """Fleet's synchronous training (Fluid 1.8's configuration of it)."""

    def __init__(self) -> None:
        super().__init__()
        self.check_program_config()
        self._trainer_runtime_config.mode = "sync"
        self._build_strategy.async_mode = True

    def check_program_config(self) -> None:
        c = self._program_config
        c.sync_mode = False
        c.runtime_split_send_recv = True
        c.half_async = True
        c.completely_not_async = True


class AsyncStrategy(DistributedStrategy):
    """Fleet's asynchronous training."""

    def __init__(self) -> None:
        super().__init__()
        self.check_program_config()
        self._trainer_runtime_config.mode = "async"
        self._build_strategy.async_mode = True

    def check_program_config(self) -> None:
        self._program_config.sync_mode = False
        self._program_config.runtime_split_send_recv = True


class HalfAsyncStrategy(DistributedStrategy):
    """Fleet's half-asynchronous training (a barrier per step, no merging wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.check_program_config()
        self._trainer_runtime_config.mode = "half_async"
        self._build_strategy.async_mode = True

    def check_program_config(self) -> None:
        self._program_config.sync_mode = False
        self._program_config.runtime_split_send_recv = True
        self._program_config.half_async = True


class GeoStrategy(DistributedStrategy):
    """Fleet's GEO-SGD: trainers optimise locally and push deltas every ``update_frequency``
    steps."""

    def __init__(self, update_frequency: int = 100) -> None:
        super().__init__()
        self._program_config.geo_sgd_need_push_nums = int(update_frequency)
        self.check_program_config()
        self._trainer_runtime_config.mode = "geo"
        self._build_strategy.async_mode = True

    def check_program_config(self) -> None:
        self._program_config.sync_mode = False
        self._program_config.runtime_split_send_recv = True
        self._program_config.geo_sgd_mode = True


class StrategyFactory:
    """Fluid's constructors of the fleet strategies."""

    @staticmethod
    def create_sync_strategy() -> SyncStrategy:
        return SyncStrategy()

    @staticmethod
    def create_half_async_strategy() -> HalfAsyncStrategy:
        return HalfAsyncStrategy()

    @staticmethod
    def create_async_strategy() -> AsyncStrategy:
        return AsyncStrategy()

    @staticmethod
    def create_geo_strategy(update_frequency: int = 100) -> GeoStrategy:
        return GeoStrategy(update_frequency)
