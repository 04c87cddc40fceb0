"""Parameter initialisers: each prepends one seeded op to the startup program, as Fluid does.

Random initialisers are deterministic: the startup op's generator is keyed by the program's
``random_seed`` (or the initialiser's own ``seed``) and by the parameter's name, so every run,
every node and every slice of a parameter draws the same numbers. Unlike Fluid, two parameters
of the same shape do not get identical values under one seed.
"""

from __future__ import annotations

import math
from typing import Any

from .framework import Block, Variable


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
    """Every element equals ``value``; ``force_cpu`` is recorded on the op as in Fluid (the
    executor makes every startup value on its own place: see ``fill_constant``)."""

    op_type = "fill_constant"

    def __init__(self, value: float = 0.0, force_cpu: bool = False) -> None:
        self.value = float(value)
        self.force_cpu = bool(force_cpu)

    def _attrs(self, var, block):
        return {"shape": list(var.shape), "dtype": var.dtype, "value": self.value,
                "force_cpu": self.force_cpu}


class UniformInitializer(Initializer):
    """Uniform in ``[low, high)``."""

    op_type = "uniform_random"

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0) -> None:
        if not low < high:
            raise ValueError(f"UniformInitializer needs low < high, got low={low}, high={high}")
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def _attrs(self, var, block):
        return {"shape": list(var.shape), "dtype": var.dtype, "min": self.low, "max": self.high,
                "seed": self._seed(self.seed, block)}


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

    def _attrs(self, var, block):
        if tuple(self.value.shape) != tuple(var.shape):
            raise ValueError(f"NumpyArrayInitializer: the array has shape {self.value.shape}, "
                             f"the variable {var.name!r} {tuple(var.shape)}")
        dtype = str(var.dtype)
        slot = {"float32": "fp32_values", "int32": "int32_values", "int64": "int64_values",
                "bool": "bool_values"}.get(dtype)
        if slot is None:  # Fluid's assign_value carries only these
            raise ValueError(f"NumpyArrayInitializer: {var.name!r} is {dtype}; it initialises "
                             "float32, int32, int64 and bool variables")
        return {"shape": list(var.shape), "dtype": dtype,
                slot: self.value.astype(dtype).reshape(-1).tolist()}


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
TruncatedNormal = TruncatedNormalInitializer
Xavier = XavierInitializer
MSRA = MSRAInitializer
