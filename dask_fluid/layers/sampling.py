"""Random layers of ``fluid.layers`` drawn in the main program: ``uniform_random``,
``gaussian_random``, their ``_batch_size_like`` forms, ``sampling_id`` and ``random_crop``
(Fluid 1.8's signatures; the kernels are in :mod:`dask_fluid.ops.random_ops`).

As in Fluid 1.8, ``seed=0`` draws new values each run and a nonzero ``seed`` draws the same
values every run (see :mod:`dask_fluid.ops.random_ops` for how the draws are seeded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, convert_dtype
from ..layer_helper import LayerHelper
from .tensor import _check_var, _shape_tensor_list, create_global_var

__all__ = ["gaussian_random", "gaussian_random_batch_size_like", "random_crop", "sampling_id",
           "uniform_random", "uniform_random_batch_size_like"]

_FLOATS = ("float16", "float32", "float64")


def _float_dtype(dtype: Any, layer: str) -> str:
    dtype = convert_dtype(dtype)
    if dtype not in _FLOATS:
        raise TypeError(f"{layer}: dtype must be one of {_FLOATS}, got {dtype!r}")
    return dtype


def _seed(seed: Any, layer: str) -> int:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"{layer}: seed must be an int (0: new values each run), got {seed!r}")
    return int(seed)


def _draw(op_type: str, shape: Sequence[int | Variable] | Variable, dtype: Any, seed: int,
          name: str | None, **attrs: Any) -> Variable:
    """A random op whose shape is a list (ints and Variables) or an int Variable, as Fluid
    1.8's ``_get_shape_tensor_inputs`` passes it."""
    dtype = _float_dtype(dtype, op_type)
    inputs: dict[str, list[Variable]] = {}
    if isinstance(shape, Variable):
        if shape.dtype not in ("int32", "int64"):
            raise TypeError(f"{op_type}: a shape Variable must be int32 or int64, got "
                            f"{shape.dtype}")
        shape.stop_gradient = True
        inputs["ShapeTensor"] = [shape]
        static: list[int] | None = None
        attr_shape: list[int] = []
    elif isinstance(shape, (list, tuple)) and len(shape) > 0:
        attr_shape = [-1 if isinstance(d, Variable) else int(d) for d in shape]
        if any(isinstance(d, Variable) for d in shape):
            inputs["ShapeTensorList"] = _shape_tensor_list(shape)
        static = attr_shape
    else:
        raise TypeError(f"{op_type}: shape must be a non-empty list or tuple (ints or int "
                        f"Variables) or an int Variable, got {shape!r}")
    helper = LayerHelper(op_type, name)
    out = helper.create_tmp(dtype=dtype, shape=static, stop_gradient=True)
    helper.append_op(op_type, inputs=inputs, outputs={"Out": [out]},
                     attrs={"shape": attr_shape, "seed": _seed(seed, op_type),
                            "dtype": dtype, **attrs})
    return out


def uniform_random(shape: Sequence[int | Variable] | Variable, dtype: Any = "float32",
                   min: float = -1.0, max: float = 1.0, seed: int = 0,  # noqa: A002
                   name: str | None = None) -> Variable:
    """A tensor of ``shape`` drawn from U[min, max) (Fluid 1.8's ``layers.uniform_random``)."""
    return _draw("uniform_random", shape, dtype, seed, name, min=float(min), max=float(max))


def gaussian_random(shape: Sequence[int | Variable] | Variable, mean: float = 0.0,
                    std: float = 1.0, seed: int = 0, dtype: Any = "float32",
                    name: str | None = None) -> Variable:
    """A tensor of ``shape`` drawn from N(mean, std²) (Fluid 1.8's
    ``layers.gaussian_random``)."""
    return _draw("gaussian_random", shape, dtype, seed, name, mean=float(mean), std=float(std))


def _batch_size_like(op_type: str, input: Variable, shape: Sequence[int], dtype: Any,
                     input_dim_idx: int, output_dim_idx: int, seed: int,
                     **attrs: Any) -> Variable:
    _check_var(input, "input", op_type)
    dtype = _float_dtype(dtype, op_type)
    if not isinstance(shape, (list, tuple)) or not shape:
        raise TypeError(f"{op_type}: shape must be a non-empty list or tuple of ints, got "
                        f"{shape!r}")
    shape = [int(d) for d in shape]
    rank = len(input.shape) if input.shape is not None else None
    if not 0 <= output_dim_idx < len(shape) or (rank is not None
                                                 and not 0 <= input_dim_idx < rank):
        raise ValueError(f"{op_type}: input_dim_idx {input_dim_idx} must index input "
                         f"{input.name!r} (rank {rank}) and output_dim_idx {output_dim_idx} "
                         f"the shape {shape}")
    static = list(shape)
    static[output_dim_idx] = input.shape[input_dim_idx] if rank is not None else -1
    helper = LayerHelper(op_type)
    out = helper.create_tmp(dtype=dtype, shape=static, stop_gradient=True)
    helper.append_op(op_type, inputs={"Input": [input]}, outputs={"Out": [out]},
                     attrs={"shape": shape, "input_dim_idx": int(input_dim_idx),
                            "output_dim_idx": int(output_dim_idx),
                            "seed": _seed(seed, op_type), "dtype": dtype, **attrs})
    return out


def uniform_random_batch_size_like(input: Variable, shape: Sequence[int],
                                   dtype: Any = "float32", input_dim_idx: int = 0,
                                   output_dim_idx: int = 0, min: float = -1.0,  # noqa: A002
                                   max: float = 1.0, seed: int = 0) -> Variable:  # noqa: A002
    """U[min, max) values of ``shape`` with dim ``output_dim_idx`` taken from dim
    ``input_dim_idx`` of ``input`` at run time (Fluid 1.8's
    ``layers.uniform_random_batch_size_like``)."""
    return _batch_size_like("uniform_random_batch_size_like", input, shape, dtype,
                            input_dim_idx, output_dim_idx, seed, min=float(min),
                            max=float(max))


def gaussian_random_batch_size_like(input: Variable, shape: Sequence[int],
                                    input_dim_idx: int = 0, output_dim_idx: int = 0,
                                    mean: float = 0.0, std: float = 1.0, seed: int = 0,
                                    dtype: Any = "float32") -> Variable:
    """N(mean, std²) values of ``shape`` with dim ``output_dim_idx`` taken from dim
    ``input_dim_idx`` of ``input`` at run time (Fluid 1.8's
    ``layers.gaussian_random_batch_size_like``)."""
    return _batch_size_like("gaussian_random_batch_size_like", input, shape, dtype,
                            input_dim_idx, output_dim_idx, seed, mean=float(mean),
                            std=float(std))


def sampling_id(x: Variable, min: float = 0.0, max: float = 1.0,  # noqa: A002
                seed: int = 0, dtype: Any = "float32") -> Variable:
    """One class id per row of ``x`` (``[batch, classes]`` probabilities), drawn by a
    uniform number in [min, max) against the row's running sum (Fluid 1.8's
    ``layers.sampling_id``). The ids are int64, as Fluid's kernel writes them, whatever
    ``dtype`` says."""
    _check_var(x, "x", "sampling_id")
    if x.shape is not None and len(x.shape) != 2:
        raise ValueError(f"sampling_id: x {x.name!r} must be 2-D [batch, classes], got shape "
                         f"{list(x.shape)}")
    _float_dtype(dtype, "sampling_id")
    helper = LayerHelper("sampling_id")
    out = helper.create_tmp(dtype="int64", shape=[x.shape[0]] if x.shape else None,
                            stop_gradient=True)
    helper.append_op("sampling_id", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"min": float(min), "max": float(max),
                            "seed": _seed(seed, "sampling_id")})
    return out


def random_crop(x: Variable, shape: Sequence[int], seed: int | Variable | None = None
                ) -> Variable:
    """Each instance of ``x`` cropped to ``shape`` (its trailing dims) at a random offset
    (Fluid 1.8's ``layers.random_crop``).

    The seed lives in a persistable int64 variable that each run advances (``SeedOut``), so
    every run crops anew and a saved model resumes the sequence. An int ``seed`` (Fluid draws
    one in [-65536, 65536) when None) starts it: Fluid leaves that variable unset and the op
    falls back to ``startup_seed``; here the startup program sets it to that seed, the same
    first value.
    """
    _check_var(x, "x", "random_crop")
    if not isinstance(shape, (list, tuple)) or not shape or \
            not all(isinstance(d, int) and d > 0 for d in shape):
        raise TypeError(f"random_crop: shape must be a list of positive ints, got {shape!r}")
    xs = list(x.shape or ())
    if len(shape) > len(xs) or any(0 < d < s for s, d in zip(shape, xs[len(xs) - len(shape):],
                                                             strict=True)):
        raise ValueError(f"random_crop: shape {list(shape)} must be at most the trailing dims "
                         f"of x {x.name!r} (shape {xs})")
    if seed is None:
        seed = int(np.random.randint(-65536, 65536))
    attrs: dict[str, Any] = {"shape": [int(d) for d in shape]}
    if isinstance(seed, Variable):
        if seed.dtype != "int64":
            raise TypeError(f"random_crop: a seed Variable must be int64, got {seed.dtype}")
        seed_var = seed
    elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        attrs["startup_seed"] = int(seed)
        seed_var = create_global_var([1], int(seed), "int64", persistable=True,
                                     name=unique_name.generate("random_crop_seed"))
    else:
        raise TypeError(f"random_crop: seed must be an int, an int64 Variable or None, got "
                        f"{seed!r}")
    helper = LayerHelper("random_crop")
    out = helper.create_tmp(dtype=x.dtype, shape=[*xs[:len(xs) - len(shape)], *shape])
    helper.append_op("random_crop", inputs={"X": [x], "Seed": [seed_var]},
                     outputs={"Out": [out], "SeedOut": [seed_var]}, attrs=attrs)
    return out
