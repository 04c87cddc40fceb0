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
from typing import Any

from ..backward import create_grad_vars, grad_descs
from ..executor import Executor, Scope
from ..framework import EMPTY_VAR, GRAD_SUFFIX, Program, VarType, _dygraph_tracer_guard
from ..lod import LoDTensorArray
from ..ops.registry import array_module
from ..ops.selected_rows import SelectedRows
from .tracer import Node
from .varbase import VarBase


def run_backward(loss: VarBase) -> None:
    """Differentiate ``loss`` and add the gradients into the variables it depends on.

    Raises
    ------
    ValueError
        ``loss`` depends on nothing that needs a gradient (computed under ``no_grad``, or
        only from variables with ``stop_gradient=True``).
    """
    node = loss._node
    if node is None:
        raise ValueError(
            f"{loss.name!r} depends on no variable that needs a gradient (computed under "
            "no_grad, or only from variables with stop_gradient=True): nothing to "
            "differentiate")
    tracer = loss.block.program._tracer
    nodes = _nodes_behind(node)
    with _dygraph_tracer_guard(None):
        forward = _SSAProgram(nodes)
        seed = forward.names[(node.seq, loss.name)] + GRAD_SUFFIX
        value = loss._checked_value()
        forward.values[seed] = array_module(value).ones(value.shape, dtype=value.dtype)
        descs = grad_descs(forward.block.ops, forward.no_grad, [seed])
        grads = Program()
        gblock = grads.global_block()
        for var in forward.block.vars.values():
            gblock.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                              stop_gradient=var.stop_gradient)
        create_grad_vars(gblock, descs, [seed])
        for desc in descs:
            gblock.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
    scope = Scope()
    scope.vars.update(forward.values)
    scope.lods.update(forward.lods)
    scope._rngs = tracer._rngs
    # a new executor each pass: its plans are of this pass's program only
    executor = Executor(tracer.place)
    with executor._on_device():
        executor.run_block(grads, gblock, scope)
    for name, var in forward.leaves.items():
        grad = scope.vars.get(name + GRAD_SUFFIX)
        if grad is not None and not var.stop_gradient:
            var._add_grad(grad)
    for name, ref in forward.outputs.items():
        var = ref()
        grad = scope.vars.get(name + GRAD_SUFFIX)
        if var is not None and grad is not None:
            var._grad = grad  # an intermediate value: its gradient in this pass


def _nodes_behind(last: Node) -> list[Node]:
    """The nodes ``last`` depends on through variables that take gradients, oldest first."""
    seen = {id(last): last}
    todo = [last]
    while todo:
        node = todo.pop()
        for name, var in node.inputs.items():
            before = node.in_nodes[name]
            if before is not None and not var.stop_gradient and id(before) not in seen:
                seen[id(before)] = before
                todo.append(before)
    return heapq.nsmallest(len(seen), seen.values(), key=lambda n: n.seq)


class _SSAProgram:
    """The forward program of ``nodes``, one name per value (Fluid's programs may write a
    name twice; a backward pass over recorded values may not)."""

    def __init__(self, nodes: list[Node]) -> None:
        self.program = Program()
        self.block = self.program.global_block()
        #: (seq of the writing node, or None for a leaf, forward name) -> name here
        self.names: dict[tuple, str] = {}
        self.values: dict[str, Any] = {}
        self.lods: dict[str, tuple] = {}
        self.no_grad: set[str] = set()
        #: name here -> the leaf variable its gradient goes to
        self.leaves: dict[str, VarBase] = {}
        #: name here -> weak reference to the output variable
        self.outputs: dict[str, Any] = {}
        in_path = {id(n) for n in nodes}
        for node in nodes:
            renamed: dict[str, str] = {}
            for name, var in node.inputs.items():
                before = node.in_nodes[name]
                key = (before.seq if before is not None and id(before) in in_path else None,
                       name)
                if key not in self.names:
                    self._declare(key, node.in_values[name], node.lods.get(name),
                                  var.stop_gradient)
                    if key[0] is None:
                        self.leaves[self.names[key]] = var
                renamed[name] = self.names[key]
            outs: dict[str, str] = {}
            for name, value in node.out_values.items():
                ref = node.outputs[name]
                var = ref()
                key = (node.seq, name)
                self._declare(key, value, node.lods.get(name),
                              var is not None and var.stop_gradient)
                outs[name] = self.names[key]
                self.outputs[self.names[key]] = ref
            op = node.op
            self.block.append_op(
                op.type,
                {s: [renamed.get(n, n) if n != EMPTY_VAR else n for n in ns]
                 for s, ns in op.inputs.items()},
                {s: [outs.get(n, n) if n != EMPTY_VAR else n for n in ns]
                 for s, ns in op.outputs.items()},
                dict(op.attrs))

    def _declare(self, key: tuple, value: Any, lod: Any, stop_gradient: bool) -> None:
        name = key[1]
        k = 0
        while self.block.has_var(name):
            k += 1
            name = f"{key[1]}@DYGRAPH_V{k}"
        self.names[key] = name
        kind = (VarType.SELECTED_ROWS if isinstance(value, SelectedRows)
                else VarType.LOD_TENSOR_ARRAY if isinstance(value, LoDTensorArray)
                else VarType.LOD_TENSOR)
        shape = getattr(value, "shape", None) if kind != VarType.LOD_TENSOR_ARRAY else None
        dtype = getattr(value, "dtype", "float32")
        self.block.create_var(name=name, shape=None if shape is None else list(shape),
                              dtype=dtype, type=kind, stop_gradient=stop_gradient)
        self.values[name] = value
        if lod:
            self.lods[name] = lod
        if stop_gradient:
            self.no_grad.add(name)
