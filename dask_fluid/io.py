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
    # Fluid 1.8's fluid.io has these too, outside its __all__ (fluid.io.<name> reaches them)
    "append_fetch_ops", "get_inference_program", "get_parameter_value",
    "get_parameter_value_by_name", "is_belong_to_optimizer", "prepend_feed_ops",
    # Fluid 1.8 keeps these two in fluid.contrib.utils.lookup_table_utils
    "load_persistables_for_increment", "load_persistables_for_inference",
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
    names = _select(main_program, vars, predicate)
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
    program = main_program or default_main_program()
    names = _select(program, vars, predicate)
    scope = _scope_of(executor)
    block = program.global_block()
    if dirname is None and filename is None:
        raise ValueError("The directory path and params cannot be None at the same time: "
                         "load_vars(dirname=None) reads from memory, the bytes in filename")
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


# -- inference models --------------------------------------------------------------------------

def _valid_program(main_program: Any) -> Program:
    """``main_program`` as a Program: None is the default main program, a CompiledProgram its
    program (with Fluid 1.8's warning), anything else a TypeError (``_get_valid_program``)."""
    if main_program is None:
        return default_main_program()
    if not isinstance(main_program, Program) and hasattr(main_program, "_program"):
        inner = main_program._program
        if not isinstance(inner, Program):
            raise TypeError("program should be as Program type or None")
        warnings.warn("The input is a CompiledProgram, this is not recommended.", stacklevel=3)
        return inner
    if not isinstance(main_program, Program):
        raise TypeError(f"program should be as Program type or None, not "
                        f"{type(main_program).__name__}")
    return main_program


def _inference_program(program: Program, feeds: Sequence[str], targets: Sequence[str]
                       ) -> Program:
    """``program`` for test, keeping only the ops the targets need."""
    return program.clone(for_test=True)._prune_with_input(feeds, targets)


def get_inference_program(target_vars: Any, main_program: Program | None = None) -> Program:
    """``main_program`` pruned to what ``target_vars`` need, for test (``is_test`` set, the
    backward and optimize ops gone), as Fluid's ``fluid.io.get_inference_program``
    (``main_program.prune(targets)`` then ``inference_optimize``; Fluid 1.5's io.py, dropped
    from fluid.io by 1.8). An :class:`~dask_fluid.evaluator.Evaluator` among the targets
    stands for its states and metrics. Nothing is fed: every op a target needs is kept.
    """
    from .evaluator import Evaluator  # noqa: PLC0415  (evaluator imports layers)

    program = main_program or default_main_program()
    if not isinstance(target_vars, list):
        target_vars = [target_vars]
    targets: list[Any] = []
    for var in target_vars:
        if isinstance(var, Evaluator):
            targets.extend(var.states)
            targets.extend(var.metrics)
        else:
            targets.append(var)
    return _inference_program(program, [], targets)


def prepend_feed_ops(inference_program: Program, feed_target_names: Sequence[str],
                     feed_holder_name: str = "feed") -> None:
    """Fluid 1.8's ``prepend_feed_ops``: not available.

    Raises
    ------
    NotImplementedError
        Always (unless ``feed_target_names`` is empty, where Fluid adds nothing either):
        dask_fluid's executor feeds the scope directly, without a ``feed`` holder variable,
        and registers no ``feed`` op to read one; :func:`save_inference_model` records the
        feed names in its model file instead.
    """
    if len(feed_target_names) == 0:
        return
    raise NotImplementedError(
        "prepend_feed_ops is not implemented in dask_fluid: its executor feeds variables "
        "directly (no 'feed' holder variable, no 'feed' op); save_inference_model records the "
        "feed names in the model file instead")


def append_fetch_ops(inference_program: Program, fetch_target_names: Sequence[str],
                     fetch_holder_name: str = "fetch") -> None:
    """Fluid 1.8's ``append_fetch_ops``: not available.

    Raises
    ------
    NotImplementedError
        Always: dask_fluid's executor fetches from the scope directly, without a ``fetch``
        holder variable, and registers no ``fetch`` op; :func:`save_inference_model` records
        the fetch names in its model file instead.
    """
    raise NotImplementedError(
        "append_fetch_ops is not implemented in dask_fluid: its executor fetches variables "
        "directly (no 'fetch' holder variable, no 'fetch' op); save_inference_model records "
        "the fetch names in the model file instead")


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

    As Fluid 1.8: only the base names of ``model_filename`` and ``params_filename`` are used
    (files go under ``dirname``); ``program_only`` warns that no parameter is saved; a program
    holding an ``auc`` op warns to reset the auc states; a CompiledProgram is taken for its
    program, with a warning.

    With ``export_for_deployment=False``, as Fluid 1.8: nothing is pruned; the whole program
    goes to ``<model_filename>.main_program`` and every persistable variable of it (optimizer
    state too) is saved, for further training. ``load_inference_model`` reads it back when
    given that file name.

    Raises
    ------
    ValueError
        (with ``export_for_deployment``) ``feeded_var_names`` is not a list of names, or
        ``target_vars`` is not a non-empty list of Variables.
    TypeError
        ``main_program`` is not a Program (nor a CompiledProgram, nor None).
    """
    if isinstance(feeded_var_names, str):
        feeded_var_names = [feeded_var_names]
    elif export_for_deployment and len(feeded_var_names) > 0 and not all(
            isinstance(n, str) for n in feeded_var_names):
        raise ValueError("'feed_var_names' should be a list of str.")
    if isinstance(target_vars, Variable):
        target_vars = [target_vars]
    elif export_for_deployment and not (
            target_vars and all(isinstance(v, Variable) for v in target_vars)):
        raise ValueError("'target_vars' should be a list of Variable.")
    targets = [t.name if isinstance(t, Variable) else str(t) for t in target_vars]
    if not targets:
        raise ValueError("save_inference_model needs at least one target variable")
    program = _valid_program(main_program)
    if any(op.type == "auc" for op in program.global_block().ops):
        warnings.warn("please ensure that you have set the auc states to zeros before saving "
                      "inference model", stacklevel=2)
    model_path = os.path.join(dirname, os.path.basename(model_filename or MODEL_FILENAME))
    if params_filename is not None:
        params_filename = os.path.basename(params_filename)
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
    if program_only:
        warnings.warn("save_inference_model specified the param `program_only` to True, It "
                      "will not save params of Program.", stacklevel=2)
        return targets
    if not export_for_deployment:
        save_persistables(executor, dirname, program, filename=params_filename)
    else:
        used = {n for op in pruned.global_block().ops for n in op.input_arg_names}
        names = [v.name for v in pruned.list_vars() if is_persistable(v) and v.name in used]
        save_vars(executor, dirname, pruned, vars=names, filename=params_filename)
    return targets


def _read_model(source: str | bytes, where: str) -> dict:
    """The document :func:`save_inference_model` wrote, from its text (or bytes)."""
    import json  # noqa: PLC0415

    try:
        doc = json.loads(source)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"{where} is not a dask_fluid inference model (Paddle's ProgramDesc "
                         "protobuf is not read; its parameter files are, with load_vars)")\
            from None
    if not isinstance(doc, dict) or doc.get("format") != "dask_fluid.inference/1":
        raise ValueError(f"{where} is not a dask_fluid inference model")
    return doc


def _endpoints_replacement(program: Program, endpoints: Sequence[str]) -> Program:
    """Every global-block op with an ``epmap`` now names ``endpoints`` (Fluid 1.8's
    ``_endpoints_replacement``: an inference program with a distributed lookup table
    prefetches from the pservers serving it now)."""
    for op in program.global_block().ops:
        if op.has_attr("epmap"):
            op._set_attr("epmap", list(endpoints))
    return program


def load_inference_model(dirname: str | None, executor: Executor | None,
                         model_filename: str | bytes | None = None,
                         params_filename: str | bytes | None = None,
                         pserver_endpoints: Sequence[str] | None = None
                         ) -> tuple[Program, list[str], list]:
    """The program, the feed names and the fetch variables :func:`save_inference_model`
    wrote; its parameters are loaded into the global scope.

    As Fluid 1.8: only the base names of ``model_filename`` and ``params_filename`` are used;
    with ``dirname=None`` the model is read from memory: ``model_filename`` is the model
    file's content and ``params_filename`` (required) the bytes of the combined parameters
    (``save_vars(dirname=None)``). ``pserver_endpoints`` replaces the ``epmap`` of every op
    that has one (the prefetch of a distributed lookup table).

    Raises
    ------
    ValueError
        ``dirname`` is not a directory; ``dirname=None`` without ``params_filename``; the model
        file was not written by dask_fluid (e.g. Paddle's ProgramDesc protobuf).
    """
    if dirname is not None:
        if not os.path.isdir(dirname):
            raise ValueError(f"There is no directory named {dirname!r}")
        path = os.path.join(dirname, os.path.basename(model_filename or MODEL_FILENAME))
        if params_filename is not None:
            params_filename = os.path.basename(params_filename)
        with open(path, "rb") as f:
            doc = _read_model(f.read(), path)
    else:
        if params_filename is None:
            raise ValueError("The path of params cannot be None when the directory path is "
                             "None.")
        if model_filename is None:
            raise ValueError("load_inference_model(dirname=None) reads the model from memory: "
                             "model_filename must hold the model file's content")
        doc = _read_model(model_filename, "the model given in memory")
    program = Program._from_dict(doc["program"])
    used = {n for op in program.global_block().ops for n in op.input_arg_names}
    names = [v.name for v in program.list_vars() if is_persistable(v) and v.name in used]
    load_vars(executor, dirname, program, vars=names, filename=params_filename)
    if pserver_endpoints:
        program = _endpoints_replacement(program, pserver_endpoints)
    block = program.global_block()
    return program, list(doc["feed"]), [block.var(n) for n in doc["fetch"]]


# -- parameters' values, the distributed lookup table -------------------------------------------

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


LOOKUP_TABLE_DIR = "__lookup_table__"


def _read_selected_rows(path: str) -> tuple[np.ndarray, np.ndarray, int]:
    """``(rows, value, height)`` of a file in Paddle's SelectedRows layout (what a pserver's
    ``save`` of its lookup table writes: uint32 version 0, uint64 row count, the int64 rows,
    int64 height, then the value as a Tensor record)."""
    import struct  # noqa: PLC0415

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 12:
        raise ValueError(f"{path} is not a SelectedRows file (only {len(data)} bytes)")
    version, count = struct.unpack_from("<IQ", data, 0)
    end = 12 + 8 * count + 8
    if version != 0 or len(data) < end:
        raise ValueError(f"{path} is not a SelectedRows file of version 0")
    rows = np.frombuffer(data, "<i8", count, 12).astype(np.int64)
    (height,) = struct.unpack_from("<q", data, end - 8)
    # the value is a Tensor record: a LoDTensor record without its version and LoD count
    value = read_tensor(_io.BytesIO(b"\0" * 12 + data[end:]))[0]
    if value.shape[:1] != (count,):
        raise ValueError(f"{path} lists {count} rows but holds {value.shape[0]} values")
    return rows, value, int(height)


def write_selected_rows(f: Any, rows: Sequence[int], value: Any, height: int) -> None:
    """Write a SelectedRows record in Paddle's layout (see :func:`_read_selected_rows`)."""
    import struct  # noqa: PLC0415

    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    value = np.asarray(value)
    if value.shape[:1] != rows.shape:
        raise ValueError(f"{rows.size} rows but {value.shape[:1]} values")
    f.write(struct.pack("<IQ", 0, rows.size))
    f.write(rows.astype("<i8").tobytes())
    f.write(struct.pack("<q", int(height)))
    buf = _io.BytesIO()
    write_tensor(buf, value)
    f.write(buf.getvalue()[12:])


def load_persistables_for_increment(dirname: str, executor: Executor | None,
                                    program: Program, lookup_table_var: str,
                                    lookup_table_var_path: str) -> None:
    """Load a pserver program for incremental training with a distributed lookup table
    (Fluid 1.8's ``fluid.contrib.utils.lookup_table_utils.load_persistables_for_increment``):
    the parameter blocks and optimizer state this pserver holds, cut from the whole
    variables' files under ``dirname`` (as :func:`load_persistables`), then this pserver's
    part of the table from ``lookup_table_var_path``, a SelectedRows file (global ids).

    dask_fluid keeps a pserver's part of the table dense, the ids ``id % P == k`` of pserver
    ``k`` at row ``id // P`` (:mod:`dask_fluid.transpiler.lookup_table`): the file's rows are
    placed there, the rows it lacks are zero.

    Raises
    ------
    ValueError
        ``dirname`` is not a directory, ``lookup_table_var_path`` does not exist, ``program``
        is not a transpiled pserver program serving the table ``lookup_table_var``, or the file
        holds ids of another pserver's part or rows that do not fit.
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"There is no directory named {dirname!r}")
    if not os.path.exists(lookup_table_var_path):
        raise ValueError(f"There is no file named {lookup_table_var_path!r}")
    if not isinstance(program, Program):
        raise ValueError("program must be an instance of fluid.Program")
    overview = getattr(program, "_parameters_on_pservers", None)
    if not getattr(program, "_is_distributed", False) or overview is None:
        raise ValueError("load_persistables_for_increment needs a pserver program "
                         "(DistributeTranspiler.get_pserver_program)")
    shard = None
    for op in program.global_block().ops:
        entry = op.attrs.get("lookup_table_shard") if op.type == "listen_and_serv" else None
        if entry:
            name, _grad, parts, rows = entry
            shard = (str(name), int(parts), int(op.attrs.get("pserver_id", 0)), int(rows))
    if shard is None or shard[0] != lookup_table_var:
        raise ValueError(f"program is not a pserver program serving the distributed lookup "
                         f"table {lookup_table_var!r} (it serves "
                         f"{shard[0] if shard else 'none'!r})")
    _load_distributed_persistables(executor, dirname, program, overview)
    name, parts, index, shard_rows = shard
    ids, value, _height = _read_selected_rows(lookup_table_var_path)
    if ids.size and ((ids % parts != index).any() or (ids // parts >= shard_rows).any()
                     or (ids < 0).any()):
        raise ValueError(f"{lookup_table_var_path} holds ids that pserver {index} of {parts} "
                         f"does not serve (its ids are id % {parts} == {index}, below "
                         f"{parts * shard_rows})")
    block = program.global_block()
    declared = block.var(name).shape if block.has_var(name) else None
    width = tuple(value.shape[1:])
    if declared is not None and tuple(declared[1:]) != width:
        raise ValueError(f"table {name!r} rows are {list(declared[1:])} in the program but "
                         f"{list(width)} in {lookup_table_var_path}")
    dense = np.zeros((shard_rows, *width), dtype=value.dtype)
    dense[ids // parts] = value
    scope = _scope_of(executor)
    scope.set(name, _placed(executor, scope, name, dense))


def load_persistables_for_inference(dirname: str, executor: Executor | None,
                                    program: Program | None,
                                    lookup_table_var_name: str) -> Program:
    """Load a model trained with a distributed lookup table for local inference (Fluid 1.8's
    ``fluid.contrib.utils.lookup_table_utils.load_persistables_for_inference``).

    The persistable variables (not gradients, pserver blocks ``.block``/``.trainer_``,
    ``tmp_`` variables, nor the table) are loaded from their files under ``dirname``; the
    pservers' table files ``<dirname>/__lookup_table__/<table>_<i>`` (SelectedRows, global
    ids) are merged (``merge_sparse_lookup_table``), written to
    ``__lookup_table__/<table>`` and set in the scope as the dense ``[height, ...]`` table a
    local ``lookup_table`` reads (rows no file holds are zero). ``program`` None reads
    ``<dirname>/__model__`` (:func:`save_inference_model`'s file). Returns the program.

    Raises
    ------
    ValueError
        ``dirname`` is not a directory, ``program`` is not a Program, there is no table file,
        or the parts disagree (row width, an id twice, an id beyond the table).
    """
    if not os.path.isdir(dirname):
        raise ValueError(f"There is no directory named {dirname!r}")
    if program is not None:
        if not isinstance(program, Program):
            raise ValueError("program must be an instance of fluid.Program")
    else:
        path = os.path.join(dirname, MODEL_FILENAME)
        with open(path, "rb") as f:
            program = Program._from_dict(_read_model(f.read(), path)["program"])

    def checkpoint_var(var: Variable) -> bool:
        # Fluid's _is_checkpoint_var: what a checkpoint holds, the table apart
        return (var.type not in (VarType.RAW,) and "@GRAD" not in var.name
                and ".trainer_" not in var.name and ".block" not in var.name
                and "tmp_" not in var.name and var.name != lookup_table_var_name
                and bool(var.persistable))

    load_vars(executor, dirname, program, predicate=checkpoint_var)
    table_dir = os.path.join(dirname, LOOKUP_TABLE_DIR)
    if not os.path.isdir(table_dir):
        raise ValueError(f"There is no directory named {table_dir!r} (the pservers' table "
                         "files)")
    # Fluid counts the files whose name holds the table's name and reads <table>_0 .. _{n-1};
    # only the numbered parts are counted here, so a merged file of an earlier run is skipped
    prefix = lookup_table_var_name + "_"
    count = sum(1 for n in os.listdir(table_dir)
                if n.startswith(prefix) and n[len(prefix):].isdigit())
    if count == 0:
        raise ValueError(f"{table_dir} holds no part of table {lookup_table_var_name!r} "
                         f"({prefix}0, ...)")
    parts = [_read_selected_rows(os.path.join(table_dir, f"{prefix}{i}")) for i in range(count)]
    widths = {tuple(v.shape[1:]) for _, v, _ in parts}
    if len(widths) != 1:
        raise ValueError(f"the parts of table {lookup_table_var_name!r} have rows of "
                         f"different shapes {sorted(widths)}")
    rows = np.concatenate([r for r, _, _ in parts])
    value = np.concatenate([v for _, v, _ in parts])
    height = max(h for _, _, h in parts)
    if np.unique(rows).size != rows.size:
        raise ValueError(f"the parts of table {lookup_table_var_name!r} hold an id twice")
    with open(os.path.join(table_dir, lookup_table_var_name), "wb") as f:
        write_selected_rows(f, rows, value, height)
    block = program.global_block()
    declared = block.var(lookup_table_var_name).shape if block.has_var(
        lookup_table_var_name) else None
    total = declared[0] if declared is not None and declared[0] >= 0 else height
    if rows.size and (rows.min() < 0 or rows.max() >= total):
        raise ValueError(f"table {lookup_table_var_name!r} has {total} rows, its parts hold "
                         f"ids up to {int(rows.max())}")
    dense = np.zeros((total, *value.shape[1:]), dtype=value.dtype)
    dense[rows] = value
    scope = _scope_of(executor)
    scope.set(lookup_table_var_name, _placed(executor, scope, lookup_table_var_name, dense))
    return program


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
