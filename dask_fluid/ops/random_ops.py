"""Random kernels: uniform_random, gaussian_random, truncated_gaussian_random, their
``_batch_size_like`` forms, sampling_id, random_crop, and fake_init (the zero placeholder of a
remote table).

Determinism rule: the generator of an op is
``numpy.random.default_rng([seed, zlib.crc32(key.encode())])`` with
``key = attrs["rng_key"]`` when set, else the op's output variable name, which the executor
passes as ``attrs["_out_name"]``. So a variable gets the same values in every run, on every
machine and in every process, and two variables of one shape under one seed differ. That is
what initialisers (writing persistable variables) and ops with a nonzero ``seed`` get: Fluid
1.8 re-seeds those every run too.

A draw into a temporary with ``seed`` 0 is Fluid's "a new value each run": the executor then
passes ``attrs["_rng"]``, a generator per op kept with the scope (seeded by the program's
``random_seed``), and the kernel draws from it, so each run continues the stream and a fresh
scope replays it.

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

from .registry import array_module, register, to_host
from .selected_rows import to_dtype, to_place


def op_rng(op: str, attrs: dict) -> np.random.Generator:
    """The generator of a random op under the determinism rule above."""
    key = attrs.get("rng_key") or attrs.get("_out_name")
    if not key:
        raise ValueError(f"{op}: no rng_key attr and no _out_name: the executor must pass the "
                         f"output variable's name as attrs['_out_name'] so that the draw is "
                         f"deterministic")
    return np.random.default_rng([int(attrs.get("seed", 0)), zlib.crc32(str(key).encode())])


def draw_rng(op: str, attrs: dict) -> np.random.Generator:
    """The run's stream when the executor passed one (a seed-0 draw into a temporary), else
    the deterministic generator of :func:`op_rng`."""
    rng = attrs.get("_rng")
    return op_rng(op, attrs) if rng is None else rng


def _shape(op: str, ins: dict, attrs: dict) -> tuple[int, ...]:
    """The shape to draw: ShapeTensor, else ShapeTensorList, else the ``shape`` attr (Fluid's
    order); a ``_batch_size_like`` op's ``Input`` sets dim ``output_dim_idx``."""
    tensor = (ins.get("ShapeTensor") or [None])[0]
    parts = [t for t in ins.get("ShapeTensorList") or [] if t is not None]
    if tensor is not None:
        shape = [int(v) for v in to_host(tensor).ravel()]
    elif parts:
        shape = [int(to_host(t).ravel()[0]) for t in parts]
    else:
        shape = [int(v) for v in attrs.get("shape", [])]
    like = (ins.get("Input") or [None])[0]
    if like is not None:
        i, o = int(attrs.get("input_dim_idx", 0)), int(attrs.get("output_dim_idx", 0))
        if not (0 <= i < like.ndim and 0 <= o < len(shape)):
            raise ValueError(f"{op}: input_dim_idx {i} must index Input (rank {like.ndim}) and "
                             f"output_dim_idx {o} the shape {shape}")
        shape[o] = int(like.shape[i])
    if any(d < 0 for d in shape):
        raise ValueError(f"{op}: cannot draw a tensor of shape {shape}: every dim must be "
                         f"known (>= 0) at run time")
    return tuple(shape)


def _draw(op: str, attrs: dict, sample: Callable[[np.random.Generator, tuple], np.ndarray],
          ins: dict | None = None):
    shape = _shape(op, ins or {}, attrs)
    full = attrs.get("full_shape")
    rng = draw_rng(op, attrs)
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


_SHAPE_INPUTS = ("ShapeTensor", "ShapeTensorList")
_LIKE = {"input_dim_idx": 0, "output_dim_idx": 0}


def _with_diag(op: str, attrs: dict, values: np.ndarray) -> np.ndarray:
    """Fluid 1.8's diagonal of ``uniform_random``: with ``diag_num`` > 0, the flat elements
    ``i * diag_step + i`` for ``i < diag_num`` become ``diag_val`` (applied to the whole
    tensor, before a pserver slice is cut from it).

    Raises
    ------
    ValueError
        The last of those elements is past the end of the tensor.
    """
    num, step = int(attrs.get("diag_num", 0)), int(attrs.get("diag_step", 0))
    if num <= 0:
        return values
    if step < 0:
        raise ValueError(f"{op}: diag_step must not be negative, got {step}")
    if values.size <= (num - 1) * (step + 1):
        raise ValueError(f"{op}: the diagonal of diag_num {num} and diag_step {step} reaches "
                         f"flat element {(num - 1) * (step + 1)}, but the tensor has "
                         f"{values.size} elements")
    flat = values.reshape(-1)
    flat[np.arange(num) * (step + 1)] = float(attrs.get("diag_val", 1.0))
    return values


def _uniform(op: str):
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        lo, hi = float(attrs.get("min", -1.0)), float(attrs.get("max", 1.0))
        return _draw(op, attrs,
                     lambda rng, s: _with_diag(op, attrs, rng.uniform(lo, hi, size=s)), ins)
    kernel.__doc__ = ("Out ~ U[min, max), then the ``diag_num`` diagonal set to ``diag_val`` "
                      "(see the determinism rule of this module).")
    return kernel


def _gaussian(op: str):
    def kernel(ins: dict, attrs: dict, outs: tuple) -> dict:
        mu, sd = float(attrs.get("mean", 0.0)), float(attrs.get("std", 1.0))
        return _draw(op, attrs, lambda rng, s: rng.normal(mu, sd, size=s), ins)
    kernel.__doc__ = "Out ~ N(mean, std²) (see the determinism rule of this module)."
    return kernel


_UNIFORM_ATTRS = {**_COMMON, "min": -1.0, "max": 1.0, "diag_num": 0, "diag_step": 0,
                  "diag_val": 1.0}
_GAUSSIAN_ATTRS = {**_COMMON, "mean": 0.0, "std": 1.0}
uniform_random = register("uniform_random", _SHAPE_INPUTS, ("Out",), _UNIFORM_ATTRS,
                          optional=_SHAPE_INPUTS)(_uniform("uniform_random"))
gaussian_random = register("gaussian_random", _SHAPE_INPUTS, ("Out",), _GAUSSIAN_ATTRS,
                           optional=_SHAPE_INPUTS)(_gaussian("gaussian_random"))
uniform_random_batch_size_like = register(
    "uniform_random_batch_size_like", ("Input",), ("Out",), {**_UNIFORM_ATTRS, **_LIKE})(
    _uniform("uniform_random_batch_size_like"))
gaussian_random_batch_size_like = register(
    "gaussian_random_batch_size_like", ("Input",), ("Out",), {**_GAUSSIAN_ATTRS, **_LIKE})(
    _gaussian("gaussian_random_batch_size_like"))


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


@register("sampling_id", ("X",), ("Out",), {"min": 0.0, "max": 1.0, "seed": 0})
def sampling_id(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] (int64) = the first j with r − X[i, 0] − … − X[i, j] < 0 for r ~ U[min, max)
    drawn per row, else the last column (Fluid 1.8's sampling_id kernel)."""
    x = ins["X"][0]
    if x.ndim != 2:
        raise ValueError(f"sampling_id: X must be 2-D [batch, classes], got shape "
                         f"{list(x.shape)}")
    xp = array_module(x)
    lo, hi = float(attrs.get("min", 0.0)), float(attrs.get("max", 1.0))
    r = xp.asarray(draw_rng("sampling_id", attrs).uniform(lo, hi, size=x.shape[0]))
    past = xp.cumsum(x.astype(np.float64), axis=1) > r[:, None]
    ids = xp.where(past.any(axis=1), past.argmax(axis=1), x.shape[1] - 1)
    return {"Out": [ids.astype(np.int64)]}


@register("random_crop", ("X", "Seed"), ("Out", "SeedOut"), {"shape": [], "startup_seed": 0},
          optional=("Seed",))
def random_crop(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Crop the trailing ``len(shape)`` dims of each instance of X to ``shape`` at offsets
    drawn uniformly in ``[0, x_dim − shape_dim]``, seeded by ``Seed`` (else
    ``startup_seed``); ``SeedOut`` is the next seed, so each run crops differently and a run
    is replayed by its seed (Fluid 1.8's random_crop)."""
    x = ins["X"][0]
    xp = array_module(x)
    shape = [int(d) for d in attrs.get("shape", [])]
    lead = x.ndim - len(shape)
    if not shape or lead < 0 or any(not 0 < s <= d for s, d in zip(shape, x.shape[lead:],
                                                                    strict=True)):
        raise ValueError(f"random_crop: shape {shape} must be the trailing dims of X "
                         f"{list(x.shape)}, each at most as large")
    seed_in = (ins.get("Seed") or [None])[0]
    seed = int(to_host(seed_in).ravel()[0]) if seed_in is not None else \
        int(attrs.get("startup_seed", 0))
    rng = np.random.default_rng(seed & (2 ** 64 - 1))
    batch = int(np.prod(x.shape[:lead], dtype=np.int64))
    limits = np.array([d - s + 1 for s, d in zip(shape, x.shape[lead:], strict=True)])
    offsets = rng.integers(0, limits, size=(batch, len(shape)))
    flat = x.reshape((batch, *x.shape[lead:]))
    crops = [flat[(b, *(slice(o, o + s) for o, s in zip(offsets[b], shape, strict=True)))]
             for b in range(batch)]
    out = xp.stack(crops).reshape((*x.shape[:lead], *shape)) if batch else \
        xp.zeros((*x.shape[:lead], *shape), dtype=x.dtype)
    next_seed = np.array([rng.integers(0, 2 ** 63 - 1)], dtype=np.int64)
    return {"Out": [out], "SeedOut": [next_seed if seed_in is None else
                                      array_module(seed_in).asarray(next_seed)]}
