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
from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import SelectedRows, grad_maker, grad_slots, scatter_add, to_dtype, to_place

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


# -- LoD contrib ops (MMDNN's match_matrix_tensor, var_conv_2d, sequence_topk_avg_pooling) and
# fused_embedding_seq_pool. Each reads its inputs' first LoD level (``lod()[0]``, as Fluid's
# kernels do) and sets its outputs' LoD itself (``lod="kernel"``). Small offset and position
# arrays go to the host; the data stays where it is.


def _offsets(attrs: dict, slot: str, op: str, rows: int | None = None) -> np.ndarray:
    """Level 0 of Input(slot)'s LoD as int64 offsets; with ``rows``, checked against them."""
    from .sequence_ops import input_lod

    o = np.asarray(input_lod(attrs, slot, op)[0], dtype=np.int64)
    if rows is not None and int(o[-1]) != rows:
        raise ValueError(f"{op}: the last offset of Input({slot})'s LoD is {int(o[-1])}, but "
                         f"Input({slot}) has {rows} rows")
    return o


def _same_batch(op: str, **offsets: np.ndarray) -> int:
    """The common number of sequences of the named offsets; ValueError when they differ."""
    counts = {slot: len(o) - 1 for slot, o in offsets.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"{op}: the inputs' LoDs hold different numbers of sequences: "
                         + ", ".join(f"{s}: {n}" for s, n in counts.items()))
    return next(iter(counts.values()))


def _cum(sizes: Any) -> tuple:
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]))


# -- match_matrix_tensor -------------------------------------------------------------------------
# match_matrix_tensor_op.cc: Tmp = X @ W viewed [N_x, dim_t * h] (stored [N_x * dim_t * h, 1]);
# for sequence pair b (X's b-th and Y's b-th sequence) and channel t, the block
# Out[b][t] = Tmp_b[:, t, :] @ Y_b^T ([len_x, len_y]) is written row-major, channels after
# each other, so Out is [Σ dim_t · len_x · len_y, 1] with LoD offsets of those sizes.

_MMT_ATTRS = {"dim_t": 1}


def _mmt_check(x: Any, y: Any, w: Any, attrs: dict, op: str) -> tuple:
    dim_t = int(attrs.get("dim_t", 1))
    if x.ndim != 2 or y.ndim != 2 or w.ndim != 3:
        raise ValueError(f"{op}: X and Y must be 2-D and W 3-D, got X {tuple(x.shape)}, "
                         f"Y {tuple(y.shape)}, W {tuple(w.shape)}")
    if tuple(w.shape) != (x.shape[1], dim_t, y.shape[1]):
        raise ValueError(f"{op}: W must be [X.dim1, dim_t, Y.dim1] = "
                         f"{[x.shape[1], dim_t, y.shape[1]]}, got {list(w.shape)}")
    if x.shape[1] != y.shape[1]:
        # Fluid's kernel takes Y's width from X's (dim_in): they must agree
        raise ValueError(f"{op}: X and Y must have the same width, got {x.shape[1]} and "
                         f"{y.shape[1]}")
    ox = _offsets(attrs, "X", op, x.shape[0])
    oy = _offsets(attrs, "Y", op, y.shape[0])
    _same_batch(op, X=ox, Y=oy)
    return dim_t, ox, oy


@register("match_matrix_tensor", ("X", "Y", "W"), ("Out", "Tmp"), _MMT_ATTRS, lod="kernel",
          grad=grad_maker(("X", "Y", "W", "Tmp"), ("Out",), ("X", "Y", "W")))
def match_matrix_tensor(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X_b · W · Y_b^T per sequence pair, flattened ``[t][i][j]``; Tmp = X · W."""
    x, y, w = ins["X"][0], ins["Y"][0], ins["W"][0]
    xp = array_module(x)
    dim_t, ox, oy = _mmt_check(x, y, w, attrs, "match_matrix_tensor")
    h = x.shape[1]
    tmp = (x @ w.reshape(h, dim_t * h)).reshape(x.shape[0], dim_t, h)
    blocks = [xp.einsum("itk,jk->tij", tmp[ox[b]:ox[b + 1]], y[oy[b]:oy[b + 1]]).reshape(-1)
              for b in range(len(ox) - 1)]
    out = xp.concatenate(blocks) if blocks else xp.zeros((0,), dtype=x.dtype)
    top = _cum(dim_t * np.diff(ox) * np.diff(oy))
    return {"Out": [out.reshape(-1, 1)], "Tmp": [tmp.reshape(-1, 1)],
            LOD_KEY: {"Out": [(top,)], "Tmp": [None]}}


@register("match_matrix_tensor_grad",
          *grad_slots(("X", "Y", "W", "Tmp"), ("Out",), ("X", "Y", "W")), _MMT_ATTRS,
          optional=("Tmp",), lod="kernel")
def match_matrix_tensor_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dTmp_b[:, t] = dOut_b[t] · Y_b, dY_b = Σ_t dOut_b[t]^T · Tmp_b[:, t]; then
    dX = dTmp · W^T and dW = X^T · dTmp (W viewed ``[h, dim_t · h]``)."""
    x, y, w = ins["X"][0], ins["Y"][0], ins["W"][0]
    xp = array_module(x)
    op = "match_matrix_tensor_grad"
    dim_t, ox, oy = _mmt_check(x, y, w, attrs, op)
    h = x.shape[1]
    w2 = w.reshape(h, dim_t * h)
    tmp = (ins.get("Tmp") or [None])[0]
    tmp = (x @ w2) if tmp is None else tmp
    tmp = tmp.reshape(x.shape[0], dim_t, h)
    d = ins["Out" + GRAD][0]
    dtmp = xp.zeros_like(tmp)
    dy = xp.zeros_like(y)
    if d is not None:
        d = d.reshape(-1)
        start = 0
        for b in range(len(ox) - 1):
            lx, ly = int(ox[b + 1] - ox[b]), int(oy[b + 1] - oy[b])
            db = d[start:start + dim_t * lx * ly].reshape(dim_t, lx, ly)
            start += dim_t * lx * ly
            if lx and ly:
                yb, tb = y[oy[b]:oy[b + 1]], tmp[ox[b]:ox[b + 1]]
                dtmp[ox[b]:ox[b + 1]] = xp.einsum("tij,jk->itk", db, yb)
                dy[oy[b]:oy[b + 1]] = xp.einsum("tij,itk->jk", db, tb)
        if start != d.size:
            raise ValueError(f"{op}: Out@GRAD has {d.size} elements, the LoDs give {start}")
    dtmp2 = dtmp.reshape(x.shape[0], dim_t * h)
    lods = attrs.get("_lods") or {}
    res: dict = {LOD_KEY: {}}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [dtmp2 @ w2.T]
        res[LOD_KEY]["X" + GRAD] = [lods.get("X", [None])[0]]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [dy]
        res[LOD_KEY]["Y" + GRAD] = [lods.get("Y", [None])[0]]
    if "W" + GRAD in outs:
        res["W" + GRAD] = [(x.T @ dtmp2).reshape(w.shape)]
        res[LOD_KEY]["W" + GRAD] = [None]
    return res


# -- sequence_topk_avg_pooling -------------------------------------------------------------------
# sequence_topk_avg_pooling_op.h: X's sequence b holds channel_num images of ROW's b-th length
# (rows) by COLUMN's b-th length (columns). For every image row, the positions of its max_k =
# topks[-1] largest values are found (descending, the first among equals, -1 past the row's
# end) and Out[row, c · len(topks) + m] = (sum of the topks[m] largest) / topks[m]: a row shorter
# than topks[m] sums what it has but still divides by topks[m] (the "padding 0" of Fluid's doc).
# Out is [ROW rows, channel_num · len(topks)] with ROW's LoD; pos (int32) keeps the positions,
# [ROW rows · channel_num · max_k], for the grad op.

_TOPK_ATTRS = {"topks": [], "channel_num": 1}


def _topk_attrs(attrs: dict, op: str) -> tuple[list[int], int]:
    topks = [int(k) for k in attrs.get("topks") or []]
    channels = int(attrs.get("channel_num", 1))
    if channels <= 0:
        raise ValueError(f"{op}: channel_num must be > 0, got {channels}")
    if not topks:
        raise ValueError(f"{op}: topks must name at least one k")
    if min(topks) < 1 or max(topks) != topks[-1]:
        # Fluid's kernel sizes its buffers by topks[-1]: a larger k before it reads past them
        raise ValueError(f"{op}: topks must be positive with the largest last (an increasing "
                         f"list), got {topks}")
    return topks, channels


def _topk_layout(x: Any, attrs: dict, op: str) -> tuple:
    """(row offsets, column offsets, X offsets) checked against each other."""
    ox = _offsets(attrs, "X", op, x.shape[0])
    orow = _offsets(attrs, "ROW", op)
    ocol = _offsets(attrs, "COLUMN", op)
    _same_batch(op, X=ox, ROW=orow, COLUMN=ocol)
    return orow, ocol, ox


@register("sequence_topk_avg_pooling", ("X", "ROW", "COLUMN"), ("Out", "pos"), _TOPK_ATTRS,
          lod="kernel", grad=grad_maker(("X", "ROW", "COLUMN", "pos"), ("Out",), ("X",)))
def sequence_topk_avg_pooling(ins: dict, attrs: dict, outs: tuple) -> dict:
    """The average of the top-k values of every image row, for every k of ``topks``."""
    x = ins["X"][0]
    xp = array_module(x)
    op = "sequence_topk_avg_pooling"
    topks, channels = _topk_attrs(attrs, op)
    if x.ndim not in (1, 2) or x.size != x.shape[0]:
        raise ValueError(f"{op}: X must be [N, 1] (or [N]), got {tuple(x.shape)}")
    orow, ocol, ox = _topk_layout(x, attrs, op)
    nk, max_k = len(topks), topks[-1]
    total = int(orow[-1])
    out = xp.zeros((total, channels, nk), dtype=x.dtype)
    pos = xp.full((total, channels, max_k), -1, dtype=np.int32)
    ks = np.asarray(topks, dtype=np.int64)
    flat = x.reshape(-1)
    for b in range(len(orow) - 1):
        rows, cols = int(orow[b + 1] - orow[b]), int(ocol[b + 1] - ocol[b])
        if int(ox[b + 1] - ox[b]) != channels * rows * cols:
            raise ValueError(f"{op}: sequence {b} of X has {int(ox[b + 1] - ox[b])} rows, but "
                             f"channel_num * row * col = {channels} * {rows} * {cols}")
        if rows == 0 or cols == 0:
            continue
        img = flat[ox[b]:ox[b + 1]].reshape(channels, rows, cols).transpose(1, 0, 2)
        kept = min(cols, max_k)
        # stable descending order: among equal values the first position wins, as the
        # kernel's repeated strict-">" arg-max does
        order = (xp.argsort(-img, axis=-1, kind="stable") if xp is np
                 else xp.argsort(-img, axis=-1))[..., :kept]
        csum = xp.cumsum(xp.take_along_axis(img, order, axis=-1), axis=-1)
        # sum of the top k for k past the row's end: all of it
        take = np.minimum(ks, kept) - 1
        out[orow[b]:orow[b + 1]] = csum[..., xp.asarray(take)] / xp.asarray(
            ks.astype(x.dtype))
        pos[orow[b]:orow[b + 1], :, :kept] = order.astype(np.int32)
    row_lod = (attrs.get("_lods") or {}).get("ROW", [None])[0]
    return {"Out": [out.reshape(total, channels * nk)], "pos": [pos.reshape(-1)],
            LOD_KEY: {"Out": [row_lod], "pos": [None]}}


@register("sequence_topk_avg_pooling_grad",
          *grad_slots(("X", "ROW", "COLUMN", "pos"), ("Out",), ("X",)), _TOPK_ATTRS,
          lod="kernel")
def sequence_topk_avg_pooling_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX at each kept position: Σ over the k of ``topks`` that take it of dOut / k."""
    x = ins["X"][0]
    xp = array_module(x)
    op = "sequence_topk_avg_pooling_grad"
    topks, channels = _topk_attrs(attrs, op)
    orow, ocol, ox = _topk_layout(x, attrs, op)
    nk, max_k = len(topks), topks[-1]
    total = int(orow[-1])
    x_lod = (attrs.get("_lods") or {}).get("X", [None])[0]
    d = ins["Out" + GRAD][0]
    dx = xp.zeros(x.shape[0], dtype=x.dtype)
    if d is None:
        return {"X" + GRAD: [dx.reshape(x.shape)], LOD_KEY: {"X" + GRAD: [x_lod]}}
    pos = ins["pos"][0].reshape(total, channels, max_k)
    d = d.reshape(total, channels, nk)
    # weight of the k-th kept position: Σ_m [k < topks[m]] dOut[m] / topks[m]
    takes = (np.arange(max_k)[None, :] < np.asarray(topks)[:, None]) / np.asarray(
        topks, dtype=np.float64)[:, None]
    weight = xp.einsum("rcm,mk->rck", d, xp.asarray(takes.astype(x.dtype)))
    for b in range(len(orow) - 1):
        rows, cols = int(orow[b + 1] - orow[b]), int(ocol[b + 1] - ocol[b])
        if rows == 0 or cols == 0:
            continue
        p = pos[orow[b]:orow[b + 1]]
        wb = weight[orow[b]:orow[b + 1]]
        valid = p >= 0
        # a row's kept positions are distinct, so a plain indexed assignment adds nothing twice
        r_idx, c_idx, _ = xp.nonzero(valid)
        cols_at = p[valid].astype(np.int64)
        base = int(ox[b])
        idx = base + c_idx * (rows * cols) + r_idx * cols + cols_at
        dx[idx] = wb[valid]
    return {"X" + GRAD: [dx.reshape(x.shape)], LOD_KEY: {"X" + GRAD: [x_lod]}}


# -- var_conv_2d ---------------------------------------------------------------------------------
# var_conv_2d_op.cc: X's sequence b is an InputChannel x H x W image (H, W: ROW's and COLUMN's
# b-th lengths), convolved "same"-padded (KernelH // 2 rows above, KernelW // 2 columns left)
# with stride (StrideH, StrideW): OH = (H - 1) // StrideH + 1, OW likewise (0 when H or W is 0).
# Col_b is its im2col, [InputChannel · KH · KW, OH · OW] (row z · KH · KW + ky · KW + kx), and
# Out_b = W · Col_b, [OutputChannel, OH · OW]; both are stored flat, [Σ size, 1], with LoD
# offsets of those sizes.
# Fluid never checks that sequence b of X holds InputChannel · H · W rows: its Im2Col reads the
# image from X's flat data at X's b-th offset, so a short sequence runs on into the next ones
# (test_var_conv_2d.py's TestVarConv2dApi feeds 60 rows for a 3 x 5 x 6 image), and extra rows
# are never read. Reads past the end of X are out of bounds in C++ (undefined); here they read
# zeros, and the grad kernel drops what it would write there.

_VCONV_ATTRS = {"InputChannel": 1, "OutputChannel": 1, "StrideH": 1, "StrideW": 1,
                "KernelH": 1, "KernelW": 1}


def _vconv_setup(x: Any, w: Any, attrs: dict, op: str) -> tuple:
    ic, oc = int(attrs.get("InputChannel", 1)), int(attrs.get("OutputChannel", 1))
    kh, kw = int(attrs.get("KernelH", 1)), int(attrs.get("KernelW", 1))
    sh, sw = int(attrs.get("StrideH", 1)), int(attrs.get("StrideW", 1))
    if min(ic, oc, kh, kw, sh, sw) < 1:
        raise ValueError(f"{op}: InputChannel, OutputChannel, KernelH/W and StrideH/W must be "
                         f">= 1, got {ic}, {oc}, {kh}x{kw}, {sh}x{sw}")
    if x.ndim != 2 or x.shape[1] != 1:
        raise ValueError(f"{op}: X must be [N, 1], got {tuple(x.shape)}")
    if tuple(w.shape) != (oc, ic * kh * kw):
        raise ValueError(f"{op}: W must be [OutputChannel, InputChannel * KernelH * KernelW] = "
                         f"{[oc, ic * kh * kw]}, got {list(w.shape)}")
    ox = _offsets(attrs, "X", op, x.shape[0])
    orow = _offsets(attrs, "ROW", op)
    ocol = _offsets(attrs, "COLUMN", op)
    _same_batch(op, X=ox, ROW=orow, COLUMN=ocol)
    hs, ws = np.diff(orow), np.diff(ocol)
    ohs = np.where(hs > 0, (hs - 1) // sh + 1, 0)
    ows = np.where(ws > 0, (ws - 1) // sw + 1, 0)
    ohs, ows = np.where(ohs * ows > 0, ohs, 0), np.where(ohs * ows > 0, ows, 0)
    col_off = _cum(ic * kh * kw * ohs * ows)
    out_off = _cum(oc * ohs * ows)
    return (ic, oc, kh, kw, sh, sw), ox, hs, ws, ohs, ows, col_off, out_off


def _vconv_images(xp: Any, x: Any, ox: np.ndarray, ic: int, hs: np.ndarray,
                  ws: np.ndarray) -> tuple[Any, list[tuple[int, int]]]:
    """X's flat data, zero-extended to cover every image, and each image's [start, stop).

    Image b is the ``ic · H_b · W_b`` values from X's b-th LoD offset on, whatever X's b-th
    sequence length is (Fluid's Im2Col indexes X's data the same way)."""
    spans = [(int(ox[b]), int(ox[b] + ic * hs[b] * ws[b])) for b in range(len(ox) - 1)]
    flat = x.reshape(-1)
    need = max([stop for _, stop in spans] + [flat.shape[0]])
    if need > flat.shape[0]:
        flat = xp.concatenate([flat, xp.zeros(need - flat.shape[0], dtype=x.dtype)])
    return flat, spans


def _vconv_im2col(xp: Any, img: Any, geo: tuple, oh: int, ow: int) -> Any:
    """[IC, H, W] -> [IC · KH · KW, OH · OW], zero outside the image."""
    ic, _, kh, kw, sh, sw = geo
    h, w = img.shape[1:]
    padded = xp.zeros((ic, h + kh - 1, w + kw - 1), dtype=img.dtype)
    padded[:, kh // 2:kh // 2 + h, kw // 2:kw // 2 + w] = img
    patches = [padded[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw]
               for ky in range(kh) for kx in range(kw)]
    return xp.stack(patches, axis=1).reshape(ic * kh * kw, oh * ow)


def _vconv_col2im(xp: Any, dcol: Any, geo: tuple, h: int, w: int, oh: int, ow: int) -> Any:
    """The adjoint of :func:`_vconv_im2col`: [IC · KH · KW, OH · OW] -> [IC, H, W]."""
    ic, _, kh, kw, sh, sw = geo
    dcol = dcol.reshape(ic, kh, kw, oh, ow)
    padded = xp.zeros((ic, h + kh - 1, w + kw - 1), dtype=dcol.dtype)
    for ky in range(kh):
        for kx in range(kw):
            padded[:, ky:ky + (oh - 1) * sh + 1:sh, kx:kx + (ow - 1) * sw + 1:sw] += \
                dcol[:, ky, kx]
    return padded[:, kh // 2:kh // 2 + h, kw // 2:kw // 2 + w]


@register("var_conv_2d", ("X", "ROW", "COLUMN", "W"), ("Out", "Col"), _VCONV_ATTRS,
          lod="kernel",
          grad=grad_maker(("X", "W", "ROW", "COLUMN", "Col", "Out"), ("Out",), ("X", "W")))
def var_conv_2d(ins: dict, attrs: dict, outs: tuple) -> dict:
    """A 2-D "same" convolution of every variable-size image of X (sizes from ROW, COLUMN)."""
    x, w = ins["X"][0], ins["W"][0]
    xp = array_module(x)
    geo, ox, hs, ws, ohs, ows, col_off, out_off = _vconv_setup(x, w, attrs, "var_conv_2d")
    ic = geo[0]
    flat, spans = _vconv_images(xp, x, ox, ic, hs, ws)
    cols, tops = [], []
    for b in range(len(ox) - 1):
        if ohs[b] == 0:
            continue
        img = flat[spans[b][0]:spans[b][1]].reshape(ic, int(hs[b]), int(ws[b]))
        col = _vconv_im2col(xp, img, geo, int(ohs[b]), int(ows[b]))
        cols.append(col.reshape(-1))
        tops.append((w @ col).reshape(-1))
    empty = xp.zeros((0,), dtype=x.dtype)
    col = xp.concatenate(cols) if cols else empty
    out = xp.concatenate(tops) if tops else empty
    return {"Out": [out.reshape(-1, 1)], "Col": [col.reshape(-1, 1)],
            LOD_KEY: {"Out": [(out_off,)], "Col": [(col_off,)]}}


@register("var_conv_2d_grad",
          *grad_slots(("X", "W", "ROW", "COLUMN", "Col", "Out"), ("Out",), ("X", "W")),
          _VCONV_ATTRS, optional=("Col", "Out"), lod="kernel")
def var_conv_2d_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dW = Σ_b dOut_b · Col_b^T; dX_b = col2im(W^T · dOut_b)."""
    x, w = ins["X"][0], ins["W"][0]
    xp = array_module(x)
    op = "var_conv_2d_grad"
    geo, ox, hs, ws, ohs, ows, col_off, out_off = _vconv_setup(x, w, attrs, op)
    ic, oc = geo[0], geo[1]
    d = ins["Out" + GRAD][0]
    col_in = (ins.get("Col") or [None])[0]
    flat, spans = _vconv_images(xp, x, ox, ic, hs, ws)
    dx = xp.zeros(flat.shape[0], dtype=x.dtype)
    dw = xp.zeros_like(w)
    if d is not None:
        d = d.reshape(-1)
        if d.size != out_off[-1]:
            raise ValueError(f"{op}: Out@GRAD has {d.size} elements, the LoDs give "
                             f"{out_off[-1]}")
        for b in range(len(ox) - 1):
            oh, ow = int(ohs[b]), int(ows[b])
            if oh == 0:
                continue
            h, wd = int(hs[b]), int(ws[b])
            if col_in is not None:
                col = col_in.reshape(-1)[col_off[b]:col_off[b + 1]].reshape(-1, oh * ow)
            else:
                img = flat[spans[b][0]:spans[b][1]].reshape(ic, h, wd)
                col = _vconv_im2col(xp, img, geo, oh, ow)
            db = d[out_off[b]:out_off[b + 1]].reshape(oc, oh * ow)
            dw += db @ col.T
            # += as in Fluid's Im2ColGrad: images that run into the next sequence overlap
            dx[spans[b][0]:spans[b][1]] += \
                _vconv_col2im(xp, w.T @ db, geo, h, wd, oh, ow).reshape(-1)
    lods = attrs.get("_lods") or {}
    res: dict = {LOD_KEY: {}}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [dx[:x.shape[0]].reshape(x.shape)]
        res[LOD_KEY]["X" + GRAD] = [lods.get("X", [None])[0]]
    if "W" + GRAD in outs:
        res["W" + GRAD] = [dw]
        res[LOD_KEY]["W" + GRAD] = [None]
    return res


# -- fused_embedding_seq_pool --------------------------------------------------------------------
# fused_embedding_seq_pool_op.cc/.h: Ids [N, ..., 1] (int64, a 1-level LoD) hold idx_width =
# Ids.numel / N ids per row; Out[b, i · D:(i + 1) · D] = Σ over the rows r of sequence b of
# W[Ids[r, i]] (combiner "sum", the only one), [num_seqs, idx_width · D], without a LoD. Ids equal
# to padding_idx (-1: none) add nothing, as the MKL build's CSR kernel skips them (Fluid's
# non-MKL jit kernel ignores padding_idx). The grad op writes W@GRAD dense, or a SelectedRows
# with one row per id (duplicates kept) when is_sparse; padding ids' rows get no gradient,
# as in lookup_table_grad here (Fluid's sparse branch copies dOut to them too).

_FESP_ATTRS = {"combiner": "sum", "padding_idx": -1, "is_sparse": False, "grad_inplace": False}


def _fesp_setup(w: Any, ids: Any, attrs: dict, op: str) -> tuple:
    from .nn_ops import flat_ids

    combiner = attrs.get("combiner", "sum")
    if combiner != "sum":
        raise ValueError(f"{op}: combiner must be 'sum' (Fluid supports only it), got "
                         f"{combiner!r}")
    if w.ndim != 2:
        raise ValueError(f"{op}: W must be 2-D, got {tuple(w.shape)}")
    if ids.ndim < 1 or ids.shape[-1] != 1:
        raise ValueError(f"{op}: the last dimension of Ids must be 1, got {tuple(ids.shape)}")
    lods = (attrs.get("_lods") or {}).get("Ids") or [None]
    if lods[0] is not None and len(lods[0]) != 1:
        raise ValueError(f"{op}: Ids must have a 1-level LoD, got {len(lods[0])} levels")
    o = _offsets(attrs, "Ids", op, ids.shape[0])
    flat = flat_ids(op, ids, w.shape[0])
    width = flat.size // ids.shape[0] if ids.shape[0] else int(np.prod(ids.shape[1:]))
    return o, flat, width


@register("fused_embedding_seq_pool", ("W", "Ids"), ("Out",), _FESP_ATTRS, lod="kernel",
          grad=grad_maker(("Ids", "W"), ("Out",), ("W",)))
def fused_embedding_seq_pool(ins: dict, attrs: dict, outs: tuple) -> dict:
    """The sum of the embedding rows of every sequence of Ids, one output row per sequence."""
    from .sequence_ops import segment_sum

    w, ids = ins["W"][0], ins["Ids"][0]
    xp = array_module(w)
    op = "fused_embedding_seq_pool"
    o, flat, width = _fesp_setup(w, ids, attrs, op)
    rows = w[flat]
    pad = int(attrs.get("padding_idx", -1))
    if pad != -1:
        rows[flat == pad] = 0
    per_row = rows.reshape(ids.shape[0], width * w.shape[1])
    out = segment_sum(xp, per_row, tuple(int(v) for v in o))
    return {"Out": [out], LOD_KEY: {"Out": [None]}}


@register("fused_embedding_seq_pool_grad", *grad_slots(("Ids", "W"), ("Out",), ("W",)),
          _FESP_ATTRS, lod="kernel", sparse_outputs=("W" + GRAD,))
def fused_embedding_seq_pool_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """W@GRAD: dOut's row of each sequence, at every id of it (dense scatter-add, or a
    SelectedRows when ``is_sparse``)."""
    from .sequence_ops import segment_ids

    w, ids = ins["W"][0], ins["Ids"][0]
    xp = array_module(w)
    op = "fused_embedding_seq_pool_grad"
    o, flat, width = _fesp_setup(w, ids, attrs, op)
    dim = w.shape[1]
    d = ins["Out" + GRAD][0]
    if d is None:
        per_id = xp.zeros((flat.size, dim), dtype=w.dtype)
    else:
        # row r of Ids gets its sequence's dOut row; its i-th id the i-th D-wide block
        per_id = d[segment_ids(xp, tuple(int(v) for v in o))].reshape(flat.size, dim)
    pad = int(attrs.get("padding_idx", -1))
    if pad != -1:
        per_id = per_id.copy()
        per_id[flat == pad] = 0
    if attrs.get("is_sparse", False):
        g: Any = SelectedRows(flat.copy(), per_id, w.shape[0])
    else:
        g = xp.zeros(w.shape, dtype=w.dtype)
        scatter_add(xp, g, flat, per_id)
    return {"W" + GRAD: [g], LOD_KEY: {"W" + GRAD: [None]}}


# -- tdm_child / tdm_sampler (Tree-based Deep Model) -------------------------------------------
# tdm_child_op.h: TreeInfo rows are [item_id, layer_id, parent_id, child_1 .. child_n]; a node
# has children unless it is node 0 or its first child is 0; a child is an item (LeafMask 1)
# when its own item_id is non-zero. Child/LeafMask are X's shape + [child_nums].
# tdm_sampler_op.h: for each id, layer by layer, the positive node of Travel[id] (its row of
# the leaf's path), then neg_samples_num_list[l] distinct other nodes of the layer drawn
# uniformly from Layer[layer_offset_lod[l]:layer_offset_lod[l+1]]; a 0 in the path pads:
# zeros with mask 0. Both ops run on the host (per-id loops over small int tables) and put
# their results where X is.

_INT_DTYPES = ("int32", "int64")


def _tdm_int(v: Any, slot: str, op: str) -> np.ndarray:
    arr = to_host(v)
    if str(arr.dtype) not in _INT_DTYPES:
        raise TypeError(f"{op}: Input({slot}) holds the wrong type, it holds {arr.dtype}, but "
                        "desires to be int32 or int64")
    return arr


def _tdm_like(host: np.ndarray, x: Any) -> Any:
    """``host`` on the device ``x`` is on."""
    xp = array_module(x)
    return host if xp is np else xp.asarray(host)


def _tdm_out_dtype(attrs: dict, op: str) -> str:
    """The output dtype: Fluid's op declares ``AddAttr<int>("dtype")``, a VarType code
    (2: int32, 3: int64); a dtype name (what dask_fluid's layers write) is taken too."""
    dtype = str(to_dtype(attrs.get("dtype", "int32")))
    if dtype not in _INT_DTYPES:
        raise TypeError(f"{op}: dtype must be int32 or int64, got {dtype}")
    return dtype


@register("tdm_child", ("X", "TreeInfo"), ("Child", "LeafMask"),
          {"child_nums": 1, "dtype": "int32"})
def tdm_child(ins: dict, attrs: dict, outs: tuple) -> dict:
    op = "tdm_child"
    x = ins["X"][0]
    ids = _tdm_int(x, "X", op).reshape(-1).astype(np.int64)
    info = _tdm_int(ins["TreeInfo"][0], "TreeInfo", op)
    child_nums = int(attrs["child_nums"])
    if child_nums <= 0:
        raise ValueError(f"{op}: child_nums must be greater than 0, got {child_nums}")
    if info.ndim != 2:
        raise ValueError(f"{op}: TreeInfo must be 2-D, got shape {info.shape}")
    node_nums = info.shape[0]
    if info.shape[1] < 3 + child_nums:
        raise ValueError(f"{op}: TreeInfo has {info.shape[1]} columns, fewer than 3 + "
                         f"child_nums ({3 + child_nums})")
    bad = ids[(ids < 0) | (ids >= node_nums)]
    if bad.size:
        raise ValueError(f"{op}: input id expected >= 0 and < {node_nums}, but got "
                         f"{int(bad[0])}. Please check input value.")
    info = info.astype(np.int64)
    children = info[ids, 3:3 + child_nums]
    has_child = (ids != 0) & (info[ids, 3] != 0)
    children = np.where(has_child[:, None], children, 0)
    if ((children < 0) | (children >= node_nums)).any():
        raise ValueError(f"{op}: TreeInfo names a child id outside [0, {node_nums})")
    mask = np.where(has_child[:, None], info[children, 0] != 0, False)
    dtype = _tdm_out_dtype(attrs, op)
    shape = (*x.shape, child_nums)
    return {"Child": [_tdm_like(children.astype(dtype).reshape(shape), x)],
            "LeafMask": [_tdm_like(mask.astype(dtype).reshape(shape), x)]}


def _tdm_sampler_check(attrs: dict, op: str) -> tuple[list[int], list[int], bool]:
    negs = [int(n) for n in attrs["neg_samples_num_list"]]
    lod = [int(n) for n in attrs["layer_offset_lod"]]
    if len(lod) != len(negs) + 1:
        raise ValueError(f"{op}: layer_offset_lod must have len(neg_samples_num_list) + 1 = "
                         f"{len(negs) + 1} entries, got {len(lod)}")
    for layer, n in enumerate(negs):
        nodes = lod[layer + 1] - lod[layer]
        if not 0 <= n <= nodes - 1:
            raise ValueError(f"{op}: Neg sample nums at layer {layer} expected <= {nodes} - 1 "
                             f"(positive included), but got {n}. Please check "
                             "neg_samples_num_list.")
    return negs, lod, bool(attrs["output_positive"])


@register("tdm_sampler", ("X", "Travel", "Layer"), ("Out", "Labels", "Mask"),
          {"neg_samples_num_list": [], "output_positive": True, "layer_offset_lod": [],
           "seed": 0, "dtype": "int32"})
def tdm_sampler(ins: dict, attrs: dict, outs: tuple) -> dict:
    op = "tdm_sampler"
    x = ins["X"][0]
    ids = _tdm_int(x, "X", op).reshape(-1).astype(np.int64)
    travel = _tdm_int(ins["Travel"][0], "Travel", op)
    layer = _tdm_int(ins["Layer"][0], "Layer", op)
    if travel.dtype != layer.dtype:
        raise TypeError(f"{op}: Input(Travel) must hold the same type as Input(Layer), but "
                        f"Travel holds {travel.dtype}, and Layer holds {layer.dtype}")
    negs, lod, positive = _tdm_sampler_check(attrs, op)
    travel = travel.reshape(travel.shape[0], -1).astype(np.int64)
    layer = layer.reshape(-1).astype(np.int64)
    if travel.shape[1] < len(negs) or layer.size < lod[-1]:
        raise ValueError(f"{op}: Travel {travel.shape} / Layer ({layer.size} nodes) are "
                         f"smaller than the {len(negs)} layers of layer_offset_lod {lod}")
    bad = ids[(ids < 0) | (ids >= travel.shape[0])]
    if bad.size:
        raise ValueError(f"{op}: input expected >= 0 and < {travel.shape[0]}, but got "
                         f"{int(bad[0])}. Please check input value.")
    width = sum(n + int(positive) for n in negs)
    out = np.zeros((ids.size, width), np.int64)
    labels = np.zeros_like(out)
    mask = np.ones_like(out)
    seed = int(attrs.get("seed") or 0)
    rng = attrs.get("_rng")
    if rng is not None:  # seed 0: the executor's per-op stream, from program.random_seed
        gens = [rng] * len(negs)
    elif seed:
        # Fluid makes one UniformSampler(seed) per layer at each run: the same draws each run
        gens = [np.random.default_rng(seed) for _ in negs]
    else:  # no stream given: fresh entropy, as Fluid's seed 0
        gens = [np.random.default_rng()] * len(negs)
    for i, item in enumerate(ids):
        col = 0
        for li, n in enumerate(negs):
            pos_id = int(travel[item, li])
            step = n + int(positive)
            if pos_id == 0:  # padding of a shorter path
                mask[i, col:col + step] = 0
                col += step
                continue
            lo, hi = lod[li], lod[li + 1]
            if not lo <= pos_id <= hi:
                raise ValueError(f"{op}: Positive node id at layer {li} expected >= {lo} and "
                                 f"<= {hi}, but got {pos_id}. Please check input value.")
            if positive:
                out[i, col], labels[i, col] = pos_id, 1
                col += 1
            nodes = layer[lo:hi]
            if n and int((nodes != pos_id).sum()) < n:
                raise ValueError(f"{op}: layer {li} has fewer than {n} nodes other than the "
                                 f"positive {pos_id} to sample")
            taken: list[int] = []
            for _ in range(n):
                while True:  # Fluid's rejection loop: not the positive, not drawn before
                    s = int(gens[li].integers(0, hi - lo))
                    if nodes[s] != pos_id and s not in taken:
                        break
                taken.append(s)
                out[i, col] = nodes[s]
                col += 1
    dtype = _tdm_out_dtype(attrs, op)
    shape = (ids.size, width)  # [X.dims[0], width] for Fluid's [N, 1] ids
    return {"Out": [_tdm_like(out.astype(dtype).reshape(shape), x)],
            "Labels": [_tdm_like(labels.astype(dtype).reshape(shape), x)],
            "Mask": [_tdm_like(mask.astype(dtype).reshape(shape), x)]}
