"""``DistributeTranspilerConfig``: the transpiler's options, checked when they are set."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..flags import read_flag
from .ps_dispatcher import HashName, PSDispatcher, RoundRobin

MIN_BLOCK_SIZE = 8192
MODES = ("pserver", "nccl2", "collective")
#: Fluid 1.8's collective transpilers (``mode = "collective"``); the third is refused later
COLLECTIVE_MODES = ("grad_allreduce", "local_sgd", "single_process_multi_thread")


def _check_bool(name: str, value: Any) -> Any:
    if not isinstance(value, bool):
        raise ValueError(f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: "
                         "it must be a bool (True or False)")
    return value


def _check_split_method(name: str, value: Any) -> Any:
    if value is None:
        return RoundRobin
    if not (isinstance(value, type) and issubclass(value, PSDispatcher)) or value is PSDispatcher:
        raise ValueError(
            f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: it must be the "
            "class RoundRobin or HashName (or another PSDispatcher subclass), not an instance")
    return value


def _check_min_block_size(name: str, value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_BLOCK_SIZE:
        raise ValueError(f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: it "
                         f"must be an int >= {MIN_BLOCK_SIZE}")
    return value


def _check_mode(name: str, value: Any) -> Any:
    if value not in MODES:
        raise ValueError(f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: use "
                         f"one of {MODES}")
    return value


def _check_collective_mode(name: str, value: Any) -> Any:
    if value is not None and value not in COLLECTIVE_MODES:
        raise ValueError(f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: use "
                         f"None or one of {COLLECTIVE_MODES}")
    return value


def _check_not_none_bool(name: str, value: Any) -> Any:
    if value is None:  # Fluid 1.8's setters refuse None for these two
        raise ValueError(f"DistributeTranspilerConfig.{name} can't be None: it must be a bool "
                         "(True or False)")
    return _check_bool(name, value)


def _check_positive_int(name: str, value: Any, low: int) -> Any:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"DistributeTranspilerConfig.{name} = {value!r} is not allowed: it "
                         f"must be an int >= {low}")
    return value


#: field -> (default, checker); the checker returns the value to store or raises ValueError
_FIELDS: dict[str, tuple[Any, Callable[[str, Any], Any]]] = {
    "slice_var_up": (True, _check_bool),
    "split_method": (RoundRobin, _check_split_method),
    "min_block_size": (MIN_BLOCK_SIZE, _check_min_block_size),
    "enable_dc_asgd": (False, _check_bool),
    "mode": ("pserver", _check_mode),
    "collective_mode": (None, _check_collective_mode),
    "print_log": (False, _check_bool),
    "sync_mode": (True, _check_not_none_bool),
    "runtime_split_send_recv": (False, _check_not_none_bool),
    "half_async": (False, _check_bool),
    "completely_not_async": (False, _check_bool),
    "geo_sgd_mode": (False, _check_bool),
    "geo_sgd_need_push_nums": (100, lambda n, v: _check_positive_int(n, v, 1)),
    "wait_port": (True, _check_bool),
    "nccl_comm_num": (1, lambda n, v: _check_positive_int(n, v, 1)),
    "use_hierarchical_allreduce": (False, _check_bool),
    "hierarchical_allreduce_inter_nranks": (0, lambda n, v: _check_positive_int(n, v, 0)),
}


class DistributeTranspilerConfig:
    """Options of :class:`~dask_fluid.transpiler.DistributeTranspiler` (Fluid 1.8's fields).

    Every field is checked when it is assigned and again by ``transpile()``; a bad value raises
    ValueError naming the field, the value and what is allowed. Combinations of fields are
    checked by ``transpile()`` (:func:`~dask_fluid.transpiler.modes.resolve_mode`), which
    raises ValueError naming the conflicting fields.

    Attributes
    ----------
    slice_var_up : bool, default True
        Cut parameters and gradients into blocks spread over the pservers.
    split_method : type, default RoundRobin
        A :class:`PSDispatcher` subclass (the class, as in Fluid): ``RoundRobin`` or ``HashName``.
    min_block_size : int, default 8192
        Minimum elements per block; at least 8192.
    enable_dc_asgd : bool, default False
        Delay-compensated async SGD on the pservers (async modes only).
    mode : {"pserver", "nccl2", "collective"}, default "pserver"
        ``"collective"``: the programs get Fluid's ``c_*`` collective ops
        (:mod:`~dask_fluid.transpiler.collective`), chosen by ``collective_mode``.
    collective_mode : {None, "grad_allreduce", "local_sgd"}, default None
        With ``mode = "collective"``: all-reduce every gradient, or average the parameters
        after each local step. Fluid's ``"single_process_multi_thread"`` is accepted here and
        refused by ``transpile()`` (not implemented).
    print_log : bool, default False
        Log every decision (block cuts, endpoint per block) to the ``dask_fluid.transpiler``
        logger at INFO level.
    sync_mode : bool, default True
        Synchronous training. Fluid 1.8 takes the pserver's ``distributed_mode`` from this
        field and the trainer's ops from ``transpile(sync_mode=)``, so a job where the two
        differ does not train. dask_fluid uses one value for both: this field once it has
        been **assigned**, otherwise the ``transpile()`` argument (Fluid 1.4/1.5's documented
        precedence). ``None`` is refused, and so is ``True`` while
        ``runtime_split_send_recv`` is True (Fluid 1.8's setter: set ``sync_mode = False``
        first).
    runtime_split_send_recv : bool, default False
        Async training where the trainer program sends whole gradients and receives whole
        parameters, and the runtime cuts them into the pserver blocks and joins them (Fluid's
        Communicator). Without ``half_async`` the trainer does not wait for its exchange:
        each step sends its gradients and goes on with the parameters of the previous step's
        reply (one exchange in flight). ``True`` is refused while ``sync_mode`` is True.
    half_async : bool, default False
        With ``runtime_split_send_recv``: a ``send_barrier`` with ``half_async=True`` ends
        the sends, and each step the trainer waits until its gradients are applied and the
        fresh parameters are back, without waiting for the other trainers (Fluid's
        HalfAsyncCommunicator). Without ``runtime_split_send_recv`` async training is already
        half-async (Fluid's ``HALF_ASYNC`` mode), so the field changes nothing there.
    completely_not_async : bool, default False
        With ``sync_mode=False``, ``runtime_split_send_recv`` and ``half_async``: synchronous
        training through the Communicator (Fluid 1.8 fleet's SyncStrategy): per-trainer
        gradient names, the pservers sum and average each round.
    geo_sgd_mode : bool, default False
        GEO-SGD (needs ``sync_mode=False`` and ``runtime_split_send_recv``): every trainer
        keeps its optimizer and trains locally; every ``geo_sgd_need_push_nums`` steps it
        sends ``(local - last synced) / trainers`` per parameter block, the pservers add it,
        and the trainer takes the pservers' values plus its own progress since.
    geo_sgd_need_push_nums : int, default 100
        GEO-SGD: steps between two exchanges with the pservers; at least 1.
    wait_port : bool, default True
        A trainer started by hand waits (up to ``FLAGS_rpc_deadline``) for each pserver to
        accept its connection. ``False`` (here, or ``get_trainer_program(wait_port=False)``)
        tries once: a pserver that is not listening yet fails the trainer at once, naming it.
    nccl_comm_num : int, default 1
        nccl2 mode: number of NCCL communicators (one ``NCCLID`` variable each).
    use_hierarchical_allreduce : bool, default False
    hierarchical_allreduce_inter_nranks : int, default 0
    """

    def __init__(self) -> None:
        for name, (default, _) in _FIELDS.items():
            object.__setattr__(self, name, default)
        # the fields assigned so far (a frozenset, so that copy.copy gives independent copies)
        object.__setattr__(self, "_assigned", frozenset())

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"DistributeTranspilerConfig has no field {name!r}; fields are "
                                 f"{sorted(_FIELDS)}")
        value = _FIELDS[name][1](name, value)
        if name in _EXCLUSIVE and value:
            other = _EXCLUSIVE[name]
            if getattr(self, other):
                raise ValueError(f"DistributeTranspilerConfig.{name} = True is not allowed "
                                 f"while {other} is True (as in Fluid 1.8): set "
                                 f"config.{other} = False first")
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_assigned", self._assigned | {name})

    def is_set(self, name: str) -> bool:
        """Whether field ``name`` was assigned (rather than left at its default)."""
        if name not in _FIELDS:
            raise AttributeError(f"DistributeTranspilerConfig has no field {name!r}")
        return name in self._assigned

    def validate(self) -> None:
        """Check every field again (they may have been set through ``__dict__``)."""
        for name, (_, check) in _FIELDS.items():
            check(name, getattr(self, name))
        if self.sync_mode and self.runtime_split_send_recv:
            raise ValueError("DistributeTranspilerConfig: sync_mode and runtime_split_send_recv "
                             "are both True; runtime_split_send_recv is for asynchronous "
                             "training: set sync_mode = False")

    def to_dict(self) -> dict[str, Any]:
        """Field values; ``split_method`` as its class name."""
        d = {name: getattr(self, name) for name in _FIELDS}
        d["split_method"] = d["split_method"].__name__
        return d

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"DistributeTranspilerConfig({fields})"


#: fields that Fluid 1.8's setters refuse to set True while the other one is True
_EXCLUSIVE = {"sync_mode": "runtime_split_send_recv", "runtime_split_send_recv": "sync_mode"}


class ServerRuntimeConfig:
    """The RPC thread counts of a pserver (Fluid 1.8's ``ServerRuntimeConfig``): read from
    ``FLAGS_rpc_send_thread_num``, ``FLAGS_rpc_get_thread_num`` and
    ``FLAGS_rpc_prefetch_thread_num`` when made (default 12 each). The transpiler writes them
    on the pserver program's ``listen_and_serv`` op, whose pserver sizes its pools by them;
    a fleet strategy carries one (``set_server_runtime_config``)."""

    def __init__(self) -> None:
        self._rpc_send_thread_num = int(read_flag("FLAGS_rpc_send_thread_num"))
        self._rpc_get_thread_num = int(read_flag("FLAGS_rpc_get_thread_num"))
        self._rpc_prefetch_thread_num = int(read_flag("FLAGS_rpc_prefetch_thread_num"))

    def op_attrs(self) -> dict[str, int]:
        """The ``listen_and_serv`` attrs these make, each checked positive."""
        attrs = {"rpc_send_thread_num": self._rpc_send_thread_num,
                 "rpc_get_thread_num": self._rpc_get_thread_num,
                 "rpc_prefetch_thread_num": self._rpc_prefetch_thread_num}
        for name, value in attrs.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ServerRuntimeConfig: _{name} must be a positive int, got "
                                 f"{value!r}")
        return attrs


__all__ = ["DistributeTranspilerConfig", "HashName", "RoundRobin", "PSDispatcher",
           "ServerRuntimeConfig"]


_ENDPOINT = re.compile(
    r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]+)$")


def parse_endpoints(value: Any, arg: str) -> list[str]:
    """Split and check a list of endpoints.

    Parameters
    ----------
    value : str or sequence of str
        ``"host:port,host:port"`` or a list. A scheme prefix is accepted so that Dask worker
        addresses (``"tcp://127.0.0.1:40123"``) can be used directly.
    arg : str
        Argument name for the error messages.

    Returns
    -------
    list of str
        The endpoints, stripped, in order.
    """
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",")]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [s.strip() for s in value]
    else:
        raise TypeError(f"{arg} must be a comma-separated str of endpoints or a list of str, "
                        f"got {type(value).__name__}")
    if not items or items == [""]:
        raise ValueError(f"{arg} is empty: give at least one 'host:port' endpoint")
    seen: set[str] = set()
    for ep in items:
        m = _ENDPOINT.match(ep)
        if not m or not 1 <= int(m.group("port")) <= 65535:
            raise ValueError(f"{arg}: {ep!r} is not a valid endpoint; expected 'host:port' with "
                             "a port in 1..65535 (optionally with a scheme, 'tcp://host:port')")
        if ep in seen:
            raise ValueError(f"{arg}: endpoint {ep!r} is listed twice; endpoints must be unique")
        seen.add(ep)
    return items
