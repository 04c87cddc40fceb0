"""Random initialisation kernels: uniform_random, gaussian_random, truncated_gaussian_random,
and fake_init (the zero placeholder of a remote table).

Determinism rule: the generator of an op is
``numpy.random.default_rng([seed, zlib.crc32(key.encode())])`` with
``key = attrs["rng_key"]`` when set, else the op's output variable name, which the executor
passes as ``attrs["_out_name"]``. So a variable gets the same values in every run, on every
machine and in every process, and two variables of one shape under one seed differ.

Values are always drawn on the host in float64 and then cast, so numpy and cupy runs agree
bit for bit; ``attrs["_place"] == "gpu"`` moves the result to cupy.

Slicing (pserver blocks): with ``full_shape`` (the unsliced parameter's shape) and
``row_offset``, the op draws the whole ``full_shape`` tensor with the same generator and returns
rows ``[row_offset, row_offset + shape[0])``: exactly the slice of the unsliced draw.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from .registry import register
from .selected_rows import to_dtype, to_place


def op_rng(op: str, attrs: dict) -> np.random.Generator:
    """The generator of a random op under the determinism rule above."""
    key = attrs.get("rng_key") or attrs.get("_out_name")
    if not key:
        raise ValueError(f"{op}: no rng_key attr and no _out_name: the executor must pass the "
                         f"output variable's name as attrs['_out_name'] so that the draw is "
                         f"deterministic")
    return np.random.default_rng([int(attrs.get("seed", 0)), zlib.crc32(str(key).encode())])


def _draw(op: str, attrs: dict, sample: Callable[[np.random.Generator, tuple], np.ndarray]):
    shape = tuple(int(s) for s in attrs.get("shape", []))
    full = attrs.get("full_shape")
    rng = op_rng(op, attrs)
    if full:
        full = tuple(int(s) for s in full)
        offset = int(attrs.get("row_offset", 0))
        stride = int(attrs.get("row_stride", 0))
        if stride > 0:
            # A modulo shard of a distributed table: rows offset, offset + stride, ...; the
            # shard's padding rows (never addressed) stay zero.
            taken = sample(rng, full)[offset::stride][:shape[0]]
            values = np.zeros(shape, dtype=np.float64)
            values[:len(taken)] = taken
        else:
            if tuple(shape[1:]) != full[1:] or not 0 <= offset <= full[0] - shape[0]:
                raise ValueError(f"{op}: a slice of shape {list(shape)} at row_offset {offset} "
                                 f"does not fit in full_shape {list(full)}")
            values = sample(rng, full)[offset:offset + shape[0]]
    else:
        values = sample(rng, shape)
    dtype = to_dtype(attrs.get("dtype", "float32"))
    return {"Out": [to_place(np.ascontiguousarray(values, dtype=dtype), attrs)]}


_COMMON = {"shape": [], "dtype": "float32", "seed": 0}


@register("uniform_random", (), ("Out",), {**_COMMON, "min": -1.0, "max": 1.0})
def uniform_random(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ~ U[min, max), seeded by (seed, output name)."""
    lo, hi = float(attrs.get("min", -1.0)), float(attrs.get("max", 1.0))
    return _draw("uniform_random", attrs, lambda rng, s: rng.uniform(lo, hi, size=s))


@register("gaussian_random", (), ("Out",), {**_COMMON, "mean": 0.0, "std": 1.0})
def gaussian_random(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ~ N(mean, std²), seeded by (seed, output name)."""
    mu, sd = float(attrs.get("mean", 0.0)), float(attrs.get("std", 1.0))
    return _draw("gaussian_random", attrs, lambda rng, s: rng.normal(mu, sd, size=s))


def _truncated_normal(rng: np.random.Generator, shape: tuple, mu: float, sd: float):
    # Resample the values beyond 2 std until none is left: deterministic for a given generator,
    # and the result is the exact truncated normal (clipping would pile mass on the bounds).
    values = rng.standard_normal(size=shape)
    bad = np.abs(values) > 2.0
    while bad.any():
        values[bad] = rng.standard_normal(size=int(bad.sum()))
        bad = np.abs(values) > 2.0
    return values * sd + mu


@register("truncated_gaussian_random", (), ("Out",), {**_COMMON, "mean": 0.0, "std": 1.0})
def truncated_gaussian_random(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ~ N(mean, std²) truncated to mean ± 2 std (by resampling)."""
    mu, sd = float(attrs.get("mean", 0.0)), float(attrs.get("std", 1.0))
    return _draw("truncated_gaussian_random", attrs,
                 lambda rng, s: _truncated_normal(rng, s, mu, sd))


@register("fake_init", (), ("Out",), {"shape": [], "dtype": "float32"})
def fake_init(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = zeros of ``shape``: a placeholder for a table that lives on the pservers."""
    shape = tuple(int(s) for s in attrs.get("shape", []))
    dtype = to_dtype(attrs.get("dtype", "float32"))
    return {"Out": [to_place(np.zeros(shape, dtype=dtype), attrs)]}
