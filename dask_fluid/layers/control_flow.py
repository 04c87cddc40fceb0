"""Control flow: ``ConditionalBlock`` and ``Switch`` (used by ``piecewise_decay``), and
``StaticRNN`` (a recurrence over time-major inputs, op ``recurrent``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from ..framework import Variable, VarType, default_main_program
from .tensor import logical_and, logical_not

__all__ = [
    "ConditionalBlock", "StaticRNN", "Switch",
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


class _Memory:
    def __init__(self, init: Variable, pre_mem: Variable) -> None:
        self.init, self.pre_mem, self.mem = init, pre_mem, None


class StaticRNN:
    """A recurrence over the time steps of time-major ``[T, N, ...]`` inputs (Fluid's
    StaticRNN; op ``recurrent``).

    Inside ``with rnn.step():``, :meth:`step_input` gives the current step's slice ``[N, ...]``
    of an input, :meth:`memory` a state carried from step to step (set for the next step with
    :meth:`update_memory`), and :meth:`step_output` collects a per-step value; calling ``rnn()``
    then returns the outputs stacked into ``[T, N, ...]``. Trains like any layer: the
    gradient runs the step block's gradient backwards over the steps.

    Examples
    --------
    >>> rnn = StaticRNN()
    >>> with rnn.step():
    ...     word = rnn.step_input(x_emb)                     # x_emb: [T, N, D]
    ...     prev = rnn.memory(shape=[-1, 32], batch_ref=word)
    ...     hidden = fluid.layers.fc([word, prev], 32, act="relu")
    ...     rnn.update_memory(prev, hidden)
    ...     rnn.step_output(hidden)
    >>> out = rnn()                                          # [T, N, 32]
    """

    def __init__(self, name: str | None = None) -> None:
        from .. import unique_name

        self.name = name or unique_name.generate("static_rnn")
        self.inputs: list[Variable] = []
        self.outputs: list[Variable] = []
        self.memories: dict[str, _Memory] = {}
        self.seq_len: int | None = None
        self._status = "before"

    def _check(self, method: str) -> None:
        if self._status != "in":
            raise ValueError(f"StaticRNN.{method} must be called inside 'with rnn.step():'")

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        if self._status != "before":
            raise ValueError("StaticRNN.step() can be entered only once")
        program = default_main_program()
        program._create_block()
        self._status = "in"
        try:
            yield
            self._status = "after"
            self._complete()
        finally:
            program._rollback()

    def _parent(self):
        program = default_main_program()
        return program.block(program.current_block().parent_idx)

    def step_input(self, x: Variable) -> Variable:
        """The slice ``x[t]`` of a ``[T, ...]`` input at the current step."""
        self._check("step_input")
        if not isinstance(x, Variable):
            raise TypeError(f"StaticRNN.step_input takes a Variable, got {type(x).__name__}")
        if x.name in default_main_program().current_block().vars:
            raise ValueError(f"StaticRNN.step_input: {x.name!r} is made inside the step block; "
                             "make the [T, ...] input before 'with rnn.step():'")
        if self.seq_len is None:
            self.seq_len = x.shape[0]
        elif x.shape[0] != -1 and x.shape[0] != self.seq_len:
            raise ValueError(f"StaticRNN: every step input needs {self.seq_len} time steps, "
                             f"{x.name!r} has {x.shape[0]}")
        # the slice has the input's name inside the step block, as in Fluid
        inner = default_main_program().current_block().create_var(
            name=x.name, shape=list(x.shape[1:]), dtype=x.dtype)
        self.inputs.append(inner)
        return inner

    def memory(self, init: Variable | None = None, shape: Sequence[int] | None = None,
               batch_ref: Variable | None = None, init_value: float = 0.0,
               init_batch_dim_idx: int = 0, ref_batch_dim_idx: int = 1) -> Variable:
        """A state carried over the steps: ``init`` at the first step, or, without it, a
        ``shape`` tensor of ``init_value`` whose batch dim is taken from ``batch_ref``."""
        self._check("memory")
        from .. import unique_name

        block = default_main_program().current_block()
        if init is None:
            if shape is None or batch_ref is None:
                raise ValueError("StaticRNN.memory needs init, or shape and batch_ref")
            parent = self._parent()
            boot = parent.create_var(name=unique_name.generate(f"{self.name}@memory_boot"),
                                     shape=list(shape), dtype=batch_ref.dtype)
            parent.append_op("fill_constant_batch_size_like", inputs={"Input": [batch_ref]},
                             outputs={"Out": [boot]},
                             attrs={"value": float(init_value), "shape": list(shape),
                                    "dtype": boot.dtype, "input_dim_idx": ref_batch_dim_idx,
                                    "output_dim_idx": init_batch_dim_idx})
            init = boot
        pre_mem = block.create_var(name=unique_name.generate(f"{self.name}@mem"),
                                   shape=list(init.shape), dtype=init.dtype)
        self.memories[pre_mem.name] = _Memory(init, pre_mem)
        return pre_mem

    def update_memory(self, mem: Variable, var: Variable) -> None:
        """Carry ``var`` to the next step as the value of the memory ``mem``."""
        self._check("update_memory")
        if mem.name not in self.memories:
            raise ValueError(f"StaticRNN.update_memory: {mem.name!r} is not a memory of this "
                             "StaticRNN (make it with rnn.memory)")
        self.memories[mem.name].mem = var

    def step_output(self, o: Variable) -> None:
        """Collect ``o`` at every step; ``rnn()`` returns them stacked, ``[T, ...]``."""
        self._check("step_output")
        out = self._parent().create_var(name=o.name, dtype=o.dtype,
                                        shape=[self.seq_len, *(o.shape or [])])
        self.outputs.append(out)

    def output(self, *outputs: Variable) -> None:
        for o in outputs:
            self.step_output(o)

    def __call__(self) -> Variable | list[Variable]:
        if self._status != "after":
            raise ValueError("StaticRNN: call rnn() after its 'with rnn.step():' block")
        if not self.outputs:
            raise ValueError("StaticRNN has no output: call rnn.step_output inside the step")
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)

    def _complete(self) -> None:
        program = default_main_program()
        block = program.current_block()
        parent = self._parent()
        if not self.inputs:
            raise ValueError("StaticRNN needs at least one step_input")
        local = {name for op in block.ops for name in op.output_arg_names}
        local |= {v.name for v in self.inputs} | set(self.memories)
        params = []
        for op in block.ops:
            params += [n for n in op.input_arg_names if n not in local and n not in params]
        states = []
        for name, mem in self.memories.items():
            if mem.mem is None:
                raise ValueError(f"StaticRNN: memory {name!r} (from {mem.init.name!r}) is "
                                 "never updated; call rnn.update_memory in the step")
            new = block.create_var(name=f"{mem.mem.name}@rnn_memory", shape=mem.mem.shape,
                                   dtype=mem.mem.dtype)
            block.append_op("rnn_memory_helper", inputs={"X": [mem.mem]},
                            outputs={"Out": [new]}, attrs={"dtype": mem.mem.dtype})
            states.append(new.name)
        scopes = parent.create_var(name=f"{self.name}@step_scopes", type=VarType.STEP_SCOPES)
        parent.append_op(
            "recurrent",
            inputs={"inputs": [parent._var_recursive(v.name) for v in self.inputs],
                    "initial_states": [m.init for m in self.memories.values()],
                    "parameters": [parent._var_recursive(n) for n in params]},
            outputs={"outputs": self.outputs, "step_scopes": [scopes]},
            attrs={"has_states": bool(states), "ex_states": list(self.memories),
                   "states": states, "sub_block": block.idx, "reverse": False,
                   "is_train": True})
