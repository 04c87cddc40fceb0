"""Ranking and pairwise losses of ``fluid.layers`` (Fluid 1.8's ``layers/loss.py``):
``rank_loss``, ``margin_rank_loss``, ``bpr_loss``, ``teacher_student_sigmoid_loss`` (ops of
:mod:`dask_fluid.ops.loss_ops`), and ``dice_loss`` and ``npair_loss``, built op for op from
other layers as Fluid builds them."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..layer_helper import LayerHelper
from .checks import check_variable_and_dtype
from .nn import (
    matmul,
    reduce_mean,
    reduce_sum,
    softmax_with_cross_entropy,
    square,
)
from .tensor import _check_var, _known, cast, equal, expand, one_hot, reshape, transpose

__all__ = ["bpr_loss", "center_loss", "dice_loss", "margin_rank_loss", "npair_loss", "rank_loss",
           "sampled_softmax_with_cross_entropy", "teacher_student_sigmoid_loss"]


def _need_var(x: Any, arg: str, layer: str) -> Variable:
    # Fluid 1.8's rank_loss and margin_rank_loss raise ValueError for a non-Variable
    if not isinstance(x, Variable):
        raise ValueError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")
    return x


def rank_loss(label: Variable, left: Variable, right: Variable,
              name: str | None = None) -> Variable:
    """RankNet's pairwise loss (Fluid 1.8's ``layers.rank_loss``, op ``rank_loss``):
    ``log(1 + exp(left - right)) - label * (left - right)``, shaped like ``label``.

    ``label``, ``left`` and ``right`` are ``[N, 1]`` (or ``[N]``); ``label`` is 0, 0.5 or 1.

    Raises
    ------
    ValueError
        An argument is not a Variable, or the shapes are not ``[N]`` / ``[N, 1]`` with one N.
    """
    for arg, v in (("label", label), ("left", left), ("right", right)):
        _need_var(v, arg, "rank_loss")
        shape = list(v.shape or ())
        if v.shape is not None and (len(shape) not in (1, 2)
                                    or (len(shape) == 2 and _known(shape[1]) and shape[1] != 1)):
            raise ValueError(f"rank_loss: {arg} {v.name!r} must be [N, 1] or [N], got {shape}")
    rows = {v.shape[0] for v in (label, left, right) if v.shape and _known(v.shape[0])}
    if len(rows) > 1:
        raise ValueError(f"rank_loss: label, left and right must have the same first dim, got "
                         f"{[list(v.shape) for v in (label, left, right)]}")
    helper = LayerHelper("rank_loss", name)
    # Fluid 1.8 declares the output float32 (its only kernel); here it follows left's dtype
    out = helper.create_tmp(dtype=left.dtype, shape=label.shape)
    helper.append_op("rank_loss", inputs={"Label": [label], "Left": [left], "Right": [right]},
                     outputs={"Out": [out]})
    return out


def margin_rank_loss(label: Variable, left: Variable, right: Variable, margin: float = 0.1,
                     name: str | None = None) -> Variable:
    """``max(0, -label * (left - right) + margin)`` (Fluid 1.8's ``layers.margin_rank_loss``,
    op ``margin_rank_loss`` with inputs ``X1 = left``, ``X2 = right``); all ``[N, 1]``,
    ``label`` +1 (left ranks higher) or -1.

    Raises
    ------
    ValueError
        An argument is not a Variable, or the three shapes are not one ``[N, 1]``.
    """
    for arg, v in (("label", label), ("left", left), ("right", right)):
        _need_var(v, arg, "margin_rank_loss")
    shapes = [list(v.shape) for v in (label, left, right) if v.shape is not None]
    for s in shapes:
        if len(s) != 2 or (_known(s[1]) and s[1] != 1) or any(
                _known(a) and _known(b) and a != b for a, b in zip(s, shapes[0], strict=True)):
            raise ValueError(f"margin_rank_loss: label, left and right must all be [N, 1], got "
                             f"{[list(v.shape or ()) for v in (label, left, right)]}")
    helper = LayerHelper("margin_rank_loss", name)
    out = helper.create_tmp(dtype=left.dtype, shape=label.shape)
    act = helper.create_tmp(dtype=left.dtype, shape=label.shape, stop_gradient=True)
    helper.append_op("margin_rank_loss", inputs={"Label": [label], "X1": [left], "X2": [right]},
                     outputs={"Out": [out], "Activated": [act]},
                     attrs={"margin": float(margin)})
    return out


def bpr_loss(input: Variable, label: Variable, name: str | None = None) -> Variable:
    """Bayesian personalised ranking loss (Fluid 1.8's ``layers.bpr_loss``, op ``bpr_loss``):
    for logits ``input`` ``[N, C]`` and the positive class ``label`` ``[N, 1]`` (int64), row i
    gives ``-mean_{j != label} log(sigmoid(input[i, label] - input[i, j]))``, ``[N, 1]``.

    Raises
    ------
    TypeError
        ``label`` is not an int64 Variable.
    ValueError
        ``label``'s shape is not ``input``'s with a last dim of 1.
    """
    _check_var(input, "input", "bpr_loss")
    _check_var(label, "label", "bpr_loss")
    if label.dtype != "int64":
        raise TypeError(f"bpr_loss: label must be int64 class indices, got {label.dtype}")
    shape = list(input.shape or ())
    if input.shape is not None and label.shape is not None:
        lshape = list(label.shape)
        if len(lshape) != len(shape) or len(shape) < 2 or (
                _known(lshape[-1]) and lshape[-1] != 1) or any(
                _known(a) and _known(b) and a != b for a, b in zip(shape[:-1], lshape[:-1],
                                                                    strict=True)):
            raise ValueError(f"bpr_loss: label must have input's shape {shape} with a last dim "
                             f"of 1, got {lshape}")
    helper = LayerHelper("bpr_loss", name)
    out = helper.create_tmp(dtype=input.dtype,
                            shape=shape[:-1] + [1] if input.shape is not None else None)
    helper.append_op("bpr_loss", inputs={"X": [input], "Label": [label]}, outputs={"Y": [out]})
    return out


def teacher_student_sigmoid_loss(input: Variable, label: Variable,
                                 soft_max_up_bound: float = 15.0,
                                 soft_max_lower_bound: float = -15.0) -> Variable:
    """Teacher-student sigmoid loss (Fluid 1.8's ``layers.teacher_student_sigmoid_loss``):
    logits ``input`` ``[N, 1]``, float ``label`` ``[N, 1]`` coding the click z and the
    teacher's value z' (-2: no z', z = 0; -1: no z', z = 1; z' in [0, 1): z = 0; 1 + z':
    z = 1); ``Y = sigmoid_ce(x, z) + sigmoid_ce(x, z')`` (the z' term only where it exists),
    ``[N, 1]``. The gradient is 0 where ``input`` is outside the two bounds.

    Raises
    ------
    TypeError
        ``label`` is not a float Variable (Fluid's kernel reads it as input's type).
    ValueError
        ``input`` or ``label`` is not ``[N, 1]``.
    """
    _check_var(input, "input", "teacher_student_sigmoid_loss")
    _check_var(label, "label", "teacher_student_sigmoid_loss")
    if not str(label.dtype).startswith("float"):
        raise TypeError(f"teacher_student_sigmoid_loss: label must be a float tensor coding "
                        f"click and teacher value, got {label.dtype}")
    for arg, v in (("input", input), ("label", label)):
        s = list(v.shape or ())
        if v.shape is not None and (len(s) != 2 or (_known(s[1]) and s[1] != 1)):
            raise ValueError(f"teacher_student_sigmoid_loss: {arg} {v.name!r} must be [N, 1], "
                             f"got {s}")
    helper = LayerHelper("teacher_student_sigmoid_loss")
    rows = input.shape[0] if input.shape is not None else -1
    out = helper.create_tmp(dtype=input.dtype, shape=[rows, 1])
    helper.append_op("teacher_student_sigmoid_loss", inputs={"X": [input], "Label": [label]},
                     outputs={"Y": [out]},
                     attrs={"soft_max_lower_bound": float(soft_max_lower_bound),
                            "soft_max_up_bound": float(soft_max_up_bound)})
    return out


def dice_loss(input: Variable, label: Variable, epsilon: float = 0.00001,
              name: str | None = None) -> Variable:
    """Dice loss (Fluid 1.8's ``layers.dice_loss``), ``[1]``: with ``label`` (int, last dim 1)
    one-hot over ``input``'s last dim and sums over every dim but the first,
    ``mean(1 - 2 Σ input·label / (Σ input + Σ label + epsilon))``. Built op for op as Fluid:
    one_hot, elementwise_mul, reduce_sum ×3, elementwise_add, scale ×2, elementwise_div,
    scale (``1 - x``), reduce_mean. ``name`` is accepted and unused, as in Fluid.
    """
    _check_var(input, "input", "dice_loss")
    _check_var(label, "label", "dice_loss")
    shape = list(input.shape or ())
    if len(shape) < 2 or not _known(shape[-1]) or shape[-1] <= 0:
        raise ValueError(f"dice_loss: input {input.name!r} needs rank >= 2 and a known class "
                         f"dim, got shape {shape}")
    if label.shape is not None and len(label.shape) != len(shape):
        raise ValueError(f"dice_loss: label must have input's rank {len(shape)} with a last dim "
                         f"of 1, got shape {list(label.shape)}")
    hot = one_hot(label, depth=int(shape[-1]))
    dims = list(range(1, len(shape)))
    inse = reduce_sum(input * hot, dim=dims)
    denominator = reduce_sum(input, dim=dims) + reduce_sum(hot, dim=dims)
    # Variable arithmetic as Fluid 1.8's math_op_patch: a Python number is one scale op
    ratio = (inse * 2) / (denominator + epsilon)
    return reduce_mean(1 - ratio)


def npair_loss(anchor: Variable, positive: Variable, labels: Variable,
               l2_reg: float = 0.002) -> Variable:
    """N-pair loss (Fluid 1.8's ``layers.npair_loss``), ``[1]``: ``0.25 * l2_reg *
    (mean_i |anchor_i|² + mean_i |positive_i|²)`` plus the soft-label cross entropy of the
    similarity ``anchor positiveᵀ`` against the rows of ``labels == labelsᵀ`` normalised to
    sum 1, weighted by those targets and summed over rows, then averaged. Built op for op as
    Fluid (``labels`` is reshaped in place to ``[B, 1]``, as Fluid's ``inplace=True`` does).

    Raises
    ------
    ValueError
        ``labels`` is not 1-D with a known batch size (Fluid expands by it).
    """
    # Fluid 1.8 names the layer of the last two checks after the argument ('positive',
    # 'labels'), a slip kept in its messages here
    check_variable_and_dtype(anchor, "anchor", ("float32", "float64"), "npair_loss")
    check_variable_and_dtype(positive, "positive", ("float32", "float64"), "positive")
    check_variable_and_dtype(labels, "labels", ("float32", "float64", "int64"), "labels")
    for arg, v in (("anchor", anchor), ("positive", positive), ("labels", labels)):
        _check_var(v, arg, "npair_loss")
    if not labels.shape or not _known(labels.shape[0]) or labels.shape[0] <= 0:
        raise ValueError(f"npair_loss: labels {labels.name!r} needs a known batch size (its "
                         f"first dim), got shape {list(labels.shape or ())}")
    beta = 0.25
    batch_size = int(labels.shape[0])
    labels = reshape(labels, shape=[batch_size, 1], inplace=True)
    labels = expand(labels, expand_times=[1, batch_size])
    labels = cast(equal(labels, transpose(labels, perm=[1, 0])), "float32")
    labels = labels / reduce_sum(labels, dim=1, keep_dim=True)
    l2loss = (reduce_mean(reduce_sum(square(anchor), 1))
              + reduce_mean(reduce_sum(square(positive), 1)))
    l2loss = l2loss * beta * l2_reg
    similarity = matmul(anchor, positive, transpose_x=False, transpose_y=True)
    softmax_ce = softmax_with_cross_entropy(logits=similarity, label=labels, soft_label=True)
    cross_entropy = reduce_sum(labels * softmax_ce, 0)
    celoss = reduce_mean(cross_entropy)
    return l2loss + celoss


def sampled_softmax_with_cross_entropy(logits: Variable, label: Variable, num_samples: int,
                                       num_true: int = 1, remove_accidental_hits: bool = True,
                                       use_customized_samples: bool = False,
                                       customized_samples: Variable | None = None,
                                       customized_probabilities: Variable | None = None,
                                       seed: int = 0) -> Variable:
    """Sampled softmax cross entropy (Fluid 1.8's
    ``layers.sampled_softmax_with_cross_entropy``), op for op: ``sample_logits`` (the true
    labels plus ``num_samples`` unique log-uniform draws, logits − log Q, accidental hits
    − 1e20), ``one_hot`` of the sampled labels with depth ``num_samples + 1``, then
    ``softmax_with_cross_entropy`` with soft labels, divided by ``num_true``: ``[N, 1]``.

    As in 1.8 the one-hot depth is ``num_samples + 1``, so only ``num_true = 1`` runs.

    Raises
    ------
    ValueError
        ``num_samples`` / ``num_true`` not positive ints, ``label`` not ``[N, num_true]``, or
        ``use_customized_samples`` without both customized tensors.
    """
    _check_var(logits, "logits", "sampled_softmax_with_cross_entropy")
    _check_var(label, "label", "sampled_softmax_with_cross_entropy")
    for arg, v in (("num_samples", num_samples), ("num_true", num_true)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"sampled_softmax_with_cross_entropy: {arg} must be a positive "
                             f"int, got {v!r}")
    lshape, xshape = list(label.shape or ()), list(logits.shape or ())
    if len(xshape) != 2:
        raise ValueError(f"sampled_softmax_with_cross_entropy: logits must be 2-D [N, K], got "
                         f"{xshape}")
    if len(lshape) != 2 or (_known(lshape[1]) and lshape[1] != num_true):
        raise ValueError(f"sampled_softmax_with_cross_entropy: label must be [N, num_true="
                         f"{num_true}], got {lshape}")
    if use_customized_samples:
        for arg, v in (("customized_samples", customized_samples),
                       ("customized_probabilities", customized_probabilities)):
            if not isinstance(v, Variable):
                raise ValueError(f"sampled_softmax_with_cross_entropy: use_customized_samples "
                                 f"needs {arg} as a Variable, got {v!r}")
    helper = LayerHelper("sample_logits")
    cols = num_true + num_samples
    rows = xshape[0]
    samples = customized_samples if use_customized_samples else helper.create_tmp(
        dtype="int64", shape=[rows, cols])
    probabilities = customized_probabilities if use_customized_samples else helper.create_tmp(
        dtype=logits.dtype, shape=[rows, cols])
    sampled_logits = helper.create_tmp(dtype=logits.dtype, shape=[rows, cols])
    sampled_label = helper.create_tmp(dtype="int64", shape=[rows, num_true])
    sampled_softlabel = helper.create_tmp(dtype=logits.dtype, shape=[rows, num_samples + 1])
    logits_dim = helper.create_tmp(dtype=logits.dtype)
    labels_dim = helper.create_tmp(dtype=label.dtype)
    inputs: dict[str, list[Variable]] = {"Logits": [logits], "Labels": [label]}
    if customized_samples is not None:
        inputs["CustomizedSamples"] = [customized_samples]
    if customized_probabilities is not None:
        inputs["CustomizedProbabilities"] = [customized_probabilities]
    helper.append_op("sample_logits", inputs=inputs,
                     outputs={"Samples": [samples], "Probabilities": [probabilities],
                              "SampledLabels": [sampled_label],
                              "SampledLogits": [sampled_logits], "LogitsDim": [logits_dim],
                              "LabelsDim": [labels_dim]},
                     attrs={"use_customized_samples": bool(use_customized_samples),
                            "uniq": True, "remove_accidental_hits": bool(remove_accidental_hits),
                            "num_samples": num_samples, "seed": int(seed)})
    loss = helper.create_tmp(dtype=logits.dtype, shape=[rows, 1])
    softmax = helper.create_tmp(dtype=logits.dtype, shape=[rows, cols])
    helper.append_op("one_hot", inputs={"X": [sampled_label]},
                     outputs={"Out": [sampled_softlabel]}, attrs={"depth": num_samples + 1})
    helper.append_op("softmax_with_cross_entropy",
                     inputs={"Logits": [sampled_logits], "Label": [sampled_softlabel]},
                     outputs={"Softmax": [softmax], "Loss": [loss]},
                     attrs={"soft_label": True, "ignore_index": False,
                            "numeric_stable_mode": False})
    return loss / num_true


def center_loss(input: Variable, label: Variable, num_classes: int,  # noqa: A002
                alpha: float | Variable, param_attr: Any,
                update_center: bool = True) -> Variable:
    """Center loss (Fluid 1.8's ``layers.center_loss``), ``[N, 1]``: ``½ ‖x_i − c_{y_i}‖²``
    per row of ``input`` ``[N, M]``, with ``label`` ``[N, 1]`` (int) picking the row of a
    ``[num_classes, M]`` centers parameter (``param_attr``: a ParamAttr or an initializer;
    the parameter has ``stop_gradient`` set). With ``update_center`` the op moves the centers
    in place on every run: ``c += alpha Σ_{i: y_i = c}(x_i − c) / (1 + count_c)``. A float
    ``alpha`` becomes the persistable float32 ``[1]`` variable ``centerloss_alpha``, as in
    Fluid; a Variable is used as given. One op ``center_loss`` (outputs SampleCenterDiff,
    Loss, and CentersOut bound to the centers parameter); only ``input`` gets a gradient.

    Raises
    ------
    TypeError
        ``input``/``label`` not Variables, or ``alpha`` neither a float nor a Variable.
    ValueError
        ``input`` not 2-D with a known feature dim, ``num_classes`` not a positive int, or
        ``param_attr=False``.
    """
    from ..initializer import ConstantInitializer  # noqa: PLC0415
    from ..param_attr import ParamAttr  # noqa: PLC0415

    check_variable_and_dtype(input, "input", ("float32", "float64"), "center_loss")
    check_variable_and_dtype(label, "label", ("int32", "int64"), "center_loss")
    if isinstance(alpha, Variable):
        check_variable_and_dtype(alpha, "alpha", ("float32", "float64"), "center_loss")
    _check_var(input, "input", "center_loss")
    _check_var(label, "label", "center_loss")
    shape = list(input.shape or ())
    if len(shape) != 2 or not _known(shape[1]):
        raise ValueError(f"center_loss: input must be 2-D [N, M] with a known M, got {shape}")
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes <= 0:
        raise ValueError(f"center_loss: num_classes must be a positive int, got "
                         f"{num_classes!r}")
    if not isinstance(alpha, (float, Variable)):
        raise TypeError(f"center_loss: alpha must be a float or a Variable, got "
                        f"{type(alpha).__name__} {alpha!r}")
    attr = ParamAttr._to_attr(param_attr)
    if attr is False:
        raise ValueError("center_loss: param_attr=False leaves no centers parameter; pass a "
                         "ParamAttr or an initializer")
    helper = LayerHelper("center_loss")
    dtype = input.dtype
    centers = helper.create_parameter(attr, [num_classes, int(shape[1])], dtype)
    # the op moves the centers itself; no gradient flows to them
    centers.stop_gradient = True
    if isinstance(alpha, Variable):
        alpha_var = alpha
    else:
        block = helper.main_program.global_block()
        alpha_var = block.var("centerloss_alpha") if block.has_var("centerloss_alpha") else (
            block.create_var(name="centerloss_alpha", shape=[1], dtype="float32",
                             persistable=True, stop_gradient=True))
        helper.set_variable_initializer(alpha_var, ConstantInitializer(float(alpha)))
    diff = helper.create_tmp(dtype=dtype, shape=[shape[0], int(shape[1])])
    loss = helper.create_tmp(dtype=dtype, shape=[shape[0], 1])
    helper.append_op("center_loss",
                     inputs={"X": [input], "Label": [label], "Centers": [centers],
                             "CenterUpdateRate": [alpha_var]},
                     outputs={"SampleCenterDiff": [diff], "Loss": [loss],
                              "CentersOut": [centers]},
                     attrs={"cluster_num": num_classes, "need_update": bool(update_center)})
    return loss
