"""Kernels of Fluid 1.8's CTR models: cvm (continuous_value_model), data_norm,
filter_by_instag, shard_index, hash, and the SelectedRows helpers merge_selected_rows and
get_tensor_from_selected_rows."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import GRAD, LOD_KEY, array_module, register, to_host
from .selected_rows import SelectedRows, grad_maker, grad_slots


def _lod_of(attrs: dict, slot: str) -> tuple | None:
    """The LoD of the first array bound to ``slot`` (None when it has none)."""
    lods = (attrs.get("_lods") or {}).get(slot) or []
    return lods[0] if lods and lods[0] else None


# -- cvm ------------------------------------------------------------------------------------------


def _check_cvm(x: Any, cvm: Any, use_cvm: bool) -> None:
    if x.ndim != 2:
        raise ValueError(f"cvm: X must be 2-D [N, D], got shape {tuple(x.shape)}")
    if x.shape[1] < 2:
        raise ValueError(f"cvm: X needs at least 2 columns (show, click), got {x.shape[1]}")
    if cvm.ndim != 2 or cvm.shape[1] != 2:
        raise ValueError(f"cvm: CVM must be [N, 2] (show, click), got shape {tuple(cvm.shape)}")


@register("cvm", ("X", "CVM"), ("Y",), {"use_cvm": True},
          grad=grad_maker(("X", "CVM"), ("Y",), ("X",)))
def cvm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """use_cvm: Y = X with columns 0, 1 replaced by log(show + 1) and
    log(click + 1) − log(show + 1); otherwise Y = X without its first two columns."""
    x, c = ins["X"][0], ins["CVM"][0]
    xp = array_module(x)
    use_cvm = bool(attrs.get("use_cvm", True))
    _check_cvm(x, c, use_cvm)
    if not use_cvm:
        return {"Y": [x[:, 2:].copy()]}
    y = x.copy()
    y[:, 0] = xp.log(x[:, 0] + 1)
    y[:, 1] = xp.log(x[:, 1] + 1) - y[:, 0]
    return {"Y": [y]}


@register("cvm_grad", *grad_slots(("X", "CVM"), ("Y",), ("X",)), {"use_cvm": True},
          lod="kernel")
def cvm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid's convention (cvm_op.h, CvmGradComputeKernel): dX[:, 2:] = dY's columns past the
    show/click ones, and dX[:, 0:2] = the CVM row of the instance (not a derivative: the
    show/click pass through to the embedding's gradient). Without a LoD CVM has a row per X
    row; with one, a row per sequence, shared by the sequence's rows."""
    x, c = ins["X"][0], ins["CVM"][0]
    xp = array_module(x)
    use_cvm = bool(attrs.get("use_cvm", True))
    _check_cvm(x, c, use_cvm)
    dy = ins["Y" + GRAD][0]
    dx = xp.zeros_like(x)
    if dy is not None:
        dx[:, 2:] = dy[:, 2:] if use_cvm else dy
    lod = _lod_of(attrs, "X")
    if lod is None:
        if c.shape[0] != x.shape[0]:
            raise ValueError(f"cvm_grad: CVM has {c.shape[0]} rows but X has {x.shape[0]} "
                             "(without a LoD they must match)")
        dx[:, 0:2] = c.astype(x.dtype, copy=False)
    else:
        offsets = np.asarray(lod[0], dtype=np.int64)
        if c.shape[0] < len(offsets) - 1:
            raise ValueError(f"cvm_grad: CVM has {c.shape[0]} rows but X has "
                             f"{len(offsets) - 1} sequences")
        seg = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
        dx[:, 0:2] = c.astype(x.dtype, copy=False)[xp.asarray(seg)]
    return {"X" + GRAD: [dx], LOD_KEY: {"X" + GRAD: [lod]}}


# -- data_norm ------------------------------------------------------------------------------------

_DN_ATTRS = {"epsilon": 1e-4, "slot_dim": -1, "summary_decay_rate": 0.9999999,
             "data_layout": "NCHW", "sync_stats": False, "enable_scale_and_shift": False}
#: a show value this close to 0 marks an empty slot (data_norm_op.cc's min_precision)
_MIN_PRECISION = 1e-7


def _dn_check(x: Any, attrs: dict, op: str) -> int:
    if attrs.get("sync_stats", False):
        raise NotImplementedError(f"{op}(sync_stats=True) is not implemented in dask_fluid "
                                  "(Fluid all-reduces the statistics over GPUs with NCCL)")
    layout = attrs.get("data_layout", "NCHW")
    if layout not in ("NCHW", "NHWC"):
        raise ValueError(f"{op}: data_layout must be 'NCHW' or 'NHWC', got {layout!r}")
    if x.ndim != 2:
        raise ValueError(f"{op}: X must be 2-D [N, C] (as Fluid's kernel), got shape "
                         f"{tuple(x.shape)}")
    slot_dim = int(attrs.get("slot_dim", -1))
    if slot_dim > 0 and x.shape[1] % slot_dim:
        raise ValueError(f"{op}: slot_dim ({slot_dim}) must divide the {x.shape[1]} columns "
                         "of X")
    return slot_dim


def _dn_scale_bias(ins: dict, x: Any, op: str) -> tuple[Any, Any]:
    """``scale_w`` and ``bias`` of ``enable_scale_and_shift``: both required, each [C]."""
    c = x.shape[1]
    got = []
    for slot in ("scale_w", "bias"):
        v = (ins.get(slot) or [None])[0]
        if v is None:
            raise ValueError(f"{op}: Input({slot}) should not be null when "
                             "enable_scale_and_shift is True")
        if tuple(v.shape) != (c,):
            raise ValueError(f"{op}: {slot} must have shape [{c}] (the columns of X), got "
                             f"{list(v.shape)}")
        got.append(v.astype(x.dtype, copy=False))
    return got[0], got[1]


def _shows(x: Any, slot_dim: int) -> Any:
    """[N, C] bool: the column's slot has a non-zero show (its first column)."""
    xp = array_module(x)
    n, c = x.shape
    show = x.reshape(n, c // slot_dim, slot_dim)[:, :, 0]
    nonzero = ~((show > -_MIN_PRECISION) & (show < _MIN_PRECISION))
    return xp.repeat(nonzero, slot_dim, axis=1)


_DN_INPUTS = ("X", "BatchSize", "BatchSum", "BatchSquareSum", "scale_w", "bias")


@register("data_norm", _DN_INPUTS, ("Y", "Means", "Scales"), _DN_ATTRS,
          optional=("scale_w", "bias"),
          grad=grad_maker(("X", "Means", "Scales", "scale_w", "bias"), ("Y",), _DN_INPUTS))
def data_norm(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Means = BatchSum / BatchSize, Scales = sqrt(BatchSize / BatchSquareSum) per column,
    Y = (X − Means) · Scales; with ``slot_dim > 0`` the slots (groups of ``slot_dim`` columns)
    whose show (first column) is 0 give Y = 0.

    With ``enable_scale_and_shift`` (Fluid 1.8) Y is then scaled and shifted per column as
    batch_norm does: Y = (X − Means) · Scales · scale_w + bias (the empty slots still 0)."""
    x = ins["X"][0]
    slot_dim = _dn_check(x, attrs, "data_norm")
    c = x.shape[1]
    stats = []
    for slot in ("BatchSize", "BatchSum", "BatchSquareSum"):
        s = ins[slot][0]
        if s.shape != (c,):
            raise ValueError(f"data_norm: {slot} must have shape [{c}] (the columns of X), "
                             f"got {tuple(s.shape)}")
        stats.append(s.astype(x.dtype, copy=False))
    size, total, square = stats
    means = total / size
    scales = (size / square) ** 0.5
    if attrs.get("enable_scale_and_shift", False):
        scale_w, bias = _dn_scale_bias(ins, x, "data_norm")
        if slot_dim > 0:  # Fluid's element loop: ((x − mean)·scale)·w + b
            y = (x - means) * scales * scale_w + bias
        else:  # Fluid folds the affine into one scale and one shift per column
            y = x * (scales * scale_w) + (bias - means * scales * scale_w)
    else:
        y = (x - means) * scales
    if slot_dim > 0 and x.shape[0] > 0:
        y = array_module(x).where(_shows(x, slot_dim), y, 0).astype(x.dtype, copy=False)
    return {"Y": [y], "Means": [means], "Scales": [scales]}


@register("data_norm_grad",
          *grad_slots(("X", "Means", "Scales", "scale_w", "bias"), ("Y",), _DN_INPUTS),
          _DN_ATTRS, optional=("scale_w", "bias"))
def data_norm_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid 1.8's CPU kernel: X@GRAD = Y@GRAD · Scales, and the statistics' "gradients" are
    this batch's statistics, which the optimizer then applies to the parameters: BatchSize@GRAD
    = N, BatchSum@GRAD = Σ x, BatchSquareSum@GRAD = Σ (x − Means)² + N·ε. With ``slot_dim > 0``
    only rows whose slot show is non-zero count, and each column that has ``k ≥ 1`` of them gets
    1, Σ x / k and Σ (x − Means)² / k + k·ε (0, 0, 0 when k = 0).

    With ``enable_scale_and_shift``: X@GRAD = Y@GRAD · Scales · scale_w, scale_w@GRAD =
    Σ (x − Means) · Scales · Y@GRAD and bias@GRAD = Σ Y@GRAD over the rows (with
    ``slot_dim > 0`` only the rows whose slot show is non-zero: the others have X@GRAD 0)."""
    x = ins["X"][0]
    xp = array_module(x)
    slot_dim = _dn_check(x, attrs, "data_norm_grad")
    means, scales = ins["Means"][0], ins["Scales"][0]
    eps = x.dtype.type(attrs.get("epsilon", 1e-4))
    n, c = x.shape
    res = {}
    dy = (ins.get("Y" + GRAD) or [None])[0]
    if attrs.get("enable_scale_and_shift", False):
        scale_w, _ = _dn_scale_bias(ins, x, "data_norm_grad")
        if dy is None:
            dy = xp.zeros_like(x)
        if slot_dim > 0 and n > 0:
            dy = xp.where(_shows(x, slot_dim), dy, 0).astype(x.dtype, copy=False)
        if "X" + GRAD in outs:
            res["X" + GRAD] = [dy * scales * scale_w]
        if "scale_w" + GRAD in outs:
            res["scale_w" + GRAD] = [((x - means) * scales * dy).sum(axis=0)]
        if "bias" + GRAD in outs:
            res["bias" + GRAD] = [dy.sum(axis=0)]
    elif "X" + GRAD in outs:
        res["X" + GRAD] = [xp.zeros_like(x) if dy is None else dy * scales]
    sq = (x - means) ** 2
    if slot_dim > 0 and n > 0:
        keep = _shows(x, slot_dim).astype(x.dtype)
        count = keep.sum(axis=0)
        total = (x * keep).sum(axis=0)
        square = (sq * keep).sum(axis=0)
        seen = count >= 1
        safe = xp.where(seen, count, 1)
        d_size = xp.where(seen, 1, 0).astype(x.dtype)
        d_sum = xp.where(seen, total / safe, 0).astype(x.dtype)
        d_square = xp.where(seen, square / safe + count * eps, 0).astype(x.dtype)
    else:
        d_size = xp.full((c,), n, dtype=x.dtype)
        d_sum = x.sum(axis=0)
        d_square = sq.sum(axis=0) + d_size * eps
    for slot, v in (("BatchSize", d_size), ("BatchSum", d_sum),
                    ("BatchSquareSum", d_square)):
        if slot + GRAD in outs:
            res[slot + GRAD] = [v]
    return res


# -- filter_by_instag -----------------------------------------------------------------------------


@register("filter_by_instag", ("Ins", "Ins_tag", "Filter_tag"),
          ("Out", "LossWeight", "IndexMap"), {"is_lod": True, "out_val_if_empty": 0},
          lod="kernel",
          grad=grad_maker(("IndexMap", "Ins", "LossWeight"), ("Out",), ("Ins",)))
def filter_by_instag(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Keep the instances (a row, or with ``is_lod`` a sequence of rows of Ins) that have a tag
    (their sequence of Ins_tag) in Filter_tag. IndexMap rows are (Out row, Ins row, rows),
    LossWeight is 1 per kept instance (float32); nothing kept: Out is one row of
    ``out_val_if_empty``, IndexMap ``[[0, 1, 1]]`` and LossWeight ``[[0]]``."""
    x = ins["Ins"][0]
    xp = array_module(x)
    if x.ndim != 2:
        raise ValueError(f"filter_by_instag: Ins must be 2-D, got shape {tuple(x.shape)}")
    tag_lod = _lod_of(attrs, "Ins_tag")
    if tag_lod is None:
        raise ValueError("filter_by_instag: Ins_tag must be a LoD tensor (one sequence of "
                         "tags per instance)")
    tags = to_host(ins["Ins_tag"][0]).reshape(-1)
    wanted = set(to_host(ins["Filter_tag"][0]).reshape(-1).tolist())
    tag_off = [int(v) for v in tag_lod[0]]
    if attrs.get("is_lod", True):
        ins_lod = _lod_of(attrs, "Ins")
        if ins_lod is None:
            raise ValueError("filter_by_instag: is_lod=True but Ins has no LoD")
        ins_off = [int(v) for v in ins_lod[0]]
    else:
        ins_off = list(range(x.shape[0] + 1))
    n_inst = len(tag_off) - 1
    if len(ins_off) - 1 < n_inst:
        raise ValueError(f"filter_by_instag: Ins_tag has {n_inst} instances but Ins only "
                         f"{len(ins_off) - 1}")
    out_off, starts = [0], []
    for i in range(n_inst):
        if any(t in wanted for t in tags[tag_off[i]:tag_off[i + 1]].tolist()):
            starts.append(ins_off[i])
            out_off.append(out_off[-1] + ins_off[i + 1] - ins_off[i])
    k = len(starts)
    if k:
        rows = np.concatenate([np.arange(s, s + out_off[j + 1] - out_off[j])
                               for j, s in enumerate(starts)]).astype(np.int64)
        out = x[xp.asarray(rows)]
        imap = np.stack([np.asarray(out_off[:-1]), np.asarray(starts),
                         np.diff(out_off)], axis=1).astype(np.int64)
        weight = np.ones((k, 1), np.float32)
        map_lod = ((tuple(range(k + 1)),))
    else:
        out = xp.full((1, x.shape[1]), attrs.get("out_val_if_empty", 0), dtype=x.dtype)
        imap = np.array([[0, 1, 1]], np.int64)
        weight = np.zeros((1, 1), np.float32)
        out_off = [0, 1]
        map_lod = ((0, 1),)
    return {"Out": [out], "LossWeight": [xp.asarray(weight)], "IndexMap": [xp.asarray(imap)],
            LOD_KEY: {"Out": [(tuple(out_off),)], "LossWeight": [map_lod],
                      "IndexMap": [map_lod]}}


@register("filter_by_instag_grad", *grad_slots(("IndexMap", "Ins", "LossWeight"), ("Out",),
                                               ("Ins",)),
          {"is_lod": True, "out_val_if_empty": 0}, lod="kernel")
def filter_by_instag_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Ins@GRAD: the kept rows get their Out row's gradient, the others 0 (all 0 when nothing
    was kept, LossWeight ``[[0]]``)."""
    x = ins["Ins"][0]
    xp = array_module(x)
    dout = ins["Out" + GRAD][0]
    dx = xp.zeros_like(x)
    weight = to_host(ins["LossWeight"][0]).reshape(-1)
    if dout is not None and not (weight.size == 1 and weight[0] == 0):
        imap = to_host(ins["IndexMap"][0]).reshape(-1, 3)
        src = np.concatenate([np.arange(a, a + r) for a, _, r in imap]).astype(np.int64)
        dst = np.concatenate([np.arange(b, b + r) for _, b, r in imap]).astype(np.int64)
        dx[xp.asarray(dst)] = dout[xp.asarray(src)]
    return {"Ins" + GRAD: [dx], LOD_KEY: {"Ins" + GRAD: [_lod_of(attrs, "Ins")]}}


# -- shard_index ----------------------------------------------------------------------------------


@register("shard_index", ("X",), ("Out",),
          {"index_num": 0, "nshards": 0, "shard_id": 0, "ignore_value": -1})
def shard_index(ins: dict, attrs: dict, outs: tuple) -> dict:
    """With shard_size = ceil(index_num / nshards): Out = X % shard_size where
    X // shard_size == shard_id, ``ignore_value`` elsewhere."""
    x = ins["X"][0]
    xp = array_module(x)
    index_num, nshards = int(attrs["index_num"]), int(attrs["nshards"])
    shard_id, ignore = int(attrs["shard_id"]), int(attrs.get("ignore_value", -1))
    if index_num <= 0:
        raise ValueError(f"shard_index: index_num must be > 0, got {index_num}")
    if nshards <= 0:
        raise ValueError(f"shard_index: nshards must be > 0, got {nshards}")
    if not 0 <= shard_id < nshards:
        raise ValueError(f"shard_index: shard_id must be in [0, {nshards}), got {shard_id}")
    if x.dtype.kind not in "iu":
        raise TypeError(f"shard_index: X must be int32 or int64, got {x.dtype}")
    if x.ndim < 2 or x.shape[-1] != 1:
        raise ValueError(f"shard_index: X must be at least 2-D with last dimension 1, got "
                         f"shape {tuple(x.shape)}")
    if x.size:
        lo, hi = int(to_host(x.min())), int(to_host(x.max()))
        if lo < 0 or hi >= index_num:
            bad = lo if lo < 0 else hi
            raise ValueError(f"shard_index: X values must be in [0, {index_num}) (index_num), "
                             f"got {bad}")
    size = (index_num + nshards - 1) // nshards
    out = xp.where(x // size == shard_id, x % size, ignore).astype(x.dtype)
    return {"Out": [out]}


# -- hash (XXH64) ---------------------------------------------------------------------------------

_P1 = np.uint64(11400714785074694791)
_P2 = np.uint64(14029467366897019727)
_P3 = np.uint64(1609587929392839161)
_P4 = np.uint64(9650029242287828579)
_P5 = np.uint64(2870177450012600261)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _round(acc: np.ndarray, lane: np.ndarray) -> np.ndarray:
    return _rotl(acc + lane * _P2, 31) * _P1


def xxh64(data: np.ndarray, seed: int) -> np.ndarray:
    """XXH64 of each row of ``data`` (uint8 ``[rows, length]``) with ``seed``: uint64
    ``[rows]``. The algorithm of the xxHash specification, vectorised over the rows."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    rows, length = data.shape
    with np.errstate(over="ignore"):
        seed64 = np.uint64(seed % 2**64)
        p = 0

        def lanes64(at: int, count: int) -> np.ndarray:
            return data[:, at:at + 8 * count].copy().view("<u8")

        if length >= 32:
            v = [np.full(rows, seed64 + _P1 + _P2, np.uint64), np.full(rows, seed64 + _P2,
                 np.uint64), np.full(rows, seed64, np.uint64),
                 np.full(rows, seed64 - _P1, np.uint64)]
            while p + 32 <= length:
                lane = lanes64(p, 4)
                v = [_round(v[i], lane[:, i]) for i in range(4)]
                p += 32
            h = _rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)
            for i in range(4):
                h = (h ^ _round(np.zeros(rows, np.uint64), v[i])) * _P1 + _P4
        else:
            h = np.full(rows, seed64 + _P5, np.uint64)
        h = h + np.uint64(length)
        while p + 8 <= length:
            h = h ^ _round(np.zeros(rows, np.uint64), lanes64(p, 1)[:, 0])
            h = _rotl(h, 27) * _P1 + _P4
            p += 8
        if p + 4 <= length:
            k = data[:, p:p + 4].copy().view("<u4")[:, 0].astype(np.uint64)
            h = _rotl(h ^ (k * _P1), 23) * _P2 + _P3
            p += 4
        while p < length:
            h = _rotl(h ^ (data[:, p].astype(np.uint64) * _P5), 11) * _P1
            p += 1
        h = (h ^ (h >> np.uint64(33))) * _P2
        h = (h ^ (h >> np.uint64(29))) * _P3
        return h ^ (h >> np.uint64(32))


@register("hash", ("X",), ("Out",), {"num_hash": 1, "mod_by": 100000})
def hash_op(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i, k, 0] = XXH64(row i, seed k) % mod_by, shape X.shape[:-1] + [num_hash, 1]. As
    Fluid 1.8's kernel (hash_op.h, ``HashKernel<T>``), the bytes hashed are the row's whole
    ``sizeof(T) · last_dim`` bytes (little-endian), so int64 ids that share their low 32 bits
    still hash apart."""
    x = ins["X"][0]
    xp = array_module(x)
    if x.dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"hash: X must be int32 or int64, got {x.dtype}")
    if x.ndim < 1:
        raise ValueError("hash: X must have at least one dimension")
    num_hash, mod_by = int(attrs.get("num_hash", 1)), int(attrs.get("mod_by", 100000))
    if num_hash <= 0:
        raise ValueError(f"hash: num_hash must be > 0, got {num_hash}")
    if mod_by <= 0:
        raise ValueError(f"hash: mod_by must be > 0, got {mod_by}")
    host = np.ascontiguousarray(to_host(x)).astype(x.dtype.newbyteorder("<"), copy=False)
    last = x.shape[-1]
    data = host.reshape(-1, last).view(np.uint8).reshape(-1, last * host.itemsize)
    out = np.stack([xxh64(data, k) % np.uint64(mod_by) for k in range(num_hash)], axis=1)
    out = out.astype(x.dtype).reshape(*x.shape[:-1], num_hash, 1)
    return {"Out": [out if xp is np else xp.asarray(out)]}


# -- SelectedRows ---------------------------------------------------------------------------------


def _selected_rows(x: Any, op: str) -> SelectedRows:
    if not isinstance(x, SelectedRows):
        raise TypeError(f"{op}: X must be a SelectedRows, got {type(x).__name__}")
    return x


@register("merge_selected_rows", ("X",), ("Out",), lod="none")
def merge_selected_rows(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: X's distinct rows, ascending (as Fluid's CPU MergeAdd), the values of a repeated
    row summed."""
    x = _selected_rows(ins["X"][0], "merge_selected_rows")
    xp = x.xp
    m = x.merged()
    if m is x:  # already distinct and sorted: still a new SelectedRows, not an alias
        m = SelectedRows(x.rows.copy(), x.value.copy(), x.height)
    rows = m.rows.astype(np.int64) if xp is np else m.rows.astype(xp.int64)
    return {"Out": [SelectedRows(rows, m.value, m.height)]}


@register("get_tensor_from_selected_rows", ("X",), ("Out",), lod="none")
def get_tensor_from_selected_rows(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out: a copy of X's value tensor ``[len(rows), ...]`` (not the dense ``[height, ...]``)."""
    x = _selected_rows(ins["X"][0], "get_tensor_from_selected_rows")
    return {"Out": [x.value.copy()]}
