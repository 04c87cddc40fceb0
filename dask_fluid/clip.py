"""Gradient clipping, as Fluid 1.8's ``fluid.clip``.

- ``GradientClipByValue(max, min=None)``: each element into ``[min, max]`` (the ``clip`` op);
- ``GradientClipByNorm(clip_norm)``: each gradient scaled to an L2 norm of at most
  ``clip_norm`` (the ``clip_by_norm`` op);
- ``GradientClipByGlobalNorm(clip_norm)``: every gradient scaled by
  ``clip_norm / max(global_norm, clip_norm)``, the global norm taken over all of them (Fluid's
  ops: ``square``, ``reduce_sum``, ``sum``, ``sqrt``, ``fill_constant``, ``elementwise_max``,
  ``elementwise_div``, ``elementwise_mul``).

Pass one as ``grad_clip=`` of an optimizer (Fluid 1.8), or attach it to parameters with
:func:`set_gradient_clip` (the older API); ``need_clip(param)`` false leaves a parameter's
gradient as it is. Clipping runs before weight decay, as in Fluid.

Error clipping clips the gradient of any variable, in the backward pass itself: set a
variable's ``error_clip`` attribute to an :class:`ErrorClipByValue`, and
:func:`error_clip_callback` (a callback of ``append_backward(callbacks=...)``) appends a
``clip`` op right after the grad op that writes that variable's gradient, so that the grad ops
after it read the clipped value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import layers, unique_name
from .framework import VarType, default_main_program, install_hook
from .ops.selected_rows import SelectedRows

__all__ = ["ErrorClipByValue", "GradientClipByGlobalNorm", "GradientClipByNorm",
           "GradientClipByValue", "append_gradient_clip_ops", "clip_from_dict",
           "error_clip_callback", "set_gradient_clip"]

NeedClip = Callable[[Any], bool] | None


class _Clip:
    """The shared part: ``clip(params_grads)`` for ``grad_clip=``, one gradient at a time
    unless a subclass needs them all (global norm)."""

    def __init__(self, need_clip: NeedClip = None) -> None:
        if need_clip is not None and not callable(need_clip):
            raise TypeError("need_clip must be a function of the parameter returning a bool")
        self.need_clip = need_clip

    def _wanted(self, param: Any) -> bool:
        return self.need_clip is None or bool(self.need_clip(param))

    def __call__(self, params_grads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        out = []
        for p, g in params_grads:
            if g is None:  # Fluid 1.8's clips leave out a parameter without a gradient
                continue
            if not self._wanted(p):
                out.append((p, g))
                continue
            with p.block.program._optimized_guard([p, g]):
                out.append((p, self.append(p, g, p.block.program.global_block())))
        return out

    def append(self, param: Any, grad: Any, block: Any) -> Any:
        raise NotImplementedError


def _new_var(block: Any, like: Any, suffix: str) -> Any:
    return block.create_var(name=unique_name.generate(like.name + suffix), shape=like.shape,
                            dtype=like.dtype)


class GradientClipByValue(_Clip):
    """Clip each gradient element into ``[min, max]`` (``min`` defaults to ``-max``)."""

    def __init__(self, max: float, min: float | None = None, need_clip: NeedClip = None) -> None:
        super().__init__(need_clip)
        max = float(max)
        min = -max if min is None else float(min)
        if not min < max:
            raise ValueError(f"GradientClipByValue needs min < max, got min={min}, max={max}")
        self.max, self.min = max, min

    def append(self, param, grad, block):
        out = _new_var(block, grad, "@clipped")
        block.append_op("clip", inputs={"X": [grad]}, outputs={"Out": [out]},
                        attrs={"min": self.min, "max": self.max})
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {"kind": "value", "min": self.min, "max": self.max}


class GradientClipByNorm(_Clip):
    """Scale each gradient to an L2 norm of at most ``clip_norm`` (``clip_by_norm``)."""

    def __init__(self, clip_norm: float, need_clip: NeedClip = None) -> None:
        super().__init__(need_clip)
        if not float(clip_norm) > 0:
            raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
        self.clip_norm = float(clip_norm)

    def append(self, param, grad, block):
        out = _new_var(block, grad, "@clipped")
        block.append_op("clip_by_norm", inputs={"X": [grad]}, outputs={"Out": [out]},
                        attrs={"max_norm": self.clip_norm})
        return out

    def _to_dict(self) -> dict[str, Any]:
        return {"kind": "norm", "clip_norm": self.clip_norm}


class GradientClipByGlobalNorm(_Clip):
    """Scale every gradient by ``clip_norm / max(global_norm, clip_norm)``, the global norm
    being the L2 norm of all of them together."""

    def __init__(self, clip_norm: float, group_name: str = "default_group",
                 need_clip: NeedClip = None) -> None:
        super().__init__(need_clip)
        if not float(clip_norm) > 0:
            raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
        self.clip_norm = float(clip_norm)
        self.group_name = group_name

    def __call__(self, params_grads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
        return self._scaled(params_grads, self._wanted)

    def _scaled(self, params_grads: list[tuple[Any, Any]], wanted: Callable[[Any], bool]
                ) -> list[tuple[Any, Any]]:
        """The pairs with the gradients of the parameters ``wanted`` scaled together."""
        params_grads = [(p, g) for p, g in params_grads if g is not None]  # as Fluid 1.8's
        clipped = [(p, g) for p, g in params_grads if wanted(p)]
        if not clipped:
            return params_grads
        p0, g0 = clipped[-1]
        program = p0.block.program
        with program._optimized_guard([p0, g0]):
            squares = [layers.reduce_sum(layers.square(_dense(g))) for _, g in clipped]
            global_norm = layers.sqrt(layers.sums(squares))
            max_norm = layers.fill_constant([1], global_norm.dtype, self.clip_norm)
            scale = layers.elementwise_div(max_norm,
                                           layers.elementwise_max(max_norm, global_norm))
        out = []
        for p, g in params_grads:
            if not wanted(p):
                out.append((p, g))
                continue
            with program._optimized_guard([p, g]):
                out.append((p, layers.elementwise_mul(g, scale)))
        return out

    def append(self, param, grad, block):
        raise NotImplementedError("GradientClipByGlobalNorm needs every gradient at once: "
                                  "pass it as the optimizer's grad_clip=, not per parameter")

    def _to_dict(self) -> dict[str, Any]:
        return {"kind": "global_norm", "clip_norm": self.clip_norm,
                "group_name": self.group_name}


def _dense(grad: Any) -> Any:
    """A sparse gradient (an embedding's ``is_sparse`` one) as the dense tensor of its merged
    rows, as Fluid 1.8's global norm takes it (``merge_selected_rows`` then
    ``get_tensor_from_selected_rows``); a dense one as it is."""
    value = getattr(grad, "_value", None)  # a dygraph gradient holds its value
    if grad.type != VarType.SELECTED_ROWS and not isinstance(value, SelectedRows):
        return grad
    return layers.get_tensor_from_selected_rows(layers.merge_selected_rows(grad))


def clip_from_dict(d: dict | None) -> _Clip | None:
    if d is None:
        return None
    kind = d.get("kind", "value")
    if kind == "value":
        return GradientClipByValue(d["max"], d["min"])
    if kind == "norm":
        return GradientClipByNorm(d["clip_norm"])
    return GradientClipByGlobalNorm(d["clip_norm"], d.get("group_name", "default_group"))


install_hook("clip_from_dict", clip_from_dict)  # programs read back from JSON


def set_gradient_clip(clip: _Clip, param_list=None, program=None) -> None:
    """Clip the gradients of ``param_list`` (default: every parameter of ``program``) when an
    optimizer without ``grad_clip=`` updates them: each by itself, or, with
    :class:`GradientClipByGlobalNorm`, by the global norm of its group's gradients (one norm
    per ``group_name``, as Fluid 1.8's clip context)."""
    if not isinstance(clip, _Clip):
        raise TypeError(f"set_gradient_clip takes a fluid.clip.GradientClipBy* object, got "
                        f"{type(clip).__name__}")
    program = program or default_main_program()
    params = param_list or program.all_parameters()
    block = program.global_block()
    for p in params:
        param = block.var(p) if isinstance(p, str) else p
        param.gradient_clip_attr = clip


def _global_norm_groups(params_grads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The pairs with the gradients of parameters that :func:`set_gradient_clip` gave a
    :class:`GradientClipByGlobalNorm` scaled by their group's global norm; the others as they
    are.

    Raises
    ------
    ValueError
        Two parameters of one group with different ``clip_norm`` (Fluid 1.8's check).
    """
    groups: dict[str, GradientClipByGlobalNorm] = {}
    for p, g in params_grads:
        clip = getattr(p, "gradient_clip_attr", None)
        if isinstance(clip, GradientClipByGlobalNorm) and g is not None:
            first = groups.setdefault(clip.group_name, clip)
            if first.clip_norm != clip.clip_norm:
                raise ValueError(f"All parameters' 'clip_norm' of a same group should be the "
                                 f"same: group {clip.group_name!r} has {first.clip_norm} and "
                                 f"{clip.clip_norm}")
    for name, clip in groups.items():
        part = [(p, g) for p, g in params_grads
                if isinstance(getattr(p, "gradient_clip_attr", None), GradientClipByGlobalNorm)
                and p.gradient_clip_attr.group_name == name]
        # as Fluid 1.8's append_gradient_clip_ops: need_clip is not asked on this path
        done = {p.name: (p, g) for p, g in clip._scaled(part, lambda p: True)}
        params_grads = [done.get(p.name, (p, g)) for p, g in params_grads]
    return params_grads


def append_gradient_clip_ops(param_grads: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The pairs with each gradient clipped by its parameter's clip (:func:`set_gradient_clip`;
    a global-norm clip over its whole group), the others as they are, and the pairs without a
    gradient left out (Fluid 1.8's function, which the optimizers call when no ``grad_clip``
    is given).

    Parameters
    ----------
    param_grads : list of (Parameter, Variable)

    Returns
    -------
    list of (Parameter, Variable)
    """
    out = []
    for p, g in _global_norm_groups([(p, g) for p, g in param_grads if g is not None]):
        clip = getattr(p, "gradient_clip_attr", None)
        if clip is None or isinstance(clip, GradientClipByGlobalNorm):  # (scaled above)
            out.append((p, g))
            continue
        with p.block.program._optimized_guard([p, g]):
            out.append((p, clip.append(p, g, p.block.program.global_block())))
    return out


# -- error clipping (Fluid 1.8's BaseErrorClipAttr, ErrorClipByValue, error_clip_callback) ------


class BaseErrorClipAttr:
    """The base of error clips: ``_append_clip_op(block, grad_name)`` appends the op that
    clips ``grad_name`` in place."""

    def _append_clip_op(self, block: Any, grad_name: str) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not define its clip op")


class ErrorClipByValue(BaseErrorClipAttr):
    """Clip a variable's gradient into ``[min, max]`` during the backward pass (Fluid 1.8's
    ``fluid.clip.ErrorClipByValue``).

    Set it as the ``error_clip`` attribute of a forward variable (``var.error_clip =
    ErrorClipByValue(...)``) before ``append_backward(loss, callbacks=[error_clip_callback])``
    (or an optimizer's ``minimize``, which passes that callback as Fluid's does); the
    ``clip`` op follows the grad op that writes the gradient, so every grad op before the
    variable sees the clipped gradient.

    Parameters
    ----------
    max : float
        The upper bound.
    min : float, optional
        The lower bound; ``-max`` when not given.

    Raises
    ------
    ValueError
        ``min`` is greater than ``max`` (Fluid's ``clip`` op refuses it when it runs).
    """

    def __init__(self, max: float, min: float | None = None) -> None:
        max = float(max)
        min = -max if min is None else float(min)
        if min > max:
            raise ValueError(f"ErrorClipByValue needs min <= max, got min={min}, max={max}")
        self.max, self.min = max, min

    def __str__(self) -> str:
        return f"ByValue, min={self.min:f}, max={self.max:f}"

    def _append_clip_op(self, block: Any, grad_name: str) -> None:
        # in place, as Fluid: the gradient's readers after this op see the clipped value
        block.append_op("clip", inputs={"X": [grad_name]}, outputs={"Out": [grad_name]},
                        attrs={"min": self.min, "max": self.max})


def error_clip_callback(block: Any, context: dict) -> None:
    """The ``append_backward`` callback that applies error clips (Fluid 1.8's
    ``fluid.clip.error_clip_callback``): for each output of ``block``'s last op (the grad op
    just appended) that ``context`` (gradient name -> forward variable name) maps to a
    variable with an ``error_clip``, that clip's op is appended.

    Raises
    ------
    TypeError
        A variable's ``error_clip`` is neither None nor a :class:`BaseErrorClipAttr`.
    """
    op = block.ops[-1]
    for grad_name in [n for n in op.output_arg_names if n in context]:
        fwd_var = block._var_recursive(context[grad_name])
        error_clip = getattr(fwd_var, "error_clip", None)
        if not (error_clip is None or isinstance(error_clip, BaseErrorClipAttr)):
            raise TypeError(f"the error_clip of variable {fwd_var.name!r} must be a "
                            f"BaseErrorClipAttr (ErrorClipByValue) or None, got "
                            f"{type(error_clip).__name__}")
        if error_clip is not None:
            error_clip._append_clip_op(block, grad_name)
