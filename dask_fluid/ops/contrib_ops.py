"""Kernels of ``fluid.contrib.layers``' ops (Fluid 1.8).

``fused_elemwise_activation`` (paddle/fluid/operators/fused/fused_elemwise_activation_op.cc/.h),
``shuffle_batch`` (shuffle_batch_op.h), ``partial_concat`` / ``partial_sum``
(partial_concat_op.cc, partial_sum_op.cc), ``batch_fc`` (batch_fc_op.cc) and ``rank_attention``
(rank_attention_op.cc), each with its grad op.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .math_ops import _unbroadcast, _y_bshape
from .registry import GRAD, array_module, register, to_host
from .selected_rows import grad_maker, grad_slots, scatter_add, to_place

# -- fused_elemwise_activation -------------------------------------------------------------------
# Out = Unary(Binary(X, Y)) ("unary compound": functor_list = [unary, binary]) or
# Out = Binary(X, Unary(Y)) ("binary compound": [binary, unary]). IntermediateOut is
# Binary(X, Y) (Out's shape) or Unary(Y) (Y's shape). Fluid 1.8's IsSupportedCompound accepts
# the binaries elementwise_add/elementwise_mul and the unaries scale/relu/tanh/sigmoid (gelu came
# after 1.8). The grad op gets the functor names with "_grad" appended, as Fluid's grad maker
# writes them; it reads IntermediateOut only when save_intermediate_out is set (else it is
# recomputed) and then also writes IntermediateOut@GRAD.

_FEA_BINARY = {"elementwise_add", "elementwise_mul"}
_FEA_UNARY = {"scale", "relu", "tanh", "sigmoid"}
_FEA_ATTRS = {"axis": -1, "scale": 0.0, "save_intermediate_out": False, "functor_list": []}


def fea_parse(functor_list: Any, grad: bool = False) -> tuple[bool, str, str]:
    """(unary_compound, binary, unary) of a functor_list, checked as IsSupportedCompound."""
    op = "fused_elemwise_activation" + ("_grad" if grad else "")
    names = list(functor_list or [])
    if len(names) != 2 or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{op}: functor_list must be a list of 2 functor names, got "
                         f"{functor_list!r}")
    if grad:
        if not all(n.endswith("_grad") for n in names):
            raise ValueError(f"{op}: functor_list must name grad functors ('<name>_grad'), "
                             f"got {names}")
        names = [n[: -len("_grad")] for n in names]
    if names[0] in _FEA_BINARY:
        unary_compound, binary, unary = False, names[0], names[1]
    elif names[1] in _FEA_BINARY:
        unary_compound, binary, unary = True, names[1], names[0]
    else:
        raise ValueError(f"{op}: functor_list {names} names no binary functor; one of "
                         f"{sorted(_FEA_BINARY)} is required")
    if unary not in _FEA_UNARY:
        raise ValueError(f"{op}: unary functor {unary!r} is not supported; expected one of "
                         f"{sorted(_FEA_UNARY)}")
    return unary_compound, binary, unary


def _fea_bcast_y(x_shape: tuple, y_shape: tuple) -> bool:
    """Fluid's IsBcastY: whether Y broadcasts onto X (else X onto Y)."""
    if len(x_shape) != len(y_shape):
        return len(x_shape) > len(y_shape)
    return all(a >= b for a, b in zip(x_shape, y_shape, strict=True))


def _fea_operands(x: Any, y: Any, axis: int) -> tuple[Any, Any]:
    """X and Y reshaped so that numpy broadcasting aligns the smaller at ``axis``."""
    op = "fused_elemwise_activation"
    if _fea_bcast_y(tuple(x.shape), tuple(y.shape)):
        return x, y.reshape(_y_bshape(x.shape, y.shape, axis, op))
    return x.reshape(_y_bshape(y.shape, x.shape, axis, op)), y


def _fea_unary(name: str, v: Any, scale: float) -> Any:
    xp = array_module(v)
    if name == "scale":
        return v * v.dtype.type(scale)
    if name == "relu":
        return xp.maximum(v, v.dtype.type(0))
    if name == "tanh":
        return xp.tanh(v)
    return 1 / (1 + xp.exp(-v))  # sigmoid


def _fea_unary_grad(name: str, u: Any, scale: float) -> Any:
    """d Unary / d input from its output ``u`` (all four are invertible-in-gradient)."""
    if name == "scale":
        return u.dtype.type(scale)
    if name == "relu":
        return (u > 0).astype(u.dtype)
    if name == "tanh":
        return 1 - u * u
    return u * (1 - u)  # sigmoid


def _fea_binary(name: str, a: Any, b: Any) -> Any:
    return a + b if name == "elementwise_add" else a * b


def _fea_grad_maker(op: Any) -> list[dict]:
    save = bool(op.attrs.get("save_intermediate_out", False))
    fwd = ("X", "Y", "Out", "IntermediateOut") if save else ("X", "Y", "Out")
    desc = grad_maker(fwd, ("Out",), ("X", "Y"))(op)[0]
    desc["attrs"]["functor_list"] = [f + "_grad" for f in op.attrs.get("functor_list", [])]
    if save and op.outputs.get("IntermediateOut"):
        desc["outputs"]["IntermediateOut" + GRAD] = [
            n + GRAD for n in op.outputs["IntermediateOut"]]
    return [desc]


@register("fused_elemwise_activation", ("X", "Y"), ("Out", "IntermediateOut"), _FEA_ATTRS,
          grad=_fea_grad_maker)
def fused_elemwise_activation(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Unary(Binary(X, Y)) or Binary(X, Unary(Y)), elementwise axis broadcasting."""
    x, y = ins["X"][0], ins["Y"][0]
    unary_compound, binary, unary = fea_parse(attrs.get("functor_list"))
    scale = float(attrs.get("scale", 0.0))
    xb, yb = _fea_operands(x, y, int(attrs.get("axis", -1)))
    if unary_compound:
        inter = _fea_binary(binary, xb, yb)
        out = _fea_unary(unary, inter, scale)
    else:
        inter = _fea_unary(unary, y, scale)
        out = _fea_binary(binary, xb, inter.reshape(yb.shape))
    res = {"Out": [out.astype(x.dtype, copy=False)]}
    if "IntermediateOut" in outs:
        res["IntermediateOut"] = [inter.astype(x.dtype, copy=False)]
    return res


@register("fused_elemwise_activation_grad",
          ("X", "Y", "Out", "IntermediateOut", "Out" + GRAD),
          ("X" + GRAD, "Y" + GRAD, "IntermediateOut" + GRAD), _FEA_ATTRS,
          optional=("IntermediateOut", "Out"))
def fused_elemwise_activation_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Chain rule through Binary and Unary; IntermediateOut@GRAD is dLoss/dIntermediateOut."""
    x, y = ins["X"][0], ins["Y"][0]
    xp = array_module(x, y)
    unary_compound, binary, unary = fea_parse(attrs.get("functor_list"), grad=True)
    scale = float(attrs.get("scale", 0.0))
    xb, yb = _fea_operands(x, y, int(attrs.get("axis", -1)))
    full = np.broadcast_shapes(xb.shape, yb.shape)
    dout = ins["Out" + GRAD][0]
    if dout is None:
        dout = xp.zeros(full, x.dtype)
    inter = (ins.get("IntermediateOut") or [None])[0]
    res = {}
    if unary_compound:
        if inter is None:
            inter = _fea_binary(binary, xb, yb)
        u = _fea_unary(unary, inter, scale)
        d_inter = dout * _fea_unary_grad(unary, u, scale)
        dxb = d_inter if binary == "elementwise_add" else d_inter * yb
        dyb = d_inter if binary == "elementwise_add" else d_inter * xb
        d_inter_out = d_inter
    else:
        ub = (_fea_unary(unary, y, scale) if inter is None else inter).reshape(yb.shape)
        d_u = dout if binary == "elementwise_add" else dout * xb
        dxb = dout if binary == "elementwise_add" else dout * ub
        dyb = d_u * _fea_unary_grad(unary, ub, scale)
        d_inter_out = _unbroadcast(d_u, yb.shape).reshape(y.shape)
    if "X" + GRAD in outs:
        res["X" + GRAD] = [_unbroadcast(xp.broadcast_to(dxb, full), xb.shape)
                           .reshape(x.shape).astype(x.dtype, copy=False)]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [_unbroadcast(xp.broadcast_to(dyb, full), yb.shape)
                           .reshape(y.shape).astype(y.dtype, copy=False)]
    if "IntermediateOut" + GRAD in outs:
        res["IntermediateOut" + GRAD] = [d_inter_out.astype(x.dtype, copy=False)]
    return res


# -- shuffle_batch -------------------------------------------------------------------------------
# X viewed as [prod(dims[:-1]), dims[-1]]: its rows are permuted, Out[ShuffleIdx[i]] = X[i]. The
# seed is Seed's value when Seed is bound, else the startup_seed attr (Fluid reads Seed only
# once it is initialised; the layer initialises it to startup_seed in the startup program, which
# is the same first seed). SeedOut is the next value of the engine seeded with it, so a program
# that writes SeedOut back into Seed shuffles differently on every run. The permutation comes
# from numpy's PCG64 seeded with the seed (Paddle's from std::default_random_engine +
# std::shuffle): deterministic per seed, but not Paddle's exact order.

def _shuffle_rows(x: Any) -> int:
    if x.ndim < 1:
        raise ValueError(f"shuffle_batch: X must have rank >= 1, got shape {list(x.shape)}")
    return int(np.prod(x.shape[:-1], dtype=np.int64)) if x.ndim > 1 else 1


@register("shuffle_batch", ("X", "Seed"), ("Out", "ShuffleIdx", "SeedOut"), {"startup_seed": 0},
          optional=("Seed",), grad=grad_maker(("X", "ShuffleIdx"), ("Out",), ("X",)))
def shuffle_batch(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X's rows (all dims but the last flattened) in a seeded random order."""
    x = ins["X"][0]
    xp = array_module(x)
    seed_arr = (ins.get("Seed") or [None])[0]
    seed = int(to_host(seed_arr).reshape(-1)[0]) if seed_arr is not None else int(
        attrs.get("startup_seed", 0))
    rng = np.random.default_rng(seed % (1 << 64))
    n = _shuffle_rows(x)
    perm = rng.permutation(n).astype(np.int64)
    x2 = x.reshape(n, -1)
    out = xp.empty_like(x2)
    out[xp.asarray(perm)] = x2
    place = {"_place": "gpu"} if xp is not np else {}
    return {"Out": [out.reshape(x.shape)],
            "ShuffleIdx": [to_place(perm, place)],
            "SeedOut": [to_place(np.array([rng.integers(0, 2**31 - 1)], np.int64), place)]}


@register("shuffle_batch_grad", *grad_slots(("X", "ShuffleIdx"), ("Out",), ("X",)),
          {"startup_seed": 0}, optional=("X",))
def shuffle_batch_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """X@GRAD[i] = Out@GRAD[ShuffleIdx[i]] (the shuffle undone)."""
    x, idx, d = ins["X"][0], ins["ShuffleIdx"][0], ins["Out" + GRAD][0]
    xp = array_module(x, idx)
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(x)]}
    n = idx.shape[0]
    return {"X" + GRAD: [d.reshape(n, -1)[idx].reshape(d.shape)]}


# -- partial_concat / partial_sum ----------------------------------------------------------------
# Every X is 2-D [batch, len] of the same shape; the columns [start, start + length) of each
# (start_index < 0 counts from the end, length < 0 takes the rest) are concatenated (Out
# [batch, length * n]) or summed (Out [batch, length]).

_PARTIAL_ATTRS = {"start_index": 0, "length": -1}


def partial_range(shapes: list, attrs: dict, op: str) -> tuple[int, int]:
    """(start, length) of the partial_* ops, checked as their InferShape."""
    if not shapes:
        raise ValueError(f"{op}: X must hold at least one tensor")
    first = tuple(shapes[0])
    for i, s in enumerate(shapes):
        if len(s) != 2:
            raise ValueError(f"{op}: X[{i}] must be 2-D [batch, len], got shape {list(s)}")
        if tuple(s) != first:
            raise ValueError(f"{op}: every X must have the same shape; X[0] is {list(first)}, "
                             f"X[{i}] is {list(s)}")
    cols = first[1]
    start, length = int(attrs.get("start_index", 0)), int(attrs.get("length", -1))
    if not -cols <= start < cols:
        raise ValueError(f"{op}: start_index must be in [-{cols}, {cols}) for inputs of "
                         f"{cols} columns, got {start}")
    start = start + cols if start < 0 else start
    if length < 0:
        length = cols - start
    if start + length > cols:
        raise ValueError(f"{op}: start_index + length ({start} + {length}) exceeds the "
                         f"{cols} columns of the inputs")
    return start, length


@register("partial_concat", ("X",), ("Out",), _PARTIAL_ATTRS,
          grad=grad_maker(("X",), ("Out",), ("X",)))
def partial_concat(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = concat([x[:, start:start + length] for x in X], axis=1)."""
    xs = ins["X"]
    start, length = partial_range([x.shape for x in xs], attrs, "partial_concat")
    xp = array_module(*xs)
    return {"Out": [xp.concatenate([x[:, start:start + length] for x in xs], axis=1)]}


@register("partial_concat_grad", *grad_slots(("X",), ("Out",), ("X",)), _PARTIAL_ATTRS)
def partial_concat_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """X@GRAD[i] = zeros with columns [start, start + length) from dOut's i-th block."""
    xs, d = ins["X"], ins["Out" + GRAD][0]
    start, length = partial_range([x.shape for x in xs], attrs, "partial_concat_grad")
    xp = array_module(*xs)
    grads = []
    for i, x in enumerate(xs):
        g = xp.zeros_like(x)
        if d is not None:
            g[:, start:start + length] = d[:, i * length:(i + 1) * length]
        grads.append(g)
    return {"X" + GRAD: grads}


@register("partial_sum", ("X",), ("Out",), _PARTIAL_ATTRS,
          grad=grad_maker(("X",), ("Out",), ("X",)))
def partial_sum(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = Σ x[:, start:start + length] over X."""
    xs = ins["X"]
    start, length = partial_range([x.shape for x in xs], attrs, "partial_sum")
    out = xs[0][:, start:start + length].copy()
    for x in xs[1:]:
        out += x[:, start:start + length]
    return {"Out": [out]}


@register("partial_sum_grad", *grad_slots(("X",), ("Out",), ("X",)), _PARTIAL_ATTRS)
def partial_sum_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """X@GRAD[i] = zeros with columns [start, start + length) = dOut."""
    xs, d = ins["X"], ins["Out" + GRAD][0]
    start, length = partial_range([x.shape for x in xs], attrs, "partial_sum_grad")
    xp = array_module(*xs)
    grads = []
    for x in xs:
        g = xp.zeros_like(x)
        if d is not None:
            g[:, start:start + length] = d
        grads.append(g)
    return {"X" + GRAD: grads}


# -- batch_fc ------------------------------------------------------------------------------------
# One fully connected layer per slot: Out[s] = Input[s] @ W[s] + Bias[s] with Input
# [slots, ins, in], W [slots, in, out], Bias [slots, out] (Fluid 1.8 has only a CUDA kernel; this
# one runs on both).

def _batch_fc_check(inp: Any, w: Any, bias: Any) -> None:
    if inp.ndim != 3 or w.ndim != 3:
        raise ValueError(f"batch_fc: Input and W must be 3-D, got shapes {list(inp.shape)} and "
                         f"{list(w.shape)}")
    if inp.shape[0] != w.shape[0] or inp.shape[2] != w.shape[1]:
        raise ValueError(f"batch_fc: Input {list(inp.shape)} and W {list(w.shape)} must agree "
                         "in dim 0 (slots) and Input.dim[2] == W.dim[1]")
    if bias.ndim != 2 or bias.shape[0] != inp.shape[0] or bias.shape[1] != w.shape[2]:
        raise ValueError(f"batch_fc: Bias must be [{inp.shape[0]}, {w.shape[2]}], got "
                         f"{list(bias.shape)}")


@register("batch_fc", ("Input", "W", "Bias"), ("Out",),
          grad=grad_maker(("Input", "W", "Bias"), ("Out",), ("Input", "W", "Bias")))
def batch_fc(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[s] = Input[s] @ W[s] + Bias[s]."""
    inp, w, bias = ins["Input"][0], ins["W"][0], ins["Bias"][0]
    _batch_fc_check(inp, w, bias)
    return {"Out": [inp @ w + bias[:, None, :]]}


@register("batch_fc_grad", *grad_slots(("Input", "W", "Bias"), ("Out",), ("Input", "W", "Bias")))
def batch_fc_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dInput = dOut @ Wᵀ, dW = Inputᵀ @ dOut, dBias = Σ_ins dOut, per slot."""
    inp, w, bias = ins["Input"][0], ins["W"][0], ins["Bias"][0]
    _batch_fc_check(inp, w, bias)
    xp = array_module(inp, w)
    d = ins["Out" + GRAD][0]
    if d is None:
        d = xp.zeros((inp.shape[0], inp.shape[1], w.shape[2]), inp.dtype)
    res = {}
    if "Input" + GRAD in outs:
        res["Input" + GRAD] = [d @ xp.swapaxes(w, 1, 2)]
    if "W" + GRAD in outs:
        res["W" + GRAD] = [xp.swapaxes(inp, 1, 2) @ d]
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [d.sum(axis=1)]
    return res


# -- rank_attention ------------------------------------------------------------------------------
# RankOffset [N, 2·MaxRank + 1] (int): column 0 is instance i's rank (1-based, <= 0: none); for
# k < MaxRank, columns 2k+1 and 2k+2 are the rank of the k-th instance of its page view and that
# instance's row in X. InputHelp[i, k] = X[row_k] where both ranks are valid (else 0); RankParam
# [MaxRank² · C, P] holds a [C, P] block per (rank, rank_k) pair, block (rank−1)·MaxRank +
# rank_k−1. Out[i] = Σ_k InputHelp[i, k] @ block; InsRank[i] = rank. Fluid's grad op writes only
# RankParam@GRAD (X gets none). MaxSize only sizes the CUDA kernel's work buffers.

_RA_ATTRS = {"MaxRank": 3, "MaxSize": 0}


def _ra_index(x: Any, offset: Any, param: Any, attrs: dict) -> tuple:
    """(input_help [N, K, C], block index [N, K], valid [N, K], ins_rank [N]) on the host's
    indices (RankOffset is small)."""
    max_rank = int(attrs.get("MaxRank", 3))
    if x.ndim != 2:
        raise ValueError(f"rank_attention: X must be 2-D, got shape {list(x.shape)}")
    n, c = x.shape
    off = to_host(offset).astype(np.int64)
    if off.ndim != 2 or off.shape != (n, 2 * max_rank + 1):
        raise ValueError(f"rank_attention: RankOffset must be [{n}, {2 * max_rank + 1}] "
                         f"(X rows, 2·MaxRank + 1), got {list(off.shape)}")
    if param.ndim != 2 or param.shape[0] != max_rank * max_rank * c:
        raise ValueError(f"rank_attention: RankParam must be [{max_rank * max_rank * c}, P] "
                         f"(MaxRank² · X.dim[1]), got {list(param.shape)}")
    lower = off[:, 0] - 1
    faster = off[:, 1::2] - 1
    rows = off[:, 2::2]
    valid = (lower[:, None] >= 0) & (faster >= 0)
    if (rows[valid] < 0).any() or (rows[valid] >= n).any():
        raise ValueError(f"rank_attention: RankOffset names rows outside X's {n} rows")
    block = np.where(valid, lower[:, None] * max_rank + faster, 0)
    xp = array_module(x)
    help_ = x[xp.asarray(np.where(valid, rows, 0))] * xp.asarray(valid[:, :, None]).astype(x.dtype)
    return help_, block, valid, off[:, 0]


@register("rank_attention", ("X", "RankOffset", "RankParam"), ("Out", "InputHelp", "InsRank"),
          _RA_ATTRS,
          grad=grad_maker(("X", "RankOffset", "RankParam", "InputHelp", "InsRank"), ("Out",),
                          ("RankParam",)))
def rank_attention(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] = Σ_k InputHelp[i, k] @ RankParam block of (rank_i, rank_k)."""
    x, offset, param = ins["X"][0], ins["RankOffset"][0], ins["RankParam"][0]
    xp = array_module(x, param)
    help_, block, _, ins_rank = _ra_index(x, offset, param, attrs)
    n, k, c = help_.shape
    blocks = param.reshape(-1, c, param.shape[1])[xp.asarray(block)]  # [N, K, C, P]
    out = xp.einsum("nkc,nkcp->np", help_, blocks)
    place = {"_place": "gpu"} if xp is not np else {}
    return {"Out": [out.astype(x.dtype, copy=False)], "InputHelp": [help_.reshape(n, k * c)],
            "InsRank": [to_place(ins_rank.reshape(n, 1).astype(x.dtype), place)]}


@register("rank_attention_grad",
          *grad_slots(("X", "RankOffset", "RankParam", "InputHelp", "InsRank"), ("Out",),
                      ("RankParam",)), _RA_ATTRS, optional=("InputHelp", "InsRank"))
def rank_attention_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """RankParam@GRAD[block(i, k)] += InputHelp[i, k]ᵀ dOut[i]."""
    x, offset, param = ins["X"][0], ins["RankOffset"][0], ins["RankParam"][0]
    xp = array_module(x, param)
    help_, block, valid, _ = _ra_index(x, offset, param, attrs)
    d = ins["Out" + GRAD][0]
    c, p = help_.shape[2], param.shape[1]
    grad = xp.zeros((param.shape[0] // c, c * p), param.dtype)
    if d is not None:
        contrib = (help_[:, :, :, None] * d[:, None, None, :]).reshape(*block.shape, c * p)
        keep = np.flatnonzero(valid.reshape(-1))
        scatter_add(xp, grad, xp.asarray(block.reshape(-1)[keep]),
                    contrib.reshape(-1, c * p)[xp.asarray(keep)])
    return {"RankParam" + GRAD: [grad.reshape(param.shape)]}
