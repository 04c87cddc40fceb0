"""``fluid.contrib.memory_usage_calc`` (Fluid 1.8): :func:`memory_usage`, an estimate of the
memory a program's outputs take at a given batch size, computed as
python/paddle/fluid/contrib/memory_usage_calc.py computes it."""

from __future__ import annotations

from ..framework import EMPTY_VAR, Program, VarType

__all__: list[str] = ["memory_usage"]

#: bytes per element of the dtypes Fluid's estimate knows (its dtype_to_size)
dtype_to_size: dict[str, int] = {
    "float16": 2, "float32": 4, "float64": 8, "int16": 2, "int32": 4, "int64": 8, "bool": 1,
    "uint8": 1,
}


def memory_usage(program: Program, batch_size: int) -> tuple[float, float, str]:
    """Estimate the memory a program needs at ``batch_size``, as Fluid 1.8's
    ``fluid.contrib.memory_usage``.

    Every LoD-tensor output of the global block's ops is counted once (SelectedRows, tensor
    arrays and other kinds are left out, and so are inputs no op writes, such as fed data and
    sub-block variables): its element count, a negative dimension ``-k`` counting
    ``k · batch_size``, times its dtype's size. The sum is given in B, KB (over 1024 B) or MB
    (over 1024 KB), and the bounds are that sum plus 5 % and plus 10 % for what the estimate
    does not see.

    Parameters
    ----------
    program : Program
        The program whose global block is estimated.
    batch_size : int
        The batch size the negative dimensions stand for; positive.

    Returns
    -------
    tuple of (float, float, str)
        ``(min_total_memory, max_total_memory, unit)``, the unit ``'B'``, ``'KB'`` or ``'MB'``.

    Raises
    ------
    TypeError
        ``program`` is not a Program.
    ValueError
        ``batch_size`` is not positive; a counted variable has more than one negative
        dimension, or no shape.
    NotImplementedError
        A counted variable's dtype is not one Fluid's estimate knows (its ``dtype_to_size``).
    """
    if not isinstance(program, Program):
        raise TypeError("Calculating Memory Usage requires Program as its Parameter. "
                        f"But you passed in {type(program)}")
    if batch_size <= 0:
        raise ValueError(f"The batch size need to be positive, got {batch_size}.")
    block = program.global_block()
    total = 0.0
    processed = {EMPTY_VAR}
    for op in block.ops:
        for name in op.output_arg_names:
            if name in processed:
                continue
            processed.add(name)
            var = block.vars.get(name)
            if var is None:
                raise ValueError(f"memory_usage: {op.type}'s output {name!r} is not a variable "
                                 "of the global block")
            if var.type != VarType.LOD_TENSOR:
                continue
            if var.shape is None:
                raise ValueError(f"memory_usage: variable {name!r} has no shape")
            count, negative = 1, 0
            for d in var.shape:
                if d < 0:
                    if negative >= 1:
                        raise ValueError(f"Var {name} has more than one negative dim.")
                    negative += 1
                    count *= batch_size * (-d)
                else:
                    count *= d
            size = dtype_to_size.get(str(var.dtype))
            if size is None:
                raise NotImplementedError(
                    f"memory_usage: variable {name!r} has dtype {var.dtype}, which Fluid's "
                    f"estimate does not size (it knows {sorted(dtype_to_size)})")
            total += count * size
    unit = "B"
    if total > 1024:
        total /= 1024
        unit = "KB"
        if total > 1024:
            total /= 1024
            unit = "MB"
    # what the estimate does not see: 5 % to 10 % more
    return total * 1.05, total * 1.1, unit
