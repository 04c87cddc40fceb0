"""Inference models (Fluid 1.8's ``save_inference_model``, ``load_inference_model``,
``get_inference_program``): the pruned program as dask_fluid's JSON (``__model__``; not
Paddle's ProgramDesc protobuf, so the model file is for dask_fluid only) and the parameters in
Paddle's layout (:mod:`dask_fluid.var_io`). ``fluid.io`` re-exports them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from .executor import Executor
from .framework import Program, Variable, default_main_program
from .var_io import is_persistable, load_vars, save_persistables, save_vars, valid_program

#: the program's file in a saved inference model (Fluid's name)
MODEL_FILENAME = "__model__"


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
    given that file name. The targets may then be empty (Fluid's book saves a training program
    so), as the feeds may.

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
    program = valid_program(main_program, "save_inference_model")
    if any(op.type == "auc" for op in program.global_block().ops):
        warnings.warn("please ensure that you have set the auc states to zeros before saving "
                      "inference model", stacklevel=2)
    model_path = os.path.join(dirname, os.path.basename(model_filename or MODEL_FILENAME))
    if params_filename is not None:
        params_filename = os.path.basename(params_filename)
    if export_for_deployment:
        pruned = _inference_program(program, list(feeded_var_names), targets)
        unused = [n for n in feeded_var_names if not pruned.global_block().has_var(n)]
        if unused:  # Fluid 1.8 fails too: its feed op cannot find the pruned variable
            raise ValueError(f"save_inference_model: the feeds {unused} are not needed by the "
                             "target_vars; leave them out of feeded_var_names")
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
