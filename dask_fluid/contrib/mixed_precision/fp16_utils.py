"""The program rewrite and loss-scaling update of automatic mixed precision, as Fluid 1.8's
``python/paddle/fluid/contrib/mixed_precision/fp16_utils.py``.

:func:`rewrite_program` sorts the forward ops into a float16 set (white-list ops, and gray ops
fed by them) and a float32 set (black-list ops, gray ops fed by them, and every op on no list),
inserts ``cast`` ops in front of each op whose inputs have the other precision and marks the
float16 ops' outputs float16. :func:`update_loss_scaling` appends the ``Switch`` Fluid builds
to grow or shrink the loss scaling from the counts of good and bad steps.
"""

from __future__ import annotations

from typing import Any

from ... import layers
from ...framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, Block, Operator, OpRole, Program, VarType
from ...layers.control_flow import Switch
from .fp16_lists import AutoMixedPrecisionLists

__all__: list[str] = []

FP16 = "float16"
FP32 = "float32"
#: the variable types a cast can apply to (Fluid's ``valid_types``)
_VALID_TYPES = (VarType.LOD_TENSOR, VarType.SELECTED_ROWS, VarType.LOD_TENSOR_ARRAY)


def _dtype_to_str(dtype: str) -> str:
    """The suffix of a cast variable's name: ``fp16`` or ``fp32``."""
    return "fp16" if dtype == FP16 else "fp32"


def _rename_arg(op: Operator, old_name: str, new_name: str) -> None:
    """Rename ``old_name`` among ``op``'s inputs and outputs."""
    op._rename_input(old_name, new_name)
    op._rename_output(old_name, new_name)


def _insert_cast_op(block: Block, op: Operator, idx: int, src_dtype: str,
                    dest_dtype: str) -> int:
    """Insert, in front of ``op`` (at ``idx``), a ``cast`` from ``src_dtype`` to ``dest_dtype``
    of each input of dtype ``src_dtype`` and make ``op`` read the cast; for a float16 op
    (``src_dtype`` float32) mark its float32 outputs float16. Returns the number of casts
    inserted (Fluid's ``_insert_cast_op``)."""
    num_cast_ops = 0
    for in_name in op.input_names:
        # batch_norm's scale, bias, mean and variance stay float32: only X is cast
        if src_dtype == FP32 and op.type == "batch_norm" and in_name != "X":
            continue
        for in_var_name in op.input(in_name):
            in_var = block._var_recursive(in_var_name)
            if in_var.type not in _VALID_TYPES:
                continue
            if in_var.dtype == src_dtype:
                cast_name = in_var.name + ".cast_" + _dtype_to_str(dest_dtype)
                out_var = block.vars.get(cast_name)
                if out_var is None or out_var.dtype != dest_dtype:
                    out_var = block.create_var(name=cast_name, dtype=dest_dtype,
                                               shape=in_var.shape, lod_level=in_var.lod_level,
                                               persistable=False, stop_gradient=False)
                    block._insert_op(idx, "cast", inputs={"X": [in_var]},
                                     outputs={"Out": [out_var]},
                                     attrs={"in_dtype": in_var.dtype,
                                            "out_dtype": out_var.dtype,
                                            OP_ROLE_KEY: op.attrs.get(OP_ROLE_KEY,
                                                                      OpRole.Forward)})
                    num_cast_ops += 1
                _rename_arg(op, in_var.name, out_var.name)
            elif op.has_attr("in_dtype"):
                # a cast op of the other precision: it now reads dest_dtype
                op._set_attr("in_dtype", dest_dtype)
    if src_dtype == FP32:
        for out_name in op.output_names:
            if op.type == "batch_norm" and out_name != "Y":
                continue
            for out_var_name in op.output(out_name):
                out_var = block._var_recursive(out_var_name)
                if out_var.type not in _VALID_TYPES:
                    continue
                if out_var.dtype == FP32:
                    out_var.dtype = FP16
                    if op.has_attr("out_dtype"):
                        op._set_attr("out_dtype", FP16)
    return num_cast_ops


def find_true_prev_op(ops: list[Operator], cur_op: Operator, var_name: str
                      ) -> Operator | None:
    """The op before ``cur_op`` that writes ``var_name``, None when none does.

    Raises
    ------
    ValueError
        More than one op before ``cur_op`` writes it (Fluid's check).
    """
    prev_op = []
    for op in ops:
        if op is cur_op:
            break
        if var_name in op.output_arg_names:
            prev_op.append(op)
    if len(prev_op) > 1:
        raise ValueError(f"There must be only one previous op that outputs {var_name} "
                         f"variable; found {len(prev_op)} ({[o.type for o in prev_op]})")
    return prev_op[0] if prev_op else None


def find_true_post_op(ops: list[Operator], cur_op: Operator, var_name: str
                      ) -> list[Operator] | None:
    """The ops after ``cur_op`` that read ``var_name``, None when none does."""
    idx = next(i for i, op in enumerate(ops) if op is cur_op)
    post_op = [op for op in ops[idx + 1:] if var_name in op.input_arg_names]
    return post_op or None


def _is_in_black_varnames(op: Operator, amp_lists: AutoMixedPrecisionLists) -> bool:
    names = amp_lists.black_varnames or ()
    return any(n in names for n in op.input_arg_names + op.output_arg_names)


def _writers(ops: list[Operator]) -> dict[str, Operator]:
    """Each variable's last writer in ``ops``: Fluid's ``Variable.op`` at rewrite time."""
    writer: dict[str, Operator] = {}
    for op in ops:
        for name in op.output_arg_names:
            writer[name] = op
    return writer


def rewrite_program(main_prog: Program, amp_lists: AutoMixedPrecisionLists) -> None:
    """Put each op of ``main_prog``'s global block in float16 or float32 and insert the
    casts between them, as Fluid 1.8's ``fp16_utils.rewrite_program``.

    1. An op of the black list (or touching a variable of ``amp_lists.black_varnames``) runs
       in float32; one of the white list in float16.
    2. A gray-list op fed by a float32-set or black-list op runs in float32; otherwise, fed by
       a float16-set or white-list op, in float16; otherwise it is left as it is.
    3. An op on no list runs in float32, for numerical safety.
    4. ``cast`` ops make float32 ops read float32 and float16 ops read float16, and the float32
       outputs of float16 ops become float16 variables.

    Parameters
    ----------
    main_prog : Program
        The training program, before its backward pass.
    amp_lists : AutoMixedPrecisionLists
    """
    if not isinstance(amp_lists, AutoMixedPrecisionLists):
        raise TypeError(f"rewrite_program: amp_lists must be an AutoMixedPrecisionLists, got "
                        f"{type(amp_lists).__name__}")
    block = main_prog.global_block()
    ops = block.ops
    writer = _writers(ops)
    white_op_set: set[int] = set()
    black_op_set: set[int] = set()
    for op in ops:
        if amp_lists.black_varnames is not None and _is_in_black_varnames(op, amp_lists):
            black_op_set.add(id(op))
            continue
        if op.type in amp_lists.black_list:
            black_op_set.add(id(op))
        elif op.type in amp_lists.white_list:
            white_op_set.add(id(op))
        elif op.type in amp_lists.gray_list:
            is_black_op = False
            is_white_op = False
            for in_var_name in op.input_arg_names:
                prev_op = writer.get(in_var_name)
                if prev_op is None:  # a feed or a parameter: no op writes it
                    continue
                if prev_op is op:  # written in place: the op before this one
                    prev_op = find_true_prev_op(ops, op, in_var_name)
                    if prev_op is None:
                        continue
                if id(prev_op) in black_op_set or prev_op.type in amp_lists.black_list:
                    is_black_op = True
                elif id(prev_op) in white_op_set or prev_op.type in amp_lists.white_list:
                    is_white_op = True
            if is_black_op:
                black_op_set.add(id(op))
            elif is_white_op:
                white_op_set.add(id(op))
        else:
            # For numerical safety, ops that are on no list compute in float32
            black_op_set.add(id(op))

    idx = 0
    while idx < len(ops):
        op = ops[idx]
        num_cast_ops = 0
        if id(op) in black_op_set:
            num_cast_ops = _insert_cast_op(block, op, idx, FP16, FP32)
        elif id(op) in white_op_set:
            num_cast_ops = _insert_cast_op(block, op, idx, FP32, FP16)
        idx += num_cast_ops + 1
    # renamed inputs and inserted ops: an executor's plan of the program is stale now
    main_prog._version += 1


def update_role_var_grad(main_prog: Program, params_grads: list[tuple[Any, Any]]) -> None:
    """Move each ``cast`` that turns a float16 parameter gradient into the float32 one to the
    end of the block with the Optimize role, and give its ``op_role_var`` to the op that
    writes the float16 gradient, so that gradients cross devices in float16 (Fluid 1.8's
    ``update_role_var_grad``).

    Raises
    ------
    ValueError
        Such a cast is not a backward op, or a non-optimize op reads its output.
    """
    block = main_prog.global_block()
    for p, g in params_grads:
        if g is None or g.dtype != FP32:
            continue
        op = _writers(block.ops).get(g.name)
        if op is None or op.type != "cast":
            continue
        role = int(op.attrs.get(OP_ROLE_KEY, 0))
        if not role & OpRole.Backward:
            raise ValueError(f"The cast op writing {g.name} must be in BACKWARD role")
        op.attrs.pop(OP_ROLE_VAR_KEY, None)
        fp16_grad_name = op.input("X")[0]
        op_for_fp16_grad = find_true_prev_op(block.ops, op, fp16_grad_name)
        if op_for_fp16_grad is not None:
            attr_val = [p.name, fp16_grad_name]
            attr_val.extend(op_for_fp16_grad.attrs.get(OP_ROLE_VAR_KEY, []))
            op_for_fp16_grad._set_attr(OP_ROLE_VAR_KEY, attr_val)
        # cast after the gradients are all-reduced: an optimize op, behind the backward ops
        op._set_attr(OP_ROLE_KEY, OpRole.Optimize)
        if op is block.ops[-1]:
            continue
        post_ops = find_true_post_op(block.ops, op, g.name)
        if post_ops is not None:
            raise ValueError(f"The cast op's output {g.name} should not be used by a "
                             f"non-optimize op, however, it is used by {post_ops[0].type}")
        block.ops.remove(op)
        block.ops.append(op)
    main_prog._version += 1


def update_loss_scaling(is_overall_finite: Any, prev_loss_scaling: Any, num_good_steps: Any,
                        num_bad_steps: Any, incr_every_n_steps: Any,
                        decr_every_n_nan_or_inf: Any, incr_ratio: float,
                        decr_ratio: float) -> None:
    """Append the update of the loss scaling, as Fluid 1.8's
    ``fp16_utils.update_loss_scaling``.

    After a step whose gradients are all finite: when it makes ``incr_every_n_steps``
    consecutive good steps, the scaling is multiplied by ``incr_ratio`` (kept if the product
    overflows float32) and both counters reset; otherwise ``num_good_steps`` grows and
    ``num_bad_steps`` resets. After a step with an inf or nan: when it makes
    ``decr_every_n_nan_or_inf`` bad steps, the scaling is multiplied by ``decr_ratio`` (but
    not below 1) and both counters reset; otherwise ``num_good_steps`` resets and
    ``num_bad_steps`` grows.

    Parameters
    ----------
    is_overall_finite : Variable
        One bool: whether every gradient is finite.
    prev_loss_scaling : Variable
        The float32 loss scaling, updated in place.
    num_good_steps, num_bad_steps : Variable
        int32 counters, updated in place.
    incr_every_n_steps, decr_every_n_nan_or_inf : Variable
        int32 ``[1]`` tensors.
    incr_ratio, decr_ratio : float
    """
    zero_steps = layers.fill_constant(shape=[1], dtype="int32", value=0)
    with Switch() as switch:
        with switch.case(is_overall_finite):
            should_incr_loss_scaling = layers.less_than(incr_every_n_steps,
                                                        num_good_steps + 1)
            with Switch() as switch1:
                with switch1.case(should_incr_loss_scaling):
                    new_loss_scaling = prev_loss_scaling * incr_ratio
                    loss_scaling_is_finite = layers.isfinite(new_loss_scaling)
                    with Switch() as switch2:
                        with switch2.case(loss_scaling_is_finite):
                            layers.assign(new_loss_scaling, prev_loss_scaling)
                        with switch2.default():
                            pass
                    layers.assign(zero_steps, num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
                with switch1.default():
                    layers.increment(num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
        with switch.default():
            should_decr_loss_scaling = layers.less_than(decr_every_n_nan_or_inf,
                                                        num_bad_steps + 1)
            with Switch() as switch3:
                with switch3.case(should_decr_loss_scaling):
                    new_loss_scaling = prev_loss_scaling * decr_ratio
                    static_loss_scaling = layers.fill_constant(shape=[1], dtype="float32",
                                                               value=1.0)
                    less_than_one = layers.less_than(new_loss_scaling, static_loss_scaling)
                    with Switch() as switch4:
                        with switch4.case(less_than_one):
                            layers.assign(static_loss_scaling, prev_loss_scaling)
                        with switch4.default():
                            layers.assign(new_loss_scaling, prev_loss_scaling)
                    layers.assign(zero_steps, num_good_steps)
                    layers.assign(zero_steps, num_bad_steps)
                with switch3.default():
                    layers.assign(zero_steps, num_good_steps)
                    layers.increment(num_bad_steps)
