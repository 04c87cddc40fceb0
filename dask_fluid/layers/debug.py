"""``layers.Print``: print a tensor (and its gradient) while the program runs (op ``print``),
and ``layers.Assert``: fail the run, printing tensors, when a condition is false (op
``assert``); both in :mod:`dask_fluid.ops.print_ops`."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Operator, Variable
from ..layer_helper import LayerHelper
from ..ops.print_ops import PHASES

__all__ = ["Assert", "Print"]

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


def Assert(cond: Variable, data: Sequence[Variable] | None = None, summarize: int = 20,
           name: str | None = None) -> Operator:
    """Fail the run when ``cond`` is false, printing ``data`` (Fluid 1.8's ``layers.Assert``,
    op ``assert``).

    The op has no output: it runs where it stands in its block (inside a ``cond`` or
    ``While`` block too, each time that block runs). When ``cond`` is false it prints each
    tensor of ``data`` (as ``Print`` does: name, LoD, place, shape, dtype and values) and
    the run fails with an error that names ``cond`` and holds the same printout.

    Parameters
    ----------
    cond : Variable
        A bool tensor of exactly one element.
    data : list or tuple of Variable, optional
        The tensors to print when ``cond`` is false.
    summarize : int
        How many values of each tensor to print; -1: all.
    name : str, optional
        The layer's name (``assert_<cond name>`` when omitted).

    Returns
    -------
    Operator
        The ``assert`` op appended to the current block.

    Raises
    ------
    TypeError
        ``cond`` is not a bool Variable, ``data`` not a list or tuple of Variables (or None),
        ``summarize`` not an int, or ``name`` not a str (or None).
    """
    if not isinstance(cond, Variable) or cond.dtype != "bool":
        got = cond.dtype if isinstance(cond, Variable) else type(cond).__name__
        raise TypeError(f"Assert: cond must be a bool Variable, got {got}")
    if data is not None and not isinstance(data, (list, tuple)):
        raise TypeError(f"Assert: data must be a list or tuple of Variables or None, got "
                        f"{type(data).__name__}")
    for i, d in enumerate(data or ()):
        if not isinstance(d, Variable):
            raise TypeError(f"Assert: data[{i}] must be a Variable, got {type(d).__name__}")
    if isinstance(summarize, bool) or not isinstance(summarize, int):
        raise TypeError(f"Assert: summarize must be an int, got {type(summarize).__name__}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"Assert: name must be a str or None, got {type(name).__name__}")
    helper = LayerHelper(name or f"assert_{cond.name}")
    return helper.append_op("assert", inputs={"Cond": [cond], "Data": list(data or [])},
                            attrs={"summarize": summarize})
