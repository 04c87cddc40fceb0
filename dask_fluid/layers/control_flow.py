"""Control flow: ``ConditionalBlock`` and ``Switch`` (used by ``piecewise_decay``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from ..framework import Variable, VarType, default_main_program
from .tensor import logical_and, logical_not

__all__ = [
    "ConditionalBlock", "Switch",
]


class ConditionalBlock:
    """Ops appended inside :meth:`block` run only when ``inputs[0]`` is true."""

    def __init__(self, inputs: Sequence[Variable], is_scalar_condition: bool = False) -> None:
        self.inputs = list(inputs)
        self.is_scalar_condition = is_scalar_condition

    @contextlib.contextmanager
    def block(self) -> Iterator[None]:
        program = default_main_program()
        program._create_block()
        try:
            yield
            self._complete()
        finally:
            program._rollback()

    def _complete(self) -> None:
        program = default_main_program()
        inside = program.current_block()
        parent = program.block(inside.parent_idx)
        written: set[str] = set()
        read: list[str] = []
        for op in inside.ops:
            read += [n for n in op.input_arg_names if n not in written and n not in read]
            written.update(op.output_arg_names)
        cond_names = {v.name for v in self.inputs}
        params = [parent._var_recursive(n) for n in read if n not in cond_names]
        outs = [parent.var(n) for n in parent.vars if n in written]
        scope = parent.create_var(name=f"_cond_scope_{inside.idx}", type=VarType.STEP_SCOPES)
        parent.append_op("conditional_block",
                         inputs={"Cond": self.inputs, "Input": params},
                         outputs={"Out": outs, "Scope": [scope]},
                         attrs={"sub_block": inside.idx,
                                "is_scalar_condition": self.is_scalar_condition})


class Switch:
    """``with switch.case(cond): ...`` chains, as Fluid's Switch (first true case wins)."""

    def __init__(self) -> None:
        self.pre_not_conditions: list[Variable] = []
        self.inside = False

    def __enter__(self) -> Switch:
        self.inside = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.inside = False

    def case(self, condition: Variable):
        if not self.inside:
            raise ValueError("Switch.case must be used inside 'with Switch() as switch:'")
        if not self.pre_not_conditions:
            cond_block = ConditionalBlock([condition], is_scalar_condition=True)
            self.pre_not_conditions.append(logical_not(condition))
        else:
            pre_not = self.pre_not_conditions[-1]
            self.pre_not_conditions.append(logical_and(pre_not, logical_not(condition)))
            cond_block = ConditionalBlock([logical_and(pre_not, condition)],
                                          is_scalar_condition=True)
        return cond_block.block()

    def default(self):
        if not self.pre_not_conditions:
            raise ValueError("Switch.default needs at least one case before it")
        return ConditionalBlock([self.pre_not_conditions[-1]], is_scalar_condition=True).block()
