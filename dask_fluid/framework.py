"""Fluid's program model: Program, Block, Variable, Parameter, Operator.

A :class:`Program` is a list of blocks; block 0 is the global block. A block holds variables
(by name) and an ordered list of operators that read and write them by name. Programs are plain
data: they print, serialise to JSON and clone. Nodes are created only through
:meth:`Block.create_var`, :meth:`Block.create_parameter` and :meth:`Block.append_op`, which check
each op against its registered signature.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import html
import json
import numbers
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from . import unique_name
from .ops import registry
from .regularizer import regularizer_from_dict

GRAD_SUFFIX = "@GRAD"
EMPTY_VAR = "@EMPTY@"


class _Hooks:
    """What modules above this one install when they are imported (Fluid's monkey patches):
    ``binary_op(x, other, op_type, reverse)`` and ``getitem(x, item)`` (:mod:`.layers`: a
    Variable's arithmetic and indexing) and ``clip_from_dict`` (:mod:`.clip`: a parameter's
    gradient clip, read back from JSON)."""

    binary_op: Callable[[Variable, Any, str, bool], Variable] | None = None
    getitem: Callable[[Variable, Any], Variable] | None = None
    clip_from_dict: Callable[[Any], Any] | None = None


_hooks = _Hooks()

#: the dygraph tracer while ``fluid.dygraph.guard`` is on in this thread (:mod:`.dygraph`,
#: above this module): blocks hand it the variables, parameters and ops created, and it runs
#: each op at once. A context variable, so a worker's other threads keep building programs.
_tracer: contextvars.ContextVar[Any] = contextvars.ContextVar("dask_fluid_tracer", default=None)


def in_dygraph_mode() -> bool:
    """Whether ops run as they are created (inside ``fluid.dygraph.guard``), Fluid's
    ``framework.in_dygraph_mode``."""
    return _tracer.get() is not None


def _dygraph_tracer() -> Any:
    """The dygraph tracer of this thread, or None outside ``fluid.dygraph.guard``."""
    return _tracer.get()


@contextlib.contextmanager
def _dygraph_tracer_guard(tracer: Any) -> Iterator[None]:
    """``tracer`` takes the blocks' variables and ops inside (None: programs are built)."""
    token = _tracer.set(tracer)
    try:
        yield
    finally:
        _tracer.reset(token)


@contextlib.contextmanager
def _dygraph_place_guard(place: Any) -> Iterator[None]:
    """Fluid 1.8's private guard of the place dygraph ops run on: the running tracer's place
    for the block (Fluid's unit tests force CPUPlace so); outside dygraph mode nothing runs
    on a place, as in 1.8."""
    tracer = _tracer.get()
    if tracer is None:
        yield
        return
    before, tracer.place = tracer.place, place
    try:
        yield
    finally:
        tracer.place = before


def refuse_in_dygraph(name: str) -> None:
    """RuntimeError in dygraph mode: for the optimizers that work on whole programs, which
    Fluid 1.8 refuses there with "In dygraph, don't support <name>."."""
    if in_dygraph_mode():
        raise RuntimeError(f"{name} does not work in dygraph mode (as Fluid 1.8: \"In "
                           f"dygraph, don't support {name}.\"); build a static program")


def variable_list(value: Any, what: str) -> list[Variable]:
    """``value`` (a Variable, or a list or tuple of them) as a list; TypeError naming
    ``what`` otherwise."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if not isinstance(v, Variable):
            raise TypeError(f"{what} must be a Variable or a list of them, got "
                            f"{type(v).__name__}")
    return values


#: Fluid 1.8's name (``framework._dygraph_guard(tracer)``, which its jit.py and the 1.8 unit
#: tests' ``is_equal_program`` import)
_dygraph_guard = _dygraph_tracer_guard


def install_hook(name: str, fn: Callable[..., Any]) -> None:
    """Install hook ``name`` (``"binary_op"``, ``"getitem"`` or ``"clip_from_dict"``, see
    :class:`_Hooks`)."""
    if name not in ("binary_op", "getitem", "clip_from_dict"):
        raise ValueError(f"framework has no hook {name!r}")
    setattr(_hooks, name, fn)


def _clip_from_dict(data: Any) -> Any:
    if data is None:
        return None
    if _hooks.clip_from_dict is None:
        raise RuntimeError("a program with a gradient clip is read back by dask_fluid.clip: "
                           "import dask_fluid (or dask_fluid.clip) first")
    return _hooks.clip_from_dict(data)


def grad_var_name(name: str) -> str:
    """``x`` → ``x@GRAD``."""
    return name + GRAD_SUFFIX


class OpRole:
    """Fluid's op role bits (``op_role`` attr)."""

    Forward = 0x0000
    Backward = 0x0001
    Optimize = 0x0002
    RPC = 0x0004
    Dist = 0x0008
    LRSched = 0x0010
    Loss = 0x0100


OP_ROLE_KEY = "op_role"
#: op attributes that name blocks (by index); Operator.all_attrs() gives the Block objects
_BLOCK_ATTRS = frozenset({"sub_block", "optimize_blocks", "prefetch_blocks"})
OP_ROLE_VAR_KEY = "op_role_var"
#: the attr naming the name_scope an op was built in (``"/encoder/attention/"``)
OP_NAMESCOPE_KEY = "op_namescope"
#: the attr naming the device an op built inside :func:`device_guard` runs on
#: (``"cpu"``, ``"gpu"``, ``"gpu:N"``)
OP_DEVICE_KEY = "op_device"

DTYPES = ("float16", "float32", "float64", "int32", "int64", "bool", "uint8", "int8")


#: dtype given (str, numpy dtype or type) -> Fluid's name: numpy works a dtype's name out
#: afresh at every ``.name``, and dygraph asks for every value's dtype
_DTYPE_NAMES: dict[Any, str] = {}


def convert_dtype(dtype: Any) -> str:
    """Normalise a dtype given as str, numpy dtype or type to Fluid's string name."""
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):  # not seen yet, or unhashable
        pass
    import numpy as np

    try:
        name = np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype {dtype!r} is not understood; use one of {DTYPES}") from None
    if name not in DTYPES:
        raise TypeError(f"dtype {name!r} is not supported; use one of {DTYPES}")
    try:
        _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


class _Code(str):
    """A :class:`VarType` member: its name here (``"float32"``) and, through ``int()``, Fluid's
    enum code, which op attrs such as ``out_dtype`` carry in Fluid's programs."""

    __slots__ = ("_code",)

    def __new__(cls, name: str, code: int) -> _Code:
        self = super().__new__(cls, name)
        self._code = code
        return self

    def __int__(self) -> int:
        return self._code

    def __index__(self) -> int:
        return self._code

    def __reduce__(self) -> tuple:  # programs holding one travel to workers pickled
        return (_Code, (str(self), self._code))


class VarType:
    """Fluid's ``core.VarDesc.VarType``: a variable's type and, for tensors, its dtype.

    Each member is its name here (the dtype members are the dtype names, so
    ``var.dtype == VarType.FP32`` and ``layers.cast(x, VarType.INT64)`` read as in Fluid) and
    ``int()`` gives Fluid's enum code (``int(VarType.FP32) == 5``). ``INT16`` exists in Fluid's
    enum, but no op here takes int16 tensors (:func:`convert_dtype` refuses it).
    """

    BOOL = _Code("bool", 0)
    INT16 = _Code("int16", 1)
    INT32 = _Code("int32", 2)
    INT64 = _Code("int64", 3)
    FP16 = _Code("float16", 4)
    FP32 = _Code("float32", 5)
    FP64 = _Code("float64", 6)
    UINT8 = _Code("uint8", 20)
    INT8 = _Code("int8", 21)
    LOD_TENSOR = _Code("lod_tensor", 7)
    SELECTED_ROWS = _Code("selected_rows", 8)
    STEP_SCOPES = _Code("step_scopes", 11)
    LOD_TENSOR_ARRAY = _Code("lod_tensor_array", 13)
    RAW = _Code("raw", 17)


_DTYPE_MEMBERS = {str(v): v for k, v in vars(VarType).items() if k.isupper() and
                  str(v) in DTYPES + ("int16",)}


def convert_np_dtype_to_dtype_(np_dtype: Any) -> str:
    """Fluid's :class:`VarType` member of a numpy dtype (Fluid 1.8's
    ``framework.convert_np_dtype_to_dtype_``): the dtype's name, Fluid's code by ``int()``."""
    return _DTYPE_MEMBERS[convert_dtype(np_dtype)]


def _comparable(other: object) -> bool:
    """What a Variable's ``==`` and ``!=`` build an op for: a variable or a number, and an
    array (which the op then refuses, as ``+`` does)."""
    return (isinstance(other, Variable | numbers.Number)
            or hasattr(other, "__array_interface__"))


class Variable:
    """A named tensor slot of a block (Fluid's ``Variable``).

    Parameters
    ----------
    block : Block
        Owning block.
    name : str
        Unique name inside the program.
    shape : sequence of int, optional
        ``-1`` marks the batch dimension.
    dtype : str or numpy dtype
    persistable : bool
        Kept in the scope across runs (parameters, optimizer state, learning rates).
    stop_gradient : bool
        No gradient flows into this variable.
    """

    def __init__(
        self,
        block: Block,
        name: str,
        shape: Sequence[int] | None = None,
        dtype: Any = "float32",
        persistable: bool = False,
        stop_gradient: bool = False,
        type: str = VarType.LOD_TENSOR,
        lod_level: int = 0,
        is_data: bool = False,
        need_check_feed: bool = True,
        error_clip: Any = None,
        **kwargs: Any,
    ) -> None:
        self.block = block
        #: Fluid's ``error_clip``: an ``ErrorClipByValue`` that clips this variable's gradient
        #: where the backward pass writes it (``clip.error_clip_callback``)
        self.error_clip = error_clip
        self.name = name
        self.shape = tuple(int(d) for d in shape) if shape is not None else None
        self.dtype = convert_dtype(dtype)
        self.persistable = bool(persistable)
        self.stop_gradient = bool(stop_gradient)
        self.type = type
        self.lod_level = int(lod_level)
        self.is_data = bool(is_data)
        #: whether a fed value must match the declared shape (Fluid's ``need_check_feed``:
        #: False for ``layers.data(append_batch_size=False)``, whose dims may be placeholders)
        self.need_check_feed = bool(need_check_feed)
        self.trainable = False

    def _to_dict(self) -> dict:
        return {
            "kind": "var",
            "name": self.name,
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
            "persistable": self.persistable,
            "stop_gradient": self.stop_gradient,
            "type": self.type,
            "lod_level": self.lod_level,
            "is_data": self.is_data,
            "need_check_feed": self.need_check_feed,
        }

    def to_string(self, throw_on_error: bool = False, with_details: bool = False) -> str:
        """One line: name, dtype, shape and flags; ``with_details`` adds the LoD level, data
        layer and (for parameters) training fields, as Fluid's ``with_details``.

        Raises
        ------
        ValueError
            ``throw_on_error`` and the variable lacks a dtype.
        """
        if throw_on_error and not self.dtype:
            raise ValueError(f"variable {self.name!r} has no dtype")
        flags = []
        if self.persistable:
            flags.append("persistable")
        if self.stop_gradient:
            flags.append("stop_gradient")
        if self.type != VarType.LOD_TENSOR:
            flags.append(self.type)
        if with_details:
            flags += [f"{k}={v!r}" for k, v in self._details().items()]
        extra = f" ({', '.join(flags)})" if flags else ""
        shape = "?" if self.shape is None else list(self.shape)
        return f"var {self.name} : {self.dtype}{shape}{extra}"

    def _details(self) -> dict[str, Any]:
        return {"lod_level": self.lod_level, "is_data": self.is_data}

    @property
    def grad_name(self) -> str:
        """The name of this variable's gradient (Fluid 1.8's ``Variable.grad_name``)."""
        return self.name + GRAD_SUFFIX

    def __str__(self) -> str:
        return self.to_string()

    __repr__ = __str__

    # Operator overloading creates ops in the current block, as Fluid's monkey patch does: the
    # layers (above this module) install the op builder when they are imported
    def _binary(self, other: Any, op_type: str, reverse: bool = False) -> Variable:
        if _hooks.binary_op is None:
            raise RuntimeError(f"Variable arithmetic ({op_type}) builds layers: import "
                               "dask_fluid (or dask_fluid.layers) first")
        return _hooks.binary_op(self, other, op_type, reverse)

    def __add__(self, other):
        return self._binary(other, "elementwise_add")

    def __radd__(self, other):
        return self._binary(other, "elementwise_add", True)

    def __sub__(self, other):
        return self._binary(other, "elementwise_sub")

    def __rsub__(self, other):
        return self._binary(other, "elementwise_sub", True)

    def __mul__(self, other):
        return self._binary(other, "elementwise_mul")

    def __rmul__(self, other):
        return self._binary(other, "elementwise_mul", True)

    def __truediv__(self, other):
        return self._binary(other, "elementwise_div")

    def __rtruediv__(self, other):
        return self._binary(other, "elementwise_div", True)

    def __pow__(self, other):
        return self._binary(other, "elementwise_pow")

    def __rpow__(self, other):
        return self._binary(other, "elementwise_pow", True)

    def __floordiv__(self, other):
        return self._binary(other, "elementwise_floordiv")

    def __mod__(self, other):
        return self._binary(other, "elementwise_mod")

    def __neg__(self):
        return self._binary(-1.0, "elementwise_mul")  # Fluid's _neg_: scale by -1

    def __lt__(self, other):
        return self._binary(other, "less_than")

    def __le__(self, other):
        return self._binary(other, "less_equal")

    def __gt__(self, other):
        return self._binary(other, "greater_than")

    def __ge__(self, other):
        return self._binary(other, "greater_equal")

    def __getitem__(self, item: Any) -> Variable:
        """``x[1:3, 0]``: a ``slice`` op (``strided_slice`` for steps other than 1, then
        ``reverse`` for ``::-1``), as Fluid 1.8's ``_getitem_impl_``."""
        if _hooks.getitem is None:
            raise RuntimeError("Variable indexing builds layers: import dask_fluid first")
        return _hooks.getitem(self, item)

    def __iter__(self) -> Iterator[Variable]:
        # without this, __getitem__ would make every Variable an endless iterable (slices
        # clamp instead of raising IndexError)
        raise TypeError(f"Variable {self.name!r} of a program is not iterable: index it")

    #: numpy defers to a Variable's own operators (``np.float32(2) * x`` builds an op; numpy
    #: would otherwise make an array of it, dygraph's value without its graph), as Fluid 1.8
    __array_ufunc__ = None

    #: set on the result of a comparison operator (layers/nn.py's binary-op hook)
    _compared = False

    # Fluid 1.8's math_op_patch maps == and != to the equal / not_equal ops, in programs and
    # in dygraph, as < and the others: ``pred == label`` is a bool variable. A Variable stays
    # hashable by identity (dict keys and sets never call ==, and ``in`` tries identity first);
    # the framework never compares two Variables with == (it matches them with ``is`` or by
    # name). Anything but a variable, a number or an array compares as Python's default.
    def __eq__(self, other: object) -> Any:
        if not _comparable(other):
            return NotImplemented
        return self._binary(other, "equal")

    def __ne__(self, other: object) -> Any:
        if not _comparable(other):
            return NotImplemented
        return self._binary(other, "not_equal")

    def __bool__(self) -> bool:
        # a comparison built by the operators above has a value only when the program runs:
        # `if x == y:` or `v in [others]` would take Fluid 1.8's silent always-true
        if self._compared:
            raise TypeError(f"{self.name!r} compares Variables of a program: it has a value only "
                            "when the program runs, not while it is built; branch on it with "
                            "layers.cond / layers.Switch, and match Variables with `is` or by "
                            "name")
        return True

    __hash__ = object.__hash__


class Parameter(Variable):
    """A trainable, persistable variable of the global block."""

    def __init__(
        self,
        block: Block,
        name: str,
        shape: Sequence[int],
        dtype: Any = "float32",
        trainable: bool = True,
        regularizer: Any = None,
        gradient_clip_attr: Any = None,
        optimize_attr: dict | None = None,
        do_model_average: bool | None = None,
        **kwargs: Any,
    ) -> None:
        # Fluid 1.8's Parameter checks
        if shape is None:
            raise ValueError(f"the shape of parameter {name!r} should not be None")
        if dtype is None:
            raise ValueError(f"the dtype of parameter {name!r} should not be None")
        if len(shape) == 0:
            raise ValueError(f"the dimensions of the shape of parameter {name!r} must be "
                             "greater than 0")
        for d in shape:
            if int(d) <= 0:
                raise ValueError(
                    f"parameter {name!r} must have a fully known positive shape, got {list(shape)}"
                )
        kwargs.pop("persistable", None)
        super().__init__(block, name, shape, dtype, persistable=True, **kwargs)
        self.trainable = bool(trainable)
        self.stop_gradient = not self.trainable
        self.regularizer = regularizer
        self.gradient_clip_attr = gradient_clip_attr
        self.optimize_attr = dict(optimize_attr or {"learning_rate": 1.0})
        #: whether Fluid's ModelAverage averages it (ParamAttr's ``do_model_average``)
        self.do_model_average = do_model_average

    def _details(self) -> dict[str, Any]:
        return {**super()._details(), "trainable": self.trainable,
                "optimize_attr": self.optimize_attr, "regularizer": self.regularizer,
                "gradient_clip_attr": self.gradient_clip_attr,
                "do_model_average": self.do_model_average}

    def _to_dict(self) -> dict:
        d = super()._to_dict()
        d.update(kind="param", trainable=self.trainable,
                 optimize_attr=self.optimize_attr, do_model_average=self.do_model_average,
                 regularizer=None if self.regularizer is None else self.regularizer._to_dict(),
                 gradient_clip_attr=None if self.gradient_clip_attr is None
                 else self.gradient_clip_attr._to_dict())
        return d


def _as_names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (Variable, str)):
        value = [value]
    return [v.name if isinstance(v, Variable) else str(v) for v in value]


def _block_indices(value: Any) -> Any:
    """An attr value as an op keeps it: a :class:`Block`, or a list of them, as block indices
    (Fluid's ``set_block_attr`` / ``set_blocks_attr``: scripts pass the Block objects, e.g.
    ``listen_and_serv``'s ``optimize_blocks``); anything else as it is."""
    if isinstance(value, Block):
        return value.idx
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Block) for v in value):
        return [v.idx for v in value]
    return value


class Operator:
    """One op of a block: a type, named input and output slots (lists of var names), attrs."""

    def __init__(
        self,
        block: Block,
        type: str,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> None:
        self.block = block
        self.type = type
        self.inputs = {k: _as_names(v) for k, v in (inputs or {}).items()}
        self.outputs = {k: _as_names(v) for k, v in (outputs or {}).items()}
        opdef = registry.get(type) if registry.has(type) else None
        self.attrs = dict(opdef.attrs) if opdef else {}
        self.attrs.update({k: _block_indices(v) for k, v in (attrs or {}).items()})
        if OP_ROLE_KEY not in self.attrs:
            self.attrs[OP_ROLE_KEY] = block.program._current_role
        if OP_ROLE_VAR_KEY not in self.attrs and block.program._current_role_var:
            self.attrs[OP_ROLE_VAR_KEY] = list(block.program._current_role_var)
        scope = _name_scope.get()
        if scope.parent is not None and OP_NAMESCOPE_KEY not in self.attrs:
            self.attrs[OP_NAMESCOPE_KEY] = scope.full_name()
        device = _current_device.get()
        # only inside a guard, and not over a given op_device: a program cloned or loaded
        # inside a guard keeps the devices its ops were built with
        if device is not None and OP_DEVICE_KEY not in self.attrs:
            if opdef is not None and not opdef.host:
                self.attrs[OP_DEVICE_KEY] = device
            elif opdef is not None:
                # host ops (control flow, RPC) have no kernel to place, as Fluid's ops
                # without kernels: Fluid warns with these words and leaves op_device unset
                warnings.warn(f"The Op({type}) is not support to set device.", stacklevel=3)
        self._check(opdef)

    def _check(self, opdef: registry.OpDef | None) -> None:
        if opdef is None:
            raise KeyError(f"cannot create op {self.type!r}: no such op is registered")
        for slot in self.inputs:
            if slot not in opdef.inputs:
                raise ValueError(
                    f'Incorrect setting for input(s) of operator "{self.type}". '
                    f"Need: [{', '.join(opdef.inputs)}] Given: [{', '.join(self.inputs)}]"
                )
        for slot in self.outputs:
            if slot not in opdef.outputs:
                raise ValueError(
                    f'Incorrect setting for output(s) of operator "{self.type}". '
                    f"Need: [{', '.join(opdef.outputs)}] Given: [{', '.join(self.outputs)}]"
                )

    # Fluid's accessors
    def input(self, slot: str) -> list[str]:
        return list(self.inputs.get(slot, []))

    def output(self, slot: str) -> list[str]:
        return list(self.outputs.get(slot, []))

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.outputs)

    @property
    def input_arg_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names]

    @property
    def output_arg_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        return self.attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    def all_attrs(self) -> dict[str, Any]:
        """Every attribute, with block attributes (``sub_block``, ``optimize_blocks``,
        ``prefetch_blocks``: stored as block indices) as :class:`Block` objects, as Fluid's
        ``Operator.all_attrs()`` returns them."""
        program = self.block.program
        out = dict(self.attrs)
        for name in _BLOCK_ATTRS & out.keys():
            value = out[name]
            out[name] = ([program.block(int(i)) for i in value] if isinstance(value, list)
                         else program.block(int(value)))
        return out

    def _set_attr(self, name: str, value: Any) -> None:
        self.attrs[name] = _block_indices(value)
        self.block.program._version += 1  # an executor's plan of the program is stale now

    def _is_optimize_op(self) -> bool:
        """Whether the op's role has the Optimize bit (Fluid's ``_is_optimize_op``)."""
        return bool(int(self.attrs.get(OP_ROLE_KEY, 0)) & OpRole.Optimize)

    def _rename_input(self, old: str, new: str) -> None:
        for names in self.inputs.values():
            for i, n in enumerate(names):
                if n == old:
                    names[i] = new

    def _rename_output(self, old: str, new: str) -> None:
        for names in self.outputs.values():
            for i, n in enumerate(names):
                if n == old:
                    names[i] = new

    def _to_dict(self) -> dict:
        return {"type": self.type, "inputs": self.inputs, "outputs": self.outputs,
                "attrs": self.attrs}

    def to_string(self, throw_on_error: bool = False) -> str:
        """``{outputs} = type(inputs={...}, attrs...)``.

        Raises
        ------
        ValueError
            ``throw_on_error`` and the op reads or writes a variable that neither its block nor
            an enclosing block declares.
        """
        if throw_on_error:
            missing = self._undeclared()
            if missing:
                raise ValueError(f"op {self.type!r} in block {self.block.idx} uses variables "
                                 f"no enclosing block declares: {missing}")

        def slots(d: dict[str, list[str]]) -> str:
            return ", ".join(f"{k}={v}" for k, v in d.items())

        shown = {k: v for k, v in self.attrs.items() if k not in (OP_ROLE_KEY,)}
        attrs = ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items()))
        return f"{{{slots(self.outputs)}}} = {self.type}(inputs={{{slots(self.inputs)}}}, {attrs})"

    def _undeclared(self) -> list[str]:
        names = [n for slot in (self.inputs, self.outputs) for ns in slot.values() for n in ns]
        return sorted({n for n in names
                       if n != EMPTY_VAR and self.block._find_var_recursive(n) is None})

    def __str__(self) -> str:
        return self.to_string()

    __repr__ = __str__


class Block:
    """An ordered list of ops and the variables they use."""

    def __init__(self, program: Program, idx: int, parent_idx: int = -1) -> None:
        self.program = program
        self.idx = idx
        self.parent_idx = parent_idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []
        self.forward_block_idx = -1

    @property
    def parent(self) -> Block | None:
        return None if self.parent_idx < 0 else self.program.block(self.parent_idx)

    def var(self, name: str) -> Variable:
        """The variable ``name`` of this block; KeyError naming the block when missing."""
        try:
            return self.vars[name]
        except KeyError:
            raise KeyError(f"variable {name!r} is not in block {self.idx}") from None

    def has_var(self, name: str) -> bool:
        return name in self.vars

    def _find_var_recursive(self, name: str) -> Variable | None:
        block: Block | None = self
        while block is not None:
            if name in block.vars:
                return block.vars[name]
            block = block.parent
        return None

    def _var_recursive(self, name: str) -> Variable:
        var = self._find_var_recursive(name)
        if var is None:
            raise KeyError(f"variable {name!r} is not in block {self.idx} or its parents")
        return var

    def create_var(self, name: str | None = None, **kwargs: Any) -> Variable:
        """Create (or return the existing) variable ``name`` in this block (in dygraph mode a
        variable of the tracer, which holds a value)."""
        tracer = _tracer.get()
        if tracer is not None:
            return tracer.create_var(name, **kwargs)
        if name is None:
            name = unique_name.generate("_generated_var")
        if name in self.vars:
            var = self.vars[name]
            shape = kwargs.get("shape")
            if shape is not None and var.shape is not None and tuple(shape) != var.shape:
                raise ValueError(
                    f"variable {name!r} was defined with shape {list(var.shape)}, "
                    f"redefined with {list(shape)}"
                )
            return var
        var = Variable(self, name, **kwargs)
        self.vars[name] = var
        return var

    def create_parameter(self, name: str, shape: Sequence[int], **kwargs: Any) -> Parameter:
        """Create a :class:`Parameter` in this (global) block (in dygraph mode a parameter
        of the tracer)."""
        tracer = _tracer.get()
        if tracer is not None:
            return tracer.create_parameter(name, shape, **kwargs)
        initializer = kwargs.pop("initializer", None)
        if name in self.vars:
            var = self.vars[name]
            if isinstance(var, Parameter) and var.shape == tuple(shape):
                return var
            raise ValueError(f"parameter {name!r} already exists with shape {var.shape}")
        param = Parameter(self, name, shape, **kwargs)
        self.vars[name] = param
        if initializer is not None:
            # Fluid 1.8's Block.create_parameter: the init op goes into this block, unless an
            # op of it writes the parameter already
            inits = [op for op in self.ops if name in op.output_arg_names]
            if len(inits) > 1:
                raise RuntimeError(f"parameter {name!r} is initialized by several ops: "
                                   f"{[op.type for op in inits]}")
            if not inits:
                initializer(param, self)
        return param

    def _remove_var(self, name: str) -> None:
        self.vars.pop(name, None)

    def append_op(self, type: str, inputs=None, outputs=None, attrs=None) -> Operator:
        """Append an op, checked against its registered signature (in dygraph mode the
        tracer runs it instead)."""
        tracer = _tracer.get()
        if tracer is not None:
            return tracer.trace_op(type, inputs, outputs, attrs)
        op = Operator(self, type, inputs, outputs, attrs)
        self.ops.append(op)
        return op

    def _insert_op(self, index: int, type: str, inputs=None, outputs=None,
                   attrs=None) -> Operator:
        tracer = _tracer.get()
        if tracer is not None:  # dygraph: no op list, the op runs now
            return tracer.trace_op(type, inputs, outputs, attrs)
        op = Operator(self, type, inputs, outputs, attrs)
        self.ops.insert(index, op)
        return op

    def _prepend_op(self, type: str, inputs=None, outputs=None, attrs=None) -> Operator:
        return self._insert_op(0, type, inputs, outputs, attrs)

    def _remove_op(self, index: int) -> None:
        del self.ops[index]

    def all_parameters(self) -> list[Parameter]:
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    def _to_dict(self) -> dict:
        return {
            "idx": self.idx,
            "parent_idx": self.parent_idx,
            "forward_block_idx": self.forward_block_idx,
            "vars": [v._to_dict() for v in self.vars.values()],
            "ops": [op._to_dict() for op in self.ops],
        }

    def to_string(self, throw_on_error: bool = False, with_details: bool = False) -> str:
        """The block's variables, then its ops (see :meth:`Program.to_string`)."""
        lines = [f"block {self.idx} (parent {self.parent_idx}) {{"]
        lines += [f"    {v.to_string(throw_on_error, with_details)}" for v in self.vars.values()]
        if self.vars and self.ops:
            lines.append("")
        lines += [f"    {op.to_string(throw_on_error)}" for op in self.ops]
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.to_string()


_PROGRAM_ATTRS = (
    "_is_distributed", "_endpoints", "_ps_endpoint", "_is_chief", "_distributed_lookup_table",
    "_trainers_endpoints", "_trainer_id", "_num_trainers", "_nccl_comm_num",
    "_use_hierarchical_allreduce", "_hierarchical_allreduce_inter_nranks", "_sync_mode",
    "_pserver_endpoint",
)


class Program:
    """A Fluid program: block 0 is global, sub-blocks belong to control-flow and pserver ops."""

    def __init__(self) -> None:
        self.blocks: list[Block] = [Block(self, 0)]
        self.current_block_idx = 0
        #: bumped when an op's attribute changes in place: executors re-plan the program
        self._version = 0
        self.random_seed = 0
        self._current_role = OpRole.Forward
        self._current_role_var: list[str] = []
        #: backward passes appended so far (append_backward, gradients): from the second on,
        #: gradients whose names exist already get a ``grad/`` prefix per pass (Fluid 1.8)
        self._appending_grad_times = 0
        self._is_distributed = False
        self._is_chief = False
        self._endpoints: list[str] = []
        self._ps_endpoint: str | None = None
        self._distributed_lookup_table: str | None = None
        self._trainers_endpoints: list[str] = []
        self._trainer_id = 0
        self._num_trainers = 1

    @property
    def random_seed(self) -> int:
        """The seed of the program's random ops that have none of their own (0: a new one
        every run)."""
        return self._seed

    @random_seed.setter
    def random_seed(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            # Fluid 1.8's setter raises ValueError too
            raise ValueError(f"Program.random_seed must be an integer, got "
                             f"{type(seed).__name__} {seed!r}")
        self._seed = int(seed)

    # -- blocks -----------------------------------------------------------------------------
    def global_block(self) -> Block:
        return self.blocks[0]

    def block(self, index: int) -> Block:
        return self.blocks[index]

    def current_block(self) -> Block:
        return self.blocks[self.current_block_idx]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def _create_block(self, parent_idx: int | None = None) -> Block:
        if _tracer.get() is not None:
            raise NotImplementedError(
                "sub-blocks (While, IfElse, Switch, StaticRNN, DynamicRNN, ...) are not "
                "supported in dygraph mode: use Python's if/for/while on the values, or build "
                "a Program")
        parent = self.current_block_idx if parent_idx is None else parent_idx
        block = Block(self, len(self.blocks), parent)
        self.blocks.append(block)
        self.current_block_idx = block.idx
        return block

    def _rollback(self) -> None:
        self.current_block_idx = self.current_block().parent_idx

    def list_vars(self) -> Iterator[Variable]:
        for block in self.blocks:
            yield from block.vars.values()

    def all_parameters(self) -> list[Parameter]:
        return self.global_block().all_parameters()

    # -- op roles ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def _op_role_guard(self, role: int, role_var: Sequence[Any] = ()) -> Iterator[None]:
        """Ops appended inside get ``op_role`` and ``op_role_var`` (Fluid's _optimized_guard)."""
        saved = self._current_role, self._current_role_var
        self._current_role = role
        self._current_role_var = _as_names(list(role_var))
        try:
            yield
        finally:
            self._current_role, self._current_role_var = saved

    def _optimized_guard(self, param_and_grads: Sequence[Any]) -> contextlib.AbstractContextManager:
        return self._op_role_guard(OpRole.Optimize, [v for v in param_and_grads if v is not None])

    def _lr_schedule_guard(self) -> contextlib.AbstractContextManager:
        return self._op_role_guard(OpRole.LRSched)

    # -- copies and serialisation -------------------------------------------------------------
    def clone(self, for_test: bool = False) -> Program:
        """A deep copy. With ``for_test`` the copy drops backward and optimize ops and sets
        ``is_test`` on ops that have it (dropout), as Fluid's ``clone(for_test=True)``."""
        prog = Program._from_dict(self._to_dict())
        if for_test:
            prog._prune_for_test()
        return prog

    def _prune_with_input(self, feeded_var_names: Sequence[str],
                          targets: Sequence[Any]) -> Program:
        """A copy holding only the global-block ops that ``targets`` (variables, names, or ops
        of this program's global block) need, given that ``feeded_var_names`` are fed: the ops
        that compute fed variables go too, as in Fluid's ``_prune_with_input``. Variables no
        kept op uses are dropped, persistable ones too (Fluid's ``prune``).

        Raises
        ------
        ValueError
            A target is neither a variable of the program nor one of its global-block ops.
        """
        block = self.global_block()
        feeds = set(feeded_var_names)
        needed: set[str] = set()
        target_names: set[str] = set()
        target_ops: set[int] = set()
        index = {id(op): i for i, op in enumerate(block.ops)}
        for t in targets:
            if isinstance(t, Operator):
                if id(t) not in index:
                    raise ValueError(f"prune target op {t.type!r} is not an op of this "
                                     "program's global block")
                target_ops.add(index[id(t)])
                continue
            name = t.name if isinstance(t, Variable) else str(t)
            if block._find_var_recursive(name) is None:
                raise ValueError(f"prune target {name!r} is not a variable of the program")
            target_names.add(name)
            if name not in feeds:  # a fed target is its feed: its ops go (Fluid's rule)
                needed.add(name)
        kept: list[int] = []
        for i in range(len(block.ops) - 1, -1, -1):
            op = block.ops[i]
            if i in target_ops or set(op.output_arg_names) & needed:
                kept.append(i)
                needed |= {n for n in op.input_arg_names if n not in feeds}
        pruned = Program._from_dict(self._to_dict())
        pblock = pruned.global_block()
        pblock.ops = [pblock.ops[i] for i in reversed(kept)]
        used = {n for op in pblock.ops for n in (*op.input_arg_names, *op.output_arg_names)}
        used |= needed | target_names
        # as Fluid's prune: the variables no kept op uses go, persistable ones too (a pruned
        # program saved with save_persistables holds the parameters its ops read, no more)
        pblock.vars = {n: v for n, v in pblock.vars.items() if n in used}
        return pruned

    def _prune_for_test(self) -> None:
        train_roles = OpRole.Backward | OpRole.Optimize | OpRole.LRSched
        for block in self.blocks:
            block.ops = [op for op in block.ops
                         if not (op.attrs.get(OP_ROLE_KEY, 0) & train_roles)]
            for op in block.ops:
                if "is_test" in op.attrs:
                    op.attrs["is_test"] = True
            for name in [n for n in block.vars if n.endswith(GRAD_SUFFIX)]:
                del block.vars[name]
        # as Fluid's prune_backward: the variables only the training ops used go (the
        # learning rate, the optimizers' moments), so save_persistables of the test program
        # saves the parameters alone; data layers stay, fed or not
        used = {n for block in self.blocks for op in block.ops
                for n in (*op.input_arg_names, *op.output_arg_names)}
        for block in self.blocks:
            block.vars = {n: v for n, v in block.vars.items() if n in used or v.is_data}

    def _to_dict(self) -> dict:
        attrs = {k: getattr(self, k) for k in _PROGRAM_ATTRS if hasattr(self, k)}
        return {"format": "dask_fluid.program/1", "random_seed": self.random_seed,
                "attrs": attrs, "blocks": [b._to_dict() for b in self.blocks]}

    def to_json(self, indent: int | None = None) -> str:
        """Serialise to JSON (never pickle); :meth:`from_json` restores an equal program."""
        return json.dumps(self._to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Program:
        """Rebuild a program written by :meth:`to_json`."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not a dask_fluid program: invalid JSON ({err})") from err
        if not isinstance(data, dict) or data.get("format") != "dask_fluid.program/1":
            raise ValueError("not a dask_fluid program: missing format 'dask_fluid.program/1'")
        return cls._from_dict(data)

    @staticmethod
    def parse_from_string(binary_str: bytes | str) -> Program:
        """The program in ``binary_str`` (Fluid's ``Program.parse_from_string``): a
        :meth:`to_json` text, or the ``__model__`` file ``fluid.io.save_inference_model``
        writes. Paddle's binary ProgramDesc is not read: it says so."""
        text = binary_str.decode("utf-8", errors="replace") if isinstance(
            binary_str, bytes | bytearray) else str(binary_str)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError("Program.parse_from_string: not a dask_fluid program (a "
                             "ProgramDesc protobuf written by real Fluid is not read here; "
                             "rebuild the program in Python)") from None
        if isinstance(data, dict) and data.get("format") == "dask_fluid.inference/1":
            data = data["program"]
        return Program.from_json(json.dumps(data))

    def _copy_dist_param_info_from(self, other: Program) -> None:
        """Take ``other``'s distributed attributes (Fluid's method of the same name)."""
        if not isinstance(other, Program):
            raise TypeError("_copy_dist_param_info_from should be invoked with Program")
        for name in ("_is_distributed", "_is_chief", "_endpoints", "_ps_endpoint",
                     "_distributed_lookup_table", "_trainer_id", "_sync_mode"):
            setattr(self, name, copy.deepcopy(getattr(other, name, getattr(self, name, None))))
        self._parameters_on_pservers = getattr(other, "_parameters_on_pservers", None)

    @classmethod
    def _from_dict(cls, data: dict) -> Program:
        prog = cls()
        prog.random_seed = data["random_seed"]
        for k, v in data.get("attrs", {}).items():
            setattr(prog, k, copy.deepcopy(v))
        prog.blocks = []
        for bd in data["blocks"]:
            block = Block(prog, bd["idx"], bd["parent_idx"])
            block.forward_block_idx = bd.get("forward_block_idx", -1)
            prog.blocks.append(block)
            for vd in bd["vars"]:
                vd = dict(vd)
                kind = vd.pop("kind")
                name = vd.pop("name")
                if kind == "param":
                    vd["regularizer"] = regularizer_from_dict(vd.get("regularizer"))
                    vd["gradient_clip_attr"] = _clip_from_dict(vd.get("gradient_clip_attr"))
                    stop = vd.pop("stop_gradient")
                    var = Parameter(block, name, **vd)
                    var.stop_gradient = stop
                else:
                    var = Variable(block, name, **vd)
                block.vars[name] = var
        # the ops as they were built: a name_scope or device_guard around a clone or a load
        # must not tag them
        tokens = (_name_scope.set(_ROOT_NAME_SCOPE), _current_device.set(None))
        try:
            for bd, block in zip(data["blocks"], prog.blocks, strict=False):
                for od in bd["ops"]:
                    block.ops.append(Operator(block, od["type"], od["inputs"], od["outputs"],
                                              copy.deepcopy(od["attrs"])))
        finally:
            _name_scope.reset(tokens[0])
            _current_device.reset(tokens[1])
        return prog

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Program) and self.to_json() == other.to_json()

    __hash__ = object.__hash__

    def to_string(self, throw_on_error: bool = False, with_details: bool = False) -> str:
        """Readable text of every block (Fluid's ``to_string``).

        Parameters
        ----------
        throw_on_error : bool
            Check the program while printing it: raise instead of printing a variable without
            a dtype, or an op that uses a variable no enclosing block declares (a program
            edited by hand or by a faulty pass).
        with_details : bool
            Also print each variable's LoD level and data-layer flag, and each parameter's
            ``trainable``, ``optimize_attr``, ``regularizer``, ``gradient_clip_attr`` and
            ``do_model_average``.

        Raises
        ------
        TypeError
            An argument is not a bool (as Fluid asserts).
        ValueError
            ``throw_on_error`` and the program is malformed as above.
        """
        if not isinstance(throw_on_error, bool) or not isinstance(with_details, bool):
            raise TypeError(f"to_string(throw_on_error, with_details) take bools, got "
                            f"{throw_on_error!r}, {with_details!r}")
        return "\n".join(b.to_string(throw_on_error, with_details) for b in self.blocks)

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        n_ops = sum(len(b.ops) for b in self.blocks)
        return f"<Program: {len(self.blocks)} block(s), {n_ops} op(s), seed {self.random_seed}>"

    def _repr_html_(self) -> str:
        rows = []
        for b in self.blocks:
            rows.append(f"<tr><th colspan=3 style='text-align:left'>block {b.idx} "
                        f"(parent {b.parent_idx})</th></tr>")
            for op in b.ops:
                ins = html.escape(", ".join(f"{k}={v}" for k, v in op.inputs.items()))
                outs = html.escape(", ".join(f"{k}={v}" for k, v in op.outputs.items()))
                rows.append(f"<tr><td><code>{html.escape(op.type)}</code></td>"
                            f"<td>{ins}</td><td>{outs}</td></tr>")
        return ("<table><tr><th>op</th><th>inputs</th><th>outputs</th></tr>"
                + "".join(rows) + "</table>")


# -- default programs --------------------------------------------------------------------------
# A contextvar instead of Fluid's module globals: program_guard restores in ``finally``.
_programs: contextvars.ContextVar[tuple[Program, Program] | None] = contextvars.ContextVar(
    "dask_fluid_programs", default=None
)


def _defaults() -> tuple[Program, Program]:
    progs = _programs.get()
    if progs is None:
        progs = (Program(), Program())
        _programs.set(progs)
    return progs


def default_main_program() -> Program:
    """The program layers append to outside :func:`program_guard`."""
    return _defaults()[0]


def default_startup_program() -> Program:
    """The program parameter initialisers append to outside :func:`program_guard`."""
    return _defaults()[1]


def _get_var(name: str, program: Program | None = None) -> Variable:
    """The variable ``name`` of ``program``'s global block (Fluid's ``framework._get_var``);
    ValueError when it has none."""
    if not isinstance(name, str):
        raise TypeError(f"_get_var expects a variable name (str), got {type(name).__name__}")
    return (program if program is not None else default_main_program()).global_block().var(name)


def switch_main_program(program: Program) -> Program:
    """Make ``program`` the default main program and return the previous one."""
    main, startup = _defaults()
    _programs.set((program, startup))
    return main


def switch_startup_program(program: Program) -> Program:
    """Make ``program`` the default startup program and return the previous one."""
    main, startup = _defaults()
    _programs.set((main, program))
    return startup


class _NameScope:
    """A node of Fluid's name-scope tree: a prefix used again under the same parent becomes
    ``prefix_1``, ``prefix_2`` ... (Fluid 1.8's ``NameScope.child``)."""

    def __init__(self, name: str = "", parent: _NameScope | None = None) -> None:
        self.name, self.parent = name, parent
        self._children: dict[str, int] = {}

    def child(self, prefix: str) -> _NameScope:
        used = self._children.get(prefix, 0)
        self._children[prefix] = used + 1
        return _NameScope(prefix if used == 0 else f"{prefix}_{used}", self)

    def full_name(self) -> str:
        parts, scope = [], self
        while scope is not None:
            parts.append(scope.name)
            scope = scope.parent
        return "/".join(reversed(parts)) + "/"


# one root for the process, shared on purpose: Fluid counts a prefix's uses globally
_ROOT_NAME_SCOPE = _NameScope()
_name_scope: contextvars.ContextVar[_NameScope] = contextvars.ContextVar(
    "dask_fluid_name_scope", default=_ROOT_NAME_SCOPE)  # noqa: B039


@contextlib.contextmanager
def name_scope(prefix: str | None = None) -> Iterator[None]:
    """Tag the ops built inside with ``op_namescope = "/<outer>/<prefix>/"`` (Fluid 1.8's
    ``fluid.name_scope``), which the program's text and graph views show; a prefix used again
    in the same scope becomes ``prefix_1``, ``prefix_2``. Ops built outside any name scope
    carry no ``op_namescope`` (Fluid gives them ``"/"``).

    Raises
    ------
    ValueError
        ``prefix`` is empty.
    """
    if not prefix or not isinstance(prefix, str):
        raise ValueError(f"name_scope: the prefix must be a non-empty str, got {prefix!r}")
    token = _name_scope.set(_name_scope.get().child(prefix))
    try:
        yield
    finally:
        _name_scope.reset(token)


# A contextvar instead of Fluid's module global ``_current_device``: the guard restores it in
# ``finally`` and threads building programs do not see each other's guards.
_current_device: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "dask_fluid_device", default=None)


@contextlib.contextmanager
def device_guard(device: str | None = None) -> Iterator[None]:
    """Place the ops built inside on ``device`` (Fluid 1.8's ``fluid.device_guard``).

    Each op with a kernel built inside gets the attr ``op_device = device``; host ops (control
    flow, RPC: Fluid's ops without kernels) are left unset with a warning. An executor on
    ``CUDAPlace`` runs an op whose ``op_device`` is ``"cpu"`` on the host, with numpy: its
    inputs are copied from the GPU before it runs, and the GPU ops that read its outputs get
    them copied back. ``"gpu"`` runs the op on the executor's place (the CPU on ``CPUPlace``);
    the index of ``"gpu:N"`` is ignored with a warning, as Fluid's executor does (Fluid only
    uses it for pipeline parallelism). Guards nest: the innermost one wins, and ``None`` or
    ``""`` inside another guard goes back to the executor's choice.

    Parameters
    ----------
    device : {"cpu", "gpu", "gpu:N", "", None}
        ``None`` or ``""``: the executor places the ops (Fluid's default). ``""`` is stored
        as ``op_device = ""``, as Fluid does; ``None`` stores nothing.

    Raises
    ------
    ValueError
        ``device`` is ``"cpu:N"`` ("Should not set device id for cpu."), or another string
        than those above (Fluid's message).

    Examples
    --------
    >>> with fluid.device_guard("cpu"):
    ...     shape = fluid.layers.slice(shape, axes=[0], starts=[0], ends=[4])
    """
    index = None
    if device and isinstance(device, str) and ":" in device:
        device, index = device.split(":", 1)
        if device == "cpu":
            raise ValueError("Should not set device id for cpu.")
        if not index.isdigit():
            raise ValueError(f"device_guard: the device id of {device}:{index} must be a "
                             "non-negative integer, as in 'gpu:0'")
    if device not in ("cpu", "gpu", "", None):
        raise ValueError(
            "The Attr(device) should be 'cpu' or 'gpu', and it can also be empty string or "
            f"None when there is no need to specify device. But received {device}")
    if index:
        device = f"{device}:{index}"
    token = _current_device.set(device)
    try:
        yield
    finally:
        _current_device.reset(token)


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None
                  ) -> Iterator[None]:
    """Append layers to ``main_program`` (and initialisers to ``startup_program``) inside."""
    if not isinstance(main_program, Program):
        raise TypeError(f"main_program must be a Program, got {type(main_program).__name__}")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise TypeError(
            f"startup_program must be a Program, got {type(startup_program).__name__}")
    current = _defaults()
    token = _programs.set((main_program, startup_program or current[1]))
    try:
        yield
    finally:
        _programs.reset(token)
