"""Kernels of automatic mixed precision's ops (Fluid 1.8).

``amp_check_finite_and_scale`` (``paddle/fluid/operators/amp/amp_check_finite_and_scale_op.h``,
added in 2020 next to Fluid 1.8): check that every tensor of ``X`` is finite and, while they
are, write ``Out[i] = X[i] * Scale``. At the first tensor holding an inf or a nan the op sets
``FoundInfinite`` and stops: that tensor and the ones after it are not scaled (Fluid leaves
them undefined, "its data may not be deterministic"; here they are ``X[i]`` unchanged). It has
no gradient. Fluid 1.8's ``contrib.mixed_precision.decorate`` does not use it (it checks the
gradients with ``reduce_sum`` + ``isfinite``); see ``dask_fluid/contrib/mixed_precision``.

``dequantize_log`` (``paddle/fluid/operators/dequantize_log_op.cc``): the inverse of a log
quantisation to int8: ``Out = 2^Dict[X]`` for X ≥ 0 and ``−2^Dict[X + 128]`` for X < 0, as
float32 of X's shape; no gradient.
"""

from __future__ import annotations

import numpy as np

from .registry import array_module, register, to_host

_FLOATS = ("float16", "float32", "float64")


@register("amp_check_finite_and_scale", ("X", "Scale"), ("Out", "FoundInfinite"), lod="none")
def amp_check_finite_and_scale(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] = X[i] * Scale while every X up to i is finite; FoundInfinite = [any inf/nan]."""
    xs = ins["X"]
    scale = ins["Scale"][0]
    if scale is None or int(scale.size) != 1:
        raise ValueError("amp_check_finite_and_scale: Scale must be a tensor of one element")
    for i, x in enumerate(xs):
        if x is None:
            raise ValueError(f"amp_check_finite_and_scale: X[{i}] is not bound to a tensor")
        if str(x.dtype) not in _FLOATS:
            raise TypeError(f"amp_check_finite_and_scale: X[{i}] must be a float tensor "
                            f"({', '.join(_FLOATS)}), got {x.dtype}")
    xp = array_module(*xs, scale)
    if not xs:
        return {"Out": [], "FoundInfinite": [xp.zeros((1,), dtype=bool)]}
    # one flag per tensor, brought to the host in a single copy: the kernel must know where
    # the first non-finite tensor is to stop scaling there, as Fluid's loop does
    finite = to_host(xp.stack([xp.isfinite(x).all() for x in xs]))
    bad = [i for i, ok in enumerate(finite) if not ok]
    first_bad = bad[0] if bad else len(xs)
    out = []
    for i, x in enumerate(xs):
        if i < first_bad:
            # scale in X's own dtype, so a float32 gradient stays float32
            out.append(x * scale.reshape(()).astype(x.dtype))
        else:
            out.append(x)
    found = xp.asarray([bool(bad)], dtype=bool)
    return {"Out": out, "FoundInfinite": [found]}


@register("dequantize_log", ("X", "Dict"), ("Out",))
def dequantize_log(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = 2^Dict[X] (X ≥ 0) or −2^Dict[X + 128] (X < 0), float32 of X's shape."""
    x, table = ins["X"][0], ins["Dict"][0]
    if str(x.dtype) != "int8":
        # Fluid registers only the int8 kernel
        raise TypeError(f"dequantize_log: X must be an int8 tensor, got {x.dtype}")
    xp = array_module(x, table)
    d = table.reshape(-1)
    if int(d.shape[0]) < 128:
        raise ValueError(f"dequantize_log: Dict must hold 128 values, got {int(d.shape[0])}")
    # widen before adding 128: int8 + 128 would wrap
    xi = x.astype(np.int64)
    neg = xi < 0
    idx = xp.where(neg, xi + 128, xi)
    # std::pow(2.0, float) in double, stored as float
    mag = xp.power(2.0, d.astype(np.float32)[idx].astype(np.float64))
    return {"Out": [xp.where(neg, -mag, mag).astype(np.float32)]}
