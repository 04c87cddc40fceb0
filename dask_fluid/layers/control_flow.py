"""Control flow: ``ConditionalBlock``, ``Switch`` (used by ``piecewise_decay``) and ``cond``,
``StaticRNN`` (a recurrence over time-major inputs, op ``recurrent``) and ``DynamicRNN`` (a
recurrence over LoD sequences, op ``dynamic_recurrent``)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, VarType, default_main_program, in_dygraph_mode
from ..layer_helper import LayerHelper
from .checks import check_type
from .lod_array import (  # noqa: F401 - where Fluid 1.8's scripts import them from
    array_to_lod_tensor,
    lod_rank_table,
    lod_tensor_to_array,
    max_sequence_len,
    shrink_memory,
)
from .tensor import (
    assign,
    cast,
    equal,
    fill_constant,
    logical_and,
    logical_not,
    tensor_array_to_tensor,
)

__all__ = [
    "ConditionalBlock", "DynamicRNN", "IfElse", "StaticRNN", "Switch", "case", "cond",
    "select_input", "switch_case", "tensor_array_to_tensor",
]


@contextlib.contextmanager
def sub_block(complete: Callable[[], None]) -> Iterator[None]:
    """Ops appended inside go to a new sub-block of the current block; ``complete`` runs on
    a normal exit, still inside, to append the op that runs the sub-block to the enclosing
    one (Fluid's ``BlockGuard``)."""
    program = default_main_program()
    program._create_block()
    try:
        yield
        complete()
    finally:
        program._rollback()


class ConditionalBlock:
    """Ops appended inside :meth:`block` run only when ``inputs[0]`` is true."""

    def __init__(self, inputs: Sequence[Variable], is_scalar_condition: bool = False) -> None:
        self.inputs = list(inputs)
        self.is_scalar_condition = is_scalar_condition

    def block(self) -> contextlib.AbstractContextManager:
        return sub_block(self._complete)

    def _complete(self) -> None:
        program = default_main_program()
        inside = program.current_block()
        parent = program.block(inside.parent_idx)
        written: set[str] = set()
        read: list[str] = []
        for op in inside.ops:
            # each name once, however often an op reads it (Fluid's complete() takes a set):
            # a name listed twice got its gradient twice
            read += [n for n in dict.fromkeys(op.input_arg_names)
                     if n not in written and n not in read]
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


class IfElse:
    """Rows of a batch through one of two branches by a per-row (or per-sequence) condition
    (Fluid 1.8's ``layers.IfElse``): ``input(x)`` inside a branch gives that branch's part of
    ``x`` (``split_lod_tensor``), ``output(...)`` gives the branch's results, and calling
    the IfElse merges each result of the two branches back in the rows' order
    (``merge_lod_tensor``). Both branches run (on their parts, possibly empty), forward and
    backward (each row's gradient goes back through its branch).

    Examples
    --------
    >>> ie = layers.IfElse(layers.less_than(x, limit))
    >>> with ie.true_block():
    ...     ie.output(layers.scale(ie.input(x), 2.0))
    >>> with ie.false_block():
    ...     ie.output(ie.input(x))
    >>> out, = ie()
    """

    def __init__(self, cond: Variable, name: str | None = None) -> None:
        if not isinstance(cond, Variable):
            raise TypeError(f"IfElse: cond must be a Variable, got {type(cond).__name__}")
        self.helper = LayerHelper("ifelse", name)
        self.cond = cond
        self._inputs: dict[int, tuple[Variable, Variable]] = {}
        self._branch: bool | None = None
        self._blocks = {True: ConditionalBlock([cond]), False: ConditionalBlock([cond])}
        self._outputs: dict[bool, list[Variable]] = {True: [], False: []}

    @contextlib.contextmanager
    def _block(self, side: bool) -> Iterator[None]:
        if self._branch is not None:
            raise ValueError("IfElse: a branch cannot open inside another")
        self._branch = side
        try:
            with self._blocks[side].block():
                yield
        finally:
            self._branch = None

    def true_block(self) -> contextlib.AbstractContextManager:
        """The branch of the rows whose condition is true."""
        return self._block(True)

    def false_block(self) -> contextlib.AbstractContextManager:
        """The branch of the rows whose condition is false."""
        return self._block(False)

    def _parent(self) -> Any:
        program = default_main_program()
        return program.block(program.current_block().parent_idx)

    def input(self, x: Variable) -> Variable:
        """This branch's part of ``x`` (split once for both branches)."""
        if self._branch is None:
            raise ValueError("input must in true/false blocks")
        if id(x) not in self._inputs:
            parent = self._parent()
            parts = tuple(parent.create_var(name=f"{self.helper.name}.input_{side}",
                                            dtype=x.dtype, shape=x.shape)
                          for side in ("true", "false"))
            _append_split(parent, x, self.cond, 0, parts)
            self._inputs[id(x)] = parts
        return self._inputs[id(x)][0 if self._branch else 1]

    def output(self, *outs: Variable) -> None:
        """This branch's results, one per output of the IfElse."""
        if self._branch is None:
            raise ValueError("output can only be invoked in the sub-block")
        parent = self._parent()
        for out in outs:
            if not isinstance(out, Variable):
                raise TypeError(f"IfElse.output takes Variables, got {type(out).__name__}")
            outside = parent.create_var(name=unique_name.generate(f"{self.helper.name}.output"),
                                        dtype=out.dtype, shape=out.shape)
            self._outputs[self._branch].append(outside)
            assign(out, outside)

    def __call__(self) -> list[Variable]:
        """The merged outputs (or one branch's, when only one branch gave outputs)."""
        if self._branch is not None:
            raise ValueError("IfElse::__call__ must be out of sub-block")
        true_outs, false_outs = self._outputs[True], self._outputs[False]
        if not true_outs and not false_outs:
            raise ValueError("Must invoke true_block/false_block before __call__")
        if true_outs and false_outs and len(true_outs) != len(false_outs):
            raise ValueError("The output side must be same")
        if not true_outs or not false_outs:
            return list(true_outs or false_outs)
        return [merge_lod_tensor(t, f, self.cond, self.cond)
                for t, f in zip(true_outs, false_outs, strict=True)]


def _append_split(block: Any, x: Variable, mask: Variable, level: int,
                  parts: tuple[Variable, Variable]) -> None:
    block.append_op("split_lod_tensor", inputs={"X": [x], "Mask": [mask]},
                    outputs={"OutTrue": [parts[0]], "OutFalse": [parts[1]]},
                    attrs={"level": level})


def split_lod_tensor(input: Variable, mask: Variable, level: int = 0
                     ) -> tuple[Variable, Variable]:
    """The items of ``input`` (sequences of LoD ``level``, or rows) whose ``mask`` entry is
    true, and the others (Fluid 1.8's ``layers.control_flow.split_lod_tensor``, which
    :class:`IfElse` runs on its inputs).

    Parameters
    ----------
    input : Variable
    mask : Variable
        bool ``[N, 1]``, one entry per item.
    level : int
        The LoD level whose sequences are the items.

    Returns
    -------
    tuple of Variable
        ``(out_true, out_false)``, each with the LoD of the sequences it took.
    """
    check_type(input, "input", Variable, "fluid.layers.split_lod_tensor")
    check_type(mask, "mask", Variable, "fluid.layers.split_lod_tensor")
    check_type(level, "level", int, "fluid.layers.split_lod_tensor")
    helper = LayerHelper("split_lod_tensor")
    parts = (helper.create_tmp(dtype=input.dtype, shape=input.shape),
             helper.create_tmp(dtype=input.dtype, shape=input.shape))
    _append_split(helper.main_program.current_block(), input, mask, level, parts)
    return parts


def merge_lod_tensor(in_true: Variable, in_false: Variable, x: Variable, mask: Variable,
                     level: int = 0) -> Variable:
    """The inverse of :func:`split_lod_tensor`: the items of ``in_true`` where ``mask`` is
    true and of ``in_false`` elsewhere, in ``x``'s order (Fluid 1.8's ``merge_lod_tensor``).

    Parameters
    ----------
    in_true, in_false : Variable
        The two parts.
    x : Variable
        A tensor with the complete LoD (IfElse passes its condition).
    mask : Variable
        bool ``[N, 1]``.
    level : int

    Returns
    -------
    Variable
    """
    for value, arg in ((x, "x"), (mask, "mask"), (in_true, "in_true"), (in_false, "in_false")):
        check_type(value, arg, Variable, "fluid.layers.merge_lod_tensor")
    helper = LayerHelper("merge_lod_tensor")
    out = helper.create_tmp(dtype=in_true.dtype, shape=in_true.shape)
    helper.append_op("merge_lod_tensor",
                     inputs={"X": [x], "Mask": [mask], "InTrue": [in_true],
                             "InFalse": [in_false]},
                     outputs={"Out": [out]}, attrs={"level": level})
    return out


def select_input(inputs: Sequence[Variable], mask: Variable) -> Variable:
    """``inputs[mask]`` at run time (op ``select_input``; ``mask`` an int32 ``[1]``)."""
    helper = LayerHelper("select_input")
    out = helper.create_tmp(dtype=inputs[0].dtype, shape=inputs[0].shape)
    helper.append_op("select_input", inputs={"X": list(inputs), "Mask": [mask]},
                     outputs={"Out": [out]})
    return out


def _copy_to_parent(var: Variable) -> Variable:
    """A variable of the enclosing block that ``var``'s value is assigned to, inside the
    branch (Fluid's ``copy_var_to_parent_block``)."""
    program = default_main_program()
    parent = program.block(program.current_block().parent_idx)
    helper = LayerHelper("cond")
    out = parent.create_var(name=f"{helper.name}.out", dtype=var.dtype, shape=var.shape,
                            type=var.type)
    assign(var, out)
    return out


def _map(fn: Any, *trees: Any) -> Any:
    """``fn`` over the Variables of equally shaped nests of lists and tuples."""
    first = trees[0]
    if isinstance(first, (list, tuple)):
        return type(first)(_map(fn, *items) for items in zip(*trees, strict=True))
    return fn(*trees)


def _structure(tree: Any) -> Any:
    if isinstance(tree, (list, tuple)):
        return (type(tree).__name__, [_structure(t) for t in tree])
    if not isinstance(tree, Variable):
        raise TypeError(f"cond: a branch returned a {type(tree).__name__}; branches return "
                        "Variables, or lists and tuples of them")
    return "var"


#: what a bool where a condition Variable belongs usually is: Python values compared while
#: the program is built
_COMPARED = (" (a Python bool is decided once, when the program is built: to decide at each "
             "run, compare Variables, x == y or layers.equal(x, y))")


def cond(pred: Variable, true_fn: Any = None, false_fn: Any = None,
         name: str | None = None) -> Any:
    """``true_fn()`` if ``pred`` else ``false_fn()`` (Fluid 1.8's ``layers.cond``): each
    branch's ops go into a ConditionalBlock that runs only when its side is taken, and their
    results are merged with ``select_input``. The backward pass goes through the branch that
    ran (``conditional_block_grad``; ``select_input``'s gradient, ``select_output``, routes
    the gradient to it). In dygraph mode the taken branch runs, as in Fluid, and is
    differentiated like any other ops.

    Parameters
    ----------
    pred : Variable
        A bool of one element.
    true_fn, false_fn : callable, optional
        Build a branch and return its results: a Variable, or lists/tuples of them, the same
        structure on both sides (or None on both).

    Returns
    -------
    Variable, list, tuple or None
        The taken branch's results.

    Raises
    ------
    TypeError
        ``pred`` is not a bool Variable of one element, a branch is not callable, or a branch
        returns something else than Variables.
    ValueError
        One branch returns None and the other not, or their structures differ.
    """
    if name is not None and not isinstance(name, str):  # Fluid 1.8's check_type
        raise TypeError(f"cond: name must be a str or None, got {type(name).__name__}")
    if not isinstance(pred, Variable) or pred.dtype != "bool":
        got = type(pred).__name__ if not isinstance(pred, Variable) else pred.dtype
        raise TypeError(f"cond: pred must be a bool Variable, got {got}"
                        f"{_COMPARED if isinstance(pred, bool) else ''}")
    if pred.shape is not None and int(np.prod(pred.shape)) != 1:
        raise TypeError(f"cond: pred must hold one element, got shape {list(pred.shape)}")
    for fn, what in ((true_fn, "true_fn"), (false_fn, "false_fn")):
        if fn is not None and not callable(fn):
            raise TypeError(f"The {what} in cond must be callable, but received "
                            f"{type(fn).__name__}")
    if in_dygraph_mode():  # Fluid 1.8: the taken branch simply runs
        fn = true_fn if bool(pred) else false_fn
        return None if fn is None else fn()
    outputs = []
    for fn, condition in ((true_fn, pred), (false_fn, None)):
        result = None
        if fn is not None:
            block = ConditionalBlock([condition if condition is not None else
                                      logical_not(pred)], is_scalar_condition=True)
            with block.block():
                returned = fn()
                if returned is not None:
                    _structure(returned)
                    result = _map(_copy_to_parent, returned)
        outputs.append(result)
    true_out, false_out = outputs
    if true_out is None and false_out is None:
        return None
    if true_out is None or false_out is None:
        none, other = ("true_fn", "false_fn") if true_out is None else ("false_fn", "true_fn")
        raise ValueError(f"Incompatible return values of true_fn and false_fn in cond: {none} "
                         f"returns None while {other} returns non-None")
    if _structure(true_out) != _structure(false_out):
        raise ValueError("Incompatible return values of true_fn and false_fn in cond: they "
                         "differ in structure")
    mask = cast(pred, "int32")
    return _map(lambda f, t: select_input([f, t], mask), false_out, true_out)


def case(pred_fn_pairs: Sequence[tuple[Variable, Any]], default: Any = None,
         name: str | None = None) -> Any:
    """The function of the first ``(pred, fn)`` pair whose ``pred`` holds, else ``default``
    (Fluid 1.8's ``layers.case``: nested :func:`cond`; without ``default`` the last pair's
    function is the default).

    Raises
    ------
    TypeError
        ``pred_fn_pairs`` is not a list or tuple of ``(Variable, callable)`` pairs, or
        ``default`` is not callable.
    """
    if not isinstance(pred_fn_pairs, (list, tuple)):
        raise TypeError(f"The type of 'pred_fn_pairs' in Op(case) must be list or tuple, but "
                        f"received {type(pred_fn_pairs).__name__}")
    for pair in pred_fn_pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError("The elements of 'pred_fn_pairs' in Op(case) must be (pred, fn) "
                            f"tuples, got {pair!r}")
        pred, fn = pair
        if not isinstance(pred, Variable):
            raise TypeError(f"The pred of 'pred_fn_pairs' in Op(case) must be a Variable, got "
                            f"{type(pred).__name__}{_COMPARED if isinstance(pred, bool) else ''}")
        if not callable(fn):
            raise TypeError(f"The fn for {pred.name} of pred_fn_pairs in Op(case) must be "
                            "callable.")
    pairs = list(pred_fn_pairs)
    if default is None:
        default = pairs[-1][1]
        pairs = pairs[:-1]
    elif not callable(default):
        raise TypeError("The default in Op(case) must be callable.")
    chosen = default
    for pred, fn in reversed(pairs):
        chosen = functools.partial(cond, pred, fn, chosen)
    return chosen()


def switch_case(branch_index: Variable, branch_fns: Any, default: Any = None,
                name: str | None = None) -> Any:
    """The function of ``branch_fns`` whose key is ``branch_index``'s value, else
    ``default`` (Fluid 1.8's ``layers.switch_case``: ``branch_fns`` a list of functions (keys
    0, 1, ...), a list of ``(key, fn)`` or a dict; without ``default`` the largest key's
    function is the default).

    Raises
    ------
    TypeError
        ``branch_index`` is not an integer Variable, or ``branch_fns`` is not keys and
        callables.
    ValueError
        A key appears twice.
    """
    if not isinstance(branch_index, Variable) or branch_index.dtype not in (
            "uint8", "int32", "int64"):
        raise TypeError("The branch_index in Op(switch_case) must be an integer Variable")
    if branch_index.dtype != "int64":
        branch_index = cast(branch_index, "int64")
    if not isinstance(branch_fns, (list, tuple, dict)):
        raise TypeError(f"The type of 'branch_fns' in Op(switch_case) must be list, tuple or "
                        f"dict, but received {type(branch_fns).__name__}")
    pairs = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(branch_fns)
    if all(callable(fn) for fn in pairs):
        pairs = list(enumerate(pairs))
    keys: list[int] = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError("The elements of 'branch_fns' in Op(switch_case) must be (key, fn) "
                            f"tuples, got {pair!r}")
        key, fn = pair
        if not isinstance(key, int):
            raise TypeError(f"The key in 'branch_fns' in Op(switch_case) must be an int, got "
                            f"{type(key).__name__}")
        if key in keys:
            raise ValueError(f"The key in 'branch_fns' must be unique, but '{key}' appears more "
                             "than once.")
        keys.append(key)
        if not callable(fn):
            raise TypeError(f"The fn for key {key} in 'branch_fns' in Op(switch_case) must be "
                            "callable.")
    pairs.sort(key=lambda p: p[0])
    if default is None:
        default = pairs[-1][1]
        pairs = pairs[:-1]
    elif not callable(default):
        raise TypeError("The default in Op(switch_case) must be callable.")
    chosen = default
    for key, fn in pairs:
        pred = equal(branch_index, fill_constant([1], "int64", key))
        chosen = functools.partial(cond, pred, fn, chosen)
    return chosen()


class _Memory:
    def __init__(self, init: Variable, pre_mem: Variable, need_reorder: bool = False) -> None:
        self.init, self.pre_mem, self.mem = init, pre_mem, None
        self.need_reorder = need_reorder


class _StepBlockRNN:
    """What StaticRNN and DynamicRNN share: the step block, the memories, the outputs, and the
    op that runs the block (its parameters: what the block reads from outside)."""

    _kind = ""
    _enter = ""

    def __init__(self, name: str | None = None) -> None:
        from .. import unique_name

        self.name = name or unique_name.generate(self._kind.lower())
        self.inputs: list[Variable] = []
        self.outputs: list[Variable] = []
        self.memories: dict[str, _Memory] = {}
        self._status = "before"

    def _check(self, method: str) -> None:
        if self._status != "in":
            raise ValueError(f"{self._kind}.{method} must be called inside "
                             f"'with rnn.{self._enter}():'")

    @contextlib.contextmanager
    def _step_block(self) -> Iterator[None]:
        if self._status != "before":
            raise ValueError(f"{self._kind}.{self._enter}() can be entered only once")
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

    def _inner(self, x: Variable, method: str, shape: list[int], lod_level: int = 0) -> Variable:
        """``x`` seen inside the step block: a variable of the same name (as in Fluid)."""
        self._check(method)
        if not isinstance(x, Variable):
            raise TypeError(f"{self._kind}.{method} takes a Variable, got {type(x).__name__}")
        block = default_main_program().current_block()
        if x.name in block.vars:
            raise ValueError(f"{self._kind}.{method}: {x.name!r} is made inside the step block "
                             f"or already an input of it; make each input before "
                             f"'with rnn.{self._enter}():' and pass it once")
        return block.create_var(name=x.name, shape=shape, dtype=x.dtype, lod_level=lod_level)

    def _new_memory(self, init: Variable, need_reorder: bool = False) -> Variable:
        from .. import unique_name

        block = default_main_program().current_block()
        pre_mem = block.create_var(name=unique_name.generate(f"{self.name}@mem"),
                                   shape=list(init.shape), dtype=init.dtype)
        self.memories[pre_mem.name] = _Memory(init, pre_mem, need_reorder)
        return pre_mem

    def update_memory(self, mem: Variable, var: Variable) -> None:
        """Carry ``var`` to the next step as the value of the memory ``mem``."""
        self._check("update_memory")
        if mem.name not in self.memories:
            raise ValueError(f"{self._kind}.update_memory: {mem.name!r} is not a memory of "
                             f"this {self._kind} (make it with rnn.memory)")
        self.memories[mem.name].mem = var

    def _add_output(self, o: Variable, shape: list[int], lod_level: int = 0) -> None:
        if not isinstance(o, Variable):
            raise TypeError(f"{self._kind}.output takes Variables, got {type(o).__name__}")
        out = self._parent().create_var(name=o.name, dtype=o.dtype, shape=shape,
                                        lod_level=lod_level)
        self.outputs.append(out)

    def __call__(self) -> Variable | list[Variable]:
        if self._status != "after":
            raise ValueError(f"{self._kind}: call rnn() after its 'with rnn.{self._enter}():' "
                             "block")
        if not self.outputs:
            raise ValueError(f"{self._kind} has no output: call rnn.output inside the block")
        return self.outputs[0] if len(self.outputs) == 1 else list(self.outputs)

    def _states(self, block) -> list[str]:
        """Each memory's new value copied by ``rnn_memory_helper`` (as Fluid): a state name of
        its own, so a value that is both an output and a state gets both gradients."""
        states = []
        for name, mem in self.memories.items():
            if mem.mem is None:
                raise ValueError(f"{self._kind}: memory {name!r} (from {mem.init.name!r}) is "
                                 "never updated; call rnn.update_memory in the block")
            new = block.create_var(name=f"{mem.mem.name}@rnn_memory", shape=mem.mem.shape,
                                   dtype=mem.mem.dtype)
            block.append_op("rnn_memory_helper", inputs={"X": [mem.mem]},
                            outputs={"Out": [new]}, attrs={"dtype": mem.mem.dtype})
            states.append(new.name)
        return states

    def _parameters(self, block, local: set[str]) -> list[str]:
        """The outer variables the block reads (weights, most often), in first-read order."""
        local = local | {name for op in block.ops for name in op.output_arg_names}
        params: list[str] = []
        for op in block.ops:
            # each name once, however often an op reads it
            params += [n for n in dict.fromkeys(op.input_arg_names)
                       if n not in local and n not in params]
        return params

    def _complete(self) -> None:
        raise NotImplementedError


class StaticRNN(_StepBlockRNN):
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

    _kind, _enter = "StaticRNN", "step"

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.seq_len: int | None = None

    def step(self) -> contextlib.AbstractContextManager[None]:
        """The block of one time step."""
        return self._step_block()

    def step_input(self, x: Variable) -> Variable:
        """The slice ``x[t]`` of a ``[T, ...]`` input at the current step."""
        self._check("step_input")
        if isinstance(x, Variable):
            if self.seq_len is None:
                self.seq_len = x.shape[0]
            elif x.shape[0] != -1 and x.shape[0] != self.seq_len:
                raise ValueError(f"StaticRNN: every step input needs {self.seq_len} time "
                                 f"steps, {x.name!r} has {x.shape[0]}")
        inner = self._inner(x, "step_input", list(x.shape[1:]))
        self.inputs.append(inner)
        return inner

    def memory(self, init: Variable | None = None, shape: Sequence[int] | None = None,
               batch_ref: Variable | None = None, init_value: float = 0.0,
               init_batch_dim_idx: int = 0, ref_batch_dim_idx: int = 1) -> Variable:
        """A state carried over the steps: ``init`` at the first step, or, without it, a
        ``shape`` tensor of ``init_value`` whose batch dim is taken from ``batch_ref``."""
        self._check("memory")
        from .. import unique_name

        if init is None:
            if shape is None or batch_ref is None:
                raise ValueError("StaticRNN.memory needs init, or shape and batch_ref")
            parent = self._parent()
            boot = parent.create_var(name=unique_name.generate(f"{self.name}@memory_boot"),
                                     shape=list(shape), dtype=batch_ref.dtype)
            # batch_ref has its outer variable's name: dim 1 of [T, N, ...] is the batch
            parent.append_op("fill_constant_batch_size_like", inputs={"Input": [batch_ref]},
                             outputs={"Out": [boot]},
                             attrs={"value": float(init_value), "shape": list(shape),
                                    "dtype": boot.dtype, "input_dim_idx": ref_batch_dim_idx,
                                    "output_dim_idx": init_batch_dim_idx})
            init = boot
        return self._new_memory(init)

    def step_output(self, o: Variable) -> None:
        """Collect ``o`` at every step; ``rnn()`` returns them stacked, ``[T, ...]``."""
        self._check("step_output")
        self._add_output(o, [self.seq_len, *(o.shape or [])])

    def output(self, *outputs: Variable) -> None:
        """:meth:`step_output` for each of ``outputs``."""
        for o in outputs:
            self.step_output(o)

    def _complete(self) -> None:
        block = default_main_program().current_block()
        parent = self._parent()
        if not self.inputs:
            raise ValueError("StaticRNN needs at least one step_input")
        states = self._states(block)
        params = self._parameters(block, {v.name for v in self.inputs} | set(self.memories))
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


class DynamicRNN(_StepBlockRNN):
    """A recurrence over the sequences of LoD tensors (Fluid's DynamicRNN; op
    ``dynamic_recurrent``).

    Step ``t`` runs the block once for every sequence that has a ``t``-th element, the
    sequences ordered longest first (Fluid's rank table), so the batch shrinks as sequences
    end. Inside ``with rnn.block():``, :meth:`step_input` gives those sequences' ``t``-th rows
    (of a nested input, with two or more LoD levels: their ``t``-th sub-sequences, a LoD
    tensor), :meth:`static_input` a LoD tensor of their whole sequences (attention over an
    encoder's output), :meth:`memory` a state per sequence (the rows of ended sequences drop
    out), and :meth:`output` collects a row (or a sub-sequence) per sequence and step;
    ``rnn()`` returns LoD tensors whose top level is the step inputs', each row where its
    element was. Trains like any layer.

    Fluid builds this from a ``while`` op and LoD-tensor-array ops; here one op runs the
    block over the steps and its gradient runs the block's gradient back over them.

    Examples
    --------
    >>> drnn = DynamicRNN()
    >>> with drnn.block():
    ...     word = drnn.step_input(emb)                  # emb: LoD [total words, 32]
    ...     enc = drnn.static_input(encoder_out)         # LoD [total source words, 32]
    ...     prev = drnn.memory(init=encoder_last, need_reorder=True)
    ...     h = fluid.layers.fc([word, prev], 32, act="tanh")
    ...     drnn.update_memory(prev, h)
    ...     drnn.output(h)
    >>> out = drnn()                                     # LoD [total words, 32]
    """

    _kind, _enter = "DynamicRNN", "block"

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.static_inputs: list[Variable] = []

    def block(self) -> contextlib.AbstractContextManager[None]:
        """The block of one step."""
        return self._step_block()

    def step_input(self, x: Variable, level: int = 0) -> Variable:
        """The current step's element of each running sequence of ``x``, in the steps' order.

        A row each, ``[running, ...]``, when ``x`` has one LoD level. When it has more
        (sequences of sub-sequences), a sub-sequence each, all its rows, as a LoD tensor of
        the levels below the top (``lod_level`` ``x.lod_level - 1``, as Fluid), so that
        sequence layers, or a nested DynamicRNN, run on it inside the block. Only
        ``level=0`` (stepping over the top-level sequences) is implemented.
        """
        self._check("step_input")
        # whether x has sequences is known when it runs (Fluid's lod_level is not kept on
        # every variable): the op checks its LoD then
        if level != 0:
            # Fluid would rank that level's sequences; here memory(shape=...) takes its batch
            # from the top level, and Fluid's build-time lod_level (x.lod_level - 1) would not
            # be the step value's (x.lod_level - level - 1)
            raise NotImplementedError(f"DynamicRNN.step_input(level={level}): only level 0 "
                                      "(the top-level sequences, of one- or multi-level LoD "
                                      "inputs) is implemented")
        # Fluid's lod_tensor_to_array drops the top level and read_from_array shares the rest
        inner = self._inner(x, "step_input", [-1, *x.shape[1:]],
                            lod_level=max(getattr(x, "lod_level", 0) - 1, 0))
        self.inputs.append(inner)
        return inner

    def static_input(self, x: Variable) -> Variable:
        """The whole sequences of ``x`` (one per step-input sequence), those of the running
        sequences at each step, in the step's order.

        Inside the block it has ``x``'s ``lod_level`` (Fluid's reorder_lod_tensor_by_rank and
        shrink_rnn_memory share it): a LoD tensor whose top-level sequences keep their lower
        levels, or, for ``x`` without LoD, a row per running sequence.
        """
        inner = self._inner(x, "static_input", [-1, *x.shape[1:]],
                            lod_level=getattr(x, "lod_level", 0))
        self.static_inputs.append(inner)
        return inner

    def memory(self, init: Variable | None = None, shape: Sequence[int] | None = None,
               value: float = 0.0, need_reorder: bool = False,
               dtype: str = "float32") -> Variable:
        """A state per sequence: ``init`` (one row per sequence; ``need_reorder=True`` when
        its rows are in the sequences' own order rather than the steps' longest-first order),
        or, without it, ``[sequences, *shape]`` filled with ``value``."""
        self._check("memory")
        if init is not None:
            return self._new_memory(init, bool(need_reorder))
        if shape is None:
            raise ValueError("DynamicRNN.memory needs init or shape")
        if not self.inputs:
            raise ValueError("DynamicRNN.memory(shape=...) needs a step_input before it (the "
                             "batch is its number of sequences)")
        from .. import unique_name

        parent, first_input = self._parent(), self.inputs[0]
        ref = parent._var_recursive(first_input.name)
        # one row per sequence: the first row of each sequence of the first step input
        first = parent.create_var(name=unique_name.generate(f"{self.name}@first_rows"),
                                  shape=[-1, *ref.shape[1:]], dtype=ref.dtype,
                                  stop_gradient=True)
        index = parent.create_var(name=unique_name.generate(f"{self.name}@first_index"),
                                  shape=[-1, *ref.shape[1:]], dtype=ref.dtype,
                                  stop_gradient=True)
        parent.append_op("sequence_pool", inputs={"X": [ref]},
                         outputs={"Out": [first], "MaxIndex": [index]},
                         attrs={"pooltype": "FIRST", "is_test": False, "pad_value": 0.0})
        boot = parent.create_var(name=unique_name.generate(f"{self.name}@memory_boot"),
                                 shape=[-1, *shape], dtype=dtype, stop_gradient=True)
        parent.append_op("fill_constant_batch_size_like", inputs={"Input": [first]},
                         outputs={"Out": [boot]},
                         attrs={"value": float(value), "shape": [-1, *shape], "dtype": dtype,
                                "input_dim_idx": 0, "output_dim_idx": 0})
        return self._new_memory(boot)

    def output(self, *outputs: Variable) -> None:
        """Collect each of ``outputs`` (one row, or one top-level sequence, per running
        sequence) at every step.

        ``rnn()`` gives each in the sequences' own order, every sequence's steps in turn,
        with one LoD level more than the step value (Fluid's array_to_lod_tensor): the step
        inputs' top level above the step values' own.
        """
        self._check("output")
        inputs = {v.name for v in self.inputs + self.static_inputs}
        for o in outputs:
            if isinstance(o, Variable) and o.name in inputs:
                o = self._copy(o)
            self._add_output(o, [-1, *((o.shape or [])[1:])],
                             lod_level=getattr(o, "lod_level", 0) + 1)

    def _copy(self, x: Variable) -> Variable:
        """A copy of a step or static input made in the block: inside it they have their
        outer variable's name (Fluid's are variables of their own), which an output named
        the same would overwrite."""
        block = default_main_program().current_block()
        copy = block.create_var(name=unique_name.generate(f"{self.name}@{x.name}"),
                                shape=x.shape, dtype=x.dtype, lod_level=x.lod_level)
        block.append_op("assign", inputs={"X": [x]}, outputs={"Out": [copy]})
        return copy

    def _complete(self) -> None:
        block = default_main_program().current_block()
        parent = self._parent()
        if not self.inputs:
            raise ValueError("DynamicRNN needs at least one step_input")
        states = self._states(block)
        local = {v.name for v in self.inputs + self.static_inputs} | set(self.memories)
        params = self._parameters(block, local)
        scopes = parent.create_var(name=f"{self.name}@step_scopes", type=VarType.STEP_SCOPES)
        parent.append_op(
            "dynamic_recurrent",
            inputs={"inputs": [parent._var_recursive(v.name) for v in self.inputs],
                    "static_inputs": [parent._var_recursive(v.name)
                                      for v in self.static_inputs],
                    "initial_states": [m.init for m in self.memories.values()],
                    "parameters": [parent._var_recursive(n) for n in params]},
            outputs={"outputs": self.outputs, "step_scopes": [scopes]},
            attrs={"ex_states": list(self.memories), "states": states,
                   "need_reorder": [m.need_reorder for m in self.memories.values()],
                   "sub_block": block.idx})


