"""Gradient clipping by value (Fluid's ``GradientClipByValue``), applied before decay."""

from __future__ import annotations

from typing import Any

from . import unique_name


class GradientClipByValue:
    """Clip each gradient element into ``[min, max]`` (``min`` defaults to ``-max``)."""

    def __init__(self, max: float, min: float | None = None) -> None:
        max = float(max)
        min = -max if min is None else float(min)
        if not min < max:
            raise ValueError(f"GradientClipByValue needs min < max, got min={min}, max={max}")
        self.max, self.min = max, min

    def append(self, param, grad, block):
        out = block.create_var(name=unique_name.generate(grad.name + "@clipped"),
                               shape=grad.shape, dtype=grad.dtype)
        block.append_op("clip", inputs={"X": [grad]}, outputs={"Out": [out]},
                        attrs={"min": self.min, "max": self.max})
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {"kind": "value", "min": self.min, "max": self.max}


def clip_from_dict(d: dict | None) -> GradientClipByValue | None:
    if d is None:
        return None
    return GradientClipByValue(d["max"], d["min"])


def set_gradient_clip(clip: GradientClipByValue, param_list=None, program=None) -> None:
    """Clip the gradients of ``param_list`` (default: every parameter of ``program``)."""
    from .framework import default_main_program

    program = program or default_main_program()
    params = param_list or program.all_parameters()
    block = program.global_block()
    for p in params:
        param = block.var(p) if isinstance(p, str) else p
        param.gradient_clip_attr = clip
