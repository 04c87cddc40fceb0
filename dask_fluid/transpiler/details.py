"""fluid.transpiler.details: ``program_to_code``, the program printer of Fluid 1.8's
``details/program_utils.py``, which distributed scripts import to print what they transpiled.

The text follows Fluid's layout: one ``{ // block N`` section a block, its variables sorted by
name (``persist trainable parameter fc_0.w_0 : fluid.lod_tensor.shape(4, 8).astype(float32)``),
then every op as ``{Out=['x']} = type(inputs={X=['y']}, attr = value, ...)``.
"""

from __future__ import annotations

import sys
from typing import IO

from ..framework import _BLOCK_ATTRS, Block, Operator, Parameter, Program, Variable, VarType

__all__ = ["block_to_code", "op_to_code", "program_to_code", "variable_to_code"]


def variable_to_code(var: Variable) -> str:
    """One variable as Fluid prints it."""
    if var.type in (VarType.LOD_TENSOR, VarType.SELECTED_ROWS):
        shape = tuple(var.shape) if var.shape is not None else ()
        text = f"{var.name} : fluid.{var.type}.shape{shape}.astype({var.dtype})"
    else:
        text = f"{var.name} : fluid.{var.type})"
    if isinstance(var, Parameter):
        text = ("trainable parameter " if var.trainable else "parameter ") + text
    else:
        text = "var " + text
    return ("persist " + text) if var.persistable else text


def op_to_code(op: Operator, skip_op_callstack: bool = True) -> str:
    """One op as Fluid prints it (attributes sorted by name; block attributes as
    ``block[i]``)."""
    outputs = ", ".join(f"{slot}={op.output(slot)}" for slot in op.output_names)
    inputs = ", ".join(f"{slot}={op.input(slot)}" for slot in op.input_names)
    attrs = []
    for name in sorted(op.attrs):
        if skip_op_callstack and name == "op_callstack":
            continue
        value = op.attrs[name]
        if name in _BLOCK_ATTRS:
            attrs.append(f"{name} = blocks{list(value)}" if isinstance(value, list)
                         else f"{name} = block[{value}]")
        else:
            attrs.append(f"{name} = {value}")
    call = f"{op.type}(inputs={{{inputs}}}, {', '.join(attrs)})"
    return f"{{{outputs}}} = {call}" if outputs else call


def block_to_code(block: Block, block_idx: int, fout: IO[str] | None = None,
                  skip_op_callstack: bool = False) -> None:
    """Print ``block`` to ``fout`` (standard output by default)."""
    out = fout if fout is not None else sys.stdout
    print(f"{{ // block {block_idx}", file=out)
    names = sorted(block.vars)
    for name in names:
        print("    " + variable_to_code(block.vars[name]), file=out)
    if names:
        print("", file=out)
    for op in block.ops:
        print("    " + op_to_code(op, skip_op_callstack), file=out)
    print("}", file=out)


def program_to_code(prog: Program, fout: IO[str] | None = None,
                    skip_op_callstack: bool = True) -> None:
    """Print every block of ``prog`` in Fluid's layout.

    Parameters
    ----------
    prog : Program
    fout : file, optional
        Standard output by default.
    skip_op_callstack : bool
        Leave out the ``op_callstack`` attribute.
    """
    for idx, block in enumerate(prog.blocks):
        block_to_code(block, idx, fout, skip_op_callstack)
