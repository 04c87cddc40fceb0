"""Saving and loading variables (Fluid 1.8's ``save_vars``, ``load_vars``, ``save_params``,
``save_persistables`` and their loaders, a distributed job's persistables too) and reading
parameter values.

Variables are written in Paddle 1.8's LoDTensor binary layout (:mod:`dask_fluid.tensor_file`),
so files move both ways between dask_fluid and real Fluid 1.8: one file per variable, or all
of them in one ``filename``, a combined file holding the records in the order of the
variables' names (as Paddle's ``save_combine`` writes them). ``fluid.io`` re-exports all.
"""

from __future__ import annotations

import io as _io
import os
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
from .tensor_file import read_tensor, write_tensor

# -- which variables ---------------------------------------------------------------------------

def is_parameter(var: Variable) -> bool:
    """A trainable parameter."""
    return isinstance(var, Parameter)


def is_persistable(var: Variable) -> bool:
    """A persistable variable worth saving (not a raw holder such as a communicator)."""
    return bool(var.persistable) and var.type != VarType.RAW


def valid_program(main_program: Any, api: str) -> Program:
    """``main_program``, the default one for None, a CompiledProgram's own program (with
    Fluid 1.8's warning); a TypeError for anything else (Fluid's ``_get_valid_program``)."""
    if main_program is None:
        return default_main_program()
    inner = getattr(main_program, "_program", None)
    if not isinstance(main_program, Program) and isinstance(inner, Program):
        warnings.warn("The input is a CompiledProgram, this is not recommended.", stacklevel=3)
        return inner
    if not isinstance(main_program, Program):
        raise TypeError(f"{api}: program should be as Program type or None (Fluid's words; "
                        f"None is the default program), got {type(main_program).__name__}")
    return main_program


def _select(program: Program, vars: Iterable[Variable | str] | None,
            predicate: Callable[[Variable], bool] | None) -> list[str]:
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
              filename: str | None = None) -> bytes | None:
    """Write the chosen variables' values from the global scope under ``dirname``: one file
    per variable (named as the variable), or all in ``filename`` sorted by name. With
    ``dirname=None`` and no ``filename`` nothing is written: the bytes the combined file would
    hold are returned (Fluid 1.8's save to memory), for ``load_vars(dirname=None,
    filename=<those bytes>)``.

    Raises
    ------
    KeyError
        A chosen variable is not in the scope (run the startup program first).
    """
    names = _select(valid_program(main_program, "save_vars"), vars, predicate)
    if not names:  # as Fluid 1.8: nothing is written
        warnings.warn("no variable in your model, please ensure there are any variables in "
                      "your model to save", stacklevel=2)
        return None
    scope = _scope_of(executor)
    if dirname is None:
        # Fluid 1.8: no dirname and no filename save to memory (save_combine's
        # save_to_memory): the combined file's bytes are returned
        if filename is not None:
            raise ValueError("save_vars(dirname=None) saves to memory and takes no filename")
        buf = _io.BytesIO()
        for name in sorted(names):
            write_tensor(buf, to_host(scope.get(name)))
        return buf.getvalue()
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
    program = valid_program(main_program, "load_vars")
    names = _select(program, vars, predicate)
    scope = _scope_of(executor)
    block = program.global_block()
    if dirname is None and filename is None:
        raise ValueError("The directory path and params cannot be None at the same time: "
                         "load_vars(dirname=None) reads from memory, the bytes in filename")
    if not names:  # save_vars wrote nothing for none (a model without parameters)
        return
    if dirname is None:
        # Fluid 1.8's load_combine(model_from_memory=True): filename holds the bytes
        if not isinstance(filename, bytes | bytearray):
            raise TypeError("load_vars(dirname=None) reads from memory: filename must be the "
                            f"bytes save_vars(dirname=None) returned, not {type(filename)}")
        loaded = _read_combined(_io.BytesIO(bytes(filename)), names, "<memory>")
    elif filename is None:
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
            loaded = _read_combined(f, names, path)
    for name, value in loaded.items():
        if block.has_var(name):
            declared = block.var(name).shape
            if declared is not None and len(declared) == value.ndim and any(
                    d >= 0 and d != v for d, v in zip(declared, value.shape, strict=True)):
                raise ValueError(f"variable {name!r} is declared {list(declared)} but the "
                                 f"saved value is {list(value.shape)}")
        scope.set(name, _placed(executor, scope, name, value))


def _read_combined(f: Any, names: Sequence[str], path: str) -> dict[str, np.ndarray]:
    """The records of a combined file (``save_combine``), one per name in sorted order."""
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
    return loaded


def save_params(executor: Executor | None, dirname: str, main_program: Program | None = None,
                filename: str | None = None) -> bytes | None:
    """:func:`save_vars` of the trainable parameters (their bytes with ``dirname=None``)."""
    return save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def load_params(executor: Executor | None, dirname: str, main_program: Program | None = None,
                filename: str | None = None) -> None:
    """:func:`load_vars` of the trainable parameters."""
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def save_persistables(executor: Executor | None, dirname: str,
                      main_program: Program | None = None,
                      filename: str | None = None) -> bytes | None:
    """:func:`save_vars` of every persistable variable (parameters, optimizer state, learning
    rate, step counters); their bytes with ``dirname=None``.

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
    return save_vars(executor, dirname, program, predicate=is_persistable, filename=filename)


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


# -- parameters' values ------------------------------------------------------------------------

def is_belong_to_optimizer(var: Variable) -> bool:
    """A persistable variable that is neither a parameter nor a fed data variable: what
    ``fluid.save`` writes to ``.pdopt`` (Fluid 1.8's ``is_belong_to_optimizer``; Fluid's
    ``need_check_feed`` marks ``fluid.data`` variables, here ``is_data`` with it)."""
    if isinstance(var, Parameter) or (var.is_data and var.need_check_feed):
        return False
    return is_persistable(var)


def get_parameter_value(para: Parameter, executor: Executor | None) -> np.ndarray:
    """The value of parameter ``para`` in the global scope, as a numpy array (Fluid 1.8's
    ``get_parameter_value``, which runs an empty program fetching it).

    Raises
    ------
    TypeError
        ``para`` is not a Parameter (Fluid asserts).
    KeyError
        The parameter has no value in the scope (run the startup program first).
    """
    if not is_parameter(para):
        raise TypeError(f"get_parameter_value needs a Parameter, {getattr(para, 'name', para)!r}"
                        " is not one")
    scope = _scope_of(executor)
    if para.name not in scope:
        raise KeyError(f"parameter {para.name!r} has no value in the scope: run the startup "
                       "program first")
    return np.array(to_host(scope.get(para.name)))


def get_parameter_value_by_name(name: str, executor: Executor | None,
                                program: Program | None = None) -> np.ndarray:
    """:func:`get_parameter_value` of the parameter ``name`` of ``program``'s global block
    (default: the default main program), as Fluid 1.8.

    Raises
    ------
    ValueError
        The program has no variable ``name``.
    TypeError
        ``name`` is not a string, or names a variable that is not a Parameter.
    """
    if not isinstance(name, str):
        raise TypeError(f"get_parameter_value_by_name needs a name (str), not {type(name)}")
    program = program or default_main_program()
    block = program.global_block()
    if not block.has_var(name):
        raise ValueError(f"var {name!r} is not in this block")
    return get_parameter_value(block.var(name), executor)


