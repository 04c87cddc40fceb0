"""A static program run as one dygraph op: Fluid 1.8's ``run_program`` op and ``PartialProgram``.

``@declarative`` turns a dygraph function into a static :class:`~dask_fluid.framework.Program`;
in dygraph mode that program then runs as ONE traced op, ``run_program``, so that
``loss.backward()`` flows through the whole program (control flow included:
``conditional_block``, ``while``, ``select_input``, tensor arrays, which the tracer refuses
op by op) into the dygraph parameters.

Design, as Fluid 1.8's ``partial_program.py`` and ``run_program_op``:

- :class:`PartialProgram` builds, per mode and once, a *plan*: a clone of the program (for
  eval, ``clone(for_test=True)``: dropout off, batch norm on its running statistics) with the
  program's backward pass appended (``fluid.gradients`` of the outputs with respect to the
  inputs and parameters, each output's gradient read from a data variable of its own). The
  forward ops come first in its global block, the grad ops after them.
- ``run_program`` (forward) puts the parameters' and inputs' values (and LoDs) into a fresh
  :class:`~dask_fluid.executor.Scope` and runs the plan's forward ops there. Its ``OutScope``
  output keeps that scope's values (a :class:`_RunState`): every intermediate, dropout's masks,
  the tapes of the ``while`` loops.
- ``run_program_grad`` puts the output gradients into a copy of the kept values and runs only
  the grad ops: the gradient sees the very forward values (the same dropout mask), nothing is
  recomputed. Each backward pass starts from the forward values again, so a graph
  differentiated twice gives the same gradients twice.

What differs from Fluid 1.8:

- The program travels as an id (attr ``program_id``) into a process-local registry of
  PartialProgram objects (held weakly), as ``py_func``'s functions do, not as a serialised
  ``global_block``; the kept scope holds its plan, so a graph outlives the PartialProgram.
- Fluid's ``Params`` share their tensors with the run's scope, so ops that write a
  persistable (batch norm's ``MeanOut``/``VarianceOut``) update the dygraph variables in
  place. Here arrays are values: after the run, :meth:`PartialProgram.__call__` gives every
  parameter and buffer the program rewrote its new value. Batch norm's running statistics
  are non-trainable parameters in dask_fluid's dygraph ``BatchNorm`` and static
  ``batch_norm`` (as in Fluid 1.8), so they go with the ``parameters``; other persistable
  variables the program reads (a ``create_global_var`` counter) go in ``buffers``, whose
  values are read before and written back after the run the same way, and which get no
  gradient. Both travel in the op's ``Params`` slot (parameters first), as in Fluid 2.0.
- An input that needs a gradient but that none reaches gets zeros (the traced op before it
  reads its gradient); a parameter none reaches gets none, as with dygraph ops.
- A program whose backward pass cannot be built (a ``while`` loop with ``is_test`` set,
  which keeps no steps: built so, or in eval mode's test program) still runs forward; the
  error is raised when a backward pass reaches its ``run_program``. Fluid 1.8's eval mode
  has no grad ops at all; here eval mode is differentiated where its test program can be (a
  frozen batch norm in a model that trains).
- The run goes through the executor's compiled steps of the plan's global block
  (``Executor._compiled``/``_run_steps``, as the tracer runs one op), forward slice and grad
  slice apart, compiled once per plan and executor.
"""

from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass, field
from typing import Any

from ... import unique_name
from ...backward import gradients
from ...executor import Executor, RunContext, Scope
from ...framework import (
    EMPTY_VAR,
    Parameter,
    Program,
    Variable,
    VarType,
    _dygraph_tracer,
    _dygraph_tracer_guard,
    grad_var_name,
)
from ...lod import LoDTensorArray
from ...ops.registry import LOD_KEY, array_module, register
from ..varbase import VarBase

__all__ = ["PartialProgram"]

#: the PartialProgram objects of this process by ``program_id`` (weakly: a graph that outlives
#: its PartialProgram keeps the plan it ran through its ``OutScope``)
_PROGRAMS: weakref.WeakValueDictionary[int, PartialProgram] = weakref.WeakValueDictionary()
_IDS = itertools.count()
#: the suffix of the data variables a plan reads its outputs' gradients from
_OUT_GRAD = "@RUN_PROGRAM_OUT_GRAD"


@dataclass
class _Plan:
    """One mode's program: the forward ops, then (where it could be built) the grad ops."""

    program: Program
    #: how many of the global block's ops are forward ops
    n_forward: int
    #: names fed to the run (inputs and output-gradient seeds): the compiled block's key
    feed_names: frozenset[str]
    #: the outputs' names, and per output the variable its gradient is fed as, or None (no
    #: gradient flows back through it)
    output_names: list[str]
    out_grads: list[str | None]
    #: per input / parameter: the variable holding its gradient, or None (none reaches it)
    in_grads: list[str | None]
    param_grads: list[str | None]
    #: why the backward pass could not be built (raised when a gradient reaches the op)
    error: Exception | None = None


@dataclass
class _RunState:
    """What ``run_program`` keeps for its gradient (its ``OutScope``): the plan and the
    values (and LoDs) of the scope the forward ops ran in."""

    plan: _Plan
    values: dict[str, Any]
    lods: dict[str, Any]
    rngs: dict
    compile_key: tuple
    #: the names of the persistables the run read (parameters, then buffers)
    persistables: list[str] = field(default_factory=list)


class PartialProgram:
    """A static program as a dygraph callable that backward passes go through (Fluid 1.8's
    ``PartialProgramLayer``).

    Parameters
    ----------
    program : Program
        Its global block holds the forward ops (control flow, tensor arrays, dropout and
        batch norm included).
    inputs : list of Variable
        The variables fed at each call (data variables), in call order.
    outputs : list of Variable
        The variables each call returns.
    parameters : list of Parameter
        The program's parameters, trainable or not (batch norm's running statistics are
        non-trainable parameters); the dygraph parameters passed at each call have the same
        names, in this order.
    buffers : list of Variable, optional
        Other persistable variables the program reads; dygraph variables of the same names
        are passed at each call, read before the run and given the values the run wrote.

    Raises
    ------
    TypeError
        An argument is not a list of the program's Variables (Parameters for
        ``parameters``).
    ValueError
        A variable is not in the program's global block, or the program reads a persistable
        variable that is neither a parameter nor a buffer.

    Examples
    --------
    >>> runner = PartialProgram(main, [x], [loss], main.all_parameters())  # doctest: +SKIP
    >>> with fluid.dygraph.guard():                                        # doctest: +SKIP
    ...     loss_var, = runner([to_variable(xv)], layer.parameters(), training=True)
    ...     loss_var.backward()
    """

    def __init__(self, program: Program, inputs: list[Variable], outputs: list[Variable],
                 parameters: list[Parameter], buffers: list[Variable] | None = None) -> None:
        if not isinstance(program, Program):
            raise TypeError(f"PartialProgram: program must be a Program, got "
                            f"{type(program).__name__}")
        self._program = program
        self._inputs = _program_vars(program, inputs, "inputs", Variable)
        self._outputs = _program_vars(program, outputs, "outputs", Variable)
        self._parameters = _program_vars(program, parameters, "parameters", Parameter)
        self._buffers = _program_vars(program, buffers or [], "buffers", Variable)
        _check_persistables(program, [*self._parameters, *self._buffers])
        #: what a run's Params slot holds, by name: the parameters, then the buffers
        self._persistable_names = [v.name for v in (*self._parameters, *self._buffers)]
        self._plans: dict[tuple[bool, tuple[bool, ...]], _Plan] = {}
        self.program_id = next(_IDS)
        _PROGRAMS[self.program_id] = self

    @property
    def program(self) -> Program:
        """The forward program (as given)."""
        return self._program

    def __call__(self, inputs: list[VarBase], parameters: list[VarBase], training: bool,
                 buffers: list[VarBase] | None = None) -> list[VarBase]:
        """Run the program on ``inputs`` as one traced ``run_program`` op.

        Parameters
        ----------
        inputs : list of VarBase
            One per program input, in order (their LoDs go with them).
        parameters : list of ParamBase
            The dygraph parameters, named and ordered as the program's ``parameters``.
        training : bool
            Train mode (the program as built) or eval mode (its ``clone(for_test=True)``:
            dropout off, batch norm on its running statistics): the op's ``is_test`` is
            ``not training``.
        buffers : list of VarBase, optional
            The dygraph variables of the program's ``buffers``, named and ordered as those.

        Returns
        -------
        list of VarBase
            One per program output. A backward pass through them reaches the inputs and
            parameters; the parameters and buffers the program rewrote (batch norm's running
            statistics) hold their new values.

        Raises
        ------
        RuntimeError
            Outside ``fluid.dygraph.guard()``.
        TypeError
            An argument is not a list of dygraph variables.
        ValueError
            A list has another length than the program's, or a parameter or buffer another
            name.
        """
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError("PartialProgram runs in dygraph mode only: call it inside "
                               "fluid.dygraph.guard()")
        inputs = _call_vars(inputs, self._inputs, "inputs", by_name=False)
        params = _call_vars(parameters, self._parameters, "parameters", by_name=True)
        held = _call_vars(buffers or [], self._buffers, "buffers", by_name=True)
        is_test = not training
        # gradients only for the inputs that need one (a conv's input gradient is costly)
        needs = [not v.stop_gradient for v in inputs]
        self._plan(is_test, tuple(needs))  # built outside the trace: its ops go into its program
        outs = [tracer.create_var(name=v.name) for v in self._outputs]
        out_scope = tracer.create_var(name=unique_name.generate("program_out_scope"),
                                      stop_gradient=True)
        tracer.trace_op("run_program", {"X": inputs, "Params": params + held},
                        {"Out": outs, "OutScope": [out_scope]},
                        {"program_id": self.program_id, "is_test": is_test,
                         "input_needs_grad": needs})
        state: _RunState = out_scope._value
        # Fluid's Params share their tensors with the run: what it rewrote is their new value
        for var, name in zip(params + held, state.persistables, strict=True):
            value = state.values.get(name)
            if value is not None and value is not var._value:
                var._value = value
        return outs

    # -- plans ------------------------------------------------------------------------------
    def _plan(self, is_test: bool, needs: tuple[bool, ...]) -> _Plan:
        """The plan of a mode and of the inputs that need gradients, built the first time
        they run."""
        plan = self._plans.get((is_test, needs))
        if plan is None:
            with _dygraph_tracer_guard(None):  # a static program is built
                plan = self._plans[is_test, needs] = self._build_plan(is_test, needs)
        return plan

    def _build_plan(self, is_test: bool, needs: tuple[bool, ...]) -> _Plan:
        program = self._program.clone(for_test=is_test)
        block = program.global_block()
        n_forward = len(block.ops)
        inputs = [block.var(v.name) for v in self._inputs]
        params = [block.var(p.name) for p in self._parameters]
        targets = [block.var(v.name) for v in self._outputs]
        feeds = [v.name for v in inputs]
        out_grads: list[str | None] = [None] * len(targets)
        in_grads: list[str | None] = [None] * len(inputs)
        param_grads: list[str | None] = [None] * len(params)
        error = None
        # the inputs' gradients are built for the caller's variables that need one (a data
        # layer stops gradients by default, a dygraph input may not)
        for var, need in zip(inputs, needs, strict=True):
            var.stop_gradient = not (need and _differentiable(var))
        wanted = [k for k, v in enumerate(targets) if _differentiable(v)]
        if wanted:
            seeds = []
            for k in wanted:
                target = targets[k]
                out_grads[k] = unique_name.generate(target.name + _OUT_GRAD)
                seeds.append(block.create_var(name=out_grads[k], shape=target.shape,
                                              dtype=target.dtype, stop_gradient=True))
            try:
                grads = gradients([targets[k] for k in wanted], inputs + params,
                                  target_gradients=seeds)
            except NotImplementedError as err:
                # forward only: the backward pass raises this when it reaches the op
                program = self._program.clone(for_test=is_test)
                out_grads = [None] * len(targets)
                # kept without its traceback: its frames would keep the caller's layers alive
                error = NotImplementedError(str(err))
            else:
                names = [None if g is None else g.name for g in grads]
                in_grads, param_grads = names[:len(inputs)], names[len(inputs):]
                feeds.extend(n for n in out_grads if n is not None)
        return _Plan(program, n_forward, frozenset(feeds), [v.name for v in targets], out_grads,
                     in_grads, param_grads, error)


def _program_vars(program: Program, items: Any, what: str, kind: type) -> list:
    """``items`` checked: a list of ``kind`` of ``program``'s global block."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"PartialProgram: {what} must be a list, got {type(items).__name__}")
    block = program.global_block()
    for item in items:
        if not isinstance(item, kind):
            raise TypeError(f"PartialProgram: {what} must be {kind.__name__}s of the program, "
                            f"got {type(item).__name__}")
        if not block.has_var(item.name):
            raise ValueError(f"PartialProgram: {what} names {item.name!r}, which is not a "
                             "variable of the program's global block")
    return list(items)


def _check_persistables(program: Program, given: list[Variable]) -> None:
    """Refuse a program that reads a persistable variable the caller does not pass: its run
    scope holds only what each call gives."""
    known = {v.name for v in given}
    written: set[str] = set()
    missing = []
    for op in program.global_block().ops:
        for name in _reads(program, op):
            var = program.global_block()._find_var_recursive(name)
            if (var is not None and var.persistable and name not in known
                    and name not in written and name not in missing):
                missing.append(name)
        written.update(op.output_arg_names)
    if missing:
        raise ValueError(f"PartialProgram: the program reads the persistable variables "
                         f"{missing}, which are neither in parameters nor in buffers: pass "
                         "them (Parameters in parameters, the others in buffers)")


def _reads(program: Program, op: Any) -> list[str]:
    """The names ``op`` reads, those of the ops in the blocks it runs included."""
    names = [n for n in op.input_arg_names if n != EMPTY_VAR]
    if "sub_block" in op.attrs:
        for inner in program.block(op.attrs["sub_block"]).ops:
            names.extend(_reads(program, inner))
    return names


def _differentiable(var: Variable) -> bool:
    """Whether gradients are built for ``var``: a float tensor."""
    return var.type == VarType.LOD_TENSOR and str(var.dtype).startswith("float")


def _call_vars(given: Any, expected: list[Variable], what: str, by_name: bool
               ) -> list[VarBase]:
    """The dygraph variables of a call checked against the program's: as many, and (for
    parameters and buffers) with the same names in the same order."""
    names = [v.name for v in expected]
    if not isinstance(given, (list, tuple)):
        raise TypeError(f"PartialProgram: {what} must be a list of dygraph variables, got "
                        f"{type(given).__name__}")
    if len(given) != len(expected):
        raise ValueError(f"PartialProgram: the program takes {len(expected)} {what} {names}, "
                         f"got {len(given)}")
    for k, (var, name) in enumerate(zip(given, names, strict=True)):
        if not isinstance(var, VarBase):
            raise TypeError(f"PartialProgram: {what}[{k}] must be a dygraph variable "
                            f"(VarBase), got {type(var).__name__}")
        if by_name and var.name != name:
            raise ValueError(f"PartialProgram: {what}[{k}] is {var.name!r}, the program "
                             f"expects {name!r}; pass the {what} named {names}, in that order")
    return list(given)


# -- the ops ------------------------------------------------------------------------------------
def _partial(program_id: int) -> PartialProgram:
    partial = _PROGRAMS.get(int(program_id))
    if partial is None:
        raise ValueError(f"run_program: program id {program_id} is not a PartialProgram of "
                         "this process: a run_program op runs in the process that built it")
    return partial


def _compiled_steps(executor: Executor, plan: _Plan, scope: Scope) -> list:
    block = plan.program.global_block()
    return executor._compiled(plan.program, block, plan.feed_names, scope).steps


def _run_program_grad_maker(op: Any) -> list[dict]:
    """``run_program_grad``: the gradients of the inputs and parameters from those of the
    outputs, through the kept scope."""
    xs, params = list(op.inputs.get("X", [])), list(op.inputs.get("Params", []))
    return [{"type": "run_program_grad",
             "inputs": {"X": xs, "Params": params, "OutScope": list(op.outputs["OutScope"]),
                        "Out@GRAD": [grad_var_name(n) for n in op.outputs["Out"]]},
             "outputs": {"X@GRAD": [grad_var_name(n) for n in xs],
                         "Params@GRAD": [grad_var_name(n) for n in params]},
             "attrs": {"program_id": op.attrs["program_id"], "is_test": op.attrs["is_test"],
                       "input_needs_grad": op.attrs["input_needs_grad"]}}]


@register("run_program", ("X", "Params"), ("Out", "OutScope"),
          {"program_id": -1, "is_test": False, "input_needs_grad": []},
          optional=("X", "Params"),
          grad=_run_program_grad_maker, host=True, lod="kernel")
def run_program(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Out = the program's outputs, run on X and Params in a scope of its own; OutScope keeps
    that scope for the gradient (module docstring)."""
    partial = _partial(attrs["program_id"])
    is_test = bool(attrs["is_test"])
    plan = partial._plan(is_test, tuple(bool(n) for n in attrs["input_needs_grad"]))
    xs, params = ins.get("X", []), ins.get("Params", [])
    persistables = partial._persistable_names
    if len(xs) != len(partial._inputs) or len(params) != len(persistables):
        raise ValueError(f"run_program: the program takes {len(partial._inputs)} X and "
                         f"{len(persistables)} Params, got {len(xs)} and {len(params)}")
    scope = Scope()
    # the random streams (dropout's) go on from call to call, one set per program, kept
    # where the caller keeps its own (the dygraph tracer's)
    scope._rngs = ctx.scope._rngs.setdefault(("run_program", partial.program_id), {})
    scope._compile_key = ("run_program", partial.program_id, is_test)
    lods = attrs["_lods"]
    for name, value in zip(persistables, params, strict=True):
        scope.vars[name] = value
    for var, value, lod in zip(partial._inputs, xs, lods.get("X", []), strict=True):
        scope.vars[var.name] = value
        if lod:
            scope.lods[var.name] = lod
    executor = ctx.executor
    steps = _compiled_steps(executor, plan, scope)
    executor._run_steps(plan.program, plan.program.global_block(), steps[:plan.n_forward],
                        scope)
    values, out_lods = [], []
    for var in partial._outputs:
        if var.name not in scope.vars or scope.vars[var.name] is None:
            raise ValueError(f"run_program: output {var.name!r} was not computed by the "
                             "program (written only in a branch that did not run?)")
        values.append(scope.vars[var.name])
        out_lods.append(scope.lods.get(var.name) or None)
    state = _RunState(plan, scope.vars, scope.lods, scope._rngs, scope._compile_key,
                      persistables)
    return {"Out": values, "OutScope": [state],
            LOD_KEY: {"Out": out_lods, "OutScope": [None]}}


@register("run_program_grad", ("X", "Params", "OutScope", "Out@GRAD"),
          ("X@GRAD", "Params@GRAD"),
          {"program_id": -1, "is_test": False, "input_needs_grad": []},
          optional=("X", "Params", "Out@GRAD"), host=True, lod="none")
def run_program_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """X@GRAD, Params@GRAD: the plan's grad ops run on the kept forward values and Out@GRAD
    (zeros for an output no gradient reached). An input none reaches gets zeros, a parameter
    none (module docstring)."""
    state = ins["OutScope"][0]
    if not isinstance(state, _RunState):
        raise ValueError("run_program_grad: OutScope holds no forward run of run_program")
    plan = state.plan
    if plan.error is not None:
        err = NotImplementedError(f"the backward pass through run_program: {plan.error}")
        err._dask_fluid_passthrough = True  # the executor re-raises it as is
        raise err from plan.error
    scope = Scope()
    # a copy: each backward pass starts from the forward values (grad ops that add into a
    # gradient array in place would otherwise add the last pass's gradients again)
    scope.vars, scope.lods = dict(state.values), dict(state.lods)
    scope._rngs, scope._compile_key = state.rngs, state.compile_key
    for name, seed, given in zip(plan.output_names, plan.out_grads, ins["Out@GRAD"],
                                 strict=True):
        if seed is None:
            continue
        if given is None:  # no gradient came to this output
            value = scope.vars[name]
            given = array_module(value).zeros_like(value)
        scope.vars[seed] = given
        scope.lods.pop(seed, None)
    executor = ctx.executor
    steps = _compiled_steps(executor, plan, scope)
    executor._run_steps(plan.program, plan.program.global_block(), steps[plan.n_forward:],
                        scope)
    x_grads = []
    for value, gname in zip(ins.get("X", []), plan.in_grads, strict=False):
        grad = None if gname is None else scope.vars.get(gname)
        if grad is None and value is not None and not isinstance(value, LoDTensorArray):
            # the op before reads this input's gradient: zeros where none reached it
            grad = array_module(value).zeros_like(value)
        x_grads.append(grad)
    param_grads = [None if gname is None else scope.vars.get(gname)
                   for gname in plan.param_grads]
    n_params = len(ins.get("Params", []))
    param_grads = (param_grads + [None] * n_params)[:n_params]  # buffers: no gradient
    return {"X@GRAD": x_grads, "Params@GRAD": param_grads}
