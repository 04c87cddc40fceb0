"""``fluid.io``: saving and loading variables, parameters and inference models.

Variables are written in Paddle 1.8's LoDTensor binary layout (:mod:`dask_fluid.tensor_file`),
so files move both ways between dask_fluid and real Fluid 1.8 (``save_persistables``,
``save_params``, ``save_vars``, with one file per variable or all of them in one
``filename``, a combined file holding the records in the order of the variables' names, as
Paddle's ``save_combine`` writes them).

``save_inference_model`` writes the pruned program as dask_fluid's JSON (``__model__``): not
Paddle's ProgramDesc protobuf, so the model file is for dask_fluid only, while its parameter
files are Paddle's. ``fluid.save`` / ``fluid.load`` write ``.pdparams`` and ``.pdopt`` as
Paddle 1.8 does (a pickled ``{name: ndarray}``) and ``.pdmodel`` as the program's JSON;
loading unpickles with a restricted unpickler that admits numpy arrays and nothing else.
"""

from __future__ import annotations

import io as _io
import os
import pickle
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .executor import Executor, global_scope
from .framework import (
    OP_ROLE_KEY,
    OpRole,
    Parameter,
    Program,
    Variable,
    VarType,
    default_main_program,
)
from .ops.registry import array_module, to_host
from .py_reader import DataLoader, PyReader
from .sample_readers import (
    ComposeNotAligned,
    batch,
    buffered,
    cache,
    chain,
    compose,
    firstn,
    map_readers,
    multiprocess_reader,
    shuffle,
    xmap_readers,
)
from .tensor_file import read_tensor, write_tensor

__all__ = [
    # Fluid 1.8's fluid.io re-exports paddle.reader's decorators and paddle.batch
    "ComposeNotAligned", "batch", "buffered", "cache", "chain", "compose", "firstn",
    "map_readers", "multiprocess_reader", "shuffle", "xmap_readers",
    "DataLoader", "PyReader", "get_program_parameter", "get_program_persistable_vars",
    "is_parameter", "is_persistable", "load", "load_inference_model", "load_params",
    "load_persistables", "load_program_state", "load_vars", "read_tensor", "save",
    "set_program_state",
    "save_inference_model", "save_params", "save_persistables", "save_vars", "write_tensor",
]

MODEL_FILENAME = "__model__"

# -- which variables ---------------------------------------------------------------------------

def is_parameter(var: Variable) -> bool:
    """A trainable parameter."""
    return isinstance(var, Parameter)


def is_persistable(var: Variable) -> bool:
    """A persistable variable worth saving (not a raw holder such as a communicator)."""
    return bool(var.persistable) and var.type != VarType.RAW


def _select(main_program: Program | None, vars: Iterable[Variable | str] | None,
            predicate: Callable[[Variable], bool] | None) -> list[str]:
    program = main_program or default_main_program()
    if vars is not None:
        return [v.name if isinstance(v, Variable) else str(v) for v in vars]
    predicate = predicate or (lambda v: True)
    return sorted({v.name for v in program.list_vars() if predicate(v)})


def _scope_of(executor: Executor | None) -> Any:
    return global_scope()


def _placed(executor: Executor | None, scope: Any, name: str, value: np.ndarray) -> Any:
    """A loaded ``value`` where the executor keeps variables (Fluid sets a loaded tensor on
    the executor's place); without an executor, where the variable's current value is."""
    if executor is not None:
        return executor.to_place(value)
    xp = array_module(scope.vars.get(name))
    return value if xp is np else xp.asarray(value)


# -- save / load -------------------------------------------------------------------------------

def save_vars(executor: Executor | None, dirname: str, main_program: Program | None = None,
              vars: Iterable[Variable | str] | None = None,
              predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None) -> None:
    """Write the chosen variables' values from the global scope under ``dirname``: one file
    per variable (named as the variable), or all in ``filename`` sorted by name.

    Raises
    ------
    KeyError
        A chosen variable is not in the scope (run the startup program first).
    """
    names = _select(main_program, vars, predicate)
    scope = _scope_of(executor)
    os.makedirs(dirname, exist_ok=True)
    if filename is None:
        for name in names:
            path = os.path.join(dirname, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                write_tensor(f, to_host(scope.get(name)))
        return
    with open(os.path.join(dirname, filename), "wb") as f:
        for name in sorted(names):
            write_tensor(f, to_host(scope.get(name)))


def load_vars(executor: Executor | None, dirname: str, main_program: Program | None = None,
              vars: Iterable[Variable | str] | None = None,
              predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None) -> None:
    """Read the chosen variables into the global scope from files :func:`save_vars` (or real
    Fluid 1.8) wrote; a shape that differs from the program's declared shape is an error.

    Raises
    ------
    FileNotFoundError
        A variable's file (or ``filename``) is missing.
    ValueError
        A file is not in Paddle's LoDTensor layout, holds fewer tensors than variables, or a
        shape does not match the program.
    """
    program = main_program or default_main_program()
    names = _select(program, vars, predicate)
    scope = _scope_of(executor)
    block = program.global_block()
    if filename is None:
        loaded = {}
        for name in names:
            path = os.path.join(dirname, name)
            if not os.path.exists(path):
                raise FileNotFoundError(f"no saved value of variable {name!r} at {path}")
            with open(path, "rb") as f:
                loaded[name] = read_tensor(f)[0]
    else:
        path = os.path.join(dirname, filename)
        with open(path, "rb") as f:
            loaded = {}
            for name in sorted(names):
                try:
                    loaded[name] = read_tensor(f)[0]
                except ValueError as exc:
                    raise ValueError(f"{path} holds fewer tensors than the {len(names)} "
                                     f"variables to load, or is damaged, at {name!r}: "
                                     f"{exc}") from None
            if f.read(1):
                raise ValueError(f"{path} holds more tensors than the {len(names)} variables "
                                 "to load: was it saved from another program?")
    for name, value in loaded.items():
        if block.has_var(name):
            declared = block.var(name).shape
            if declared is not None and len(declared) == value.ndim and any(
                    d >= 0 and d != v for d, v in zip(declared, value.shape, strict=True)):
                raise ValueError(f"variable {name!r} is declared {list(declared)} but the "
                                 f"saved value is {list(value.shape)}")
        scope.set(name, _placed(executor, scope, name, value))


def save_params(executor: Executor | None, dirname: str, main_program: Program | None = None,
                filename: str | None = None) -> None:
    """:func:`save_vars` of the trainable parameters."""
    save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def load_params(executor: Executor | None, dirname: str, main_program: Program | None = None,
                filename: str | None = None) -> None:
    """:func:`load_vars` of the trainable parameters."""
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def save_persistables(executor: Executor | None, dirname: str,
                      main_program: Program | None = None, filename: str | None = None) -> None:
    """:func:`save_vars` of every persistable variable (parameters, optimizer state, learning
    rate, step counters).

    A transpiled trainer program (``_is_distributed``) saves as Fluid 1.8 does: every
    persistable variable it holds, under its own name, so that each parameter is written
    whole (a sync trainer holds the parameters the pservers hold); the chief trainer
    (trainer 0) also fetches the optimizer state the pservers keep (Adam's moments, ...) and
    writes each variable whole. The pservers' :func:`load_persistables` then take their blocks
    from those files.
    """
    program = main_program or default_main_program()
    overview = getattr(program, "_parameters_on_pservers", None)
    if getattr(program, "_is_distributed", False) and overview is not None:
        remote = overview.get_distributed_vars_by_vtypes(["Optimizer"], groupby=True)
        names = [v.name for v in program.list_vars() if is_persistable(v)
                 and v.name not in remote and not v.name.endswith("@GRAD")
                 and ".trainer_" not in v.name and ".block" not in v.name
                 and v.name in _scope_of(executor)]
        save_vars(executor, dirname, program, vars=names, filename=filename)
        if program._is_chief and remote:
            _save_remote_state(executor, dirname, program, remote)
        return
    save_vars(executor, dirname, program, predicate=is_persistable, filename=filename)


def load_persistables(executor: Executor | None, dirname: str,
                      main_program: Program | None = None, filename: str | None = None) -> None:
    """:func:`load_vars` of every persistable variable.

    A pserver program (``_is_distributed``, with ``_parameters_on_pservers``) loads, as
    Fluid 1.8 does, the parameter blocks and optimizer state its endpoint holds, each cut
    from the whole variable's file (rows ``offset / row size`` on).
    """
    program = main_program or default_main_program()
    overview = getattr(program, "_parameters_on_pservers", None)
    if getattr(program, "_is_distributed", False) and overview is not None:
        _load_distributed_persistables(executor, dirname, program, overview)
        return
    load_vars(executor, dirname, program, predicate=is_persistable, filename=filename)


def _save_remote_state(executor: Executor | None, dirname: str, program: Program,
                       remote: dict) -> None:
    """Fetch each optimizer-state variable's blocks from the pservers that hold them (Fluid's
    ``recv_save``) and write it whole. One small program a block: blocks of one variable keep
    one name on every pserver."""
    exe = executor if executor is not None else Executor()
    scope = _scope_of(executor)
    os.makedirs(dirname, exist_ok=True)
    for name, parts in remote.items():
        sliced = parts[0].is_slice
        # a variable that is not cut (a beta power) is the same on every pserver: one copy
        chosen = sorted(parts, key=lambda v: v.block_id) if sliced else parts[:1]
        values = []
        for part in chosen:
            fetch = Program()
            block = fetch.global_block()
            tmp = block.create_var(name=f"{part.slice.name}@REMOTE.{part.endpoint}",
                                   shape=part.slice.shape, dtype=part.slice.dtype)
            block.append_op("recv", inputs={"X": []}, outputs={"Out": [tmp]},
                            attrs={"epmap": [part.endpoint],
                                   "recv_varnames": [part.slice.name],
                                   "trainer_id": int(program._trainer_id),
                                   "sync_mode": bool(program._sync_mode),
                                   OP_ROLE_KEY: int(OpRole.RPC)})
            exe.run(fetch, scope=scope)
            value = scope.vars.pop(tmp.name)
            values.append(to_host(value))
        whole = np.concatenate(values, axis=0) if sliced else values[0]
        with open(os.path.join(dirname, name), "wb") as f:
            write_tensor(f, whole.reshape(parts[0].origin.shape))


def _load_distributed_persistables(executor: Executor | None, dirname: str, program: Program,
                                   overview: Any) -> None:
    endpoint = program._ps_endpoint
    if not endpoint:
        raise ValueError("load_persistables of a pserver program needs its endpoint: get it "
                         "with DistributeTranspiler.get_pserver_program(endpoint)")
    scope = _scope_of(executor)
    for part in overview.get_distributed_vars_by_ep(endpoint):
        path = os.path.join(dirname, part.origin.name)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no saved value of variable {part.origin.name!r} at "
                                    f"{path} (pserver {endpoint} holds its block "
                                    f"{part.slice.name!r})")
        with open(path, "rb") as f:
            whole = read_tensor(f)[0]
        if tuple(whole.shape) != tuple(part.origin.shape):
            raise ValueError(f"variable {part.origin.name!r} is {list(part.origin.shape)} in "
                             f"the program but {list(whole.shape)} in {path}")
        if part.is_slice:
            row = int(np.prod(whole.shape[1:], dtype=np.int64)) if whole.ndim > 1 else 1
            start = part.offset // row
            value = whole[start:start + part.slice.shape[0]]
        else:
            value = whole
        scope.set(part.slice.name, np.ascontiguousarray(value).reshape(part.slice.shape))


# -- inference models --------------------------------------------------------------------------

def _inference_program(program: Program, feeds: Sequence[str], targets: Sequence[str]
                       ) -> Program:
    """``program`` for test, keeping only the ops the targets need."""
    return program.clone(for_test=True)._prune_with_input(feeds, targets)


def save_inference_model(dirname: str, feeded_var_names: Sequence[str],
                         target_vars: Sequence[Variable], executor: Executor | None,
                         main_program: Program | None = None,
                         model_filename: str | None = None,
                         params_filename: str | None = None,
                         export_for_deployment: bool = True,
                         program_only: bool = False) -> list[str]:
    """Prune ``main_program`` to what ``target_vars`` need from ``feeded_var_names``, write it
    (``model_filename``, default ``__model__``) and, unless ``program_only``, its persistable
    variables (one file each, or ``params_filename``). Returns the target names.

    With ``export_for_deployment=False``, as Fluid 1.8: nothing is pruned; the whole program
    goes to ``<model_filename>.main_program`` and every persistable variable of it (optimizer
    state too) is saved, for further training. ``load_inference_model`` reads it back when
    given that file name.
    """
    if isinstance(feeded_var_names, str):
        feeded_var_names = [feeded_var_names]
    if isinstance(target_vars, Variable):
        target_vars = [target_vars]
    targets = [t.name if isinstance(t, Variable) else str(t) for t in target_vars]
    if not targets:
        raise ValueError("save_inference_model needs at least one target variable")
    program = main_program or default_main_program()
    model_path = os.path.join(dirname, model_filename or MODEL_FILENAME)
    if export_for_deployment:
        pruned = _inference_program(program, list(feeded_var_names), targets)
    else:
        pruned, model_path = program, model_path + ".main_program"
    os.makedirs(dirname, exist_ok=True)
    doc = {"format": "dask_fluid.inference/1", "program": pruned._to_dict(),
           "feed": list(feeded_var_names), "fetch": targets}
    import json  # noqa: PLC0415

    with open(model_path, "w") as f:
        json.dump(doc, f)
    if not program_only and not export_for_deployment:
        save_persistables(executor, dirname, program, filename=params_filename)
    elif not program_only:
        used = {n for op in pruned.global_block().ops for n in op.input_arg_names}
        names = [v.name for v in pruned.list_vars() if is_persistable(v) and v.name in used]
        save_vars(executor, dirname, pruned, vars=names, filename=params_filename)
    return targets


def load_inference_model(dirname: str, executor: Executor | None,
                         model_filename: str | None = None,
                         params_filename: str | None = None,
                         pserver_endpoints: Any = None) -> tuple[Program, list[str], list]:
    """The program, the feed names and the fetch variables :func:`save_inference_model`
    wrote; its parameters are loaded into the global scope.

    Raises
    ------
    ValueError
        The model file was not written by dask_fluid (e.g. Paddle's ProgramDesc protobuf).
    """
    import json  # noqa: PLC0415

    if pserver_endpoints is not None:
        raise NotImplementedError("load_inference_model(pserver_endpoints=...) (a distributed "
                                  "lookup table) is not implemented")
    path = os.path.join(dirname, model_filename or MODEL_FILENAME)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{path} is not a dask_fluid inference model (Paddle's ProgramDesc "
                         "protobuf is not read; its parameter files are, with load_vars)")\
            from None
    if doc.get("format") != "dask_fluid.inference/1":
        raise ValueError(f"{path} is not a dask_fluid inference model")
    program = Program._from_dict(doc["program"])
    used = {n for op in program.global_block().ops for n in op.input_arg_names}
    names = [v.name for v in program.list_vars() if is_persistable(v) and v.name in used]
    load_vars(executor, dirname, program, vars=names, filename=params_filename)
    block = program.global_block()
    return program, list(doc["feed"]), [block.var(n) for n in doc["fetch"]]


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

    Raises
    ------
    ValueError
        A variable of ``program`` (or ``var_list``) has no saved value, or its shape differs.
    """
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


# -- program state: values by name, outside any scope -----------------------------------------

def get_program_parameter(program: Program) -> list[Variable]:
    """The parameters of ``program`` (Fluid 1.8's ``fluid.io.get_program_parameter``)."""
    return [v for v in program.list_vars() if is_parameter(v)]


def get_program_persistable_vars(program: Program) -> list[Variable]:
    """The persistable variables of ``program`` (``fluid.io.get_program_persistable_vars``)."""
    return [v for v in program.list_vars() if is_persistable(v)]


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
    """
    prefix = model_path
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if prefix.endswith(suffix):
            prefix = prefix[:-len(suffix)]
            break
    if os.path.exists(prefix + ".pdparams"):
        state = _pickle_load(prefix + ".pdparams")
        if os.path.exists(prefix + ".pdopt"):
            state.update(_pickle_load(prefix + ".pdopt"))
        return state
    if os.path.isfile(model_path):
        if var_list is None:
            raise ValueError(f"load_program_state: {model_path} is one file of several "
                             "variables: pass var_list, the variables saved in it")
        names = sorted(v.name if isinstance(v, Variable) else str(v) for v in var_list)
        state = {}
        with open(model_path, "rb") as f:
            for name in names:
                state[name] = read_tensor(f)[0]
        return state
    if not os.path.isdir(model_path):
        raise FileNotFoundError(f"load_program_state: neither {prefix}.pdparams (fluid.save) "
                                f"nor a directory of saved variables at {model_path}")
    if var_list is not None:
        names = [v.name if isinstance(v, Variable) else str(v) for v in var_list]
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
