"""The ``print`` op (Fluid 1.8's ``layers.Print``): prints a tensor as the program runs and
passes it on unchanged; its gradient op is another ``print`` (``is_forward`` false), which
prints the gradient on its way back.

What is printed (standard output, one block a time the op prints): the tensor's name, the
message, its LoD, place, shape and dtype (each unless turned off), and its first ``summarize``
values (all with -1). ``first_n`` limits how many times each op prints on one executor (-1: no
limit); ``print_phase`` is ``FORWARD``, ``BACKWARD`` or ``BOTH``.

The ``assert`` op (Fluid 1.8's ``layers.Assert``) prints its ``Data`` tensors the same way, and
fails, when its condition is false.
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


# -- assert ------------------------------------------------------------------------------------

@register("assert", ("Cond", "Data"), (), {"summarize": -1}, optional=("Data",), host=True,
          lod="kernel")
def assert_(ins: dict, attrs: dict, outs: tuple, ctx: Any) -> dict:
    """Fluid 1.8's ``assert`` op (paddle/fluid/operators/assert_op.cc): nothing when the
    one-element ``Cond`` is true; when it is false, each ``Data`` tensor is printed (its first
    ``summarize`` values, all with -1) and the op fails, the message naming ``Cond`` and
    holding the same printout. No gradient (Fluid's ``EmptyGradOpMaker``)."""
    cond_name = ctx.op.input("Cond")[0]
    cond = ins["Cond"][0]
    if cond is None:
        raise ValueError(f"assert: the condition variable {cond_name!r} is not set")
    host = np.asarray(to_host(cond))
    if host.size != 1:
        raise ValueError(f"assert: the condition {cond_name!r} must have exactly one element, "
                         f"got shape {list(host.shape)}")
    if bool(host.reshape(-1)[0]):
        return {}
    fmt = {"summarize": int(attrs.get("summarize", -1))}
    names = ctx.op.input("Data") if "Data" in ctx.op.inputs else []
    lods = attrs.get("_lods", {}).get("Data") or [None] * len(names)
    texts = [f"Variable: {name}\n  - (not set)" if value is None
             else format_tensor(value, name, fmt, lod, ctx.executor.place)
             for name, value, lod in zip(names, ins.get("Data") or [], lods, strict=False)]
    if texts:
        # Fluid prints the tensors on standard output before it throws
        print("\n".join(texts), file=sys.stdout, flush=True)
    message = (f"The condition variable '{cond_name}' of AssertOp must be true, but received "
               f"false")
    raise AssertionError("\n".join([message, *texts]))
