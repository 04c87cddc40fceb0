"""The module ``paddle`` stands for after :func:`dask_fluid.compat.install`.

``paddle.fluid`` is dask_fluid (see :mod:`dask_fluid.compat._fluid`); ``paddle.batch``,
``paddle.reader``, ``paddle.dataset`` and ``paddle.compat`` are Paddle 1.8's helpers in
dask_fluid.compat. Everything loads on first use.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from . import FLUID_VERSION

# a package, so that ``import paddle.fluid`` asks the finder for the submodule
__path__: list[str] = []

#: the Fluid release whose API dask_fluid implements (scripts compare it)
__version__ = FLUID_VERSION

_SUBMODULES = ("compat", "dataset", "fluid", "reader")


def __getattr__(name: str) -> Any:
    if name == "batch":
        # Paddle 1.8's paddle.batch is the function of the module paddle.batch
        return importlib.import_module("paddle.batch").batch
    if name in _SUBMODULES:
        return importlib.import_module(f"paddle.{name}")
    raise AttributeError(f"paddle.{name} is not implemented in dask_fluid (it offers paddle."
                         f"{', paddle.'.join(('batch', *_SUBMODULES))}); see docs/migration.md")


def __dir__() -> list[str]:
    return sorted({*globals(), "batch", *_SUBMODULES})


class _PaddleModule(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # `import paddle.batch` binds the submodule to paddle.batch; Paddle 1.8 rebinds the
        # name to the function (paddle/__init__.py: batch = batch.batch), and so does this.
        if name == "batch" and isinstance(value, types.ModuleType):
            value = value.batch
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _PaddleModule
