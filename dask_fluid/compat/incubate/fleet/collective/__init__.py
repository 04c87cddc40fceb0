"""``paddle.fluid.incubate.fleet.collective``: Fluid 1.8's collective fleet API.

``fleet`` and ``CollectiveOptimizer`` import (test_dist_base.py imports them at module level)
and raise NotImplementedError when used: the fleet API is not implemented in dask_fluid yet.
``DistributedStrategy`` is Fluid's configuration object (a BuildStrategy with fleet fields), so
scripts can build and inspect it.
"""

from __future__ import annotations

from typing import Any, NoReturn

from dask_fluid.compiler import BuildStrategy, ExecutionStrategy

from ...._unsupported import cls, not_implemented

__all__ = ["CollectiveOptimizer", "DistFCConfig", "DistributedStrategy", "LambConfig", "fleet"]

_WHY = ("Fluid 1.8's collective fleet API is not implemented yet; for NCCL2 training transpile "
        "with fluid.DistributeTranspiler (config.mode = 'nccl2'), as test_dist_base.py does "
        "without --gpu_fleet_api")


class LambConfig:
    """Fluid 1.8's (empty) LAMB configuration of the fleet strategy."""


class DistFCConfig:
    """Fluid 1.8's (empty) distributed-FC configuration of the fleet strategy."""


class DistributedStrategy(BuildStrategy):
    """The fleet strategy: Fluid 1.8's BuildStrategy plus the collective fleet fields.

    Attributes
    ----------
    use_local_sgd, use_dist_fc, forward_recompute, use_amp : bool
        Default False.
    dist_fc_config : DistFCConfig or None
    mode : str
        ``"nccl2"`` (default) or ``"collective"``.
    collective_mode : str or None
        ``"local_sgd"`` or ``"grad_allreduce"``.
    nccl_comm_num : int
    recompute_checkpoints : list
    amp_loss_scaling : float
        Default ``2 ** 15``.
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
        self._ut4grad_allreduce = False


def _method(name: str) -> Any:
    def stand_in(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
        raise not_implemented(f"fleet.{name}", _WHY)

    stand_in.__name__ = stand_in.__qualname__ = name
    stand_in.__doc__ = f"Fluid's ``fleet.{name}``; not implemented: {_WHY}."
    return stand_in


def _property(name: str) -> property:
    return property(_method(name), doc=f"Fluid's ``fleet.{name}``; not implemented.")


_METHODS = ("barrier_worker", "distributed_optimizer", "init", "init_server", "init_worker",
            "is_first_worker", "is_server", "is_worker", "node_num", "run_server",
            "save_inference_model", "save_persistables", "server_endpoints", "server_index",
            "server_num", "split_files", "stop_worker", "worker_endpoints", "worker_index",
            "worker_num")
_PROPERTIES = ("_origin_program", "main_program", "startup_program")

# Fluid's Collective(Fleet) class, every entry point raising
Collective = type("Collective", (), {
    "__module__": __name__,
    "__doc__": f"Fluid 1.8's collective fleet; not implemented: {_WHY}.",
    "__repr__": lambda self: "<fleet (collective): not implemented in dask_fluid>",
    **{name: _method(name) for name in _METHODS},
    **{name: _property(name) for name in _PROPERTIES},
})

fleet = Collective()

CollectiveOptimizer = cls("fleet.collective.CollectiveOptimizer", _WHY, __name__)
