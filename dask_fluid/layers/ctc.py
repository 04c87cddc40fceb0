"""CTC layers of ``fluid.layers``: ``warpctc``, ``ctc_greedy_decoder`` and ``edit_distance``
(Fluid 1.8's signatures; the kernels are in :mod:`dask_fluid.ops.ctc_ops`)."""

from __future__ import annotations

from collections.abc import Sequence

from ..framework import Variable
from ..layer_helper import LayerHelper
from .nn import topk
from .tensor import _check_var, squeeze

__all__: list[str] = ["ctc_greedy_decoder", "edit_distance", "warpctc"]


def _check_dtype(x: Variable, arg: str, layer: str, allowed: tuple[str, ...]) -> None:
    if str(x.dtype) not in allowed:
        raise TypeError(f"{layer}: {arg} must have dtype in {list(allowed)}, got {x.dtype}")


def _both_or_neither(a: Variable | None, b: Variable | None, names: tuple[str, str],
                     layer: str) -> bool:
    """Whether the padded form is used; ValueError when only one length is given (Fluid
    silently falls back to the LoD form then)."""
    if (a is None) != (b is None):
        raise ValueError(f"{layer}: give both {names[0]} and {names[1]} (padded input) or "
                         f"neither (LoD input), got only "
                         f"{names[0] if a is not None else names[1]}")
    return a is not None


def warpctc(input: Variable, label: Variable, blank: int = 0, norm_by_times: bool = False,
            input_length: Variable | None = None,
            label_length: Variable | None = None) -> Variable:
    """The CTC loss of every sequence: −log p(label | softmax(input)) summed over the CTC
    alignments (Fluid 1.8's ``layers.warpctc``; the softmax is inside, as in warp-ctc).

    Parameters
    ----------
    input : Variable
        float32 logits: a LoD tensor ``[Lp, num_classes + 1]``, or with ``input_length`` a
        padded tensor ``[max_T, batch, num_classes + 1]`` (time-major).
    label : Variable
        int32 labels: a LoD tensor ``[Lg, 1]``, or with ``label_length`` a padded tensor
        ``[batch, max_label_length]``.
    blank : int
        The blank class, in ``[0, num_classes + 1)``.
    norm_by_times : bool
        Divide each sequence's gradient by its number of steps (the loss is not divided).
    input_length, label_length : Variable, optional
        int64 ``[batch]`` lengths, both or neither.

    Returns
    -------
    Variable
        ``[batch, 1]`` losses. A sequence too short for its labels (``L + repeats > T``) gets
        loss 0 and no gradient, as warp-ctc's CPU kernel.
    """
    _check_var(input, "input", "warpctc")
    _check_var(label, "label", "warpctc")
    _check_dtype(input, "input", "warpctc", ("float32", "float64"))
    _check_dtype(label, "label", "warpctc", ("int32",))
    padded = _both_or_neither(input_length, label_length, ("input_length", "label_length"),
                              "warpctc")
    width = input.shape[-1] if input.shape else -1
    if width is not None and width > 0 and not 0 <= int(blank) < width:
        raise ValueError(f"warpctc: blank={blank} must lie in [0, {width}) (num_classes + 1)")
    helper = LayerHelper("warpctc")
    inputs = {"Logits": [input], "Label": [label]}
    if padded:
        _check_var(input_length, "input_length", "warpctc")
        _check_var(label_length, "label_length", "warpctc")
        _check_dtype(input_length, "input_length", "warpctc", ("int64",))
        _check_dtype(label_length, "label_length", "warpctc", ("int64",))
        inputs["LogitsLength"] = [input_length]
        inputs["LabelLength"] = [label_length]
    loss = helper.create_tmp(dtype=input.dtype, shape=[-1, 1])
    grad = helper.create_tmp(dtype=input.dtype, shape=[-1, -1, width])
    helper.append_op("warpctc", inputs=inputs, outputs={"WarpCTCGrad": [grad], "Loss": [loss]},
                     attrs={"blank": int(blank), "norm_by_times": bool(norm_by_times)})
    return loss


def ctc_greedy_decoder(input: Variable, blank: int, input_length: Variable | None = None,
                       padding_value: int = 0, name: str | None = None):
    """Greedy CTC decoding (Fluid 1.8's ``layers.ctc_greedy_decoder``): the arg-max class of
    every step (``topk(input, k=1)``), then ``ctc_align`` merges repeats and drops blanks.

    Parameters
    ----------
    input : Variable
        Class scores: a LoD tensor ``[Lp, num_classes + 1]``, or with ``input_length`` a
        padded tensor ``[batch, T, num_classes + 1]`` (batch-major).
    blank : int
        The blank class.
    input_length : Variable, optional
        int64 ``[batch, 1]`` lengths of the padded form.
    padding_value : int
        Fills the padded output past each decoded sequence.
    name : str, optional

    Returns
    -------
    Variable or (Variable, Variable)
        LoD form: the decoded ids, an int64 LoD tensor ``[Lo, 1]`` (``[[-1]]`` when every
        sequence decodes to nothing). Padded form: ``(ids [batch, T], lengths [batch, 1])``.
    """
    _check_var(input, "input", "ctc_greedy_decoder")
    _check_dtype(input, "input", "ctc_greedy_decoder", ("float32", "float64"))
    helper = LayerHelper("ctc_greedy_decoder", name)
    _, indices = topk(input, k=1)
    attrs = {"merge_repeated": True, "blank": int(blank)}
    if input_length is None:
        # Fluid's InferShape gives Output the Input's dims (the real row count is known only
        # at run time)
        out = helper.create_tmp(dtype="int64", shape=indices.shape, stop_gradient=True)
        helper.append_op("ctc_align", inputs={"Input": [indices]}, outputs={"Output": [out]},
                         attrs=attrs)
        return out
    _check_var(input_length, "input_length", "ctc_greedy_decoder")
    _check_dtype(input_length, "input_length", "ctc_greedy_decoder", ("int64",))
    ids = squeeze(indices, [2])
    out = helper.create_tmp(dtype="int64", shape=ids.shape, stop_gradient=True)
    batch = ids.shape[0] if ids.shape else -1
    out_len = helper.create_tmp(dtype="int64", shape=[batch, 1], stop_gradient=True)
    helper.append_op("ctc_align", inputs={"Input": [ids], "InputLength": [input_length]},
                     outputs={"Output": [out], "OutputLength": [out_len]},
                     attrs={**attrs, "padding_value": int(padding_value)})
    return out, out_len


def edit_distance(input: Variable, label: Variable, normalized: bool = True,
                  ignored_tokens: Sequence[int] | None = None,
                  input_length: Variable | None = None,
                  label_length: Variable | None = None) -> tuple[Variable, Variable]:
    """Levenshtein distances between hypotheses and references (Fluid 1.8's
    ``layers.edit_distance``).

    Parameters
    ----------
    input, label : Variable
        int64 ids: LoD tensors ``[L, 1]``, or with the lengths padded tensors
        ``[batch, max_len]``.
    normalized : bool
        Divide each distance by its reference's length (an empty reference is an error).
    ignored_tokens : sequence of int, optional
        Ids removed from both sides first (``sequence_erase``; LoD inputs only).
    input_length, label_length : Variable, optional
        int64 ``[batch]`` lengths, both or neither.

    Returns
    -------
    (Variable, Variable)
        float32 distances ``[batch, 1]`` and the int64 number of pairs ``[1]``.
    """
    _check_var(input, "input", "edit_distance")
    _check_var(label, "label", "edit_distance")
    _check_dtype(input, "input", "edit_distance", ("int64",))
    _check_dtype(label, "label", "edit_distance", ("int64",))
    padded = _both_or_neither(input_length, label_length, ("input_length", "label_length"),
                              "edit_distance")
    helper = LayerHelper("edit_distance")
    if ignored_tokens is not None and len(ignored_tokens) > 0:
        if padded:
            raise NotImplementedError(
                "edit_distance(ignored_tokens=..., input_length=...) is not implemented in "
                "dask_fluid (sequence_erase needs LoD inputs, as in Fluid)")
        tokens = [int(t) for t in ignored_tokens]
        erased = []
        for v in (input, label):
            e = helper.create_tmp(dtype="int64", shape=[-1, 1], stop_gradient=True)
            helper.append_op("sequence_erase", inputs={"X": [v]}, outputs={"Out": [e]},
                             attrs={"tokens": tokens})
            erased.append(e)
        input, label = erased
    inputs = {"Hyps": [input], "Refs": [label]}
    if padded:
        _check_var(input_length, "input_length", "edit_distance")
        _check_var(label_length, "label_length", "edit_distance")
        inputs["HypsLength"] = [input_length]
        inputs["RefsLength"] = [label_length]
    batch = label.shape[0] if padded and label.shape else -1
    # Fluid declares Out int64 but its kernel writes float32: the runtime dtype is used here
    out = helper.create_tmp(dtype="float32", shape=[batch, 1], stop_gradient=True)
    seq_num = helper.create_tmp(dtype="int64", shape=[1], stop_gradient=True)
    helper.append_op("edit_distance", inputs=inputs,
                     outputs={"Out": [out], "SequenceNum": [seq_num]},
                     attrs={"normalized": bool(normalized)})
    return out, seq_num
