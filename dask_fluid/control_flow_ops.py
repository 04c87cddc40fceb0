"""The control-flow ops (Fluid 1.8's ``ConditionalBlock``/``Switch``, ``layers.While``) and
the tensor-array ops (``create_array``, ``array_write``, ``array_read``, ``array_length``,
``tensor_array_to_tensor``): the kernels and their gradient rules.

- ``conditional_block`` runs its sub-block, in the caller's scope, when its (scalar)
  condition holds (or, not scalar, when every condition input has elements: IfElse's
  branches, which run on their parts of the batch);
- ``while`` runs its sub-block, in the caller's scope, as long as its ``Condition`` (a bool of
  one element, which the sub-block updates) holds, as Fluid's ``WhileOp``;
- a tensor array is a :class:`~dask_fluid.lod.LoDTensorArray` in the scope: ``write_to_array``
  puts a copy of ``X`` (and its LoD) at index ``I``, growing the array with empty tensors as
  Fluid does; ``read_from_array`` gives item ``I`` back with its LoD; ``lod_array_length`` is
  the number of items. An index out of range for a read, or negative, is an error naming
  both.

Gradients: ``conditional_block`` has Fluid's ``conditional_block_grad``: the sub-block's ops
are differentiated into a grad block, run when the forward block ran, and the block's inputs
get zero gradients when it did not (an input it writes in place, such as Fluid 1.8's list
grown in a branch, a tensor array, keeps the gradient that reaches it); ``select_input``
(``layers.cond``'s merge) has Fluid's ``select_output``, which routes the gradient to the
branch that ran. So ``ConditionalBlock``, ``Switch`` and ``cond`` train.

``while`` has ``while_grad``. A loop whose steps a ``while_grad`` reads keeps, for each step,
the values its ops wrote that the grad block reads (a :class:`LoopTape` in the loop's
``StepScopes`` variable; ``is_test`` loops and loops nobody differentiates keep nothing).
``while_grad`` runs the grad block once per step, last step first; before the grad ops of
each forward op, ``while_step_state`` puts back the values that op left in that step. The
gradients of the tensors the loop only reads (its parameters) are summed over the steps;
those of the tensors it carries from step to step (written by the body) flow from each step
to the one before. Tensor arrays have ``read_from_array_grad`` (added into the gradient array
at the index) and ``write_to_array_grad`` (taken from it, the item then cleared: the write
overwrote it). Fluid 1.8 builds ``write_to_array``/``read_from_array`` for these; here they
are their own ops, which sum the gradients of an item read twice.
"""

from __future__ import annotations

from typing import Any

from .backward import STEP_IN, append_grad_block, append_loop_grad_block
from .executor import RunContext
from .framework import EMPTY_VAR, GRAD_SUFFIX, VarType, grad_var_name
from .lod import LoDTensor, LoDTensorArray
from .ops import registry
from .ops.registry import LOD_KEY, array_module, to_host


def _index(i: Any, op: str) -> int:
    values = to_host(i).reshape(-1)
    if values.size != 1:
        raise ValueError(f"{op}: the index I must hold one value, got shape {list(i.shape)}")
    index = int(values[0])
    if index < 0:
        raise ValueError(f"{op}: the index I is {index}; it must be >= 0")
    return index


def _array(ctx: RunContext) -> LoDTensorArray:
    """The array ``write_to_array`` writes: the scope's value of its output, or a new one."""
    name = ctx.op.output("Out")[0]
    current = ctx.scope.vars.get(name)
    if current is None:
        return LoDTensorArray()
    if not isinstance(current, LoDTensorArray):
        raise TypeError(f"write_to_array: {name!r} holds a {type(current).__name__}, not a "
                        "tensor array (create it with layers.create_array)")
    return current


def _write_to_array(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    x, i = ins["X"][0], ins["I"][0]
    if x is None:
        raise ValueError(f"write_to_array: {ctx.op.input('X')[0]!r} was not computed before "
                         "this op")
    index = _index(i, "write_to_array")
    array = _array(ctx)
    while len(array) <= index:  # Fluid grows the array with empty tensors
        array.append(LoDTensor())
    lod = attrs["_lods"]["X"][0] or ()
    array[index] = LoDTensor._of(x.copy(), lod, ctx.executor.place)
    return {"Out": [array]}


def _read_from_array(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    array, i = ins["X"][0], ins["I"][0]
    name = ctx.op.input("X")[0]
    if not isinstance(array, LoDTensorArray):
        raise ValueError(f"read_from_array: {name!r} is not a tensor array that "
                         "array_write has written")
    index = _index(i, "read_from_array")
    if index >= len(array) or array[index]._array is None:
        raise ValueError(f"read_from_array: index {index} of {name!r}, which holds "
                         f"{len(array)} items" + ("" if index >= len(array) else
                                                  f" (item {index} was never written)"))
    item = array[index]
    return {"Out": [item._array], LOD_KEY: {"Out": [item._lod or None]}}


def _array_length(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    array, name = ins["X"][0], ctx.op.input("X")[0]
    # an array create_array declared and nothing wrote yet is empty (Fluid's scope makes
    # every declared LoDTensorArray variable an empty array)
    if array is None and _declared_array(ctx, name):
        array = LoDTensorArray()
    if not isinstance(array, LoDTensorArray):
        raise ValueError(f"lod_array_length: {name!r} is not a tensor array")
    xp = ctx.executor._xp
    return {"Out": [xp.asarray([len(array)], dtype="int64")]}


def _declared_array(ctx: RunContext, name: str) -> bool:
    var = ctx.block._find_var_recursive(name)
    return var is not None and var.type == VarType.LOD_TENSOR_ARRAY


def _holds(conds: list, attrs: dict) -> bool:
    """A conditional block's condition: the scalar's value, or (not scalar) whether every
    condition input has elements (Fluid's rule)."""
    if attrs.get("is_scalar_condition", True):
        return bool(to_host(conds[0]).reshape(-1)[0])
    return all(c is not None and int(c.size) > 0 for c in conds)


def _conditional_block(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Run the sub-block in the same scope when the condition holds."""
    if _holds(ins["Cond"], attrs):
        ctx.executor.run_block(ctx.program, ctx.program.block(attrs["sub_block"]), ctx.scope)
    return {}


def _conditional_block_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """When the forward block ran: run its grad block (the sub-block's ops differentiated) in
    a scope of its own that reads through to this one, as Fluid runs it in the block's scope;
    the block's inputs take the gradients it wrote there, zeros for those it gave none, and
    zeros for all of them when the block did not run, except an input the block also writes
    (a tensor array written in place): its gradient then passes through unchanged.

    Its own scope keeps the grad block's writes apart: a gradient it does not compute is not
    read from an earlier step's value left in this scope, and its partial sums
    (``@RENAME@`` names) do not overwrite the enclosing block's of the same name."""
    held = _holds(ins["Cond"], attrs)
    written = set(ctx.op.input("Out"))
    outer = ctx.scope.vars
    local: dict[str, Any] = {}
    if held:
        grad_block = ctx.program.block(attrs["sub_block"])
        inner = ctx.scope._step_scope()
        local = inner.vars.maps[0]
        # what the block read and then overwrote: the incoming gradient is its new value's;
        # the grad block writes its old value's under the plain name (zero when it does not)
        for n in written:
            g = grad_var_name(n)
            if g + STEP_IN in grad_block.vars:
                local[g + STEP_IN] = outer.get(g)
        ctx.executor.run_block(ctx.program, grad_block, inner)
    grads = []
    for name, value, out in zip(ctx.op.input("Input"), ins.get("Input", []),
                                ctx.op.output("Input@GRAD"), strict=True):
        if out == EMPTY_VAR or value is None:
            grads.append(None)
            continue
        g = grad_var_name(name)
        grad = local.get(g)
        if grad is None and name in written and g + STEP_IN not in local:
            grad = outer.get(g)  # an array written in place: its gradient passes through
        grads.append(array_module(value).zeros_like(value) if grad is None else grad)
    return {"Input@GRAD": grads}


def _conditional_block_grad_maker(op: Any) -> list[dict]:
    """``conditional_block_grad`` with the grad block of the sub-block, built beside it: the
    gradients of the block's inputs from those of its outputs."""
    program = op.block.program
    body = program.block(op.attrs["sub_block"])
    outputs = list(op.outputs.get("Out", []))
    inputs = list(op.inputs.get("Input", []))
    no_grad = {grad_var_name(v.name) for v in body.vars.values() if v.stop_gradient}
    for name in inputs:
        var = op.block._find_var_recursive(name)
        if var is None or var.stop_gradient:
            no_grad.add(grad_var_name(name))
    seeds = [grad_var_name(n) for n in outputs]
    overwritten = [n for n in outputs if n in inputs and not _is_array(op.block, n)]
    grad_block = append_grad_block(body, no_grad, seeds, overwritten)
    return [{"type": "conditional_block_grad",
             "inputs": {"Cond": list(op.inputs["Cond"]), "Input": inputs, "Out": outputs,
                        "Out@GRAD": seeds, "Scope": list(op.outputs.get("Scope", []))},
             "outputs": {"Input@GRAD": [EMPTY_VAR if grad_var_name(n) in no_grad
                                        else grad_var_name(n) for n in inputs]},
             "attrs": {"sub_block": grad_block.idx,
                       "is_scalar_condition": op.attrs.get("is_scalar_condition", True)}}]


def _select_output(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Out[Mask] = X; the other outputs are left unset (their branches did not run)."""
    index = int(to_host(ins["Mask"][0]).reshape(-1)[0])
    names = ctx.op.output("Out")
    if not 0 <= index < len(names):
        raise ValueError(f"select_output: Mask is {index}, but there are {len(names)} outputs")
    return {"Out": [ins["X"][0] if i == index else None for i in range(len(names))]}


def _select_input_grad_maker(op: Any) -> list[dict]:
    return [{"type": "select_output",
             "inputs": {"X": [grad_var_name(op.outputs["Out"][0])], "Mask": op.inputs["Mask"]},
             "outputs": {"Out": [grad_var_name(n) for n in op.inputs["X"]]}, "attrs": {}}]


def _select_input(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Out = X[Mask] (``layers.cond``'s merge of its branches: only the branch that ran has
    computed its input)."""
    mask = to_host(ins["Mask"][0]).reshape(-1)
    index = int(mask[0])
    names = ctx.op.input("X")
    if not 0 <= index < len(names):
        raise ValueError(f"select_input: Mask is {index}, but there are {len(names)} inputs")
    value = ins["X"][index]
    if value is None:
        raise ValueError(f"select_input: input {index} ({names[index]!r}) was not computed: "
                         "its branch did not run")
    return {"Out": [value], LOD_KEY: {"Out": [attrs["_lods"]["X"][index]]}}


class LoopTape:
    """What a trained ``while`` keeps of its steps: for each step, the values at its start
    and those each op of the body wrote, of the variables ``names`` (the body's, which its
    grad block reads). ``step`` is the step ``while_grad`` is differentiating."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.starts: list[dict[str, Any]] = []
        self.writes: list[list[dict[str, Any]]] = []
        self.step = -1

    def values_after(self, op_index: int) -> dict[str, Any]:
        """The values of ``names`` once op ``op_index`` of the body ran, in step ``step``."""
        values = dict(self.starts[self.step])
        for written in self.writes[self.step][:op_index + 1]:
            values.update(written)
        return values


def _block_ops(program: Any, block: Any):
    """The ops of ``block`` and of the sub-blocks its ops run."""
    for op in block.ops:
        yield op
        if "sub_block" in op.attrs:
            yield from _block_ops(program, program.block(op.attrs["sub_block"]))


#: (program, its version, the loop's StepScopes) -> the names its grad block reads, or None
_TAPED: dict[tuple, frozenset[str] | None] = {}


def _taped_names(ctx: RunContext, body: Any) -> frozenset[str] | None:
    """The body's variables the loop's ``while_grad`` reads, or None when no ``while_grad``
    reads this loop's steps."""
    steps = ctx.op.output("StepScopes")[0]
    key = (id(ctx.program), ctx.program._version, steps)
    if key not in _TAPED:
        grads = [op for b in ctx.program.blocks for op in b.ops
                 if op.type == "while_grad" and op.input("StepScopes") == [steps]]
        names = None
        if grads:
            written = {n for op in _block_ops(ctx.program, body) for n in op.output_arg_names}
            read = {n for g in grads
                    for op in _block_ops(ctx.program, ctx.program.block(g.attrs["sub_block"]))
                    for n in op.input_arg_names if GRAD_SUFFIX not in n}
            names = frozenset(read & written)
        _TAPED[key] = names
    return _TAPED[key]


def _while(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    name = ctx.op.input("Condition")[0]
    program, block = ctx.program, ctx.program.block(attrs["sub_block"])
    vals = ctx.scope.vars

    def holds() -> bool:
        cond = vals.get(name)
        if cond is None:
            raise ValueError(f"while: its condition {name!r} was not computed before the loop")
        if int(cond.size) != 1:
            raise ValueError(f"while: its condition {name!r} must hold one bool, got shape "
                             f"{list(cond.shape)}")
        return bool(to_host(cond).reshape(-1)[0])

    names = None if attrs.get("is_test") else _taped_names(ctx, block)
    if names is None:
        while holds():
            ctx.executor.run_block(program, block, ctx.scope)
        return {}
    tape = LoopTape(names)
    # what each op wrote, those inside the blocks it runs (a cond's branch) included
    kept = [[n for o in [op, *(_block_ops(program, program.block(op.attrs["sub_block"]))
                               if "sub_block" in op.attrs else ())]
             for n in o.output_arg_names if n in names] for op in block.ops]
    def keep(i: int) -> None:
        tape.writes[-1].append({n: vals.get(n) for n in kept[i]})

    while holds():
        tape.starts.append({n: vals.get(n) for n in names})
        tape.writes.append([])
        ctx.executor.run_block(program, block, ctx.scope, trace=keep)
    return {"StepScopes": [tape]}


def _is_array(block: Any, name: str) -> bool:
    var = block._find_var_recursive(name)
    return var is not None and var.type == VarType.LOD_TENSOR_ARRAY


def _differentiable(block: Any, name: str) -> bool:
    var = block._find_var_recursive(name)
    return var is not None and not var.stop_gradient and (
        var.type == VarType.LOD_TENSOR_ARRAY or str(var.dtype).startswith("float"))


def _while_grad_maker(op: Any) -> list[dict]:
    """``while_grad`` with the loop body's grad block: the gradients of the loop's inputs
    from those of the variables it writes."""
    if op.attrs.get("is_test"):
        raise NotImplementedError(
            "append_backward through a While(is_test=True) loop: such a loop keeps none of "
            "its steps to differentiate; build it with is_test=False to train through it")
    program = op.block.program
    body = program.block(op.attrs["sub_block"])
    inputs = list(op.inputs.get("X", []))
    outputs = list(op.outputs.get("Out", []))
    no_grad = {grad_var_name(v.name) for v in body.vars.values() if v.stop_gradient}
    no_grad.update(grad_var_name(n) for n in {*inputs, *outputs}
                   if not _differentiable(op.block, n))
    _check_outer_readers(op, outputs)
    seeds = [grad_var_name(n) for n in outputs if grad_var_name(n) not in no_grad]
    carried = [n for n in outputs
               if grad_var_name(n) not in no_grad and not _is_array(op.block, n)]
    steps = list(op.outputs["StepScopes"])
    grad_block = append_loop_grad_block(
        body, no_grad, seeds, carried,
        lambda k: {"type": "while_step_state", "inputs": {"StepScopes": steps},
                   "outputs": {}, "attrs": {"forward_op": k}})
    return [{"type": "while_grad",
             "inputs": {"X": inputs, "Out": outputs,
                        "Out@GRAD": [grad_var_name(n) for n in outputs],
                        "StepScopes": steps},
             "outputs": {"X@GRAD": [EMPTY_VAR if grad_var_name(n) in no_grad
                                    else grad_var_name(n) for n in inputs]},
             "attrs": {"sub_block": grad_block.idx}}]


def _check_outer_readers(op: Any, outputs: list[str]) -> None:
    """Refuse a loop that overwrites a tensor whose value an earlier op's gradient reads: that
    gradient would see the loop's last value, not the one its op wrote."""
    written = {n for n in outputs if not _is_array(op.block, n)}
    ops = op.block.ops
    index = next(k for k, o in enumerate(ops)
                 if o.type == "while" and o.attrs.get("sub_block") == op.attrs["sub_block"])
    for before in ops[:index]:
        hit = written.intersection(before.output_arg_names)
        if not hit or registry.get(before.type).grad is None or before.type == "while":
            continue
        fwd_read = hit & _grad_reads(before)
        if fwd_read:
            name = sorted(fwd_read)[0]
            raise NotImplementedError(
                f"append_backward through a While loop that overwrites {name!r}: the gradient "
                f"of the {before.type!r} op that wrote it reads its value, which the loop "
                f"changes. Give the loop its own copy before the loop: "
                f"state = layers.assign({name}) (assign's gradient reads no value)")


def _grad_reads(op: Any) -> set[str]:
    """The forward variables the grad ops of ``op`` read."""
    from types import SimpleNamespace  # noqa: PLC0415

    view = SimpleNamespace(type=op.type, inputs=op.inputs, outputs=op.outputs,
                           attrs=op.attrs, block=op.block)
    try:
        descs = registry.get(op.type).grad(view)
    except NotImplementedError:
        return set()
    return {n for d in descs for names in d["inputs"].values() for n in names
            if GRAD_SUFFIX not in n}


def _while_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Run the body's grad block over the kept steps, last first (see the module's notes)."""
    vals = ctx.scope.vars
    tape = vals.get(ctx.op.input("StepScopes")[0])
    if not isinstance(tape, LoopTape):
        raise ValueError("while_grad: the while loop kept no steps to differentiate: it did "
                         "not run in this program run, or it is is_test=True")
    block = ctx.op.block
    grad_block = ctx.program.block(attrs["sub_block"])
    outputs = ctx.op.input("Out")
    carried = [n for n in outputs if grad_var_name(n) + STEP_IN in grad_block.vars]
    params = [n for n in ctx.op.input("X")
              if n not in outputs and not _is_array(block, n)]
    final = {n: vals.get(n) for n in tape.names}
    incoming = {n: vals.get(g) for n, g in zip(outputs, ctx.op.input("Out@GRAD"), strict=True)
                if n in carried}
    # a carried tensor nothing after the loop reads has no gradient yet: zeros of its value
    # (its steps still pass gradients on to what they read)
    shapes = {n: vals.get(n) for n in carried}
    for n in carried:
        if incoming[n] is None and shapes[n] is not None:
            incoming[n] = array_module(shapes[n]).zeros_like(shapes[n])
    sums: dict[str, Any] = {}
    for step in range(len(tape.starts) - 1, -1, -1):
        tape.step = step
        for n in carried:
            vals[grad_var_name(n) + STEP_IN] = incoming[n]
            vals.pop(grad_var_name(n), None)
        for n in params:
            vals.pop(grad_var_name(n), None)
        ctx.executor.run_block(ctx.program, grad_block, ctx.scope)
        for n in carried:
            g = vals.get(grad_var_name(n))
            incoming[n] = g if g is not None or shapes[n] is None else \
                array_module(shapes[n]).zeros_like(shapes[n])
        for n in params:
            g = vals.pop(grad_var_name(n), None)
            if g is not None:
                sums[n] = g if n not in sums else sums[n] + g
    vals.update(final)  # the forward values as the loop left them, for fetches
    inputs = set(ctx.op.input("X"))
    for n in carried:
        vals.pop(grad_var_name(n) + STEP_IN, None)
        if n not in inputs and incoming[n] is not None:
            # only written, so no X@GRAD: its value before the loop has this gradient
            vals[grad_var_name(n)] = incoming[n]
    grads = []
    for n, value in zip(ctx.op.input("X"), ins.get("X", []), strict=True):
        if n in incoming:
            g = incoming[n]
        elif n in params:
            g = sums.get(n)
        else:  # a tensor array the loop reads: its gradient array, filled in place
            g = vals.get(grad_var_name(n))
        if g is None and value is not None and not isinstance(value, LoDTensorArray):
            g = array_module(value).zeros_like(value)
        grads.append(g)
    return {"X@GRAD": grads}


def _while_step_state(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Put back the values forward op ``forward_op`` of the body left in the step being
    differentiated."""
    tape = ins["StepScopes"][0]
    ctx.scope.vars.update(tape.values_after(int(attrs["forward_op"])))
    return {}


def _read_from_array_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """X@GRAD[I] += Out@GRAD: the gradient array, grown as the forward array was."""
    name = ctx.op.output("X@GRAD")[0]
    grads = ctx.scope.vars.get(name)
    if not isinstance(grads, LoDTensorArray):
        grads = LoDTensorArray()
    d = ins["Out@GRAD"][0]
    if d is not None:
        index = _index(ins["I"][0], "read_from_array_grad")
        while len(grads) <= index:
            grads.append(LoDTensor())
        have = grads[index]._array
        lod = attrs["_lods"]["Out@GRAD"][0] or ()
        grads[index] = LoDTensor._of(d.copy() if have is None else have + d, lod,
                                     ctx.executor.place)
    return {"X@GRAD": [grads]}


def _write_to_array_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """X@GRAD = Out@GRAD[I] (zeros where none came), and item I of the gradient array is
    cleared: the write overwrote what was there before."""
    x, grads = ins["X"][0], ins["Out@GRAD"][0]
    index = _index(ins["I"][0], "write_to_array_grad")
    d = None
    if isinstance(grads, LoDTensorArray) and index < len(grads):
        d = grads[index]._array
        grads[index] = LoDTensor()
    return {"X@GRAD": [array_module(x).zeros_like(x) if d is None else d]}


def _read_from_array_grad_maker(op: Any) -> list[dict]:
    return [{"type": "read_from_array_grad",
             "inputs": {"I": list(op.inputs["I"]),
                        "Out@GRAD": [grad_var_name(op.outputs["Out"][0])]},
             "outputs": {"X@GRAD": [grad_var_name(op.inputs["X"][0])]}, "attrs": {}}]


def _write_to_array_grad_maker(op: Any) -> list[dict]:
    return [{"type": "write_to_array_grad",
             "inputs": {"X": list(op.inputs["X"]), "I": list(op.inputs["I"]),
                        "Out@GRAD": [grad_var_name(op.outputs["Out"][0])]},
             "outputs": {"X@GRAD": [grad_var_name(op.inputs["X"][0])]}, "attrs": {}}]


for _type, _kernel in (("conditional_block", _conditional_block), ("while", _while),
                       ("conditional_block_grad", _conditional_block_grad),
                       ("select_input", _select_input), ("select_output", _select_output),
                       ("write_to_array", _write_to_array),
                       ("read_from_array", _read_from_array),
                       ("lod_array_length", _array_length), ("while_grad", _while_grad),
                       ("while_step_state", _while_step_state),
                       ("read_from_array_grad", _read_from_array_grad),
                       ("write_to_array_grad", _write_to_array_grad)):
    registry.set_kernel(_type, _kernel)
registry.set_grad("while", _while_grad_maker)
registry.set_grad("read_from_array", _read_from_array_grad_maker)
registry.set_grad("write_to_array", _write_to_array_grad_maker)
registry.set_grad("conditional_block", _conditional_block_grad_maker)
registry.set_grad("select_input", _select_input_grad_maker)


# -- tensor_array_to_tensor (Fluid 1.8's layers.tensor_array_to_tensor) ---------------------
# Declared here with its kernel (dask_fluid imports this module on start). X is a runtime
# tensor array, so it is a host op, its gradient checked through programs
# (tests/core/test_tensor_array_to_tensor.py).
registry.register_signature("tensor_array_to_tensor", ("X",), ("Out", "OutIndex"),
                            {"axis": 1, "use_stack": False}, lod="none")
registry.register_signature("tensor_array_to_tensor_grad", ("X", "Out@GRAD"), ("X@GRAD",),
                            {"axis": 1, "use_stack": False}, optional=("Out@GRAD",))


def _array_items(op: str, name: str, array: Any) -> list:
    """The written items of the tensor array ``array`` (Fluid requires at least one)."""
    if array is None:  # an array no op has written yet: Fluid's scope holds it empty
        array = LoDTensorArray()
    if not isinstance(array, LoDTensorArray):
        raise ValueError(f"{op}: {name!r} is not a tensor array that array_write has written")
    if len(array) == 0:
        raise ValueError(f"{op}: the tensor array {name!r} is empty; it must hold at least "
                         "one item")
    items = [t._array for t in array]
    if any(a is None for a in items):
        missing = [k for k, a in enumerate(items) if a is None]
        raise ValueError(f"{op}: items {missing} of {name!r} were never written")
    return items


def _concat_axis(op: str, axis: int, rank: int, use_stack: bool) -> int:
    """``axis`` made non-negative: of the result's rank + 1 dims for a stack, rank for a
    concat (as Fluid's stack and concat take negative axes)."""
    n = rank + 1 if use_stack else rank
    if not -n <= axis < n:
        raise ValueError(f"{op}: axis {axis} is out of range for items of rank {rank} "
                         f"(use_stack={use_stack}); expected in [{-n}, {n})")
    return axis + n if axis < 0 else axis


def _tensor_array_to_tensor(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Out: the items concatenated along ``axis`` (stacked on a new ``axis`` with
    ``use_stack``); OutIndex: each item's size along ``axis``, int32, stacked too (Fluid's
    kernel reads ``inx_dims[axis]`` either way; a stack on a new last axis, where Fluid's
    index would be out of range, gives 1s)."""
    op = "tensor_array_to_tensor"
    items = _array_items(op, ctx.op.input("X")[0], ins["X"][0])
    use_stack = bool(attrs["use_stack"])
    axis = _concat_axis(op, int(attrs["axis"]), items[0].ndim, use_stack)
    xp = array_module(*items)
    shapes = {a.shape if use_stack else a.shape[:axis] + a.shape[axis + 1:] for a in items}
    if len(shapes) != 1:
        raise ValueError(f"{op}: the items' shapes {[list(a.shape) for a in items]} do not "
                         f"match (apart from axis {axis}" + (")" if not use_stack else
                                                             ", which a stack needs too)"))
    sizes = [a.shape[axis] if axis < a.ndim else 1 for a in items]
    out = xp.stack(items, axis=axis) if use_stack else xp.concatenate(items, axis=axis)
    return {"Out": [out], "OutIndex": [xp.asarray(sizes, dtype="int32")]}


def _tensor_array_to_tensor_grad(ins: dict, attrs: dict, outs: tuple,
                                 ctx: RunContext) -> dict:
    """X@GRAD[k] += the part of Out@GRAD that item k made (Fluid's concat_grad, or stack's
    split along the new axis), added into the gradient array in place as the other array
    grad ops do (several ops may read the array)."""
    op = "tensor_array_to_tensor_grad"
    items = _array_items(op, ctx.op.input("X")[0], ins["X"][0])
    name = ctx.op.output("X@GRAD")[0]
    grads = ctx.scope.vars.get(name)
    if not isinstance(grads, LoDTensorArray):
        grads = LoDTensorArray()
    d = ins["Out@GRAD"][0]
    if d is None:
        return {"X@GRAD": [grads]}
    use_stack = bool(attrs["use_stack"])
    axis = _concat_axis(op, int(attrs["axis"]), items[0].ndim, use_stack)
    xp = array_module(d)
    if use_stack:
        parts = [xp.take(d, k, axis=axis) for k in range(len(items))]
    else:
        bounds, start = [], 0
        for a in items:
            bounds.append((start, start + a.shape[axis]))
            start += a.shape[axis]
        index = [slice(None)] * d.ndim
        parts = []
        for lo, hi in bounds:
            index[axis] = slice(lo, hi)
            parts.append(d[tuple(index)])
    while len(grads) < len(items):
        grads.append(LoDTensor())
    for k, part in enumerate(parts):
        have = grads[k]._array
        part = xp.ascontiguousarray(part).astype(items[k].dtype, copy=True)
        # no LoD on the gradient items: Fluid's concat_grad sets none
        grads[k] = LoDTensor._of(part if have is None else have + part, (),
                                 ctx.executor.place)
    return {"X@GRAD": [grads]}


def _tensor_array_to_tensor_grad_maker(op: Any) -> list[dict]:
    return [{"type": "tensor_array_to_tensor_grad",
             "inputs": {"X": list(op.inputs["X"]),
                        "Out@GRAD": [grad_var_name(op.outputs["Out"][0])]},
             "outputs": {"X@GRAD": [grad_var_name(op.inputs["X"][0])]},
             "attrs": {"axis": op.attrs["axis"], "use_stack": op.attrs["use_stack"]}}]


registry.set_kernel("tensor_array_to_tensor", _tensor_array_to_tensor)
registry.set_kernel("tensor_array_to_tensor_grad", _tensor_array_to_tensor_grad)
registry.set_grad("tensor_array_to_tensor", _tensor_array_to_tensor_grad_maker)
