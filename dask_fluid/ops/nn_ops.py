"""Neural-network kernels: softmax, cross entropy (plain and fused), top_k, accuracy, dropout
and the embedding lookup ``lookup_table`` with its dense or SelectedRows gradient."""

from __future__ import annotations

from typing import Any

import numpy as np

from .host_ops import PSERVER_OPS
from .index_ops import int_tensor_values
from .registry import GRAD, array_module, register, set_remote_provider, table_rows
from .selected_rows import SelectedRows, grad_maker, grad_slots, scatter_add


def _register_grad(type: str, fwd: tuple, out_grads=("Out",), in_grads=("X",), attrs=None,
                   **kw: Any):
    inputs, outputs = grad_slots(fwd, out_grads, in_grads)
    return (grad_maker(fwd, out_grads, in_grads),
            register(type + "_grad", inputs, outputs, attrs, **kw))


def _check_labels(op: str, lab: Any, num_classes: int, ignore_index: int) -> Any:
    """Raise ValueError naming the op, the bad label and the valid range; return the mask of
    rows that count (label != ignore_index), or None when every row counts."""
    if lab.size == 0:
        return None
    if not 0 <= ignore_index < num_classes:
        # hot path: two reductions prove that no label is bad or ignored
        if int(lab.min()) >= 0 and int(lab.max()) < num_classes:
            return None
    ignored = lab == ignore_index
    bad = ((lab < 0) | (lab >= num_classes)) & ~ignored
    if bool(bad.any()):
        value = int(lab[bad.nonzero()[0][0]])
        raise ValueError(f"{op}: label {value} is out of range: labels must lie in "
                         f"[0, {num_classes}) or equal ignore_index={ignore_index}")
    if bool(ignored.any()):
        return ~ignored
    return None


def _hard_labels(label: Any) -> Any:
    """A hard label tensor ``[..., 1]`` as a flat int64 vector."""
    lab = label.reshape(-1)
    return lab if lab.dtype == np.int64 else lab.astype(np.int64)


def _y_shape(x: Any, label: Any) -> tuple:
    """Fluid's CrossEntropyOpBase::InferShape: Y takes Label's shape, its last dim set to 1
    when Label has X's rank; a hard Label of rank ``X.ndim − 1`` (the trailing 1 dropped)
    gives a Y of that rank."""
    if label.ndim == x.ndim:
        return tuple(label.shape[:-1]) + (1,)
    if label.ndim != x.ndim - 1 or tuple(label.shape) != tuple(x.shape[:-1]):
        raise ValueError(f"cross_entropy: Label {tuple(label.shape)} must have X's shape "
                         f"{tuple(x.shape)} but the last dim (1, or dropped)")
    return tuple(label.shape)


def _to_last(a: Any, axis: int) -> Any:
    return a if axis in (-1, a.ndim - 1) else array_module(a).moveaxis(a, axis, -1)


def _from_last(a: Any, axis: int) -> Any:
    return a if axis in (-1, a.ndim - 1) else array_module(a).moveaxis(a, -1, axis)


# ---------------------------------------------------------------------------------------------
# softmax

_softmax_maker, _softmax_grad_register = _register_grad("softmax", ("Out",), attrs={"axis": -1})


def _softmax_last(x: Any) -> Any:
    xp = array_module(x)
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


@register("softmax", ("X",), ("Out",), {"axis": -1}, grad=_softmax_maker)
def softmax(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = softmax(X) along ``axis`` (max-shifted, so it never overflows)."""
    axis = attrs.get("axis", -1)
    return {"Out": [_from_last(_softmax_last(_to_last(ins["X"][0], axis)), axis)]}


@_softmax_grad_register
def softmax_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = Out · (dOut − sum(dOut · Out, axis))."""
    out, d = ins["Out"][0], ins["Out" + GRAD][0]
    if d is None:
        return {"X" + GRAD: [array_module(out).zeros_like(out)]}
    axis = attrs.get("axis", -1)
    return {"X" + GRAD: [out * (d - (d * out).sum(axis=axis, keepdims=True))]}


# ---------------------------------------------------------------------------------------------
# cross_entropy (X holds probabilities)

_CE_ATTRS = {"soft_label": False, "ignore_index": -100}
_ce_maker, _ce_grad_register = _register_grad("cross_entropy", ("X", "Label"), ("Y",),
                                              attrs=_CE_ATTRS)


#: Paddle's ``math::TolerableValue``: a log of a probability of 0 counts as -1e20, not -inf
_APPROX_INF = 1e20


def _log_tolerable(xp: Any, p: Any) -> Any:
    with np.errstate(divide="ignore"):  # log(0) = -inf is expected here, then clipped
        log = xp.log(p)
    return xp.clip(log, -_APPROX_INF, _APPROX_INF)


@register("cross_entropy", ("X", "Label"), ("Y",), _CE_ATTRS, grad=_ce_maker)
def cross_entropy(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = −log X[label] (hard labels ``[..., 1]``) or −Σ label·log X (soft), shape [..., 1];
    a probability of 0 gives 1e20, as Paddle's kernel does (its gradient, −dY / 0, is not
    finite, as in Paddle)."""
    x, label = ins["X"][0], ins["Label"][0]
    y_shape = _y_shape(x, label)  # the labels' shape checked before they are read
    xp = array_module(x)
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    if attrs.get("soft_label", False):
        y = -(label.reshape(-1, c) * _log_tolerable(xp, x2)).sum(axis=1, keepdims=True)
    else:
        lab = _hard_labels(label)
        valid = _check_labels("cross_entropy", lab, c, attrs.get("ignore_index", -100))
        safe = lab if valid is None else xp.where(valid, lab, 0)
        y = -_log_tolerable(xp, xp.take_along_axis(x2, safe[:, None], axis=1))
        if valid is not None:
            y *= valid[:, None]
    return {"Y": [y.reshape(y_shape)]}


@_ce_grad_register
def cross_entropy_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = −dY / X at the label (hard) or −dY · label / X (soft)."""
    x, label = ins["X"][0], ins["Label"][0]
    xp = array_module(x)
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    dy = ins["Y" + GRAD][0]
    if dy is None:
        return {"X" + GRAD: [xp.zeros_like(x)]}
    dy = dy.reshape(-1, 1)
    if attrs.get("soft_label", False):
        return {"X" + GRAD: [(-dy * label.reshape(-1, c) / x2).reshape(x.shape)]}
    lab = _hard_labels(label)
    valid = _check_labels("cross_entropy_grad", lab, c, attrs.get("ignore_index", -100))
    safe = lab if valid is None else xp.where(valid, lab, 0)
    picked = -dy / xp.take_along_axis(x2, safe[:, None], axis=1)
    if valid is not None:
        picked *= valid[:, None]
    dx = xp.zeros_like(x2)
    dx[xp.arange(len(safe)), safe] = picked[:, 0]
    return {"X" + GRAD: [dx.reshape(x.shape)]}


# ---------------------------------------------------------------------------------------------
# cross_entropy2: what layers.cross_entropy builds for hard labels in Fluid 1.8; it keeps the
# probability at the label (MatchX) and X's shape (XShape, a zero-size array of shape
# [0, *X.shape], as Fluid's XShape holds only dims) for its gradient

_CE2_ATTRS = {"ignore_index": -100}


@register("cross_entropy2", ("X", "Label"), ("Y", "MatchX", "XShape"), _CE2_ATTRS,
          grad=grad_maker(("Label", "MatchX", "XShape"), ("Y",), ("X",),
                          type="cross_entropy_grad2"))
def cross_entropy2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Y = −log X[label] (hard labels ``[..., 1]``), shape [..., 1]; MatchX = X[label]."""
    x, label = ins["X"][0], ins["Label"][0]
    y_shape = _y_shape(x, label)  # the labels' shape checked before they are read
    xp = array_module(x)
    c = x.shape[-1]
    x2 = x.reshape(-1, c)
    lab = _hard_labels(label)
    valid = _check_labels("cross_entropy2", lab, c, attrs.get("ignore_index", -100))
    safe = lab if valid is None else xp.where(valid, lab, 0)
    match = xp.take_along_axis(x2, safe[:, None], axis=1)
    y = -_log_tolerable(xp, match)
    if valid is not None:
        y *= valid[:, None]
        match = xp.where(valid[:, None], match, xp.zeros_like(match))
    lead = x.shape[:-1] + (1,)
    return {"Y": [y.reshape(y_shape)], "MatchX": [match.reshape(lead)],
            "XShape": [xp.zeros((0, *x.shape), dtype=x.dtype)]}


@register("cross_entropy_grad2", ("Label", "MatchX", "XShape", "Y" + GRAD), ("X" + GRAD,),
          _CE2_ATTRS)
def cross_entropy_grad2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = −dY / MatchX at the label, 0 elsewhere (and on ignored rows)."""
    label, match, xshape = ins["Label"][0], ins["MatchX"][0], ins["XShape"][0]
    xp = array_module(match)
    shape = tuple(xshape.shape[1:])
    c = shape[-1]
    dy = ins["Y" + GRAD][0]
    dx = xp.zeros((int(np.prod(shape[:-1], dtype=np.int64)), c), dtype=match.dtype)
    if dy is None:
        return {"X" + GRAD: [dx.reshape(shape)]}
    lab = _hard_labels(label)
    valid = _check_labels("cross_entropy_grad2", lab, c, attrs.get("ignore_index", -100))
    safe = lab if valid is None else xp.where(valid, lab, 0)
    m = match.reshape(-1, 1)
    if valid is not None:
        m = xp.where(valid[:, None], m, xp.ones_like(m))
    picked = -dy.reshape(-1, 1) / m
    if valid is not None:
        picked *= valid[:, None]
    dx[xp.arange(len(safe)), safe] = picked[:, 0]
    return {"X" + GRAD: [dx.reshape(shape)]}


# ---------------------------------------------------------------------------------------------
# softmax_with_cross_entropy (fused; Logits are unnormalised scores)

_SWCE_ATTRS = {"soft_label": False, "ignore_index": -100, "axis": -1,
               "numeric_stable_mode": True}


def _swce_grad_maker(op: Any) -> list[dict]:
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": "softmax_with_cross_entropy_grad",
             "inputs": {"Label": list(op.inputs["Label"]),
                        "Softmax": list(op.outputs["Softmax"]),
                        "Loss" + GRAD: [n + GRAD for n in op.outputs["Loss"]]},
             "outputs": {"Logits" + GRAD: [n + GRAD for n in op.inputs["Logits"]]},
             "attrs": attrs}]


@register("softmax_with_cross_entropy", ("Logits", "Label"), ("Softmax", "Loss"), _SWCE_ATTRS,
          grad=_swce_grad_maker)
def softmax_with_cross_entropy(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Softmax = softmax(Logits); Loss = −log Softmax[label], computed as log Σexp − shifted
    logit so that large logits neither overflow nor lose the loss to rounding."""
    axis = attrs.get("axis", -1)
    logits = _to_last(ins["Logits"][0], axis)
    label = _to_last(ins["Label"][0], axis)
    xp = array_module(logits)
    c = logits.shape[-1]
    x2 = logits.reshape(-1, c)
    shifted = x2 - x2.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    e /= s
    log_s = xp.log(s)
    if attrs.get("soft_label", False):
        loss = -(label.reshape(-1, c) * (shifted - log_s)).sum(axis=1, keepdims=True)
    else:
        lab = _hard_labels(label)
        valid = _check_labels("softmax_with_cross_entropy", lab, c,
                              attrs.get("ignore_index", -100))
        safe = lab if valid is None else xp.where(valid, lab, 0)
        loss = log_s - xp.take_along_axis(shifted, safe[:, None], axis=1)
        if valid is not None:
            loss *= valid[:, None]
    lead = logits.shape[:-1]
    return {"Softmax": [_from_last(e.reshape(logits.shape), axis)],
            "Loss": [_from_last(loss.reshape(lead + (1,)), axis)]}


@register("softmax_with_cross_entropy_grad", ("Label", "Softmax", "Loss" + GRAD),
          ("Logits" + GRAD,), _SWCE_ATTRS)
def softmax_with_cross_entropy_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dLogits = (Softmax − onehot(label)) · dLoss (rows with ignore_index get 0)."""
    axis = attrs.get("axis", -1)
    sm = _to_last(ins["Softmax"][0], axis)
    label = _to_last(ins["Label"][0], axis)
    xp = array_module(sm)
    c = sm.shape[-1]
    dloss = ins["Loss" + GRAD][0]
    if dloss is None:
        return {"Logits" + GRAD: [_from_last(xp.zeros_like(sm), axis)]}
    dloss = _to_last(dloss, axis).reshape(-1, 1)
    s2 = sm.reshape(-1, c)
    if attrs.get("soft_label", False):
        g = (s2 - label.reshape(-1, c)) * dloss
    else:
        lab = _hard_labels(label)
        valid = _check_labels("softmax_with_cross_entropy_grad", lab, c,
                              attrs.get("ignore_index", -100))
        safe = lab if valid is None else xp.where(valid, lab, 0)
        g = s2.copy()
        g[xp.arange(len(safe)), safe] -= 1
        g *= dloss
        if valid is not None:
            g *= valid[:, None]
    return {"Logits" + GRAD: [_from_last(g.reshape(sm.shape), axis)]}


# ---------------------------------------------------------------------------------------------
# top_k, accuracy


def _argsort_desc(x: Any) -> Any:
    xp = array_module(x)
    if xp is np:
        # stable: among equal values the lower index comes first, like Fluid's top_k
        return np.argsort(-x, axis=-1, kind="stable")
    return xp.argsort(-x, axis=-1)


def _top_k_grad_maker(op: Any) -> list[dict]:
    """Fluid 1.8's TopkGradMaker: ``top_k_grad`` reads X, Indices and ``Out@GRAD`` and sets no
    attrs (it needs none: k is Indices' last dim, and ``k`` may be stale next to a K input)."""
    descs = grad_maker(("X", "Indices"), ("Out",), ("X",))(op)
    descs[0]["attrs"] = {}
    return descs


@register("top_k", ("X", "K"), ("Out", "Indices"), {"k": 1}, optional=("K",),
          grad=_top_k_grad_maker)
def top_k(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out, Indices = the k largest values of X along the last dim and their int64 indices."""
    x = ins["X"][0]
    k = attrs.get("k", 1)
    if ins.get("K") and ins["K"][0] is not None:
        k = int(ins["K"][0].reshape(-1)[0])
    if not 1 <= k <= x.shape[-1]:
        raise ValueError(f"top_k: k={k} must lie in [1, {x.shape[-1]}] (the last dim of X)")
    xp = array_module(x)
    # argmax keeps the first of equal maxima, as the stable sort does
    idx = x.argmax(axis=-1)[..., None] if k == 1 else _argsort_desc(x)[..., :k]
    return {"Out": [xp.take_along_axis(x, idx, axis=-1)], "Indices": [idx.astype(np.int64)]}


@register("top_k_grad", *grad_slots(("X", "Indices"), ("Out",), ("X",)))
def top_k_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = 0 except ``dX[..., Indices[..., j]] = dOut[..., j]`` along the last axis (Fluid
    1.8's TopkGradKernel assigns: top_k's indices of a row are distinct)."""
    x, idx = ins["X"][0], ins["Indices"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(x)
    if d is None or x.size == 0:
        return {"X" + GRAD: [xp.zeros(x.shape, dtype=x.dtype if d is None else d.dtype)]}
    if idx.shape[:-1] != x.shape[:-1] or d.shape != idx.shape:
        raise ValueError(f"top_k_grad: Indices {list(idx.shape)} and Out@GRAD "
                         f"{list(d.shape)} must be X's shape {list(x.shape)} with the last "
                         "dim k")
    k = idx.shape[-1]
    idx2 = idx.reshape(-1, k)
    dx = xp.zeros((idx2.shape[0], x.shape[-1]), dtype=d.dtype)
    # (row, column) pairs, not flat offsets: an index past its row then fails (numpy)
    # instead of landing in the next row
    dx[xp.arange(idx2.shape[0])[:, None], idx2] = d.reshape(-1, k)
    return {"X" + GRAD: [dx.reshape(x.shape)]}


@register("accuracy", ("Out", "Indices", "Label"), ("Accuracy", "Correct", "Total"))
def accuracy(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Accuracy = fraction of rows whose label is among the top-k Indices (float32 [1]);
    Correct and Total are int32 [1] counts."""
    idx, label = ins["Indices"][0], ins["Label"][0]
    xp = array_module(idx)
    n = idx.shape[0]
    hit = (idx.reshape(n, -1) == label.reshape(n, 1)).any(axis=1)
    correct = hit.sum().reshape(1)
    return {"Accuracy": [(correct.astype(np.float32) / np.float32(max(n, 1))).reshape(1)],
            "Correct": [correct.astype(np.int32)],
            "Total": [xp.full((1,), n, dtype=np.int32)]}


# ---------------------------------------------------------------------------------------------
# dropout

_DROPOUT_ATTRS = {"dropout_prob": 0.5, "is_test": False, "seed": 0, "fix_seed": False,
                  "dropout_implementation": "downgrade_in_infer"}
_dropout_maker, _dropout_grad_register = _register_grad("dropout", ("Mask",),
                                                        attrs=_DROPOUT_ATTRS)


def _dropout_seed(ins: dict) -> int | None:
    """The seed of the optional ``Seed`` input (Fluid 1.8 reads it as ``data<int>``: an
    int32 tensor, its first value), None when unbound."""
    seed = (ins.get("Seed") or [None])[0]
    if seed is None:
        return None
    values = int_tensor_values(seed, "Seed", "dropout", ("int32",))
    if not values:
        raise ValueError("dropout: Seed is empty; it must hold the seed (shape [1])")
    # Fluid seeds an engine with it as an unsigned value; numpy refuses negative seeds
    return values[0] % 2**32


@register("dropout", ("X", "Seed"), ("Out", "Mask"), _DROPOUT_ATTRS, optional=("Seed",),
          grad=_dropout_maker)
def dropout(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X · Mask (Mask 0/1, ``upscale_in_train`` also divides by 1 − p); at test time
    ``downgrade_in_infer`` scales by 1 − p and ``upscale_in_train`` passes X through.

    The mask comes from ``numpy.random.default_rng(s)`` where ``s`` is the ``Seed`` input when
    bound (it comes before ``fix_seed`` and ``seed``, as in Fluid 1.8), else the ``seed`` attr
    when ``fix_seed`` is set; otherwise from ``attrs["_rng"]`` (a numpy Generator injected by
    the executor) or, absent that, the ``seed`` attr. It is drawn on the host so numpy and cupy
    runs drop the same units.
    """
    x = ins["X"][0]
    xp = array_module(x)
    p = float(attrs.get("dropout_prob", 0.5))
    upscale = attrs.get("dropout_implementation", "downgrade_in_infer") == "upscale_in_train"
    if attrs.get("is_test", False):
        out = x.copy() if upscale else x * x.dtype.type(1.0 - p)
        res = {"Out": [out]}
        if "Mask" in outs:
            res["Mask"] = [xp.ones_like(x)]
        return res
    seed = _dropout_seed(ins)
    rng = attrs.get("_rng")
    if seed is not None:
        rng = np.random.default_rng(seed)
    elif rng is None or attrs.get("fix_seed", False):
        rng = np.random.default_rng(attrs.get("seed", 0))
    mask = (rng.random(x.shape) >= p).astype(x.dtype)
    if xp is not np:
        mask = xp.asarray(mask)
    out = x * mask
    if upscale:
        out *= x.dtype.type(1.0 / (1.0 - p)) if p < 1.0 else x.dtype.type(0.0)
    return {"Out": [out], "Mask": [mask]}


@_dropout_grad_register
def dropout_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut · Mask (divided by 1 − p for ``upscale_in_train``); at test time the
    derivative of the forward's scaling: 1 − p (``downgrade_in_infer``) or 1.

    (Fluid refuses this grad op at test time; it runs here when a test program is
    differentiated, e.g. a ``@declarative`` layer in eval mode.)"""
    mask = ins["Mask"][0]
    d = ins["Out" + GRAD][0]
    if d is None:
        return {"X" + GRAD: [array_module(mask).zeros_like(mask)]}
    p = float(attrs.get("dropout_prob", 0.5))
    upscale = attrs.get("dropout_implementation", "downgrade_in_infer") == "upscale_in_train"
    if attrs.get("is_test", False):
        return {"X" + GRAD: [d.copy() if upscale else d * d.dtype.type(1.0 - p)]}
    g = d * mask
    if upscale:
        g *= g.dtype.type(1.0 / (1.0 - p)) if p < 1.0 else g.dtype.type(0.0)
    return {"X" + GRAD: [g]}


# ---------------------------------------------------------------------------------------------
# lookup_table (embedding)

_LOOKUP_ATTRS = {"is_sparse": False, "is_distributed": False, "padding_idx": -1,
                 "remote_prefetch": False}
_lookup_maker, _lookup_grad_register = _register_grad(
    "lookup_table", ("W", "Ids"), in_grads=("W",), attrs=_LOOKUP_ATTRS,
    sparse_outputs=("W" + GRAD,))


def flat_ids(op: str, ids: Any, height: int) -> Any:
    flat = ids.reshape(-1)
    if flat.dtype.kind not in "iu":
        raise TypeError(f"{op}: Ids must hold integer ids, got {flat.dtype}; declare the data "
                        "layer with dtype='int64'")
    if flat.dtype != np.int64:
        flat = flat.astype(np.int64)
    if flat.size and (bool((flat < 0).any()) or bool((flat >= height).any())):
        bad = flat[(flat < 0) | (flat >= height)]
        raise ValueError(f"{op}: id {int(bad[0])} is out of range: ids must lie in "
                         f"[0, {height}) (the rows of W)")
    return flat


def out_lead_shape(ids: Any) -> tuple:
    return tuple(ids.shape[:-1]) if ids.ndim > 1 and ids.shape[-1] == 1 else tuple(ids.shape)


@register("lookup_table", ("W", "Ids"), ("Out",), _LOOKUP_ATTRS, grad=_lookup_maker,
          table_slot="W")
def lookup_table(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] = W[Ids[i]]; Ids ``[N, 1]`` give Out ``[N, D]``; padding_idx rows are zero."""
    return _look_up("lookup_table", ins, attrs, out_lead_shape(ins["Ids"][0]))


def _look_up(op: str, ins: dict, attrs: dict, lead_shape: tuple) -> dict:
    """The rows of W at Ids (zeros at padding_idx), shaped ``lead_shape + [D]``."""
    w, ids = ins["W"][0], ins["Ids"][0]
    flat = flat_ids(op, ids, w.shape[0])
    out = table_rows(ins, attrs, "W", flat)
    pad = attrs.get("padding_idx", -1)
    if pad != -1:
        out[flat == pad] = 0
    return {"Out": [out.reshape(lead_shape + tuple(w.shape[1:]))]}


# a sparse table the transpiler left on the pservers: its lookups ask them for the rows
set_remote_provider("lookup_table", PSERVER_OPS)


@_lookup_grad_register
def lookup_table_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """W@GRAD = dOut rows at Ids: a SelectedRows (one row per id, duplicates kept) when
    ``is_sparse``, else a dense scatter-add; padding_idx rows get no gradient."""
    w, ids = ins["W"][0], ins["Ids"][0]
    xp = array_module(w)
    flat = flat_ids("lookup_table_grad", ids, w.shape[0])
    d = ins["Out" + GRAD][0]
    row_shape = tuple(w.shape[1:])
    d = (xp.zeros((flat.size,) + row_shape, w.dtype) if d is None
         else d.reshape((flat.size,) + row_shape))
    pad = attrs.get("padding_idx", -1)
    if pad != -1:
        d = d.copy()
        d[flat == pad] = 0
    if attrs.get("is_sparse", False):
        return {"W" + GRAD: [SelectedRows(flat.copy(), d, w.shape[0])]}
    g = xp.zeros(w.shape, dtype=w.dtype)
    scatter_add(xp, g, flat, d)
    return {"W" + GRAD: [g]}



# lookup_table_v2 (``fluid.embedding``, Fluid 1.8's input.py): Ids of any shape, Out is
# ``Ids.shape + [D]`` (no trailing 1 to drop). Fluid 1.8's transpiler leaves it out of its
# remote-prefetch ops (``lookup_table``, ``nce``, ``hierarchical_sigmoid``), so no table_slot:
# a pserver job receives its table whole and pushes its sparse gradient.
_lookup_v2_maker, _lookup_v2_grad_register = _register_grad(
    "lookup_table_v2", ("W", "Ids"), in_grads=("W",), attrs=_LOOKUP_ATTRS,
    sparse_outputs=("W" + GRAD,))


@register("lookup_table_v2", ("W", "Ids"), ("Out",), _LOOKUP_ATTRS, grad=_lookup_v2_maker)
def lookup_table_v2(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[..., :] = W[Ids[...]]: Ids ``[d0, ..., dk]`` give Out ``[d0, ..., dk, D]``;
    padding_idx rows are zero."""
    return _look_up("lookup_table_v2", ins, attrs, tuple(ins["Ids"][0].shape))


@_lookup_v2_grad_register
def lookup_table_v2_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """As ``lookup_table_grad``: dOut ``Ids.shape + [D]`` holds one row per id."""
    return lookup_table_grad(ins, attrs, outs)

# ---------------------------------------------------------------------------------------------
# sigmoid_cross_entropy_with_logits (Paddle 1.8's op): per element, stable in x


_SCE_ATTRS = {"ignore_index": -100, "normalize": False}


def _sce_mask(label: Any, attrs: dict) -> tuple[Any, Any]:
    keep = label != label.dtype.type(attrs.get("ignore_index", -100))
    count = keep.sum() if attrs.get("normalize") else None
    return keep, count


@register("sigmoid_cross_entropy_with_logits", ("X", "Label"), ("Out",), _SCE_ATTRS,
          grad=grad_maker(("X", "Label"), in_grads=("X",)))
def sigmoid_cross_entropy_with_logits(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = max(x, 0) − x·label + log(1 + exp(−|x|)); 0 where label == ignore_index;
    divided by the number of kept elements with ``normalize``."""
    x, label = ins["X"][0], ins["Label"][0]
    xp = array_module(x)
    if x.shape != label.shape:
        raise ValueError(f"sigmoid_cross_entropy_with_logits: X {list(x.shape)} and Label "
                         f"{list(label.shape)} must have the same shape")
    keep, count = _sce_mask(label, attrs)
    out = xp.maximum(x, 0) - x * label + xp.log1p(xp.exp(-xp.abs(x)))
    out = xp.where(keep, out, x.dtype.type(0))
    if count is not None:
        out = out / xp.maximum(count, 1).astype(x.dtype)
    return {"Out": [out.astype(x.dtype, copy=False)]}


@register("sigmoid_cross_entropy_with_logits_grad",
          *grad_slots(("X", "Label"), ("Out",), ("X",)), _SCE_ATTRS)
def sigmoid_cross_entropy_with_logits_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut · (sigmoid(x) − label), masked (and normalised) as the forward."""
    x, label = ins["X"][0], ins["Label"][0]
    xp = array_module(x)
    d = ins["Out" + GRAD][0]
    d = xp.zeros_like(x) if d is None else d
    keep, count = _sce_mask(label, attrs)
    half = x.dtype.type(0.5)
    dx = xp.where(keep, d * ((half * xp.tanh(half * x) + half) - label), x.dtype.type(0))
    if count is not None:
        dx = dx / xp.maximum(count, 1).astype(x.dtype)
    return {"X" + GRAD: [dx.astype(x.dtype, copy=False)]}


# -- log_loss, huber_loss, prelu -----------------------------------------------------------------

@register("log_loss", ("Predicted", "Labels"), ("Loss",), {"epsilon": 1e-4},
          grad=grad_maker(("Predicted", "Labels"), ("Loss",), ("Predicted",)))
def log_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Loss = -Labels log(Predicted + eps) - (1 - Labels) log(1 - Predicted + eps)."""
    p, y = ins["Predicted"][0], ins["Labels"][0]
    xp, eps = array_module(p), p.dtype.type(attrs.get("epsilon", 1e-4))
    return {"Loss": [-y * xp.log(p + eps) - (1 - y) * xp.log(1 - p + eps)]}


@register("log_loss_grad", *grad_slots(("Predicted", "Labels"), ("Loss",), ("Predicted",)),
          {"epsilon": 1e-4})
def log_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dPredicted = dLoss (-Labels / (Predicted + eps) + (1 - Labels) / (1 - Predicted + eps))."""
    p, y, d = ins["Predicted"][0], ins["Labels"][0], ins["Loss" + GRAD][0]
    eps = p.dtype.type(attrs.get("epsilon", 1e-4))
    d = array_module(p).zeros_like(p) if d is None else d
    return {"Predicted" + GRAD: [d * (-y / (p + eps) + (1 - y) / (1 - p + eps))]}


@register("huber_loss", ("X", "Y"), ("Out", "Residual"), {"delta": 1.0},
          grad=grad_maker(("Residual",), ("Out",), ("X", "Y")))
def huber_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Residual = Y - X; Out = r^2 / 2 where |r| <= delta, else delta (|r| - delta / 2)."""
    x, y = ins["X"][0], ins["Y"][0]
    xp, delta = array_module(x), x.dtype.type(attrs.get("delta", 1.0))
    r = y - x
    a = xp.abs(r)
    return {"Out": [xp.where(a <= delta, r * r / 2, delta * (a - delta / 2))],
            "Residual": [r]}


@register("huber_loss_grad", *grad_slots(("Residual",), ("Out",), ("X", "Y")), {"delta": 1.0})
def huber_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dY = dOut (r where |r| <= delta, else delta sign(r)); dX = -dY."""
    r, d = ins["Residual"][0], ins["Out" + GRAD][0]
    xp, delta = array_module(r), r.dtype.type(attrs.get("delta", 1.0))
    g = xp.where(xp.abs(r) <= delta, r, delta * xp.sign(r))
    g = g * (xp.zeros_like(r) if d is None else d)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [-g]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [g]
    return res


def _prelu_alpha(x: Any, alpha: Any, mode: str) -> Any:
    """Alpha shaped to broadcast over X: one value, one per channel (dim 1), or one per
    element of a sample."""
    if mode == "all":
        return alpha.reshape(())
    if mode == "channel":
        return alpha.reshape((1, -1) + (1,) * (x.ndim - 2))
    if mode == "element":
        return alpha.reshape((1,) + tuple(x.shape[1:]))
    raise ValueError(f"prelu: mode must be 'all', 'channel' or 'element', got {mode!r}")


@register("prelu", ("X", "Alpha"), ("Out",), {"mode": "all"},
          grad=grad_maker(("X", "Alpha"), ("Out",), ("X", "Alpha")))
def prelu(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = X where X > 0, else Alpha X."""
    x, alpha = ins["X"][0], ins["Alpha"][0]
    a = _prelu_alpha(x, alpha, attrs.get("mode", "all"))
    return {"Out": [array_module(x).where(x > 0, x, a * x)]}


@register("prelu_grad", *grad_slots(("X", "Alpha"), ("Out",), ("X", "Alpha")), {"mode": "all"})
def prelu_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut where X > 0, else Alpha dOut; dAlpha = the sum of dOut X where X <= 0."""
    x, alpha, d = ins["X"][0], ins["Alpha"][0], ins["Out" + GRAD][0]
    xp = array_module(x)
    d = xp.zeros_like(x) if d is None else d
    mode = attrs.get("mode", "all")
    a = _prelu_alpha(x, alpha, mode)
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [xp.where(x > 0, d, a * d)]
    if "Alpha" + GRAD in outs:
        contrib = xp.where(x > 0, 0, d * x)
        if mode == "all":
            da = contrib.sum()
        elif mode == "channel":
            da = contrib.sum(axis=tuple(i for i in range(x.ndim) if i != 1))
        else:
            da = contrib.sum(axis=0)
        res["Alpha" + GRAD] = [xp.asarray(da, dtype=alpha.dtype).reshape(alpha.shape)]
    return res


# -- kldiv_loss ----------------------------------------------------------------------------------

_KLDIV = ("none", "batchmean", "mean", "sum")


def _kldiv_scale(x: Any, reduction: str) -> float:
    if reduction not in _KLDIV:
        raise ValueError(f"kldiv_loss: reduction must be one of {list(_KLDIV)}, got "
                         f"{reduction!r}")
    return {"mean": 1.0 / max(x.size, 1), "batchmean": 1.0 / max(x.shape[0], 1)}.get(reduction,
                                                                                   1.0)


@register("kldiv_loss", ("X", "Target"), ("Loss",), {"reduction": "mean"},
          grad=grad_maker(("X", "Target"), ("Loss",), ("X",)))
def kldiv_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Loss = Target (log Target - X) where Target > 0, else 0; reduced by ``reduction``
    (``none``, ``batchmean``: the sum over the batch size, ``mean``, ``sum``)."""
    x, t = ins["X"][0], ins["Target"][0]
    xp = array_module(x)
    reduction = attrs.get("reduction", "mean")
    scale = _kldiv_scale(x, reduction)
    pointwise = xp.where(t > 0, t * (xp.log(xp.where(t > 0, t, 1)) - x), 0).astype(x.dtype)
    if reduction == "none":
        return {"Loss": [pointwise]}
    return {"Loss": [xp.asarray(pointwise.sum() * scale, dtype=x.dtype).reshape(1)]}


@register("kldiv_loss_grad", *grad_slots(("X", "Target"), ("Loss",), ("X",)),
          {"reduction": "mean"})
def kldiv_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = -Target dLoss where Target > 0, else 0 (scaled as the reduction)."""
    x, t, d = ins["X"][0], ins["Target"][0], ins["Loss" + GRAD][0]
    xp = array_module(x)
    reduction = attrs.get("reduction", "mean")
    scale = _kldiv_scale(x, reduction)
    d = xp.zeros(x.shape if reduction == "none" else (1,), x.dtype) if d is None else d
    if reduction != "none":
        d = d.reshape(()) * x.dtype.type(scale)
    return {"X" + GRAD: [xp.where(t > 0, -t * d, 0).astype(x.dtype)]}


# -- smooth_l1_loss ------------------------------------------------------------------------------

@register("smooth_l1_loss", ("X", "Y", "InsideWeight", "OutsideWeight"), ("Diff", "Out"),
          {"sigma": 1.0}, optional=("InsideWeight", "OutsideWeight"),
          grad=grad_maker(("InsideWeight", "OutsideWeight", "Diff"), ("Out",), ("X", "Y")))
def smooth_l1_loss(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Diff = (X - Y) InsideWeight; per element 0.5 (sigma d)^2 where |d| < 1 / sigma^2, else
    |d| - 0.5 / sigma^2, times OutsideWeight; Out = its sum over all but the first dim
    (``[N, 1]``)."""
    x, y = ins["X"][0], ins["Y"][0]
    xp = array_module(x)
    inside = (ins.get("InsideWeight") or [None])[0]
    outside = (ins.get("OutsideWeight") or [None])[0]
    s2 = x.dtype.type(float(attrs.get("sigma", 1.0)) ** 2)
    diff = x - y if inside is None else (x - y) * inside
    a = xp.abs(diff)
    loss = xp.where(a < 1 / s2, 0.5 * s2 * diff * diff, a - 0.5 / s2)
    if outside is not None:
        loss = loss * outside
    return {"Diff": [diff], "Out": [loss.reshape(x.shape[0], -1).sum(axis=1, keepdims=True)]}


@register("smooth_l1_loss_grad",
          *grad_slots(("InsideWeight", "OutsideWeight", "Diff"), ("Out",), ("X", "Y")),
          {"sigma": 1.0}, optional=("InsideWeight", "OutsideWeight"))
def smooth_l1_loss_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut OutsideWeight InsideWeight (sigma^2 d where |d| < 1 / sigma^2, else
    sign(d)); dY = -dX."""
    diff, d = ins["Diff"][0], ins["Out" + GRAD][0]
    xp = array_module(diff)
    inside = (ins.get("InsideWeight") or [None])[0]
    outside = (ins.get("OutsideWeight") or [None])[0]
    s2 = diff.dtype.type(float(attrs.get("sigma", 1.0)) ** 2)
    g = xp.where(xp.abs(diff) < 1 / s2, s2 * diff, xp.sign(diff))
    d = xp.zeros((diff.shape[0], 1), diff.dtype) if d is None else d
    g = g * d.reshape((diff.shape[0],) + (1,) * (diff.ndim - 1))
    if outside is not None:
        g = g * outside
    if inside is not None:
        g = g * inside
    res = {}
    if "X" + GRAD in outs:
        res["X" + GRAD] = [g]
    if "Y" + GRAD in outs:
        res["Y" + GRAD] = [-g]
    return res


# -- bilinear_tensor_product, add_position_encoding ----------------------------------------------

from .registry import LOD_KEY  # noqa: E402  (appended section; the kernels above do not use it)


def _btp_check(x: Any, y: Any, w: Any, bias: Any) -> None:
    """Paddle's BilinearTensorProductOp::InferShape."""
    if x.ndim != 2 or y.ndim != 2 or w.ndim != 3:
        raise ValueError(f"bilinear_tensor_product: X and Y must be 2-D and Weight 3-D, got "
                         f"{list(x.shape)}, {list(y.shape)} and {list(w.shape)}")
    if x.shape[0] != y.shape[0] or x.shape[1] != w.shape[1] or y.shape[1] != w.shape[2]:
        raise ValueError(f"bilinear_tensor_product: X [N, M], Y [N, P] and Weight [size, M, P] "
                         f"do not match: {list(x.shape)}, {list(y.shape)}, {list(w.shape)}")
    if bias is not None and tuple(bias.shape) != (1, w.shape[0]):
        raise ValueError(f"bilinear_tensor_product: Bias must be [1, {w.shape[0]}], got "
                         f"{list(bias.shape)}")


@register("bilinear_tensor_product", ("X", "Y", "Weight", "Bias"), ("Out",), optional=("Bias",),
          grad=grad_maker(("X", "Y", "Weight"), ("Out",), ("X", "Y", "Weight", "Bias")))
def bilinear_tensor_product(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[n, i] = X[n] · Weight[i] · Y[n]ᵀ + Bias[0, i]."""
    x, y, w = ins["X"][0], ins["Y"][0], ins["Weight"][0]
    bias = (ins.get("Bias") or [None])[0]
    _btp_check(x, y, w, bias)
    xp = array_module(x)
    xw = xp.tensordot(x, w, axes=([1], [1]))  # [N, size, P]: X Weight_i per output column
    out = (xw * y[:, None, :]).sum(axis=2)
    if bias is not None:
        out = out + bias
    return {"Out": [out.astype(x.dtype, copy=False)]}


@register("bilinear_tensor_product_grad",
          *grad_slots(("X", "Y", "Weight"), ("Out",), ("X", "Y", "Weight", "Bias")))
def bilinear_tensor_product_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX[n] = Σ_i dOut[n, i] Weight[i] Y[n], dY[n] = Σ_i dOut[n, i] X[n] Weight[i],
    dWeight[i] = Σ_n dOut[n, i] X[n]ᵀ Y[n], dBias = Σ_n dOut[n] (``[1, size]``)."""
    x, y, w = ins["X"][0], ins["Y"][0], ins["Weight"][0]
    xp = array_module(x)
    d = ins["Out" + GRAD][0]
    d = xp.zeros((x.shape[0], w.shape[0]), x.dtype) if d is None else d
    res = {}
    if "X" + GRAD in outs:
        wy = xp.tensordot(y, w, axes=([1], [2]))  # [N, size, M]
        res["X" + GRAD] = [(d[:, :, None] * wy).sum(axis=1)]
    if "Y" + GRAD in outs:
        xw = xp.tensordot(x, w, axes=([1], [1]))  # [N, size, P]
        res["Y" + GRAD] = [(d[:, :, None] * xw).sum(axis=1)]
    if "Weight" + GRAD in outs:
        dx = d[:, :, None] * x[:, None, :]  # [N, size, M]
        res["Weight" + GRAD] = [xp.tensordot(dx, y, axes=([0], [0]))]
    if "Bias" + GRAD in outs:
        res["Bias" + GRAD] = [d.sum(axis=0, keepdims=True)]
    return res


_APE_ATTRS = {"alpha": 1.0, "beta": 1.0}


def _ape_positions(x: Any, attrs: dict) -> tuple[np.ndarray, tuple | None]:
    """Each row's position in its sequence (host int64, one per row of the ``[rows, D]`` view)
    and the LoD to give Out: a dense ``[B, T, D]`` input counts positions along T, a 2-D
    input with a 1-level LoD restarts them at every sequence (Paddle's kernel)."""
    lod = ((attrs.get("_lods") or {}).get("X") or [None])[0]
    for name in ("alpha", "beta"):
        if float(attrs.get(name, 1.0)) < 0:
            raise ValueError(f"add_position_encoding: {name} must be >= 0, got "
                             f"{attrs.get(name)}")
    if not lod:
        if x.ndim != 3:
            raise ValueError(f"add_position_encoding: a dense X must be 3-D [batch, seq_len, "
                             f"hidden], got shape {list(x.shape)}")
        positions = np.tile(np.arange(x.shape[1], dtype=np.int64), x.shape[0])
    else:
        if x.ndim != 2:
            raise ValueError(f"add_position_encoding: a LoD X must be 2-D [rows, hidden], got "
                             f"shape {list(x.shape)}")
        if len(lod) != 1:
            raise ValueError(f"add_position_encoding supports lod_level 1 only, got a "
                             f"{len(lod)}-level LoD")
        offsets = np.asarray(lod[0], dtype=np.int64)
        lengths = np.diff(offsets)
        positions = np.arange(x.shape[0], dtype=np.int64) - np.repeat(offsets[:-1], lengths)
    if x.shape[-1] % 2:
        raise ValueError(f"add_position_encoding: the hidden size must be even, got "
                         f"{x.shape[-1]}")
    return positions, lod or None


@register("add_position_encoding", ("X",), ("Out",), _APE_ATTRS, lod="kernel",
          grad=grad_maker(("X",), ("Out",), ("X",)))
def add_position_encoding(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out = alpha · X + beta · PE with, for position j and k < D / 2 (h = D / 2),
    v = j / 10000^(k / (h − 1)) (j / 10000 when h = 1): PE[..., k] = sin(v),
    PE[..., h + k] = cos(v). Positions run along dim 1 of a dense ``[B, T, D]`` X, or restart
    at each sequence of a 2-D X with a 1-level LoD."""
    x = ins["X"][0]
    xp = array_module(x)
    positions, lod = _ape_positions(x, attrs)
    half = x.shape[-1] // 2
    k = np.arange(half, dtype=np.float64)
    denom = np.power(10000.0, k / (half - 1)) if half > 1 else np.full(half, 10000.0)
    val = positions[:, None].astype(np.float64) / denom[None, :]
    pe = np.concatenate([np.sin(val), np.cos(val)], axis=1) * float(attrs.get("beta", 1.0))
    flat = x.reshape(-1, x.shape[-1])
    out = flat * x.dtype.type(attrs.get("alpha", 1.0)) + xp.asarray(pe.astype(x.dtype))
    return {"Out": [out.reshape(x.shape)], LOD_KEY: {"Out": [lod]}}


@register("add_position_encoding_grad", *grad_slots(("X",), ("Out",), ("X",)), _APE_ATTRS)
def add_position_encoding_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = alpha · dOut."""
    x = ins["X"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(x)
    d = xp.zeros_like(x) if d is None else d
    return {"X" + GRAD: [d * x.dtype.type(attrs.get("alpha", 1.0))]}


# -- sample_logits (Paddle 1.8's sample_logits_op.h, math/sample_prob.h, math/sampler.cc) ---------

from .registry import to_host  # noqa: E402  (appended section)

_SL_ATTRS = {"num_samples": 1, "use_customized_samples": False, "uniq": True,
             "remove_accidental_hits": True, "seed": 0}


def _log_uniform_samples(labels: np.ndarray, num_classes: int, num_samples: int,
                         rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Paddle's SampleWithProb with a LogUniformSampler over ``[0, num_classes)``: the true
    labels first, then ``num_samples`` distinct classes drawn as ⌊exp(r·log(C + 1))⌋ − 1
    (mod C), the same for every row; each column's probability
    log((k + 2) / (k + 1)) / log(C + 1) adjusted for the unique draws."""
    batch, num_true = labels.shape
    log_range = np.log(num_classes + 1.0)
    drawn: list[int] = []
    seen: set[int] = set()
    tries = 0
    while len(drawn) < num_samples:
        chunk = rng.random(max(num_samples - len(drawn), 8))
        for r in chunk:
            tries += 1
            v = (int(np.exp(r * log_range)) - 1) % num_classes
            if v not in seen:
                seen.add(v)
                drawn.append(v)
                if len(drawn) == num_samples:
                    break
    samples = np.concatenate([labels.astype(np.int64),
                              np.tile(np.asarray(drawn, np.int64), (batch, 1))], axis=1)
    p = np.log((samples + 2.0) / (samples + 1.0)) / log_range
    if tries == num_samples:
        p = p * num_samples
    else:
        p = -np.expm1(tries * np.log1p(-p))
    return samples, p


def _tolerable(xp: Any, a: Any) -> Any:
    """Paddle's TolerableValue: ±inf becomes ±1e20."""
    big = a.dtype.type(1e20)
    return xp.where(xp.isposinf(a), big, xp.where(xp.isneginf(a), -big, a))


@register("sample_logits",
          ("Logits", "Labels", "CustomizedSamples", "CustomizedProbabilities"),
          ("Samples", "Probabilities", "SampledLogits", "SampledLabels", "LogitsDim",
           "LabelsDim"), _SL_ATTRS,
          optional=("CustomizedSamples", "CustomizedProbabilities"),
          grad=grad_maker(("Logits", "Samples"), ("SampledLogits",), ("Logits",)))
def sample_logits(ins: dict, attrs: dict, outs: tuple) -> dict:
    """SampledLogits[i, j] = Logits[i, Samples[i, j]] − log Probabilities[i, j] (±inf
    clamped to ±1e20), minus 1e20 where a sampled (j ≥ num_true) class is one of the row's
    true labels when ``remove_accidental_hits``; SampledLabels[i, t] = t.

    Samples come from CustomizedSamples / CustomizedProbabilities with
    ``use_customized_samples``, else from the log-uniform sampler seeded by ``seed``
    (``attrs["_rng"]`` when the executor passes one; seed 0 draws anew each run)."""
    logits, labels = ins["Logits"][0], ins["Labels"][0]
    xp = array_module(logits)
    if logits.ndim != 2 or labels.ndim != 2:
        raise ValueError(f"sample_logits: Logits and Labels must be 2-D, got shapes "
                         f"{list(logits.shape)} and {list(labels.shape)}")
    if labels.shape[0] != logits.shape[0]:
        raise ValueError(f"sample_logits: Logits and Labels must have the same batch size, got "
                         f"{logits.shape[0]} and {labels.shape[0]}")
    num_true = labels.shape[1]
    num_samples = int(attrs.get("num_samples", 1))
    if attrs.get("use_customized_samples"):
        if not ins.get("CustomizedSamples") or not ins.get("CustomizedProbabilities"):
            raise ValueError("sample_logits: use_customized_samples needs CustomizedSamples "
                             "and CustomizedProbabilities")
        samples_dev = ins["CustomizedSamples"][0]
        probs = ins["CustomizedProbabilities"][0]
        samples = to_host(samples_dev).astype(np.int64)
    else:
        if num_samples <= 0:
            raise ValueError(f"sample_logits: num_samples must be > 0, got {num_samples}")
        if num_samples > logits.shape[1]:
            raise ValueError(f"sample_logits: num_samples ({num_samples}) cannot exceed the "
                             f"{logits.shape[1]} classes (the draws are unique)")
        rng = attrs.get("_rng")
        if rng is None:
            seed = int(attrs.get("seed", 0))
            rng = np.random.default_rng(seed if seed else None)
        samples, p = _log_uniform_samples(to_host(labels).astype(np.int64), logits.shape[1],
                                          num_samples, rng)
        samples_dev = xp.asarray(samples)
        probs = xp.asarray(p.astype(logits.dtype))
    if samples.ndim != 2 or samples.shape[0] != logits.shape[0] or samples.shape[1] < num_true:
        raise ValueError(f"sample_logits: Samples must be [{logits.shape[0]}, num_true + "
                         f"num_samples], got {list(samples.shape)}")
    if samples.size and (samples.min() < 0 or samples.max() >= logits.shape[1]):
        raise ValueError(f"sample_logits: samples must lie in [0, {logits.shape[1]}), got "
                         f"values in [{samples.min()}, {samples.max()}]")
    sampled = xp.take_along_axis(logits, xp.asarray(samples), axis=1)
    if attrs.get("remove_accidental_hits", True):
        hits = (samples[:, num_true:, None] == samples[:, None, :num_true]).any(axis=2)
        hit_mask = np.concatenate([np.zeros((samples.shape[0], num_true), bool), hits], 1)
        if hit_mask.any():
            sampled = sampled - xp.asarray(hit_mask.astype(logits.dtype)) \
                * logits.dtype.type(1e20)
    sampled = _tolerable(xp, sampled - _tolerable(xp, xp.log(probs.astype(logits.dtype))))
    sampled_labels = xp.asarray(np.tile(np.arange(num_true, dtype=np.int64),
                                        (logits.shape[0], 1)))
    return {"Samples": [samples_dev], "Probabilities": [probs],
            "SampledLogits": [sampled.astype(logits.dtype, copy=False)],
            "SampledLabels": [sampled_labels],
            "LogitsDim": [xp.zeros((0,) + tuple(logits.shape), logits.dtype)],
            "LabelsDim": [xp.zeros((0,) + tuple(labels.shape), np.int64)]}


@register("sample_logits_grad",
          *grad_slots(("Logits", "Samples"), ("SampledLogits",), ("Logits",)), _SL_ATTRS)
def sample_logits_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dLogits[i, Samples[i, j]] += dSampledLogits[i, j] (repeated samples add up)."""
    logits, samples = ins["Logits"][0], ins["Samples"][0]
    xp = array_module(logits)
    d = ins["SampledLogits" + GRAD][0]
    grad = xp.zeros_like(logits)
    if d is not None:
        s = to_host(samples).astype(np.int64)
        rows = np.repeat(np.arange(s.shape[0]), s.shape[1])
        flat = rows * logits.shape[1] + s.reshape(-1)
        g = grad.reshape(-1)
        scatter_add(xp, g, flat if xp is np else xp.asarray(flat), d.reshape(-1))
    return {"Logits" + GRAD: [grad]}
