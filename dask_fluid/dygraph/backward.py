"""``loss.backward()`` in dygraph mode: the traced ops behind a loss, differentiated as a program.

The nodes the loss depends on become a forward program (each value under its own name: a
variable an op rewrote gets a new name per write), the static backward pass
(:func:`dask_fluid.backward.grad_descs`, the same grad makers, renaming and summing rules as
``append_backward``) gives its grad ops, and the executor runs them on the recorded values.
The gradients of the leaves (parameters, and inputs with ``stop_gradient=False``) add up in
the variables until ``clear_gradient``; the traced graph stays as long as its variables do.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import Any

from ..backward import create_grad_vars, grad_descs
from ..executor import ExecutionError, Executor, Scope
from ..framework import EMPTY_VAR, GRAD_SUFFIX, Block, Program, VarType, _dygraph_tracer_guard
from ..lod import LoDTensorArray
from ..ops.registry import array_module
from ..ops.selected_rows import SelectedRows
from .tracer import Node
from .varbase import VarBase, install_backward, var_list


class BackwardStrategy:
    """Fluid 1.8's ``fluid.dygraph.BackwardStrategy``.

    ``sort_sum_gradient`` asks Fluid to sum a variable's gradient parts in a fixed order;
    here they are always summed in the order of the ops that produced them (the static
    backward pass's rule), so both settings give the same, reproducible sums.
    """

    def __init__(self) -> None:
        self.sort_sum_gradient = False


def run_backward(loss: VarBase, backward_strategy: BackwardStrategy | None = None) -> None:
    """Differentiate ``loss`` and add the gradients into the variables it depends on.

    A ``loss`` that depends on nothing that needs a gradient (computed under ``no_grad``,
    or only from variables with ``stop_gradient=True``), or whose ``stop_gradient`` was set
    after it was computed, is skipped: no gradient changes (Fluid 1.8's
    ``BasicEngine::Init``: "Skip auto grad since there is no grad op for var or loss is
    stop_gradient=True").

    Raises
    ------
    TypeError
        ``backward_strategy`` is not a BackwardStrategy.
    """
    if backward_strategy is not None and not isinstance(backward_strategy, BackwardStrategy):
        raise TypeError(f"backward_strategy must be a fluid.dygraph.BackwardStrategy, got "
                        f"{type(backward_strategy).__name__}")
    if loss._node is None or loss.stop_gradient:
        return
    forward, grads = _differentiate([loss], [None], set())
    for name, var in forward.leaves.items():
        grad = grads.get(name + GRAD_SUFFIX)
        if not var.stop_gradient:
            if grad is not None:
                var._add_grad(grad)
        elif var._node is not None and var._grad is None:
            # computed by an op that took gradients and stopped after it: Fluid 1.8 made its
            # gradient when the op ran, and its engine sets a stopped one to zeros ("Set
            # StopGradient Grad ... as zero"); nothing flows on from it
            var._grad = _zeros_of(forward.values[name])
    for name, ref in forward.outputs.items():
        var = ref()
        if var is None:
            continue
        grad = grads.get(name + GRAD_SUFFIX)
        if grad is None and name in forward.zero_grads:
            # a gradient a grad op reads that no op produced (the unused part of a split):
            # Fluid 1.8's engine fills it with zeros, and the variable's gradient is that
            grad = _zeros_of(forward.values[name])
        if grad is not None:
            var._grad = grad  # an intermediate value: its gradient in this pass


def _zeros_of(value: Any) -> Any:
    """Zeros of ``value``'s shape and dtype, on its device."""
    return array_module(value).zeros(value.shape, dtype=value.dtype)


install_backward(run_backward)  # loss.backward()


def grad(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Any = None,
         create_graph: bool = False, only_inputs: bool = True, allow_unused: bool = False,
         no_grad_vars: Any = None, backward_strategy: BackwardStrategy | None = None) -> list:
    """The gradients of ``outputs`` with respect to ``inputs`` (Fluid 1.8's
    ``fluid.dygraph.grad``), returned as new variables; the variables' own gradients
    (``.gradient()``) are left as they are.

    Parameters
    ----------
    outputs : VarBase or list of VarBase
    inputs : VarBase or list of VarBase
    grad_outputs : VarBase, list of (VarBase or None), optional
        The gradient each output starts from; ones (its shape) where None.
    retain_graph : bool, optional
        Accepted: the traced graph lives as long as its variables either way.
    create_graph : bool
        Run the grad ops through the tracer, so that the gradients returned are themselves
        differentiable (a gradient penalty's ``backward``), through the ops that have a
        second-order gradient (``docs/ops.md``); the others raise NotImplementedError when the
        second pass reaches them, as in static programs.
    only_inputs : bool
        Must be True, as in Fluid 1.8.
    allow_unused : bool
        An input the outputs do not depend on gives None instead of an error.
    no_grad_vars : VarBase or list of VarBase, optional
        Variables no gradient flows through.

    Returns
    -------
    list of VarBase or None
        One per input.
    """
    if not only_inputs:
        raise AssertionError("only_inputs=False is not supported yet")  # Fluid 1.8's words
    outs = var_list(outputs, "outputs", "grad")
    ins = var_list(inputs, "inputs", "grad")
    seeds = [None] * len(outs) if grad_outputs is None else (
        list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [grad_outputs])
    if len(seeds) != len(outs):
        raise ValueError(f"grad: {len(seeds)} grad_outputs for {len(outs)} outputs")
    for out, seed in zip(outs, seeds, strict=True):
        if seed is not None and (not isinstance(seed, VarBase) or seed.shape != out.shape):
            raise ValueError(f"grad: the grad_output of {out.name!r} must be a VarBase of "
                             f"shape {list(out.shape)}")
    blocked = {v.name for v in var_list(no_grad_vars, "no_grad_vars", "grad")} if no_grad_vars \
        is not None else set()
    live = [(o, s) for o, s in zip(outs, seeds, strict=True) if o._node is not None]
    results: list = [None] * len(ins)
    if live:
        forward, grads = _differentiate([o for o, _ in live], [s for _, s in live], blocked,
                                        create_graph=bool(create_graph))
        by_var = {id(v): n for n, v in forward.leaves.items()}
        for name, ref in forward.outputs.items():
            var = ref()
            if var is not None:
                by_var.setdefault(id(var), name)
        for i, var in enumerate(ins):
            name = by_var.get(id(var))
            results[i] = None if name is None else grads.get(name + GRAD_SUFFIX)
    # an output that is a leaf (no op behind it) and one of the inputs: its grad_output goes
    # to that input as it is (Fluid 1.8: grad([x], [x]) is ones, grad([x + 1, x], [x]) twos)
    for out, seed in zip(outs, seeds, strict=True):
        if out._node is None:
            for i, var in enumerate(ins):
                if var is out:
                    results[i] = _plus_seed(results[i], out, seed, bool(create_graph))
    tracer = ins[0].block.program._tracer
    given = {id(s) for s in seeds if s is not None}
    for i, (var, value) in enumerate(zip(ins, results, strict=True)):
        if value is not None and not isinstance(value, VarBase):
            value = results[i] = tracer.wrap(value, name=var.name + GRAD_SUFFIX)
        if create_graph and isinstance(value, VarBase) and value.stop_gradient:
            # with create_graph every gradient may take part in a later backward pass (Fluid
            # 1.8's are not stop_gradient then), also a seed no traced op made; the caller's
            # own grad_output is not changed: a copy is returned
            if id(value) in given:
                value = results[i] = tracer.wrap(value._checked_value().copy(),
                                                 name=var.name + GRAD_SUFFIX)
            value.stop_gradient = False
    for var, result in zip(ins, results, strict=True):
        if result is None and not allow_unused:
            raise ValueError(f"grad: the outputs do not depend on input {var.name!r} (pass "
                             "allow_unused=True to get None for it)")
    return results


def _plus_seed(current: Any, out: VarBase, seed: VarBase | None, create_graph: bool) -> Any:
    """``current`` (None, an array, or with ``create_graph`` a traced variable) plus the
    gradient ``out`` starts from (``seed``'s value, or ones of ``out``'s shape)."""
    value = out._checked_value()
    start = (array_module(value).ones(value.shape, dtype=value.dtype) if seed is None
             else seed._checked_value().copy())
    if not create_graph:
        return start if current is None else current + start
    tracer = out.block.program._tracer
    # a new leaf: differentiable again, as the gradients create_graph returns are
    start_var = tracer.wrap(start, stop_gradient=False)
    return start_var if current is None else current + start_var


def _differentiate(targets: list[VarBase], seeds: list, blocked: set[str],
                   create_graph: bool = False) -> tuple[_SSAProgram, dict[str, Any]]:
    """Run the grad ops of the nodes behind ``targets``, each starting from its seed (a
    VarBase, or ones where None); returns the forward program and the values by name (arrays;
    with ``create_graph`` dygraph variables, the grad ops traced). ``blocked`` names
    variables no gradient flows through."""
    tracer = targets[0].block.program._tracer
    nodes = _nodes_behind([t._node for t in targets])
    forward = _SSAProgram(nodes, blocked)
    seed_names = []
    for target, seed in zip(targets, seeds, strict=True):
        name = forward.names[(target._node.seq, target.name)] + GRAD_SUFFIX
        value = target._checked_value()
        forward.values[name] = (array_module(value).ones(value.shape, dtype=value.dtype)
                                if seed is None else seed._checked_value())
        seed_names.append(name)
        if seed is not None:
            forward.seed_vars[name] = seed
    plan = _plan(tracer, forward, seed_names)
    forward.zero_grads = plan.zero_grads
    if create_graph:
        return forward, _trace_grad_ops(tracer, forward, plan.block)
    scope = Scope()
    scope.vars.update(forward.values)
    scope.lods.update(forward.lods)
    scope._rngs = tracer._rngs
    scope._compile_key = ("dygraph backward", id(plan))  # the plan's executor plans it once
    try:
        with plan.executor._on_device():
            plan.executor.run_block(plan.program, plan.block, scope)
    except ExecutionError as err:  # with the variables' own names, not the plan's
        raise ExecutionError("in the backward pass: " + _real_names(str(err), forward.real)
                             ) from err.__cause__
    return forward, scope.vars


@dataclass
class _Plan:
    """The grad program of one graph shape, and the executor that planned it."""

    program: Program
    block: Any
    executor: Executor
    #: forward values whose gradient a grad op reads but no grad op produces (the unused
    #: outputs of a split): Fluid 1.8's engine fills those with zeros
    zero_grads: frozenset[str] = frozenset()


#: grad programs kept per tracer (graphs of different shapes: a model's train and eval
#: steps, the last smaller batch, ...)
_PLANS_KEPT = 16


def _plan(tracer: Any, forward: _SSAProgram, seed_names: list[str]) -> _Plan:
    """The grad program of ``forward``: made (static backward pass, variables, an executor)
    the first time a graph of its shape is differentiated, then reused; a training loop
    differentiates the same graph every step."""
    key = (forward.signature, tuple(seed_names))
    plans = tracer._backward_plans
    plan = plans.get(key)
    if plan is not None:
        plans.move_to_end(key)
        return plan
    with _dygraph_tracer_guard(None):
        block = forward.build()
        descs = grad_descs(block.ops, forward.no_grad, seed_names)
        program = Program()
        gblock = program.global_block()
        for var in block.vars.values():
            gblock.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                              stop_gradient=var.stop_gradient)
        create_grad_vars(gblock, descs, seed_names)
        for desc in descs:
            gblock.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
    plan = plans[key] = _Plan(program, gblock, Executor(tracer.place),
                              _ungenerated_grads(block, descs))
    if len(plans) > _PLANS_KEPT:
        plans.popitem(last=False)
    return plan


def _ungenerated_grads(block: Block, descs: list[dict]) -> frozenset[str]:
    """The forward outputs whose gradient a grad op takes (its slot ``<Out>@GRAD``) but that
    no grad op wrote (the static pass passes ``@EMPTY@`` there)."""
    names = set()
    for desc in descs:
        if desc.get("forward_op") is None:  # the sums of repeated gradients
            continue
        op = block.ops[desc["forward_op"]]
        for slot, grads in desc["inputs"].items():
            outs = op.outputs.get(slot[:-len(GRAD_SUFFIX)]) if slot.endswith(GRAD_SUFFIX) \
                else None
            if outs is not None and len(outs) == len(grads):
                names.update(o for o, g in zip(outs, grads, strict=True) if g == EMPTY_VAR)
    return frozenset(names)


def _real_names(message: str, real: dict[str, str]) -> str:
    return re.sub(r"\bv\d+\b", lambda m: real.get(m.group(0), m.group(0)), message)


def _trace_grad_ops(tracer: Any, forward: _SSAProgram, gblock: Any) -> dict[str, Any]:
    """Run ``gblock``'s grad ops through the tracer, on the live variables of the forward
    values, so that the tracer records them: the gradients come back as dygraph variables a
    later backward pass differentiates (``grad(create_graph=True)``)."""
    values: dict[str, Any] = {}
    for name, var in forward.leaves.items():
        values[name] = _live(var, forward.values[name], name)
    for name, ref in forward.outputs.items():
        var = ref()
        # an output nobody reads later is dead: no gradient reaches it through the graph
        values[name] = (_live(var, forward.values[name], name) if var is not None
                        else tracer.wrap(forward.values[name]))
    for name, value in forward.values.items():
        if name not in values:  # the seeds
            seed = forward.seed_vars.get(name)
            values[name] = seed if seed is not None else tracer.wrap(value)
    for op in gblock.ops:
        ins = {slot: [values[n] if n != EMPTY_VAR else n for n in names]
               for slot, names in op.inputs.items()}
        outs = {}
        for slot, names in op.outputs.items():
            made = []
            for n in names:
                if n != EMPTY_VAR:
                    values[n] = tracer.create_var(name=n)
                made.append(values.get(n, n))
            outs[slot] = made
        tracer.trace_op(op.type, ins, outs, dict(op.attrs))
    return values


def _live(var: VarBase, recorded: Any, name: str) -> VarBase:
    """``var`` to differentiate through, when it still holds the value the forward pass
    read."""
    if var._value is not recorded:
        raise NotImplementedError(
            f"grad(create_graph=True) through {name!r}, whose value was replaced after the "
            "forward pass read it (set_value, an in-place op, an optimizer step), is not "
            "implemented: take the gradient before changing it")
    return var


def _nodes_behind(lasts: list[Node]) -> list[Node]:
    """The nodes ``lasts`` depend on through variables that take gradients, oldest first."""
    seen = {id(n): n for n in lasts}
    todo = list(lasts)
    while todo:
        node = todo.pop()
        for name, var in node.inputs.items():
            before = node.in_nodes[name]
            if before is not None and not var.stop_gradient and id(before) not in seen:
                seen[id(before)] = before
                todo.append(before)
    return heapq.nsmallest(len(seen), seen.values(), key=lambda n: n.seq)


class _SSAProgram:
    """The forward program of ``nodes``: one name per value (Fluid's programs may write a
    name twice; a backward pass over recorded values may not), and names by position
    (``v0``, ``v1``, ...), so that the same graph gives the same program, and the same grad
    program, every step (:func:`_plan`). ``signature`` is that program's shape."""

    def __init__(self, nodes: list[Node], blocked: set[str] = frozenset()) -> None:
        #: (seq of the writing node, or None for a leaf, forward name) -> name here
        self.names: dict[tuple, str] = {}
        #: name here -> the forward name (for messages)
        self.real: dict[str, str] = {}
        self.values: dict[str, Any] = {}
        self.lods: dict[str, tuple] = {}
        #: the gradients nobody may have (of stop_gradient and blocked variables)
        self.no_grad: set[str] = set()
        #: name here -> the leaf variable its gradient goes to
        self.leaves: dict[str, VarBase] = {}
        #: name here -> weak reference to the output variable
        self.outputs: dict[str, Any] = {}
        #: seed gradient name -> the caller's grad_output variable
        self.seed_vars: dict[str, VarBase] = {}
        #: the values whose gradient is zeros when none arrives (:attr:`_Plan.zero_grads`)
        self.zero_grads: frozenset[str] = frozenset()
        self._vars: list[tuple] = []  # (name, shape, dtype, type, stop_gradient)
        self._ops: list[tuple] = []  # (type, inputs, outputs, attrs)
        shape: list[tuple] = []
        in_path = {id(n) for n in nodes}
        for node in nodes:
            renamed: dict[str, str] = {}
            for name, var in node.inputs.items():
                before = node.in_nodes[name]
                key = (before.seq if before is not None and id(before) in in_path else None,
                       name)
                if key not in self.names:
                    self._declare(key, node.in_values[name], node.lods.get(name),
                                  var.stop_gradient or name in blocked)
                    if key[0] is None:
                        self.leaves[self.names[key]] = var
                renamed[name] = self.names[key]
            for name, value in node.out_values.items():
                ref = node.outputs[name]
                var = ref()
                key = (node.seq, name)
                self._declare(key, value, node.lods.get(name),
                              (var is not None and var.stop_gradient) or name in blocked)
                renamed_out = self.names[key]
                self.outputs[renamed_out] = ref
            op = node.op
            ins = tuple((s, tuple(renamed.get(n, n) if n != EMPTY_VAR else n for n in ns))
                        for s, ns in op.inputs.items())
            outs = tuple((s, tuple(self.names.get((node.seq, n), n) for n in ns))
                         for s, ns in op.outputs.items())
            self._ops.append((op.type, ins, outs, op.attrs))
            shape.append((op.type, ins, outs, node.attrs_key()))
        self.signature = (tuple(shape), tuple(self._vars))

    def _declare(self, key: tuple, value: Any, lod: Any, stop_gradient: bool) -> None:
        name = f"v{len(self.names)}"
        self.names[key] = name
        self.real[name] = key[1]
        kind = (VarType.SELECTED_ROWS if isinstance(value, SelectedRows)
                else VarType.LOD_TENSOR_ARRAY if isinstance(value, LoDTensorArray)
                else VarType.LOD_TENSOR)
        shape = getattr(value, "shape", None) if kind != VarType.LOD_TENSOR_ARRAY else None
        self._vars.append((name, None if shape is None else tuple(shape),
                           str(getattr(value, "dtype", "float32")), kind, stop_gradient))
        self.values[name] = value
        if lod:
            self.lods[name] = lod
        if stop_gradient:
            self.no_grad.add(name + GRAD_SUFFIX)  # as append_backward: gradient names

    def build(self) -> Block:
        """The forward program's block (for the static backward pass)."""
        block = Program().global_block()
        for name, shape, dtype, kind, stop_gradient in self._vars:
            block.create_var(name=name, shape=None if shape is None else list(shape),
                             dtype=dtype, type=kind, stop_gradient=stop_gradient)
        for op_type, ins, outs, attrs in self._ops:
            block.append_op(op_type, {s: list(ns) for s, ns in ins},
                            {s: list(ns) for s, ns in outs}, dict(attrs))
        return block
