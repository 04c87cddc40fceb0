"""``ParamAttr``: how a layer creates its parameter (name, initializer, decay, clip)."""

from __future__ import annotations

from typing import Any

from .initializer import Initializer


class ParamAttr:
    """Fluid's parameter attribute.

    Parameters
    ----------
    name : str, optional
        Parameter name; a unique ``<layer>.w_N`` / ``<layer>.b_N`` when omitted.
    initializer : Initializer, optional
        Defaults to Xavier for weights and zeros for biases.
    learning_rate : float
        Multiplier of the optimizer's learning rate for this parameter.
    regularizer : WeightDecayRegularizer, optional
        Overrides the optimizer's regularization for this parameter.
    trainable : bool
    gradient_clip : GradientClipByValue, optional
    do_model_average : bool
        Whether Fluid's ``ModelAverage`` averages this parameter; kept on the parameter
        (``Parameter.do_model_average``) and in saved programs.
    """

    def __init__(
        self,
        name: str | None = None,
        initializer: Initializer | None = None,
        learning_rate: float = 1.0,
        regularizer: Any = None,
        trainable: bool = True,
        gradient_clip: Any = None,
        do_model_average: bool = True,
    ) -> None:
        if initializer is not None and not isinstance(initializer, Initializer):
            raise TypeError(
                f"initializer must be a dask_fluid.initializer.Initializer, "
                f"got {type(initializer).__name__}")
        self.name = name
        self.initializer = initializer
        self.learning_rate = float(learning_rate)
        self.regularizer = regularizer
        self.trainable = trainable
        self.gradient_clip = gradient_clip
        self.do_model_average = bool(do_model_average)

    @staticmethod
    def _to_attr(arg: Any) -> ParamAttr | bool:
        """Normalise what layers accept: None, False, a name, an initializer or a ParamAttr."""
        if arg is None:
            return ParamAttr()
        if arg is False:
            return False
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise TypeError(f"cannot use {type(arg).__name__} as a ParamAttr")
