"""Sequence (LoD) layers of ``fluid.layers`` (Fluid 1.8's ``layers/sequence_lod.py``
signatures and defaults; the kernels are in :mod:`dask_fluid.ops.sequence_ops`)."""

from __future__ import annotations

from typing import Any

from ..framework import Variable
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .checks import check_type, check_variable_and_dtype
from .tensor import _check_var

__all__ = ["chunk_eval", "im2sequence", "lod_reset", "row_conv", "sequence_concat",
           "sequence_conv", "sequence_enumerate", "sequence_expand", "sequence_expand_as",
           "sequence_first_step", "sequence_last_step", "sequence_mask", "sequence_pad",
           "sequence_pool", "sequence_reshape", "sequence_reverse", "sequence_scatter",
           "sequence_slice", "sequence_softmax", "sequence_unpad"]

_POOL_TYPES = ("average", "sum", "sqrt", "max", "last", "first")


def sequence_pool(input: Variable, pool_type: str, is_test: bool = False,
                  pad_value: float = 0.0) -> Variable:
    """Pool every sequence of ``input``'s last LoD level into one row.

    Parameters
    ----------
    input : Variable
        A LoD tensor (``lod_level`` 1 or 2), ``[N, ...]``.
    pool_type : str
        ``"average"``, ``"sum"``, ``"sqrt"``, ``"max"``, ``"last"`` or ``"first"``.
    is_test : bool
    pad_value : float
        The output row of an empty sequence.

    Returns
    -------
    Variable
        ``[num_sequences, ...]``; with a 2-level input, a LoD tensor of the top level.
    """
    _check_var(input, "input", "sequence_pool")
    if str(pool_type).lower() not in _POOL_TYPES:
        raise ValueError(f"sequence_pool: pool_type must be one of {_POOL_TYPES}, got "
                         f"{pool_type!r}")
    helper = LayerHelper("sequence_pool")
    shape = list(input.shape) if input.shape is not None else None
    if shape:
        shape[0] = -1
    out = helper.create_tmp(dtype=input.dtype, shape=shape)
    max_index = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    helper.append_op("sequence_pool", inputs={"X": [input]},
                     outputs={"Out": [out], "MaxIndex": [max_index]},
                     attrs={"pooltype": str(pool_type).upper(), "is_test": bool(is_test),
                            "pad_value": float(pad_value)})
    return out


def sequence_first_step(input: Variable) -> Variable:
    """The first row of every sequence (``sequence_pool(input, "first")``)."""
    return sequence_pool(input=input, pool_type="first")


def sequence_last_step(input: Variable) -> Variable:
    """The last row of every sequence (``sequence_pool(input, "last")``)."""
    return sequence_pool(input=input, pool_type="last")


def sequence_conv(input: Variable, num_filters: int, filter_size: int = 3,
                  filter_stride: int = 1, padding: bool = True, padding_start: int | None = None,
                  bias_attr: Any = None, param_attr: Any = None, act: str | None = None,
                  name: str | None = None) -> Variable:
    """A 1-D convolution along every sequence of ``input`` (Fluid's ``sequence_conv``).

    Parameters
    ----------
    input : Variable
        A LoD tensor ``[N, D]``.
    num_filters : int
    filter_size : int
        The context window (rows).
    filter_stride : int
        Only 1, as in Fluid.
    padding : bool
        Has no effect, as in Fluid 1.8 (windows are zero-padded at sequence ends).
    padding_start : int, optional
        The window's first row relative to the output row; default ``-(filter_size // 2)``.
    bias_attr, param_attr : ParamAttr, optional
        The filter is ``[filter_size * D, num_filters]`` (Xavier); the bias ``[num_filters]``.
    act : str, optional

    Returns
    -------
    Variable
        ``[N, num_filters]`` with ``input``'s LoD.
    """
    _check_var(input, "input", "sequence_conv")
    if input.shape is None or len(input.shape) != 2 or input.shape[1] <= 0:
        raise ValueError(f"sequence_conv: input must be [N, D] with D known, got {input.shape}")
    helper = LayerHelper("sequence_conv", name)
    filt = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                   [filter_size * input.shape[1], num_filters], input.dtype)
    if padding_start is None:
        padding_start = -int(filter_size // 2)
    pre_bias = helper.create_tmp(dtype=input.dtype, shape=[-1, num_filters])
    helper.append_op("sequence_conv", inputs={"X": [input], "Filter": [filt]},
                     outputs={"Out": [pre_bias]},
                     attrs={"contextStride": int(filter_stride),
                            "contextStart": int(padding_start),
                            "contextLength": int(filter_size)})
    battr = ParamAttr._to_attr(bias_attr)
    pre_act = pre_bias
    if battr is not False:
        b = helper.create_parameter(battr, [num_filters], input.dtype, is_bias=True,
                                    default_initializer=ConstantInitializer(0.0))
        pre_act = helper.create_tmp(dtype=input.dtype, shape=[-1, num_filters])
        helper.append_op("elementwise_add", inputs={"X": [pre_bias], "Y": [b]},
                         outputs={"Out": [pre_act]}, attrs={"axis": 1})
    return helper.append_activation(pre_act, act)


def _like(helper: LayerHelper, x: Variable, stop_gradient: bool = False) -> Variable:
    return helper.create_tmp(dtype=x.dtype, shape=list(x.shape) if x.shape else None,
                             stop_gradient=stop_gradient)


def sequence_softmax(input: Variable, use_cudnn: bool = False,
                     name: str | None = None) -> Variable:
    """Softmax over the rows of every sequence of ``input`` (``[N, 1]``); keeps the LoD."""
    _check_var(input, "input", "sequence_softmax")
    helper = LayerHelper("sequence_softmax", name)
    out = _like(helper, input)
    helper.append_op("sequence_softmax", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"use_cudnn": bool(use_cudnn)})
    return out


def sequence_reverse(x: Variable, name: str | None = None) -> Variable:
    """The rows of every sequence of ``x`` in reverse order; keeps the LoD."""
    check_variable_and_dtype(x, "x", ("float32", "float64", "int8", "int32", "int64"),
                             "fluid.layers.sequence_reverse")
    _check_var(x, "x", "sequence_reverse")
    helper = LayerHelper("sequence_reverse", name)
    out = _like(helper, x)
    helper.append_op("sequence_reverse", inputs={"X": [x]}, outputs={"Y": [out]})
    return out


def sequence_concat(input: list[Variable], name: str | None = None) -> Variable:
    """Sequence ``i`` of the output is sequence ``i`` of each input, joined in order."""
    if not isinstance(input, list | tuple) or not input:
        raise TypeError("sequence_concat: input must be a non-empty list of Variables")
    for x in input:
        _check_var(x, "input", "sequence_concat")
    helper = LayerHelper("sequence_concat", name)
    out = _like(helper, input[0])
    helper.append_op("sequence_concat", inputs={"X": list(input)}, outputs={"Out": [out]})
    return out


def lod_reset(x: Variable, y: Variable | None = None,
              target_lod: list[int] | None = None) -> Variable:
    """``x`` with a new one-level LoD: ``y``'s LoD, ``y``'s values as offsets, or the
    offsets ``target_lod`` (Fluid's ``lod_reset``)."""
    check_variable_and_dtype(x, "x", ("float32", "float64", "int32", "int64"), "lod_reset")
    if y is not None:
        check_type(y, "y", Variable, "lod_reset")
    _check_var(x, "x", "lod_reset")
    helper = LayerHelper("lod_reset")
    out = _like(helper, x)
    # Fluid's LoDResetOpVarTypeInference: y's LoD levels (at least 1), else 1
    out.lod_level = max(getattr(y, "lod_level", 0) or 0, 1)
    if y is not None:
        _check_var(y, "y", "lod_reset")
        helper.append_op("lod_reset", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]})
    elif target_lod is not None:
        helper.append_op("lod_reset", inputs={"X": [x]}, outputs={"Out": [out]},
                         attrs={"target_lod": [int(v) for v in target_lod]})
    else:
        raise ValueError("lod_reset: y and target_lod should not be both none")
    return out


def sequence_mask(x: Variable, maxlen: int | Variable | None = None, dtype: str = "int64",
                  name: str | None = None) -> Variable:
    """``mask[..., j] = j < x[...]`` over ``maxlen`` columns (default: the largest length)."""
    _check_var(x, "x", "sequence_mask")
    helper = LayerHelper("sequence_mask", name)
    shape = [*x.shape, -1] if x.shape else None
    out = helper.create_tmp(dtype=dtype, shape=shape, stop_gradient=True)
    inputs = {"X": [x]}
    attrs = {"out_dtype": dtype}
    if isinstance(maxlen, Variable):
        inputs["MaxLenTensor"] = [maxlen]
    else:
        attrs["maxlen"] = -1 if maxlen is None else int(maxlen)
    helper.append_op("sequence_mask", inputs=inputs, outputs={"Y": [out]}, attrs=attrs)
    return out


def sequence_expand(x: Variable, y: Variable, ref_level: int = -1,
                    name: str | None = None) -> Variable:
    """Repeat each sequence of ``x`` (each row, without LoD) as many times as the matching
    sequence of ``y``'s LoD level ``ref_level`` (default: the last) has parts."""
    _check_var(x, "x", "sequence_expand")
    _check_var(y, "y", "sequence_expand")
    helper = LayerHelper("sequence_expand", name)
    out = _like(helper, x)
    helper.append_op("sequence_expand", inputs={"X": [x], "Y": [y]}, outputs={"Out": [out]},
                     attrs={"ref_level": int(ref_level)})
    return out


def sequence_expand_as(x: Variable, y: Variable, name: str | None = None) -> Variable:
    """Repeat row ``i`` of ``x`` as many times as sequence ``i`` of ``y`` has rows."""
    _check_var(x, "x", "sequence_expand_as")
    _check_var(y, "y", "sequence_expand_as")
    helper = LayerHelper("sequence_expand_as", name)
    out = _like(helper, x)
    helper.append_op("sequence_expand_as", inputs={"X": [x], "Y": [y]},
                     outputs={"Out": [out]})
    return out


def sequence_pad(x: Variable, pad_value: Variable, maxlen: int | None = None,
                 name: str | None = None) -> tuple[Variable, Variable]:
    """Pad every sequence of ``x`` with ``pad_value`` to ``maxlen`` rows (default: the
    longest): ``(out [num_seqs, maxlen, ...], length [num_seqs] int64)``."""
    _check_var(x, "x", "sequence_pad")
    _check_var(pad_value, "pad_value", "sequence_pad")
    helper = LayerHelper("sequence_pad", name)
    tail = list(x.shape[1:]) if x.shape else []
    out = helper.create_tmp(dtype=x.dtype, shape=[-1, -1 if maxlen is None else int(maxlen),
                                                  *tail])
    length = helper.create_tmp(dtype="int64", shape=[-1], stop_gradient=True)
    pad_value.stop_gradient = True
    helper.append_op("sequence_pad", inputs={"X": [x], "PadValue": [pad_value]},
                     outputs={"Out": [out], "Length": [length]},
                     attrs={"padded_length": -1 if maxlen is None else int(maxlen)})
    return out, length


def sequence_unpad(x: Variable, length: Variable, name: str | None = None) -> Variable:
    """The first ``length[i]`` rows of ``x[i]``, as one LoD tensor."""
    _check_var(x, "x", "sequence_unpad")
    _check_var(length, "length", "sequence_unpad")
    helper = LayerHelper("sequence_unpad", name)
    tail = list(x.shape[2:]) if x.shape else []
    if x.shape is not None and len(x.shape) == 2:
        tail = [1]  # Fluid's InferShape: a 2-D X unpads to [-1, 1]
    out = helper.create_tmp(dtype=x.dtype, shape=[-1, *tail])
    length.stop_gradient = True
    helper.append_op("sequence_unpad", inputs={"X": [x], "Length": [length]},
                     outputs={"Out": [out]})
    return out


def sequence_slice(input: Variable, offset: Variable, length: Variable,
                   name: str | None = None) -> Variable:
    """Rows ``offset[i] .. offset[i] + length[i]`` of every sequence ``i``."""
    _check_var(input, "input", "sequence_slice")
    helper = LayerHelper("sequence_slice", name)
    out = _like(helper, input)
    offset.stop_gradient = length.stop_gradient = True
    helper.append_op("sequence_slice", inputs={"X": [input], "Offset": [offset],
                                               "Length": [length]},
                     outputs={"Out": [out]})
    return out


def sequence_reshape(input: Variable, new_dim: int) -> Variable:
    """``input`` ``[N, D]`` as rows of ``new_dim``, every sequence kept whole."""
    _check_var(input, "input", "sequence_reshape")
    helper = LayerHelper("sequence_reshape")
    out = helper.create_tmp(dtype=input.dtype, shape=[-1, int(new_dim)])
    helper.append_op("sequence_reshape", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"new_dim": int(new_dim)})
    return out


def sequence_enumerate(input: Variable, win_size: int, pad_value: int = 0,
                       name: str | None = None) -> Variable:
    """For every id, the ``win_size`` ids from it on within its sequence (``pad_value``
    past the end): ``[N, win_size]``, with ``input``'s LoD."""
    _check_var(input, "input", "sequence_enumerate")
    helper = LayerHelper("sequence_enumerate", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[-1, int(win_size)], stop_gradient=True)
    helper.append_op("sequence_enumerate", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"win_size": int(win_size), "pad_value": int(pad_value)})
    return out


def _dtype_in(x: Variable, arg: str, layer: str, allowed: tuple[str, ...]) -> None:
    if str(x.dtype) not in allowed:
        raise TypeError(f"{layer}: {arg} must have dtype in {list(allowed)}, got {x.dtype}")


def row_conv(input: Variable, future_context_size: int, param_attr: Any = None,
             act: str | None = None) -> Variable:
    """The lookahead (row) convolution of DeepSpeech2, Fluid 1.8's ``layers.row_conv``:
    ``out[t] = Σ_{k=0..future_context_size} W[k] ⊙ input[t + k]`` within each sequence.

    Parameters
    ----------
    input : Variable
        A LoD tensor ``[T, D]``, or a padded ``[B, T, D]`` tensor (every row a sequence).
    future_context_size : int
        How many future steps each output sees; the filter is
        ``[future_context_size + 1, D]`` (Xavier by default).
    param_attr : ParamAttr, optional
    act : str, optional

    Returns
    -------
    Variable
        ``input``'s shape and LoD.
    """
    _check_var(input, "input", "row_conv")
    _dtype_in(input, "input", "row_conv", ("float32", "float64"))
    if isinstance(future_context_size, bool) or not isinstance(future_context_size, int) \
            or future_context_size < 0:
        raise ValueError(f"row_conv: future_context_size must be an int >= 0, got "
                         f"{future_context_size!r}")
    if not input.shape or len(input.shape) not in (2, 3) or input.shape[-1] <= 0:
        raise ValueError(f"row_conv: input must be [T, D] (LoD) or [B, T, D] with D known, got "
                         f"{input.shape}")
    attr = ParamAttr._to_attr(param_attr)
    if attr is False:
        raise ValueError("row_conv: param_attr=False leaves no filter; row_conv needs one")
    helper = LayerHelper("row_conv")
    filt = helper.create_parameter(attr, [future_context_size + 1, input.shape[-1]],
                                   input.dtype)
    out = _like(helper, input)
    helper.append_op("row_conv", inputs={"X": [input], "Filter": [filt]},
                     outputs={"Out": [out]})
    return helper.append_activation(out, act)


def _pair(v: Any, arg: str, layer: str) -> list[int]:
    vals = [v, v] if isinstance(v, int) and not isinstance(v, bool) else list(v)
    if len(vals) != 2 or not all(isinstance(a, int) and a > 0 for a in vals):
        raise ValueError(f"{layer}: {arg} must be a positive int or a pair of them, got {v!r}")
    return vals


def im2sequence(input: Variable, filter_size: int | list[int] = 1, stride: int | list[int] = 1,
                padding: int | list[int] = 0, input_image_size: Variable | None = None,
                out_stride: int | list[int] = 1, name: str | None = None) -> Variable:
    """Every ``filter_size`` patch of each NCHW image as one row, the patches of an image one
    sequence (Fluid 1.8's ``layers.im2sequence``, im2col in patch-major order).

    Parameters
    ----------
    input : Variable
        ``[N, C, H, W]``.
    filter_size, stride : int or (int, int)
        Patch height/width and the step between patches.
    padding : int, (pad_h, pad_w) or (up, left, down, right)
        Zeros around the image.
    input_image_size : Variable, optional
        ``[N, 2]`` real (height, width) of each image; with more than one image, image ``i``
        contributes only the patches of its real size divided by ``out_stride`` (rounded up).
    out_stride : int or (int, int)
        Used only with ``input_image_size``.
    name : str, optional

    Returns
    -------
    Variable
        A LoD tensor ``[Σ out_h·out_w, C·kh·kw]``, ``out = (size + pads - kernel) / stride + 1``.
    """
    _check_var(input, "input", "im2sequence")
    if not input.shape or len(input.shape) != 4:
        raise ValueError(f"im2sequence: input must be 4-D NCHW, got shape {input.shape}")
    kernels = _pair(filter_size, "filter_size", "im2sequence")
    strides = _pair(stride, "stride", "im2sequence")
    pads = [padding, padding] if isinstance(padding, int) else list(padding)
    if len(pads) == 2:  # (pad_h, pad_w): the same at both ends
        pads = pads + pads
    if len(pads) != 4 or not all(isinstance(p, int) and p >= 0 for p in pads):
        raise ValueError(f"im2sequence: padding must be an int >= 0, or 2 or 4 of them, got "
                         f"{padding!r}")
    inputs = {"X": [input]}
    attrs: dict = {"kernels": kernels, "strides": strides, "paddings": pads}
    if input_image_size is not None:
        _check_var(input_image_size, "input_image_size", "im2sequence")
        inputs["Y"] = [input_image_size]
        attrs["out_stride"] = _pair(out_stride, "out_stride", "im2sequence")
    helper = LayerHelper("im2sequence", name)
    c = input.shape[1]
    out = helper.create_tmp(dtype=input.dtype,
                            shape=[-1, c * kernels[0] * kernels[1] if c > 0 else -1])
    helper.append_op("im2sequence", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def sequence_scatter(input: Variable, index: Variable, updates: Variable,
                     name: str | None = None) -> Variable:
    """``input`` with ``updates[r]`` added at column ``index[r]`` of row ``i`` for every row
    ``r`` of the ``i``-th sequence of ``index`` (Fluid 1.8's ``layers.sequence_scatter``).

    Parameters
    ----------
    input : Variable
        ``[M, ...]`` (a row is flattened to find the column).
    index : Variable
        int64 ``[N, 1]`` with one LoD level; its ``i``-th sequence updates row ``i``.
    updates : Variable
        ``[N, 1]`` with ``index``'s LoD.
    name : str, optional

    Returns
    -------
    Variable
        ``input``'s shape, no LoD.
    """
    _check_var(input, "input", "sequence_scatter")
    _check_var(index, "index", "sequence_scatter")
    _check_var(updates, "updates", "sequence_scatter")
    _dtype_in(index, "index", "sequence_scatter", ("int32", "int64"))
    helper = LayerHelper("sequence_scatter", name)
    out = _like(helper, input)
    helper.append_op("sequence_scatter",
                     inputs={"X": [input], "Ids": [index], "Updates": [updates]},
                     outputs={"Out": [out]})
    return out


_CHUNK_SCHEMES = ("IOB", "IOE", "IOBES", "plain")


def chunk_eval(input: Variable, label: Variable, chunk_scheme: str, num_chunk_types: int,
               excluded_chunk_types: list[int] | None = None,
               seq_length: Variable | None = None) -> tuple[Variable, ...]:
    """Precision, recall and F1 of chunk detection (Fluid 1.8's ``layers.chunk_eval``).

    Parameters
    ----------
    input, label : Variable
        int64 tag ids, predicted and true: LoD tensors ``[T, 1]`` with the same LoD, or padded
        ``[N, M]`` / ``[N, M, 1]`` with ``seq_length``. Id ``type * num_tag_types + tag`` (tags
        of the scheme: IOB B=0 I=1, IOE I=0 E=1, IOBES B=0 I=1 E=2 S=3, plain one tag); id
        ``num_chunk_types * num_tag_types`` is outside every chunk.
    chunk_scheme : str
        ``"IOB"``, ``"IOE"``, ``"IOBES"`` or ``"plain"``.
    num_chunk_types : int
    excluded_chunk_types : list of int, optional
        Chunk types left out of every count.
    seq_length : Variable, optional
        int64 ``[N]``, the lengths of padded inputs.

    Returns
    -------
    tuple of Variable
        ``(precision, recall, f1_score, num_infer_chunks, num_label_chunks,
        num_correct_chunks)``, each ``[1]``: float32 then int64.
    """
    _check_var(input, "input", "chunk_eval")
    _check_var(label, "label", "chunk_eval")
    _dtype_in(input, "input", "chunk_eval", ("int64",))
    _dtype_in(label, "label", "chunk_eval", ("int64",))
    if chunk_scheme not in _CHUNK_SCHEMES:
        raise ValueError(f"chunk_eval: chunk_scheme must be one of {_CHUNK_SCHEMES}, got "
                         f"{chunk_scheme!r}")
    if isinstance(num_chunk_types, bool) or not isinstance(num_chunk_types, int) \
            or num_chunk_types < 1:
        raise ValueError(f"chunk_eval: num_chunk_types must be a positive int, got "
                         f"{num_chunk_types!r}")
    helper = LayerHelper("chunk_eval")
    outs = [helper.create_tmp(dtype=dtype, shape=[1], stop_gradient=True)
            for dtype in ("float32",) * 3 + ("int64",) * 3]
    inputs = {"Inference": [input], "Label": [label]}
    if seq_length is not None:
        _check_var(seq_length, "seq_length", "chunk_eval")
        inputs["SeqLength"] = [seq_length]
    slots = ("Precision", "Recall", "F1-Score", "NumInferChunks", "NumLabelChunks",
             "NumCorrectChunks")
    helper.append_op("chunk_eval", inputs=inputs,
                     outputs={s: [v] for s, v in zip(slots, outs, strict=True)},
                     attrs={"num_chunk_types": num_chunk_types, "chunk_scheme": chunk_scheme,
                            "excluded_chunk_types": [int(t) for t in
                                                     (excluded_chunk_types or [])]})
    return tuple(outs)
