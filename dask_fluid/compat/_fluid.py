"""The module ``paddle.fluid`` stands for after :func:`dask_fluid.compat.install`.

Every name dask_fluid has is the same object here (``fluid.layers.fc is dask_fluid.layers.fc``,
``fluid.Executor``, ``fluid.DistributeTranspiler``, ``fluid.default_main_program`` ...), and so
is every dask_fluid module of a Fluid 1.8 name (``fluid.io`` once dask_fluid has it). On top
come Fluid's own ``core``, ``profiler``, ``dygraph``, ``incubate`` and ``log_helper`` from
dask_fluid.compat, and a few top-level Fluid names. Names that are neither raise AttributeError
saying that dask_fluid does not implement them.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import dask_fluid as _df

from . import _FLUID_MODULES, _NOT_THE_SAME

# a package, so that ``import paddle.fluid.layers`` asks the finder for the submodule
__path__: list[str] = []

_COMPAT_SUBMODULES = ("core", "dygraph", "incubate", "log_helper", "profiler")


def in_dygraph_mode() -> bool:
    """False: dask_fluid has no dygraph mode, so a program is always being built."""
    return False


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
