"""``fluid.save`` / ``fluid.load`` and the program state (Fluid 1.8's
``load_program_state``, ``set_program_state``): ``.pdparams`` and ``.pdopt`` as Paddle 1.8
writes them (a pickled ``{name: ndarray}``, unpickled admitting numpy arrays and nothing
else) and ``.pdmodel`` as the program's JSON. ``fluid.io`` re-exports them.
"""

from __future__ import annotations

import io as _io
import os
import pickle
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .executor import Executor, global_scope
from .framework import (
    Program,
    Variable,
)
from .ops.registry import to_host
from .tensor_file import read_tensor
from .var_io import _placed, is_parameter, is_persistable, load_vars

# -- fluid.save / fluid.load -------------------------------------------------------------------

class _ArraysOnly(pickle.Unpickler):
    """Admits numpy arrays and dtypes (what Paddle's .pdparams hold), refuses anything else."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray",
                                                            "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a parameter file: "
                                     "only numpy arrays are loaded")


def _pickle_load(path: str) -> dict:
    with open(path, "rb") as f:
        data = _ArraysOnly(_io.BytesIO(f.read()), encoding="latin1").load()
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a {{name: array}} dict")
    return data


def save(program: Program, model_path: str) -> None:
    """``model_path.pdparams`` (parameters), ``.pdopt`` (the other persistables) and
    ``.pdmodel`` (the program), as Fluid 1.8's ``fluid.save``."""
    directory = os.path.dirname(model_path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    scope = global_scope()

    def values(pred: Callable[[Variable], bool]) -> dict:
        out = {}
        for v in program.list_vars():
            if pred(v) and v.name in scope:
                value = scope.get(v.name)
                out[v.name] = np.array(to_host(value))
        return out

    with open(model_path + ".pdparams", "wb") as f:
        pickle.dump(values(is_parameter), f, protocol=2)
    with open(model_path + ".pdopt", "wb") as f:
        pickle.dump(values(lambda v: is_persistable(v) and not is_parameter(v)), f,
                    protocol=2)
    with open(model_path + ".pdmodel", "w") as f:
        f.write(program.to_json())


def load(program: Program, model_path: str, executor: Executor | None = None,
         var_list: Iterable[Variable] | None = None) -> None:
    """Load what :func:`save` (or Fluid 1.8's ``fluid.save``) wrote into the global scope.

    As Fluid 1.8's: ``model_path`` may end in ``.pdparams``, ``.pdopt`` or ``.pdmodel``; without
    a ``.pdparams`` file there, it is read as what ``save_params`` / ``save_persistables`` /
    ``save_vars`` wrote: a directory of one file per variable, or one file of ``var_list``.

    Raises
    ------
    ValueError
        A variable of ``program`` (or ``var_list``) has no saved value, or its shape differs;
        loading another API's files without ``executor``, or one file without ``var_list``.
    LookupError
        A variable of ``var_list`` is not in ``program``.
    """
    prefix = _model_prefix(model_path)
    if not os.path.exists(prefix + ".pdparams"):
        _load_saved_vars(program, model_path, executor, var_list)
        return
    model_path = prefix
    params = _pickle_load(model_path + ".pdparams")
    opt = _pickle_load(model_path + ".pdopt") if os.path.exists(model_path + ".pdopt") else {}
    saved = {**opt, **params}
    wanted = list(var_list) if var_list is not None else [
        v for v in program.list_vars() if is_persistable(v)]
    scope = global_scope()
    missing = [v.name for v in wanted if v.name not in saved]
    if missing:
        raise ValueError(f"{model_path}.pdparams/.pdopt have no value for {missing[:5]}")
    for v in wanted:
        value = np.asarray(saved[v.name])
        if v.shape is not None and len(v.shape) == value.ndim and any(
                d >= 0 and d != s for d, s in zip(v.shape, value.shape, strict=True)):
            raise ValueError(f"variable {v.name!r} is declared {list(v.shape)} but the saved "
                             f"value is {list(value.shape)}")
        scope.set(v.name, _placed(executor, scope, v.name, value))


def _model_prefix(model_path: str) -> str:
    """``model_path`` without a ``.pdparams``, ``.pdopt`` or ``.pdmodel`` suffix (Fluid 1.8's
    load and load_program_state take either)."""
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if model_path.endswith(suffix):
            return model_path[:-len(suffix)]
    return model_path


def _load_saved_vars(program: Program, model_path: str, executor: Executor | None,
                     var_list: Iterable[Variable] | None) -> None:
    """:func:`load` of the files save_params / save_persistables / save_vars wrote (Fluid
    1.8's fallback when there is no ``.pdparams``)."""
    if not os.path.exists(model_path):
        raise FileNotFoundError(f"no {model_path}.pdparams (fluid.save) and no file or "
                                f"directory {model_path} (save_params, save_persistables, "
                                "save_vars) to load")
    if executor is None:
        raise ValueError("executor is required when loading model files saved with "
                         "save_params, save_persistables or save_vars")
    if os.path.isdir(model_path):
        files = {os.path.relpath(os.path.join(root, f), model_path)
                 for root, _, names in os.walk(model_path) for f in names}
        chosen = [v for v in program.list_vars() if v.name in files]
        unused = sorted(files - {v.name for v in chosen})
        if unused:
            warnings.warn(f"fluid.load: files {unused} under {model_path} are not variables of "
                          "the program: not loaded", stacklevel=3)
        load_vars(executor, model_path, program, vars=chosen)
        return
    if var_list is None:
        raise ValueError("var_list is required when loading a model file saved with "
                         "save_params, save_persistables or save_vars")
    var_list = list(var_list)
    known = {v.name for v in program.list_vars()}
    stray = [v.name for v in var_list if v.name not in known]
    if stray:
        raise LookupError(f"fluid.load: variables {stray} of var_list are not in the program")
    dirname, filename = os.path.split(model_path)
    load_vars(executor, dirname, program, vars=var_list, filename=filename)


# -- program state: values by name, outside any scope -----------------------------------------

def get_program_parameter(program: Program) -> list[Variable]:
    """The parameters of ``program`` (Fluid 1.8's ``fluid.io.get_program_parameter``)."""
    return [v for v in program.list_vars() if is_parameter(v)]


def get_program_persistable_vars(program: Program) -> list[Variable]:
    """The persistable variables of ``program`` (``fluid.io.get_program_persistable_vars``)."""
    return [v for v in program.list_vars() if is_persistable(v)]


def _var_names(var_list: Iterable[Variable]) -> list[str]:
    # Fluid's clone_var_to_block: only variables, which carry the name and shape to load
    names = []
    for var in var_list:
        if not isinstance(var, Variable):
            raise TypeError(f"load_program_state: value in var_list must be variable, got "
                            f"{type(var).__name__} {var!r}")
        names.append(var.name)
    return names


def load_program_state(model_path: str, var_list: Iterable[Variable] | None = None
                       ) -> dict[str, np.ndarray]:
    """The saved values under ``model_path`` as ``{name: ndarray}``, without touching a scope
    (Fluid 1.8's ``fluid.load_program_state``).

    ``model_path`` is what :func:`save` was given (a ``.pdparams``/``.pdopt``/``.pdmodel``
    suffix is dropped): the parameters and, where present, the optimizer's state. Failing
    that, a directory written by :func:`save_vars`, :func:`save_params` or
    :func:`save_persistables` (one file per variable: every file under it, named by its path
    there, or only ``var_list``), or a single file they wrote with ``filename`` (then
    ``var_list`` must name its variables, in any order: they are stored sorted by name).

    Raises
    ------
    FileNotFoundError
        Nothing was saved under ``model_path``.
    ValueError
        ``model_path`` is a single file and ``var_list`` is None; a file is not a saved
        tensor or parameter dict.
    TypeError
        ``var_list`` holds something other than variables (names are not enough, as in
        Fluid).
    """
    prefix = _model_prefix(model_path)
    if os.path.exists(prefix + ".pdparams"):
        state = _pickle_load(prefix + ".pdparams")
        if os.path.exists(prefix + ".pdopt"):
            state.update(_pickle_load(prefix + ".pdopt"))
        return state
    if os.path.isfile(model_path):
        if var_list is None:
            raise ValueError(f"load_program_state: {model_path} is one file of several "
                             "variables: pass var_list, the variables saved in it")
        names = sorted(_var_names(var_list))
        state = {}
        with open(model_path, "rb") as f:
            for name in names:
                state[name] = read_tensor(f)[0]
        return state
    if not os.path.isdir(model_path):
        raise FileNotFoundError(f"load_program_state: neither {prefix}.pdparams (fluid.save) "
                                f"nor a directory of saved variables at {model_path}")
    if var_list is not None:
        names = _var_names(var_list)
    else:
        names = sorted(os.path.relpath(os.path.join(root, f), model_path).replace(os.sep, "/")
                       for root, _, files in os.walk(model_path) for f in files)
    state = {}
    for name in names:
        path = os.path.join(model_path, name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"load_program_state: no saved value of {name!r} at "
                                    f"{path}")
        with open(path, "rb") as f:
            try:
                state[name] = read_tensor(f)[0]
            except ValueError as exc:
                raise ValueError(f"load_program_state: {path} is not a variable saved by "
                                 f"save_vars/save_params/save_persistables: {exc}") from None
    return state


def set_program_state(program: Program, state_dict: dict[str, Any]) -> None:
    """Set the persistable variables of ``program`` in the global scope from ``state_dict``
    (Fluid 1.8's ``fluid.set_program_state``); names the program does not have are left out
    with a warning, as in Fluid.

    Every value is checked before any is set, so a mismatch changes nothing.

    Raises
    ------
    ValueError
        A persistable variable is not in the scope (run the startup program first), or a
        value's shape or dtype differs from the variable's current value.
    """
    scope = global_scope()
    updates = {}
    for var in get_program_persistable_vars(program):
        if var.name not in state_dict:
            continue
        if var.name not in scope:
            raise ValueError(f"set_program_state: variable {var.name!r} is not in the scope; "
                             "run the startup program first")
        current = scope.get(var.name)
        new = np.asarray(state_dict[var.name])
        if tuple(current.shape) != new.shape:
            raise ValueError(f"set_program_state: shape of {var.name!r} does not match: the "
                             f"program has {list(current.shape)}, the state "
                             f"{list(new.shape)}")
        if np.dtype(current.dtype) != new.dtype:
            raise ValueError(f"set_program_state: dtype of {var.name!r} does not match: the "
                             f"program has {np.dtype(current.dtype)}, the state {new.dtype}")
        updates[var.name] = new
    for name, value in updates.items():
        scope.set(name, _placed(None, scope, name, value.copy()))
    unused = [k for k in state_dict if k not in updates]
    if unused:
        warnings.warn("set_program_state: these values were not set, the program has no "
                      f"persistable variable of their name: {' '.join(unused)}", stacklevel=2)
