"""A CuPy for CPU tests of the device code paths: numpy underneath, CuPy's refusals on top.

Its arrays live in host memory, but they behave as CuPy's do where a GPU program differs from a
numpy one, so that code which only works because everything is numpy fails here as it would on a
GPU:

- a device array never becomes a numpy array implicitly: ``np.asarray(a)``, ``np.array(a)``
  raise CuPy's ``TypeError`` (``a.get()`` or ``cupy.asnumpy(a)`` copy it to the host);
- a numpy array is never an operand of device arithmetic: ``cupy.isfinite(host)``,
  ``device + host``, ``cupy.concatenate([device, host])`` raise ``TypeError: Unsupported type
  <class 'numpy.ndarray'>``, as CuPy's ufuncs and routines do;
- numpy functions given device arrays dispatch to the device versions (CuPy implements
  ``__array_ufunc__`` and ``__array_function__``), so ``np.sum(device)`` is a device array;
- reductions and scalar indexing give 0-d device arrays, not numpy scalars;
- where CuPy converts host data itself, this does too: ``cupy.asarray``/``cupy.array``, index
  arrays and lists in ``a[...]``, values assigned with ``a[...] = v``, and the indices and
  values of ``ufunc.at``.

It does not imitate streams, devices beyond one, memory or NCCL (``fake_cupy`` does those) nor
floating-point differences of GPU kernels (the real CuPy tests, on a GPU, do). :func:`modules`
gives the ``sys.modules`` entries to install it under CuPy's names.
"""

from __future__ import annotations

import math
import operator
import sys
import types
from typing import Any

import numpy as np
import pytest

_IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
             "construct a NumPy array explicitly.")


def _refuse(value: Any) -> None:
    raise TypeError(f"Unsupported type {type(value)}")


def _device_args(value: Any) -> Any:
    """``value`` with device arrays unwrapped; a host array anywhere in it is refused."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, np.ndarray):
        _refuse(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_device_args(v) for v in value)
    if isinstance(value, dict):
        return {k: _device_args(v) for k, v in value.items()}
    return value


def _host_ok(value: Any) -> Any:
    """``value`` with device arrays unwrapped; host data accepted (CuPy converts it)."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, (list, tuple)):
        return type(value)(_host_ok(v) for v in value)
    return value


def _wrap(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ndarray(value)
    if isinstance(value, np.generic):  # CuPy's reductions give 0-d arrays
        return ndarray(np.asarray(value))
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    return value


class ndarray:  # noqa: N801 - CuPy's name
    """A device array (host memory underneath)."""

    __slots__ = ("_a",)

    def __init__(self, a: np.ndarray) -> None:
        object.__setattr__(self, "_a", a)

    # CuPy's interoperability protocols: numpy functions run the device versions
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        return _wrap(fn(*_device_args(inputs), **_device_args(kwargs)))

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        return _wrap(func(*_device_args(args), **_device_args(kwargs)))

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(_IMPLICIT)

    def get(self, stream: Any = None, order: str = "C", out: Any = None) -> np.ndarray:
        return np.array(self._a, copy=True)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # __array_interface__ & co. would hand numpy the memory
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if callable(attr):
            return lambda *args, **kwargs: _wrap(attr(*_device_args(args),
                                                      **_device_args(kwargs)))
        return _wrap(attr)

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._a[_host_ok(key)])

    def __setitem__(self, key: Any, value: Any) -> None:
        self._a[_host_ok(key)] = _host_ok(value)

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        return (_wrap(v) for v in self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __index__(self) -> int:
        return operator.index(self._a)

    def __repr__(self) -> str:
        return f"strict_cupy.{self._a!r}"

    __hash__ = None  # type: ignore[assignment]


ndarray.__module__ = "cupy"  # what dask_fluid.ops.registry.array_module looks for


def _binary(name: str) -> Any:
    def op(self: ndarray, other: Any) -> Any:
        return _wrap(getattr(self._a, name)(_device_args(other)))
    op.__name__ = name
    return op


def _in_place(name: str) -> Any:
    def op(self: ndarray, other: Any) -> ndarray:
        getattr(self._a, name)(_device_args(other))
        return self
    op.__name__ = name
    return op


for _op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
            "xor", "lshift", "rshift"):
    setattr(ndarray, f"__{_op}__", _binary(f"__{_op}__"))
    setattr(ndarray, f"__r{_op}__", _binary(f"__r{_op}__"))
    setattr(ndarray, f"__i{_op}__", _in_place(f"__i{_op}__"))
for _op in ("lt", "le", "eq", "ne", "gt", "ge"):
    setattr(ndarray, f"__{_op}__", _binary(f"__{_op}__"))
for _op in ("neg", "pos", "abs", "invert"):
    setattr(ndarray, f"__{_op}__", (lambda name: lambda self: _wrap(
        getattr(self._a, name)()))(f"__{_op}__"))


class _Ufunc:
    def __init__(self, ufunc: np.ufunc) -> None:
        self._u = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _wrap(self._u(*_device_args(args), **_device_args(kwargs)))

    def at(self, a: ndarray, indices: Any, b: Any = None) -> None:
        if not isinstance(a, ndarray):
            _refuse(a)
        if b is None:
            self._u.at(a._a, _host_ok(indices))
        else:
            self._u.at(a._a, _host_ok(indices), _host_ok(b))

    def __getattr__(self, name: str) -> Any:  # reduce, accumulate, outer, ...
        method = getattr(self._u, name)
        return lambda *args, **kwargs: _wrap(method(*_device_args(args),
                                                    **_device_args(kwargs)))


#: host data in, device array out
_CONVERT = ("asarray", "array", "asanyarray")
#: routines whose host array arguments CuPy takes as shapes or indices
_HOST_ARGS = ("zeros_like", "ones_like", "empty_like", "full_like", "take")


class _Namespace(types.ModuleType):
    """numpy's functions under CuPy's names, each with CuPy's rules; dtypes and constants as
    they are (CuPy aliases numpy's)."""

    def __init__(self, name: str, source: types.ModuleType) -> None:
        super().__init__(name)
        self._source = source

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        target = getattr(self._source, name)
        if isinstance(target, np.ufunc):
            value: Any = _Ufunc(target)
        elif isinstance(target, types.ModuleType):
            value = _Namespace(f"{self.__name__}.{name}", target)
        elif callable(target) and not isinstance(target, type):
            value = _function(name, target)
        else:
            value = target
        setattr(self, name, value)
        return value


def _function(name: str, fn: Any) -> Any:
    if name in _CONVERT:
        def convert(obj: Any, dtype: Any = None, *args: Any, **kwargs: Any) -> ndarray:
            if isinstance(obj, ndarray) and name != "array":  # a device array stays, as in CuPy
                return ndarray(np.asarray(obj._a, dtype=dtype))
            host = obj._a if isinstance(obj, ndarray) else obj
            return ndarray(np.array(host, dtype=dtype, copy=True))  # a copy to the device
        return convert
    if name in _HOST_ARGS:
        return lambda *args, **kwargs: _wrap(fn(*_host_ok(args), **kwargs))
    return lambda *args, **kwargs: _wrap(fn(*_device_args(args), **_device_args(kwargs)))


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None) -> np.ndarray:
    return a.get() if isinstance(a, ndarray) else np.asarray(a)


def get_array_module(*args: Any) -> Any:
    return _MODULES["cupy"] if any(isinstance(a, ndarray) for a in args) else np


class Device:
    """Device 0 only; a context manager, as CuPy's."""

    def __init__(self, device: int | None = None) -> None:
        self.id = int(device or 0)
        if self.id != 0:
            raise RuntimeError(f"strict_cupy has one device; asked for {self.id}")

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def use(self) -> None:
        return None

    def synchronize(self) -> None:
        return None


_MODULES: dict[str, types.ModuleType] = {}


def modules() -> dict[str, types.ModuleType]:
    """``sys.modules`` entries of the strict CuPy: ``cupy``, ``cupy.cuda``,
    ``cupy.cuda.runtime``, ``cupyx``, ``cupyx.scipy``, ``cupyx.scipy.special``."""
    cupy = _Namespace("cupy", np)
    cupy.__version__ = "14.2.0"
    cupy.ndarray, cupy.asnumpy, cupy.get_array_module = ndarray, asnumpy, get_array_module
    cuda = types.ModuleType("cupy.cuda")
    runtime = types.ModuleType("cupy.cuda.runtime")
    runtime.getDeviceCount = lambda: 1
    runtime.getDeviceProperties = lambda i: {"name": b"strict_cupy (host memory)"}
    cuda.runtime, cuda.Device = runtime, Device
    cuda.get_device_id = lambda: 0
    # "pinned" host memory: plain bytes here, which numpy wraps as CuPy's buffer
    cuda.alloc_pinned_memory = bytearray
    cupy.cuda = cuda
    cupyx = types.ModuleType("cupyx")
    scipy = types.ModuleType("cupyx.scipy")
    special = types.ModuleType("cupyx.scipy.special")
    special.erf = lambda x: _wrap(np.vectorize(math.erf, otypes=[x.dtype])(_device_args(x)))
    scipy.special, cupyx.scipy = special, scipy
    _MODULES.clear()
    _MODULES.update({"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.runtime": runtime,
                     "cupyx": cupyx, "cupyx.scipy": scipy, "cupyx.scipy.special": special})
    return dict(_MODULES)


#: the two device modules a test runs on: parametrize with these and call :func:`device_module`
DEVICE_PARAMS = [pytest.param("gpu", marks=pytest.mark.gpu), "strict"]


def gpu_reason() -> str | None:
    """Why the real CuPy cannot run kernels here, or None when it can."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
        return "no CUDA device found"
    except Exception as err:  # ImportError, or a CUDA runtime error without a driver
        return f"{type(err).__name__}: {err}"


def device_module(kind: str, request: pytest.FixtureRequest) -> Any:
    """``kind`` ``"gpu"``: the real CuPy (the test is skipped, saying why, without a GPU);
    ``"strict"``: this module installed under CuPy's names for the test's duration."""
    if kind == "gpu":
        reason = gpu_reason()
        if reason is not None:
            pytest.skip(f"CuPy with a CUDA GPU is not available: {reason}")
        import cupy

        return cupy
    from dask_fluid.compiler import _cuda_device_count

    monkeypatch = pytest.MonkeyPatch()
    for name, module in modules().items():
        monkeypatch.setitem(sys.modules, name, module)

    def uninstall() -> None:
        monkeypatch.undo()
        _cuda_device_count.cache_clear()

    # the GPU count is asked once per process: forget it while the strict CuPy is installed
    _cuda_device_count.cache_clear()
    request.addfinalizer(uninstall)
    return sys.modules["cupy"]
