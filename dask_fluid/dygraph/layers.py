"""``fluid.dygraph.Layer``: the base class of dygraph models (Fluid 1.8's ``dygraph.layers``).

A Layer owns parameters and sub-layers, found by attribute assignment, and runs ``forward``
when called: in dygraph mode its ops run at once; outside it, as in Fluid 1.8, they are
appended to the default main program (the parameters are the program's, initialised by the
startup program). Parameters are named as Fluid 1.8 names them (``linear_0.w_0``: the layer's
unique full name, then the parameter's), and ``state_dict`` keys are the structured names
(``fc1.weight``), as ``save_dygraph``/``load_dygraph`` and ``set_dict`` use them.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterator
from typing import Any

from .. import unique_name
from ..framework import Parameter, Variable, VarType, _dygraph_tracer
from ..initializer import Initializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .varbase import VarBase

__all__ = ["HookRemoveHelper", "Layer"]


def _snake(name: str) -> str:
    """``Conv2DTranspose`` -> ``conv2d_transpose``, as Fluid's _convert_camel_to_snake (a
    digit does not start a new word)."""
    s1 = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", s1).lower()


class HookRemoveHelper:
    """What ``register_forward_*_hook`` returns: ``remove()`` unregisters the hook."""

    _next_id = 0

    def __init__(self, hooks: dict) -> None:
        self._hooks = hooks
        self._id = HookRemoveHelper._next_id
        HookRemoveHelper._next_id += 1

    def remove(self) -> None:
        self._hooks.pop(self._id, None)


class Layer:
    """Base class of dygraph layers and models (Fluid 1.8's ``fluid.dygraph.Layer``).

    Parameters
    ----------
    name_scope : str, optional
        Prefix of the layer's full name (``<name_scope>_<n>``) and of its parameters' names;
        the class name in snake case by default.
    dtype : str
        The default dtype of the parameters it creates.
    """

    def __init__(self, name_scope: str | None = None, dtype: Any = "float32") -> None:
        self.training = True
        if name_scope is None:
            name_scope = _snake(type(self).__name__)
        self._full_name = unique_name.generate(name_scope)
        self._helper = LayerHelper(self._full_name, name=self._full_name)
        self._built = False
        self._dtype = dtype
        self._parameters: collections.OrderedDict[str, Parameter | None] = \
            collections.OrderedDict()
        self._sub_layers: collections.OrderedDict[str, Layer | None] = \
            collections.OrderedDict()
        self._forward_pre_hooks: collections.OrderedDict[int, Callable] = \
            collections.OrderedDict()
        self._forward_post_hooks: collections.OrderedDict[int, Callable] = \
            collections.OrderedDict()

    # -- modes --------------------------------------------------------------------------------
    def train(self) -> None:
        """Training mode: gradients are recorded, dropout drops, batch norm uses batch
        statistics (Fluid 1.8: it switches the tracer and this layer)."""
        tracer = _dygraph_tracer()
        if tracer is not None:
            tracer.train_mode()
        for layer in [self, *self.sublayers()]:
            layer.training = True

    def eval(self) -> None:
        """Evaluation mode: no gradients are recorded, dropout and batch norm as in
        inference."""
        tracer = _dygraph_tracer()
        if tracer is not None:
            tracer.eval_mode()
        for layer in [self, *self.sublayers()]:
            layer.training = False

    def full_name(self) -> str:
        """The layer's unique name (``linear_0``)."""
        return self._full_name

    # -- hooks --------------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook: Callable) -> HookRemoveHelper:
        """``hook(layer, inputs)`` runs before ``forward``; a non-None result replaces the
        inputs (a tuple, or one value)."""
        handle = HookRemoveHelper(self._forward_pre_hooks)
        self._forward_pre_hooks[handle._id] = hook
        return handle

    def register_forward_post_hook(self, hook: Callable) -> HookRemoveHelper:
        """``hook(layer, inputs, outputs)`` runs after ``forward``; a non-None result replaces
        the outputs."""
        handle = HookRemoveHelper(self._forward_post_hooks)
        self._forward_post_hooks[handle._id] = hook
        return handle

    # -- parameters and variables ---------------------------------------------------------------
    def create_parameter(self, shape: Any, attr: Any = None, dtype: Any = "float32",
                         is_bias: bool = False,
                         default_initializer: Initializer | None = None) -> Parameter | None:
        """A parameter of this layer, initialised now (``attr=False``: None, no parameter).

        Parameters
        ----------
        shape : list of int
        attr : ParamAttr, str, Initializer or False, optional
        dtype : str
        is_bias : bool
            Names it ``<full_name>.b_<n>`` and initialises it to 0 by default.
        default_initializer : Initializer, optional
            Used when ``attr`` names none (Xavier, or 0 for a bias, otherwise).
        """
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        return self._helper.create_parameter(attr, list(shape), dtype=dtype or self._dtype,
                                             is_bias=is_bias,
                                             default_initializer=default_initializer)

    def create_variable(self, name: str | None = None, persistable: bool | None = None,
                        dtype: Any = None, type: str = VarType.LOD_TENSOR) -> Variable:
        """A variable of this layer (``<full_name>.<name>``), without a value until an op
        writes it (in a static program: a variable of the main program's current block)."""
        name = (f"{self._full_name}.{name}" if name is not None
                else unique_name.generate(f"{self._full_name}.tmp"))
        # in dygraph mode the block hands creation to the tracer
        return self._helper.main_program.current_block().create_var(
            name=name, persistable=bool(persistable), dtype=dtype or self._dtype, type=type)

    def add_parameter(self, name: str, parameter: Parameter | None) -> Parameter | None:
        """Register ``parameter`` under attribute ``name``."""
        if parameter is not None and not isinstance(parameter, Parameter):
            raise TypeError(f"add_parameter({name!r}): expected a Parameter, got "
                            f"{type(parameter).__name__}")
        self._parameters[name] = parameter
        return parameter

    def add_sublayer(self, name: str, sublayer: Layer) -> Layer:
        """Register ``sublayer`` under attribute ``name``."""
        if not isinstance(sublayer, Layer):
            raise TypeError(f"add_sublayer({name!r}): expected a Layer, got "
                            f"{type(sublayer).__name__}")
        self._sub_layers[name] = sublayer
        return sublayer

    def parameters(self, include_sublayers: bool = True) -> list[Parameter]:
        """This layer's parameters (and its sub-layers', once each)."""
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        """``(structured name, parameter)`` pairs, each parameter once."""
        seen: set[int] = set()
        layers = self.named_sublayers(prefix=prefix, include_sublayers=include_sublayers,
                                      include_self=True)
        for layer_prefix, layer in layers:
            for name, param in layer._parameters.items():
                if param is None or id(param) in seen:
                    continue
                seen.add(id(param))
                yield (f"{layer_prefix}.{name}" if layer_prefix else name), param

    def sublayers(self, include_sublayers: bool = True) -> list[Layer]:
        """The sub-layers (recursively with ``include_sublayers``)."""
        return [layer for _, layer in self.named_sublayers(include_sublayers=include_sublayers)]

    def named_sublayers(self, prefix: str = "", include_sublayers: bool = True,
                        include_self: bool = False, layers_set: set | None = None
                        ) -> Iterator[tuple[str, Layer]]:
        """``(structured name, layer)`` pairs, each layer once. As Fluid 1.8's:
        ``include_sublayers=False`` yields no sub-layer (only this layer, with
        ``include_self``), so ``named_parameters(include_sublayers=False)`` is the layer's own
        parameters."""
        if layers_set is None:
            layers_set = set()
        if include_self and id(self) not in layers_set:
            layers_set.add(id(self))
            yield prefix, self
        if not include_sublayers:
            return
        for name, layer in self._sub_layers.items():
            if layer is None or id(layer) in layers_set:
                continue
            sub = f"{prefix}.{name}" if prefix else name
            layers_set.add(id(layer))
            yield sub, layer
            yield from layer.named_sublayers(prefix=sub, include_sublayers=True,
                                             include_self=False, layers_set=layers_set)

    def clear_gradients(self) -> None:
        """Forget every parameter's gradient (call after each ``minimize``)."""
        for param in self.parameters():
            if param.trainable and isinstance(param, VarBase):  # a program's keep none
                param.clear_gradient()

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self, destination: dict | None = None, include_sublayers: bool = True,
                   structured_name_prefix: str = "") -> collections.OrderedDict:
        """Structured name (``fc1.weight``) -> parameter, this layer's and its
        sub-layers'."""
        out = collections.OrderedDict() if destination is None else destination
        for name, param in self._parameters.items():
            if param is not None:
                out[structured_name_prefix + name] = param
        if include_sublayers:
            for name, layer in self._sub_layers.items():
                if layer is not None:
                    layer.state_dict(out, True, f"{structured_name_prefix}{name}.")
        return out

    def set_dict(self, stat_dict: dict, include_sublayers: bool = True,
                 use_structured_name: bool = True) -> None:
        """Set every parameter from ``stat_dict`` (what ``state_dict`` or ``load_dygraph``
        gives: structured names, or parameter names with ``use_structured_name=False``).

        Raises
        ------
        RuntimeError
            A parameter of the layer is missing from ``stat_dict``.
        ValueError, TypeError
            A value's shape or dtype differs from the parameter's.
        """
        for name, param in self.state_dict(include_sublayers=include_sublayers).items():
            if not isinstance(param, VarBase):
                raise RuntimeError("set_dict works in dygraph mode: this layer's parameters "
                                   "belong to a static program (set their values in its "
                                   "scope, or fluid.io.load_persistables)")
            key = name if use_structured_name else param.name
            if key not in stat_dict:
                raise RuntimeError(f"Parameter not found, Can't not find [ {key} ] in "
                                   "stat_dict")
            value = stat_dict[key]
            param.set_value(value.numpy() if isinstance(value, VarBase) else value)

    load_dict = set_dict

    # -- running --------------------------------------------------------------------------------
    def _build_once(self, *args: Any, **kwargs: Any) -> None:
        """Layers that create parameters from their first input's shape do it here."""

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def backward(self, *inputs: Any) -> Any:
        raise ValueError("Layer shouldn't implement backward")

    def __call__(self, *inputs: Any, **kwargs: Any) -> Any:
        # in dygraph mode the ops run now; outside it they go into the default main program
        # (Fluid 1.8's layers build static programs too, with the parameters they made)
        return self._call_forward(self.forward, inputs, kwargs)

    def _call_forward(self, forward: Any, inputs: tuple, kwargs: dict) -> Any:
        """``forward(*inputs, **kwargs)`` between the hooks, after the first call's build
        (``forward`` is the bound ``self.forward``, or its translation by ``@declarative``)."""
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, inputs)
            if result is not None:
                inputs = result if isinstance(result, tuple) else (result,)
        if not self._built:
            self._build_once(*inputs, **kwargs)
            self._built = True
        outputs = forward(*inputs, **kwargs)
        for hook in list(self._forward_post_hooks.values()):
            result = hook(self, inputs, outputs)
            if result is not None:
                outputs = result
        return outputs

    # -- attributes -----------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: the registered parameters and sub-layers
        d = self.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            return d["_parameters"][name]
        if "_sub_layers" in d and name in d["_sub_layers"]:
            return d["_sub_layers"][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        layers = self.__dict__.get("_sub_layers")
        if isinstance(value, Parameter):  # a ParamBase, or a program's in static mode
            if params is None:
                raise ValueError("super(YourLayer, self).__init__() should be called first")
            self.__dict__.pop(name, None)
            params[name] = value
        elif isinstance(value, Layer):
            if layers is None:
                raise ValueError("super(YourLayer, self).__init__() should be called first")
            self.__dict__.pop(name, None)
            layers[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"assignment to parameter {name!r} should be of type "
                                f"Parameter or None, got {type(value).__name__}")
            params[name] = None
        elif layers is not None and name in layers:
            if value is not None:
                raise TypeError(f"assignment to sublayer {name!r} should be of type Layer or "
                                f"None, got {type(value).__name__}")
            layers[name] = None
        else:
            object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._sub_layers:
            del self._sub_layers[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._parameters, *self._sub_layers})
