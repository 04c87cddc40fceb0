"""Sequence (LoD) ops: kernels that read their inputs' LoD and set their outputs'.

They are registered with ``lod="kernel"``: the executor passes ``attrs["_lods"]`` (input slot
-> one LoD per bound name, None where there is none) and takes the outputs' LoDs from the
result's ``LOD_KEY`` entry (see :mod:`dask_fluid.lod`). A sequence is the rows between two
offsets of the input's last LoD level; an empty sequence is allowed where Fluid allows it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register
from .selected_rows import grad_maker, grad_slots, scatter_add

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
