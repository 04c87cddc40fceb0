"""``fluid.contrib.layers.nn`` (Fluid 1.8): the layers built on the ops of
:mod:`dask_fluid.ops.contrib_ops`: ``fused_elemwise_activation``, ``shuffle_batch``,
``partial_concat``, ``partial_sum``, ``batch_fc``, ``rank_attention``, the LoD text-matching
layers ``match_matrix_tensor``, ``var_conv_2d``, ``sequence_topk_avg_pooling`` and
``fused_embedding_seq_pool``; ``tree_conv`` and ``multiclass_nms2`` are the ``fluid.layers``
ones (one implementation each); the tree-based-model ops ``tdm_child`` and ``tdm_sampler``.
Fluid 1.8's ``search_pyramid_hash`` and ``_pull_box_extended_sparse`` are absent (an
AttributeError).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import unique_name
from ...framework import Variable
from ...initializer import ConstantInitializer
from ...layer_helper import LayerHelper
from ...layers import multiclass_nms2, tree_conv
from ...ops.contrib_ops import fea_parse
from ...param_attr import ParamAttr

__all__: list[str] = [
    "batch_fc", "fused_elemwise_activation", "multiclass_nms2", "partial_concat", "partial_sum",
    "rank_attention", "shuffle_batch", "tree_conv",
]


def _check_var(x: Any, arg: str, layer: str) -> Variable:
    if not isinstance(x, Variable):
        raise TypeError(f"{layer}: {arg} must be a Variable, got {type(x).__name__}")
    return x


def _check_float(x: Variable, arg: str, layer: str) -> None:
    if str(x.dtype) not in ("float32", "float64"):
        raise TypeError(f"{layer}: {arg} must be float32 or float64, got {x.dtype}")


def _bcast_y(xs: tuple, ys: tuple) -> bool:
    """Fluid's IsBcastY on static shapes (-1 compares as unknown, i.e. as large)."""
    if len(xs) != len(ys):
        return len(xs) > len(ys)
    return all(a < 0 or (b >= 0 and a >= b) for a, b in zip(xs, ys, strict=True))


def fused_elemwise_activation(x: Variable, y: Variable, functor_list: Sequence[str] | str,
                              axis: int = -1, scale: float = 0.0,
                              save_intermediate_out: bool = True) -> Variable:
    """``Unary(Binary(x, y))`` or ``Binary(x, Unary(y))`` in one op, as Fluid 1.8's
    ``fluid.contrib.layers.fused_elemwise_activation``.

    Parameters
    ----------
    x, y : Variable
        The binary functor's operands; the smaller broadcasts onto the larger at ``axis``, as
        in ``elementwise_add``.
    functor_list : list of 2 str, or a comma-separated str
        ``[binary, unary]`` for ``Binary(x, Unary(y))`` or ``[unary, binary]`` for
        ``Unary(Binary(x, y))``; binary is ``elementwise_add`` or ``elementwise_mul``, unary
        ``scale``, ``relu``, ``tanh`` or ``sigmoid``.
    axis : int
        Where the smaller operand aligns (-1: at the end).
    scale : float
        The ``scale`` functor's factor.
    save_intermediate_out : bool
        Keep the intermediate result (``Unary(y)`` or ``Binary(x, y)``) for the backward pass
        instead of recomputing it there.

    Returns
    -------
    Variable
        The result, of the larger operand's shape.
    """
    _check_var(x, "x", "fused_elemwise_activation")
    _check_var(y, "y", "fused_elemwise_activation")
    if isinstance(functor_list, str):
        functor_list = functor_list.split(",")
    if not isinstance(functor_list, (list, tuple)) or len(functor_list) != 2:
        raise ValueError("fused_elemwise_activation: functor_list should be a list of str of "
                         f"length 2, got {functor_list!r}")
    functor_list = list(functor_list)
    unary_compound, _, _ = fea_parse(functor_list)
    xs, ys = tuple(x.shape or ()), tuple(y.shape or ())
    out_shape = xs if _bcast_y(xs, ys) else ys
    helper = LayerHelper("fused_elemwise_activation")
    out = helper.create_tmp(dtype=x.dtype, shape=out_shape)
    inter = helper.create_tmp(dtype=x.dtype, shape=out_shape if unary_compound else ys)
    helper.append_op("fused_elemwise_activation", inputs={"X": [x], "Y": [y]},
                     outputs={"Out": [out], "IntermediateOut": [inter]},
                     attrs={"axis": int(axis), "scale": float(scale),
                            "save_intermediate_out": bool(save_intermediate_out),
                            "functor_list": functor_list})
    return out


def shuffle_batch(x: Variable, seed: int | Variable | None = None) -> Variable:
    """``x``'s rows (every dim but the last flattened) in a random order, as Fluid 1.8's
    ``fluid.contrib.layers.shuffle_batch``.

    Parameters
    ----------
    x : Variable
        The tensor to shuffle, shape ``[N1, ..., Nk, D]``.
    seed : int, Variable or None
        The first seed of the shuffle engine. None: the main program's ``random_seed`` when it
        is not 0, else a random int in [-65536, 65535). An int is kept in a new persistable
        int64 variable ``shuffle_batch_seed_N`` (set to it by the startup program); a Variable
        (int64 ``[1]``) is used directly. The op writes the engine's next seed back into that
        variable, so each run shuffles differently, reproducibly from the first seed.

    Returns
    -------
    Variable
        The shuffled tensor, of ``x``'s shape and LoD. The permutation is numpy's (PCG64)
        for the seed, not the order Paddle's ``std::default_random_engine`` gives.
    """
    _check_var(x, "x", "shuffle_batch")
    helper = LayerHelper("shuffle_batch")
    if seed is None and helper.main_program.random_seed != 0:
        seed = helper.main_program.random_seed
    if seed is None:
        seed = int(np.random.randint(-65536, 65535))
    attrs = {}
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        attrs["startup_seed"] = int(seed)
        seed_var = helper.main_program.global_block().create_var(
            name=unique_name.generate("shuffle_batch_seed"), dtype="int64", shape=[1],
            persistable=True, stop_gradient=True)
        # Fluid's op reads startup_seed while the variable is uninitialised; starting the
        # variable at startup_seed gives the same first shuffle
        helper.set_variable_initializer(seed_var, ConstantInitializer(float(seed)))
    elif isinstance(seed, Variable):
        seed_var = seed
    else:
        raise TypeError(f"shuffle_batch: seed must be None, an int or a Variable, got "
                        f"{type(seed).__name__}")
    out = helper.create_tmp(dtype=x.dtype, shape=x.shape)
    idx = helper.create_tmp(dtype="int64", shape=[-1], stop_gradient=True)
    helper.append_op("shuffle_batch", inputs={"X": [x], "Seed": [seed_var]},
                     outputs={"Out": [out], "ShuffleIdx": [idx], "SeedOut": [seed_var]},
                     attrs=attrs)
    return out


def _partial(op: str, input: Any, start_index: int, length: int) -> Variable:
    if isinstance(input, Variable):
        input = [input]
    if not isinstance(input, (list, tuple)) or not input:
        raise TypeError(f"{op}: input must be a non-empty list of Variables, got "
                        f"{type(input).__name__}")
    for i, v in enumerate(input):
        _check_var(v, f"input[{i}]", op)
        if str(v.dtype) not in ("float32", "float64", "int32", "int64"):
            raise TypeError(f"{op}: input[{i}] must be float32, float64, int32 or int64, got "
                            f"{v.dtype}")
    for arg, v in (("start_index", start_index), ("length", length)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{op}: {arg} must be an int, got {type(v).__name__}")
    shape = tuple(input[0].shape or ())
    if len(shape) != 2:
        raise ValueError(f"{op}: input[0] must be 2-D [batch, len], got shape {list(shape)}")
    cols = shape[1]
    width = -1
    if cols >= 0:
        if not -cols <= start_index < cols:
            raise ValueError(f"{op}: start_index must be in [-{cols}, {cols}), got "
                             f"{start_index}")
        start = start_index + cols if start_index < 0 else start_index
        if length >= 0 and start + length > cols:
            raise ValueError(f"{op}: start_index + length ({start} + {length}) exceeds the "
                             f"{cols} columns of the inputs")
        width = length if length >= 0 else cols - start
    elif length >= 0:
        width = length
    if op == "partial_concat" and width >= 0:
        width *= len(input)
    helper = LayerHelper(op)
    out = helper.create_tmp(dtype=input[0].dtype, shape=[shape[0], width])
    helper.append_op(op, inputs={"X": list(input)}, outputs={"Out": [out]},
                     attrs={"start_index": start_index, "length": length})
    return out


def partial_concat(input: Sequence[Variable], start_index: int = 0,
                   length: int = -1) -> Variable:
    """Columns ``[start_index, start_index + length)`` of every input, concatenated along
    dim 1, as Fluid 1.8's ``fluid.contrib.layers.partial_concat``.

    Parameters
    ----------
    input : list of Variable
        2-D ``[batch, len]`` tensors of one shape (float32/64, int32/64).
    start_index : int
        First column; negative counts from the end.
    length : int
        Columns taken from each input; negative: all after ``start_index``.

    Returns
    -------
    Variable
        ``[batch, length * len(input)]``.
    """
    return _partial("partial_concat", input, start_index, length)


def partial_sum(input: Sequence[Variable], start_index: int = 0, length: int = -1) -> Variable:
    """The sum of columns ``[start_index, start_index + length)`` of the inputs, as Fluid
    1.8's ``fluid.contrib.layers.partial_sum``.

    Parameters
    ----------
    input : list of Variable
        2-D ``[batch, len]`` tensors of one shape (float32/64, int32/64).
    start_index : int
        First column; negative counts from the end.
    length : int
        Columns summed; negative: all after ``start_index``.

    Returns
    -------
    Variable
        ``[batch, length]``.
    """
    return _partial("partial_sum", input, start_index, length)


def batch_fc(input: Variable, param_size: Sequence[int], param_attr: Any,
             bias_size: Sequence[int], bias_attr: Any, act: str | None = None) -> Variable:
    """One fully connected layer per slot, ``out[s] = input[s] @ w[s] + b[s]``, as Fluid
    1.8's ``fluid.contrib.layers.batch_fc``.

    Parameters
    ----------
    input : Variable
        ``[slots, ins, in]``, float32 or float64.
    param_size : list of 3 int
        W's shape ``[slots, in, out]``.
    param_attr : ParamAttr or None
        W's attribute.
    bias_size : list of 2 int
        Bias' shape ``[slots, out]``.
    bias_attr : ParamAttr or None
        Bias' attribute (Fluid creates it as a weight, not a bias: Xavier by default).
    act : str or None
        Activation appended to the result.

    Returns
    -------
    Variable
        ``[slots, ins, out]``.
    """
    _check_var(input, "input", "batch_fc")
    _check_float(input, "input", "batch_fc")
    shape = list(input.shape or ())
    param_size, bias_size = list(param_size), list(bias_size)
    if len(shape) != 3 or len(param_size) != 3 or len(bias_size) != 2:
        raise ValueError(f"batch_fc: input must be 3-D, param_size 3 ints and bias_size 2 ints, "
                         f"got input shape {shape}, param_size {param_size}, bias_size "
                         f"{bias_size}")
    if (shape[0] != param_size[0] or shape[2] != param_size[1]
            or param_size[2] != bias_size[1] or shape[0] != bias_size[0]):
        raise ValueError(f"batch_fc: input shape {shape}, param_size {param_size} and "
                         f"bias_size {bias_size} must satisfy input[0] == param_size[0] == "
                         "bias_size[0], input[2] == param_size[1], param_size[2] == "
                         "bias_size[1]")
    helper = LayerHelper("batch_fc")
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), param_size, input.dtype)
    b = helper.create_parameter(ParamAttr._to_attr(bias_attr), bias_size, input.dtype)
    pre = helper.create_tmp(dtype=input.dtype, shape=[shape[0], shape[1], param_size[2]])
    helper.append_op("batch_fc", inputs={"Input": [input], "W": [w], "Bias": [b]},
                     outputs={"Out": [pre]})
    return helper.append_activation(pre, act)


def rank_attention(input: Variable, rank_offset: Variable, rank_param_shape: Sequence[int],
                   rank_param_attr: Any, max_rank: int = 3, max_size: int = 0) -> Variable:
    """Rank attention between the instances of a page view, as Fluid 1.8's
    ``fluid.contrib.layers.rank_attention``.

    Parameters
    ----------
    input : Variable
        ``[N, C]``, float32 or float64.
    rank_offset : Variable
        int32 ``[N, 2 * max_rank + 1]``: each instance's rank, then (rank, row in ``input``)
        of the instances of its page view (see :mod:`dask_fluid.ops.contrib_ops`).
    rank_param_shape : list of 2 int
        ``[C * max_rank * max_rank, P]``.
    rank_param_attr : ParamAttr or None
        The rank parameter's attribute.
    max_rank : int
        The largest rank.
    max_size : int
        The CUDA kernel's work-buffer size hint; it does not change the result.

    Returns
    -------
    Variable
        ``[N, P]``.
    """
    _check_var(input, "input", "rank_attention")
    _check_var(rank_offset, "rank_offset", "rank_attention")
    _check_float(input, "input", "rank_attention")
    shape = list(input.shape or ())
    rank_param_shape = list(rank_param_shape)
    if len(shape) != 2 or len(rank_param_shape) != 2:
        raise ValueError(f"rank_attention: input must be 2-D and rank_param_shape 2 ints, got "
                         f"{shape} and {rank_param_shape}")
    if not isinstance(max_rank, int) or max_rank < 1:
        raise ValueError(f"rank_attention: max_rank must be a positive int, got {max_rank!r}")
    if shape[1] * max_rank * max_rank != rank_param_shape[0]:
        raise ValueError(f"rank_attention: rank_param_shape[0] must be input.shape[1] * "
                         f"max_rank² = {shape[1] * max_rank * max_rank}, got "
                         f"{rank_param_shape[0]}")
    helper = LayerHelper("rank_attention")
    param = helper.create_parameter(ParamAttr._to_attr(rank_param_attr), rank_param_shape,
                                    input.dtype)
    out = helper.create_tmp(dtype=input.dtype, shape=[shape[0], rank_param_shape[1]])
    input_help = helper.create_tmp(dtype=input.dtype, shape=[shape[0], max_rank * shape[1]],
                                   stop_gradient=True)
    ins_rank = helper.create_tmp(dtype=input.dtype, shape=[shape[0], 1], stop_gradient=True)
    helper.append_op("rank_attention",
                     inputs={"X": [input], "RankOffset": [rank_offset], "RankParam": [param]},
                     outputs={"Out": [out], "InputHelp": [input_help], "InsRank": [ins_rank]},
                     attrs={"MaxRank": max_rank, "MaxSize": max_size})
    return out


# -- the LoD contrib layers (MMDNN's text-matching ops) and fused_embedding_seq_pool -------------

__all__ += ["fused_embedding_seq_pool", "match_matrix_tensor", "sequence_topk_avg_pooling",
            "var_conv_2d"]


def _check_name(name: str | None, layer: str) -> None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"{layer}: name must be a str or None, got {type(name).__name__}")


def _check_lod_level(x: Variable, arg: str, layer: str, exact: bool = False) -> None:
    """Fluid's compile-time LoD check (>= 1, or == 1 with ``exact``)."""
    level = int(getattr(x, "lod_level", 0))
    if (level != 1) if exact else (level < 1):
        want = "1" if exact else ">= 1"
        raise ValueError(f"{layer}: {arg} must be a LoD tensor (lod_level {want}), got "
                         f"lod_level {level}; declare the data layer with lod_level=1")


def _int_pair(value: Any, arg: str, layer: str) -> list[int]:
    """Fluid's ``utils.convert_to_list(value, 2, arg)``."""
    values = list(value) if isinstance(value, (list, tuple)) else [value, value]
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool)
                                   for v in values):
        raise ValueError(f"{layer}: {arg} must be an int or a pair of ints, got {value!r}")
    return [int(v) for v in values]


def match_matrix_tensor(x: Variable, y: Variable, channel_num: int, act: str | None = None,
                        param_attr: Any = None, dtype: str = "float32",
                        name: str | None = None) -> tuple[Variable, Variable]:
    """The matching matrices ``x_b · W · y_b^T`` of the sequence pairs of ``x`` and ``y``, as
    Fluid 1.8's ``fluid.contrib.layers.match_matrix_tensor``.

    Parameters
    ----------
    x, y : Variable
        1-level LoD tensors ``[N_x, h]`` and ``[N_y, h]`` with as many sequences each; pair
        b is x's b-th sequence (length n) and y's b-th (length m).
    channel_num : int
        The channels of the parameter W, ``[h, channel_num, h]``.
    act : str or None
        Activation appended to the result.
    param_attr : ParamAttr or None
        W's attribute (Xavier by default, as Fluid's ``create_parameter``).
    dtype : str
        W's and the output's dtype.
    name : str or None
        The layer's name (W is ``<name>.w_0``).

    Returns
    -------
    (Variable, Variable)
        The result, ``[Σ channel_num · n · m, 1]`` with one sequence per pair (channel t's
        ``n x m`` matrix row-major after channel t - 1's), and the intermediate ``x · W``
        (``Tmp``, ``[N_x · channel_num · h, 1]``).
    """
    layer = "match_matrix_tensor"
    _check_var(x, "x", layer)
    _check_var(y, "y", layer)
    _check_name(name, layer)
    xs, ys = list(x.shape or ()), list(y.shape or ())
    if len(xs) != 2 or len(ys) != 2 or xs[-1] != ys[-1]:
        raise ValueError(f"{layer}: x and y must be 2-D with the same width, got shapes {xs} "
                         f"and {ys}")
    if not isinstance(channel_num, int) or channel_num < 1:
        raise ValueError(f"{layer}: channel_num must be a positive int, got {channel_num!r}")
    _check_lod_level(x, "x", layer)
    _check_lod_level(y, "y", layer)
    helper = LayerHelper(layer, name)
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), [xs[-1], channel_num, ys[-1]],
                                dtype)
    out = helper.create_tmp(dtype=dtype, shape=[-1, 1])
    out.lod_level = 1  # Fluid's compile-time InferShape shares X's LoD with Out
    tmp = helper.create_tmp(dtype=dtype, shape=[-1, 1], stop_gradient=True)
    helper.append_op(layer, inputs={"X": [x], "Y": [y], "W": [w]},
                     outputs={"Out": [out], "Tmp": [tmp]}, attrs={"dim_t": channel_num})
    return helper.append_activation(out, act), tmp


def sequence_topk_avg_pooling(input: Variable, row: Variable, col: Variable,
                              topks: Sequence[int], channel_num: int) -> Variable:
    """For every row of every channel of every variable-size image of ``input``, the averages
    of its ``k`` largest values for each ``k`` in ``topks``, as Fluid 1.8's
    ``fluid.contrib.layers.sequence_topk_avg_pooling``.

    Parameters
    ----------
    input : Variable
        A 1-level LoD tensor ``[N, 1]``: sequence b is ``channel_num`` images of
        ``row``'s b-th length by ``col``'s b-th length, channel after channel, row-major.
    row, col : Variable
        1-level LoD tensors whose sequence lengths give the images' heights and widths
        (their values are not read).
    topks : list of int
        Increasing positive ks. A row shorter than k sums what it has and still divides by k.
    channel_num : int
        The channels of each image.

    Returns
    -------
    Variable
        ``[row rows, channel_num · len(topks)]`` with ``row``'s LoD; column
        ``c · len(topks) + i`` holds channel c's top-``topks[i]`` average.
    """
    layer = "sequence_topk_avg_pooling"
    for v, arg in ((input, "input"), (row, "row"), (col, "col")):
        _check_var(v, arg, layer)
    topks = [int(k) for k in topks] if isinstance(topks, (list, tuple)) else topks
    if (not isinstance(topks, list) or not topks
            or any(k < 1 for k in topks) or sorted(topks) != topks):
        raise ValueError(f"{layer}: topks must be a non-empty increasing list of positive "
                         f"ints, got {topks!r}")
    if not isinstance(channel_num, int) or channel_num < 1:
        raise ValueError(f"{layer}: channel_num must be a positive int, got {channel_num!r}")
    helper = LayerHelper(layer)
    out = helper.create_tmp(dtype=input.dtype, shape=[-1, channel_num * len(topks)])
    out.lod_level = int(getattr(row, "lod_level", 1)) or 1  # ShareLoD("ROW", "Out")
    # Fluid declares pos with input's dtype although its kernel writes int32 positions
    pos = helper.create_tmp(dtype=input.dtype, shape=[-1], stop_gradient=True)
    helper.append_op(layer, inputs={"X": [input], "ROW": [row], "COLUMN": [col]},
                     outputs={"Out": [out], "pos": [pos]},
                     attrs={"topks": topks, "channel_num": channel_num})
    return out


def var_conv_2d(input: Variable, row: Variable, col: Variable, input_channel: int,
                output_channel: int, filter_size: int | Sequence[int],
                stride: int | Sequence[int] = 1, param_attr: Any = None, act: str | None = None,
                dtype: str = "float32", name: str | None = None) -> Variable:
    """A "same"-padded 2-D convolution of variable-size images, as Fluid 1.8's
    ``fluid.contrib.layers.var_conv_2d``.

    Parameters
    ----------
    input : Variable
        A 1-level LoD tensor ``[N, 1]``: sequence b is an ``input_channel`` x H x W image
        (H, W: ``row``'s and ``col``'s b-th sequence lengths), channel-major, row-major.
    row, col : Variable
        1-level LoD tensors giving the heights and widths (their values are not read).
    input_channel, output_channel : int
        The images' and the result's channels.
    filter_size, stride : int or pair of int
        ``(H, W)`` of the kernel and of the stride; an image is padded by
        ``filter_size // 2`` before (and the rest after), so its output is
        ``((H - 1) // stride_h + 1) x ((W - 1) // stride_w + 1)``.
    param_attr : ParamAttr or None
        The filter's attribute, ``[output_channel, input_channel · fh · fw]`` (Xavier by
        default, as Fluid's ``create_parameter``).
    act : str or None
        Activation appended to the result.
    dtype : str
        The filter's and the output's dtype.
    name : str or None
        The layer's name.

    Returns
    -------
    Variable
        ``[Σ output_channel · OH · OW, 1]``, one sequence per image.
    """
    layer = "var_conv_2d"
    for v, arg in ((input, "input"), (row, "row"), (col, "col")):
        _check_var(v, arg, layer)
    _check_name(name, layer)
    if len(list(input.shape or ())) != 2:
        raise ValueError(f"{layer}: input must be 2-D ([N, 1]), got shape {input.shape}")
    for v, arg in ((input_channel, "input_channel"), (output_channel, "output_channel")):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{layer}: {arg} must be a positive int, got {v!r}")
    fs = _int_pair(filter_size, "filter_size", layer)
    st = _int_pair(stride, "stride", layer)
    if min(fs + st) < 1:
        raise ValueError(f"{layer}: filter_size and stride must be positive, got {fs}, {st}")
    helper = LayerHelper(layer, name)
    w = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                [output_channel, input_channel * fs[0] * fs[1]], dtype)
    out = helper.create_tmp(dtype=dtype, shape=[-1, 1])
    col_res = helper.create_tmp(dtype=dtype, shape=[-1, 1], stop_gradient=True)
    helper.append_op(layer, inputs={"X": [input], "ROW": [row], "COLUMN": [col], "W": [w]},
                     outputs={"Out": [out], "Col": [col_res]},
                     attrs={"InputChannel": input_channel, "OutputChannel": output_channel,
                            "StrideH": st[0], "StrideW": st[1], "KernelH": fs[0],
                            "KernelW": fs[1]})
    return helper.append_activation(out, act)


def fused_embedding_seq_pool(input: Variable, size: Sequence[int], is_sparse: bool = False,
                             padding_idx: int | None = None, combiner: str = "sum",
                             param_attr: Any = None, dtype: str = "float32") -> Variable:
    """An embedding lookup summed over each sequence in one op, as Fluid 1.8's
    ``fluid.contrib.layers.fused_embedding_seq_pool``.

    Parameters
    ----------
    input : Variable
        int64 ids, a 1-level LoD tensor ``[N, 1]`` (or ``[N, ..., 1]``: several ids a row,
        their embeddings side by side).
    size : list of 2 int
        The table's shape ``[vocabulary, D]``.
    is_sparse : bool
        Give the table a SelectedRows gradient (one row per id) instead of a dense one.
    padding_idx : int or None
        Ids equal to it add nothing (and get no gradient); negative counts from
        ``size[0]``; None: none.
    combiner : str
        ``'sum'``, the only one Fluid 1.8 supports.
    param_attr : ParamAttr or None
        The table's attribute (Xavier by default).
    dtype : str
        The table's and the output's dtype.

    Returns
    -------
    Variable
        ``[num_sequences, D · ids per row]``, no LoD.
    """
    layer = "fused_embedding_seq_pool"
    _check_var(input, "input", layer)
    if combiner != "sum":
        raise NotImplementedError(f"{layer}(combiner={combiner!r}) is not implemented in "
                                  "dask_fluid (Fluid 1.8 supports only 'sum')")
    size = list(size)
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"{layer}: size must be 2 positive ints [vocabulary, D], got {size}")
    shape = list(input.shape or ())
    if not shape or shape[-1] != 1:
        raise ValueError(f"{layer}: the last dimension of input must be 1, got shape {shape}")
    if str(input.dtype) not in ("int64", "int32"):
        raise TypeError(f"{layer}: input must hold int64 ids, got {input.dtype}")
    _check_lod_level(input, "input", layer, exact=True)
    if padding_idx is None:
        pad = -1
    elif not isinstance(padding_idx, int) or not -size[0] <= padding_idx < size[0]:
        raise ValueError(f"{layer}: padding_idx must be None or an int in "
                         f"[-{size[0]}, {size[0]}), got {padding_idx!r}")
    else:
        pad = padding_idx if padding_idx >= 0 else size[0] + padding_idx
    width = size[1] * int(np.prod([d for d in shape[1:]])) if all(
        d > 0 for d in shape[1:]) else -1
    helper = LayerHelper(layer)
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), size, dtype)
    out = helper.create_tmp(dtype=dtype, shape=[-1, width])
    helper.append_op(layer, inputs={"Ids": [input], "W": [w]}, outputs={"Out": [out]},
                     attrs={"is_sparse": bool(is_sparse), "combiner": combiner,
                            "padding_idx": pad})
    return out


# -- Tree-based Deep Model (TDM) ----------------------------------------------------------------
def _tdm_dtype(dtype: Any, arg: str, layer: str) -> str:
    name = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    if name not in ("int32", "int64"):
        raise TypeError(f"{layer}: {arg} must be int32 or int64, got {dtype!r}")
    return name


def tdm_child(x: Variable, node_nums: int, child_nums: int, param_attr: Any = None,
              dtype: str = "int32") -> tuple[Variable, Variable]:
    """The children of tree nodes and whether each is an item (a leaf), as Fluid 1.8's
    ``fluid.contrib.layers.tdm_child`` (op ``tdm_child``, no gradient).

    Parameters
    ----------
    x : Variable
        int32/int64 node ids, each in ``[0, node_nums)``.
    node_nums : int
        Number of nodes of the tree.
    child_nums : int
        Most children a node has.
    param_attr : ParamAttr or None
        The tree-info parameter ``[node_nums, 3 + child_nums]`` (zeros by default; give it
        with a ``NumpyArrayInitializer``): per node its item id (0 unless a leaf), layer id,
        parent id and ``child_nums`` child ids padded with 0.
    dtype : str
        ``'int32'`` or ``'int64'``: the tree info's and the outputs' dtype.

    Returns
    -------
    tuple of (Variable, Variable)
        ``(child, leaf_mask)``, both ``x.shape + [child_nums]``: the children (zeros for node 0
        and for nodes without children) and 1 where a child is an item.
    """
    layer = "tdm_child"
    _check_var(x, "x", layer)
    dtype = _tdm_dtype(dtype, "dtype", layer)
    for v, arg in ((node_nums, "node_nums"), (child_nums, "child_nums")):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{layer}: {arg} must be a positive int, got {v!r}")
    helper = LayerHelper(layer)
    tree_info = helper.create_parameter(ParamAttr._to_attr(param_attr),
                                        [node_nums, 3 + child_nums], dtype,
                                        default_initializer=ConstantInitializer(0.0))
    tree_info.stop_gradient = True
    shape = [*(x.shape or [-1]), child_nums]
    child = helper.create_tmp(dtype=dtype, shape=shape, stop_gradient=True)
    leaf_mask = helper.create_tmp(dtype=dtype, shape=shape, stop_gradient=True)
    helper.append_op(layer, inputs={"X": [x], "TreeInfo": [tree_info]},
                     outputs={"Child": [child], "LeafMask": [leaf_mask]},
                     attrs={"child_nums": child_nums, "dtype": dtype})
    return child, leaf_mask


def tdm_sampler(x: Variable, neg_samples_num_list: Sequence[int],
                layer_node_num_list: Sequence[int], leaf_node_num: int,
                tree_travel_attr: Any = None, tree_layer_attr: Any = None,
                output_positive: bool = True, output_list: bool = True, seed: int = 0,
                tree_dtype: str = "int32", dtype: str = "int32") -> tuple:
    """Layer-by-layer negative sampling on a tree for each positive item, as Fluid 1.8's
    ``fluid.contrib.layers.tdm_sampler`` (op ``tdm_sampler``, no gradient).

    For each id of ``x`` (an item, i.e. a row of the travel table) and each layer ``l``: the
    item's ancestor on that layer (label 1) when ``output_positive``, then
    ``neg_samples_num_list[l]`` distinct other nodes of the layer drawn uniformly (label 0).
    A 0 in the travel path pads a shorter path: zeros with mask 0.

    Parameters
    ----------
    x : Variable
        int32/int64 item ids ``[N, 1]``, each in ``[0, leaf_node_num)``.
    neg_samples_num_list : list of int
        Negatives per layer, each below that layer's node count.
    layer_node_num_list : list of int
        Nodes per layer (the root excluded), as long as ``neg_samples_num_list``.
    leaf_node_num : int
        Number of items; below the total node count.
    tree_travel_attr : ParamAttr or None
        The travel parameter ``[leaf_node_num, layers]``: each item's path, root excluded
        (zeros by default).
    tree_layer_attr : ParamAttr or None
        The layer parameter ``[total nodes, 1]``: the nodes layer after layer.
    output_positive : bool
        Put each layer's positive first.
    output_list : bool
        Return one ``[N, k, 1]`` slice per layer instead of the whole ``[N, width]`` outputs.
    seed : int
        Non-zero: every run draws the same samples (Fluid builds its samplers from it at each
        run, one per layer); 0: a stream seeded by the program's ``random_seed``.
    tree_dtype, dtype : str
        ``'int32'`` or ``'int64'``: the tree parameters' and the outputs' dtype.

    Returns
    -------
    tuple
        ``(out, labels, mask)``: Variables ``[N, width]``, or lists of per-layer Variables when
        ``output_list``.

    Raises
    ------
    ValueError
        The two lists differ in length, a layer asks for as many negatives as it has nodes or
        more, or ``leaf_node_num`` is not below the total node count.
    """
    layer = "tdm_sampler"
    _check_var(x, "x", layer)
    tree_dtype = _tdm_dtype(tree_dtype, "tree_dtype", layer)
    dtype = _tdm_dtype(dtype, "dtype", layer)
    negs, nodes = [int(n) for n in neg_samples_num_list], [int(n) for n in layer_node_num_list]
    if len(negs) != len(nodes):
        raise ValueError(
            "The shape of negative samples list must match the shape of layers. But received "
            f"len of neg_samples_num_list: {len(negs)}, and len of layer_node_num_list: "
            f"{len(nodes)}, please check your input.")
    if leaf_node_num is None:
        raise ValueError(f"{layer}: leaf_node_num should not be None")
    offsets = [0]
    for i, (n, k) in enumerate(zip(negs, nodes, strict=True)):
        offsets.append(offsets[-1] + k)
        if n >= k:
            raise ValueError(
                "The number of negative samples must be less than the number of nodes in the "
                f"layer {i}, But received negative nums {n}, and num of node at layer {i} is "
                f"{k}, please check your input.")
    if not leaf_node_num < offsets[-1]:
        raise ValueError(f"{layer}: leaf_node_num must be less than total node nums "
                         f"({offsets[-1]}), got {leaf_node_num}")
    helper = LayerHelper(layer)
    travel = helper.create_parameter(ParamAttr._to_attr(tree_travel_attr),
                                     [leaf_node_num, len(negs)], tree_dtype,
                                     default_initializer=ConstantInitializer(0.0))
    tree_layer = helper.create_parameter(ParamAttr._to_attr(tree_layer_attr), [offsets[-1], 1],
                                         tree_dtype, default_initializer=ConstantInitializer(0.0))
    travel.stop_gradient = tree_layer.stop_gradient = True
    positive = int(bool(output_positive))
    width = sum(n + positive for n in negs)
    out, labels, mask = (helper.create_tmp(dtype=dtype, shape=[-1, width], stop_gradient=True)
                         for _ in range(3))
    helper.append_op(layer, inputs={"X": [x], "Travel": [travel], "Layer": [tree_layer]},
                     outputs={"Out": [out], "Labels": [labels], "Mask": [mask]},
                     attrs={"neg_samples_num_list": negs, "output_positive": bool(output_positive),
                            "layer_offset_lod": offsets, "seed": int(seed), "dtype": dtype})
    if not output_list:
        return out, labels, mask
    from ... import layers as fl  # the fluid.layers slice/reshape, as Fluid's layer uses

    lists: tuple[list, list, list] = ([], [], [])
    start = 0
    for n in negs:
        end = start + n + positive
        for src, dst in zip((out, labels, mask), lists, strict=True):
            part = fl.reshape(fl.slice(src, axes=[1], starts=[start], ends=[end]),
                              [-1, n + positive, 1])
            part.stop_gradient = True
            dst.append(part)
        start = end
    return lists


__all__ += ["tdm_child", "tdm_sampler"]
