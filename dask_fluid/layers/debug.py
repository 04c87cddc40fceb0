"""``layers.Print``: print a tensor (and its gradient) while the program runs (op ``print``,
:mod:`dask_fluid.ops.print_ops`)."""

from __future__ import annotations

from ..framework import Variable
from ..layer_helper import LayerHelper
from ..ops.print_ops import PHASES

__all__ = ["Print"]

_DTYPES = ("float32", "float64", "int32", "int64", "bool")


def Print(input: Variable, first_n: int = -1, message: str | None = None, summarize: int = 20,
          print_tensor_name: bool = True, print_tensor_type: bool = True,
          print_tensor_shape: bool = True, print_tensor_lod: bool = True,
          print_phase: str = "both") -> Variable:
    """``input``, printed when the op runs (Fluid 1.8's ``layers.Print``).

    Use the returned variable downstream so that the op stays on the path. With
    ``print_phase`` ``"backward"`` or ``"both"``, the gradient flowing back through it is
    printed too.

    Parameters
    ----------
    input : Variable
        float32, float64, int32, int64 or bool.
    first_n : int
        Print only the first ``first_n`` times (on each executor); -1: every time.
    message : str, optional
        Printed with the tensor.
    summarize : int
        How many values to print; -1: all.
    print_tensor_name, print_tensor_type, print_tensor_shape, print_tensor_lod : bool
    print_phase : str
        ``"forward"``, ``"backward"`` or ``"both"``.

    Raises
    ------
    TypeError
        ``input`` is not a Variable of one of those dtypes.
    ValueError
        ``print_phase`` is none of the three.
    """
    if not isinstance(input, Variable) or input.dtype not in _DTYPES:
        got = input.dtype if isinstance(input, Variable) else type(input).__name__
        raise TypeError(f"Print: input must be a Variable of {list(_DTYPES)}, got {got}")
    phase = str(print_phase).upper()
    if phase not in PHASES:
        raise ValueError(f"Print: print_phase must be 'forward', 'backward' or 'both', got "
                         f"{print_phase!r}")
    helper = LayerHelper(f"print_{input.name}")
    out = helper.create_tmp(dtype=input.dtype, shape=input.shape)
    helper.append_op("print", inputs={"In": [input]}, outputs={"Out": [out]},
                     attrs={"first_n": int(first_n), "summarize": int(summarize),
                            "message": message or "", "print_tensor_name": print_tensor_name,
                            "print_tensor_type": print_tensor_type,
                            "print_tensor_shape": print_tensor_shape,
                            "print_tensor_lod": print_tensor_lod, "print_phase": phase})
    return out
