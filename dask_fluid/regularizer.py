"""Weight decay: ops appended to the gradient before the optimizer op (Fluid's regularizer)."""

from __future__ import annotations

from typing import Any

from . import unique_name


class WeightDecayRegularizer:
    """Base class; ``append(param, grad, block)`` returns the regularised gradient."""

    kind = ""

    def __init__(self, regularization_coeff: float = 0.0) -> None:
        coeff = float(regularization_coeff)
        if coeff < 0:
            raise ValueError(f"regularization_coeff must be >= 0, got {regularization_coeff}")
        self.regularization_coeff = coeff

    def append(self, param, grad, block):
        raise NotImplementedError(f"{type(self).__name__} does not build its decay ops")

    def _to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "coeff": self.regularization_coeff}


class L2DecayRegularizer(WeightDecayRegularizer):
    """``grad + coeff * param``: a ``scale`` op then a ``sum`` op, as late Fluid."""

    kind = "l2"

    def append(self, param, grad, block):
        return _add_scaled(param, param, grad, self.regularization_coeff, block)


class L1DecayRegularizer(WeightDecayRegularizer):
    """``grad + coeff * sign(param)``."""

    kind = "l1"

    def append(self, param, grad, block):
        sign = block.create_var(name=unique_name.generate(param.name + "@sign"),
                                shape=param.shape, dtype=param.dtype)
        block.append_op("sign", inputs={"X": [param]}, outputs={"Out": [sign]})
        return _add_scaled(param, sign, grad, self.regularization_coeff, block)


def append_regularization_ops(parameters_and_grads: list[tuple[Any, Any]],
                              regularization: WeightDecayRegularizer | None = None
                              ) -> list[tuple[Any, Any]]:
    """The pairs with each gradient weight-decayed: by the parameter's own regularizer
    (``ParamAttr(regularizer=...)``), else by ``regularization`` (Fluid 1.8's function, which
    the optimizers call after clipping).

    Parameters
    ----------
    parameters_and_grads : list of (Parameter, Variable)
        A pair without a gradient (None) is kept as it is.
    regularization : WeightDecayRegularizer, optional
        For the parameters without one of their own.

    Returns
    -------
    list of (Parameter, Variable)
    """
    out = []
    for param, grad in parameters_and_grads:
        regularizer = getattr(param, "regularizer", None) or regularization
        if grad is None or regularizer is None:
            out.append((param, grad))
            continue
        program = param.block.program
        with program._optimized_guard([param, grad]):
            out.append((param, regularizer.append(param, grad, program.global_block())))
    return out


def _add_scaled(param, source, grad, coeff: float, block):
    """Append ``grad + coeff * source`` (``scale`` then ``sum``) and return the new gradient."""
    decay = block.create_var(name=unique_name.generate(param.name + "@decay"),
                             shape=param.shape, dtype=param.dtype)
    block.append_op("scale", inputs={"X": [source]}, outputs={"Out": [decay]},
                    attrs={"scale": coeff})
    new_grad = block.create_var(name=unique_name.generate(grad.name + "@regularized"),
                                shape=param.shape, dtype=param.dtype)
    block.append_op("sum", inputs={"X": [grad, decay]}, outputs={"Out": [new_grad]})
    return new_grad


L2Decay = L2DecayRegularizer
L1Decay = L1DecayRegularizer


def regularizer_from_dict(d: dict | None) -> WeightDecayRegularizer | None:
    if d is None:
        return None
    cls = {"l2": L2DecayRegularizer, "l1": L1DecayRegularizer}[d["kind"]]
    return cls(d["coeff"])
