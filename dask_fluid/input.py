"""``fluid.embedding`` and ``fluid.one_hot`` (Fluid 1.8's ``fluid/input.py``).

Unlike ``layers.embedding`` and ``layers.one_hot``, whose ids end in a dimension of 1 that the
output drops, these take ids of any shape and append one dimension: ids ``[B, T]`` give
``[B, T, D]`` (ops ``lookup_table_v2`` and ``one_hot_v2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .framework import Variable
from .layer_helper import LayerHelper
from .param_attr import ParamAttr

__all__ = ["embedding", "one_hot"]


def _check_ids(input: Any, layer: str, dtypes: tuple[str, ...]) -> None:
    if not isinstance(input, Variable):
        raise TypeError(f"{layer}: input must be a Variable, got {type(input).__name__}")
    if input.dtype not in dtypes:
        raise TypeError(f"{layer}: input {input.name!r} must hold ids of dtype "
                        f"{' or '.join(dtypes)}, got {input.dtype}")


def one_hot(input: Variable, depth: int | Variable, allow_out_of_range: bool = False
            ) -> Variable:
    """One-hot rows of ``depth`` for ids of any shape: ``[N1, ..., Nk]`` gives float32
    ``[N1, ..., Nk, depth]`` (Fluid 1.8's ``fluid.one_hot``, op ``one_hot_v2``).

    Parameters
    ----------
    input : Variable
        int32 or int64 ids.
    depth : int or Variable
        The length of each one-hot row; a Variable (one int) is read when the program runs.
    allow_out_of_range : bool
        An id outside ``[0, depth)`` gives a row of zeros instead of an error.

    Returns
    -------
    Variable
    """
    _check_ids(input, "one_hot", ("int32", "int64"))
    helper = LayerHelper("one_hot_v2")
    inputs: dict[str, list[Variable]] = {"X": [input]}
    attrs: dict[str, Any] = {"allow_out_of_range": bool(allow_out_of_range)}
    if isinstance(depth, Variable):
        depth.stop_gradient = True
        inputs["depth_tensor"] = [depth]
        last = -1
    else:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth <= 0:
            raise ValueError(f"one_hot: depth must be a positive int or a Variable, got "
                             f"{depth!r}")
        attrs["depth"] = last = depth
    shape = None if input.shape is None else [*input.shape, last]
    out = helper.create_tmp(dtype="float32", shape=shape, stop_gradient=True)
    helper.append_op("one_hot_v2", inputs=inputs, outputs={"Out": [out]}, attrs=attrs)
    return out


def embedding(input: Variable, size: Sequence[int], is_sparse: bool = False,
              is_distributed: bool = False, padding_idx: int | None = None,
              param_attr: Any = None, dtype: str = "float32") -> Variable:
    """Rows of a ``size = [vocab, dim]`` table for int64 ids of any shape: ``[N1, ..., Nk]``
    gives ``[N1, ..., Nk, dim]`` (Fluid 1.8's ``fluid.embedding``, op ``lookup_table_v2``).

    Parameters
    ----------
    input : Variable
        int64 ids in ``[0, vocab)``.
    size : [int, int]
        The table's shape.
    is_sparse : bool
        The table's gradient is a SelectedRows of the looked-up rows.
    is_distributed : bool
        Kept on the op as in Fluid 1.8, whose transpiler shards only ``layers.embedding``'s
        tables (``lookup_table``): this table is sliced and received like any parameter.
    padding_idx : int, optional
        Ids equal to it (``vocab + padding_idx`` when negative) look up zeros and give no
        gradient.
    param_attr : ParamAttr, optional
    dtype : str
        float16, float32 or float64.

    Returns
    -------
    Variable
    """
    _check_ids(input, "fluid.embedding", ("int64",))
    if dtype not in ("float16", "float32", "float64"):
        raise TypeError(f"fluid.embedding: dtype must be float16, float32 or float64, got "
                        f"{dtype!r}")
    if len(size) != 2 or min(size) <= 0:
        raise ValueError(f"fluid.embedding: size must be [vocab_size, dim], got {list(size)}")
    vocab = int(size[0])
    if padding_idx is None:
        padding_idx = -1
    elif not -vocab <= padding_idx < vocab:
        raise ValueError(f"fluid.embedding: padding_idx must lie in [{-vocab}, {vocab}), got "
                         f"{padding_idx}")
    elif padding_idx < 0:
        padding_idx += vocab
    helper = LayerHelper("embedding")
    w = helper.create_parameter(ParamAttr._to_attr(param_attr), [vocab, int(size[1])], dtype)
    shape = None if input.shape is None else [*input.shape, int(size[1])]
    out = helper.create_tmp(dtype=dtype, shape=shape)
    helper.append_op("lookup_table_v2", inputs={"Ids": [input], "W": [w]},
                     outputs={"Out": [out]},
                     attrs={"is_sparse": bool(is_sparse), "is_distributed": bool(is_distributed),
                            "remote_prefetch": bool(is_sparse) and not bool(is_distributed),
                            "padding_idx": int(padding_idx)})
    return out
