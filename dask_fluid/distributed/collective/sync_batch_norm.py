"""Kernels of Fluid 1.8's ``sync_batch_norm`` ops (``BuildStrategy.sync_batch_norm`` over nccl2
trainers).

A ``CompiledProgram`` with ``num_trainers > 1`` and ``sync_batch_norm`` runs its training
``batch_norm``/``batch_norm_grad`` ops as ``sync_batch_norm``/``sync_batch_norm_grad``
(:func:`.data_parallel.with_sync_batch_norm`; Fluid's sync_batch_norm_pass renames them the same
way), whose statistics are the global batch's:

- forward: each trainer's per-channel mean and mean of squares, and a 1, are summed over the
  trainers in one all-reduce; ``mean = Σ mean_i / n``, ``var = Σ E_i[x²] / n − mean²`` (the
  biased variance, as Fluid's kernel; accumulated in float64 here), ``SavedVariance`` the
  inverse standard deviation, the moving statistics updated with the global ones;
- backward: ``Σ dY`` and ``Σ dY·(X − mean)`` summed over the trainers in one all-reduce give
  ``dX`` of the global normalisation; ``Scale@GRAD`` and ``Bias@GRAD`` stay each trainer's own
  sums, which the gradient all-reduce then averages, as in Fluid.

With equal batches on every trainer this is batch norm over the global batch. At test time (or
with ``use_global_stats``) there is nothing to synchronise: the moving statistics normalise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...executor import RunContext
from ...ops import registry
from ...ops.norm_ops import (
    _layout,
    _per_channel,
    _uses_global_stats,
    batch_norm,
    batch_norm_grad,
)
from ...ops.registry import GRAD, to_host
from ..errors import DistributedTrainingError
from .ops import find_comm, passthrough
from .trainers import TrainerComm

__all__: list[str] = []


def _sum_over_trainers(ctx: RunContext, parts: list[Any], xp: Any) -> np.ndarray:
    """``[*parts, 1]`` (float64 per-channel vectors) summed over the trainers, on the host."""
    handle: TrainerComm = find_comm(ctx.scope)
    stats = np.concatenate([np.asarray(to_host(p), dtype=np.float64).ravel() for p in parts]
                           + [np.ones(1)])
    if not handle.host_staged:  # NCCL reduces device memory
        device = xp.asarray(stats)
        try:
            handle.comm.allreduce([device], op="sum")
        except DistributedTrainingError as err:
            raise passthrough(err) from None
        return np.asarray(to_host(device))
    try:
        handle.comm.allreduce([stats], op="sum")
    except DistributedTrainingError as err:
        raise passthrough(err) from None
    return stats


def _sync_batch_norm(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    if _uses_global_stats(attrs):
        return batch_norm(ins, attrs, outs)
    x, scale, bias = ins["X"][0], ins["Scale"][0], ins["Bias"][0]
    mean_in, var_in = ins["Mean"][0], ins["Variance"][0]
    xp = ctx.executor._xp
    axis, shape = _layout(x, attrs)
    channels = x.shape[axis]
    count = x.size // channels
    x64 = x.astype(np.float64)
    stats = _sum_over_trainers(ctx, [_per_channel(xp, axis, x64) / count,
                                     _per_channel(xp, axis, x64, x64) / count], xp)
    trainers = stats[-1]
    mean = stats[:channels] / trainers
    var = stats[channels:2 * channels] / trainers - mean * mean
    eps = float(attrs.get("epsilon", 1e-5))
    inv_std = 1.0 / np.sqrt(var + eps)
    dt = x.dtype
    mean_d, inv_d = xp.asarray(mean.astype(dt)), xp.asarray(inv_std.astype(dt))
    y = (x - mean_d.reshape(shape)) * (inv_d * scale).reshape(shape).astype(dt) + \
        bias.reshape(shape).astype(dt)
    m = float(attrs.get("momentum", 0.9))
    mean_out = (mean_in * m + xp.asarray(mean.astype(mean_in.dtype)) * (1 - m))
    var_out = (var_in * m + xp.asarray(var.astype(var_in.dtype)) * (1 - m))
    return {"Y": [y.astype(dt, copy=False)], "MeanOut": [mean_out.astype(mean_in.dtype)],
            "VarianceOut": [var_out.astype(var_in.dtype)], "SavedMean": [mean_d],
            "SavedVariance": [inv_d]}


def _sync_batch_norm_grad(ins: dict, attrs: dict, outs: tuple, ctx: RunContext) -> dict:
    if _uses_global_stats(attrs):
        return batch_norm_grad(ins, attrs, outs)
    x, scale = ins["X"][0], ins["Scale"][0]
    xp = ctx.executor._xp
    axis, shape = _layout(x, attrs)
    dy = ins["Y" + GRAD][0]
    if dy is None:
        dy = xp.zeros_like(x)
    mean, inv_std = ins["SavedMean"][0], ins["SavedVariance"][0]
    dt = x.dtype
    centred = x - mean.reshape(shape).astype(dt, copy=False)
    # this trainer's sums: its Scale and Bias gradients (averaged by the gradient all-reduce)
    dbias = _per_channel(xp, axis, dy)
    dcentred = _per_channel(xp, axis, dy, centred)
    res = {}
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [dbias.astype(dt, copy=False)]
    if "Scale" + GRAD in outs:
        res["Scale" + GRAD] = [(inv_std * dcentred).astype(dt, copy=False)]
    if "X" + GRAD in outs:
        channels = x.shape[axis]
        stats = _sum_over_trainers(ctx, [dbias, dcentred], xp)
        trainers, count = stats[-1], x.size // channels
        g_dy = xp.asarray((stats[:channels] / trainers / count).astype(dt))
        g_dyc = xp.asarray((stats[channels:2 * channels] / trainers / count).astype(dt))
        a = (scale * inv_std).astype(dt, copy=False)
        dx = centred
        dx *= (-a * inv_std * inv_std * g_dyc).reshape(shape).astype(dt, copy=False)
        dx += dy * a.reshape(shape)
        dx += (-a * g_dy).reshape(shape).astype(dt, copy=False)
        res["X" + GRAD] = [dx.astype(dt, copy=False)]
    return res


registry.set_kernel("sync_batch_norm", _sync_batch_norm)
registry.set_kernel("sync_batch_norm_grad", _sync_batch_norm_grad)
