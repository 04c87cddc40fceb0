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

These run forward only. Training through them (Fluid's ``conditional_block_grad``,
``while_grad`` and the array ops' gradients, which re-run the blocks from their kept scopes)
is not implemented: building the backward pass of a loss that depends on one raises
``NotImplementedError`` naming the op, instead of leaving the parameters inside the block
without gradients. Learning-rate schedules (``piecewise_decay``'s Switch) and inference
loops (greedy or beam-search decoding) need no backward pass through them.
"""

from __future__ import annotations

from typing import Any, NoReturn

from .executor import RunContext
from .lod import LoDTensor, LoDTensorArray
from .ops import registry
from .ops.registry import LOD_KEY, to_host


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


def _conditional_block(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    """Run the sub-block in the same scope when the (scalar) condition holds, or, not scalar,
    when every condition input has elements (Fluid's rule)."""
    conds = ins["Cond"]
    flag = bool(to_host(conds[0]).reshape(-1)[0]) if attrs.get("is_scalar_condition", True) \
        else all(c is not None and int(c.size) > 0 for c in conds)
    if flag:
        ctx.executor.run_block(ctx.program, ctx.program.block(attrs["sub_block"]), ctx.scope)
    return {}


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
        "conditional_block_grad, while_grad and the tensor arrays' gradients): the loss "
        "depends on a ConditionalBlock/Switch/cond, a While loop or a tensor array. Use StaticRNN "
        "or DynamicRNN for a recurrence you train; keep these blocks for learning-rate "
        "schedules and inference (decoding), outside the loss")


for _type, _kernel in (("conditional_block", _conditional_block), ("while", _while),
                       ("select_input", _select_input),
                       ("write_to_array", _write_to_array),
                       ("read_from_array", _read_from_array),
                       ("lod_array_length", _array_length)):
    registry.set_kernel(_type, _kernel)
for _type in ("conditional_block", "select_input", "while", "write_to_array", "read_from_array"):
    registry.set_grad(_type, _no_gradient)
