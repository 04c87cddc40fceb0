"""``fluid.contrib.layers.nn`` (Fluid 1.8): the layers built on the ops of
:mod:`dask_fluid.ops.contrib_ops`.

Implemented: ``fused_elemwise_activation``, ``shuffle_batch``, ``partial_concat``,
``partial_sum``, ``batch_fc`` and ``rank_attention``. Fluid 1.8's other contrib nn layers
(``sequence_topk_avg_pooling``, ``var_conv_2d``, ``match_matrix_tensor``, ``tree_conv``,
``fused_embedding_seq_pool``, ``multiclass_nms2``, ``search_pyramid_hash``, ``tdm_child``,
``tdm_sampler``, ``_pull_box_extended_sparse``) are absent here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import unique_name
from ...framework import Variable
from ...initializer import ConstantInitializer
from ...layer_helper import LayerHelper
from ...ops.contrib_ops import fea_parse
from ...param_attr import ParamAttr

__all__: list[str] = [
    "batch_fc", "fused_elemwise_activation", "partial_concat", "partial_sum", "rank_attention",
    "shuffle_batch",
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
