"""Sequence (LoD) ops: kernels that read their inputs' LoD and set their outputs'.

They are registered with ``lod="kernel"``: the executor passes ``attrs["_lods"]`` (input slot
-> one LoD per bound name, None where there is none) and takes the outputs' LoDs from the
result's ``LOD_KEY`` entry (see :mod:`dask_fluid.lod`). A sequence is the rows between two
offsets of the input's last LoD level; an empty sequence is allowed where Fluid allows it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..lod import check_lod
from .registry import GRAD, LOD_KEY, array_module, register
from .selected_rows import grad_maker, grad_slots, scatter_add, to_dtype

# ---------------------------------------------------------------------------------------------
# helpers


def input_lod(attrs: dict, slot: str, op: str, index: int = 0) -> tuple:
    """The LoD of input ``slot``; ValueError naming ``op`` when it has none."""
    lods = (attrs.get("_lods") or {}).get(slot) or []
    lod = lods[index] if index < len(lods) else None
    if not lod:
        raise ValueError(
            f"{op}: Input({slot}) has no LoD: feed it as a LoD tensor (fluid.create_lod_tensor, "
            "or a DataFeeder over a data layer with lod_level >= 1), or compute it with an op "
            "that keeps the LoD")
    return lod


def segment_ids(xp: Any, offsets: Any) -> Any:
    """The sequence index of every row: ``[0, 0, 1, 1, 1]`` for offsets ``[0, 2, 5]``."""
    lengths = np.diff(np.asarray(offsets, dtype=np.int64))
    return xp.asarray(np.repeat(np.arange(len(lengths)), lengths))


def segment_sum(xp: Any, x2: Any, offsets: tuple) -> Any:
    """Sum of the rows of ``x2`` (``[N, D]``) in each sequence: ``[num_seqs, D]`` (an empty
    sequence sums to 0)."""
    o = np.asarray(offsets, dtype=np.int64)
    out = xp.zeros((len(o) - 1, x2.shape[1]), dtype=x2.dtype)
    full = np.flatnonzero(o[1:] > o[:-1])
    if len(full) == 0:
        return out
    if xp is np:
        # consecutive non-empty sequences: reduceat sums from each start to the next
        out[full] = np.add.reduceat(x2, o[:-1][full], axis=0)
    else:
        scatter_add(xp, out, segment_ids(xp, o), x2)
    return out


def _lengths(offsets: tuple) -> np.ndarray:
    return np.diff(np.asarray(offsets, dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# sequence_pool

_POOL_TYPES = ("AVERAGE", "SUM", "SQRT", "MAX", "LAST", "FIRST")
_POOL_ATTRS = {"pooltype": "AVERAGE", "is_test": False, "pad_value": 0.0}


def _pool_type(attrs: dict) -> str:
    kind = str(attrs.get("pooltype", "AVERAGE")).upper()
    if kind not in _POOL_TYPES:
        raise ValueError(f"sequence_pool: pooltype {kind!r} is not one of {_POOL_TYPES}")
    return kind


def _pool_lod(lod: tuple, op: str) -> tuple:
    if len(lod) > 2:
        raise ValueError(f"{op}: the LoD of Input(X) has {len(lod)} levels; at most 2 "
                         "(Fluid's limit)")
    return lod


@register("sequence_pool", ("X",), ("Out", "MaxIndex"), _POOL_ATTRS, lod="kernel",
          grad=grad_maker(("X", "MaxIndex"), ("Out",), ("X",)))
def sequence_pool(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Pool each sequence of the last LoD level into one row (Fluid's ``sequence_pool``):
    ``AVERAGE``, ``SUM``, ``SQRT`` (sum / sqrt(length)), ``MAX`` (``MaxIndex`` holds the row
    of each maximum, the first among equals), ``FIRST``, ``LAST``. An empty sequence gives
    ``pad_value``. With a 2-level LoD the output keeps the top level."""
    x = ins["X"][0]
    xp = array_module(x)
    kind = _pool_type(attrs)
    lod = _pool_lod(input_lod(attrs, "X", "sequence_pool"), "sequence_pool")
    offsets = lod[-1]
    o = np.asarray(offsets, dtype=np.int64)
    n = len(o) - 1
    x2 = x.reshape(x.shape[0], -1)
    lengths = _lengths(offsets)
    full = lengths > 0
    index = None
    if kind in ("SUM", "AVERAGE", "SQRT"):
        out = segment_sum(xp, x2, offsets)
        if kind != "SUM":
            scale = np.where(full, lengths, 1).astype(np.float64)
            scale = scale if kind == "AVERAGE" else np.sqrt(scale)
            out = out / xp.asarray(scale.astype(x2.dtype))[:, None]
    elif kind == "MAX":
        out = xp.zeros((n, x2.shape[1]), dtype=x2.dtype)
        index = xp.full((n, x2.shape[1]), -1, dtype=np.int32)
        for i in np.flatnonzero(full):
            block = x2[o[i]:o[i + 1]]
            arg = xp.argmax(block, axis=0)  # the first maximum, as Paddle's strict ">" keeps
            index[i] = (arg + int(o[i])).astype(np.int32)
            out[i] = block[arg, xp.arange(x2.shape[1])]
    else:
        rows = o[:-1] if kind == "FIRST" else o[1:] - 1
        out = xp.zeros((n, x2.shape[1]), dtype=x2.dtype)
        picked = np.flatnonzero(full)
        if len(picked):
            out[xp.asarray(picked)] = x2[xp.asarray(rows[picked])]
    pad = float(attrs.get("pad_value", 0.0))
    if pad != 0.0 and not bool(full.all()):
        out[xp.asarray(np.flatnonzero(~full))] = pad
    out = out.reshape((n, *x.shape[1:]))
    result = {"Out": [out], LOD_KEY: {"Out": [(lod[0],) if len(lod) == 2 else None]}}
    if "MaxIndex" in outs:
        result["MaxIndex"] = [index.reshape(out.shape) if index is not None
                              else xp.zeros(out.shape, dtype=np.int32)]
    return result


@register("sequence_pool_grad", *grad_slots(("X", "MaxIndex"), ("Out",), ("X",)), _POOL_ATTRS,
          optional=("MaxIndex",), lod="kernel")
def sequence_pool_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: each sequence's rows get dOut (SUM), dOut / length (AVERAGE), dOut / sqrt(length)
    (SQRT); only the maximum's row (MAX), the first or the last row (FIRST, LAST)."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_pool_grad")
    kind = _pool_type(attrs)
    o = np.asarray(lod[-1], dtype=np.int64)
    x2 = x.reshape(x.shape[0], -1)
    dx = xp.zeros_like(x2)
    result = {"X" + GRAD: [dx.reshape(x.shape)], LOD_KEY: {"X" + GRAD: [lod]}}
    if d is None:
        return result
    d2 = d.reshape(len(o) - 1, -1)
    lengths = _lengths(lod[-1])
    full = np.flatnonzero(lengths > 0)
    if kind in ("SUM", "AVERAGE", "SQRT"):
        seg = segment_ids(xp, o)
        scale = np.where(lengths > 0, lengths, 1).astype(np.float64)
        scale = {"SUM": np.ones_like(scale), "AVERAGE": scale, "SQRT": np.sqrt(scale)}[kind]
        dx[...] = (d2 / xp.asarray(scale.astype(d2.dtype))[:, None])[seg]
    elif kind == "MAX":
        index = ins["MaxIndex"][0].reshape(d2.shape)
        cols = xp.arange(d2.shape[1])
        for i in full:
            dx[index[i].astype(np.int64), cols] += d2[i]
    else:
        rows = o[:-1] if kind == "FIRST" else o[1:] - 1
        if len(full):
            dx[xp.asarray(rows[full])] = d2[xp.asarray(full)]
    return result


# ---------------------------------------------------------------------------------------------
# sequence_conv: a 1-D convolution along each sequence, as one matrix product over the rows'
# context windows (rows outside the row's own sequence read as zeros: Fluid's padding when
# paddingTrainable is False)

_SEQ_CONV_ATTRS = {"contextStride": 1, "contextStart": 0, "contextLength": 3,
                   "paddingTrainable": False}


def _context_index(offsets: tuple, start: int, length: int) -> np.ndarray:
    """``[N, length]`` row indices of every row's context window; ``N`` (one past the last
    row) where the window leaves the row's sequence."""
    o = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(o)
    rows = int(o[-1])
    first = np.repeat(o[:-1], lengths)
    last = np.repeat(o[1:], lengths)
    idx = np.arange(rows)[:, None] + start + np.arange(length)[None, :]
    inside = (idx >= first[:, None]) & (idx < last[:, None])
    return np.where(inside, idx, rows)


def _check_seq_conv(attrs: dict, op: str) -> tuple[int, int]:
    if int(attrs.get("contextStride", 1)) != 1:
        raise ValueError(f"{op}: contextStride must be 1 (Fluid supports only 1), got "
                         f"{attrs.get('contextStride')}")
    if attrs.get("paddingTrainable"):
        raise NotImplementedError(f"{op}: paddingTrainable=True (a learned PaddingData) is not "
                                  "implemented in dask_fluid; use the default zero padding")
    length = int(attrs.get("contextLength", 3))
    if length < 1:
        raise ValueError(f"{op}: contextLength must be >= 1, got {length}")
    return int(attrs.get("contextStart", 0)), length


@register("sequence_conv", ("X", "Filter", "PaddingData"), ("Out",), _SEQ_CONV_ATTRS,
          optional=("PaddingData",), lod="kernel",
          grad=grad_maker(("X", "Filter"), ("Out",), ("X", "Filter")))
def sequence_conv(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[r] = concat(X[r + contextStart], ..., X[r + contextStart + contextLength - 1]) @
    Filter, the rows outside r's sequence taken as zeros; Out keeps X's LoD."""
    x, w = ins["X"][0], ins["Filter"][0]
    xp = array_module(x, w)
    start, length = _check_seq_conv(attrs, "sequence_conv")
    lod = input_lod(attrs, "X", "sequence_conv")
    if w.shape[0] != length * x.shape[1]:
        raise ValueError(f"sequence_conv: Filter has {w.shape[0]} rows, but contextLength "
                         f"{length} x the {x.shape[1]} columns of X need {length * x.shape[1]}")
    idx = xp.asarray(_context_index(lod[-1], start, length))
    padded = xp.concatenate([x, xp.zeros((1, x.shape[1]), dtype=x.dtype)])
    col = padded[idx].reshape(x.shape[0], -1)
    return {"Out": [col @ w], LOD_KEY: {"Out": [lod]}}


@register("sequence_conv_grad", *grad_slots(("X", "Filter"), ("Out",), ("X", "Filter")),
          _SEQ_CONV_ATTRS, lod="kernel")
def sequence_conv_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dFilter = col(X)ᵀ dOut; dX adds each window's share of dOut Filterᵀ back to its rows."""
    x, w, d = ins["X"][0], ins["Filter"][0], ins["Out" + GRAD][0]
    xp = array_module(x, w)
    start, length = _check_seq_conv(attrs, "sequence_conv_grad")
    lod = input_lod(attrs, "X", "sequence_conv_grad")
    if d is None:
        d = xp.zeros((x.shape[0], w.shape[1]), dtype=x.dtype)
    idx = xp.asarray(_context_index(lod[-1], start, length))
    res = {LOD_KEY: {"X" + GRAD: [lod]}}
    if "Filter" + GRAD in outs:
        padded = xp.concatenate([x, xp.zeros((1, x.shape[1]), dtype=x.dtype)])
        res["Filter" + GRAD] = [padded[idx].reshape(x.shape[0], -1).T @ d]
    if "X" + GRAD in outs:
        dcol = (d @ w.T).reshape(x.shape[0] * length, x.shape[1])
        dx = xp.zeros((x.shape[0] + 1, x.shape[1]), dtype=x.dtype)
        scatter_add(xp, dx, idx.reshape(-1), dcol)
        res["X" + GRAD] = [dx[:-1]]
    return res


# ---------------------------------------------------------------------------------------------
# sequence_softmax, sequence_reverse, sequence_concat, lod_reset, sequence_mask


@register("sequence_softmax", ("X",), ("Out",), lod="kernel",
          grad=grad_maker(("Out",), ("Out",), ("X",)))
def sequence_softmax(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Softmax over the rows of each sequence of X (``[N, 1]`` or ``[N]``); Out keeps the LoD."""
    x = ins["X"][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_softmax")
    flat = x.reshape(-1)
    if flat.shape[0] != x.shape[0]:
        raise ValueError(f"sequence_softmax: X must be [N, 1] or [N], got {list(x.shape)}")
    o = np.asarray(lod[-1], dtype=np.int64)
    seg = segment_ids(xp, o)
    peak = xp.full(len(o) - 1, -xp.inf, dtype=x.dtype)
    if xp is np:
        np.maximum.at(peak, seg, flat)
    else:
        import cupyx

        cupyx.scatter_max(peak, seg, flat)
    e = xp.exp(flat - peak[seg])
    total = segment_sum(xp, e[:, None], lod[-1])[:, 0]
    return {"Out": [(e / total[seg]).reshape(x.shape)], LOD_KEY: {"Out": [lod]}}


@register("sequence_softmax_grad", *grad_slots(("Out",), ("Out",), ("X",)), lod="kernel")
def sequence_softmax_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = Out (dOut − Σ_sequence dOut·Out)."""
    out, d = ins["Out"][0], ins["Out" + GRAD][0]
    xp = array_module(out)
    lod = input_lod(attrs, "Out", "sequence_softmax_grad")
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(out)], LOD_KEY: {"X" + GRAD: [lod]}}
    seg = segment_ids(xp, lod[-1])
    dot = segment_sum(xp, (d * out).reshape(-1, 1), lod[-1])[:, 0]
    dx = out.reshape(-1) * (d.reshape(-1) - dot[seg])
    return {"X" + GRAD: [dx.reshape(out.shape)], LOD_KEY: {"X" + GRAD: [lod]}}


def _reversed_rows(offsets: tuple) -> np.ndarray:
    o = np.asarray(offsets, dtype=np.int64)
    rows = np.arange(int(o[-1]))
    seg = np.repeat(np.arange(len(o) - 1), np.diff(o))
    return o[:-1][seg] + o[1:][seg] - 1 - rows


@register("sequence_reverse", ("X",), ("Y",), lod="kernel",
          grad=grad_maker(("X",), ("Y",), ("X",)))
def sequence_reverse(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y: the rows of every sequence of X in reverse order; Y keeps the LoD."""
    x = ins["X"][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_reverse")
    return {"Y": [x[xp.asarray(_reversed_rows(lod[-1]))]], LOD_KEY: {"Y": [lod]}}


@register("sequence_reverse_grad", *grad_slots(("X",), ("Y",), ("X",)), lod="kernel")
def sequence_reverse_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dY reversed back (the permutation is its own inverse)."""
    x, d = ins["X"][0], ins["Y" + GRAD][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_reverse_grad")
    dx = xp.zeros_like(x) if d is None else d[xp.asarray(_reversed_rows(lod[-1]))]
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [lod]}}


def _concat_rows(lods: list[tuple]) -> tuple[np.ndarray, tuple]:
    """For sequence_concat: the source row of every output row (into the inputs stacked in
    order) and the output offsets."""
    offsets = [np.asarray(lod[-1], dtype=np.int64) for lod in lods]
    count = len(offsets[0]) - 1
    if any(len(o) - 1 != count for o in offsets):
        raise ValueError("sequence_concat: every input must hold the same number of sequences, "
                         f"got {[len(o) - 1 for o in offsets]}")
    base = np.cumsum([0] + [int(o[-1]) for o in offsets[:-1]])
    order, out = [], [0]
    for i in range(count):
        for o, b in zip(offsets, base, strict=True):
            order.append(np.arange(o[i], o[i + 1]) + b)
        out.append(out[-1] + sum(int(o[i + 1] - o[i]) for o in offsets))
    return (np.concatenate(order) if order else np.zeros(0, np.int64)), (tuple(out),)


@register("sequence_concat", ("X",), ("Out",), lod="kernel",
          grad=grad_maker(("X",), ("Out",), ("X",)))
def sequence_concat(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out's sequence i is sequence i of every input, in input order (one LoD level)."""
    xs = ins["X"]
    xp = array_module(*xs)
    lods = [input_lod(attrs, "X", "sequence_concat", k) for k in range(len(xs))]
    order, lod = _concat_rows(lods)
    stacked = xp.concatenate(xs, axis=0)
    return {"Out": [stacked[xp.asarray(order)]], LOD_KEY: {"Out": [lod]}}


@register("sequence_concat_grad", *grad_slots(("X",), ("Out",), ("X",)), lod="kernel")
def sequence_concat_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Each input's gradient: its rows of dOut, back in its own order."""
    xs, d = ins["X"], ins["Out" + GRAD][0]
    xp = array_module(*xs)
    lods = [input_lod(attrs, "X", "sequence_concat_grad", k) for k in range(len(xs))]
    order, _ = _concat_rows(lods)
    stacked = xp.zeros((sum(x.shape[0] for x in xs), *xs[0].shape[1:]), dtype=xs[0].dtype)
    if d is not None:
        stacked[xp.asarray(order)] = d
    bounds = np.cumsum([0] + [x.shape[0] for x in xs])
    return {"X" + GRAD: [stacked[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)],
            LOD_KEY: {"X" + GRAD: lods}}


@register("lod_reset", ("X", "Y"), ("Out",), {"target_lod": [], "append": False},
          optional=("Y",), lod="kernel", grad=grad_maker(("X",), ("Out",), ("X",)))
def lod_reset(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with a new LoD: Y's LoD when Y has one, else Y's values as the offsets of one
    level, else ``target_lod`` (offsets); ``append`` adds it below X's levels."""
    x = ins["X"][0]
    y = (ins.get("Y") or [None])[0]
    y_lod = ((attrs.get("_lods") or {}).get("Y") or [None])[0]
    if y is not None and y_lod:
        new = tuple(y_lod)
    else:
        if y is not None:
            level = np.asarray(y.get() if hasattr(y, "get") else y).reshape(-1)
        else:
            level = np.asarray(attrs.get("target_lod") or [], dtype=np.int64)
        if level.size == 0:
            raise ValueError("lod_reset: give Y (a LoD tensor, or offsets) or target_lod")
        new = (tuple(int(v) for v in level),)
    if attrs.get("append"):
        x_lod = ((attrs.get("_lods") or {}).get("X") or [None])[0] or ()
        new = tuple(x_lod) + new[-1:]
    new = check_lod(new, int(x.shape[0]), "lod_reset's output")
    return {"Out": [x], LOD_KEY: {"Out": [new]}}


@register("lod_reset_grad", *grad_slots(("X",), ("Out",), ("X",)), {"target_lod": [],
                                                                    "append": False},
          lod="kernel")
def lod_reset_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut, with X's LoD."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    x_lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    return {"X" + GRAD: [xp.zeros_like(x) if d is None else d],
            LOD_KEY: {"X" + GRAD: [x_lod]}}


@register("sequence_mask", ("X", "MaxLenTensor"), ("Y",), {"maxlen": -1, "out_dtype": "int64"},
          optional=("MaxLenTensor",), lod="none")
def sequence_mask(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y[..., j] = j < X[...]: a mask of ``maxlen`` columns (the largest length when -1)."""
    x = ins["X"][0]
    xp = array_module(x)
    given = (ins.get("MaxLenTensor") or [None])[0]
    maxlen = int(given.reshape(-1)[0]) if given is not None else int(attrs.get("maxlen", -1))
    if maxlen < 0:
        maxlen = int(x.max()) if x.size else 0
    y = xp.arange(maxlen)[(None,) * x.ndim] < x[..., None]
    return {"Y": [y.astype(to_dtype(attrs.get("out_dtype", "int64")))]}
