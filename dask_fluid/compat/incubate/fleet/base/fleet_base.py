"""``paddle.fluid.incubate.fleet.base.fleet_base``: what every Fluid 1.8 fleet answers.

:class:`Fleet` holds the role maker and answers the role questions (``is_worker``,
``worker_index``, ``worker_endpoints``, ``split_files``, ...); the parameter-server fleet
(:mod:`..parameter_server.distribute_transpiler`) and the collective fleet (:mod:`..collective`)
add how they train. :class:`DistributedOptimizer` is the base of their optimizers.
"""

from __future__ import annotations

from typing import Any

from dask_fluid.optimizer import Optimizer

from .role_maker import PaddleCloudRoleMaker, RoleMakerBase

__all__ = ["DistributedOptimizer", "Fleet", "Mode"]


class Mode:
    """Fluid's fleet kinds."""

    TRANSPILER = 1
    PSLIB = 2
    COLLECTIVE = 3


class Fleet:
    """A fleet of trainers (and pservers): the role questions every fleet answers.

    Parameters
    ----------
    mode : int
        A :class:`Mode`.
    """

    def __init__(self, mode: int) -> None:
        self._mode = mode
        self._role_maker: RoleMakerBase | None = None

    def init(self, role_maker: RoleMakerBase | None = None) -> None:
        """Learn this process's role (default: ``PaddleCloudRoleMaker`` from the environment,
        collective for the collective fleet).

        Raises
        ------
        TypeError
            ``role_maker`` is not a role maker.
        ValueError
            The role maker's environment or arguments are incomplete.
        """
        if role_maker is None:
            role_maker = PaddleCloudRoleMaker(is_collective=self._mode == Mode.COLLECTIVE)
        if not isinstance(role_maker, RoleMakerBase):
            raise TypeError(f"fleet.init: role_maker must be a RoleMakerBase, got "
                            f"{type(role_maker).__name__}")
        role_maker.generate_role()
        self._role_maker = role_maker

    def _role(self) -> RoleMakerBase:
        if self._role_maker is None:
            raise ValueError("fleet.init(role) to initialize before using fleet")
        return self._role_maker

    def is_worker(self) -> bool:
        """Whether this process is a trainer."""
        return self._role().is_worker()

    def is_server(self) -> bool:
        """Whether this process is a parameter server."""
        return self._role().is_server()

    def is_first_worker(self) -> bool:
        """Whether this process is trainer 0."""
        return self._role().is_first_worker()

    def worker_index(self) -> int:
        """This trainer's id."""
        return self._role().worker_index()

    def worker_num(self) -> int:
        """The number of trainers."""
        return self._role().worker_num()

    def server_index(self) -> int:
        """This pserver's index in the pserver endpoints."""
        return self._role().server_index()

    def server_num(self) -> int:
        """The number of pservers."""
        return len(self._role().get_pserver_endpoints())

    def server_endpoints(self, to_string: bool = False) -> list[str] | str:
        """The pserver endpoints (comma-joined with ``to_string``)."""
        eps = list(self._role().get_pserver_endpoints())
        return ",".join(eps) if to_string else eps

    def worker_endpoints(self, to_string: bool = False) -> list[str] | str:
        """The trainer endpoints (comma-joined with ``to_string``)."""
        eps = list(self._role().get_trainer_endpoints())
        return ",".join(eps) if to_string else eps

    def split_files(self, files: list[str]) -> list[str]:
        """This trainer's share of ``files``: contiguous runs, the first ``len(files) %
        trainers`` trainers one file more (Fluid's rule).

        Raises
        ------
        TypeError
            ``files`` is not a list.
        """
        if not isinstance(files, list):
            raise TypeError("files should be a list of file need to be read.")
        trainers, me = self.worker_num(), self.worker_index()
        size, extra = divmod(len(files), trainers)
        begin = me * size + min(me, extra)
        return files[begin:begin + size + (1 if me < extra else 0)]


class DistributedOptimizer:
    """An optimizer wrapped by a fleet (Fluid's ``DistributedOptimizer``): its ``minimize``
    also makes the fleet's programs.

    Parameters
    ----------
    optimizer : Optimizer
    strategy : object
        The fleet's strategy.

    Raises
    ------
    TypeError
        ``optimizer`` is not a fluid optimizer.
    """

    def __init__(self, optimizer: Any, strategy: Any = None) -> None:
        if not isinstance(optimizer, Optimizer) and not hasattr(optimizer, "minimize"):
            raise TypeError(f"optimizer must be an instance of Optimizer, got "
                            f"{type(optimizer).__name__}")
        self._optimizer = optimizer
        self._strategy = strategy

    def backward(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None, callbacks: Any = None) -> Any:
        """The wrapped optimizer's ``backward``."""
        return self._optimizer.backward(loss, startup_program, parameter_list, no_grad_set,
                                        callbacks)

    def apply_gradients(self, params_grads: Any) -> Any:
        """The wrapped optimizer's ``apply_gradients``."""
        return self._optimizer.apply_gradients(params_grads)

    def minimize(self, loss: Any, startup_program: Any = None, parameter_list: Any = None,
                 no_grad_set: Any = None) -> Any:
        raise NotImplementedError("a fleet's DistributedOptimizer subclass minimizes")
