"""Layers of Fluid 1.8's CTR models: ``continuous_value_model``, ``data_norm``,
``filter_by_instag``, ``shard_index``, ``hash``, ``merge_selected_rows`` and
``get_tensor_from_selected_rows`` (the kernels are in :mod:`dask_fluid.ops.ctr_ops`), and
``mean_iou`` (kernel in :mod:`dask_fluid.ops.metric_ops`)."""

from __future__ import annotations

from typing import Any

from .. import unique_name
from ..framework import Variable, VarType
from ..initializer import ConstantInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .tensor import _check_var

__all__: list[str] = ["continuous_value_model", "data_norm", "filter_by_instag",
                      "get_tensor_from_selected_rows", "hash", "mean_iou",
                      "merge_selected_rows", "shard_index"]

_INTS = ("int32", "int64")


def _check_int(value: Any, arg: str, layer: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{layer}: {arg} must be a python int, got {value!r}")
    return value


def continuous_value_model(input: Variable, cvm: Variable, use_cvm: bool = True) -> Variable:
    """The ``cvm`` op, as Fluid 1.8's ``layers.continuous_value_model``: ``input`` ``[N, D]``
    starts with the show and click columns; with ``use_cvm`` they become log(show + 1) and
    log(click + 1) − log(show + 1) (``[N, D]``), without it they are dropped (``[N, D − 2]``).
    ``cvm`` ``[N, 2]`` holds each instance's show/click, which the backward pass writes into
    the first two columns of the input's gradient."""
    _check_var(input, "input", "continuous_value_model")
    _check_var(cvm, "cvm", "continuous_value_model")
    if not isinstance(use_cvm, bool):
        raise TypeError(f"continuous_value_model: use_cvm must be a bool, got {use_cvm!r}")
    shape = list(input.shape or ())
    if len(shape) != 2:
        raise ValueError(f"continuous_value_model: input {input.name!r} must be 2-D [N, D], "
                         f"got shape {shape}")
    if shape[1] >= 0 and shape[1] < 2:
        raise ValueError(f"continuous_value_model: input needs at least 2 columns (show, "
                         f"click), got {shape[1]}")
    width = shape[1] if use_cvm or shape[1] < 0 else shape[1] - 2
    helper = LayerHelper("cvm", None)
    out = helper.create_tmp(dtype=input.dtype, shape=[shape[0], width])
    helper.append_op("cvm", inputs={"X": [input], "CVM": [cvm]}, outputs={"Y": [out]},
                     attrs={"use_cvm": use_cvm})
    return out


def data_norm(input: Variable, act: str | None = None, epsilon: float = 1e-05,
              param_attr: dict | None = None, data_layout: str = "NCHW",
              in_place: bool = False, name: str | None = None,
              moving_mean_name: str | None = None, moving_variance_name: str | None = None,
              do_model_average_for_mean_and_var: bool = True, slot_dim: int = -1,
              sync_stats: bool = False, summary_decay_rate: float = 0.9999999,
              enable_scale_and_shift: bool = False) -> Variable:
    """Fluid 1.8's ``layers.data_norm``: Y = (X − BatchSum / BatchSize) ·
    sqrt(BatchSize / BatchSquareSum) per column, the three statistics being trainable
    parameters ``<name>.batch_size``, ``<name>.batch_sum`` and ``<name>.batch_square_sum``
    (``name`` defaults to ``"dn"``, as in Fluid, so unnamed layers share them) of shape
    ``[C]``, initialised to 1e4, 0 and 1e4 or to ``param_attr``'s ``batch_size``,
    ``batch_sum`` and ``batch_square`` entries. The backward pass gives them this batch's
    count, sum and centred square sum (+ N·epsilon) as "gradients" for the optimizer to apply.
    ``slot_dim > 0`` zeroes (and leaves out of the statistics) the slots whose show is 0.
    ``enable_scale_and_shift`` adds trainable ``<name>.scale_w`` and ``<name>.bias`` ([C],
    initialised to ``param_attr``'s ``scale_w`` / ``bias`` entries, default 1 and 0):
    Y = (X − mean) · scale · scale_w + bias.

    ``moving_mean_name``, ``moving_variance_name`` and ``do_model_average_for_mean_and_var``
    are unused, as in Fluid 1.8; ``summary_decay_rate`` is recorded on the op (Fluid's CPU
    kernel does not read it either; its GPU kernel and PSLib do)."""
    _check_var(input, "input", "data_norm")
    if sync_stats:
        raise NotImplementedError("data_norm(sync_stats=True) is not implemented in dask_fluid")
    if param_attr is not None and not isinstance(param_attr, dict):
        raise NotImplementedError(
            f"data_norm(param_attr={param_attr!r}) is not implemented in dask_fluid: Fluid 1.8 "
            "only reads a dict of initial values ('batch_size', 'batch_sum', 'batch_square')")
    if not isinstance(slot_dim, int) or isinstance(slot_dim, bool):
        raise TypeError(f"data_norm: slot_dim must be a python int, got {slot_dim!r}")
    if not 0.0 <= float(epsilon) <= 0.001:
        raise ValueError(f"data_norm: epsilon must be in [0, 0.001], got {epsilon}")
    shape = list(input.shape or ())
    if len(shape) < 2:
        raise ValueError(f"data_norm: input {input.name!r} must have at least 2 dimensions, "
                         f"got shape {shape}")
    if data_layout == "NCHW":
        channels = shape[1]
    elif data_layout == "NHWC":
        channels = shape[-1]
    else:
        raise ValueError(f"data_norm: data_layout must be 'NCHW' or 'NHWC', got "
                         f"{data_layout!r}")
    if channels < 0:
        raise ValueError(f"data_norm: the channel dimension of {input.name!r} must be known, "
                         f"got shape {shape}")
    if slot_dim > 0 and channels % slot_dim:
        raise ValueError(f"data_norm: slot_dim ({slot_dim}) must divide the {channels} "
                         "channels")
    attr = param_attr or {}
    defaults = {"batch_size": float(attr.get("batch_size", 1e4)),
                "batch_sum": float(attr.get("batch_sum", 0.0)),
                "batch_square_sum": float(attr.get("batch_square", 1e4))}
    base = "dn" if name is None else name
    helper = LayerHelper("data_norm", name)
    params = {}
    if enable_scale_and_shift:  # Fluid 1.8 creates these two first
        for key, value in (("scale_w", float(attr.get("scale_w", 1.0))),
                           ("bias", float(attr.get("bias", 0.0)))):
            params[key] = helper.create_parameter(
                ParamAttr(name=f"{base}.{key}", initializer=ConstantInitializer(value),
                          trainable=True), [channels], dtype=input.dtype)
    for key, value in defaults.items():
        params[key] = helper.create_parameter(
            ParamAttr(name=f"{base}.{key}", initializer=ConstantInitializer(value),
                      trainable=True), [channels], dtype=input.dtype)
    means = helper.create_tmp(dtype=input.dtype, shape=[channels], stop_gradient=True)
    scales = helper.create_tmp(dtype=input.dtype, shape=[channels], stop_gradient=True)
    out = input if in_place else helper.create_tmp(dtype=input.dtype, shape=shape)
    attrs = {"epsilon": float(epsilon), "data_layout": data_layout, "sync_stats": sync_stats,
             "summary_decay_rate": float(summary_decay_rate),
             "enable_scale_and_shift": bool(enable_scale_and_shift)}
    if slot_dim > 0:  # Fluid sets the attr only then (the op's default is -1)
        attrs["slot_dim"] = slot_dim
    inputs = {"X": [input], "BatchSize": [params["batch_size"]],
              "BatchSum": [params["batch_sum"]], "BatchSquareSum": [params["batch_square_sum"]]}
    if enable_scale_and_shift:
        inputs["scale_w"], inputs["bias"] = [params["scale_w"]], [params["bias"]]
    helper.append_op("data_norm", inputs=inputs,
                     outputs={"Y": [out], "Means": [means], "Scales": [scales]}, attrs=attrs)
    return helper.append_activation(out, act)


def filter_by_instag(ins: Variable, ins_tag: Variable, filter_tag: Variable, is_lod: bool,
                     out_val_if_empty: int = 0) -> list[Variable]:
    """Fluid 1.8's ``layers.filter_by_instag``: keep the instances of ``ins`` (rows, or with
    ``is_lod`` its sequences) whose tags (the sequences of the int64 LoD tensor ``ins_tag``)
    meet ``filter_tag`` (int64 1-D). Returns ``[out, loss_weight]``: the kept rows (a LoD
    tensor ``[-1, D]``) and 1 per kept instance (float32 ``[-1, 1]``); when nothing is kept,
    one row of ``out_val_if_empty`` and a loss weight 0."""
    _check_var(ins, "ins", "filter_by_instag")
    _check_var(ins_tag, "ins_tag", "filter_by_instag")
    _check_var(filter_tag, "filter_tag", "filter_by_instag")
    if not isinstance(is_lod, bool):
        raise TypeError(f"filter_by_instag: is_lod must be a bool, got {is_lod!r}")
    _check_int(out_val_if_empty, "out_val_if_empty", "filter_by_instag")
    shape = list(ins.shape or ())
    if len(shape) != 2:
        raise ValueError(f"filter_by_instag: ins {ins.name!r} must be 2-D, got shape {shape}")
    helper = LayerHelper("filter_by_instag", None)
    out = helper.create_tmp(dtype=ins.dtype, shape=[-1, shape[1]])
    # Fluid declares it float64; its kernel writes float32
    loss_weight = helper.create_tmp(dtype="float32", shape=[-1, 1], stop_gradient=True)
    index_map = helper.create_tmp(dtype="int64", shape=[-1, 3], stop_gradient=True)
    helper.append_op("filter_by_instag",
                     inputs={"Ins": [ins], "Ins_tag": [ins_tag], "Filter_tag": [filter_tag]},
                     outputs={"Out": [out], "LossWeight": [loss_weight],
                              "IndexMap": [index_map]},
                     attrs={"is_lod": is_lod, "out_val_if_empty": out_val_if_empty})
    return [out, loss_weight]


def shard_index(input: Variable, index_num: int, nshards: int, shard_id: int,
                ignore_value: int = -1) -> Variable:
    """Fluid 1.8's ``layers.shard_index``: with shard_size = ceil(index_num / nshards), an
    index ``v`` of shard ``shard_id`` (``v // shard_size == shard_id``) becomes
    ``v % shard_size``, any other ``ignore_value``. ``input`` is int32/int64 with last
    dimension 1."""
    _check_var(input, "input", "shard_index")
    if input.dtype not in _INTS:
        raise TypeError(f"shard_index: input must be int32 or int64, got {input.dtype}")
    for arg, v in (("index_num", index_num), ("nshards", nshards), ("shard_id", shard_id),
                   ("ignore_value", ignore_value)):
        _check_int(v, arg, "shard_index")
    if index_num <= 0:
        raise ValueError(f"shard_index: index_num must be > 0, got {index_num}")
    if nshards <= 0:
        raise ValueError(f"shard_index: nshards must be > 0, got {nshards}")
    if shard_id < 0 or shard_id >= nshards:
        raise ValueError(f"shard_index: shard_id ({shard_id}) must be in [0, {nshards})")
    shape = list(input.shape or ())
    if len(shape) < 2 or shape[-1] not in (1, -1):
        raise ValueError(f"shard_index: input must be at least 2-D with last dimension 1, "
                         f"got shape {shape}")
    helper = LayerHelper("shard_index", None)
    out = helper.create_tmp(dtype=input.dtype, shape=shape, stop_gradient=True)
    helper.append_op("shard_index", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"index_num": index_num, "nshards": nshards,
                            "shard_id": shard_id, "ignore_value": ignore_value})
    return out


def hash(input: Variable, hash_size: int, num_hash: int = 1,
         name: str | None = None) -> Variable:
    """Fluid 1.8's ``layers.hash``: ``num_hash`` XXH64 hashes (seeds 0 .. num_hash − 1) of
    each row of the int32/int64 ``input`` modulo ``hash_size``; shape
    ``input.shape[:-1] + [num_hash, 1]``, the input's LoD and dtype."""
    _check_var(input, "input", "hash")
    if input.dtype not in _INTS:
        raise TypeError(f"hash: input must be int32 or int64, got {input.dtype}")
    _check_int(hash_size, "hash_size", "hash")
    _check_int(num_hash, "num_hash", "hash")
    if hash_size <= 0:
        raise ValueError(f"hash: hash_size must be > 0, got {hash_size}")
    if num_hash <= 0:
        raise ValueError(f"hash: num_hash must be > 0, got {num_hash}")
    shape = list(input.shape or ())
    if not shape:
        raise ValueError(f"hash: input {input.name!r} must have at least one dimension")
    helper = LayerHelper("hash", name)
    out = helper.create_tmp(dtype=input.dtype, shape=[*shape[:-1], num_hash, 1],
                            stop_gradient=True)
    helper.append_op("hash", inputs={"X": [input]}, outputs={"Out": [out]},
                     attrs={"num_hash": num_hash, "mod_by": hash_size})
    return out


def _selected_rows_var(x: Variable, layer: str) -> Variable:
    _check_var(x, "x", layer)
    if x.type != VarType.SELECTED_ROWS:
        raise TypeError(f"{layer}: x must be a SELECTED_ROWS variable, got {x.name!r} of "
                        f"type {x.type!r}")
    return x


def merge_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """Fluid 1.8's ``layers.merge_selected_rows``: the SelectedRows ``x`` with its repeated rows
    summed and its rows sorted (a SELECTED_ROWS variable)."""
    _selected_rows_var(x, "merge_selected_rows")
    helper = LayerHelper("merge_selected_rows", name)
    out = helper.main_program.current_block().create_var(
        name=unique_name.generate(f"{helper.name}.tmp"), dtype=x.dtype, shape=x.shape,
        type=VarType.SELECTED_ROWS)
    helper.append_op("merge_selected_rows", inputs={"X": [x]}, outputs={"Out": [out]})
    return out


def get_tensor_from_selected_rows(x: Variable, name: str | None = None) -> Variable:
    """Fluid 1.8's ``layers.get_tensor_from_selected_rows``: the value tensor of the
    SelectedRows ``x`` (its ``[len(rows), ...]`` rows, not the dense ``[height, ...]``)."""
    _selected_rows_var(x, "get_tensor_from_selected_rows")
    helper = LayerHelper("get_tensor_from_selected_rows", name)
    shape = [-1, *list(x.shape or ())[1:]] if x.shape else None
    out = helper.create_tmp(dtype=x.dtype, shape=shape)
    helper.append_op("get_tensor_from_selected_rows", inputs={"X": [x]},
                     outputs={"Out": [out]})
    return out


def mean_iou(input: Variable, label: Variable,
             num_classes: int) -> tuple[Variable, Variable, Variable]:
    """Fluid 1.8's ``layers.mean_iou``: the mean over the classes present of
    correct / (correct + wrong) for int class ids ``input`` and ``label``. Returns
    ``(mean_iou float32 [1], out_wrong int32 [num_classes], out_correct int32
    [num_classes])``."""
    _check_var(input, "input", "mean_iou")
    _check_var(label, "label", "mean_iou")
    for arg, v in (("input", input), ("label", label)):
        if v.dtype not in _INTS:
            raise TypeError(f"mean_iou: {arg} must be int32 or int64, got {v.dtype}")
    _check_int(num_classes, "num_classes", "mean_iou")
    if num_classes <= 0:
        raise ValueError(f"mean_iou: num_classes must be > 0, got {num_classes}")
    helper = LayerHelper("mean_iou", None)
    miou = helper.create_tmp(dtype="float32", shape=[1], stop_gradient=True)
    wrong = helper.create_tmp(dtype="int32", shape=[num_classes], stop_gradient=True)
    correct = helper.create_tmp(dtype="int32", shape=[num_classes], stop_gradient=True)
    helper.append_op("mean_iou", inputs={"Predictions": [input], "Labels": [label]},
                     outputs={"OutMeanIou": [miou], "OutWrong": [wrong],
                              "OutCorrect": [correct]},
                     attrs={"num_classes": num_classes})
    return miou, wrong, correct
