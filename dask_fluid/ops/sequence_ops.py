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
from .registry import GRAD, LOD_KEY, array_module, register, to_host
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
# context windows. A window position outside its row's sequence reads zeros, or, with
# paddingTrainable, a row of PaddingData ``[up_pad + down_pad, D]`` (up_pad = max(0, -start),
# down_pad = max(0, start + length - 1)): position ``p`` before the sequence's first row reads
# PaddingData[up_pad + p - first], past its end PaddingData[up_pad + p - end]. That is what
# math/context_project.h's ContextProjectFunctor copies (its down-pad loop was checked against
# this rule for every sequence length 1..8, start -4..5, length 1..5), and what
# test_sequence_conv.py's seqconv reference computes.

_SEQ_CONV_ATTRS = {"contextStride": 1, "contextStart": 0, "contextLength": 3,
                   "paddingTrainable": False}


def _context_index(offsets: tuple, start: int, length: int,
                   trainable: bool = False) -> np.ndarray:
    """``[N, length]`` row indices, into ``X`` followed by the PaddingData rows (``N + p``:
    PaddingData row ``p``; only with ``trainable``) and one zero row (``N + total_pad``), of
    every row's context window."""
    o = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(o)
    rows = int(o[-1])
    up_pad = max(0, -start)
    zero_row = rows + (up_pad + max(0, start + length - 1) if trainable else 0)
    first = np.repeat(o[:-1], lengths)[:, None]
    last = np.repeat(o[1:], lengths)[:, None]
    idx = np.arange(rows)[:, None] + start + np.arange(length)[None, :]
    if not trainable:
        return np.where((idx >= first) & (idx < last), idx, zero_row)
    return np.where(idx < first, rows + up_pad + idx - first,
                    np.where(idx >= last, rows + up_pad + idx - last, idx))


def _check_seq_conv(attrs: dict, op: str, x: Any, pad: Any) -> tuple[int, int, bool]:
    """contextStart, contextLength and paddingTrainable, checked as Fluid's InferShape does."""
    if int(attrs.get("contextStride", 1)) != 1:
        raise ValueError(f"{op}: contextStride must be 1 (Fluid supports only 1), got "
                         f"{attrs.get('contextStride')}")
    start, length = int(attrs.get("contextStart", 0)), int(attrs.get("contextLength", 3))
    if length < 1:
        raise ValueError(f"{op}: contextLength must be >= 1, got {length}")
    trainable = bool(attrs.get("paddingTrainable", False))
    if trainable:
        if start == 0 and length == 1:
            raise ValueError(f"{op}: if contextStart is 0 and contextLength is 1, "
                             "paddingTrainable should be False (there is no padding)")
        total = max(0, -start) + max(0, start + length - 1)
        if pad is None:
            raise ValueError(f"{op}: paddingTrainable=True needs Input(PaddingData)")
        if tuple(pad.shape) != (total, x.shape[1]):
            raise ValueError(f"{op}: PaddingData must be [up_pad + down_pad, D] = "
                             f"{[total, int(x.shape[1])]} for contextStart {start} and "
                             f"contextLength {length}, got {list(pad.shape)}")
    return start, length, trainable


def _seq_conv_source(xp: Any, x: Any, pad: Any, trainable: bool) -> Any:
    """X, then PaddingData's rows (with paddingTrainable), then one zero row: the rows
    :func:`_context_index` indexes."""
    parts = [x] + ([pad.astype(x.dtype)] if trainable else [])
    return xp.concatenate(parts + [xp.zeros((1, x.shape[1]), dtype=x.dtype)])


@register("sequence_conv", ("X", "Filter", "PaddingData"), ("Out",), _SEQ_CONV_ATTRS,
          optional=("PaddingData",), lod="kernel",
          grad=grad_maker(("X", "Filter", "PaddingData"), ("Out",),
                          ("X", "Filter", "PaddingData")))
def sequence_conv(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[r] = concat(X[r + contextStart], ..., X[r + contextStart + contextLength - 1]) @
    Filter, the rows outside r's sequence taken as zeros, or as PaddingData's rows when
    paddingTrainable; Out keeps X's LoD."""
    x, w = ins["X"][0], ins["Filter"][0]
    pad = (ins.get("PaddingData") or [None])[0]
    xp = array_module(x, w)
    start, length, trainable = _check_seq_conv(attrs, "sequence_conv", x, pad)
    lod = input_lod(attrs, "X", "sequence_conv")
    if w.shape[0] != length * x.shape[1]:
        raise ValueError(f"sequence_conv: Filter has {w.shape[0]} rows, but contextLength "
                         f"{length} x the {x.shape[1]} columns of X need {length * x.shape[1]}")
    idx = xp.asarray(_context_index(lod[-1], start, length, trainable))
    col = _seq_conv_source(xp, x, pad, trainable)[idx].reshape(x.shape[0], -1)
    return {"Out": [col @ w], LOD_KEY: {"Out": [lod]}}


@register("sequence_conv_grad",
          *grad_slots(("X", "Filter", "PaddingData"), ("Out",), ("X", "Filter", "PaddingData")),
          _SEQ_CONV_ATTRS, optional=("PaddingData",), lod="kernel")
def sequence_conv_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dFilter = col(X)ᵀ dOut; dX (and dPaddingData, with paddingTrainable) add each
    window's share of dOut Filterᵀ back to the rows it read."""
    x, w, d = ins["X"][0], ins["Filter"][0], ins["Out" + GRAD][0]
    pad = (ins.get("PaddingData") or [None])[0]
    xp = array_module(x, w)
    start, length, trainable = _check_seq_conv(attrs, "sequence_conv_grad", x, pad)
    lod = input_lod(attrs, "X", "sequence_conv_grad")
    if d is None:
        d = xp.zeros((x.shape[0], w.shape[1]), dtype=x.dtype)
    idx = xp.asarray(_context_index(lod[-1], start, length, trainable))
    res: dict = {LOD_KEY: {"X" + GRAD: [lod]}}
    if "Filter" + GRAD in outs:
        src = _seq_conv_source(xp, x, pad, trainable)
        res["Filter" + GRAD] = [src[idx].reshape(x.shape[0], -1).T @ d]
    if "X" + GRAD in outs or "PaddingData" + GRAD in outs:
        n_pad = pad.shape[0] if trainable else 0
        dcol = (d @ w.T).reshape(x.shape[0] * length, x.shape[1])
        dsrc = xp.zeros((x.shape[0] + n_pad + 1, x.shape[1]), dtype=x.dtype)
        scatter_add(xp, dsrc, idx.reshape(-1), dcol)
        if "X" + GRAD in outs:
            res["X" + GRAD] = [dsrc[:x.shape[0]]]
        if "PaddingData" + GRAD in outs:
            # Fluid writes zeros when paddingTrainable is False (PaddingData is not read)
            res["PaddingData" + GRAD] = [dsrc[x.shape[0]:x.shape[0] + n_pad] if trainable
                                         else xp.zeros_like(pad)]
            res[LOD_KEY]["PaddingData" + GRAD] = [None]
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
    xp.maximum.at(peak, seg, flat)
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
            level = to_host(y).reshape(-1)
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


# ---------------------------------------------------------------------------------------------
# sequence_expand, sequence_expand_as, sequence_pad, sequence_unpad, sequence_slice,
# sequence_reshape, sequence_enumerate


def _x_offsets(attrs: dict, x: Any, op: str) -> tuple[tuple[int, ...], bool]:
    """X's one-level offsets, or one row a sequence when X has no LoD (Fluid's fake LoD)."""
    lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    if lod:
        if len(lod) != 1:
            raise ValueError(f"{op}: X may have at most one LoD level, got {len(lod)}")
        return tuple(lod[0]), True
    return tuple(range(int(x.shape[0]) + 1)), False


def _expand_rows(x_off: tuple, repeats: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Source rows of sequence_expand's output, and its offsets (sequence i of X repeated
    ``repeats[i]`` times)."""
    rows, offsets = [], [0]
    for i, times in enumerate(repeats):
        a, b = x_off[i], x_off[i + 1]
        for _ in range(int(times)):
            rows.append(np.arange(a, b))
            offsets.append(offsets[-1] + (b - a))
    return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), offsets


def _expand_plan(attrs: dict, x: Any, op: str) -> tuple[np.ndarray, tuple | None]:
    y_lod = input_lod(attrs, "Y", op)
    ref = int(attrs.get("ref_level", -1))
    ref = len(y_lod) - 1 if ref == -1 else ref
    if not 0 <= ref < len(y_lod):
        raise ValueError(f"{op}: ref_level {ref} is out of range for Y's {len(y_lod)} LoD "
                         "levels")
    x_off, x_has = _x_offsets(attrs, x, op)
    repeats = np.diff(np.asarray(y_lod[ref], dtype=np.int64))
    if len(repeats) != len(x_off) - 1:
        raise ValueError(f"{op}: X has {len(x_off) - 1} sequences but level {ref} of Y's LoD "
                         f"has {len(repeats)}")
    rows, offsets = _expand_rows(x_off, repeats)
    return rows, ((tuple(offsets),) if x_has else None)


@register("sequence_expand", ("X", "Y"), ("Out",), {"ref_level": -1}, lod="kernel",
          grad=grad_maker(("X", "Y"), ("Out",), ("X",)))
def sequence_expand(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: sequence i of X (or row i, when X has no LoD) repeated as many times as
    sequence i of Y's ``ref_level`` has sub-sequences; Out has a LoD when X had one."""
    x = ins["X"][0]
    xp = array_module(x)
    rows, lod = _expand_plan(attrs, x, "sequence_expand")
    return {"Out": [x[xp.asarray(rows)]], LOD_KEY: {"Out": [lod]}}


@register("sequence_expand_grad", *grad_slots(("X", "Y"), ("Out",), ("X",)), {"ref_level": -1},
          lod="kernel")
def sequence_expand_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: the sum of dOut over every copy."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    rows, _ = _expand_plan(attrs, x, "sequence_expand_grad")
    dx = xp.zeros_like(x)
    if d is not None and len(rows):
        scatter_add(xp, dx, xp.asarray(rows), d)
    x_lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [x_lod]}}


def _expand_as_rows(attrs: dict, x: Any, op: str) -> tuple[np.ndarray, tuple]:
    y_lod = input_lod(attrs, "Y", op)
    repeats = np.diff(np.asarray(y_lod[0], dtype=np.int64))
    if len(repeats) != x.shape[0]:
        raise ValueError(f"{op}: X has {x.shape[0]} rows but Y has {len(repeats)} sequences")
    return np.repeat(np.arange(x.shape[0]), repeats), (tuple(y_lod[0]),)


@register("sequence_expand_as", ("X", "Y"), ("Out",), lod="kernel",
          grad=grad_maker(("X", "Y"), ("Out",), ("X",)))
def sequence_expand_as(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: row i of X repeated as many times as sequence i of Y has rows; Out takes Y's
    first LoD level."""
    x = ins["X"][0]
    xp = array_module(x)
    rows, lod = _expand_as_rows(attrs, x, "sequence_expand_as")
    return {"Out": [x[xp.asarray(rows)]], LOD_KEY: {"Out": [lod]}}


@register("sequence_expand_as_grad", *grad_slots(("X", "Y"), ("Out",), ("X",)), lod="kernel")
def sequence_expand_as_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX[i]: the sum of dOut over sequence i."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    _, lod = _expand_as_rows(attrs, x, "sequence_expand_as_grad")
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(x)], LOD_KEY: {"X" + GRAD: [None]}}
    dx = segment_sum(xp, d.reshape(d.shape[0], -1), lod[0]).reshape(x.shape)
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [None]}}


def _pad_index(offsets: tuple, maxlen: int) -> tuple[np.ndarray, np.ndarray]:
    """For each (sequence, position) of the padded output: the source row, and whether it is
    a real row (not padding)."""
    o = np.asarray(offsets, dtype=np.int64)
    pos = np.arange(maxlen)[None, :]
    lengths = np.diff(o)[:, None]
    real = pos < lengths
    return np.where(real, o[:-1][:, None] + pos, 0), real


@register("sequence_pad", ("X", "PadValue"), ("Out", "Length"), {"padded_length": -1},
          lod="kernel", grad=grad_maker(("X",), ("Out",), ("X",)))
def sequence_pad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[num_seqs, padded_length, ...]``: every sequence of X, then PadValue (one value or
    one row) up to ``padded_length`` (default: the longest); Length: the lengths (int64)."""
    x, pad = ins["X"][0], ins["PadValue"][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_pad")
    lengths = np.diff(np.asarray(lod[-1], dtype=np.int64))
    longest = int(lengths.max()) if lengths.size else 0
    maxlen = int(attrs.get("padded_length", -1))
    maxlen = longest if maxlen == -1 else maxlen
    if maxlen < longest:
        raise ValueError(f"sequence_pad: padded_length {maxlen} is shorter than the longest "
                         f"sequence ({longest})")
    src, real = _pad_index(lod[-1], maxlen)
    row_shape = tuple(x.shape[1:])
    if pad.size not in (1, int(np.prod(row_shape, dtype=np.int64))):
        raise ValueError(f"sequence_pad: PadValue must be one value or one row "
                         f"{list(row_shape)}, got {list(pad.shape)}")
    pad_row = xp.broadcast_to(pad.reshape(row_shape) if pad.size > 1 else pad.reshape(()),
                              row_shape).astype(x.dtype)
    gathered = x[xp.asarray(src.reshape(-1))] if x.shape[0] else \
        xp.zeros((src.size, *row_shape), dtype=x.dtype)
    mask = xp.asarray(real.reshape(-1)).reshape((-1,) + (1,) * len(row_shape))
    out = xp.where(mask, gathered, pad_row[None])
    return {"Out": [out.reshape((len(lengths), maxlen, *row_shape))],
            "Length": [xp.asarray(lengths.astype(np.int64))],
            LOD_KEY: {"Out": [None], "Length": [None]}}


@register("sequence_pad_grad", *grad_slots(("X",), ("Out",), ("X",)), {"padded_length": -1},
          lod="kernel")
def sequence_pad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: the real rows of dOut."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_pad_grad")
    if d is None:
        return {"X" + GRAD: [xp.zeros_like(x)], LOD_KEY: {"X" + GRAD: [lod]}}
    src, real = _pad_index(lod[-1], d.shape[1])
    flat = d.reshape((d.shape[0] * d.shape[1], *x.shape[1:]))
    return {"X" + GRAD: [flat[xp.asarray(np.flatnonzero(real.reshape(-1)))]],
            LOD_KEY: {"X" + GRAD: [lod]}}


def _unpad_lengths(length: Any, x: Any) -> np.ndarray:
    lengths = to_host(length).astype(np.int64, copy=False).reshape(-1)
    if len(lengths) != x.shape[0] or (lengths < 0).any() or (lengths > x.shape[1]).any():
        raise ValueError(f"sequence_unpad: Length must hold one length in [0, {x.shape[1]}] "
                         f"per row of X ({x.shape[0]}), got {lengths.tolist()}")
    return lengths


@register("sequence_unpad", ("X", "Length"), ("Out",), lod="kernel",
          grad=grad_maker(("X", "Length"), ("Out",), ("X",)))
def sequence_unpad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: the first Length[i] rows of X[i], concatenated, with that LoD.

    Out is ``[sum(Length), *X.shape[2:]]``, except that a 2-D X ``[batch, padded_length]``
    gives ``[sum(Length), 1]`` (Fluid's SequenceUnpadOpKernel appends the 1 so that Out
    stays a 2-D LoDTensor of one-wide rows)."""
    x = ins["X"][0]
    xp = array_module(x)
    lengths = _unpad_lengths(ins["Length"][0], x)
    keep = np.flatnonzero((np.arange(x.shape[1])[None, :] < lengths[:, None]).reshape(-1))
    flat = x.reshape((x.shape[0] * x.shape[1], *x.shape[2:]))
    out = flat[xp.asarray(keep)]
    if x.ndim == 2:
        out = out.reshape(-1, 1)
    lod = (tuple(int(v) for v in np.concatenate([[0], np.cumsum(lengths)])),)
    return {"Out": [out], LOD_KEY: {"Out": [lod]}}


@register("sequence_unpad_grad", *grad_slots(("X", "Length"), ("Out",), ("X",)), lod="kernel")
def sequence_unpad_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut back in its padded places, zeros elsewhere."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    lengths = _unpad_lengths(ins["Length"][0], x)
    dx = xp.zeros_like(x)
    if d is not None:
        keep = np.flatnonzero((np.arange(x.shape[1])[None, :] < lengths[:, None]).reshape(-1))
        flat = dx.reshape((x.shape[0] * x.shape[1], *x.shape[2:]))
        # dOut of a 2-D X is [sum(Length), 1]: drop the appended 1 before scattering
        flat[xp.asarray(keep)] = d.reshape((len(keep), *x.shape[2:]))
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [None]}}


def _slice_rows(attrs: dict, ins: dict, op: str) -> tuple[np.ndarray, tuple, tuple]:
    lod = input_lod(attrs, "X", op)
    o = np.asarray(lod[-1], dtype=np.int64)
    off = to_host(ins["Offset"][0]).astype(np.int64, copy=False).reshape(-1)
    length = to_host(ins["Length"][0]).astype(np.int64, copy=False).reshape(-1)
    n = len(o) - 1
    if len(off) != n or len(length) != n:
        raise ValueError(f"{op}: Offset and Length need one value per sequence ({n}), got "
                         f"{len(off)} and {len(length)}")
    if (off < 0).any() or (length < 0).any() or (off + length > np.diff(o)).any():
        raise ValueError(f"{op}: a slice leaves its sequence: offsets {off.tolist()}, lengths "
                         f"{length.tolist()}, sequence lengths {np.diff(o).tolist()}")
    rows = np.concatenate([np.arange(o[i] + off[i], o[i] + off[i] + length[i])
                           for i in range(n)]) if n else np.zeros(0, np.int64)
    out = (tuple(int(v) for v in np.concatenate([[0], np.cumsum(length)])),)
    return rows, lod, (lod[:-1] + out) if len(lod) > 1 else out


@register("sequence_slice", ("X", "Offset", "Length"), ("Out",), lod="kernel",
          grad=grad_maker(("X", "Offset", "Length"), ("Out",), ("X",)))
def sequence_slice(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out's sequence i: rows ``Offset[i] .. Offset[i] + Length[i]`` of X's sequence i."""
    x = ins["X"][0]
    xp = array_module(x)
    rows, _, out_lod = _slice_rows(attrs, ins, "sequence_slice")
    return {"Out": [x[xp.asarray(rows)]], LOD_KEY: {"Out": [out_lod]}}


@register("sequence_slice_grad", *grad_slots(("X", "Offset", "Length"), ("Out",), ("X",)),
          lod="kernel")
def sequence_slice_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut at the sliced rows, zeros elsewhere."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    rows, lod, _ = _slice_rows(attrs, ins, "sequence_slice_grad")
    dx = xp.zeros_like(x)
    if d is not None and len(rows):
        dx[xp.asarray(rows)] = d
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [lod]}}


def _reshape_lod(lod: tuple, width: int, new_dim: int, op: str) -> tuple:
    o = np.asarray(lod[-1], dtype=np.int64)
    scaled = o * width
    if (scaled % new_dim).any():
        raise ValueError(f"{op}: a sequence of {width}-wide rows does not fill whole rows of "
                         f"{new_dim}: lengths {np.diff(o).tolist()}")
    return lod[:-1] + (tuple(int(v) for v in scaled // new_dim),)


@register("sequence_reshape", ("X",), ("Out",), {"new_dim": 1}, lod="kernel",
          grad=grad_maker(("X",), ("Out",), ("X",)))
def sequence_reshape(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: X ``[N, D]`` as rows of ``new_dim``, each sequence kept whole."""
    x = ins["X"][0]
    lod = input_lod(attrs, "X", "sequence_reshape")
    new_dim = int(attrs.get("new_dim", 1))
    out_lod = _reshape_lod(lod, int(x.shape[1]), new_dim, "sequence_reshape")
    return {"Out": [x.reshape(-1, new_dim)], LOD_KEY: {"Out": [out_lod]}}


@register("sequence_reshape_grad", *grad_slots(("X",), ("Out",), ("X",)), {"new_dim": 1},
          lod="kernel")
def sequence_reshape_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: dOut in X's shape."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_reshape_grad")
    dx = xp.zeros_like(x) if d is None else d.reshape(x.shape)
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [lod]}}


@register("sequence_enumerate", ("X",), ("Out",), {"win_size": 2, "pad_value": 0},
          lod="kernel")
def sequence_enumerate(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[r]: the ``win_size`` ids from row r on within r's sequence, ``pad_value`` past its
    end; Out keeps the LoD."""
    x = ins["X"][0]
    xp = array_module(x)
    lod = input_lod(attrs, "X", "sequence_enumerate")
    win = int(attrs.get("win_size", 2))
    if win < 1:
        raise ValueError(f"sequence_enumerate: win_size must be >= 1, got {win}")
    idx = _context_index(lod[-1], 0, win)
    flat = x.reshape(-1)
    padded = xp.concatenate([flat, xp.asarray([attrs.get("pad_value", 0)], dtype=x.dtype)])
    return {"Out": [padded[xp.asarray(idx)]], LOD_KEY: {"Out": [lod]}}


# ---------------------------------------------------------------------------------------------
# row_conv: the lookahead convolution of DeepSpeech2, Out[t] = sum_k X[t + k] * Filter[k]
# over the rows t + k still inside t's sequence (Fluid 1.8's row_conv_op.cc)


def _row_conv_plan(attrs: dict, x: Any, w: Any, op: str) -> tuple[Any, tuple, tuple | None]:
    """``(rows [N, D], offsets, lod)``: a LoD input is its own rows, split by the last LoD
    level; a padded ``[B, T, D]`` input (no LoD) is ``B`` sequences of ``T`` rows."""
    lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    if w.ndim != 2:
        raise ValueError(f"{op}: Filter must be 2-D [future_context_size + 1, D], got shape "
                         f"{tuple(w.shape)}")
    if lod:
        if x.ndim != 2:
            raise ValueError(f"{op}: a LoD Input(X) must be 2-D [T, D], got shape "
                             f"{tuple(x.shape)}")
        offsets = tuple(int(o) for o in lod[-1])
        rows = x
    else:
        if x.ndim != 3:
            raise ValueError(f"{op}: Input(X) without LoD must be padded 3-D [B, T, D], got "
                             f"shape {tuple(x.shape)}; feed a LoD tensor for [T, D]")
        offsets = tuple(range(0, x.shape[0] * x.shape[1] + 1, max(x.shape[1], 1)))
        if x.shape[1] == 0:
            offsets = (0,) * (x.shape[0] + 1)
        rows = x.reshape(-1, x.shape[2])
    if w.shape[1] != rows.shape[1]:
        raise ValueError(f"{op}: Filter has {w.shape[1]} columns but Input(X) has "
                         f"{rows.shape[1]} (D must match)")
    return rows, offsets, lod


@register("row_conv", ("X", "Filter"), ("Out",), lod="kernel",
          grad=grad_maker(("X", "Filter"), ("Out",), ("X", "Filter")))
def row_conv(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[t] = Σ_k Filter[k] ⊙ X[t + k], k < future_context_size + 1, the rows past the end
    of t's sequence left out; Out has X's shape and LoD."""
    x, w = ins["X"][0], ins["Filter"][0]
    xp = array_module(x, w)
    rows, offsets, lod = _row_conv_plan(attrs, x, w, "row_conv")
    idx = xp.asarray(_context_index(offsets, 0, w.shape[0]))
    padded = xp.concatenate([rows, xp.zeros((1, rows.shape[1]), dtype=rows.dtype)])
    out = (padded[idx] * w[None, :, :]).sum(axis=1)
    return {"Out": [out.reshape(x.shape)], LOD_KEY: {"Out": [lod]}}


@register("row_conv_grad", *grad_slots(("X", "Filter"), ("Out",), ("X", "Filter")), lod="kernel")
def row_conv_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dFilter[k] = Σ_t X[t + k] ⊙ dOut[t]; dX[t + k] += Filter[k] ⊙ dOut[t] (within each
    sequence)."""
    x, w, d = ins["X"][0], ins["Filter"][0], ins["Out" + GRAD][0]
    xp = array_module(x, w)
    rows, offsets, lod = _row_conv_plan(attrs, x, w, "row_conv_grad")
    res: dict = {LOD_KEY: {"X" + GRAD: [lod]}}
    d2 = xp.zeros_like(rows) if d is None else d.reshape(rows.shape)
    idx = xp.asarray(_context_index(offsets, 0, w.shape[0]))
    if "Filter" + GRAD in outs:
        padded = xp.concatenate([rows, xp.zeros((1, rows.shape[1]), dtype=rows.dtype)])
        res["Filter" + GRAD] = [(padded[idx] * d2[:, None, :]).sum(axis=0)]
    if "X" + GRAD in outs:
        dx = xp.zeros((rows.shape[0] + 1, rows.shape[1]), dtype=rows.dtype)
        contrib = (d2[:, None, :] * w[None, :, :]).reshape(-1, rows.shape[1])
        scatter_add(xp, dx, idx.reshape(-1), contrib)
        res["X" + GRAD] = [dx[:-1].reshape(x.shape)]
    return res


# ---------------------------------------------------------------------------------------------
# im2sequence: every kernel-sized patch of an NCHW image as one row, the patches of an image
# one sequence (Fluid 1.8's im2sequence_op.h: im2col in the OCF layout [oh, ow, C, kh, kw])

_IM2SEQ_ATTRS = {"kernels": [], "strides": [1, 1], "paddings": [0, 0, 0, 0],
                 "out_stride": [1, 1]}


def _ints(attrs: dict, key: str, n: int, op: str) -> list[int]:
    v = [int(a) for a in (attrs.get(key) or [])]
    if len(v) != n:
        raise ValueError(f"{op}: attribute {key} must hold {n} ints, got {attrs.get(key)!r}")
    return v


def _trunc_div(a: int, b: int) -> int:
    """C++'s ``a / b`` on ints (rounds toward zero), as Paddle's output-size formula does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _im2seq_index(attrs: dict, x_shape: tuple, real: np.ndarray | None,
                  op: str) -> tuple[np.ndarray, tuple]:
    """The flat index into X of every output element (X's size where the patch reads
    padding) and the output LoD."""
    if len(x_shape) != 4:
        raise ValueError(f"{op}: Input(X) must be 4-D NCHW, got shape {tuple(x_shape)}")
    n, c, h, w = (int(s) for s in x_shape)
    kh, kw = _ints(attrs, "kernels", 2, op)
    sh, sw = _ints(attrs, "strides", 2, op)
    up, left, down, right = _ints(attrs, "paddings", 4, op)
    if min(kh, kw, sh, sw) < 1:
        raise ValueError(f"{op}: kernels and strides must be positive, got kernels {[kh, kw]}, "
                         f"strides {[sh, sw]}")
    if real is not None and n > 1:
        # Fluid: with Y (and more than one image), each image's patches cover only its real
        # size scaled down by out_stride (rounded up); a batch of one ignores Y
        osh, osw = _ints(attrs, "out_stride", 2, op)
        if real.shape != (n, 2):
            raise ValueError(f"{op}: Input(Y) must be [N, 2] (height, width of each of the {n} "
                             f"images), got shape {real.shape}")
        if min(osh, osw) < 1:
            raise ValueError(f"{op}: out_stride must be positive, got {[osh, osw]}")
        rh = [-(-int(v) // osh) for v in real[:, 0]]
        rw = [-(-int(v) // osw) for v in real[:, 1]]
    else:
        rh, rw = [h] * n, [w] * n
    sizes = []
    for i in range(n):
        oh = _trunc_div(rh[i] + up + down - kh, sh) + 1
        ow = _trunc_div(rw[i] + left + right - kw, sw) + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{op}: image {i} of size {rh[i]}x{rw[i]} gives an empty output "
                             f"({oh}x{ow}) for kernels {[kh, kw]}, paddings "
                             f"{[up, left, down, right]}, strides {[sh, sw]}")
        sizes.append((oh, ow))
    total = n * c * h * w
    parts = []
    ch, a, e = np.meshgrid(np.arange(c), np.arange(kh), np.arange(kw), indexing="ij")
    ch, a, e = ch.reshape(-1), a.reshape(-1), e.reshape(-1)
    for i, (oh, ow) in enumerate(sizes):
        r = (np.arange(oh) * sh)[:, None, None] + a[None, None, :] - up      # [oh, 1, ckk]
        s = (np.arange(ow) * sw)[None, :, None] + e[None, None, :] - left    # [1, ow, ckk]
        inside = (r >= 0) & (r < h) & (s >= 0) & (s < w)
        flat = ((i * c + ch[None, None, :]) * h + r) * w + s
        parts.append(np.where(inside, flat, total).reshape(oh * ow, c * kh * kw))
    index = (np.concatenate(parts) if parts
             else np.zeros((0, c * kh * kw), dtype=np.int64))
    lod = (tuple(int(v) for v in np.cumsum([0] + [oh * ow for oh, ow in sizes])),)
    return index.astype(np.int64), lod


def _im2seq_real(ins: dict) -> np.ndarray | None:
    y = (ins.get("Y") or [None])[0]
    return None if y is None else to_host(y)


@register("im2sequence", ("X", "Y"), ("Out",), _IM2SEQ_ATTRS, optional=("Y",), lod="kernel",
          grad=grad_maker(("X", "Y"), ("Out",), ("X",)))
def im2sequence(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out ``[Σ oh·ow, C·kh·kw]``: row ``i·ow + j`` of image ``n``'s sequence is the patch
    at (i·stride_h - pad_up, j·stride_w - pad_left), channel-major, zeros outside X."""
    x = ins["X"][0]
    xp = array_module(x)
    index, lod = _im2seq_index(attrs, x.shape, _im2seq_real(ins), "im2sequence")
    flat = xp.concatenate([x.reshape(-1), xp.zeros(1, dtype=x.dtype)])
    return {"Out": [flat[xp.asarray(index)]], LOD_KEY: {"Out": [lod]}}


@register("im2sequence_grad", *grad_slots(("X", "Y"), ("Out",), ("X",)), _IM2SEQ_ATTRS,
          lod="kernel")
def im2sequence_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX: every element of dOut added back to the X element its patch read (col2im)."""
    x, d = ins["X"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    index, _ = _im2seq_index(attrs, x.shape, _im2seq_real(ins), "im2sequence_grad")
    dx = xp.zeros(x.size + 1, dtype=x.dtype)
    if d is not None:
        scatter_add(xp, dx, xp.asarray(index.reshape(-1)), d.reshape(-1))
    return {"X" + GRAD: [dx[:-1].reshape(x.shape)], LOD_KEY: {"X" + GRAD: [None]}}


# ---------------------------------------------------------------------------------------------
# sequence_scatter: Out = X, then Out[i, Ids[r]] += Updates[r] for every row r of sequence i
# of Ids (Fluid 1.8's sequence_scatter_op.h)


def _scatter_index(ins: dict, attrs: dict, x_shape: tuple, op: str) -> np.ndarray:
    """The flat index into X (as ``[rows, slice]``) of every update."""
    ids = to_host(ins["Ids"][0])
    lod = input_lod(attrs, "Ids", op)
    if len(lod) != 1:
        raise ValueError(f"{op}: Input(Ids) must have one LoD level, got {len(lod)}")
    offsets = np.asarray(lod[0], dtype=np.int64)
    n = int(ids.shape[0]) if ids.ndim else 1
    if ids.size != n:
        raise ValueError(f"{op}: Input(Ids) must be [N, 1] (one column index a row), got "
                         f"shape {ids.shape}")
    if int(offsets[-1]) != n:
        raise ValueError(f"{op}: the LoD of Input(Ids) covers {int(offsets[-1])} rows but Ids "
                         f"has {n}")
    seqs = len(offsets) - 1
    if seqs > int(x_shape[0]):
        raise ValueError(f"{op}: Ids has {seqs} sequences but Input(X) only {x_shape[0]} rows "
                         "(sequence i updates row i)")
    width = int(np.prod(x_shape[1:], dtype=np.int64))
    cols = ids.reshape(-1).astype(np.int64)
    if n and (cols.min() < 0 or cols.max() >= width):
        bad = cols[(cols < 0) | (cols >= width)][0]
        raise ValueError(f"{op}: Ids holds {int(bad)}, outside the {width} columns of a row "
                         "of X")
    seg = np.repeat(np.arange(seqs), np.diff(offsets))
    return seg * width + cols


def _check_updates(ins: dict, attrs: dict, op: str) -> tuple:
    upd, ids = ins["Updates"][0], ins["Ids"][0]
    lod = input_lod(attrs, "Updates", op)
    if len(lod) != 1:
        raise ValueError(f"{op}: Input(Updates) must have one LoD level, got {len(lod)}")
    if upd.shape[0] != ids.shape[0] or upd.size != ids.shape[0]:
        raise ValueError(f"{op}: Input(Updates) must be [N, 1] with the N rows of Ids, got "
                         f"shape {tuple(upd.shape)} for Ids {tuple(ids.shape)}")
    return lod


@register("sequence_scatter", ("X", "Ids", "Updates"), ("Out",), lod="kernel",
          grad=grad_maker(("X", "Ids", "Updates"), ("Out",), ("X", "Updates")))
def sequence_scatter(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X with Updates[r] added at ``Out[i].flat[Ids[r]]`` for each row r of the i-th
    sequence of Ids (repeated ids add up); Out has no LoD, as Fluid's."""
    x, upd = ins["X"][0], ins["Updates"][0]
    xp = array_module(x, upd)
    _check_updates(ins, attrs, "sequence_scatter")
    flat_index = _scatter_index(ins, attrs, x.shape, "sequence_scatter")
    out = x.reshape(-1).copy()
    if flat_index.size:
        scatter_add(xp, out, xp.asarray(flat_index), upd.reshape(-1).astype(x.dtype))
    return {"Out": [out.reshape(x.shape)], LOD_KEY: {"Out": [None]}}


@register("sequence_scatter_grad", *grad_slots(("X", "Ids", "Updates"), ("Out",),
                                               ("X", "Updates")), lod="kernel")
def sequence_scatter_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut; dUpdates[r] = dOut at the element Updates[r] was added to. (Fluid's grad op
    does not read X; it is read here only for its shape when dOut is missing.)"""
    x, upd, d = ins["X"][0], ins["Updates"][0], ins["Out" + GRAD][0]
    xp = array_module(x, upd)
    lod = _check_updates(ins, attrs, "sequence_scatter_grad")
    d = xp.zeros_like(x) if d is None else d
    res: dict = {LOD_KEY: {"X" + GRAD: [None], "Updates" + GRAD: [lod]}}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [d.copy()]
    if "Updates" + GRAD in outs:
        flat_index = _scatter_index(ins, attrs, x.shape, "sequence_scatter_grad")
        du = d.reshape(-1)[xp.asarray(flat_index)]
        res["Updates" + GRAD] = [du.reshape(upd.shape).astype(upd.dtype)]
    return res
