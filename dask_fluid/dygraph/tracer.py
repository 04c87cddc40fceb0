"""The dygraph tracer: runs each op as a layer appends it, and remembers what backward needs.

Inside ``fluid.dygraph.guard`` the blocks hand variable creation and ``append_op`` to the
:class:`Tracer` of the thread (``framework._dygraph_tracer``). It runs the op at once through
the executor's own step (the same kernels, attributes, LoD and random streams as a program
run), writes the values into the output variables, and, when an input needs a gradient,
records a :class:`Node`: the op and the values it read and wrote. Nodes are owned by the
variables they wrote and hold the variables they read, so a graph lives as long as its
results, as Fluid's; :mod:`.backward` turns the nodes behind a loss into a program.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .. import unique_name
from ..executor import (
    ExecutionError,
    Executor,
    RunInfo,
    Scope,
    has_run_hooks,
    notify_run_hooks,
)
from ..framework import (
    EMPTY_VAR,
    Operator,
    Program,
    _dygraph_tracer_guard,
    default_main_program,
)
from ..ops import registry
from .varbase import ParamBase, VarBase


@dataclass(eq=False)
class Node:
    """One traced op that a gradient may flow through."""

    seq: int
    op: Operator
    #: forward input name -> the variable read (gradients of leaves go to it)
    inputs: dict[str, VarBase]
    #: name -> the value read / written when the op ran (later writes do not change them)
    in_values: dict[str, Any]
    out_values: dict[str, Any]
    #: forward input name -> the node that wrote the value read (None for a leaf)
    in_nodes: dict[str, Node | None]
    lods: dict[str, tuple] = field(default_factory=dict)
    #: name -> weak reference to the output variable (its gradient is set too)
    outputs: dict[str, Any] = field(default_factory=dict)
    _attrs_key: str | None = None

    def attrs_key(self) -> str:
        """The op's attributes as text: part of a graph's shape (the backward plans' key)."""
        if self._attrs_key is None:
            self._attrs_key = repr(sorted(self.op.attrs.items()))
        return self._attrs_key


class Tracer:
    """Creates dygraph variables and runs ops (Fluid 1.8's ``core.Tracer``).

    Parameters
    ----------
    place : CPUPlace or CUDAPlace
        Where values live and kernels run.
    """

    def __init__(self, place: Any) -> None:
        self.place = place
        self.executor = Executor(place)
        #: a program without ops: its global block names the live dygraph variables (weakly,
        #: so a variable's value goes when the script drops it), for the steps' lookups
        self.program = Program()
        self.program._tracer = self
        self.block = self.program.global_block()
        self.block.vars = weakref.WeakValueDictionary()
        #: Fluid 1.8's ``_train_mode``: gradients are recorded; ``no_grad`` and
        #: ``Layer.eval()`` (``eval_mode``) clear it, as Fluid's
        self._train_mode = True
        self._seq = itertools.count()
        #: random streams, one per op type, as a program's scope keeps one per op
        self._rngs: dict[tuple, Any] = {}
        #: while ``TracedLayer.trace`` runs: the program every op is copied into
        self._recording: Program | None = None
        #: when the last training step ended (:meth:`step_done`)
        self._last_step: float | None = None
        #: the backward passes' grad programs by graph shape (:mod:`.backward`)
        self._backward_plans: collections.OrderedDict = collections.OrderedDict()

    @contextlib.contextmanager
    def no_grad(self) -> Iterator[None]:
        """Ops run inside record no gradient (``fluid.dygraph.no_grad``)."""
        saved, self._train_mode = self._train_mode, False
        try:
            yield
        finally:
            self._train_mode = saved

    def train_mode(self) -> None:
        """Record gradients again (``Layer.train()``)."""
        self._train_mode = True

    def eval_mode(self) -> None:
        """Record no gradients (``Layer.eval()``; the layers set ``is_test`` themselves)."""
        self._train_mode = False

    def step_done(self, loss: VarBase) -> None:
        """A training step (``Optimizer.minimize``) ended: the executor's run hooks hear it
        as a run of this tracer's program, fed the step's data (the input behind ``loss``
        with the most rows) and fetching the loss (what ``dask-fluid launch`` counts and
        shows)."""
        now = time.perf_counter()
        seconds, self._last_step = now - (self._last_step or now), now
        if not has_run_hooks():
            return
        data = self._batch_input(loss)
        feed = {} if data is None else {data.name: data._value}
        notify_run_hooks(RunInfo(self.program, feed, [loss.name], [loss.numpy()], seconds))

    @staticmethod
    def _batch_input(loss: VarBase) -> VarBase | None:
        """The batch behind ``loss``: of the data (leaves that are no parameters), the one
        with the most rows (a label has the rows too; a constant, ``scale_loss``'s, has
        one)."""
        todo, seen, best = [loss._node], set(), None
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            for name, var in node.inputs.items():
                before = node.in_nodes[name]
                if before is not None:
                    todo.append(before)
                elif not var.persistable and var.shape and (
                        best is None or var.shape[0] > best.shape[0]):
                    best = var
        return best

    # -- variables -------------------------------------------------------------------------
    def create_var(self, name: str | None = None, **kwargs: Any) -> VarBase:
        """A new variable (Fluid's dygraph ``Block.create_var``: never an existing one)."""
        name = name if name is not None else unique_name.generate("_generated_var")
        if name in self.block.vars:
            # a layer named its output after something alive (a second call of a layer with
            # a fixed name): a new variable of that name, as Fluid's VarBases are by object
            name = unique_name.generate(name)
        var = VarBase(self.block, name, **kwargs)
        self.block.vars[name] = var
        return var

    def create_parameter(self, name: str, shape: Any, **kwargs: Any) -> ParamBase:
        """A new parameter; the layer helper runs its initialiser next."""
        if name in self.block.vars:
            raise ValueError(f"parameter {name!r} already exists in this dygraph guard: give "
                             "each layer its own name")
        param = ParamBase(self.block, name, shape, **kwargs)
        self.block.vars[name] = param
        return param

    def wrap(self, value: Any, name: str | None = None, stop_gradient: bool = True) -> VarBase:
        """A leaf variable holding ``value`` (what ``to_variable`` makes)."""
        var = self.create_var(name=name or unique_name.generate("generated_var"),
                              stop_gradient=stop_gradient)
        var._value = value
        return var

    def _lookup(self, name: str, op_type: str) -> VarBase:
        var = self.block.vars.get(name)
        if var is None:
            raise ValueError(f"op {op_type!r} names {name!r}, which is not a variable of this "
                             "dygraph guard (a static program's variable, or one created "
                             "outside the guard): pass dygraph variables (to_variable)")
        return var

    # -- ops --------------------------------------------------------------------------------
    def trace_op(self, type: str, inputs: Any = None, outputs: Any = None,
                 attrs: Any = None) -> Operator:
        """Run op ``type`` now on its input variables' values and set its outputs'."""
        op = Operator(self.block, type, inputs, outputs, attrs)
        if any(k in op.attrs for k in ("sub_block", "sub_blocks")) or registry.get(type).host \
                and type not in _HOST_OK:
            raise NotImplementedError(
                f"op {type!r} is not supported in dygraph mode (dask_fluid runs control flow "
                "and RPC ops in static programs): use Python's if/for/while on the values, "
                "or build a Program")
        in_vars = {n: self._lookup(n, type) for n in op.input_arg_names if n != EMPTY_VAR}
        out_vars = {n: self._lookup(n, type) for n in op.output_arg_names if n != EMPTY_VAR}
        scope = Scope()
        scope._rngs = self._rngs
        for name, var in in_vars.items():
            if var._value is None:
                raise ValueError(f"op {type!r} reads {name!r}, which has no value yet: no op "
                                 "wrote it")
            scope.vars[name] = var._value
            if var._lod:
                scope.lods[name] = var._lod
        self.program.random_seed = default_main_program().random_seed
        step = self.executor._plan_step(self.program, self.block, 0, op)
        if step.rng_key is not None:  # one stream per op type across the guard's calls
            step.rng_key = ("dygraph", type)
        with self.executor._on_device():
            try:
                self.executor._run_steps(self.program, self.block, [step], scope)
            except ExecutionError as err:
                raise ExecutionError(str(err).replace("(#0 in block 0) ", "(dygraph) ")) \
                    from err.__cause__
        for name, var in out_vars.items():
            var._value = scope.vars.get(name)
            var._lod = scope.lods.get(name, ())
        if self._recording is not None:
            self._copy_into(self._recording, op, in_vars, out_vars)
        self._record(op, in_vars, out_vars, scope)
        return op

    @contextlib.contextmanager
    def recording(self) -> Iterator[Program]:
        """Copy every op run inside, with its variables, into a new program (what
        ``TracedLayer.trace`` saves); persistable variables are declared persistable."""
        saved, self._recording = self._recording, Program()
        try:
            yield self._recording
        finally:
            self._recording = saved

    @staticmethod
    def _copy_into(program: Program, op: Operator, in_vars: dict, out_vars: dict) -> None:
        block = program.global_block()
        with _dygraph_tracer_guard(None):
            for name, var in (*in_vars.items(), *out_vars.items()):
                if not block.has_var(name):
                    # the value's shape: a traced program runs with the batch it was traced with
                    # (Fluid 1.8's TracedLayer keeps the traced shapes too)
                    block.create_var(name=name, shape=var.shape, dtype=var.dtype,
                                     persistable=var.persistable, type=var.type,
                                     stop_gradient=var.stop_gradient)
            block.append_op(op.type, op.inputs, op.outputs, dict(op.attrs))

    def _record(self, op: Operator, in_vars: dict, out_vars: dict, scope: Scope) -> None:
        """Keep a node when a gradient may flow through ``op``; set its outputs'
        ``stop_gradient`` as Fluid 1.8's tracer (PassStopGradient)."""
        needs_grad = self._train_mode and any(not v.stop_gradient for v in in_vars.values())
        opdef = registry.get(op.type)
        node = None
        # a grad op without a gradient of its own is recorded all the same: a second
        # backward pass that reaches it raises (the static pass's rule), where leaving it
        # out would drop that part of the gradient silently
        if needs_grad and (opdef.grad is not None or op.type.endswith("_grad")):
            node = Node(next(self._seq), op,
                        inputs=dict(in_vars),
                        in_values={n: v._value for n, v in in_vars.items()},
                        out_values={n: scope.vars.get(n) for n in out_vars},
                        in_nodes={n: v._node for n, v in in_vars.items()},
                        lods={n: scope.lods[n] for n in scope.lods},
                        outputs={n: weakref.ref(v) for n, v in out_vars.items()})
        for var in out_vars.values():
            if not var._stop_gradient_given and not var.persistable:
                var.stop_gradient = node is None
            # a variable that stops gradients holds no graph (batch_norm's running mean,
            # rewritten every step, would otherwise chain every step's graph to the next)
            var._node = None if var.stop_gradient else node


#: host ops that run fine one at a time (no sub-block, no RPC); ``run_program`` runs a whole
#: static program, control flow included, as one op (dygraph_to_static.partial_program)
_HOST_OK = frozenset({"print", "py_func", "run_program", "run_program_grad"})
