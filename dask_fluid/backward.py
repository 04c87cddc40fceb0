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
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any

from .framework import (
    EMPTY_VAR,
    GRAD_SUFFIX,
    OP_DEVICE_KEY,
    OP_ROLE_KEY,
    OP_ROLE_VAR_KEY,
    Block,
    OpRole,
    Parameter,
    Program,
    Variable,
    VarType,
    grad_var_name,
    variable_list,
)
from .ops import registry

_RENAME = "@RENAME@"
#: the prefix of the gradients of a program's second, third ... backward pass
_LATER_PASS = "grad/"
#: the key of a grad op description listing its value slots: inputs that hold an earlier
#: backward pass's gradients as plain values (a double grad op's ``DOut``), which this pass
#: neither treats as incoming gradients nor renames (see ``ops.math_ops.double_grad_maker``)
VALUE_SLOTS = "value_slots"


def _strip_grad(name: str) -> str:
    pos = name.find(GRAD_SUFFIX)
    name = name[:pos] if pos >= 0 else name
    while name.startswith(_LATER_PASS):  # a later backward pass's gradient (_later_pass_names)
        name = name[len(_LATER_PASS):]
    return name


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
    descs = _grad_descs(op_path, no_grad, set(seeds))
    return _addup_repetitive_outputs(descs, seeds, _array_grads(op_path, descs))


def _array_grads(op_path: list, descs: list[dict]) -> set[str]:
    """The gradients in ``descs`` of tensor arrays: their grad ops add into them in place, so
    several writers share the name (no renaming, no ``sum``)."""
    if not op_path:
        return set()
    block = op_path[0].block
    names = {n for d in descs for key in ("inputs", "outputs") for ns in d[key].values()
             for n in ns if GRAD_SUFFIX in n}
    arrays = set()
    for name in names:
        fwd = block._find_var_recursive(_strip_grad(name))
        if fwd is not None and fwd.type == VarType.LOD_TENSOR_ARRAY:
            arrays.add(name)
    return arrays


def _grad_descs(op_path: list, no_grad: set[str], seeds: set[str]) -> list[dict]:
    produced = set(seeds)
    path_vars = {n for op in op_path for n in (*op.input_arg_names, *op.output_arg_names)}
    descs: list[dict] = []
    for index in range(len(op_path) - 1, -1, -1):
        op = op_path[index]
        opdef = registry.get(op.type)
        if opdef.grad is None:
            if any(grad_var_name(n) in produced for n in op.output_arg_names):
                _no_gradient(op)
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
            values = set(desc.get(VALUE_SLOTS, ()))
            for slot, names in desc["inputs"].items():
                # by name, not slot: ops like scale take their incoming gradient in slot X.
                # But in a later pass an earlier pass's gradients are values: in a double
                # grad op's value slots (DOut), and as the op path's own variables (the
                # square(x@GRAD) of a gradient penalty) unless this pass produced the name
                if slot in values:
                    grads = []
                elif slot.endswith(GRAD_SUFFIX):
                    grads = [n for n in names if GRAD_SUFFIX in n]
                else:
                    grads = [n for n in names if GRAD_SUFFIX in n
                             and (n in produced or n not in path_vars)]
                if grads:
                    names = [EMPTY_VAR if n in grads and n not in produced else n
                             for n in names]
                    incoming |= any(n in produced for n in grads)
                inputs[slot] = names
            if not incoming:
                continue
            produced.update(n for names in outputs.values() for n in names if n != EMPTY_VAR)
            attrs = desc["attrs"]
            if OP_DEVICE_KEY in op.attrs:  # Fluid 1.8: grad ops run where their forward op ran
                attrs = {**attrs, OP_DEVICE_KEY: op.attrs[OP_DEVICE_KEY]}
            # forward_op: the op of op_path it differentiates (a loop's grad block restores
            # that op's values before its grad ops run); append_op takes only the op's fields
            descs.append(dict(desc, inputs=inputs, outputs=outputs, attrs=attrs,
                              forward_op=index))
    return descs


def _no_gradient(op: object) -> None:
    """A gradient reached a grad op (the gradient of a gradient: a loss over what
    ``gradients`` appended). Forward ops without a gradient stop it, as in Fluid; dropping it
    at a grad op would give a silently wrong gradient, so that is an error."""
    if op.type.endswith("_grad"):
        raise NotImplementedError(
            f"the gradient of {op.type!r} (a second-order gradient, through the ops that "
            "fluid.gradients appended) is not implemented in dask_fluid")


def _later_pass_names(block: Block, descs: list[dict]) -> dict[str, str]:
    """Fluid 1.8's rule for a program's second, third ... backward pass (``append_backward``
    or ``gradients`` again): a gradient it writes whose name an earlier pass declared gets
    ``grad/`` once per pass before it, so that the earlier pass's gradients keep their
    values. Renames ``descs`` in place; returns old name -> new name."""
    times = block.program._appending_grad_times
    renamed: dict[str, str] = {}
    if times <= 1:
        return renamed
    for desc in descs:
        values = desc.get(VALUE_SLOTS, ())
        for slot, names in desc["inputs"].items():
            if slot not in values:  # a value slot reads the earlier pass's gradient
                names[:] = [renamed.get(n, n) for n in names]
        for names in desc["outputs"].values():
            for i, name in enumerate(names):
                if GRAD_SUFFIX in name and (name in renamed or block.has_var(name)):
                    names[i] = renamed.setdefault(name, _LATER_PASS * times + name)
    return renamed


def _rename(descs: Iterable[dict], old: str, new: str) -> None:
    for desc in descs:
        values = desc.get(VALUE_SLOTS, ())  # an earlier pass's variables keep their names
        for key in ("inputs", "outputs"):
            for slot, names in desc[key].items():
                if key == "outputs" or slot not in values:
                    names[:] = [new if n == old else n for n in names]


def _addup_repetitive_outputs(descs: list[dict], seeds: Iterable[str] = (),
                              in_place: Iterable[str] = ()) -> list[dict]:
    """Fluid's rule: every extra write of a gradient gets its own name, and a ``sum`` op
    restores the gradient right before its first reader (or at the end).

    ``seeds`` hold a value before the first op runs (a step block's output gradients, set by
    the recurrent op): a write to one is another part, summed with the seed's own value, which
    keeps its name. The writers of an ``in_place`` gradient (a tensor array's) add into it,
    so its writes keep the one name."""
    in_place = set(in_place)
    pending: list[tuple[dict, int]] = []
    count: defaultdict[str, int] = defaultdict(int)
    renamed: defaultdict[str, list[str]] = defaultdict(list)
    first_write: dict[str, int] = {}
    pinned = set(seeds)
    for name in pinned:
        renamed[name] = [name]
    for idx, desc in enumerate(descs):
        # a value slot reads an earlier pass's gradient, not this pass's parts
        ins = [n for slot, names in desc["inputs"].items()
               if slot not in desc.get(VALUE_SLOTS, ()) for n in names]
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
                if name == EMPTY_VAR or name in ins or name in in_place:
                    continue
                seen.append((names, i))
                if not renamed[name]:
                    renamed[name] = [name]
                    first_write[name] = idx
                    continue
                if len(renamed[name]) == 1 and name not in pinned:
                    first = f"{name}{_RENAME}{count[name]}"
                    count[name] += 1
                    renamed[name][0] = first
                    # from the first write on: a read before it is of another variable of
                    # that name (a later backward pass reads the earlier pass's x@GRAD)
                    _rename(descs[first_write.get(name, 0):idx], name, first)
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
            kind = (VarType.LOD_TENSOR_ARRAY if fwd is not None
                    and fwd.type == VarType.LOD_TENSOR_ARRAY else VarType.LOD_TENSOR)
            block.create_var(name=name, shape=None if fwd is None else fwd.shape,
                             dtype="float32" if fwd is None else fwd.dtype, type=kind)
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
                kind = VarType.SELECTED_ROWS if sparse else VarType.LOD_TENSOR
                if fwd is not None and fwd.type == VarType.LOD_TENSOR_ARRAY:
                    kind = VarType.LOD_TENSOR_ARRAY
                block.create_var(
                    name=name,
                    shape=None if fwd is None else fwd.shape,
                    dtype="float32" if fwd is None else fwd.dtype,
                    type=kind)


#: the suffix under which a grad block reads the incoming gradient of a tensor its block
#: overwrites (a loop step's carried tensor: from the later steps); ``<name>@GRAD`` is then
#: the gradient of its value before the block ran, which the grad ops write
STEP_IN = "@STEP_IN"


def append_grad_block(block: Block, no_grad: set[str], seeds: Sequence[str],
                      overwritten: Iterable[str] = ()) -> Block:
    """The grad block of a sub-block (a control-flow op's): its ops differentiated from the
    gradients ``seeds``, in a new block whose parent is ``block`` (the program's current
    block is left as it was); every name they use is declared there.

    ``overwritten``: outer tensors the block reads and then writes (a conditional block's
    ``assign(f(h), h)``). Their incoming gradient (of the new value, which the grad ops of
    the block's readers of the new value add to) is ``<name>@GRAD@STEP_IN`` and
    ``<name>@GRAD`` is the gradient of the old value, which the grad ops write: the two are
    not summed (:func:`_step_in_gradients`)."""
    seeds = list(seeds)
    descs = _grad_descs(block.ops, no_grad, set(seeds))
    incoming = _step_in_gradients(block.ops, descs, overwritten)
    renamed = {grad_var_name(n) for n in overwritten}
    # the incoming gradients are parts of their tensors' new values' gradients: the grad ops
    # of the ops that read a new value add into them
    descs = _addup_repetitive_outputs(descs, [*(s for s in seeds if s not in renamed),
                                              *incoming], _array_grads(block.ops, descs))
    return _grad_block(block, descs, [*seeds, *incoming])


def _step_in_gradients(ops: Sequence[Any], descs: list[dict],
                       overwritten: Iterable[str]) -> list[str]:
    """Name the gradient of each overwritten tensor's value at the end of the block (a loop
    step's carried tensor, a branch's ``assign(f(h), h)``) ``<name>@GRAD@STEP_IN`` in
    ``descs`` (renamed in place); those names.

    That value is the one the block's last write of the tensor (op ``last``) leaves: the grad
    ops of the ops after ``last`` (which read it) write its gradient, and those of ``last``
    read it. ``<name>@GRAD`` is left to the earlier values, the one at the block's start
    last written. Renaming by op, not at the first gradient write, keeps the gradient that
    comes in from outside (the later steps) when an op reads the tensor after its last write
    (``increment(i)`` then ``i * i``): that gradient and the reader's are of one value, and
    the reader's is not taken for the old value's."""
    incoming = []
    for name in overwritten:
        grad = grad_var_name(name)
        last = max((k for k, op in enumerate(ops) if name in op.output_arg_names), default=-1)
        for desc in descs:
            k = desc.get("forward_op", -1)
            if k < last:
                continue
            values = desc.get(VALUE_SLOTS, ())
            keys = ("inputs",) if k == last else ("inputs", "outputs")
            for key in keys:  # op ``last``'s own grad writes the value before it
                for slot, names in desc[key].items():
                    if key == "outputs" or slot not in values:
                        names[:] = [grad + STEP_IN if n == grad else n for n in names]
        incoming.append(grad + STEP_IN)
    return incoming


def append_loop_grad_block(block: Block, no_grad: set[str], seeds: Sequence[str],
                           carried: Iterable[str], state_op: Callable[[int], dict]) -> Block:
    """The grad block of a loop body (``while_grad``'s), run once per step, last step first.

    As :func:`append_grad_block`, with two differences. The gradients of the loop-carried
    tensors ``carried`` (outer tensors the body overwrites) come in as
    ``<name>@GRAD@STEP_IN`` and go out as ``<name>@GRAD``: a step's gradient of such a
    tensor's old value is not summed with that of its new value. And before the grad ops of
    the body's op ``k`` comes the op ``state_op(k)`` builds, which puts back the values op
    ``k`` left (the step's values, overwritten by later ops and steps)."""
    descs = _grad_descs(block.ops, no_grad, set(seeds))
    incoming = _step_in_gradients(block.ops, descs, carried)
    arrays = _array_grads(block.ops, descs)
    # as in append_grad_block: readers of a tensor's last value add into its incoming gradient
    descs = _addup_repetitive_outputs(descs, [*(s for s in seeds if s in arrays), *incoming],
                                      arrays)
    ordered, seen = [], set()
    for desc in descs:
        k = desc.get("forward_op")
        if k is not None and k not in seen:
            seen.add(k)
            ordered.append(state_op(k))
        ordered.append(desc)
    return _grad_block(block, ordered, [*seeds, *incoming])


def _grad_block(block: Block, descs: list[dict], seeds: Sequence[str]) -> Block:
    program = block.program
    current = program.current_block_idx
    grad_block = program._create_block(parent_idx=block.idx)
    grad_block.forward_block_idx = block.idx
    program.current_block_idx = current
    create_grad_vars(grad_block, descs, seeds)
    for desc in descs:
        grad_block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
    return grad_block


def append_backward(loss: Variable, parameter_list: Iterable | None = None,
                    no_grad_set: Iterable | None = None,
                    callbacks: Sequence[Callable[..., Any]] | None = None
                    ) -> list[tuple[Parameter, Variable]]:
    """Append the backward pass of ``loss`` to its program.

    Parameters
    ----------
    loss : Variable
        A scalar (shape ``[1]``) variable of the global block.
    parameter_list : iterable of str or Parameter, optional
        Only these parameters get gradients returned (default: every trainable parameter).
    no_grad_set : iterable of str or Variable, optional
        Variables that must not receive a gradient.
    callbacks : list of callable, optional
        Fluid 1.8's: each is called as ``cb(block=block, context=grad_to_var)`` right after
        each grad op (``sum`` ops included) is appended, ``grad_to_var`` mapping this pass's
        gradient names to their forward variables' (``"__current_op_desc__"`` to the op just
        appended); ``fluid.clip.error_clip_callback`` is one.

    Returns
    -------
    list of (Parameter, Variable)
        Each trainable parameter with its gradient variable, in parameter creation order.
    """
    if not isinstance(loss, Variable):
        raise TypeError(f"loss must be a Variable, got {type(loss).__name__}")
    if callbacks is not None:
        if not isinstance(callbacks, (list, tuple)):
            raise TypeError(f"append_backward: callbacks must be a list of callables, got "
                            f"{type(callbacks).__name__}")
        for cb in callbacks:
            if not callable(cb):
                raise ValueError(f"append_backward: callback {cb!r} must be a callable object")
    program, block, op_path, no_grad = loss_op_path(loss, no_grad_set)
    op_path[-1]._set_attr(OP_ROLE_KEY, OpRole.Forward | OpRole.Loss)
    descs = grad_descs(op_path, no_grad, [grad_var_name(loss.name)])
    return append_grad_ops(loss, descs, parameter_list, callbacks)


def _names(values: Any, what: str) -> list[str]:
    """The names in ``values``, a set, list or tuple of Variables or str (None: none), with
    Fluid 1.8's TypeErrors for anything else (``_get_no_grad_set_name``, ``check_type``)."""
    if values is None:
        return []
    if not isinstance(values, (set, list, tuple)):
        raise TypeError(f"the type of {what} should be set, list or tuple, but received "
                        f"{type(values).__name__}")
    names = []
    for v in values:
        if isinstance(v, Variable):
            names.append(v.name)
        elif isinstance(v, str):
            names.append(v)
        else:
            raise TypeError(f"the type of {what}'s members must be Variable or str, but "
                            f"received {type(v).__name__}")
    return names


def loss_op_path(loss: Variable, no_grad_set: Iterable | None
                 ) -> tuple[Program, Block, list, set[str]]:
    """What a backward pass of ``loss`` starts from (``append_backward``, the recompute
    pass): its program and global block, the forward ops ``loss`` depends on, and the
    gradient names nobody may have (``stop_gradient`` variables and ``no_grad_set``).

    Raises
    ------
    TypeError, ValueError
        ``loss`` is not a Variable of the global block of shape ``[1]``, or no op writes it.
    """
    if not isinstance(loss, Variable):
        raise TypeError(f"loss must be a Variable, got {type(loss).__name__}")
    program = loss.block.program
    block = program.global_block()
    if loss.block is not block:
        raise ValueError("append_backward: the loss must live in the global block")
    if program.current_block() is not block:
        # Fluid 1.8 puts such a pass in a grad block of the branch, run only when the branch
        # is; here its ops would join the global block and run every step, whatever the branch
        raise NotImplementedError(
            "append_backward / minimize inside a control-flow block (a layers.cond, case or "
            "switch_case branch, a Switch case, a While body) is not implemented in "
            "dask_fluid: call it outside the block, on a loss built from the block's outputs")
    if loss.shape is not None and list(loss.shape) not in ([1], [-1], []):
        raise ValueError(f"append_backward: loss {loss.name!r} must have shape [1] "
                         f"(reduce it with layers.mean), got {list(loss.shape)}")
    op_path = _find_op_path(block, loss)
    if not op_path:
        raise ValueError(f"append_backward: no op writes the loss {loss.name!r}")
    no_grad = {grad_var_name(v.name) for v in block.vars.values() if v.stop_gradient}
    no_grad.update(grad_var_name(n) for n in _names(no_grad_set, "no_grad_set"))
    return program, block, op_path, no_grad


def append_grad_ops(loss: Variable, descs: list[dict], parameter_list: Iterable | None,
                    callbacks: Sequence[Callable[..., Any]] | None = None
                    ) -> list[tuple[Parameter, Variable]]:
    """Append a backward pass's grad ops ``descs`` of ``loss``: the ``loss@GRAD`` seed (a
    ``fill_constant`` of 1), the later-pass renames (``_later_pass_names``), the variables,
    the ops (``callbacks`` after each), and return :func:`param_grads_written`."""
    program = loss.block.program
    block = program.global_block()
    program._appending_grad_times += 1
    loss_grad = grad_var_name(loss.name)
    seed = {"type": "fill_constant", "inputs": {}, "outputs": {"Out": [loss_grad]},
            "attrs": {"shape": [1], "dtype": loss.dtype, "value": 1.0}}
    renamed = _later_pass_names(block, [seed, *descs])
    block.create_var(name=seed["outputs"]["Out"][0], shape=[1], dtype=loss.dtype)
    with program._op_role_guard(OpRole.Backward | OpRole.Loss):
        block.append_op("fill_constant", outputs=seed["outputs"], attrs=seed["attrs"])
    create_grad_vars(block, descs)
    # Fluid's grad_to_var: the gradients the grad ops write (not the @RENAME@ parts a sum adds
    # up) -> their forward variables
    grad_to_var: dict[str, Any] = {
        n: _strip_grad(n) for d in descs for names in d["outputs"].values() for n in names
        if n.endswith(GRAD_SUFFIX) and _RENAME not in n}
    with program._op_role_guard(OpRole.Backward):
        for desc in descs:
            op = block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
            grad_to_var["__current_op_desc__"] = op
            for cb in callbacks or ():
                cb(block=block, context=grad_to_var)

    return param_grads_written(block, descs, parameter_list, renamed)


def param_grads_written(block: Block, descs: list[dict], parameter_list: Iterable | None,
                        renamed: dict[str, str]) -> list[tuple[Variable, Variable]]:
    """Each trainable parameter, or each variable of ``parameter_list`` when given (in its
    order; any variable of the block, as in Fluid 1.8: a layer's output too), with the
    gradient a backward pass's ``descs`` wrote (under its ``renamed`` name), the last writer
    of each tagged ``op_role_var = [param, grad]`` (Fluid 1.8's ``grad_info_map``).

    Only this pass's gradients: an earlier pass (``fluid.gradients`` of a critic, before a
    gradient penalty's ``minimize``) may have declared one this pass never writes."""
    written = {n for d in descs for names in d["outputs"].values() for n in names}
    if parameter_list is None:
        chosen = [p for p in block.all_parameters() if p.trainable]
    else:
        names = dict.fromkeys(_names(parameter_list, "parameter_list"))
        missing = [n for n in names if not block.has_var(n)]
        if missing:
            raise ValueError(f"parameter_list names {missing}, which are not variables of "
                             "the loss's program")
        chosen = [block.var(n) for n in names]
    params_grads = []
    for param in chosen:
        gname = grad_var_name(param.name)
        gname = renamed.get(gname, gname)
        if gname not in written or not block.has_var(gname):
            continue
        params_grads.append((param, block.var(gname)))
        for op in reversed(block.ops):
            if gname in op.output_arg_names:
                role_var = [param.name, gname] + list(op.attrs.get(OP_ROLE_VAR_KEY, []))
                op._set_attr(OP_ROLE_VAR_KEY, role_var)
                break
    return params_grads


def _find_op_path_between(block: Block, targets: list[Variable], inputs: list[Variable],
                          no_grad: set[str]) -> list:
    """Fluid 1.8's ``_find_op_path_`` with inputs: the ops that read (through other ops) one
    of ``inputs`` and that ``targets`` depend on. The variables those ops read besides what
    flows from ``inputs`` get no gradient when they stop gradients (added to ``no_grad``)."""
    reached = {v.name for v in inputs}
    forward = []
    for op in block.ops:
        if reached.intersection(op.input_arg_names):
            reached.update(n for n in op.output_arg_names if n not in no_grad)
            forward.append(op)
    needed = {v.name for v in targets}
    path = []
    for op in reversed(forward):
        if needed.intersection(op.output_arg_names):
            needed.update(n for n in op.input_arg_names if n not in no_grad)
            path.append(op)
    path.reverse()
    for op in path:
        for name in op.input_arg_names:
            var = block._find_var_recursive(name)
            if name not in reached and var is not None and var.stop_gradient:
                no_grad.add(name)
    return path


def gradients(targets: Variable | Sequence[Variable], inputs: Variable | Sequence[Variable],
              target_gradients: Variable | Sequence[Variable | None] | None = None,
              no_grad_set: Iterable[Variable | str] | None = None) -> list[Variable | None]:
    """Append the ops that compute the gradients of ``targets`` with respect to ``inputs``
    (Fluid 1.8's ``fluid.gradients``, ``backward.calc_gradient``).

    Each target's gradient starts as ``target_gradients``' entry, or as ones of the target's
    shape (a ``shape`` and a ``fill_constant`` op, as Fluid builds them); several targets'
    gradients are summed where they meet. Like Fluid, an input that stops gradients
    (``stop_gradient=True``, the default of data layers) gets none: set
    ``x.stop_gradient = False`` first.

    Parameters
    ----------
    targets : Variable or list of Variable
    inputs : Variable or list of Variable
    target_gradients : Variable or list of (Variable or None), optional
        Each of the shape of its target.
    no_grad_set : iterable of Variable or str, optional
        Variables whose gradients are not computed.

    Returns
    -------
    list of (Variable or None)
        The gradient of each input, None where none reaches it.

    Raises
    ------
    ValueError
        The lists differ in length, a target gradient's shape differs from its target's, or
        a variable is not in the program's global block.
    """
    targets = variable_list(targets, "fluid.gradients: targets")
    inputs = variable_list(inputs, "fluid.gradients: inputs")
    if target_gradients is None:
        tgrads: list[Variable | None] = [None] * len(targets)
    else:
        tgrads = (list(target_gradients) if isinstance(target_gradients, (list, tuple))
                  else [target_gradients])
        for g in tgrads:
            if g is not None and not isinstance(g, Variable):
                raise TypeError(f"fluid.gradients: target_gradients must be Variables (None "
                                f"for ones), got {type(g).__name__}")
    if len(tgrads) != len(targets):
        raise ValueError(f"fluid.gradients: {len(targets)} targets but {len(tgrads)} "
                         "target_gradients; give one per target (None for ones)")
    program = targets[0].block.program
    block = program.global_block()
    for v in [*targets, *inputs, *(g for g in tgrads if g is not None)]:
        if v.block is not block:
            raise ValueError(f"fluid.gradients: {v.name!r} is not a variable of the global "
                             "block of the targets' program")
    no_grad = {v.name for v in block.vars.values() if v.stop_gradient}
    no_grad.update(_names(no_grad_set, "no_grad_set"))
    no_grad.difference_update(v.name for v in inputs if not v.stop_gradient)
    op_path = _find_op_path_between(block, targets, inputs, no_grad)

    program._appending_grad_times += 1
    seeds, given_names, ones = [], {}, []
    for target, given in zip(targets, tgrads, strict=True):
        gname = grad_var_name(target.name)
        seeds.append(gname)
        if given is None:
            ones.append(target)
            continue
        if (target.shape is not None and given.shape is not None
                and list(given.shape) != list(target.shape)):
            raise ValueError(f"fluid.gradients: the gradient {given.name!r} of target "
                             f"{target.name!r} has shape {list(given.shape)}, the target "
                             f"{list(target.shape)}")
        given_names[gname] = given.name
    descs = grad_descs(op_path, {grad_var_name(n) for n in no_grad}, seeds)
    for old, new in given_names.items():
        _rename(descs, old, new)
    # ones of each target's shape, read at run time (Fluid 1.8: shape, then fill_constant)
    fills = [{"type": "fill_constant", "inputs": {"ShapeTensor": [t.name + "_shape"]},
              "outputs": {"Out": [grad_var_name(t.name)]},
              "attrs": {"shape": list(t.shape or ()), "value": 1.0, "dtype": t.dtype}}
             for t in ones]
    renamed = _later_pass_names(block, [*fills, *descs])
    with program._op_role_guard(OpRole.Backward):
        for target, fill in zip(ones, fills, strict=True):
            shape_name = target.name + "_shape"
            if not block.has_var(shape_name):
                block.create_var(name=shape_name, shape=[len(target.shape or ())],
                                 dtype="int32", stop_gradient=True)
            block.append_op("shape", {"Input": [target.name]}, {"Out": [shape_name]})
            block.create_var(name=fill["outputs"]["Out"][0], shape=target.shape,
                             dtype=target.dtype)
            block.append_op("fill_constant", fill["inputs"], fill["outputs"], fill["attrs"])
        create_grad_vars(block, descs)
        for desc in descs:
            block.append_op(desc["type"], desc["inputs"], desc["outputs"], desc["attrs"])
    written = {n for d in [*fills, *descs] for names in d["outputs"].values() for n in names}
    written.update(given_names.values())
    out: list[Variable | None] = []
    for v in inputs:
        gname = grad_var_name(v.name)
        gname = renamed.get(gname, given_names.get(gname, gname))
        out.append(block.var(gname) if gname in written and block.has_var(gname) else None)
    return out


def calc_gradient(targets: Variable | Sequence[Variable], inputs: Variable | Sequence[Variable],
                  target_gradients: Variable | Sequence[Variable | None] | None = None,
                  no_grad_set: Iterable[Variable | str] | None = None
                  ) -> Variable | None | list[Variable | None]:
    """:func:`gradients`, but one input's gradient comes back alone, not in a list (Fluid
    1.8's ``backward.calc_gradient``, which ``fluid.gradients`` wraps)."""
    grads = gradients(targets, inputs, target_gradients, no_grad_set)
    return grads[0] if len(grads) == 1 else grads
