"""Fluid 1.8's dygraph containers (``fluid.dygraph.container``): ``Sequential``,
``LayerList`` and ``ParameterList``.

Each is a :class:`~dask_fluid.dygraph.Layer` whose items are registered as its sub-layers or
parameters under their positions (``"0"``, ``"1"``, ...) or, for a Sequential built from
``(name, layer)`` pairs, under those names, so ``parameters()`` and ``state_dict()`` see them
(``0.weight``, ``fc.weight``) and ``train()`` / ``eval()`` reach them.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from typing import Any

from ..framework import Parameter
from .layers import Layer

__all__ = ["LayerList", "ParameterList", "Sequential"]


def _check_layer(value: Any, where: str) -> Layer:
    if not isinstance(value, Layer):
        raise TypeError(f"{where}: expected a Layer, got {type(value).__name__}")
    return value


def _check_param(value: Any, where: str) -> Parameter:
    if not isinstance(value, Parameter):
        raise TypeError(f"{where}: expected a Parameter (create_parameter), got "
                        f"{type(value).__name__}")
    return value


def _position(idx: Any, length: int, where: str) -> int:
    """``idx`` (an int, negative from the end) as a position in ``[0, length)``."""
    if isinstance(idx, bool) or not isinstance(idx, int):
        raise TypeError(f"{where}: indices must be ints or slices, got {type(idx).__name__}")
    pos = idx + length if idx < 0 else idx
    if not 0 <= pos < length:
        raise IndexError(f"{where}: index {idx} is out of range for {length} items")
    return pos


class Sequential(Layer):
    """Layers called one after the other (Fluid 1.8's ``dygraph.Sequential``).

    Parameters
    ----------
    *layers : Layer, or (name, Layer) pairs
        Registered as sub-layers ``"0"``, ``"1"``, ... or under the names given.

    Examples
    --------
    >>> model = Sequential(Linear(10, 1), Linear(1, 2))           # doctest: +SKIP
    >>> model = Sequential(("l1", Linear(10, 2)), ("l2", Linear(2, 3)))  # doctest: +SKIP
    >>> model[0], model["l1"], len(model)                          # doctest: +SKIP
    """

    def __init__(self, *layers: Any) -> None:
        super().__init__()
        if layers and isinstance(layers[0], tuple):
            for item in layers:
                if not isinstance(item, tuple) or len(item) != 2:
                    raise TypeError("Sequential: give layers, or (name, layer) pairs, not "
                                    f"both (got {item!r})")
                name, layer = item
                self.add_sublayer(str(name), _check_layer(layer, f"Sequential({name!r})"))
        else:
            for idx, layer in enumerate(layers):
                self.add_sublayer(str(idx), _check_layer(layer, f"Sequential item {idx}"))

    def _key(self, name: Any) -> str:
        """The sub-layer key ``name`` means: itself as a string, or a position (an int)."""
        key = str(name)
        if key in self._sub_layers:
            return key
        if isinstance(name, int) and not isinstance(name, bool):
            return list(self._sub_layers)[_position(name, len(self._sub_layers),
                                                    "Sequential")]
        raise KeyError(f"Sequential has no sub-layer {name!r} (it has "
                       f"{list(self._sub_layers)})")

    def __getitem__(self, name: Any) -> Layer:
        return self._sub_layers[self._key(name)]

    def __setitem__(self, name: Any, layer: Layer) -> None:
        _check_layer(layer, "Sequential[...] =")
        key = str(name)
        if key not in self._sub_layers and isinstance(name, int) and not isinstance(name, bool):
            key = self._key(name)
        setattr(self, key, layer)

    def __delitem__(self, name: Any) -> None:
        del self._sub_layers[self._key(name)]

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self._sub_layers.values())

    def forward(self, input: Any) -> Any:
        for layer in self._sub_layers.values():
            input = layer(input)
        return input


class LayerList(Layer):
    """A list of sub-layers, registered as ``"0"``, ``"1"``, ... (Fluid 1.8's
    ``dygraph.LayerList``): index, iterate and change it like a list; it has no
    ``forward``, its owner calls the layers.

    Parameters
    ----------
    sublayers : iterable of Layer, optional
    """

    def __init__(self, sublayers: Iterable[Layer] | None = None) -> None:
        super().__init__()
        if sublayers is not None:
            for idx, layer in enumerate(sublayers):
                self.add_sublayer(str(idx), _check_layer(layer, f"LayerList item {idx}"))

    def _renumber(self, layers: list[Layer]) -> None:
        self._sub_layers = collections.OrderedDict(
            (str(i), layer) for i, layer in enumerate(layers))

    def __getitem__(self, idx: int | slice) -> Layer | LayerList:
        if isinstance(idx, slice):
            return type(self)(list(self._sub_layers.values())[idx])
        return self._sub_layers[str(_position(idx, len(self), "LayerList"))]

    def __setitem__(self, idx: int, sublayer: Layer) -> None:
        _check_layer(sublayer, "LayerList[...] =")
        setattr(self, str(_position(idx, len(self), "LayerList")), sublayer)

    def __delitem__(self, idx: int | slice) -> None:
        layers = list(self._sub_layers.values())
        if isinstance(idx, slice):
            del layers[idx]
        else:
            del layers[_position(idx, len(layers), "LayerList")]
        self._renumber(layers)

    def __len__(self) -> int:
        return len(self._sub_layers)

    def __iter__(self) -> Iterator[Layer]:
        return iter(self._sub_layers.values())

    def append(self, sublayer: Layer) -> LayerList:
        """Add ``sublayer`` at the end."""
        self.add_sublayer(str(len(self)), _check_layer(sublayer, "LayerList.append"))
        return self

    def insert(self, index: int, sublayer: Layer) -> None:
        """Put ``sublayer`` before position ``index`` (as ``list.insert``)."""
        _check_layer(sublayer, "LayerList.insert")
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"LayerList.insert: index must be an int, got {index!r}")
        layers = list(self._sub_layers.values())
        layers.insert(index, sublayer)
        self._renumber(layers)

    def extend(self, sublayers: Iterable[Layer]) -> LayerList:
        """Add each of ``sublayers`` at the end."""
        for layer in list(sublayers):
            self.append(layer)
        return self


class ParameterList(Layer):
    """A list of parameters, registered as ``"0"``, ``"1"``, ... (Fluid 1.8's
    ``dygraph.ParameterList``), so the owner's ``parameters()`` and optimizers see them.

    Parameters
    ----------
    parameters : iterable of Parameter, optional
    """

    def __init__(self, parameters: Iterable[Parameter] | None = None) -> None:
        super().__init__()
        if parameters is not None:
            for idx, param in enumerate(parameters):
                self.add_parameter(str(idx), _check_param(param, f"ParameterList item {idx}"))

    def __getitem__(self, idx: int) -> Parameter:
        return self._parameters[str(_position(idx, len(self), "ParameterList"))]

    def __setitem__(self, idx: int, param: Parameter) -> None:
        _check_param(param, "ParameterList[...] =")
        self._parameters[str(_position(idx, len(self), "ParameterList"))] = param

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters.values())

    def append(self, parameter: Parameter) -> ParameterList:
        """Add ``parameter`` at the end."""
        self.add_parameter(str(len(self)), _check_param(parameter, "ParameterList.append"))
        return self
