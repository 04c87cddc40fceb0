"""``fluid.dygraph.guard``, ``no_grad``, ``to_variable``: entering and using dygraph mode."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import unique_name
from ..compiler import _cuda_device_count
from ..framework import (
    Program,
    _dygraph_tracer,
    _dygraph_tracer_guard,
    in_dygraph_mode,
    program_guard,
)
from ..lod import LoDTensor
from ..ops.registry import array_module, to_host
from ..places import CPUPlace, CUDAPlace
from .tracer import Tracer
from .varbase import VarBase

__all__ = ["disable_dygraph", "enable_dygraph", "enabled", "guard", "no_grad", "to_variable"]


def enabled() -> bool:
    """Whether dygraph mode is on in this thread (Fluid's ``dygraph.enabled``)."""
    return in_dygraph_mode()


def _default_place() -> CPUPlace | CUDAPlace:
    # Fluid 1.8: CUDAPlace(0) when compiled with CUDA; here when CuPy sees a GPU
    return CUDAPlace(0) if _cuda_device_count() > 0 else CPUPlace()


@contextlib.contextmanager
def guard(place: CPUPlace | CUDAPlace | None = None) -> Iterator[None]:
    """Run ops as they are created inside the block (Fluid 1.8's ``fluid.dygraph.guard``).

    As in Fluid, the block gets its own main and startup programs (their ``random_seed`` seeds
    the parameters' initialisers and the random ops) and its own unique names.

    Parameters
    ----------
    place : CPUPlace or CUDAPlace, optional
        Where values live and kernels run; CUDAPlace(0) when CuPy sees a GPU, else CPUPlace.
    """
    tracer = Tracer(place if place is not None else _default_place())
    with program_guard(Program(), Program()), unique_name.guard(), \
            _dygraph_tracer_guard(tracer):
        yield


_enabled: list[contextlib.ExitStack] = []


def enable_dygraph(place: CPUPlace | CUDAPlace | None = None) -> None:
    """Enter dygraph mode until :func:`disable_dygraph` (Fluid 1.8's ``enable_dygraph``)."""
    if in_dygraph_mode():
        return
    stack = contextlib.ExitStack()
    stack.enter_context(guard(place))
    _enabled.append(stack)


def disable_dygraph() -> None:
    """Leave the dygraph mode :func:`enable_dygraph` entered (nothing when it is off)."""
    if _enabled:
        _enabled.pop().close()


def _grad_off() -> contextlib.AbstractContextManager:
    tracer = _dygraph_tracer()
    return contextlib.nullcontext() if tracer is None else tracer.no_grad()


def no_grad(func: Callable | None = None) -> Any:
    """Record no gradients: ``with no_grad():`` or ``@no_grad`` on a function (Fluid 1.8).

    Ops run inside still compute their values; their outputs stop gradients.
    """
    if func is None:
        return _grad_off()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _grad_off():
            return func(*args, **kwargs)
    return wrapper


def to_variable(value: Any, name: str | None = None, zero_copy: bool | None = None) -> VarBase:
    """A dygraph variable holding ``value`` (Fluid 1.8's ``fluid.dygraph.to_variable``).

    Parameters
    ----------
    value : numpy.ndarray, LoDTensor or VarBase
        A VarBase is returned as it is. An array keeps its dtype; it is copied onto the
        guard's place (``zero_copy``, a CPU-only speed hint in Fluid, shares a numpy array).
    name : str, optional

    Returns
    -------
    VarBase
        With ``stop_gradient=True``, as Fluid's.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``.
    TypeError
        ``value`` is not an array, LoDTensor or VarBase.
    """
    tracer = _dygraph_tracer()
    if tracer is None:
        raise RuntimeError("to_variable works in dygraph mode only: call it inside "
                           "fluid.dygraph.guard()")
    if isinstance(value, VarBase):
        return value
    lod: tuple = ()
    if isinstance(value, LoDTensor):
        lod, value = tuple(value.lod()), value._array
    elif not isinstance(value, np.ndarray) and not type(value).__module__.startswith("cupy"):
        raise TypeError("to_variable: the value must be a numpy.ndarray, LoDTensor or "
                        f"VarBase, got {type(value).__name__}")
    if value.dtype.kind not in "biuf":
        raise TypeError(f"to_variable: values of dtype {value.dtype} are not tensors; give "
                        "numbers (bool, int or float)")
    if value.dtype.kind == "f" and not bool(array_module(value).isfinite(value).all()):
        # as the executor refuses such a feed: it would train on silently
        raise ValueError(f"to_variable{'' if name is None else f'({name!r})'}: the value "
                         "contains NaN or inf; clean the input data")
    if isinstance(tracer.place, CPUPlace):
        value = to_host(value)  # a CuPy array given to a CPU guard: its values, on the host
    array = tracer.executor.to_place(value)
    if array is value and not zero_copy:
        array = array.copy()  # numpy or CuPy, each with its own copy
    var = tracer.wrap(array, name=name)
    var._lod = lod
    return var
