"""Metric kernels: ``auc`` (Fluid 1.8's op: bucketed positive/negative counts kept in
persistable state, the area under the ROC curve by trapezoids over the buckets)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .registry import array_module, register, to_host


def _or_empty(v: Any) -> Any:
    """A list attr that may be None or a numpy array (whose truth value is ambiguous)."""
    return [] if v is None else v


_AUC_ATTRS = {"curve": "ROC", "num_thresholds": 2**12 - 1, "slide_steps": 1}


def _buckets(predict: Any, label: Any, num_thresholds: int) -> tuple[np.ndarray, np.ndarray]:
    """This batch's counts per bucket ``int(p * num_thresholds)`` of the positive-class
    probability (the last column), for positive (label > 0) and negative (0) samples."""
    p = to_host(predict).astype(np.float64, copy=False)
    lab = to_host(label).reshape(-1)
    p = p.reshape(p.shape[0], -1)[:, -1]
    if p.size and (p.min() < 0 or p.max() > 1):
        bad = p[(p < 0) | (p > 1)][0]
        raise ValueError(f"auc: predictions must be probabilities in [0, 1], got {bad}")
    if lab.size != p.size:
        raise ValueError(f"auc: {p.size} predictions but {lab.size} labels")
    idx = (p * num_thresholds).astype(np.uint32).astype(np.int64)
    length = num_thresholds + 1
    pos = np.bincount(idx[lab > 0], minlength=length)[:length]
    neg = np.bincount(idx[lab == 0], minlength=length)[:length]
    return pos.astype(np.int64), neg.astype(np.int64)


def _area(pos: np.ndarray, neg: np.ndarray) -> float:
    """Trapezoids from the highest bucket down (Paddle's calcAuc), over tot_pos * tot_neg."""
    tot_pos = np.cumsum(pos[::-1], dtype=np.float64)
    tot_neg = np.cumsum(neg[::-1], dtype=np.float64)
    prev_pos = np.concatenate([[0.0], tot_pos[:-1]])
    prev_neg = np.concatenate([[0.0], tot_neg[:-1]])
    area = float(np.sum(np.abs(tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0))
    if tot_pos[-1] > 0 and tot_neg[-1] > 0:
        area = area / tot_pos[-1] / tot_neg[-1]
    return area


@register("auc", ("Predict", "Label", "StatPos", "StatNeg"), ("AUC", "StatPosOut", "StatNegOut"),
          _AUC_ATTRS)
def auc(ins: dict, attrs: dict, outs: tuple) -> dict:
    """AUC of the counts so far. ``slide_steps == 0``: StatPos/StatNeg ``[1, T + 1]``
    accumulate every batch. ``slide_steps = s > 0``: ``(1 + s) (T + 1) + 1`` entries, ``s``
    buckets of recent batches (the batch counter in the last entry picks the one to replace),
    then their sum, from which the AUC of the last ``s`` batches is computed."""
    if str(attrs.get("curve", "ROC")).upper() != "ROC":
        raise NotImplementedError(f"auc: curve={attrs.get('curve')!r} is not implemented in "
                                  "dask_fluid (only 'ROC', Fluid's default)")
    predict, label = ins["Predict"][0], ins["Label"][0]
    xp = array_module(ins["StatPos"][0])
    t = int(attrs.get("num_thresholds", 2**12 - 1))
    steps = int(attrs.get("slide_steps", 1))
    length = t + 1
    stat_pos = np.array(to_host(ins["StatPos"][0]), dtype=np.int64).reshape(-1)
    stat_neg = np.array(to_host(ins["StatNeg"][0]), dtype=np.int64).reshape(-1)
    want = (1 + steps) * length + (1 if steps > 0 else 0)
    if stat_pos.size != want or stat_neg.size != want:
        raise ValueError(f"auc: StatPos/StatNeg must hold {want} counts for num_thresholds={t}"
                         f" and slide_steps={steps}, got {stat_pos.size}/{stat_neg.size}")
    pos, neg = _buckets(predict, label, t)
    if steps == 0:
        stat_pos += pos
        stat_neg += neg
        total_pos, total_neg = stat_pos, stat_neg
    else:
        cur = (int(stat_pos[(steps + 1) * length]) % steps) * length
        total = steps * length
        for stat, new in ((stat_pos, pos), (stat_neg, neg)):
            stat[total:total + length] -= stat[cur:cur + length]
            stat[cur:cur + length] = new
            stat[total:total + length] += new
            stat[(steps + 1) * length] += 1
        total_pos, total_neg = (stat_pos[total:total + length], stat_neg[total:total + length])
    value = np.array([_area(total_pos, total_neg)], dtype=np.float64)
    shape = ins["StatPos"][0].shape
    return {"AUC": [xp.asarray(value)], "StatPosOut": [xp.asarray(stat_pos.reshape(shape))],
            "StatNegOut": [xp.asarray(stat_neg.reshape(shape))]}


# ---------------------------------------------------------------------------------------------
# chunk_eval: precision, recall and F1 of the chunks (typed spans) a tagger finds, counted per
# sequence as Fluid 1.8's chunk_eval_op.h does (a port of its GetSegments / ChunkBegin /
# ChunkEnd rules; a tag id is ``chunk_type * num_tag_types + tag``, and the id
# ``num_chunk_types * num_tag_types`` is "outside" (O))

_CHUNK_ATTRS = {"chunk_scheme": "IOB", "excluded_chunk_types": []}
#: scheme -> (num_tag_types, begin, inside, end, single); -1 where the scheme has no such tag
_SCHEMES = {"IOB": (2, 0, 1, -1, -1), "IOE": (2, -1, 0, 1, -1), "IOBES": (4, 0, 1, 2, 3),
            "plain": (1, -1, -1, -1, -1)}
_CHUNK_OUTS = ("Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks",
               "NumCorrectChunks")


def _chunk_end(prev_tag: int, prev_type: int, tag: int, type_: int, other: int,
               tags: tuple) -> bool:
    """Whether the chunk that ``prev`` was in ends before the current position."""
    _, begin, inside, end, single = tags
    if prev_type == other:
        return False
    if type_ == other or type_ != prev_type:
        return True
    if prev_tag in (begin, inside):
        return tag in (begin, single)
    return prev_tag in (end, single)


def _chunk_begin(prev_tag: int, prev_type: int, tag: int, type_: int, other: int,
                 tags: tuple) -> bool:
    """Whether a chunk begins at the current position."""
    _, begin, inside, end, single = tags
    if prev_type == other:
        return type_ != other
    if type_ == other:
        return False
    if type_ != prev_type:
        return True
    if tag == begin:
        return True
    if tag in (inside, end):
        return prev_tag in (end, single)
    return tag == single


def _split_id(v: int, n: int) -> tuple[int, int]:
    """``(v % n, v / n)`` with C++'s truncation toward zero (a negative id behaves as in
    Paddle)."""
    q = abs(v) // n
    q = q if v >= 0 else -q
    return v - q * n, q


def _segments(ids: np.ndarray, num_chunk_types: int, tags: tuple, which: str) -> list[tuple]:
    """The ``(begin, end, type)`` chunks of one sequence of tag ids (end inclusive)."""
    n = tags[0]
    other = num_chunk_types
    limit = num_chunk_types * n
    segments = []
    start, in_chunk, tag, type_ = 0, False, -1, other
    for i, v in enumerate(int(a) for a in ids):
        if v > limit:
            raise ValueError(f"chunk_eval: Input({which}) holds {v}, above num_chunk_types "
                             f"({num_chunk_types}) x the {n} tag types of the scheme = {limit} "
                             "(the O tag)")
        prev_tag, prev_type = tag, type_
        tag, type_ = _split_id(v, n)
        if in_chunk and _chunk_end(prev_tag, prev_type, tag, type_, other, tags):
            segments.append((start, i - 1, prev_type))
            in_chunk = False
        if _chunk_begin(prev_tag, prev_type, tag, type_, other, tags):
            start, in_chunk = i, True
    if in_chunk:
        segments.append((start, len(ids) - 1, type_))
    return segments


def _eval_sequence(infer: np.ndarray, label: np.ndarray, num_chunk_types: int, tags: tuple,
                   excluded: set) -> tuple[int, int, int]:
    """(inferred, labelled, correct) chunk counts of one sequence; a chunk is correct when a
    chunk with the same begin, end and type is in both (Paddle's merge walk over the two
    sorted chunk lists)."""
    out = _segments(infer, num_chunk_types, tags, "Inference")
    lab = _segments(label, num_chunk_types, tags, "Label")
    correct = 0
    i = j = 0
    while i < len(out) and j < len(lab):
        if out[i] == lab[j] and out[i][2] not in excluded:
            correct += 1
        if out[i][1] < lab[j][1]:
            i += 1
        elif out[i][1] > lab[j][1]:
            j += 1
        else:
            i += 1
            j += 1
    n_out = sum(1 for s in out if s[2] not in excluded)
    n_lab = sum(1 for s in lab if s[2] not in excluded)
    return n_out, n_lab, correct


@register("chunk_eval", ("Inference", "Label", "SeqLength"), _CHUNK_OUTS, _CHUNK_ATTRS,
          optional=("SeqLength",), lod="kernel")
def chunk_eval(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Chunk counts over the batch's sequences (the LoD of Label, or the rows of padded
    ``[N, M(, 1)]`` inputs cut to SeqLength) and precision = correct / inferred, recall =
    correct / labelled, F1 = 2PR / (P + R), 0 where a denominator (or correct) is 0."""
    scheme = str(attrs.get("chunk_scheme", "IOB"))
    if scheme not in _SCHEMES:
        raise ValueError(f"chunk_eval: chunk_scheme must be one of {tuple(_SCHEMES)}, got "
                         f"{scheme!r}")
    tags = _SCHEMES[scheme]
    num_chunk_types = attrs.get("num_chunk_types")
    if num_chunk_types is None or int(num_chunk_types) < 1:
        raise ValueError(f"chunk_eval: num_chunk_types must be a positive int, got "
                         f"{num_chunk_types!r}")
    num_chunk_types = int(num_chunk_types)
    excluded_attr = _or_empty(attrs.get("excluded_chunk_types"))
    excluded = {int(t) for t in np.asarray(excluded_attr).reshape(-1)}
    inference, label = ins["Inference"][0], ins["Label"][0]
    xp = array_module(inference, label)
    infer_h, label_h = to_host(inference), to_host(label)
    if infer_h.shape != label_h.shape:
        raise ValueError(f"chunk_eval: Inference {infer_h.shape} and Label {label_h.shape} "
                         "must have the same shape")
    lods = attrs.get("_lods") or {}
    label_lod = (lods.get("Label") or [None])[0]
    infer_lod = (lods.get("Inference") or [None])[0]
    seq_len = (ins.get("SeqLength") or [None])[0]
    pairs = []
    if label_lod:
        if len(label_lod) != 1:
            raise ValueError(f"chunk_eval: only one LoD level is supported, Label has "
                             f"{len(label_lod)}")
        if tuple(infer_lod or ()) != tuple(label_lod):
            raise ValueError(f"chunk_eval: Inference and Label must have the same LoD, got "
                             f"{infer_lod} and {label_lod}")
        flat_i, flat_l = infer_h.reshape(-1), label_h.reshape(-1)
        offsets = label_lod[0]
        pairs = [(flat_i[a:b], flat_l[a:b]) for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    else:
        if seq_len is None:
            raise ValueError("chunk_eval: Label has no LoD, so the inputs are padded "
                             "[N, M] or [N, M, 1] and SeqLength (seq_length) must be given")
        if infer_h.ndim < 2:
            raise ValueError(f"chunk_eval: padded inputs must be [N, M] or [N, M, 1], got "
                             f"shape {infer_h.shape}")
        lengths = to_host(seq_len).reshape(-1).astype(np.int64)
        width = infer_h.shape[1]
        rows_i = infer_h.reshape(infer_h.shape[0], -1)
        rows_l = label_h.reshape(label_h.shape[0], -1)
        if len(lengths) > rows_i.shape[0] or (len(lengths) and (
                lengths.min() < 0 or lengths.max() > width)):
            raise ValueError(f"chunk_eval: SeqLength {lengths.tolist()} does not fit the "
                             f"padded inputs of shape {infer_h.shape}")
        pairs = [(rows_i[k, :n], rows_l[k, :n]) for k, n in enumerate(lengths.tolist())]
    n_infer = n_label = n_correct = 0
    for seq_i, seq_l in pairs:
        a, b, c = _eval_sequence(seq_i, seq_l, num_chunk_types, tags, excluded)
        n_infer, n_label, n_correct = n_infer + a, n_label + b, n_correct + c
    # float32 arithmetic, as the float kernel Fluid registers
    f32 = np.float32
    precision = f32(0) if not n_infer else f32(n_correct) / f32(n_infer)
    recall = f32(0) if not n_label else f32(n_correct) / f32(n_label)
    f1 = f32(0) if not n_correct else f32(2) * precision * recall / (precision + recall)
    values = {"Precision": np.array([precision], np.float32),
              "Recall": np.array([recall], np.float32),
              "F1-Score": np.array([f1], np.float32),
              "NumInferChunks": np.array([n_infer], np.int64),
              "NumLabelChunks": np.array([n_label], np.int64),
              "NumCorrectChunks": np.array([n_correct], np.int64)}
    # no LoD result: the executor leaves the outputs of a lod="kernel" op without one
    return {slot: [xp.asarray(values[slot])] for slot in outs if slot in values}


# -- mean_iou -------------------------------------------------------------------------------------


@register("mean_iou", ("Predictions", "Labels", "InWrongs", "InCorrects", "InMeanIou"),
          ("OutMeanIou", "OutWrong", "OutCorrect"), {"num_classes": 0},
          optional=("InWrongs", "InCorrects", "InMeanIou"), lod="none")
def mean_iou(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid 1.8's mean_iou (mean_iou_op.h): per class, OutCorrect counts the pixels predicted
    right and OutWrong the pixels of the class as prediction or label where they differ (both
    int32, added to the sums of InCorrects / InWrongs); OutMeanIou (float32 ``[1]``) is the
    mean of correct / (correct + wrong) over the classes seen (denominator > 0), plus the sum
    of InMeanIou."""
    num_classes = int(attrs.get("num_classes", 0))
    if num_classes <= 0:
        raise ValueError(f"mean_iou: num_classes must be > 0, got {num_classes}")
    pred, label = ins["Predictions"][0], ins["Labels"][0]
    xp = array_module(pred)
    for slot, a in (("Predictions", pred), ("Labels", label)):
        if a.dtype.kind not in "iu":
            raise TypeError(f"mean_iou: {slot} must be int32 or int64, got {a.dtype}")
    p = to_host(pred).reshape(-1).astype(np.int64)
    lab = to_host(label).reshape(-1).astype(np.int64)
    if p.size != lab.size:
        raise ValueError(f"mean_iou: {p.size} predictions but {lab.size} labels")
    for slot, a in (("Predictions", p), ("Labels", lab)):
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            bad = a[(a < 0) | (a >= num_classes)][0]
            raise ValueError(f"mean_iou: {slot} must be class ids in [0, {num_classes}), "
                             f"got {bad}")
    wrong = np.zeros(num_classes, np.int32)
    correct = np.zeros(num_classes, np.int32)
    for a in ins.get("InWrongs") or []:
        wrong += to_host(a).reshape(-1).astype(np.int32)
    for a in ins.get("InCorrects") or []:
        correct += to_host(a).reshape(-1).astype(np.int32)
    hit = p == lab
    correct += np.bincount(p[hit], minlength=num_classes).astype(np.int32)
    wrong += np.bincount(p[~hit], minlength=num_classes).astype(np.int32)
    wrong += np.bincount(lab[~hit], minlength=num_classes).astype(np.int32)
    denominator = wrong + correct
    valid = np.float32((denominator > 0).sum())
    iou_sum = (correct.astype(np.float32)
               / np.where(denominator == 0, 1, denominator).astype(np.float32)).sum()
    with np.errstate(invalid="ignore", divide="ignore"):  # no class seen: 0 / 0, as Fluid
        mean = np.float32(iou_sum) / valid
    total = np.zeros(1, np.float32)
    for a in ins.get("InMeanIou") or []:
        total += to_host(a).reshape(-1).astype(np.float32)
    total += mean

    def place(a: np.ndarray) -> Any:
        return a if xp is np else xp.asarray(a)

    return {"OutMeanIou": [place(total)], "OutWrong": [place(wrong)],
            "OutCorrect": [place(correct)]}


# -- positive_negative_pair, precision_recall (Fluid 1.8's ranking and classification metrics) --

_PNP_ACC = ("AccumulatePositivePair", "AccumulateNegativePair", "AccumulateNeutralPair")


@register("positive_negative_pair", ("Score", "Label", "QueryID", *_PNP_ACC, "Weight"),
          ("PositivePair", "NegativePair", "NeutralPair"), {"column": 0},
          optional=(*_PNP_ACC, "Weight"), lod="none")
def positive_negative_pair(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid 1.8's positive_negative_pair_op.h: within each query (rows of equal QueryID),
    every pair of documents with different labels adds the mean of its two weights to
    PositivePair when the score (column ``column`` of Score) orders them as the labels do,
    else to NegativePair; a pair with equal scores adds it to NeutralPair *and* to
    NegativePair (Fluid's kernel counts it there too). The three Accumulate* inputs, all or
    none, are the starting counts. Outputs are ``[1]`` of Score's dtype.

    Raises
    ------
    ValueError
        Shapes as Fluid's InferShape checks them, ``column`` out of range, or only some of the
        Accumulate* inputs.
    """
    score = to_host(ins["Score"][0])
    dtype = score.dtype
    label = to_host(ins["Label"][0])
    query = to_host(ins["QueryID"][0])
    if score.ndim != 2 or label.ndim != 2:
        raise ValueError("positive_negative_pair: Score and Label must be 2-D, got shapes "
                         f"{list(score.shape)} and {list(label.shape)}")
    n, width = score.shape
    if label.shape != (n, 1) or query.shape != label.shape:
        raise ValueError(f"positive_negative_pair: Label and QueryID must be [{n}, 1], got "
                         f"{list(label.shape)} and {list(query.shape)}")
    weight_t = (ins.get("Weight") or [None])[0]
    weight = None if weight_t is None else to_host(weight_t)
    if weight is not None and weight.shape != label.shape:
        raise ValueError(f"positive_negative_pair: Weight must be [{n}, 1], got "
                         f"{list(weight.shape)}")
    column = int(attrs.get("column", 0))
    if not -width <= column < width:
        raise ValueError(f"positive_negative_pair: column {column} is not in [-{width}, "
                         f"{width})")
    column %= width
    accs = [(ins.get(s) or [None])[0] for s in _PNP_ACC]
    given = [a is not None for a in accs]
    if any(given) and not all(given):
        raise ValueError("positive_negative_pair: AccumulatePositivePair, "
                         "AccumulateNegativePair and AccumulateNeutralPair are required if "
                         "one of them is given")
    one = dtype.type
    pos, neg, neu = ([one(to_host(a).reshape(-1)[0]) for a in accs] if all(given)
                     else [one(0)] * 3)
    s = score[:, column].astype(dtype, copy=False)
    lab = label.reshape(-1).astype(dtype, copy=False)
    w = (np.ones(n, dtype) if weight is None else weight.reshape(-1).astype(dtype, copy=False))
    q = query.reshape(-1)
    # the documents of each query in row order, queries in first-seen order
    groups: dict[int, list[int]] = {}
    for i, qid in enumerate(q.tolist()):
        groups.setdefault(qid, []).append(i)
    half = one(0.5)
    for rows in groups.values():
        for a, i in enumerate(rows):
            for j in rows[a + 1:]:
                if lab[i] == lab[j]:
                    continue
                pw = (w[i] + w[j]) * half
                if s[i] == s[j]:
                    neu += pw
                if (s[i] - s[j]) * (lab[i] - lab[j]) > 0:
                    pos += pw
                else:
                    neg += pw
    return {"PositivePair": [np.array([pos], dtype)], "NegativePair": [np.array([neg], dtype)],
            "NeutralPair": [np.array([neu], dtype)]}


def _pr_metrics(states: np.ndarray) -> np.ndarray:
    """Fluid's ComputeMetrics, in the states' dtype: macro precision, recall and F1 (the
    mean over classes; a class with no TP+FP (TP+FN) has precision (recall) 1), then micro
    precision, recall and F1 from the summed counts; float64 as Fluid's output."""
    one = states.dtype.type

    def ratio(a, b):
        return a / (a + b) if a > 0 or b > 0 else one(1)

    def f1(p, r):
        return 2 * p * r / (p + r) if p > 0 or r > 0 else one(0)

    tp, fp, fn = states[:, 0], states[:, 1], states[:, 3]
    cls_num = states.shape[0]
    macro_p, macro_r = one(0), one(0)
    tot_tp, tot_fp, tot_fn = one(0), one(0), one(0)
    for k in range(cls_num):
        tot_tp += tp[k]
        tot_fp += fp[k]
        tot_fn += fn[k]
        macro_p += ratio(tp[k], fp[k])
        macro_r += ratio(tp[k], fn[k])
    macro_p /= one(cls_num)
    macro_r /= one(cls_num)
    micro_p, micro_r = ratio(tot_tp, tot_fp), ratio(tot_tp, tot_fn)
    return np.array([macro_p, macro_r, f1(macro_p, macro_r), micro_p, micro_r,
                     f1(micro_p, micro_r)], np.float64)


@register("precision_recall", ("MaxProbs", "Indices", "Labels", "Weights", "StatesInfo"),
          ("BatchMetrics", "AccumMetrics", "AccumStatesInfo"), {"class_number": 0},
          optional=("Weights", "StatesInfo"), lod="none")
def precision_recall(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid 1.8's precision_recall_op.h: per class the (weighted) TP, FP, TN, FN counts of
    this batch (predicted class Indices, true class Labels, both int32 ``[N, 1]``; a sample
    adds its weight to TN of every class other than its predicted and true ones), and from
    them BatchMetrics; AccumStatesInfo adds StatesInfo (``[class_number, 4]``) to the
    counts, AccumMetrics the same metrics of those. Counts are of MaxProbs' dtype, metrics
    float64 ``[6]``.

    Raises
    ------
    ValueError
        A shape Fluid's InferShape refuses, or a class index or label outside
        ``[0, class_number)``.
    """
    probs = to_host(ins["MaxProbs"][0])
    dtype = probs.dtype
    ids = to_host(ins["Indices"][0])
    labels = to_host(ins["Labels"][0])
    cls_num = int(attrs.get("class_number", 0))
    n = probs.shape[0]
    if probs.ndim != 2 or probs.shape[1] != 1 or ids.shape != probs.shape:
        raise ValueError(f"precision_recall: MaxProbs and Indices must be [N, 1], got "
                         f"{list(probs.shape)} and {list(ids.shape)}")
    if labels.shape != (n, 1):
        raise ValueError(f"precision_recall: Labels must be [{n}, 1], got {list(labels.shape)}")
    w_t = (ins.get("Weights") or [None])[0]
    weights = None if w_t is None else to_host(w_t)
    if weights is not None and weights.shape != (n, 1):
        raise ValueError(f"precision_recall: Weights must be [{n}, 1], got "
                         f"{list(weights.shape)}")
    s_t = (ins.get("StatesInfo") or [None])[0]
    prior = None if s_t is None else to_host(s_t)
    if prior is not None and prior.shape != (cls_num, 4):
        raise ValueError(f"precision_recall: StatesInfo must be [{cls_num}, 4], got "
                         f"{list(prior.shape)}")
    idx = ids.reshape(-1).astype(np.int64)
    lab = labels.reshape(-1).astype(np.int64)
    for name, v in (("Class index", idx), ("Label", lab)):
        bad = v[(v < 0) | (v >= cls_num)]
        if bad.size:
            raise ValueError(f"precision_recall: {name} of each instance should be in "
                             f"[0, {cls_num}), got {int(bad[0])}")
    w = (np.ones(n, dtype) if weights is None
         else weights.reshape(-1).astype(dtype, copy=False))
    states = np.zeros((cls_num, 4), dtype)  # TP, FP, TN, FN
    for i in range(n):  # sample by sample, as Fluid accumulates (float sums in its order)
        p, t, wi = idx[i], lab[i], w[i]
        states[:, 2] += wi
        states[p, 2] -= wi
        if p == t:
            states[p, 0] += wi
        else:
            states[t, 3] += wi
            states[p, 1] += wi
            states[t, 2] -= wi
    batch = _pr_metrics(states)
    if prior is not None:
        states = states + prior.astype(dtype, copy=False)
    return {"BatchMetrics": [batch], "AccumMetrics": [_pr_metrics(states)],
            "AccumStatesInfo": [states]}
