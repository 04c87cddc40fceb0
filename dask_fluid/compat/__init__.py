"""``import paddle.fluid as fluid`` resolving to dask_fluid (DESIGN decision 10).

Fluid 1.8 scripts import ``paddle``, ``paddle.fluid`` and a handful of helper modules. After
:func:`install`, those names resolve to dask_fluid in the current process, through a finder on
``sys.meta_path``; nothing named ``paddle`` is installed on disk, and :func:`uninstall` takes the
finder and every alias away again::

    from dask_fluid import compat

    compat.install()
    import paddle.fluid as fluid          # fluid.layers is dask_fluid.layers, and so on
    compat.uninstall()

``dask-fluid run script.py ARGS`` does the same for a whole script, and for the Python processes
that script starts (see :mod:`dask_fluid.compat.run`).

What each name resolves to:

``paddle``
    :mod:`dask_fluid.compat._paddle` (``paddle.batch``, ``paddle.reader``, ``paddle.dataset``,
    ``paddle.compat``, ``paddle.fluid``).
``paddle.fluid``
    :mod:`dask_fluid.compat._fluid`: dask_fluid's namespace (the same objects) plus Fluid's
    ``core``, ``profiler``, ``dygraph``, ``incubate``.
``paddle.fluid.reader``
    :mod:`dask_fluid.py_reader` (``PyReader``, ``DataLoader``).
``paddle.fluid.lod_tensor``
    :mod:`dask_fluid.lod` (``create_lod_tensor``, ``create_random_int_lodtensor``).
``paddle.fluid.<module>``
    ``dask_fluid.<module>`` for Fluid 1.8 module names that dask_fluid implements (``layers``,
    ``framework``, ``transpiler``, ``compiler``, ``io`` ...); the others raise
    ModuleNotFoundError saying so.

Names a script may reach that dask_fluid does not implement (dygraph, the collective fleet API,
the profiler) import fine and raise NotImplementedError naming themselves when used.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence

__all__ = ["FLUID_VERSION", "install", "is_installed", "uninstall"]

#: the Fluid release whose API dask_fluid implements: ``paddle.__version__``, and what
#: ``fluid.require_version`` compares with
FLUID_VERSION = "1.8.5"

# Paddle name -> the dask_fluid module that stands for it. A name below one of these keys maps
# to the same path under the value (``paddle.dataset.mnist`` -> ``...compat.dataset.mnist``).
_ALIASES: dict[str, str] = {
    "paddle": "dask_fluid.compat._paddle",
    "paddle.fluid": "dask_fluid.compat._fluid",
    "paddle.fluid.core": "dask_fluid.compat.core",
    "paddle.fluid.profiler": "dask_fluid.compat.profiler",
    "paddle.fluid.log_helper": "dask_fluid.compat.log_helper",
    "paddle.fluid.reader": "dask_fluid.py_reader",  # PyReader, DataLoader, GeneratorLoader
    "paddle.fluid.dataset": "dask_fluid.queue_dataset",  # DatasetFactory, QueueDataset, ...
    "paddle.fluid.lod_tensor": "dask_fluid.lod",  # create_lod_tensor, ..._random_int_lodtensor
    "paddle.fluid.incubate": "dask_fluid.compat.incubate",
    "paddle.compat": "dask_fluid.compat.paddle_compat",
    "paddle.batch": "dask_fluid.compat.batch",
    "paddle.reader": "dask_fluid.sample_readers",
    "paddle.dataset": "dask_fluid.compat.dataset",
    "paddle.distributed": "dask_fluid.compat.distributed",  # its launcher
}

# The modules of Paddle 1.8's python/paddle/fluid. ``paddle.fluid.<name>`` is
# ``dask_fluid.<name>`` when dask_fluid has that module.
_FLUID_MODULES = frozenset({
    "average", "backward", "clip", "communicator", "compiler", "contrib", "core", "data",
    "data_feed_desc", "data_feeder", "dataset", "debugger", "default_scope_funcs",
    "device_worker", "distribute_lookup_table", "distributed", "dygraph", "dygraph_grad_clip",
    "evaluator",
    "executor", "framework", "graphviz", "incubate", "inferencer", "initializer", "input",
    "install_check", "io", "layer_helper", "layer_helper_base", "layers", "lod_tensor",
    "log_helper", "metrics", "net_drawer", "nets", "op", "optimizer", "parallel_executor",
    "param_attr", "profiler", "reader", "regularizer", "trainer_desc", "trainer_factory",
    "transpiler", "unique_name", "wrapped_decorator",
})
# Fluid modules whose dask_fluid namesake means something else: dask_fluid.distributed holds the
# Dask runtimes, not Fluid's downpour/fleet helpers.
_NOT_THE_SAME = frozenset({"distributed"})

_finder: _PaddleFinder | None = None


def _not_found(fullname: str, why: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(
        f"No module named {fullname!r} under dask_fluid.compat: {why} (dask_fluid implements "
        "Fluid 1.8's static-graph API; see docs/migration.md)", name=fullname)


def _target(fullname: str) -> str:
    """The dask_fluid module that stands for the Paddle module ``fullname``."""
    parts = fullname.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in _ALIASES and (key != "paddle" or n == len(parts)) and (
                key != "paddle.fluid" or n == len(parts)):
            return ".".join([_ALIASES[key], *parts[n:]])
    if parts[:2] == ["paddle", "fluid"]:
        if parts[2] not in _FLUID_MODULES:
            raise _not_found(fullname, f"Paddle 1.8 has no module paddle.fluid.{parts[2]}")
        if parts[2] in _NOT_THE_SAME:
            raise _not_found(fullname, f"Fluid's paddle.fluid.{parts[2]} is not implemented")
        return ".".join(["dask_fluid", *parts[2:]])
    raise _not_found(fullname, f"{'.'.join(parts[:2])} is not part of Fluid 1.8's API that "
                               "dask_fluid implements")


class _AliasLoader(importlib.abc.Loader):
    """Hands the import system a module that is already imported under its dask_fluid name."""

    def __init__(self, module: types.ModuleType, fullname: str, aliased: set[str]) -> None:
        self._module = module
        self._spec = module.__spec__
        self._fullname = fullname
        self._aliased = aliased

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return self._module

    def exec_module(self, module: types.ModuleType) -> None:
        # module_from_spec replaced __spec__ with the alias's spec; the module keeps its own, so
        # that reload(), pickling by module name and multiprocessing still see dask_fluid names.
        module.__spec__ = self._spec
        # A package's submodules imported already get their Paddle names now: imported later
        # under those names, the import system would set each as an attribute of the package,
        # over what the package put there (``fluid.layers.rnn`` is the rnn function, as in
        # Fluid, not the module of the same name)
        if hasattr(module, "__path__"):
            prefix = module.__name__ + "."
            for name, sub in list(sys.modules.items()):
                if name.startswith(prefix) and "." not in name[len(prefix):]:
                    alias = f"{self._fullname}.{name[len(prefix):]}"
                    if alias not in sys.modules:
                        sys.modules[alias] = sub
                        self._aliased.add(alias)


class _PaddleFinder(importlib.abc.MetaPathFinder):
    """Resolves ``paddle`` and ``paddle.*`` to dask_fluid modules (see the module docstring)."""

    def __init__(self) -> None:
        #: the Paddle names this finder put in sys.modules
        self.aliased: set[str] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "paddle" and not fullname.startswith("paddle."):
            return None
        name = _target(fullname)
        try:
            found = importlib.util.find_spec(name)
        except ModuleNotFoundError:  # a parent of ``name`` is missing
            found = None
        if found is None:
            raise _not_found(fullname, f"{name} does not exist (not implemented yet)")
        module = importlib.import_module(name)
        self.aliased.add(fullname)
        return importlib.util.spec_from_loader(fullname, _AliasLoader(module, fullname,
                                                                      self.aliased),
                                               is_package=hasattr(module, "__path__"))


def install() -> importlib.abc.MetaPathFinder:
    """Make ``import paddle`` / ``import paddle.fluid`` resolve to dask_fluid in this process.

    Idempotent. Only this interpreter is affected: no package named ``paddle`` is written
    anywhere (``dask-fluid run`` extends it to the processes a script starts).

    Returns
    -------
    importlib.abc.MetaPathFinder
        The finder placed first on ``sys.meta_path``.

    Raises
    ------
    RuntimeError
        When a real ``paddle`` is already imported: the aliases would shadow it halfway.
    """
    global _finder
    if _finder is not None and _finder in sys.meta_path:
        return _finder
    existing = sys.modules.get("paddle")
    if existing is not None and not getattr(existing, "__name__", "").startswith("dask_fluid"):
        raise RuntimeError(
            f"a real paddle is already imported ({getattr(existing, '__file__', existing)}); "
            "dask_fluid.compat.install() must run before anything imports paddle, or not at all")
    _finder = _finder or _PaddleFinder()
    sys.meta_path.insert(0, _finder)
    return _finder


def uninstall() -> None:
    """Remove the finder and every ``paddle`` alias from this process.

    A real paddle, if one is installed, imports normally afterwards. Idempotent.
    """
    global _finder
    # the sitecustomize of ``dask-fluid run`` leaves a bootstrap finder until the first import
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _PaddleFinder)
                        and not getattr(f, "_dask_fluid_paddle_bootstrap", False)]
    aliased = _finder.aliased if _finder is not None else set()
    for name in list(sys.modules):
        if name != "paddle" and not name.startswith("paddle."):
            continue
        module = sys.modules[name]
        if name in aliased or getattr(module, "__name__", "").startswith("dask_fluid"):
            del sys.modules[name]
    _finder = None


def is_installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _finder is not None and _finder in sys.meta_path
