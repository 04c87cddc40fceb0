"""Fluid's IR passes that change what a program computes, as program rewrites.

Fluid 1.8 builds an SSA graph from a program and lets scripts insert passes into it
(``BuildStrategy._finalize_strategy_and_create_passes().insert_pass(0, name)``). dask_fluid runs
programs op by op and builds no graph, so a pass here rewrites a copy of the program before it
runs (:meth:`PassBuilder.apply`). Only passes that change results are implemented; the graph
engine's fusion and memory passes have nothing to act on, and naming any pass that is not
implemented raises at once.

``multi_batch_merge_pass`` (``num_repeats``): the forward and backward ops run ``num_repeats``
times, each writing its parameter gradients under ``<grad>.repeat.<i>``; a ``sum`` and a
``scale(1 / num_repeats)`` merge them into ``<grad>``, and the learning-rate and optimize ops
run once on the merged gradients. As in Paddle's ``multi_batch_merge_pass.cc`` every repeat
reads the same feed (the pass merges repeated computation, not separate batches).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, OpRole, Program

__all__ = ["IMPLEMENTED", "Pass", "PassBuilder", "multi_batch_merge"]


class Pass:
    """One pass and its attributes (``set``), as Fluid's ``core.Pass``."""

    def __init__(self, name: str) -> None:
        if name not in IMPLEMENTED:
            raise NotImplementedError(
                f"IR pass {name!r} is not implemented in dask_fluid: it runs programs op by "
                f"op without an SSA graph; implemented passes: {sorted(IMPLEMENTED)}")
        self.name = name
        self._attrs: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        self._attrs[key] = value

    def get(self, key: str) -> Any:
        try:
            return self._attrs[key]
        except KeyError:
            raise KeyError(f"pass {self.name!r} has no attribute {key!r}") from None

    def apply(self, program: Program) -> Program:
        return IMPLEMENTED[self.name](program, self)


class PassBuilder:
    """The passes a BuildStrategy applies, in order (Fluid's ``core.PassBuilder``)."""

    def __init__(self) -> None:
        self._passes: list[Pass] = []

    def append_pass(self, name: str) -> Pass:
        p = Pass(name)
        self._passes.append(p)
        return p

    def insert_pass(self, index: int, name: str) -> Pass:
        p = Pass(name)
        self._passes.insert(index, p)
        return p

    def remove_pass(self, index: int) -> None:
        del self._passes[index]

    def all_passes(self) -> list[Pass]:
        return list(self._passes)

    def apply(self, program: Program) -> Program:
        """``program`` itself when there are no passes, else a rewritten copy."""
        for p in self._passes:
            program = p.apply(program)
        return program


def _role(op: Any) -> int:
    return int(op.attrs.get(OP_ROLE_KEY, OpRole.Forward))


def multi_batch_merge(program: Program, p: Pass) -> Program:
    """The ``multi_batch_merge_pass`` rewrite (see the module docstring)."""
    repeats = int(p.get("num_repeats"))
    if repeats < 1:
        raise ValueError(f"multi_batch_merge_pass: num_repeats must be >= 1, got {repeats}")
    prog = program.clone()
    block = prog.global_block()
    compute, lr, optimize, grad_of = [], [], [], {}
    for op in block.ops:
        role = _role(op)
        if role == OpRole.Forward or role & (OpRole.Backward | OpRole.Loss):
            compute.append(op)
        elif role & (OpRole.Optimize | OpRole.Dist | OpRole.RPC):
            optimize.append(op)
            pairs = op.attrs.get(OP_ROLE_VAR_KEY) or []
            for i in range(0, len(pairs) - 1, 2):
                grad_of[pairs[i + 1]] = pairs[i]
        elif role & OpRole.LRSched:
            lr.append(op)
        else:
            raise ValueError(f"multi_batch_merge_pass: op {op.type} has an invalid op_role "
                             f"{role}")
        if op.type == "batch_norm":
            raise NotImplementedError("multi_batch_merge_pass over batch_norm (its moving "
                                      "statistics per repeat) is not implemented")
    block.ops = []

    def renamed(names: list[str], i: int) -> list[str]:
        return [f"{n}.repeat.{i}" if n in grad_of else n for n in names]

    for i in range(repeats):
        for op in compute:
            outputs = {slot: renamed(names, i) for slot, names in op.outputs.items()}
            attrs = dict(op.attrs)
            if any(n in grad_of for names in op.outputs.values() for n in names):
                attrs[OP_ROLE_VAR_KEY] = []  # only the merged gradient names its parameter
            for names in outputs.values():
                for n in names:
                    if n.endswith(f".repeat.{i}") and not block.has_var(n):
                        src = block.var(n.rsplit(".repeat.", 1)[0])
                        block.create_var(name=n, shape=src.shape, dtype=src.dtype)
            block.append_op(op.type, {s: renamed(v, i) for s, v in op.inputs.items()},
                            outputs, attrs)
    for grad, param in grad_of.items():
        if not block.has_var(f"{grad}.repeat.0"):
            continue  # a gradient no compute op writes (it comes from elsewhere)
        block.append_op("sum", {"X": [f"{grad}.repeat.{i}" for i in range(repeats)]},
                        {"Out": [grad]}, {OP_ROLE_KEY: OpRole.Backward})
        block.append_op("scale", {"X": [grad]}, {"Out": [grad]},
                        {"scale": 1.0 / repeats, OP_ROLE_KEY: OpRole.Backward,
                         OP_ROLE_VAR_KEY: [param, grad]})
    block.ops.extend(lr)
    block.ops.extend(optimize)
    return prog


#: pass name -> the rewrite that implements it
IMPLEMENTED: dict[str, Callable[[Program, Pass], Program]] = {
    "multi_batch_merge_pass": multi_batch_merge,
}
