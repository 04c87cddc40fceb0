"""``ParamAttr``: how a layer creates its parameter (name, initializer, decay, clip)."""

from __future__ import annotations

from typing import Any

from .initializer import Initializer
from .regularizer import WeightDecayRegularizer


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
    def _to_attr(arg: Any) -> ParamAttr | bool | list:
        """Normalise what layers accept, as Fluid 1.8's ``ParamAttr._to_attr``: None or True
        (the defaults), False (no parameter), a name, an initializer, a regularizer, a
        ParamAttr, or a list or tuple of these (a list of the normalised items)."""
        if arg is None or arg is True:
            return ParamAttr()
        if arg is False:
            return False
        if isinstance(arg, (list, tuple)):
            return [ParamAttr._to_attr(a) for a in arg]
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        if isinstance(arg, WeightDecayRegularizer):
            return ParamAttr(regularizer=arg)
        raise TypeError(f"cannot use {type(arg).__name__} as a ParamAttr: pass None, a bool, "
                        "a name, an Initializer, a regularizer or a ParamAttr")


class WeightNormParamAttr(ParamAttr):
    """A parameter reparameterised by weight normalisation, as Fluid 1.8's
    ``WeightNormParamAttr`` (Salimans & Kingma, https://arxiv.org/abs/1602.07868).

    A layer given this attribute does not get one parameter ``w`` but two, ``<name>_g`` (the
    magnitude) and ``<name>_v`` (the direction), and its weight is computed in the main
    program as ``w = g * v / ||v||``, the norm taken over every dim of ``v`` except ``dim``
    (over all of them when ``dim`` is None). The startup program initialises ``v`` with the
    initializer and then ``g`` with ``||v||``, so that ``w`` starts as the initializer would
    have made it. The optimizer trains ``g`` and ``v``.

    Parameters
    ----------
    dim : int, optional
        The dim of the weight that keeps its own magnitude (``g`` has the weight's size
        there and 1 elsewhere); None: one magnitude for the whole weight.
    name : str, optional
        Prefix of the two parameters' names (``<name>_g``, ``<name>_v``); a unique
        ``<layer>.w_N`` when omitted.
    initializer : Initializer, optional
        The initializer of ``v`` (the layer's default when omitted).
    learning_rate : float
    regularizer : WeightDecayRegularizer, optional
    trainable : bool
    do_model_average : bool
        As :class:`ParamAttr`, for both ``g`` and ``v``; False by default, as in Fluid.

    Raises
    ------
    TypeError
        ``dim`` is neither None nor an int.

    Notes
    -----
    Fluid 1.8's signature has no ``gradient_clip`` (the clip is the optimizer's ``grad_clip``
    there) and no ``need_clip`` (Paddle 2.0), so neither is accepted here.
    """

    #: the weights built by weight normalisation, as Fluid's class-level list: variables
    #: computed from ``g`` and ``v`` rather than parameters of their own
    params_with_weight_norm: list = []

    def __init__(
        self,
        dim: int | None = None,
        name: str | None = None,
        initializer: Initializer | None = None,
        learning_rate: float = 1.0,
        regularizer: Any = None,
        trainable: bool = True,
        do_model_average: bool = False,
    ) -> None:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise TypeError(f"WeightNormParamAttr: dim must be None or an int, got "
                            f"{type(dim).__name__} {dim!r}")
        super().__init__(name=name, initializer=initializer, learning_rate=learning_rate,
                         regularizer=regularizer, trainable=trainable,
                         do_model_average=do_model_average)
        self.dim = dim
