"""``paddle.fluid.incubate.fleet.base.role_maker``: Fluid 1.8's role makers.

A role maker tells a process whether it is a trainer (worker) or a parameter server and which
one. :class:`PaddleCloudRoleMaker` reads the environment variables Fluid 1.8 reads:

pserver mode (``is_collective=False``)
    ``TRAINING_ROLE`` (``TRAINER`` or ``PSERVER``), ``PADDLE_PSERVERS_IP_PORT_LIST`` (the pserver
    endpoints), ``PADDLE_TRAINERS_NUM``, ``PADDLE_TRAINER_ID`` (trainers), ``POD_IP`` and
    ``PADDLE_PORT`` (a pserver's own endpoint, looked up in the list).
collective mode (``is_collective=True``)
    ``PADDLE_TRAINER_ID`` (default 0), ``PADDLE_TRAINING_ROLE`` (must be ``TRAINER``),
    ``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_CURRENT_ENDPOINT``.

:class:`UserDefinedRoleMaker` and :class:`UserDefinedCollectiveRoleMaker` take the same facts as
arguments. The MPI and Gloo role makers, and the barriers and all-reduces of every role maker,
are not implemented (Fluid's PaddleCloudRoleMaker only printed a warning there).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NoReturn

from .... import _unsupported

__all__ = ["GeneralRoleMaker", "MPIRoleMaker", "MPISymetricRoleMaker", "PaddleCloudRoleMaker",
           "Role", "RoleMakerBase", "UserDefinedCollectiveRoleMaker", "UserDefinedRoleMaker"]


class Role:
    """Fluid's role constants."""

    WORKER = 1
    SERVER = 2
    XPU = 3


class RoleMakerBase:
    """What every role maker answers (Fluid's ``RoleMakerBase``)."""

    def __init__(self) -> None:
        self._worker_endpoints: list[str] = []
        self._server_endpoints: list[str] = []
        self._role_is_generated = False
        self._role: int | None = None
        self._current_id = -1

    def generate_role(self) -> None:
        """Work out this process's role."""
        raise NotImplementedError("Please implement this method in child class")

    def _generated(self) -> None:
        if not self._role_is_generated:
            self.generate_role()

    def is_worker(self) -> bool:
        """Whether this process is a trainer."""
        self._generated()
        return self._role == Role.WORKER

    def is_server(self) -> bool:
        """Whether this process is a parameter server."""
        self._generated()
        return self._role == Role.SERVER

    def is_first_worker(self) -> bool:
        """Whether this process is trainer 0."""
        return self.is_worker() and self.worker_index() == 0

    def worker_index(self) -> int:
        """This trainer's id."""
        self._generated()
        return self._current_id

    def server_index(self) -> int:
        """This pserver's index in the pserver endpoints."""
        self._generated()
        return self._current_id

    def role_id(self) -> int:
        """``worker_index()`` for a trainer, ``server_index()`` for a pserver."""
        return self.worker_index() if self.is_worker() else self.server_index()

    def worker_num(self) -> int:
        """The number of trainers."""
        raise NotImplementedError("Please implement this method in child class")

    def get_trainer_endpoints(self) -> list[str]:
        """The trainer endpoints (collective mode)."""
        self._generated()
        return self._worker_endpoints

    def get_pserver_endpoints(self) -> list[str]:
        """The pserver endpoints (pserver mode)."""
        self._generated()
        return self._server_endpoints

    def to_string(self) -> str:
        return (f"role: {self._role}, current_id: {self._current_id}, worker_endpoints: "
                f"{self._worker_endpoints}, server_endpoints: {self._server_endpoints}")

    # Fluid's base class prints a warning and does nothing here; a barrier that does not wait
    # would let a script go on unsynchronised, so these raise.
    def _no_collective(self, what: str) -> NoReturn:
        raise _unsupported.not_implemented(
            f"{type(self).__name__}.{what}",
            "role makers carry no communicator in dask_fluid (Fluid's PaddleCloudRoleMaker "
            "only printed a warning); synchronise through the program's send_barrier/"
            "fetch_barrier ops or the Dask runtime")

    def all_gather(self, input: Any) -> NoReturn:
        self._no_collective("all_gather")

    def all_reduce_worker(self, input: Any, output: Any, mode: str = "sum") -> NoReturn:
        self._no_collective("all_reduce_worker")

    def barrier_worker(self) -> NoReturn:
        self._no_collective("barrier_worker")

    def barrier_all(self) -> NoReturn:
        self._no_collective("barrier_all")


def _env(name: str, mode: str) -> str:
    try:
        return os.environ[name]
    except KeyError:
        raise ValueError(f"PaddleCloudRoleMaker ({mode}): environment variable {name} is not "
                         "set; see the role_maker module docstring for the variables each "
                         "mode reads") from None


def _env_int(name: str, mode: str, default: str | None = None) -> int:
    text = os.environ.get(name, default) if default is not None else _env(name, mode)
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"PaddleCloudRoleMaker ({mode}): {name}={text!r} is not an "
                         "integer") from None


class PaddleCloudRoleMaker(RoleMakerBase):
    """The role from PaddleCloud's environment variables (Fluid 1.8's ``PaddleCloudRoleMaker``).

    Parameters
    ----------
    is_collective : bool
        Collective (NCCL2) mode: every process is a trainer, the endpoints are the trainers'.

    Raises
    ------
    ValueError
        At the first question asked, when a variable is missing or malformed.
    """

    def __init__(self, is_collective: bool = False, **kwargs: Any) -> None:
        super().__init__()
        self._is_collective = is_collective
        self._trainers_num = 0
        self._current_endpoint: str | None = None

    def generate_role(self) -> None:
        """Read the role from the environment (once)."""
        if self._role_is_generated:
            return
        if self._is_collective:
            self._generate_collective()
        else:
            self._generate_pserver_mode()
        self._role_is_generated = True

    def _generate_pserver_mode(self) -> None:
        mode = "pserver mode"
        endpoints = _env("PADDLE_PSERVERS_IP_PORT_LIST", mode).split(",")
        trainers_num = _env_int("PADDLE_TRAINERS_NUM", mode)
        training_role = _env("TRAINING_ROLE", mode)
        if training_role == "TRAINER":
            role, current_id = Role.WORKER, _env_int("PADDLE_TRAINER_ID", mode)
        elif training_role == "PSERVER":
            endpoint = f"{_env('POD_IP', mode)}:{_env('PADDLE_PORT', mode)}"
            if endpoint not in endpoints:
                raise ValueError(f"PaddleCloudRoleMaker (pserver mode): this pserver's endpoint "
                                 f"{endpoint} (POD_IP:PADDLE_PORT) is not in "
                                 f"PADDLE_PSERVERS_IP_PORT_LIST={','.join(endpoints)}")
            role, current_id = Role.SERVER, endpoints.index(endpoint)
            self._current_endpoint = endpoint
        else:
            raise ValueError(f"PaddleCloudRoleMaker (pserver mode): TRAINING_ROLE must be "
                             f"PSERVER or TRAINER, got {training_role!r}")
        self._trainers_num = trainers_num
        self._server_endpoints = endpoints
        self._role = role
        self._current_id = current_id

    def _generate_collective(self) -> None:
        mode = "collective mode"
        self._current_id = _env_int("PADDLE_TRAINER_ID", mode, default="0")
        training_role = os.environ.get("PADDLE_TRAINING_ROLE", "TRAINER")
        if training_role != "TRAINER":
            raise ValueError(f"PaddleCloudRoleMaker (collective mode): PADDLE_TRAINING_ROLE "
                             f"must be TRAINER, got {training_role!r}")
        self._role = Role.WORKER
        self._worker_endpoints = _env("PADDLE_TRAINER_ENDPOINTS", mode).split(",")
        self._current_endpoint = os.environ.get("PADDLE_CURRENT_ENDPOINT")
        self._trainers_num = len(self._worker_endpoints)

    def worker_num(self) -> int:
        """The number of trainers."""
        self._generated()
        return self._trainers_num

    def get_local_endpoint(self) -> str | None:
        """This process's endpoint (``PADDLE_CURRENT_ENDPOINT``, or a pserver's own)."""
        self._generated()
        return self._current_endpoint


def _check_endpoints(endpoints: Any, what: str) -> list[str]:
    if not isinstance(endpoints, list):
        raise TypeError(f"{what} must be as string list")
    if not endpoints:
        raise ValueError(f"the length of {what} list must be greater than 0")
    if len(endpoints) != len(set(endpoints)):
        raise ValueError(f"{what} can't have duplicate elements")
    if not all(isinstance(e, str) for e in endpoints):
        raise TypeError(f"every element in {what} list must be as string")
    return endpoints


class UserDefinedRoleMaker(RoleMakerBase):
    """A pserver-mode role given by the caller (Fluid 1.8's ``UserDefinedRoleMaker``).

    Parameters
    ----------
    current_id : int
        Trainer id, or index in ``server_endpoints`` for a server.
    role : int
        ``Role.WORKER`` or ``Role.SERVER``.
    worker_num : int
        Number of trainers, > 0.
    server_endpoints : list of str
        The pserver endpoints.
    """

    def __init__(self, current_id: int = 0, role: int = Role.WORKER, worker_num: int = 0,
                 server_endpoints: Sequence[str] | None = None) -> None:
        super().__init__()
        self._server_endpoints = _check_endpoints(server_endpoints, "server_endpoints")
        if role not in (Role.WORKER, Role.SERVER):
            raise TypeError("role must be as Role")
        self._role = role
        if not isinstance(current_id, int):
            raise TypeError("current_id must be as int")
        if current_id < 0:
            raise ValueError("current_id must be greater than or equal to 0")
        if role == Role.SERVER and current_id >= len(self._server_endpoints):
            raise ValueError("if role is Role.SERVER, current_id must be less than or equal "
                             "to len(server_endpoints) - 1")
        self._current_id = current_id
        if not isinstance(worker_num, int):
            raise TypeError("worker_num must be as int")
        if worker_num <= 0:
            raise ValueError("worker_num must be greater than 0")
        self._worker_num = worker_num
        self._role_is_generated = True

    def generate_role(self) -> None:
        self._role_is_generated = True

    def worker_num(self) -> int:
        return self._worker_num


class UserDefinedCollectiveRoleMaker(RoleMakerBase):
    """A collective-mode role given by the caller (Fluid 1.8's
    ``UserDefinedCollectiveRoleMaker``).

    Parameters
    ----------
    current_id : int
        Index of this trainer in ``worker_endpoints``.
    worker_endpoints : list of str
    """

    def __init__(self, current_id: int = 0,
                 worker_endpoints: Sequence[str] | None = None) -> None:
        super().__init__()
        self._worker_endpoints = _check_endpoints(worker_endpoints, "worker_endpoints")
        if not isinstance(current_id, int):
            raise TypeError("current_id must be as int")
        if current_id < 0:
            raise ValueError("current_id must be greater than or equal to 0")
        if current_id >= len(self._worker_endpoints):
            raise ValueError("current_id must be less than or equal to "
                             "len(worker_endpoints) - 1")
        self._current_id = current_id
        self._role = Role.WORKER
        self._worker_num = len(self._worker_endpoints)
        self._role_is_generated = True

    def generate_role(self) -> None:
        self._role_is_generated = True

    def worker_num(self) -> int:
        return self._worker_num


_NO_MPI = ("it needs mpi4py (MPI) or Gloo, which dask_fluid does not use; give the role with "
           "PaddleCloudRoleMaker's environment variables or UserDefinedRoleMaker")
MPIRoleMaker = _unsupported.cls("role_maker.MPIRoleMaker", _NO_MPI, __name__)
MPISymetricRoleMaker = _unsupported.cls("role_maker.MPISymetricRoleMaker", _NO_MPI, __name__)
GeneralRoleMaker = _unsupported.cls("role_maker.GeneralRoleMaker", _NO_MPI, __name__)
