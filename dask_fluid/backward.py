"""append_backward: the gradient ops of a loss, appended in reverse op order (Fluid's rules).

1. keep the forward ops the loss depends on;
2. append ``fill_constant`` (1.0) for ``loss@GRAD``;
3. ask each op's registered grad maker for its grad ops, in reverse;
4. drop gradients nobody may have (stop_gradient, ``no_grad_set``) and grad ops left with no
   output or no incoming gradient;
5. rename gradients written more than once (``x@GRAD@RENAME@k``) and ``sum`` them;
6. create the gradient variables and tag the last writer of each parameter gradient with
   ``op_role_var = [param, grad]``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from types import SimpleNamespace

from .framework import (
    EMPTY_VAR,
    GRAD_SUFFIX,
    OP_ROLE_KEY,
    OP_ROLE_VAR_KEY,
    Block,
    OpRole,
    Parameter,
    Variable,
    VarType,
    grad_var_name,
)
from .ops import registry

_RENAME = "@RENAME@"


def _strip_grad(name: str) -> str:
    pos = name.find(GRAD_SUFFIX)
    return name[:pos] if pos >= 0 else name


def _find_op_path(block: Block, loss: Variable) -> list:
    relevant = {loss.name}
    path = []
    for op in reversed(block.ops):
        if relevant.intersection(op.output_arg_names):
            path.append(op)
            relevant.update(op.input_arg_names)
    path.reverse()
    return path


def grad_descs(op_path: list, no_grad: set[str], seeds: Iterable[str]) -> list[dict]:
    """The grad op descriptions of ``op_path``, in reverse, starting from the gradients
    ``seeds``; the gradients repeated writes produce are renamed and summed (Fluid's rule).
    Used for the global block (seed: ``loss@GRAD``) and for the step block of a recurrent
    op (seeds: its outputs' and states' gradients)."""
    seeds = list(seeds)
    return _addup_repetitive_outputs(_grad_descs(op_path, no_grad, set(seeds)), seeds)


def _grad_descs(op_path: list, no_grad: set[str], seeds: set[str]) -> list[dict]:
    produced = set(seeds)
    descs: list[dict] = []
    for op in reversed(op_path):
        opdef = registry.get(op.type)
        if opdef.grad is None:
            continue
        # the block: the grad makers of ops with sub-blocks build grad blocks beside them
        view = SimpleNamespace(type=op.type, inputs=op.inputs, outputs=op.outputs,
                               attrs=op.attrs, block=op.block)
        for desc in opdef.grad(view):
            outputs = {slot: [EMPTY_VAR if n in no_grad else n for n in names]
                       for slot, names in desc["outputs"].items()}
            if all(n == EMPTY_VAR for names in outputs.values() for n in names):
                continue
            inputs, incoming = {}, False
            for slot, names in desc["inputs"].items():
                # by name, not slot: ops like scale take their incoming gradient in slot X
                grads = [n for n in names if GRAD_SUFFIX in n]
                if grads:
                    names = [n if GRAD_SUFFIX not in n or n in produced else EMPTY_VAR
                             for n in names]
                    incoming |= any(n in produced for n in grads)
                inputs[slot] = names
            if not incoming:
                continue
            produced.update(n for names in outputs.values() for n in names if n != EMPTY_VAR)
            descs.append(dict(desc, inputs=inputs, outputs=outputs))
    return descs


def _rename(descs: Iterable[dict], old: str, new: str) -> None:
    for desc in descs:
        for key in ("inputs", "outputs"):
            for names in desc[key].values():
                names[:] = [new if n == old else n for n in names]


def _addup_repetitive_outputs(descs: list[dict], seeds: Iterable[str] = ()) -> list[dict]:
    """Fluid's rule: every extra write of a gradient gets its own name, and a ``sum`` op
    restores the gradient right before its first reader (or at the end).

    ``seeds`` hold a value before the first op runs (a step block's output gradients, set by
    the recurrent op): a write to one is another part, summed with the seed's own value, which
    keeps its name."""
    pending: list[tuple[dict, int]] = []
    count: defaultdict[str, int] = defaultdict(int)
    renamed: defaultdict[str, list[str]] = defaultdict(list)
    pinned = set(seeds)
    for name in pinned:
        renamed[name] = [name]
    for idx, desc in enumerate(descs):
        ins = [n for names in desc["inputs"].values() for n in names]
        for name in ins:
            if len(renamed[name]) > 1:
                pending.append(({"type": "sum", "inputs": {"X": list(renamed[name])},
                                 "outputs": {"Out": [name]}, "attrs": {}}, idx))
                renamed[name] = [name]
        # (slot, position) of this op's outputs seen so far: one op may write a gradient twice
        # (elementwise_mul(x, x) writes x@GRAD as X@GRAD and as Y@GRAD)
        seen: list[tuple[list[str], int]] = []
        for _slot, names in desc["outputs"].items():
            for i, name in enumerate(names):
                if name == EMPTY_VAR or name in ins:
                    continue
                seen.append((names, i))
                if not renamed[name]:
                    renamed[name] = [name]
                    continue
                if len(renamed[name]) == 1 and name not in pinned:
                    first = f"{name}{_RENAME}{count[name]}"
                    count[name] += 1
                    renamed[name][0] = first
                    _rename(descs[:idx], name, first)
                    _rename((p for p, _ in pending), name, first)
                    for earlier, j in seen[:-1]:
                        if earlier[j] == name:
                            earlier[j] = first
                new = f"{name}{_RENAME}{count[name]}"
                count[name] += 1
                names[i] = new
                renamed[name].append(new)
    for name, parts in renamed.items():
        if len(parts) > 1:
            pending.append(({"type": "sum", "inputs": {"X": list(parts)},
                             "outputs": {"Out": [name]}, "attrs": {}}, len(descs)))
    for desc, pos in reversed(pending):
        descs.insert(pos, desc)
    return descs


def create_grad_vars(block: Block, descs: list[dict], seeds: Iterable[str] = ()) -> None:
    """Declare the variables ``descs`` write in ``block`` (SelectedRows where the op says),
    and the ``seeds`` they read that no op writes there (a step block's output gradients,
    which the recurrent grad op supplies at each step): every name a program uses is declared,
    as in Fluid."""
    for name in seeds:
        if block._find_var_recursive(name) is None:
            fwd = block._find_var_recursive(_strip_grad(name))
            block.create_var(name=name, shape=None if fwd is None else fwd.shape,
                             dtype="float32" if fwd is None else fwd.dtype)
    for desc in descs:
        sparse_slots = (registry.get(desc["type"]).sparse_outputs
                        if desc["attrs"].get("is_sparse") else ())
        if desc["type"] == "sum":
            # Fluid's sum infers SELECTED_ROWS when every input is one (a table looked up twice)
            ins = [block._find_var_recursive(n) for n in desc["inputs"]["X"]]
            if ins and all(v is not None and v.type == VarType.SELECTED_ROWS for v in ins):
                sparse_slots = ("Out",)
        for slot, names in desc["outputs"].items():
            sparse = slot in sparse_slots
            for name in names:
                if name == EMPTY_VAR or block.has_var(name):
                    continue
                fwd = block._find_var_recursive(_strip_grad(name))
                block.create_var(
                    name=name,
                    shape=None if fwd is None else fwd.shape,
                    dtype="float32" if fwd is None else fwd.dtype,
                    type=VarType.SELECTED_ROWS if sparse else VarType.LOD_TENSOR)


def append_grad_block(block: Block, no_grad: set[str], seeds: Sequence[str]) -> Block:
    """The grad block of a sub-block (a control-flow op's): its ops differentiated from the
    gradients ``seeds``, in a new block whose parent is ``block`` (the program's current
    block is left as it was); every name they use is declared there."""
    program = block.program
    descs = grad_descs(block.ops, no_grad, seeds)
    current = program.current_block_idx
    grad_block = program._create_block(parent_idx=block.idx)
    grad_block.forward_block_idx = block.idx
    program.current_block_idx = current
    create_grad_vars(grad_block, descs, seeds)
    for desc in descs:
        grad_block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
    return grad_block


def append_backward(loss: Variable, parameter_list: Iterable | None = None,
                    no_grad_set: Iterable | None = None) -> list[tuple[Parameter, Variable]]:
    """Append the backward pass of ``loss`` to its program.

    Parameters
    ----------
    loss : Variable
        A scalar (shape ``[1]``) variable of the global block.
    parameter_list : iterable of str or Parameter, optional
        Only these parameters get gradients returned (default: every trainable parameter).
    no_grad_set : iterable of str or Variable, optional
        Variables that must not receive a gradient.

    Returns
    -------
    list of (Parameter, Variable)
        Each trainable parameter with its gradient variable, in parameter creation order.
    """
    if not isinstance(loss, Variable):
        raise TypeError(f"loss must be a Variable, got {type(loss).__name__}")
    program = loss.block.program
    block = program.global_block()
    if loss.block is not block:
        raise ValueError("append_backward: the loss must live in the global block")
    if loss.shape is not None and list(loss.shape) not in ([1], [-1], []):
        raise ValueError(f"append_backward: loss {loss.name!r} must have shape [1] "
                         f"(reduce it with layers.mean), got {list(loss.shape)}")
    op_path = _find_op_path(block, loss)
    if not op_path:
        raise ValueError(f"append_backward: no op writes the loss {loss.name!r}")
    op_path[-1]._set_attr(OP_ROLE_KEY, OpRole.Forward | OpRole.Loss)

    no_grad = {grad_var_name(v.name) for v in block.vars.values() if v.stop_gradient}
    for v in no_grad_set or ():
        no_grad.add(grad_var_name(v.name if isinstance(v, Variable) else str(v)))

    loss_grad = grad_var_name(loss.name)
    block.create_var(name=loss_grad, shape=[1], dtype=loss.dtype)
    with program._op_role_guard(OpRole.Backward | OpRole.Loss):
        block.append_op("fill_constant", outputs={"Out": [loss_grad]},
                        attrs={"shape": [1], "dtype": loss.dtype, "value": 1.0})

    descs = grad_descs(op_path, no_grad, [loss_grad])
    create_grad_vars(block, descs)
    with program._op_role_guard(OpRole.Backward):
        for desc in descs:
            block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])

    wanted = None
    if parameter_list is not None:
        wanted = {p.name if isinstance(p, Variable) else str(p) for p in parameter_list}
    params_grads = []
    for param in block.all_parameters():
        if not param.trainable or (wanted is not None and param.name not in wanted):
            continue
        gname = grad_var_name(param.name)
        if not block.has_var(gname):
            continue
        grad = block.var(gname)
        params_grads.append((param, grad))
        for op in reversed(block.ops):
            if gname in op.output_arg_names:
                role_var = [param.name, gname] + list(op.attrs.get(OP_ROLE_VAR_KEY, []))
                op._set_attr(OP_ROLE_VAR_KEY, role_var)
                break
    return params_grads
