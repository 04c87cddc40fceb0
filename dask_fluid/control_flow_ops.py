"""The control-flow ops (Fluid 1.8's ``ConditionalBlock``/``Switch``, ``layers.While``) and
the tensor-array ops (``create_array``, ``array_write``, ``array_read``, ``array_length``):
the kernels and their gradient rules.

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
get zero gradients when it did not; ``select_input`` (``layers.cond``'s merge) has Fluid's
``select_output``, which routes the gradient to the branch that ran. So ``ConditionalBlock``,
``Switch`` and ``cond`` train. Training through a loop (``while_grad`` and the tensor arrays'
gradients, which re-run the steps from kept scopes) is not implemented: building the
backward pass of a loss that depends on a ``while`` or a tensor-array op raises
``NotImplementedError`` naming the op, instead of leaving the parameters inside the loop
without gradients. Inference loops (greedy or beam-search decoding) need none.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .backward import append_grad_block
from .executor import RunContext
from .framework import EMPTY_VAR, grad_var_name
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
    array = ins["X"][0]
    if not isinstance(array, LoDTensorArray):
        raise ValueError(f"lod_array_length: {ctx.op.input('X')[0]!r} is not a tensor array")
    xp = ctx.executor._xp
    return {"Out": [xp.asarray([len(array)], dtype="int64")]}


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
    """When the forward block ran: run its grad block (the sub-block's ops differentiated),
    whose gradients of the block's inputs land in the scope; zeros for the inputs it gives no
    gradient, and for all of them when the block did not run."""
    held = _holds(ins["Cond"], attrs)
    if held:
        ctx.executor.run_block(ctx.program, ctx.program.block(attrs["sub_block"]), ctx.scope)
    grads = []
    for name, value, out in zip(ctx.op.input("Input"), ins.get("Input", []),
                                ctx.op.output("Input@GRAD"), strict=True):
        if out == EMPTY_VAR or value is None:
            grads.append(None)
            continue
        g = ctx.scope.vars.get(grad_var_name(name)) if held else None
        grads.append(array_module(value).zeros_like(value) if g is None else g)
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
    grad_block = append_grad_block(body, no_grad, seeds)
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


def _while(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    name = ctx.op.input("Condition")[0]
    program, block = ctx.program, ctx.program.block(attrs["sub_block"])

    def holds() -> bool:
        cond = ctx.scope.vars.get(name)
        if cond is None:
            raise ValueError(f"while: its condition {name!r} was not computed before the loop")
        if int(cond.size) != 1:
            raise ValueError(f"while: its condition {name!r} must hold one bool, got shape "
                             f"{list(cond.shape)}")
        return bool(to_host(cond).reshape(-1)[0])

    while holds():
        ctx.executor.run_block(program, block, ctx.scope)
    return {}


def _no_gradient(op: Any) -> NoReturn:
    raise NotImplementedError(
        f"append_backward through the {op.type!r} op is not implemented in dask_fluid (Fluid's "
        "while_grad and the tensor arrays' gradients): the loss depends on a While loop or a "
        "tensor array. Use StaticRNN or DynamicRNN for a recurrence you train; keep While "
        "loops for inference (decoding), outside the loss")


for _type, _kernel in (("conditional_block", _conditional_block), ("while", _while),
                       ("conditional_block_grad", _conditional_block_grad),
                       ("select_input", _select_input), ("select_output", _select_output),
                       ("write_to_array", _write_to_array),
                       ("read_from_array", _read_from_array),
                       ("lod_array_length", _array_length)):
    registry.set_kernel(_type, _kernel)
for _type in ("while", "write_to_array", "read_from_array"):
    registry.set_grad(_type, _no_gradient)
registry.set_grad("conditional_block", _conditional_block_grad_maker)
registry.set_grad("select_input", _select_input_grad_maker)
