"""Dygraph variables: a :class:`~dask_fluid.framework.Variable` that holds its value.

Fluid 1.8's ``core.VarBase`` and ``ParamBase``. In dygraph mode every variable a layer creates
is one of these (the blocks hand creation to the tracer), every op runs when it is appended,
and its outputs get their values at once; ``loss.backward()`` fills the gradients of the
variables it depends on, ``numpy()`` and ``gradient()`` read them back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..fetched import fetched
from ..framework import Parameter, Variable, VarType, convert_dtype
from ..lod import LoDTensor, LoDTensorArray
from ..ops.registry import array_module, to_host
from ..ops.selected_rows import SelectedRows, scatter_add

#: the backward pass (:func:`.backward.run_backward`, which sits above this module and installs
#: itself when imported)
_backward: Any = None


def install_backward(run_backward: Any) -> None:
    """Give ``VarBase.backward`` its backward pass."""
    global _backward
    _backward = run_backward


class VarBase(Variable):
    """A variable with a value (Fluid 1.8's dygraph ``VarBase``).

    Created by the tracer for every variable a layer asks for, and by
    :func:`~dask_fluid.dygraph.to_variable`. ``shape`` and ``dtype`` are those of the value
    once it has one. ``stop_gradient`` follows Fluid 1.8: a variable the caller did not set
    it on stops gradients unless an op that needs gradients wrote it.
    """

    def __init__(self, block: Any, name: str, value: Any = None, **kwargs: Any) -> None:
        #: whether ``stop_gradient`` was given (Fluid's overridden stop_gradient): an op's
        #: output keeps a given one, and takes "needs no gradient" from its inputs otherwise
        self._stop_gradient_given = "stop_gradient" in kwargs and bool(kwargs["stop_gradient"])
        kwargs.setdefault("stop_gradient", True)
        super().__init__(block, name, **kwargs)
        self._value = value
        self._lod: tuple = ()
        #: the gradient a backward pass left (an array or SelectedRows), summed over passes
        #: until ``clear_gradient``
        self._grad: Any = None
        self._grad_var: VarBase | None = None
        #: the traced op that wrote this value (None for leaves and values nobody
        #: differentiates)
        self._node: Any = None

    # -- shape and dtype come from the value ----------------------------------------------
    @property
    def shape(self) -> list[int] | None:
        """The value's shape, a list as Fluid 1.8's ``VarBase.shape`` (a program's Variable has
        a tuple); the declared one before an op wrote the value."""
        value = self._value
        if value is not None and hasattr(value, "shape") and not isinstance(
                value, LoDTensorArray):
            return [int(d) for d in value.shape]
        return None if self._declared_shape is None else list(self._declared_shape)

    @shape.setter
    def shape(self, shape: Any) -> None:  # layers declare shapes before the op runs
        self._declared_shape = None if shape is None else tuple(shape)

    @property
    def dtype(self) -> str:
        value = self._value
        if value is not None and hasattr(value, "dtype") and not isinstance(
                value, LoDTensorArray):
            return convert_dtype(value.dtype)
        return self._declared_dtype

    @dtype.setter
    def dtype(self, dtype: Any) -> None:
        self._declared_dtype = dtype

    # -- values ---------------------------------------------------------------------------
    def _checked_value(self) -> Any:
        if self._value is None:
            raise ValueError(f"dygraph variable {self.name!r} has no value: no op wrote it")
        return self._value

    def numpy(self) -> np.ndarray:
        """The value as a numpy array (copied from the GPU where it lives there)."""
        value = self._checked_value()
        if isinstance(value, SelectedRows):
            return to_host(_dense(value))
        if isinstance(value, LoDTensorArray):
            raise TypeError(f"{self.name!r} is a tensor array: read its items")
        # a [1] loss converts to a number (float(loss.numpy())) as with numpy 1.x
        return fetched(np.array(value, copy=True) if isinstance(value, np.ndarray)
                       else to_host(value))

    def value(self) -> LoDTensor:
        """The variable's value as a LoDTensor that is the variable's storage (Fluid 1.8's
        ``VarBase.value()``, the core Variable, and its ``get_tensor()``, in one): reading it
        gives the current value, ``set(array, place)`` and ``set_lod`` write the variable."""
        self._checked_value()
        return _ValueTensor(self)

    def set_value(self, value: Any) -> None:
        """Replace the value by ``value`` (an array or a VarBase) of the same shape and
        dtype, as Fluid 1.8's ``VarBase.set_value``."""
        if isinstance(value, VarBase):
            value = value._checked_value()
        current = self._checked_value()
        xp = array_module(current)
        new = xp.asarray(to_host(value) if xp is not np else value)
        if tuple(new.shape) != tuple(current.shape):
            raise ValueError(f"set_value: {self.name!r} has shape {list(current.shape)}, the "
                             f"value given has shape {list(new.shape)}")
        if new.dtype != current.dtype:
            raise TypeError(f"set_value: {self.name!r} is {current.dtype}, the value given is "
                            f"{new.dtype}")
        self._value = new.copy()

    def detach(self) -> VarBase:
        """A new variable sharing this value, outside the traced graph (stop_gradient)."""
        out = self.block.program._tracer.create_var(stop_gradient=True)
        out._value, out._lod = self._checked_value(), self._lod
        return out

    def astype(self, dtype: Any) -> VarBase:
        """This value cast to ``dtype`` (op ``cast``, traced)."""
        from ..layers import cast  # noqa: PLC0415  (layers sit above dygraph's varbase)
        return cast(self, dtype)

    # -- gradients ------------------------------------------------------------------------
    def backward(self, backward_strategy: Any = None) -> None:
        """Fill the gradients of every variable this one depends on (Fluid 1.8's
        ``VarBase.backward``; gradients add up over calls until ``clear_gradient``).

        ``backward_strategy`` (``BackwardStrategy``): gradients here are always summed in a
        fixed order, so its ``sort_sum_gradient`` changes nothing.
        """
        if _backward is None:
            raise RuntimeError("VarBase.backward needs dask_fluid.dygraph imported")
        _backward(self, backward_strategy)

    def gradient(self) -> Any:
        """The gradient as numpy (None before a backward pass reached it); for a sparse
        gradient ``(values, rows)``, as Fluid 1.8."""
        grad = self._grad
        if grad is None:
            return None
        if isinstance(grad, SelectedRows):
            return to_host(grad.value), to_host(grad.rows)
        return to_host(grad)

    def _grad_ivar(self) -> VarBase | None:
        """The gradient as a variable (what the optimizers read), or None."""
        if self._grad is None:
            return None
        var = self._grad_var
        if var is None:
            var = self._grad_var = self.block.program._tracer.create_var(
                name=self.name + "@GRAD", stop_gradient=True,
                type=VarType.SELECTED_ROWS if isinstance(self._grad, SelectedRows)
                else VarType.LOD_TENSOR)
        var._value = self._grad
        return var

    def clear_gradient(self) -> None:
        """Forget the gradient (Fluid 1.8 zeroes it; the next backward pass starts afresh)."""
        self._grad = None

    def _add_grad(self, grad: Any) -> None:
        # never in place: a grad kernel may return one of its inputs (an identity's gradient)
        current = self._grad
        if current is None:
            self._grad = grad
        elif isinstance(current, SelectedRows) and isinstance(grad, SelectedRows):
            xp = array_module(current.value)
            self._grad = SelectedRows(xp.concatenate([current.rows, grad.rows]),
                                      xp.concatenate([current.value, grad.value]),
                                      current.height)
        elif isinstance(grad, SelectedRows):
            self._grad = _plus_rows(current, grad)
        elif isinstance(current, SelectedRows):
            self._grad = _plus_rows(grad, current)
        else:
            self._grad = current + grad

    # -- printing ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        value = self._value
        shown = "None" if value is None else repr(to_host(value)) if not isinstance(
            value, (SelectedRows, LoDTensorArray)) else type(value).__name__
        return (f"name {self.name}, dtype: {self.dtype} shape: {list(self.shape or [])}\t"
                f"stop_gradient: {self.stop_gradient}\n{shown}")

    __str__ = __repr__

    def __len__(self) -> int:
        return int(self._checked_value().shape[0])

    def __iter__(self) -> Any:
        # a value's rows, each through the indexing ops (so gradients reach this variable)
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.numpy()
        return value if dtype is None else value.astype(dtype)

    def _scalar(self, what: str) -> Any:
        value = self.numpy()
        if value.size != 1:
            raise ValueError(f"{what} of {self.name!r} needs one value, it has shape "
                             f"{list(value.shape)}")
        return value.reshape(()).item()

    def __bool__(self) -> bool:
        return bool(self._scalar("bool()"))

    def __float__(self) -> float:
        return float(self._scalar("float()"))

    def __int__(self) -> int:
        return int(self._scalar("int()"))

    def __index__(self) -> int:
        # range(n), list indices: an integer variable of one value (the loops @declarative
        # translates take such bounds in dygraph mode too)
        if np.dtype(self.dtype).kind not in "iu":
            raise TypeError(f"{self.name!r} ({self.dtype}) cannot be used as an index: only "
                            "integer variables can")
        return int(self._scalar("an index"))


class _ValueTensor(LoDTensor):
    """What ``VarBase.value()`` returns: a LoDTensor whose array and LoD are the variable's
    (Fluid 1.8 shares the tensor), so ``value().get_tensor().set(array, place)`` overwrites
    the variable, as 1.8 scripts do to load or zero parameters."""

    def __init__(self, var: VarBase) -> None:  # no LoDTensor.__init__: it would clear _array
        self._var = var
        tracer = getattr(var.block.program, "_tracer", None)
        self._place = tracer.place if tracer is not None else None

    @property
    def _array(self) -> Any:
        return self._var._value

    @_array.setter
    def _array(self, value: Any) -> None:
        self._var._value = value

    @property
    def _lod(self) -> tuple:
        return self._var._lod

    @_lod.setter
    def _lod(self, lod: tuple) -> None:
        self._var._lod = tuple(lod)

    def get_tensor(self) -> _ValueTensor:
        """The tensor of this variable (Fluid's ``Variable.get_tensor()``): itself."""
        return self


def var_list(value: Any, what: str, where: str) -> list[VarBase]:
    """``value`` (a VarBase, or a list, tuple or set of them) as a list; TypeError naming
    ``where`` and ``what`` otherwise."""
    items = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
    for item in items:
        if not isinstance(item, VarBase):
            raise TypeError(f"{where}: {what} must be dygraph variables (VarBase), got "
                            f"{type(item).__name__}")
    return items


class ParamBase(VarBase, Parameter):
    """A dygraph parameter (Fluid 1.8's ``ParamBase``): trainable, persistable, with the
    :class:`~dask_fluid.framework.Parameter` attributes the optimizers read."""

    def __init__(self, block: Any, name: str, shape: Any, **kwargs: Any) -> None:
        self._stop_gradient_given = True
        self._value, self._lod, self._grad, self._grad_var, self._node = None, (), None, None, None
        Parameter.__init__(self, block, name, shape, **kwargs)

    def __repr__(self) -> str:
        return "Parameter " + super().__repr__()

    __str__ = __repr__


def _dense(rows: SelectedRows) -> Any:
    xp = array_module(rows.value)
    out = xp.zeros(rows.shape, dtype=rows.value.dtype)
    scatter_add(xp, out, rows.rows, rows.value)
    return out


def _plus_rows(dense: Any, rows: SelectedRows) -> Any:
    xp = array_module(dense)
    out = dense.copy()
    scatter_add(xp, out, rows.rows, rows.value)
    return out
