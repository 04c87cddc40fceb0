"""Parameter initialisers: each prepends one seeded op to the startup program, as Fluid does.

Random initialisers are deterministic: the startup op's generator is keyed by the program's
``random_seed`` (or the initialiser's own ``seed``) and by the parameter's name, so every run,
every node and every slice of a parameter draws the same numbers. Unlike Fluid, two parameters
of the same shape do not get identical values under one seed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from . import unique_name
from .framework import Block, Variable

#: set inside :func:`init_on_cpu` (Fluid 1.8's module global ``_force_init_on_cpu_``)
_force_init_on_cpu_ = False


def force_init_on_cpu() -> bool:
    """Whether initialisers are inside :func:`init_on_cpu` (Fluid 1.8's
    ``fluid.initializer.force_init_on_cpu``).

    Returns
    -------
    bool
        True inside ``with init_on_cpu():``; then :class:`ConstantInitializer` sets its
        ``fill_constant`` op's ``force_cpu`` attr, as in Fluid.
    """
    return _force_init_on_cpu_


@contextlib.contextmanager
def init_on_cpu() -> Iterator[None]:
    """Within the block, constant initialisers mark their op ``force_cpu=True`` (Fluid 1.8's
    ``fluid.initializer.init_on_cpu``, used around ``layers.create_global_var`` for step
    counters and learning-rate schedules).

    In Fluid the attr keeps the tensor in host memory. Here it is recorded on the op and
    nothing else: the ``fill_constant`` kernel makes its tensor on the executor's place, since
    a kernel reads all its inputs on one place (see ``ops.tensor_ops.fill_constant``).
    """
    global _force_init_on_cpu_
    previous = _force_init_on_cpu_
    _force_init_on_cpu_ = True
    try:
        yield
    finally:  # restored on an exception too (Fluid restores it only on a normal exit)
        _force_init_on_cpu_ = previous


class Initializer:
    """Base class: ``init(var, startup_block)`` prepends the init op."""

    op_type = ""

    def __call__(self, var: Variable, block: Block) -> None:
        block._prepend_op(self.op_type, outputs={"Out": [var.name]}, attrs=self._attrs(var, block))

    def _attrs(self, var: Variable, block: Block) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not define its op attrs")

    @staticmethod
    def _seed(seed: int, block: Block) -> int:
        return int(seed or block.program.random_seed)


class ConstantInitializer(Initializer):
    """Every element equals ``value``; ``force_cpu`` (or being inside :func:`init_on_cpu`) is
    recorded on the op as in Fluid (the executor makes every startup value on its own place:
    see ``fill_constant``)."""

    op_type = "fill_constant"

    def __init__(self, value: float = 0.0, force_cpu: bool = False) -> None:
        self.value = float(value)
        self.force_cpu = bool(force_cpu)

    def _attrs(self, var, block):
        return {"shape": list(var.shape), "dtype": var.dtype, "value": self.value,
                "force_cpu": self.force_cpu or force_init_on_cpu()}


class UniformInitializer(Initializer):
    """Uniform in ``[low, high)``; with ``diag_num`` > 0, the flat elements ``i * (diag_step
    + 1)`` for ``i < diag_num`` are then set to ``diag_val`` (Fluid 1.8's diagonal init of
    ``uniform_random``).

    Raises
    ------
    ValueError
        ``high < low``, or only one of ``diag_num`` and ``diag_step`` positive (Fluid 1.8
        asserts both or neither).
    """

    op_type = "uniform_random"

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0, diag_num: int = 0,
                 diag_step: int = 0, diag_val: float = 1.0) -> None:
        if high < low:
            raise ValueError(f"UniformInitializer needs low <= high, got low={low}, "
                             f"high={high}")
        if (diag_num > 0 or diag_step > 0) and not (diag_num > 0 and diag_step > 0):
            raise ValueError(f"UniformInitializer: diag_num and diag_step must both be "
                             f"positive to set a diagonal, got diag_num={diag_num}, "
                             f"diag_step={diag_step}")
        self.low, self.high, self.seed = float(low), float(high), int(seed)
        self.diag_num, self.diag_step = int(diag_num), int(diag_step)
        self.diag_val = float(diag_val)

    def _attrs(self, var, block):
        return {"shape": list(var.shape), "dtype": var.dtype, "min": self.low, "max": self.high,
                "seed": self._seed(self.seed, block), "diag_num": self.diag_num,
                "diag_step": self.diag_step, "diag_val": self.diag_val}


class NormalInitializer(Initializer):
    """Gaussian with mean ``loc`` and standard deviation ``scale``."""

    op_type = "gaussian_random"

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def _attrs(self, var, block):
        return {"shape": list(var.shape), "dtype": var.dtype, "mean": self.loc,
                "std": self.scale, "seed": self._seed(self.seed, block)}


class TruncatedNormalInitializer(NormalInitializer):
    """Gaussian truncated to two standard deviations."""

    op_type = "truncated_gaussian_random"


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


class XavierInitializer(Initializer):
    """Glorot: uniform in ``±sqrt(6 / (fan_in + fan_out))`` or normal with
    ``std = sqrt(2 / (fan_in + fan_out))``."""

    def __init__(self, uniform: bool = True, fan_in: int | None = None,
                 fan_out: int | None = None, seed: int = 0) -> None:
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, int(seed)

    def __call__(self, var: Variable, block: Block) -> None:
        f_in, f_out = _fans(var.shape)
        f_in = self.fan_in or f_in
        f_out = self.fan_out or f_out
        if self.uniform:
            limit = math.sqrt(6.0 / (f_in + f_out))
            UniformInitializer(-limit, limit, self.seed)(var, block)
        else:
            NormalInitializer(0.0, math.sqrt(2.0 / (f_in + f_out)), self.seed)(var, block)


class MSRAInitializer(Initializer):
    """He initialisation from ``fan_in``."""

    def __init__(self, uniform: bool = True, fan_in: int | None = None, seed: int = 0) -> None:
        self.uniform, self.fan_in, self.seed = uniform, fan_in, int(seed)

    def __call__(self, var: Variable, block: Block) -> None:
        f_in = self.fan_in or _fans(var.shape)[0]
        if self.uniform:
            limit = math.sqrt(6.0 / f_in)
            UniformInitializer(-limit, limit, self.seed)(var, block)
        else:
            NormalInitializer(0.0, math.sqrt(2.0 / f_in), self.seed)(var, block)


class NumpyArrayInitializer(Initializer):
    """The values of a numpy array (Fluid's ``assign_value`` op carries them)."""

    op_type = "assign_value"

    def __init__(self, value: Any) -> None:
        import numpy as np

        self.value = np.asarray(value)

    def __call__(self, var: Variable, block: Block) -> None:
        out = _fp32_stand_in(var, block, "numpy_array_init")
        block._prepend_op(self.op_type, outputs={"Out": [out.name]},
                          attrs=self._attrs(out, block))
        _cast_to(out, var, block)

    def _attrs(self, var, block):
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer: the array has shape {self.value.shape}, "
                             f"the variable {var.name!r} {tuple(var.shape)}")
        dtype = str(var.dtype)
        slot = {"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values",
                "bool": "bool_values"}.get(dtype)
        if slot is None:  # Fluid's assign_value carries only these
            raise ValueError(f"NumpyArrayInitializer: {var.name!r} is {dtype}; it initialises "
                             "float16, float32, int32, int64 and bool variables")
        return {"shape": list(var.shape), "dtype": dtype,
                slot: self.value.astype(dtype).reshape(-1).tolist()}


class BilinearInitializer(Initializer):
    """The bilinear interpolation kernel, for a ``conv2d_transpose`` that upsamples (Fluid
    1.8's ``fluid.initializer.Bilinear``): every ``[K, K]`` slice of a ``[C_out, C_in, K, K]``
    filter gets ``(1 − |x / f − c|) · (1 − |y / f − c|)`` at column x and row y, with
    ``f = ceil(K / 2)`` and ``c = (2f − 1 − f mod 2) / (2f)``. Upsampling by an integer
    ``factor``: ``filter_size = 2·factor − factor % 2``, ``stride = factor``,
    ``padding = ceil((factor − 1) / 2)``, ``groups = C``, no bias.

    As Fluid, one ``assign_value`` op (``fp32_values``) appended to the startup block. The
    row is the integer ``(i // K) % K`` of the flat index i, as Fluid's ``(i / size) % size``
    gives under Python 2; Fluid 1.8 under Python 3 divides exactly there, a bug that gives a
    kernel that is not separable (later Paddle versions keep it).
    """

    op_type = "assign_value"

    def __call__(self, var: Variable, block: Block) -> None:
        if not isinstance(var, Variable):
            raise ValueError("BilinearInitializer: var must be a Variable")
        if not isinstance(block, Block):
            raise ValueError("BilinearInitializer: block must be a Block")
        shape = tuple(var.shape or ())
        if len(shape) != 4:
            raise ValueError(f"BilinearInitializer: the filter {var.name!r} must have 4 dims, "
                             f"got shape {list(shape)}")
        if shape[2] != shape[3]:
            raise ValueError(f"BilinearInitializer: the filter {var.name!r} must be square "
                             f"(shape[2] == shape[3]), got shape {list(shape)}")
        if str(var.dtype) not in ("float32", "float16"):  # Fluid 1.8 writes fp32_values only
            raise ValueError(f"BilinearInitializer: {var.name!r} is {var.dtype}; Fluid 1.8's "
                             "Bilinear initialises float32 and float16 filters only")
        if math.prod(shape) > 1024 * 1024:
            raise ValueError(f"BilinearInitializer: the filter {var.name!r} has "
                             f"{math.prod(shape)} elements, more than Fluid's 1024 * 1024")
        out = _fp32_stand_in(var, block, "bilinear_init")
        block.append_op(self.op_type, outputs={"Out": [out.name]},
                        attrs={"shape": list(shape), "dtype": "float32",
                               "fp32_values": bilinear_kernel(shape).reshape(-1).tolist()})
        _cast_to(out, var, block)


def _fp32_stand_in(var: Variable, block: Block, prefix: str) -> Variable:
    """What an init op whose attrs carry float32 values writes: ``var``, or for a float16
    ``var`` a float32 temporary that :func:`_cast_to` then casts into it (Fluid 1.8's "to be
    compatible of fp16 initalizers")."""
    if str(var.dtype) != "float16":
        return var
    return block.create_var(name=unique_name.generate(f"{prefix}.{var.name}.tmp"),
                            shape=var.shape, dtype="float32", persistable=False)


def _cast_to(out: Variable, var: Variable, block: Block) -> None:
    """Append the cast from the float32 stand-in ``out`` into ``var`` (none when ``out`` is
    ``var``)."""
    if out is not var:
        block.append_op("cast", inputs={"X": [out.name]}, outputs={"Out": [var.name]},
                        attrs={"in_dtype": "float32", "out_dtype": "float16"})


def bilinear_kernel(shape: tuple[int, ...]) -> Any:
    """The float32 values :class:`BilinearInitializer` gives a filter of ``shape``."""
    import numpy as np

    size = int(shape[3])
    f = math.ceil(size / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    i = np.arange(math.prod(shape))
    x, y = i % size, (i // size) % size
    w = (1 - np.abs(x / f - c)) * (1 - np.abs(y / f - c))
    return w.astype(np.float32).reshape(shape)


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
TruncatedNormal = TruncatedNormalInitializer
Xavier = XavierInitializer
MSRA = MSRAInitializer
Bilinear = BilinearInitializer
