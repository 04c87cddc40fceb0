"""Deep Gradient Compression's ops (Fluid 1.8's ``dgc``, ``dgc_momentum`` and
``dgc_clip_by_norm``; https://arxiv.org/abs/1712.01887), as ``DGCMomentumOptimizer`` appends
them.

Per parameter and step, with ``N`` trainers and the loss gradient scaled by ``1 / N`` (Fluid's
``CoeffNumDevice``), the ``dgc`` op writes ``G = N * Grad + decay`` (``regular_type`` 1: ``coeff
* sign(Param)``, 2: ``coeff * Param``). Before ``rampup_begin_step`` that is all: the trainers
sum ``G`` densely and ``dgc_momentum`` steps ``momentum`` on ``G / N`` with the ``U``
accumulator as its velocity. From then on ``dgc`` keeps the momentum itself: ``U = m * U + G``
(Nesterov: ``U = m * (U + G)``), ``V = V + U`` (Nesterov: ``+ G`` too), sends the ``k`` entries
of ``V`` largest in magnitude (``EncodeGrad``: their indices' int32 bits, then their values, as
Fluid's ``k_select``), zeroes ``U`` and ``V`` there (momentum factor masking) and zeroes
``Grad``; the trainers' exchange sums every trainer's entries into ``Grad``
(:mod:`dask_fluid.distributed.collective.dgc_exchange`) and ``dgc_momentum`` steps plain SGD
on ``Grad / N``. ``k = int(numel * (1 - sparsity))``, the sparsity taken from the list
``sparsity`` by how far the step is into ``rampup_step``.

``current_step`` is the ``__g_dgc_counter__`` variable (0 at the first step), ``nranks`` the
``__g_nranks__`` one, which a ``CompiledProgram`` of nccl2 trainers sets to the trainers (it
stays -1 elsewhere, and these ops then raise, as Fluid's: DGC needs several trainers).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .math_ops import clip_by_norm
from .optimizer_ops import momentum, sgd
from .registry import array_module, register, to_host

__all__ = ["DGC_COUNTER", "DGC_ENCODED", "DGC_GATHER", "DGC_K", "DGC_MIN_NUMEL", "DGC_NRANKS",
           "DGC_RAMPUP_BEGIN", "encode", "period_sparsity", "scalar"]

#: Fluid 1.8's DGC variable names (``core.dgc.kDGC*Name()``): the step counter, the trainers
#: (set by the nccl2 trainers' CompiledProgram), the first sparse step, and per parameter the
#: suffixes of ``k``, the encoded top-k and the gather buffer
DGC_COUNTER, DGC_NRANKS, DGC_RAMPUP_BEGIN = ("__g_dgc_counter__", "__g_nranks__",
                                             "__g_rampup_begin_step__")
DGC_K, DGC_ENCODED, DGC_GATHER = "__dgc_k__", "__dgc_encoded__", "__dgc_gather__"
#: parameters with fewer elements are updated by plain momentum (Fluid's _is_use_dgc)
DGC_MIN_NUMEL = 16384


def scalar(value: Any) -> float:
    """The one value of a ``[1]`` tensor (host or device)."""
    return float(to_host(value).reshape(-1)[0])


def _nranks(op: str, ins: dict) -> int:
    nranks = int(scalar(ins["nranks"][0]))
    if nranks <= 1:
        raise ValueError(
            f"{op}: DGC is not useful when num_trainers <= 1 (nranks is {nranks}): "
            "DGCMomentumOptimizer trains over several nccl2 trainers; run the program as a "
            "CompiledProgram with build_strategy.num_trainers > 1 (or use Momentum)")
    return nranks


def period_sparsity(sparsity: list[float], step: float, rampup_step: float) -> float:
    """Fluid's ``get_period_sparcity``: ``sparsity[int(step * len / rampup_step)]``, the last
    entry once the ramp-up is over."""
    if int(step) < 0:
        raise ValueError(f"dgc: the step past rampup_begin_step is {step}, below 0")
    idx = int(step * len(sparsity) / rampup_step)
    return float(sparsity[min(idx, len(sparsity) - 1)])


def encode(v: Any, k: int) -> tuple[Any, Any]:
    """The ``k`` flat indices of ``v`` largest in magnitude (ascending) and Fluid's
    ``EncodeGrad`` of them: ``2 k`` values, the indices' int32 bits then ``v`` there."""
    xp = array_module(v)
    flat = v.reshape(-1)
    if k <= 0:
        return xp.zeros(0, dtype=np.int64), xp.zeros(0, dtype=v.dtype)
    if k >= flat.size:
        idx = xp.arange(flat.size)
    else:
        idx = xp.sort(xp.argpartition(-xp.abs(flat), k - 1)[:k])
    enc = xp.empty(2 * len(idx), dtype=np.float32)
    enc[:len(idx)] = idx.astype(np.int32).view(np.float32)
    enc[len(idx):] = flat[idx]
    return idx, enc


@register("dgc_clip_by_norm", ("X", "current_step"), ("Out",),
          {"max_norm": 1.0, "rampup_begin_step": -1.0})
def dgc_clip_by_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``clip_by_norm(X, max_norm)`` from ``rampup_begin_step`` on; X unchanged before."""
    x = ins["X"][0]
    if int(scalar(ins["current_step"][0])) < int(attrs.get("rampup_begin_step", -1.0)):
        return {"Out": [x]}
    return clip_by_norm({"X": [x]}, attrs, outs)


@register("dgc", ("U", "V", "Grad", "Param", "current_step", "nranks"),
          ("U_out", "V_out", "EncodeGrad", "Grad_out", "k", "GatherBuff"),
          {"m": 0.9, "use_nesterov": True, "sparsity": [], "rampup_begin_step": 0.0,
           "rampup_step": 0.0, "regular_coeff": 0.0, "regular_type": 0})
def dgc(ins: dict, attrs: dict, outs: tuple) -> dict:
    """One trainer's half of a DGC step (module docstring); U and V are updated in place."""
    g, p = ins["Grad"][0], ins["Param"][0]
    xp = array_module(g)
    # the state is updated in place (as the optimizer kernels do), through flat views
    u, v = xp.ascontiguousarray(ins["U"][0]), xp.ascontiguousarray(ins["V"][0])
    nranks = _nranks("dgc", ins)
    regular_type = int(attrs.get("regular_type", 0))
    coeff = p.dtype.type(attrs.get("regular_coeff", 0.0))
    if regular_type not in (0, 1, 2):
        raise ValueError(f"dgc: regular_type {regular_type} is not 0 (none), 1 (L1Decay) or "
                         "2 (L2Decay): DGC supports only those")
    # a new array: the gradient's value may be shared with another variable
    grad = g * p.dtype.type(nranks)
    if regular_type == 1:
        grad += coeff * xp.sign(p)
    elif regular_type == 2:
        grad += coeff * p
    step = scalar(ins["current_step"][0])
    begin = float(attrs.get("rampup_begin_step", 0.0))
    if int(step) < int(begin):
        return {"Grad_out": [grad]}
    sparsity = [float(s) for s in attrs.get("sparsity") or ()]
    if not sparsity:
        raise ValueError("dgc: attr sparsity is empty; give the sparsities of the ramp-up "
                         "(DGCMomentumOptimizer's default is [0.999])")
    ratio = 1.0 - period_sparsity(sparsity, step - begin, float(attrs.get("rampup_step", 1.0)))
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"dgc: the sparsity gives a ratio of {ratio} sent; sparsity entries "
                         "must be in (0, 1]")
    k = int(g.size * ratio)
    m = p.dtype.type(attrs.get("m", 0.9))
    if attrs.get("use_nesterov", True):
        u += grad
        u *= m
        v += u
        v += grad
    else:
        u *= m
        u += grad
        v += u
    idx, enc = encode(v, k)
    v.reshape(-1)[idx] = 0  # momentum factor masking: what is sent starts over
    u.reshape(-1)[idx] = 0
    return {"U_out": [u], "V_out": [v], "EncodeGrad": [enc], "Grad_out": [xp.zeros_like(grad)],
            "k": [xp.full((1,), k, dtype=p.dtype)],
            "GatherBuff": [xp.zeros(2 * k * nranks, dtype=np.float32)]}


@register("dgc_momentum",
          ("Param", "Grad", "Velocity", "LearningRate", "current_step", "nranks"),
          ("ParamOut", "VelocityOut", "Grad_out"),
          {"mu": 0.9, "use_nesterov": False, "rampup_begin_step": -1.0})
def dgc_momentum(ins: dict, attrs: dict, outs: tuple) -> dict:
    """``Grad / nranks``, then ``momentum`` before ``rampup_begin_step`` and ``sgd`` after (the
    momentum is in the ``dgc`` op's ``U`` and ``V`` then); a negative ``rampup_begin_step``
    leaves everything as it is, as Fluid's kernel."""
    begin = float(attrs.get("rampup_begin_step", -1.0))
    if int(begin) < 0:
        return {}
    nranks = _nranks("dgc_momentum", ins)
    param, vel = ins["Param"][0], ins["Velocity"][0]
    grad = ins["Grad"][0] / param.dtype.type(nranks)
    step = {**ins, "Grad": [grad]}
    if int(scalar(ins["current_step"][0])) < int(begin):
        out = momentum(step, attrs, outs)
    else:
        out = {**sgd(step, attrs, outs), "VelocityOut": [vel]}
    return {**out, "Grad_out": [grad]}
