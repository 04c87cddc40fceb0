"""``DistributeTranspilerConfig``: the transpiler's options, checked when they are set."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .ps_dispatcher import HashName, PSDispatcher, RoundRobin

MIN_BLOCK_SIZE = 8192
MODES = ("pserver", "nccl2")


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


def _check_sync_mode(name: str, value: Any) -> Any:
    if value is not None:
        _check_bool(name, value)
    return value


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
    "print_log": (False, _check_bool),
    "sync_mode": (None, _check_sync_mode),
    "wait_port": (True, _check_bool),
    "nccl_comm_num": (1, lambda n, v: _check_positive_int(n, v, 1)),
    "use_hierarchical_allreduce": (False, _check_bool),
    "hierarchical_allreduce_inter_nranks": (0, lambda n, v: _check_positive_int(n, v, 0)),
}


class DistributeTranspilerConfig:
    """Options of :class:`~dask_fluid.transpiler.DistributeTranspiler` (Fluid 1.x names).

    Every field is checked when it is assigned and again by ``transpile()``; a bad value raises
    ValueError naming the field, the value and what is allowed.

    Attributes
    ----------
    slice_var_up : bool, default True
        Cut parameters and gradients into blocks spread over the pservers.
    split_method : type, default RoundRobin
        A :class:`PSDispatcher` subclass (the class, as in Fluid): ``RoundRobin`` or ``HashName``.
    min_block_size : int, default 8192
        Minimum elements per block; at least 8192.
    enable_dc_asgd : bool, default False
        Delay-compensated async SGD on the pservers (async mode only).
    mode : {"pserver", "nccl2"}, default "pserver"
    print_log : bool, default False
        Log every decision (block cuts, endpoint per block) to the ``dask_fluid.transpiler``
        logger at INFO level.
    sync_mode : bool or None, default None
        As Fluid 1.4/1.5: when not None it overrides the ``sync_mode`` argument of
        ``transpile()``; when None the argument decides.
    wait_port : bool, default True
        Kept for Fluid compatibility. dask_fluid never blocks on TCP ports: the Dask runtime
        does its rendezvous through the scheduler.
    nccl_comm_num : int, default 1
        nccl2 mode: number of NCCL communicators (one ``NCCLID`` variable each).
    use_hierarchical_allreduce : bool, default False
    hierarchical_allreduce_inter_nranks : int, default 0
    """

    def __init__(self) -> None:
        for name, (default, _) in _FIELDS.items():
            object.__setattr__(self, name, default)

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"DistributeTranspilerConfig has no field {name!r}; fields are "
                                 f"{sorted(_FIELDS)}")
        object.__setattr__(self, name, _FIELDS[name][1](name, value))

    def validate(self) -> None:
        """Check every field again (they may have been set through ``__dict__``)."""
        for name, (_, check) in _FIELDS.items():
            check(name, getattr(self, name))

    def to_dict(self) -> dict[str, Any]:
        """Field values; ``split_method`` as its class name."""
        d = {name: getattr(self, name) for name in _FIELDS}
        d["split_method"] = d["split_method"].__name__
        return d

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"DistributeTranspilerConfig({fields})"


__all__ = ["DistributeTranspilerConfig", "HashName", "RoundRobin", "PSDispatcher"]


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
