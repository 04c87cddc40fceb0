"""The ``print`` op (Fluid 1.8's ``layers.Print``): prints a tensor as the program runs and
passes it on unchanged; its gradient op is another ``print`` (``is_forward`` false), which
prints the gradient on its way back.

What is printed (standard output, one block a time the op prints): the tensor's name, the
message, its LoD, place, shape and dtype (each unless turned off), and its first ``summarize``
values (all with -1). ``first_n`` limits how many times each op prints on one executor (-1: no
limit); ``print_phase`` is ``FORWARD``, ``BACKWARD`` or ``BOTH``.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from .registry import LOD_KEY, register, to_host

PHASES = ("FORWARD", "BACKWARD", "BOTH")

_ATTRS = {"first_n": -1, "message": "", "summarize": 20, "print_tensor_name": True,
          "print_tensor_type": True, "print_tensor_shape": True, "print_tensor_lod": True,
          "print_phase": "BOTH", "is_forward": True}

#: how many times each print op has printed, per executor (``first_n``)
_printed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def format_tensor(value: Any, name: str, attrs: dict, lod: Any, place: Any) -> str:
    """The text one ``print`` op run writes for ``value``."""
    lines = []
    if attrs.get("print_tensor_name", True):
        lines.append(f"Variable: {name}")
    if attrs.get("message"):
        lines.append(f"  - message: {attrs['message']}")
    if attrs.get("print_tensor_lod", True):
        levels = "".join("{" + ", ".join(str(int(v)) for v in level) + "}"
                         for level in (lod or ()))
        lines.append(f"  - lod: {{{levels}}}")
    lines.append(f"  - place: {place}")
    host = np.asarray(to_host(value))
    if attrs.get("print_tensor_shape", True):
        lines.append(f"  - shape: {list(host.shape)}")
    if attrs.get("print_tensor_type", True):
        lines.append(f"  - dtype: {host.dtype}")
    flat = host.reshape(-1)
    summarize = int(attrs.get("summarize", 20))
    shown = flat if summarize == -1 else flat[:max(summarize, 0)]
    lines.append("  - data: [" + " ".join(str(v) for v in shown) + "]")
    return "\n".join(lines)


def _grad_maker(op: Any) -> list[dict]:
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "print", "inputs": {"In": [n + "@GRAD" for n in op.outputs["Out"]]},
             "outputs": {"Out": [n + "@GRAD" for n in op.inputs["In"]]},
             "attrs": dict(attrs, is_forward=False)}]


@register("print", ("In",), ("Out",), _ATTRS, grad=_grad_maker, host=True, lod="kernel")
def print_(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    """Out = In; In printed when the op's phase is this direction's and first_n allows."""
    value = ins["In"][0]
    lod = attrs["_lods"]["In"][0]
    forward = bool(attrs.get("is_forward", True))
    phase = str(attrs.get("print_phase", "BOTH")).upper()
    if value is not None and phase in ("BOTH", "FORWARD" if forward else "BACKWARD"):
        counts = _printed.setdefault(ctx.executor, weakref.WeakKeyDictionary())
        first_n = int(attrs.get("first_n", -1))
        if first_n < 0 or counts.get(ctx.op, 0) < first_n:
            counts[ctx.op] = counts.get(ctx.op, 0) + 1
            text = format_tensor(value, ctx.op.input("In")[0], attrs, lod, ctx.executor.place)
            print(text, file=sys.stdout, flush=True)
    return {"Out": [value], LOD_KEY: {"Out": [lod]}}
