"""LayerHelper: what every layer uses to name, create and initialise its variables."""

from __future__ import annotations

from typing import Any

from . import unique_name
from .framework import (
    Parameter,
    Variable,
    default_main_program,
    default_startup_program,
)
from .initializer import ConstantInitializer, Initializer, XavierInitializer
from .param_attr import ParamAttr

#: the ``act=`` a layer takes (each is an op of the same name)
ACTIVATIONS = ("relu", "sigmoid", "tanh", "softmax", "exp", "sqrt", "abs", "square",
               "leaky_relu", "relu6", "elu", "softplus", "softsign", "hard_sigmoid", "swish",
               "gelu", "log")


class LayerHelper:
    """Names a layer instance (``fc_0``) and creates its parameters and temporaries."""

    def __init__(self, layer_type: str, name: str | None = None) -> None:
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)

    @property
    def main_program(self):
        return default_main_program()

    @property
    def startup_program(self):
        return default_startup_program()

    def create_parameter(
        self,
        attr: ParamAttr,
        shape: list[int],
        dtype: str = "float32",
        is_bias: bool = False,
        default_initializer: Initializer | None = None,
    ) -> Parameter:
        """Create the parameter in the main program and its init op in the startup program."""
        suffix = "b" if is_bias else "w"
        name = attr.name or unique_name.generate(f"{self.name}.{suffix}")
        init = attr.initializer or default_initializer or (
            ConstantInitializer(0.0) if is_bias else XavierInitializer())
        param = self.main_program.global_block().create_parameter(
            name, shape, dtype=dtype, trainable=attr.trainable, regularizer=attr.regularizer,
            gradient_clip_attr=attr.gradient_clip,
            optimize_attr={"learning_rate": attr.learning_rate},
            do_model_average=attr.do_model_average)
        self.set_variable_initializer(param, init)
        return param

    def set_variable_initializer(self, var: Variable, init: Initializer) -> None:
        """Declare ``var`` in the startup program and prepend its init op there."""
        block = self.startup_program.global_block()
        if block.has_var(var.name):
            return
        svar = block.create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                                persistable=True)
        init(svar, block)

    def create_tmp(self, dtype: str = "float32", shape: Any = None,
                   stop_gradient: bool = False) -> Variable:
        """A temporary output: ``<layer>.tmp_N`` in the current block."""
        return self.main_program.current_block().create_var(
            name=unique_name.generate(f"{self.name}.tmp"), dtype=dtype, shape=shape,
            stop_gradient=stop_gradient)

    def append_op(self, *args: Any, **kwargs: Any):
        return self.main_program.current_block().append_op(*args, **kwargs)

    def append_activation(self, x: Variable, act: str | None) -> Variable:
        """``x`` through the activation op ``act`` (None: ``x`` itself), as Fluid's
        ``LayerHelper.append_activation``."""
        if act is None:
            return x
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {act!r}; use one of {ACTIVATIONS} or None")
        out = self.create_tmp(dtype=x.dtype, shape=x.shape)
        self.append_op(act, inputs={"X": [x]}, outputs={"Out": [out]})
        return out
