"""The module ``paddle.fluid`` stands for after :func:`dask_fluid.compat.install`.

Every name dask_fluid has is the same object here (``fluid.layers.fc is dask_fluid.layers.fc``,
``fluid.Executor``, ``fluid.DistributeTranspiler``, ``fluid.default_main_program`` ...), and so
is every dask_fluid module of a Fluid 1.8 name (``fluid.io`` once dask_fluid has it). On top
come Fluid's own ``core``, ``profiler``, ``incubate`` and ``log_helper`` from
dask_fluid.compat, and a few top-level Fluid names. Names that are neither raise AttributeError
saying that dask_fluid does not implement them.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from typing import Any

import dask_fluid as _df

from ..lod import LoDTensor
from . import _FLUID_MODULES, _NOT_THE_SAME, FLUID_VERSION
from ._unsupported import function as _stand_in
from .core import is_compiled_with_cuda

#: Fluid's alias of its tensor type
Tensor = LoDTensor

load_op_library = _stand_in(
    "paddle.fluid.load_op_library", "a library of custom C++ operators cannot be loaded: "
    "dask_fluid's ops are numpy/CuPy kernels (add one with dask_fluid.ops.registry.register)",
    __name__)

__all__ = ["Tensor", "is_compiled_with_cuda", "load_op_library",
           "require_version"]

# a package, so that ``import paddle.fluid.layers`` asks the finder for the submodule
__path__: list[str] = []

# modules of paddle.fluid that stand for a dask_fluid module of another name, or for one of
# dask_fluid.compat: ``fluid.<name>`` imports them (Fluid's package imports them all)
_COMPAT_SUBMODULES = ("core", "dataset", "incubate", "lod_tensor", "log_helper", "profiler",
                      "reader")


class VersionError(Exception):
    """``require_version`` found a version outside the range a script asked for (Fluid 1.8
    raises a plain Exception whose message starts ``VersionError:``)."""


def _version_parts(version: Any, arg: str) -> list[int] | None:
    if version is None and arg == "max_version":
        return None
    if not isinstance(version, str):
        raise TypeError(f"The type of '{arg}' in require_version must be str, but received "
                        f"{type(version)}.")
    if not re.fullmatch(r"\d+(\.\d+){0,3}", version):
        raise ValueError(f"The value of '{arg}' in require_version must be in format "
                         f"'\\d+(\\.\\d+){{0,3}}', like '1.5.2.0', but received {version}")
    parts = [int(p) for p in version.split(".")]
    return parts + [0] * (4 - len(parts))


def require_version(min_version: str, max_version: str | None = None) -> None:
    """Raise unless the Fluid version dask_fluid implements (:data:`FLUID_VERSION`, what
    ``paddle.__version__`` says) lies in ``[min_version, max_version]`` (Fluid 1.8's
    ``fluid.require_version``; missing parts count as 0).

    Raises
    ------
    TypeError, ValueError
        A version is not a string of 1 to 4 dot-separated numbers.
    VersionError
        The version is outside the range.
    """
    low = _version_parts(min_version, "min_version")
    high = _version_parts(max_version, "max_version")
    have = _version_parts(FLUID_VERSION, "min_version")
    if high is not None and not low <= have <= high:
        raise VersionError(f"VersionError: PaddlePaddle version in [{min_version}, "
                           f"{max_version}] required, but {FLUID_VERSION} installed.")
    if have < low:
        raise VersionError(f"VersionError: PaddlePaddle version {min_version} or higher is "
                           f"required, but {FLUID_VERSION} installed, please upgrade your "
                           f"PaddlePaddle to {min_version} or other higher version.")


def __getattr__(name: str) -> Any:
    if name in _COMPAT_SUBMODULES:
        return importlib.import_module(f"paddle.fluid.{name}")
    try:
        return getattr(_df, name)
    except AttributeError:
        pass
    if name in _FLUID_MODULES and name not in _NOT_THE_SAME and (
            importlib.util.find_spec(f"dask_fluid.{name}") is not None):
        return importlib.import_module(f"paddle.fluid.{name}")
    raise AttributeError(f"paddle.fluid.{name} is not implemented in dask_fluid (which "
                         "implements Fluid 1.8's static-graph API); see docs/migration.md")


def __dir__() -> list[str]:
    return sorted({*globals(), *dir(_df), *_COMPAT_SUBMODULES})
