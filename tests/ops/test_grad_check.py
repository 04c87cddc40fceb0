"""Finite-difference gradient checks for every differentiable kernel op of the registry.

The ops to check are discovered from the registry: every op with a grad maker. For each case
the forward kernel runs on float64 inputs, the grad maker builds the grad op(s) exactly as the
backward pass would, and their kernels give the analytic gradient of ``f = Σ out · R`` (R a
fixed random array per output whose gradient the grad ops read). The numeric gradient is the
central difference (f(x + ε) − f(x − ε)) / 2ε with ε = 1e-6. The error measure is elementwise
``|a − n| / max(1, |a|, |n|)``: relative for large gradients, absolute for small ones, so values
near zero do not blow it up; its maximum must stay ≤ 1e-6.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows, registry

from . import central_differences, run_op

EPS = 1e-6
TOL = 1e-6
GRAD = registry.GRAD


# ---------------------------------------------------------------------------------------------
# cases: op type -> list of (case id, inputs, attrs)


def _away_from(x: np.ndarray, points: list[float], gap: float = 0.05) -> np.ndarray:
    """Push values within ``gap`` of a kink (0 for relu/abs, the bounds for clip) away."""
    x = x.copy()
    for p in points:
        near = np.abs(x - p) < gap
        x[near] = p + np.where(x[near] >= p, gap, -gap) * 2
    return x


def _separated(rng, xshape, yshape, axis=-1) -> tuple[np.ndarray, np.ndarray]:
    """X and Y for max/min: no element of X within 0.05 of the Y it meets."""
    from dask_fluid.ops.math_ops import _y_bshape

    x = rng.standard_normal(xshape)
    y = rng.standard_normal(yshape)
    yb = np.broadcast_to(y.reshape(_y_bshape(x.shape, y.shape, axis, "t")), x.shape)
    close = np.abs(x - yb) < 0.05
    x[close] += 0.2
    return x, y


def _build_cases(rng: np.random.Generator) -> dict[str, list[tuple[str, dict, dict]]]:
    n = rng.standard_normal
    u = rng.uniform
    c: dict[str, list[tuple[str, dict, dict]]] = {}
    c["mul"] = [
        ("2d", {"X": [n((4, 5))], "Y": [n((5, 3))]}, {}),
        ("x_num_col_dims=2", {"X": [n((2, 3, 4))], "Y": [n((4, 3))]}, {"x_num_col_dims": 2}),
        ("y_num_col_dims=2", {"X": [n((3, 4))], "Y": [n((2, 2, 3))]}, {"y_num_col_dims": 2}),
    ]
    shapes = [("same", (3, 4), (3, 4), -1), ("bias", (3, 4), (4,), -1),
              ("axis0", (3, 4), (3,), 0), ("axis1_4d", (2, 3, 4, 2), (3, 4), 1),
              ("trailing1", (3, 4), (3, 1), -1), ("scalar_y", (3, 4), (1,), -1),
              # Fluid 1.8's common broadcast: 1s on both sides, Out larger than X and Y
              ("common", (2, 3, 1, 4), (2, 1, 5, 1), -1),
              ("common_axis", (2, 1, 4), (3, 1), 1),
              ("x_smaller_axis", (3,), (2, 3, 4), 1)]
    for op in ("elementwise_add", "elementwise_sub", "elementwise_mul"):
        c[op] = [(sid, {"X": [n(xs)], "Y": [n(ys)]}, {"axis": ax}) for sid, xs, ys, ax in shapes]
        c[op].append(("x_smaller", {"X": [n((1,))], "Y": [n((3, 4))]}, {}))
    c["elementwise_div"] = [
        (sid, {"X": [n(xs)], "Y": [u(0.5, 2.0, ys) * rng.choice([-1, 1], ys)]}, {"axis": ax})
        for sid, xs, ys, ax in shapes]
    c["elementwise_pow"] = [
        (sid, {"X": [u(0.5, 2.0, xs)], "Y": [u(0.5, 2.0, ys)]}, {"axis": ax})
        for sid, xs, ys, ax in shapes[:3]]
    for op in ("elementwise_max", "elementwise_min"):
        c[op] = []
        for sid, xs, ys, ax in shapes[:3]:
            x, y = _separated(rng, xs, ys, ax)
            c[op].append((sid, {"X": [x], "Y": [y]}, {"axis": ax}))
    c["relu"] = [("x", {"X": [_away_from(n((3, 4)), [0.0])]}, {})]
    c["abs"] = [("x", {"X": [_away_from(n((3, 4)), [0.0])]}, {})]
    for op in ("sigmoid", "tanh", "exp", "square"):
        c[op] = [("x", {"X": [n((3, 4))]}, {})]
    for op in ("log", "sqrt"):
        c[op] = [("x", {"X": [u(0.5, 2.0, (3, 4))]}, {})]
    c["scale"] = [
        ("after", {"X": [n((3, 4))]}, {"scale": 2.5, "bias": 0.7}),
        ("before", {"X": [n((3, 4))]}, {"scale": -1.5, "bias": 0.3, "bias_after_scale": False}),
    ]
    c["assign"] = [("x", {"X": [n((3, 4))]}, {})]
    c["rnn_memory_helper"] = [("x", {"X": [n((3, 4))]}, {"dtype": "float64"})]
    c["clip"] = [("x", {"X": [_away_from(n((4, 5)), [-0.5, 0.5])]}, {"min": -0.5, "max": 0.5})]
    c["mean"] = [("x", {"X": [n((3, 4))]}, {})]
    c["sum"] = [("3 inputs", {"X": [n((3, 4)), n((3, 4)), n((3, 4))]}, {})]
    for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min"):
        c[op] = [
            ("dim1", {"X": [n((2, 3, 4))]}, {"dim": [1]}),
            ("dims02_keep", {"X": [n((2, 3, 4))]}, {"dim": [0, -1], "keep_dim": True}),
            ("all", {"X": [n((2, 3, 4))]}, {"reduce_all": True}),
        ]
    c["softmax"] = [("last", {"X": [n((3, 5))]}, {}), ("axis0", {"X": [n((3, 5))]}, {"axis": 0})]
    probs = np.exp(n((4, 5)))
    probs /= probs.sum(1, keepdims=True)
    soft = np.exp(n((4, 5)))
    soft /= soft.sum(1, keepdims=True)
    labels = np.array([[0], [3], [2], [4]], dtype=np.int64)
    c["cross_entropy"] = [
        ("hard", {"X": [probs], "Label": [labels]}, {}),
        ("soft", {"X": [probs], "Label": [soft]}, {"soft_label": True}),
        ("ignore", {"X": [probs], "Label": [labels]}, {"ignore_index": 2}),
    ]
    c["softmax_with_cross_entropy"] = [
        ("hard", {"Logits": [n((4, 5))], "Label": [labels]}, {}),
        ("soft", {"Logits": [n((4, 5))], "Label": [soft]}, {"soft_label": True}),
        ("ignore", {"Logits": [n((4, 5))], "Label": [labels]}, {"ignore_index": 3}),
        ("axis0", {"Logits": [n((5, 4))], "Label": [labels.reshape(1, 4)]}, {"axis": 0}),
        ("3d", {"Logits": [n((2, 2, 5))], "Label": [labels.reshape(2, 2, 1)]}, {}),
    ]
    c["dropout"] = [
        ("downgrade", {"X": [n((4, 5))]}, {"dropout_prob": 0.3, "fix_seed": True, "seed": 3}),
        ("upscale", {"X": [n((4, 5))]},
         {"dropout_prob": 0.3, "fix_seed": True, "seed": 3,
          "dropout_implementation": "upscale_in_train"}),
    ]
    ids = np.array([[1], [4], [1], [2], [0]], dtype=np.int64)
    c["lookup_table"] = [
        ("dense", {"W": [n((6, 3))], "Ids": [ids]}, {}),
        ("sparse", {"W": [n((6, 3))], "Ids": [ids]}, {"is_sparse": True}),
        ("padding", {"W": [n((6, 3))], "Ids": [ids]}, {"padding_idx": 1}),
        ("sparse_padding", {"W": [n((6, 3))], "Ids": [ids.reshape(-1)]},
         {"is_sparse": True, "padding_idx": 4}),
    ]
    ids_bt = np.array([[0, 2, 2], [5, 1, 0]], np.int64)  # fluid.embedding: no trailing 1
    c["lookup_table_v2"] = [
        ("dense", {"W": [n((6, 3))], "Ids": [ids_bt]}, {}),
        ("sparse_padding", {"W": [n((6, 3))], "Ids": [ids_bt]},
         {"is_sparse": True, "padding_idx": 2}),
        ("trailing_one_kept", {"W": [n((6, 2))], "Ids": [ids_bt.reshape(6, 1)]}, {}),
    ]
    c["concat"] = [
        ("axis0", {"X": [n((2, 3)), n((1, 3)), n((3, 3))]}, {"axis": 0}),
        ("axis1", {"X": [n((2, 3)), n((2, 1)), n((2, 2))]}, {"axis": 1}),
    ]
    c["split"] = [
        ("sections", {"X": [n((6, 4))]}, {"sections": [1, 2, 3], "axis": 0}),
        ("num_axis1", {"X": [n((3, 4))]}, {"num": 2, "axis": 1}),
    ]
    c["reshape2"] = [
        ("zero_minus1", {"X": [n((2, 3, 4))]}, {"shape": [0, -1]}),
        # the run-time shape wins over the attribute (layers.reshape's actual_shape, shape=Var)
        ("shape_input", {"X": [n((2, 3, 4))], "Shape": [np.array([4, -1], np.int32)]},
         {"shape": [2, 12]}),
        ("shape_tensor", {"X": [n((2, 3, 4))], "ShapeTensor": [
            np.array([1], np.int32), np.array([0], np.int32), np.array([-1], np.int64)]},
         {"shape": [-1, 0, -1]}),
    ]
    away = _away_from(n((2, 3, 4)), [0.0], gap=0.3)  # products of values near 0 are flat
    c["reduce_prod"] = [
        ("dim1", {"X": [away]}, {"dim": [1]}),
        ("all_keep", {"X": [away]}, {"reduce_all": True, "keep_dim": True}),
    ]
    c["flatten2"] = [("axis2", {"X": [n((2, 3, 4))]}, {"axis": 2}),
                     ("axis0", {"X": [n((2, 3))]}, {"axis": 0})]
    c["norm"] = [("axis1", {"X": [n((3, 4))]}, {"axis": 1, "epsilon": 1e-10}),
                 ("axis0_3d", {"X": [n((3, 2, 2))]}, {"axis": 0, "epsilon": 1e-6})]
    c["log_loss"] = [("x", {"Predicted": [u(0.1, 0.9, (4, 1))],
                             "Labels": [np.array([[0.0], [1.0], [1.0], [0.0]])]},
                      {"epsilon": 1e-4})]
    residual_away = _away_from(n((3, 4)), [-0.7, 0.7], gap=0.1)
    c["huber_loss"] = [("x", {"X": [np.zeros((3, 4))], "Y": [residual_away]},
                        {"delta": 0.7})]
    c["prelu"] = [
        ("all", {"X": [_away_from(n((2, 3, 2, 2)), [0.0])], "Alpha": [np.array([0.3])]},
         {"mode": "all"}),
        ("channel", {"X": [_away_from(n((2, 3, 2, 2)), [0.0])],
                     "Alpha": [u(0.1, 0.5, (1, 3, 1, 1))]}, {"mode": "channel"}),
        ("element", {"X": [_away_from(n((2, 3, 2)), [0.0])], "Alpha": [u(0.1, 0.5, (1, 3, 2))]},
         {"mode": "element"}),
    ]
    c["unstack"] = [("axis1", {"X": [n((2, 3, 4))]}, {"axis": 1, "num": 3})]
    c["expand_as"] = [("tile", {"X": [n((2, 3))], "target_tensor": [n((4, 6))]}, {})]
    c["scatter"] = [
        ("overwrite", {"X": [n((5, 3))], "Ids": [np.array([3, 0], np.int64)],
                       "Updates": [n((2, 3))]}, {"overwrite": True}),
        ("accumulate", {"X": [n((5, 3))], "Ids": [np.array([1, 4, 1], np.int64)],
                        "Updates": [n((3, 3))]}, {"overwrite": False}),
    ]
    target = u(0.0, 1.0, (3, 4))
    target[0, 0] = 0.0  # a zero target adds nothing, and no gradient
    c["kldiv_loss"] = [(r, {"X": [n((3, 4))], "Target": [target]}, {"reduction": r})
                       for r in ("none", "batchmean", "mean", "sum")]
    c["pad"] = [("x", {"X": [n((2, 3))]}, {"paddings": [1, 0, 2, 1], "pad_value": 0.5})]
    c["pad2d"] = [(mode, {"X": [n((1, 2, 3, 4))]},
                   {"paddings": [1, 2, 2, 1], "mode": mode, "pad_value": 0.3})
                  for mode in ("constant", "reflect", "edge")]
    c["pad2d"].append(("nhwc_edge", {"X": [n((1, 3, 4, 2))]},
                       {"paddings": [2, 0, 1, 3], "mode": "edge", "data_format": "NHWC"}))
    c["pad2d"].append(("paddings_tensor", {"X": [n((1, 2, 3, 4))],
                                           "Paddings": [np.array([1, 0, 2, 1], np.int32)]},
                       {"paddings": [], "mode": "reflect"}))
    c["smooth_l1_loss"] = [
        ("plain", {"X": [_away_from(n((3, 4)), [-1.0, 1.0])], "Y": [np.zeros((3, 4))]}, {}),
        # inside weight 2, sigma 2: the kink at |2 x| = 1 / 4
        ("weights_sigma", {"X": [_away_from(n((3, 4)), [-0.125, 0.125])],
                           "Y": [np.zeros((3, 4))], "InsideWeight": [np.full((3, 4), 2.0)],
                           "OutsideWeight": [u(0.5, 1.5, (3, 4))]}, {"sigma": 2.0}),
    ]
    c["group_norm"] = [
        ("nchw", {"X": [n((2, 4, 3, 2))], "Scale": [u(0.5, 1.5, 4)], "Bias": [n(4)]},
         {"groups": 2}),
        ("nhwc", {"X": [n((2, 3, 2, 6))], "Scale": [u(0.5, 1.5, 6)], "Bias": [n(6)]},
         {"groups": 3, "data_layout": "NHWC"}),
        ("no_scale_bias", {"X": [n((3, 6))]}, {"groups": 3}),
    ]
    c["gather_nd"] = [
        ("rows_repeated", {"X": [n((4, 3, 2))], "Index": [np.array([[1], [3], [1]])]}, {}),
        ("points", {"X": [n((4, 3, 2))], "Index": [np.array([[[0, 2], [3, 1]], [[0, 2], [2, 0]]])]},
         {}),
    ]
    c["pixel_shuffle"] = [("r2", {"X": [n((2, 8, 2, 3))]}, {"upscale_factor": 2})]
    # distinct values 0.1 apart: the maximum of each group is unambiguous under the step
    c["maxout"] = [
        ("nchw", {"X": [rng.permutation(48).reshape(2, 6, 2, 2) * 0.1]}, {"groups": 3}),
        ("nhwc", {"X": [rng.permutation(48).reshape(2, 2, 3, 4) * 0.1]},
         {"groups": 2, "axis": 3}),
    ]
    c["transpose2"] = [("perm", {"X": [n((2, 3, 4))]}, {"axis": [2, 0, 1]})]
    rows_mask = np.array([[True], [False], [False], [True]])
    seq_mask = np.array([True, False, True, False])
    c["split_lod_tensor"] = [
        ("rows", {"X": [n((4, 3))], "Mask": [rows_mask]}, {"_lods": {"X": [None]}}),
        ("sequences", {"X": [n((7, 2))], "Mask": [seq_mask]},
         {"_lods": {"X": [((0, 2, 2, 5, 7),)]}}),
    ]
    c["merge_lod_tensor"] = [
        ("rows", {"X": [rows_mask], "Mask": [rows_mask], "InTrue": [n((2, 3))],
                  "InFalse": [n((2, 3))]}, {"_lods": {}}),
        ("sequences", {"X": [seq_mask], "Mask": [seq_mask], "InTrue": [n((5, 2))],
                       "InFalse": [n((2, 2))]},
         {"_lods": {"InTrue": [((0, 2, 5),)], "InFalse": [((0, 0, 2),)]}}),
    ]
    c["conv2d"] = [
        ("plain", {"Input": [n((2, 3, 5, 5))], "Filter": [n((4, 3, 3, 3))]}, {}),
        ("stride_pad4_dilation_groups",
         {"Input": [n((2, 4, 7, 6))], "Filter": [n((6, 2, 3, 2))]},
         {"groups": 2, "strides": [2, 1], "paddings": [1, 0, 2, 1], "dilations": [1, 2]}),
        ("same", {"Input": [n((1, 2, 5, 4))], "Filter": [n((3, 2, 2, 3))]},
         {"padding_algorithm": "SAME", "strides": [2, 2]}),
        ("nhwc_stride_pad_groups", {"Input": [n((2, 6, 5, 4))], "Filter": [n((4, 2, 3, 2))]},
         {"groups": 2, "strides": [2, 1], "paddings": [1, 1], "data_format": "NHWC"}),
    ]
    c["conv2d_transpose"] = [
        ("stride2_pad", {"Input": [n((2, 3, 3, 4))], "Filter": [n((3, 2, 3, 3))]},
         {"strides": [2, 2], "paddings": [1, 1]}),
        ("groups_dilation_output_size", {"Input": [n((1, 4, 3, 3))], "Filter": [n((4, 1, 2, 2))]},
         {"groups": 2, "dilations": [2, 1], "strides": [2, 2], "output_size": [8, 7]}),
        ("nhwc", {"Input": [n((2, 3, 4, 3))], "Filter": [n((3, 2, 3, 3))]},
         {"strides": [2, 2], "paddings": [1, 1], "data_format": "NHWC"}),
    ]
    c["depthwise_conv2d"] = [
        ("depthwise", {"Input": [n((2, 3, 5, 5))], "Filter": [n((6, 1, 3, 3))]},
         {"groups": 3, "paddings": [1, 1]}),
    ]
    c["matmul"] = [
        ("2d", {"X": [n((3, 4))], "Y": [n((4, 5))]}, {}),
        ("batched_ty_alpha", {"X": [n((2, 3, 4))], "Y": [n((2, 5, 4))]},
         {"transpose_Y": True, "alpha": 0.5}),
        # Fluid folds the batch dims ([2, 3] and [6]: six pairs), it does not broadcast them
        # (24 and 60 draws, as the broadcasting case this replaces: later cases keep their data)
        ("batch_sizes_tx_ty", {"X": [n((2, 3, 2, 2))], "Y": [n((6, 5, 2))]},
         {"transpose_X": True, "transpose_Y": True}),
        ("vectors", {"X": [n(4)], "Y": [n(4)]}, {}),
        ("vector_by_batch", {"X": [n(4)], "Y": [n((2, 4, 3))]}, {}),
    ]
    c["cos"] = [("x", {"X": [n((3, 4))]}, {})]
    c["sigmoid_cross_entropy_with_logits"] = [
        ("soft", {"X": [n((3, 4)) * 3], "Label": [u(0, 1, (3, 4))]}, {}),
        ("ignore_normalize", {"X": [n((3, 4))],
                              "Label": [np.where(u(0, 1, (3, 4)) < 0.3, -100.0,
                                                 u(0, 1, (3, 4)))]},
         {"normalize": True}),
    ]
    c["stack"] = [("axis1", {"X": [n((2, 3)), n((2, 3)), n((2, 3))]}, {"axis": 1})]
    c["squeeze2"] = [("axes", {"X": [n((2, 1, 3, 1))]}, {"axes": [1]}),
                     ("all", {"X": [n((2, 1, 3, 1))]}, {})]
    c["unsqueeze2"] = [("axes", {"X": [n((2, 3))]}, {"axes": [0, 2]})]
    c["gather"] = [("repeat", {"X": [n((5, 3))], "Index": [np.array([4, 0, 4, 2])]}, {})]
    c["expand"] = [("times", {"X": [n((2, 1, 3))]}, {"expand_times": [2, 3, 1]})]
    c["slice"] = [("clamped_negative", {"Input": [n((4, 5, 6))]},
                   {"axes": [0, 2], "starts": [1, -4], "ends": [100, -1]}),
                  ("decrease", {"Input": [n((4, 5))]},
                   {"axes": [0], "starts": [2], "ends": [3], "decrease_axis": [0]})]
    c["label_smooth"] = [("uniform", {"X": [n((3, 5))]}, {"epsilon": 0.1}),
                         ("prior", {"X": [n((2, 3, 4))], "PriorDist": [u(0, 1, 4)]},
                          {"epsilon": 0.2})]
    c["leaky_relu"] = [("alpha", {"X": [_away_from(n((3, 4)), [0.0])]}, {"alpha": 0.1})]
    c["relu6"] = [("threshold", {"X": [_away_from(n((3, 4)) * 3, [0.0, 2.0])]},
                   {"threshold": 2.0})]
    c["elu"] = [("alpha", {"X": [_away_from(n((3, 4)), [0.0])]}, {"alpha": 0.7})]
    c["softplus"] = [("x", {"X": [n((3, 4)) * 3]}, {})]
    c["softsign"] = [("x", {"X": [_away_from(n((3, 4)), [0.0])]}, {})]
    c["hard_sigmoid"] = [("slope", {"X": [_away_from(n((3, 4)) * 3, [-2.5, 2.5])]}, {})]
    c["swish"] = [("beta", {"X": [n((3, 4))]}, {"beta": 1.5})]
    c["gelu"] = [("erf", {"X": [n((3, 4)) * 2]}, {}),
                 ("tanh", {"X": [n((3, 4)) * 2]}, {"approximate": True})]
    c["pow"] = [("factor", {"X": [u(0.5, 2.0, (3, 4))]}, {"factor": 2.5})]
    c["selu"] = [("defaults", {"X": [_away_from(n((3, 4)), [0.0])]}, {}),
                 ("attrs", {"X": [_away_from(n((3, 4)), [0.0])]}, {"scale": 1.2, "alpha": 0.5})]
    c["hard_swish"] = [("x", {"X": [_away_from(n((3, 4)) * 3, [-3.0, 3.0])]}, {}),
                       # Fluid 1.8's gradient is 1 where x + offset >= threshold, exact
                       # only when threshold == scale (its defaults): checked there
                       ("attrs", {"X": [_away_from(n((3, 4)) * 2, [-1.0, 3.0])]},
                        {"threshold": 4.0, "scale": 4.0, "offset": 1.0})]
    c["brelu"] = [("x", {"X": [_away_from(n((3, 4)) * 3, [-1.0, 2.0])]},
                   {"t_min": -1.0, "t_max": 2.0})]
    c["soft_relu"] = [("x", {"X": [_away_from(n((3, 4)) * 3, [-2.0, 2.0])]},
                       {"threshold": 2.0})]
    c["stanh"] = [("x", {"X": [n((3, 4))]}, {"scale_a": 0.8, "scale_b": 1.5})]
    c["layer_norm"] = [
        ("axis1", {"X": [n((3, 4, 2))], "Scale": [u(0.5, 1.5, 8)], "Bias": [n(8)]}, {}),
        ("axis2", {"X": [n((2, 3, 5))], "Scale": [u(0.5, 1.5, 5)], "Bias": [n(5)]},
         {"begin_norm_axis": 2}),
        ("no_scale_bias", {"X": [n((4, 6))]}, {}),
    ]
    c["batch_norm"] = [
        ("nchw_train", {"X": [n((3, 2, 3, 2))], "Scale": [u(0.5, 1.5, 2)], "Bias": [n(2)],
                        "Mean": [n(2)], "Variance": [u(0.5, 1.5, 2)]}, {}),
        ("nhwc_train", {"X": [n((4, 3, 2))], "Scale": [u(0.5, 1.5, 2)], "Bias": [n(2)],
                        "Mean": [n(2)], "Variance": [u(0.5, 1.5, 2)]},
         {"data_layout": "NHWC"}),
        ("global_stats", {"X": [n((3, 2, 2, 2))], "Scale": [u(0.5, 1.5, 2)], "Bias": [n(2)],
                          "Mean": [n(2)], "Variance": [u(0.5, 1.5, 2)]},
         {"use_global_stats": True}),
        ("2d_is_test", {"X": [n((5, 3))], "Scale": [u(0.5, 1.5, 3)], "Bias": [n(3)],
                        "Mean": [n(3)], "Variance": [u(0.5, 1.5, 3)]}, {"is_test": True}),
    ]
    c["pool2d"] = [
        ("max_pad_stride", {"X": [n((2, 3, 6, 5))]},
         {"ksize": [3, 2], "strides": [2, 2], "paddings": [1, 1]}),
        ("max_ceil", {"X": [n((1, 2, 5, 5))]}, {"ksize": [2, 2], "strides": [2, 2],
                                                "ceil_mode": True}),
        ("avg_exclusive_pad", {"X": [n((2, 2, 5, 6))]},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}),
        ("avg_inclusive_ceil", {"X": [n((1, 2, 5, 5))]},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1],
          "exclusive": False, "ceil_mode": True}),
        ("global_avg", {"X": [n((2, 3, 4, 3))]}, {"pooling_type": "avg",
                                                   "global_pooling": True}),
        ("global_max", {"X": [n((2, 3, 4, 3))]}, {"global_pooling": True}),
    ]
    # LoD ops read their inputs' LoD from attrs["_lods"], as the executor passes it; the
    # grad op inherits it with the forward attrs (the slot names are the same)
    one_level = {"_lods": {"X": [((0, 2, 2, 5, 7),)]}}  # with an empty sequence
    two_level = {"_lods": {"X": [((0, 1, 3), (0, 3, 4, 7))]}}
    probs = rng.uniform(0.1, 1.0, (4, 5))
    probs /= probs.sum(1, keepdims=True)
    c["cross_entropy2"] = [
        ("hard", {"X": [probs.copy()], "Label": [np.array([[0], [3], [4], [1]])]}, {}),
        ("ignore_index", {"X": [probs.copy()], "Label": [np.array([[0], [2], [4], [2]])]},
         {"ignore_index": 2}),
        ("3d", {"X": [probs.reshape(2, 2, 5).copy()],
                "Label": [np.array([[[1], [2]], [[0], [4]]])]}, {}),
    ]
    c["sequence_conv"] = [
        ("centered", {"X": [n((7, 2))], "Filter": [n((6, 3))]},
         {"contextStart": -1, "contextLength": 3, **one_level}),
        ("forward_window_two_level", {"X": [n((7, 3))], "Filter": [n((6, 2))]},
         {"contextStart": 0, "contextLength": 2, **two_level}),
    ]
    c["sequence_softmax"] = [
        ("column", {"X": [n((7, 1))]},
         {"_lods": {"X": one_level["_lods"]["X"], "Out": one_level["_lods"]["X"]}}),
    ]
    c["sequence_reverse"] = [("rows", {"X": [n((7, 2))]}, one_level),
                             ("two_level", {"X": [n((7, 2, 2))]}, two_level)]
    c["sequence_concat"] = [
        ("three_inputs", {"X": [n((7, 2)), n((4, 2)), n((3, 2))]},
         {"_lods": {"X": [((0, 2, 2, 5, 7),), ((0, 1, 2, 2, 4),), ((0, 0, 1, 2, 3),)]}}),
    ]
    c["lod_reset"] = [("target", {"X": [n((7, 2))]}, {"target_lod": [0, 3, 7], **one_level})]
    y_two = ((0, 2, 3, 3, 5), (0, 1, 3, 4, 6, 8))  # 4 sequences: 2, 1, 0 and 2 parts
    c["sequence_expand"] = [
        ("x_with_lod", {"X": [n((7, 2))], "Y": [n((8, 1))]},
         {"ref_level": 0, "_lods": {"X": one_level["_lods"]["X"], "Y": [y_two]}}),
        ("x_rows", {"X": [n((4, 3))], "Y": [n((8, 1))]},
         {"ref_level": 0, "_lods": {"X": [None], "Y": [y_two]}}),
    ]
    c["sequence_expand_as"] = [
        ("rows", {"X": [n((4, 3))], "Y": [n((7, 1))]},
         {"_lods": {"X": [None], "Y": one_level["_lods"]["X"]}}),
    ]
    c["sequence_pad"] = [
        ("longest", {"X": [n((7, 2))], "PadValue": [n(1)]}, one_level),
        ("padded_to_5_row_pad", {"X": [n((7, 2, 2))], "PadValue": [n((2, 2))]},
         {"padded_length": 5, **one_level}),
    ]
    c["sequence_unpad"] = [
        ("lengths", {"X": [n((3, 4, 2))], "Length": [np.array([2, 0, 4])]}, {}),
    ]
    c["sequence_slice"] = [
        ("middle", {"X": [n((7, 2))], "Offset": [np.array([[1], [0], [1], [0]])],
                    "Length": [np.array([[1], [0], [2], [2]])]}, one_level),
    ]
    c["sequence_reshape"] = [
        ("wider", {"X": [n((6, 2))]}, {"new_dim": 4, "_lods": {"X": [((0, 2, 6),)]}}),
    ]
    gru_lod = {"_lods": {"Input": [((0, 3, 3, 5),)]}}  # sequences of 3, 0 and 2 steps
    c["gru"] = [
        ("forward", {"Input": [n((5, 6))], "Weight": [0.5 * n((2, 6))],
                     "Bias": [n((1, 6))]}, gru_lod),
        ("reverse_h0_origin", {"Input": [n((5, 6))], "H0": [n((3, 2))],
                               "Weight": [0.5 * n((2, 6))], "Bias": [n((1, 6))]},
         {"is_reverse": True, "origin_mode": True, **gru_lod}),
        ("identity_no_bias", {"Input": [n((5, 9))], "Weight": [0.3 * n((3, 9))]},
         {"activation": "identity", "gate_activation": "sigmoid", **gru_lod}),
    ]
    lstm_lod = {"_lods": {"Input": [((0, 3, 3, 5),)]}}
    c["lstm"] = [
        ("peepholes", {"Input": [n((5, 8))], "Weight": [0.5 * n((2, 8))],
                       "Bias": [n((1, 14))]}, lstm_lod),
        ("reverse_h0_c0", {"Input": [n((5, 8))], "H0": [n((3, 2))], "C0": [n((3, 2))],
                           "Weight": [0.5 * n((2, 8))], "Bias": [n((1, 14))]},
         {"is_reverse": True, **lstm_lod}),
        ("no_peepholes_relu", {"Input": [n((5, 8))], "Weight": [0.5 * n((2, 8))],
                               "Bias": [n((1, 8))]},
         {"use_peepholes": False, "cell_activation": "identity",
          "candidate_activation": "relu", **lstm_lod}),
        ("no_bias", {"Input": [n((5, 12))], "C0": [n((3, 3))], "Weight": [0.4 * n((3, 12))]},
         {"use_peepholes": False, **lstm_lod}),
    ]
    c["cos_sim"] = [
        ("rows", {"X": [n((4, 3))], "Y": [n((4, 3))]}, {}),
        ("one_y_row", {"X": [n((4, 3))], "Y": [n((1, 3))]}, {}),
        ("3d", {"X": [n((3, 2, 2))], "Y": [n((3, 2, 2))]}, {}),
    ]
    c["sequence_pool"] = [
        *((kind.lower(), {"X": [n((7, 3))]}, {"pooltype": kind, **one_level})
          for kind in ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")),
        ("average_3d_two_level", {"X": [n((7, 2, 2))]}, {"pooltype": "AVERAGE", **two_level}),
        ("max_two_level_pad", {"X": [n((7, 2))]},
         {"pooltype": "MAX", "pad_value": 1.5, **one_level}),
    ]
    c["gru_unit"] = [
        ("bias", {"Input": [n((3, 6))], "HiddenPrev": [n((3, 2))], "Weight": [0.5 * n((2, 6))],
                  "Bias": [n((1, 6))]}, {}),
        ("origin_relu_no_bias", {"Input": [n((2, 9))], "HiddenPrev": [n((2, 3))],
                                 "Weight": [0.4 * n((3, 9))]},
         {"origin_mode": True, "activation": 3}),
    ]
    crf_lod = {"_lods": {"Emission": [((0, 3, 4, 4, 7),)]}}  # chains of 3, 1, 0 and 3
    c["linear_chain_crf"] = [
        ("lod", {"Emission": [n((7, 3))], "Transition": [n((5, 3))],
                 "Label": [np.array([[0], [2], [1], [1], [2], [0], [0]])]}, crf_lod),
        ("padded_length", {"Emission": [n((2, 3, 2))], "Transition": [n((4, 2))],
                           "Label": [np.array([[0, 1, 1], [1, 0, 0]])],
                           "Length": [np.array([3, 2])]}, {}),
    ]
    c["lstm_unit"] = [
        ("forget_bias", {"X": [n((3, 8))], "C_prev": [n((3, 2))]}, {"forget_bias": 1.0}),
    ]
    nce = {"num_total_classes": 6, "num_neg_samples": 3, "seed": 3}
    alias = {"CustomDistProbs": [np.array([0.3, 0.1, 0.2, 0.1, 0.2, 0.1], np.float32)],
             "CustomDistAlias": [np.array([2, -1, 4, 0, -1, 0], np.int32)],
             "CustomDistAliasProbs": [np.array([1.0, 0.6, 1.0, 0.6, 1.0, 0.6], np.float32)]}
    c["nce"] = [
        ("uniform_bias_weights", {"Input": [n((4, 3))], "Label": [np.array([[0], [5], [2], [2]])],
                                  "Weight": [n((6, 3))], "Bias": [n((6, 1))],
                                  "SampleWeight": [u(0.5, 2.0, (4, 1))]}, nce),
        ("log_uniform_two_true_sparse", {"Input": [n((3, 2))],
                                         "Label": [np.array([[0, 1], [4, 5], [3, 3]])],
                                         "Weight": [n((6, 2))]},
         {**nce, "sampler": 1, "is_sparse": True}),
        ("custom_dist", {"Input": [n((4, 3))], "Label": [np.array([[1], [0], [4], [5]])],
                         "Weight": [n((6, 3))], "Bias": [n((6, 1))], **alias},
         {**nce, "sampler": 2}),
        ("custom_neg_classes", {"Input": [n((2, 3))], "Label": [np.array([[1], [2]])],
                                "Weight": [n((6, 3))]},
         {**nce, "custom_neg_classes": [0, 3, 5]}),
    ]
    path = np.array([[0, 1, -1], [0, 2, 3], [0, -1, -1], [0, 2, 4]])
    code = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]])
    c["hierarchical_sigmoid"] = [
        ("default_tree", {"X": [n((5, 3))], "W": [n((4, 3))],
                          "Label": [np.array([[0], [4], [2], [1], [3]])], "Bias": [n((4, 1))]},
         {"num_classes": 5}),
        ("custom_tree_sparse", {"X": [n((4, 2))], "W": [n((5, 2))],
                                "Label": [np.array([[0], [1], [2], [3]])],
                                "PathTable": [path], "PathCode": [code], "Bias": [n((5, 1))]},
         {"num_classes": 5, "is_sparse": True}),
    ]
    # -- image resize cases --
    bi = {"interp_method": "bilinear"}
    c["bicubic_interp"] = [
        ("up_align_corners", {"X": [n((1, 2, 3, 4))]},
         {"interp_method": "bicubic", "out_h": 5, "out_w": 6}),
        ("down_half_pixel_nhwc", {"X": [n((1, 6, 5, 2))]},
         {"interp_method": "bicubic", "out_h": 4, "out_w": 3, "align_corners": False,
          "data_layout": "NHWC"}),
    ]
    c["bilinear_interp"] = [
        ("up_align_corners", {"X": [n((2, 2, 3, 4))]}, {**bi, "out_h": 5, "out_w": 7}),
        ("half_pixel_nhwc", {"X": [n((1, 4, 5, 2))]},
         {**bi, "out_h": 7, "out_w": 3, "align_corners": False, "align_mode": 0,
          "data_layout": "NHWC"}),
        ("mode1_scale_attr", {"X": [n((1, 2, 3, 3))]},
         {**bi, "scale": 1.7, "align_corners": False}),
        ("out_size", {"X": [n((1, 1, 4, 3))], "OutSize": [np.array([2, 5], np.int32)]},
         {**bi, "out_h": 9, "out_w": 9, "align_corners": False, "align_mode": 0}),
        ("size_tensor_scale_tensor", {"X": [n((1, 2, 3, 4))],
                                      "SizeTensor": [np.array([4], np.int32),
                                                     np.array([6], np.int32)],
                                      "Scale": [np.array([0.5], np.float32)]}, bi),
    ]
    ne = {"interp_method": "nearest"}
    c["nearest_interp"] = [
        ("up_repeats", {"X": [n((2, 2, 3, 2))]},
         {**ne, "out_h": 7, "out_w": 5, "align_corners": False}),
        ("down_align_corners_nhwc", {"X": [n((1, 5, 6, 3))]},
         {**ne, "out_h": 3, "out_w": 4, "data_layout": "NHWC"}),
        ("scale_tensor", {"X": [n((1, 1, 3, 4))], "Scale": [np.array([1.5], np.float32)]}, ne),
    ]
    tri = {"interp_method": "trilinear"}
    c["trilinear_interp"] = [
        ("align_corners", {"X": [n((1, 2, 2, 3, 3))]},
         {**tri, "out_d": 3, "out_h": 4, "out_w": 2}),
        ("half_pixel_ndhwc", {"X": [n((1, 3, 2, 4, 2))]},
         {**tri, "out_d": 4, "out_h": 3, "out_w": 5, "align_corners": False, "align_mode": 0,
          "data_layout": "NHWC"}),
        ("out_size_mode1", {"X": [n((1, 1, 3, 2, 3))],
                            "OutSize": [np.array([2, 3, 4], np.int32)]},
         {**tri, "align_corners": False}),
    ]
    # -- image channel cases --
    # alpha large enough that the normaliser's gradient term matters
    c["lrn"] = [
        ("nchw_n5", {"X": [n((2, 6, 3, 2))]}, {"n": 5, "k": 1.0, "alpha": 0.5, "beta": 0.75}),
        ("nhwc_n3", {"X": [n((2, 3, 2, 5))]},
         {"n": 3, "k": 2.0, "alpha": 0.3, "beta": 1.2, "data_format": "NHWC"}),
    ]
    c["instance_norm"] = [
        ("nchw", {"X": [n((2, 3, 4, 2))], "Scale": [u(0.5, 1.5, 3)], "Bias": [n(3)]}, {}),
        ("rank5", {"X": [n((1, 2, 2, 3, 2))], "Scale": [u(0.5, 1.5, 2)], "Bias": [n(2)]},
         {"epsilon": 1e-3}),
        ("no_scale_bias", {"X": [n((2, 3, 5))]}, {}),
    ]
    c["affine_channel"] = [
        ("nchw", {"X": [n((2, 3, 2, 2))], "Scale": [n(3)], "Bias": [n(3)]},
         {"data_layout": "NCHW"}),
        ("nhwc", {"X": [n((2, 2, 3, 4))], "Scale": [n(4)], "Bias": [n(4)]},
         {"data_layout": "NHWC"}),
        ("2d", {"X": [n((4, 3))], "Scale": [n(3)], "Bias": [n(3)]}, {"data_layout": "NCHW"}),
    ]
    c["shuffle_channel"] = [
        ("g2", {"X": [n((2, 6, 2, 3))]}, {"group": 2}),
        ("g3", {"X": [n((1, 6, 3, 1))]}, {"group": 3}),
    ]
    c["space_to_depth"] = [
        ("bs2", {"X": [n((2, 8, 4, 2))]}, {"blocksize": 2}),
        ("bs3", {"X": [n((1, 9, 3, 6))]}, {"blocksize": 3}),
    ]
    # distinct values 0.1 apart: each window's maximum is unambiguous under the step
    c["max_pool2d_with_index"] = [
        ("adaptive", {"X": [rng.permutation(70).reshape(1, 2, 5, 7) * 0.1]},
         {"ksize": [3, 2], "adaptive": True}),
        ("strided_pad", {"X": [rng.permutation(50).reshape(1, 2, 5, 5) * 0.1]},
         {"ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1]}),
    ]
    c["pool2d"] += [
        ("adaptive_max", {"X": [rng.permutation(70).reshape(1, 2, 7, 5) * 0.1]},
         {"ksize": [3, 2], "adaptive": True}),
        ("nhwc_max", {"X": [rng.permutation(60).reshape(1, 6, 5, 2) * 0.1]},
         {"ksize": [3, 2], "strides": [2, 2], "paddings": [1, 1], "data_format": "NHWC"}),
        ("nhwc_avg", {"X": [n((2, 5, 6, 3))]},
         {"pooling_type": "avg", "ksize": [3, 3], "strides": [2, 2], "paddings": [1, 1],
          "data_format": "NHWC"}),
        ("adaptive_avg", {"X": [n((2, 2, 5, 7))]},
         {"pooling_type": "avg", "ksize": [2, 3], "adaptive": True}),
    ]
    # -- loss cases --
    c["rank_loss"] = [
        ("n1", {"Label": [np.array([[0.0], [1.0], [0.5], [1.0], [0.0]])], "Left": [n((5, 1))],
                "Right": [n((5, 1))]}, {}),
        ("1d", {"Label": [np.array([1.0, 0.0, 0.5])], "Left": [n(3)], "Right": [n(3)]}, {}),
    ]
    # X1 − X2 chosen so that −Label (X1 − X2) + margin stays 0.1 away from the hinge
    mr_label = np.array([[1.0], [-1.0], [1.0], [-1.0], [1.0], [-1.0]])
    mr_x2 = n((6, 1))
    mr_t = _away_from(n((6, 1)), [0.0], 0.1)
    c["margin_rank_loss"] = [
        ("margin", {"X1": [mr_x2 + mr_label * (0.2 - mr_t)], "X2": [mr_x2],
                    "Label": [mr_label]}, {"margin": 0.2}),
    ]
    # hinge_loss / modified_huber_loss: margins v = x (2y − 1) kept 0.1 away from the kinks
    # at 1 (both) and −1 (modified_huber_loss)
    hl_y = np.array([[1.0], [0.0], [1.0], [0.0], [1.0], [0.0]])
    hl_sign = 2 * hl_y - 1
    hl_v = np.array([[-2.0], [-0.5], [0.3], [0.7], [1.5], [-1.4]])
    c["hinge_loss"] = [("n1", {"Logits": [hl_v * hl_sign], "Labels": [hl_y]}, {})]
    c["modified_huber_loss"] = [("n1", {"X": [hl_v * hl_sign], "Y": [hl_y]}, {})]
    c["bpr_loss"] = [
        ("2d", {"X": [n((4, 5))], "Label": [np.array([[0], [3], [4], [1]], np.int64)]}, {}),
        ("3d", {"X": [n((2, 3, 4))], "Label": [rng.integers(0, 4, (2, 3, 1))]}, {}),
    ]
    # every branch of the label code; X inside the bounds (outside them the gradient is 0 by
    # Paddle's rule while the loss still moves)
    c["teacher_student_sigmoid_loss"] = [
        ("branches", {"X": [n((6, 1)) * 2],
                      "Label": [np.array([[-2.0], [-1.0], [0.3], [1.7], [0.0], [1.0]])]}, {}),
        ("bounds", {"X": [np.array([[-2.5], [0.4], [2.7], [-0.6]])],
                    "Label": [np.array([[0.6], [1.2], [-1.0], [-2.0]])]},
         {"soft_max_up_bound": 3.0, "soft_max_lower_bound": -3.0}),
    ]
    c["bilinear_tensor_product"] = [
        ("bias", {"X": [n((3, 4))], "Y": [n((3, 2))], "Weight": [n((5, 4, 2))],
                  "Bias": [n((1, 5))]}, {}),
        ("no_bias", {"X": [n((2, 3))], "Y": [n((2, 3))], "Weight": [n((2, 3, 3))]}, {}),
    ]
    c["add_position_encoding"] = [
        ("dense", {"X": [n((2, 3, 6))]}, {"alpha": 0.5, "beta": 2.0}),
        ("lod", {"X": [n((5, 4))]}, {"alpha": 1.5, "beta": 1.0,
                                      "_lods": {"X": [((0, 2, 2, 5),)]}}),
    ]
    # -- index cases --
    i32 = np.int32
    c["scatter_nd_add"] = [
        ("rows_repeated", {"X": [n((4, 3))], "Index": [np.array([[1], [3], [1]])],
                           "Updates": [n((3, 3))]}, {}),
        ("points", {"X": [n((3, 4, 2))], "Index": [np.array([[[0, 1], [2, 3]], [[0, 1], [1, 0]]])],
                    "Updates": [n((2, 2, 2))]}, {}),
        ("empty_index", {"X": [n((2, 2))], "Index": [np.zeros((2, 0), np.int64)],
                         "Updates": [n((2, 2, 2))]}, {}),
    ]
    c["strided_slice"] = [
        ("clamped", {"Input": [n((3, 4, 5))]},
         {"axes": [0, 2], "starts": [1, -4], "ends": [3, 100], "strides": [1, 2],
          "infer_flags": [1, 1]}),
        ("negative_stride", {"Input": [n((3, 6))]},
         {"axes": [1], "starts": [5], "ends": [0], "strides": [-2], "infer_flags": [1]}),
        ("tensors", {"Input": [n((3, 4))], "StartsTensor": [np.array([0, 3], i32)],
                     "EndsTensorList": [np.array([2], i32), np.array([-1], i32)]},
         {"axes": [0, 1], "strides": [1, -1], "infer_flags": [-1, -1]}),
        ("decrease_axis", {"Input": [n((3, 4))]},
         {"axes": [0], "starts": [1], "ends": [2], "strides": [1], "infer_flags": [1],
          "decrease_axis": [0]}),
    ]
    c["crop"] = [
        ("attrs", {"X": [n((4, 5))]}, {"shape": [2, 3], "offsets": [1, 2]}),
        ("y_and_offsets", {"X": [n((3, 4, 5))], "Y": [n((2, 2, 3))],
                           "Offsets": [np.array([1, 0, 2], i32)]}, {}),
        ("batch_minus1", {"X": [n((3, 5))]}, {"shape": [-1, 2], "offsets": [0, 3]}),
    ]
    c["crop_tensor"] = [
        ("attrs_minus1", {"X": [n((3, 5))]}, {"shape": [2, -1], "offsets": [1, 1]}),
        ("tensor_lists", {"X": [n((4, 6))], "ShapeTensor": [np.array([2], i32),
                                                            np.array([3], i32)],
                          "OffsetsTensor": [np.array([1], i32), np.array([2], i32)]},
         {"shape": [0, 0], "offsets": [-1, -1]}),
        ("tensors", {"X": [n((3, 4, 5))], "Shape": [np.array([2, -1, 3], i32)],
                     "Offsets": [np.array([1, 1, 0], i32)]}, {"offsets": [-1, -1, -1]}),
    ]
    c["multiplex"] = [
        ("three", {"X": [n((4, 3)), n((4, 3)), n((4, 3))],
                   "Ids": [np.array([[2], [0], [2], [1]], i32)]}, {}),
        ("3d_int64_ids", {"X": [n((3, 2, 2)), n((3, 2, 2))],
                          "Ids": [np.array([[1], [1], [0]], np.int64)]}, {}),
    ]
    # -- ctc cases --
    # warpctc: labels with a repeat (needs a blank between) and, in "lod_infeasible", a
    # sequence too short for its labels (loss 0 and gradient 0, as warp-ctc's CPU kernel);
    # norm_by_times scales the gradient but not the loss, so it is checked in test_ctc_ops
    ctc_lod = {"Logits": [((0, 4, 6, 9),)], "Label": [((0, 2, 3, 5),)]}
    ctc_label = np.array([[1], [2], [3], [2], [2]], np.int32)
    c["warpctc"] = [
        ("lod", {"Logits": [n((9, 4))], "Label": [ctc_label]}, {"_lods": ctc_lod}),
        ("lod_blank2",
         {"Logits": [n((9, 4))], "Label": [np.array([[1], [3], [0], [3], [1]], np.int32)]},
         {"blank": 2, "_lods": ctc_lod}),
        ("lod_infeasible", {"Logits": [n((6, 3))],
                            "Label": [np.array([[1], [1], [2], [1]], np.int32)]},
         {"_lods": {"Logits": [((0, 2, 6),)], "Label": [((0, 2, 4),)]}}),
        ("padded", {"Logits": [n((5, 3, 4))],
                    "Label": [np.array([[1, 1, 0], [3, 0, 0], [2, 1, 3]], np.int32)],
                    "LogitsLength": [np.array([5, 2, 4], np.int64)],
                    "LabelLength": [np.array([2, 1, 3], np.int64)]}, {}),
    ]
    # -- sequence cases --
    seq_lod = ((0, 2, 2, 5, 7),)  # an empty second sequence
    c["row_conv"] = [
        ("lod", {"X": [n((7, 3))], "Filter": [n((3, 3))]}, {"_lods": {"X": [seq_lod]}}),
        ("filter_longer_than_sequences", {"X": [n((5, 2))], "Filter": [n((4, 2))]},
         {"_lods": {"X": [((0, 2, 5),)]}}),
        ("padded", {"X": [n((2, 4, 3))], "Filter": [n((2, 3))]}, {}),
    ]
    c["im2sequence"] = [
        ("pad_stride", {"X": [n((2, 2, 4, 5))]},
         {"kernels": [2, 2], "strides": [2, 1], "paddings": [1, 1, 1, 0]}),
        ("overlapping", {"X": [n((1, 3, 3, 3))]},
         {"kernels": [2, 3], "strides": [1, 1], "paddings": [0, 1, 1, 1]}),
        ("real_size", {"X": [n((2, 1, 4, 5))], "Y": [np.array([[7.0, 9.0], [4.0, 6.0]])]},
         {"kernels": [2, 2], "out_stride": [2, 2]}),
    ]
    scatter_lod = ((0, 4, 4, 7),)
    c["sequence_scatter"] = [
        ("rows", {"X": [n((3, 6))],
                  "Ids": [np.array([[0], [1], [2], [5], [4], [3], [0], [1], [3], [2], [5], [4]])],
                  "Updates": [n((12, 1))]},
         {"_lods": {"Ids": [((0, 3, 8, 12),)], "Updates": [((0, 3, 8, 12),)]}}),
        ("repeated_ids_3d", {"X": [n((4, 2, 3))],
                             "Ids": [np.array([[1], [5], [1], [0], [2], [2], [4]])],
                             "Updates": [n((7, 1))]},
         {"_lods": {"Ids": [scatter_lod], "Updates": [scatter_lod]}}),
    ]
    # -- conv3d cases --
    c["conv3d"] = [
        ("plain", {"Input": [n((1, 2, 3, 4, 3))], "Filter": [n((3, 2, 2, 2, 2))]}, {}),
        ("groups_stride_pad6_dilation",
         {"Input": [n((2, 4, 4, 5, 4))], "Filter": [n((4, 2, 2, 2, 2))]},
         {"groups": 2, "strides": [2, 1, 2], "paddings": [1, 0, 0, 1, 1, 1],
          "dilations": [1, 2, 1]}),
        ("same", {"Input": [n((1, 2, 3, 4, 4))], "Filter": [n((2, 2, 3, 2, 3))]},
         {"padding_algorithm": "SAME", "strides": [2, 1, 2]}),
        ("ndhwc", {"Input": [n((1, 3, 4, 3, 2))], "Filter": [n((2, 2, 2, 2, 2))]},
         {"data_format": "NDHWC", "paddings": [1, 0, 1]}),
    ]
    c["conv3d_transpose"] = [
        ("plain", {"Input": [n((1, 2, 2, 3, 2))], "Filter": [n((2, 3, 2, 2, 2))]}, {}),
        ("groups_stride_pad_dilation",
         {"Input": [n((1, 4, 2, 3, 2))], "Filter": [n((4, 1, 2, 3, 2))]},
         {"groups": 2, "strides": [2, 1, 2], "paddings": [1, 0, 0], "dilations": [1, 1, 2]}),
        ("output_size", {"Input": [n((1, 2, 2, 2, 3))], "Filter": [n((2, 2, 2, 2, 2))]},
         {"strides": [2, 2, 2], "output_size": [5, 4, 7]}),
    ]
    x5 = n((2, 2, 4, 5, 6))
    c["pool3d"] = [
        ("max", {"X": [x5]}, {"ksize": [2, 2, 3], "strides": [2, 1, 2],
                              "paddings": [1, 0, 1]}),
        ("max_ceil_pad6", {"X": [x5]}, {"ksize": [3, 2, 2], "strides": [2, 2, 2],
                                        "paddings": [1, 0, 0, 1, 1, 0], "ceil_mode": True}),
        ("avg_exclusive", {"X": [x5]}, {"pooling_type": "avg", "ksize": [2, 3, 2],
                                        "strides": [2, 2, 1], "paddings": [1, 1, 0]}),
        ("avg_inclusive_same", {"X": [x5]},
         {"pooling_type": "avg", "ksize": [2, 3, 2], "strides": [2, 2, 2],
          "padding_algorithm": "SAME", "exclusive": False}),
        ("adaptive_max", {"X": [x5]}, {"ksize": [3, 2, 4], "adaptive": True}),
        ("adaptive_avg", {"X": [x5]}, {"pooling_type": "avg", "ksize": [3, 2, 4],
                                       "adaptive": True}),
        ("global_avg", {"X": [x5]}, {"pooling_type": "avg", "global_pooling": True}),
        ("max_ndhwc", {"X": [n((1, 4, 3, 5, 2))]},
         {"ksize": [2, 2, 2], "strides": [1, 2, 2], "data_format": "NDHWC"}),
    ]
    c["max_pool3d_with_index"] = [
        ("strided", {"X": [x5]}, {"ksize": [2, 3, 2], "strides": [2, 1, 2],
                                  "paddings": [1, 1, 0]}),
        ("adaptive", {"X": [x5]}, {"ksize": [2, 3, 4], "adaptive": True}),
    ]
    # -- roi cases --
    # ROI corners and bin edges stay away from integers (the bilinear / integral kinks); the
    # max-pooled values are distinct normals; the third ROI reaches outside the 6 x 5 map
    roi_lod = {"_lods": {"ROIs": [((0, 2, 3),)]}}
    rois3 = np.array([[0.3, 0.6, 3.4, 4.2], [1.2, 0.2, 4.3, 5.6], [-2.3, -1.7, 6.7, 7.4]])
    c["roi_pool"] = [
        ("lod", {"X": [n((2, 3, 6, 5))], "ROIs": [rois3]},
         {"pooled_height": 2, "pooled_width": 3, **roi_lod}),
        ("scaled_rois_lod_input", {"X": [n((2, 2, 6, 5))], "ROIs": [rois3 * 2 + 0.2],
                                   "RoisLod": [np.array([0, 1, 3], np.int64)]},
         {"pooled_height": 3, "pooled_width": 2, "spatial_scale": 0.5, "_lods": {}}),
    ]
    c["roi_align"] = [
        ("adaptive", {"X": [n((2, 3, 6, 5))], "ROIs": [rois3]},
         {"pooled_height": 2, "pooled_width": 3, **roi_lod}),
        ("ratio2_scaled", {"X": [n((2, 2, 6, 5))], "ROIs": [rois3 * 2 + 0.2]},
         {"pooled_height": 3, "pooled_width": 2, "spatial_scale": 0.5, "sampling_ratio": 2,
          **roi_lod}),
    ]
    c["psroi_pool"] = [
        ("lod", {"X": [n((2, 12, 6, 5))], "ROIs": [rois3]},
         {"output_channels": 2, "pooled_height": 2, "pooled_width": 3, **roi_lod}),
        ("scaled", {"X": [n((2, 6, 6, 5))], "ROIs": [rois3 * 2 + 0.2]},
         {"output_channels": 1, "pooled_height": 3, "pooled_width": 2, "spatial_scale": 0.5,
          **roi_lod}),
    ]
    pr_rois = np.array([[0.3, 0.6, 3.4, 4.2], [1.2, 0.2, 4.3, 5.6], [6.5, 1.4, 12.5, 9.1]])
    c["prroi_pool"] = [
        ("lod", {"X": [n((2, 2, 6, 5))], "ROIs": [pr_rois]},
         {"pooled_height": 2, "pooled_width": 3, "spatial_scale": 1.0,
          "_lods": {"ROIs": [((0, 1, 3),)]}}),
        ("batch_roi_nums_scaled", {"X": [n((2, 2, 6, 5))], "ROIs": [pr_rois],
                                   "BatchRoINums": [np.array([2, 1], np.int64)]},
         {"pooled_height": 2, "pooled_width": 3, "spatial_scale": 0.5, "_lods": {}}),
    ]
    # -- spatial cases --
    c["affine_grid"] = [
        ("attr_shape", {"Theta": [n((2, 2, 3))]}, {"output_shape": [2, 1, 3, 4]}),
        ("tensor_shape", {"Theta": [n((3, 2, 3))],
                          "OutputShape": [np.array([3, 2, 4, 2], np.int32)]}, {}),
    ]

    def _grid(nb: int, h: int, w: int) -> np.ndarray:
        # pixel positions an integer plus a fraction in [0.15, 0.85], some outside X, so no
        # point sits on a kink of the bilinear interpolation
        px = rng.integers(-1, w, (nb, h, w)) + u(0.15, 0.85, (nb, h, w))
        py = rng.integers(-1, h, (nb, h, w)) + u(0.15, 0.85, (nb, h, w))
        return np.stack([px * 2 / (w - 1) - 1, py * 2 / (h - 1) - 1], axis=-1)

    c["grid_sampler"] = [
        ("square", {"X": [n((2, 3, 4, 4))], "Grid": [_grid(2, 4, 4)]}, {}),
        ("wide", {"X": [n((1, 2, 3, 5))], "Grid": [_grid(1, 3, 5)]}, {}),
    ]
    c["temporal_shift"] = [
        ("seg3", {"X": [n((6, 4, 2, 2))]}, {"seg_num": 3, "shift_ratio": 0.25}),
        ("seg2_ratio0.2", {"X": [n((4, 9, 2, 3))]}, {"seg_num": 2, "shift_ratio": 0.2}),
    ]
    c["unfold"] = [
        ("strided_padded", {"X": [n((2, 2, 5, 5))]},
         {"kernel_sizes": [2, 3], "strides": [1, 2], "paddings": [1, 0, 2, 1],
          "dilations": [1, 1]}),
        ("dilated", {"X": [n((1, 3, 6, 5))]},
         {"kernel_sizes": [2, 2], "strides": [2, 1], "paddings": [0, 1, 1, 0],
          "dilations": [2, 2]}),
    ]
    c["pad_constant_like"] = [
        ("2d", {"X": [n((4, 5))], "Y": [n((2, 3))]}, {"pad_value": 0.5}),
        ("3d", {"X": [n((2, 3, 4))], "Y": [n((2, 1, 4))]}, {"pad_value": -1.0}),
    ]
    c["fsp"] = [
        ("c3_c4", {"X": [n((2, 3, 2, 3))], "Y": [n((2, 4, 2, 3))]}, {}),
    ]
    # -- ctr cases --
    # cvm_grad writes the CVM values into dX[:, :2] (Fluid's convention, not a derivative):
    # with use_cvm=False and zero CVM that is the true gradient (Y does not read those columns)
    c["cvm"] = [("no_cvm", {"X": [n((4, 5))], "CVM": [np.zeros((4, 2))]}, {"use_cvm": False})]
    # data_norm's statistic "gradients" are batch statistics, not derivatives: integer
    # statistics (the kernel casts them) keep them out of the finite differences, so only
    # X@GRAD = Y@GRAD · Scales is checked
    dn_stats = {"BatchSize": [np.array([50, 80, 20, 40])], "BatchSum": [np.array([5, -8, 3, 0])],
                "BatchSquareSum": [np.array([60, 90, 15, 70])]}
    c["data_norm"] = [
        ("plain", {"X": [n((3, 4))], **dn_stats}, {"epsilon": 1e-4}),
        ("slot_dim", {"X": [u(0.5, 2.0, (3, 4))], **dn_stats}, {"slot_dim": 2}),
    ]
    c["filter_by_instag"] = [
        ("lod", {"Ins": [n((5, 3))], "Ins_tag": [np.array([[1], [2], [3], [2]], np.int64)],
                 "Filter_tag": [np.array([2], np.int64)]},
         {"is_lod": True, "_lods": {"Ins": [((0, 2, 3, 5),)], "Ins_tag": [((0, 1, 3, 4),)]}}),
        ("rows", {"Ins": [n((3, 2))], "Ins_tag": [np.array([[4], [5], [6]], np.int64)],
                  "Filter_tag": [np.array([4, 6], np.int64)]},
         {"is_lod": False, "_lods": {"Ins_tag": [((0, 1, 2, 3),)]}}),
    ]
    # -- rnn cases --
    lstmp_lod = {"_lods": {"Input": [((0, 3, 3, 5),)]}}  # sequences of 3, 0 and 2 steps
    g20 = np.random.default_rng(20).standard_normal  # the "clips" case's own draws
    c["lstmp"] = [
        ("peepholes", {"Input": [n((5, 8))], "Weight": [0.5 * n((3, 8))],
                       "ProjWeight": [0.5 * n((2, 3))], "Bias": [n((1, 14))]}, lstmp_lod),
        ("reverse_h0_c0_linear", {"Input": [n((5, 8))], "H0": [n((3, 3))], "C0": [n((3, 2))],
                                  "Weight": [0.5 * n((3, 8))], "ProjWeight": [n((2, 3))],
                                  "Bias": [n((1, 14))]},
         {"is_reverse": True, "proj_activation": "identity", **lstmp_lod}),
        # proj_activation relu means cell_activation (sigmoid here), Fluid 1.8's quirk
        ("no_peepholes_c0", {"Input": [n((5, 8))], "C0": [n((3, 2))],
                             "Weight": [0.5 * n((3, 8))], "ProjWeight": [n((2, 3))],
                             "Bias": [n((1, 8))]},
         {"use_peepholes": False, "cell_activation": "sigmoid", "proj_activation": "relu",
          **lstmp_lod}),
        # its own generator: 5 of the 25 cell and projection values clipped, every value at
        # least 0.06 from a clip bound (no kink within EPS, whatever the cases above draw)
        ("clips", {"Input": [2.0 * g20((5, 8))], "Weight": [0.5 * g20((3, 8))],
                   "ProjWeight": [g20((2, 3))], "Bias": [g20((1, 14))]},
         {"cell_clip": 0.45, "proj_clip": 0.35, **lstmp_lod}),
    ]
    c["cudnn_lstm"] = [
        ("one_layer", {"Input": [n((3, 2, 3))], "InitH": [n((1, 2, 2))],
                       "InitC": [n((1, 2, 2))], "W": [0.5 * n(56)]},
         {"input_size": 3, "hidden_size": 2, "num_layers": 1}),
        ("two_layers_bidirec", {"Input": [n((3, 2, 3))], "InitH": [n((4, 2, 2))],
                                "InitC": [n((4, 2, 2))], "W": [0.5 * n(240)]},
         {"input_size": 3, "hidden_size": 2, "num_layers": 2, "is_bidirec": True}),
        # the masks the forward draws (from its seed) reach the grad op through Reserve
        ("two_layers_dropout", {"Input": [n((3, 2, 3))], "InitH": [n((2, 2, 2))],
                                "InitC": [n((2, 2, 2))], "W": [0.5 * n(104)]},
         {"input_size": 3, "hidden_size": 2, "num_layers": 2, "dropout_prob": 0.4,
          "seed": 3}),
    ]
    # -- nn extra cases --
    # power_iters=0: U and V are the constants the grad treats them as
    c["spectral_norm"] = [
        ("dim0", {"Weight": [n((3, 4))], "U": [n(3)], "V": [n(4)]},
         {"dim": 0, "power_iters": 0}),
        ("dim1_4d", {"Weight": [n((2, 3, 2, 2))], "U": [n(3)], "V": [n(8)]},
         {"dim": 1, "power_iters": 0}),
    ]
    c["inplace_abn"] = [
        ("identity", {"X": [n((4, 3, 2))], "Scale": [u(0.5, 1.5, 3)], "Bias": [n(3)],
                      "Mean": [n(3)], "Variance": [u(0.5, 1.5, 3)]}, {}),
        ("leaky_relu", {"X": [n((5, 3))], "Scale": [u(0.5, 1.5, 3)], "Bias": [n(3)],
                        "Mean": [n(3)], "Variance": [u(0.5, 1.5, 3)]},
         {"activation": "leaky_relu", "alpha": 0.1}),
        ("elu_global", {"X": [n((4, 2, 3))], "Scale": [u(0.5, 1.5, 2)], "Bias": [n(2)],
                        "Mean": [n(2)], "Variance": [u(0.5, 1.5, 2)]},
         {"activation": "elu", "alpha": 0.7, "use_global_stats": True}),
    ]
    c["sample_logits"] = [
        ("customized", {"Logits": [n((3, 6))], "Labels": [np.array([[1], [4], [0]])],
                        "CustomizedSamples": [np.array([[1, 2, 4, 3], [4, 0, 5, 2],
                                                        [0, 3, 3, 1]])],
                        "CustomizedProbabilities": [u(0.1, 0.9, (3, 4))]},
         {"use_customized_samples": True, "num_samples": 3}),
    ]
    c["tree_conv"] = [
        ("depth2", {"NodesVector": [n((2, 5, 3))],
                    "EdgeSet": [np.array([[[1, 2], [1, 3], [3, 4], [0, 0]],
                                          [[1, 2], [2, 3], [2, 4], [2, 5]]], np.int32)],
                    "Filter": [n((3, 3, 2, 2))]}, {"max_depth": 2}),
        ("depth3", {"NodesVector": [n((1, 6, 2))],
                    "EdgeSet": [np.array([[[1, 2], [1, 3], [1, 4], [2, 5], [5, 6]]],
                                         np.int32)],
                    "Filter": [n((2, 3, 1, 3))]}, {"max_depth": 3}),
    ]
    # -- deformable cases --
    def off(shape):
        # whole-pixel shifts plus a fraction in [0.15, 0.85]: sampling points stay off the
        # integer grid, where the bilinear weights have kinks
        return rng.integers(-1, 2, shape) + u(0.15, 0.85, shape)

    c["deformable_conv"] = [
        ("groups2_dg2_pad1", {"Input": [n((2, 4, 4, 4))], "Offset": [off((2, 16, 5, 5))],
                              "Mask": [u(0.3, 1.2, (2, 8, 5, 5))],
                              "Filter": [n((4, 2, 2, 2))]},
         {"paddings": [1, 1], "groups": 2, "deformable_groups": 2}),
        ("stride2_3x3", {"Input": [n((1, 2, 5, 5))], "Offset": [off((1, 18, 3, 3))],
                         "Mask": [u(0.3, 1.2, (1, 9, 3, 3))], "Filter": [n((2, 2, 3, 3))]},
         {"strides": [2, 2], "paddings": [1, 1]}),
    ]
    c["deformable_conv_v1"] = [
        ("dilation", {"Input": [n((1, 3, 4, 5))], "Offset": [off((1, 8, 2, 4))],
                      "Filter": [n((2, 3, 2, 2))]}, {"dilations": [2, 1]}),
    ]
    # ROIs and shifts that keep every sample strictly inside the map (no clamping, where
    # Paddle's Trans gradient takes the slope at the clamped point)
    c["deformable_psroi_pooling"] = [
        ("trans_2_classes", {"Input": [n((2, 8, 6, 7))],
                             "ROIs": [np.array([[1.0, 1.0, 4.0, 3.0], [2.0, 0.6, 5.0, 4.0],
                                                [0.8, 1.2, 3.0, 4.4]])],
                             "Trans": [u(-0.5, 0.5, (3, 4, 2, 2))]},
         {"output_dim": 2, "group_size": [2, 2], "pooled_height": 2, "pooled_width": 2,
          "part_size": [2, 2], "sample_per_part": 2, "trans_std": 0.1,
          "_lods": {"ROIs": [((0, 2, 3),)]}}),
        ("no_trans_scaled", {"Input": [n((1, 3, 5, 5))],
                             "ROIs": [np.array([[2.0, 2.0, 7.0, 6.0]])],
                             "Trans": [np.zeros((1, 2, 2, 3))]},
         {"no_trans": True, "spatial_scale": 0.5, "output_dim": 3, "pooled_height": 2,
          "pooled_width": 3, "part_size": [2, 3], "sample_per_part": 3,
          "_lods": {"ROIs": [((0, 1),)]}}),
    ]
    # -- box cases --
    # -- nms cases --
    # -- detection target cases --
    # sigmoid_focal_loss: labels cover ignored (-1), background (0) and each class; fg 0 -> 1
    focal_label = np.array([[1], [0], [-1], [3], [2], [3]], np.int32)
    c["sigmoid_focal_loss"] = [
        ("default", {"X": [n((6, 3))], "Label": [focal_label],
                     "FgNum": [np.array([3], np.int32)]}, {}),
        ("gamma1.5_fg0", {"X": [2 * n((6, 3))], "Label": [focal_label],
                          "FgNum": [np.array([0], np.int32)]}, {"gamma": 1.5, "alpha": 0.6}),
        ("rank3", {"X": [n((2, 3, 4))], "Label": [np.array([[[4], [0], [1]], [[-1], [2], [3]]],
                                                           np.int32)],
                   "FgNum": [np.array([5], np.int32)]}, {"gamma": 0.0}),
    ]
    # yolov3_loss: its own rng (the cases must not move with others' draws); checked to keep
    # every prediction's best IoU >= 0.012 from ignore_thresh, each positive on its own cell
    # and the L1 targets >= 0.09 from the predictions; one padding box (w = h = 0)
    yr = np.random.default_rng(2024)
    y3_box = np.array([[[0.2, 0.3, 0.15, 0.2], [0.7, 0.6, 0.4, 0.3], [0.5, 0.85, 0.05, 0.1],
                        [0.0, 0.0, 0.0, 0.0]],
                       [[0.45, 0.15, 0.3, 0.5], [0.85, 0.75, 0.1, 0.12], [0.1, 0.9, 0.25, 0.2],
                        [0.6, 0.4, 0.08, 0.2]]])
    y3_label = np.array([[0, 2, 1, 0], [1, 1, 0, 2]], np.int32)
    y3 = {"anchors": [10, 13, 16, 30, 33, 23, 30, 61, 62, 45, 59, 119], "class_num": 3,
          "downsample_ratio": 32}
    c["yolov3_loss"] = [
        ("mask012", {"X": [yr.standard_normal((2, 24, 4, 4)) * 0.5], "GTBox": [y3_box],
                     "GTLabel": [y3_label]},
         {**y3, "anchor_mask": [0, 1, 2], "ignore_thresh": 0.4}),
        ("mask345_score", {"X": [yr.standard_normal((2, 24, 4, 4)) * 0.5], "GTBox": [y3_box],
                           "GTLabel": [y3_label], "GTScore": [yr.uniform(0.4, 1.0, (2, 4))]},
         {**y3, "anchor_mask": [3, 4, 5], "ignore_thresh": 0.35, "use_label_smooth": False,
          "scale_x_y": 1.1}),
    ]
    # -- activation cases --
    # fixed inputs (no draws from rng, so the cases after these keep their values)
    c["cast"] = [("f64", {"X": [np.linspace(-1.5, 2.0, 12).reshape(3, 4)]},
                  {"in_dtype": "float64", "out_dtype": "float64"})]
    c["floor"] = [("x", {"X": [np.linspace(-2.7, 2.3, 12).reshape(3, 4)]}, {})]
    c["logsigmoid"] = [("x", {"X": [n((3, 4)) * 3]}, {})]
    c["tanh_shrink"] = [("x", {"X": [n((3, 4))]}, {})]
    c["softshrink"] = [("lambda", {"X": [_away_from(n((3, 4)), [-0.3, 0.3])]}, {"lambda": 0.3}),
                       ("default", {"X": [_away_from(n((2, 5)), [-0.5, 0.5])]}, {})]
    c["hard_shrink"] = [("t", {"X": [_away_from(n((3, 4)), [-0.4, 0.4])]}, {"threshold": 0.4}),
                        ("default", {"X": [_away_from(n((2, 5)), [-0.5, 0.5])]}, {})]
    c["thresholded_relu"] = [("t", {"X": [_away_from(n((3, 4)), [0.2])]}, {"threshold": 0.2}),
                             ("default", {"X": [_away_from(n((2, 5)) + 1, [1.0])]}, {})]
    c["rsqrt"] = [("x", {"X": [u(0.5, 2.0, (3, 4))]}, {})]
    c["reciprocal"] = [("x", {"X": [u(0.5, 2.0, (3, 4)) * np.sign(n((3, 4)))]}, {})]
    c["ceil"] = [("x", {"X": [np.floor(n((3, 4)) * 3) + u(0.1, 0.9, (3, 4))]}, {})]
    c["round"] = [("x", {"X": [np.floor(n((3, 4)) * 3) + u(0.1, 0.4, (3, 4))]}, {})]
    c["sin"] = [("x", {"X": [n((3, 4))]}, {})]
    c["acos"] = [("x", {"X": [u(-0.9, 0.9, (3, 4))]}, {})]
    c["asin"] = [("x", {"X": [u(-0.9, 0.9, (3, 4))]}, {})]
    c["atan"] = [("x", {"X": [n((3, 4)) * 2]}, {})]
    c["cosh"] = [("x", {"X": [n((3, 4))]}, {})]
    c["sinh"] = [("x", {"X": [n((3, 4))]}, {})]
    c["erf"] = [("x", {"X": [n((3, 4))]}, {})]
    c["cumsum"] = [("default", {"X": [n((3, 4))]}, {}),
                   ("axis0_exclusive", {"X": [n((3, 4, 2))]}, {"axis": 0, "exclusive": True}),
                   ("reverse", {"X": [n((3, 4))]}, {"axis": 1, "reverse": True}),
                   ("both", {"X": [n((2, 5))]}, {"axis": -1, "reverse": True,
                                                 "exclusive": True})]
    # -- creation cases --
    # distinct values (no ties) so the sort order is fixed under the finite differences
    c["argsort"] = [
        ("last_axis", {"X": [rng.permutation(12).reshape(3, 4) * 0.5 + n((3, 4)) * 0.01]},
         {"axis": -1}),
        ("axis0_desc", {"X": [rng.permutation(24).reshape(2, 3, 4) * 0.5 + n((2, 3, 4)) * 0.01]},
         {"axis": 0, "descending": True}),
    ]
    c["reverse"] = [
        ("one_axis", {"X": [n((3, 4))]}, {"axis": [0]}),
        ("two_axes", {"X": [n((2, 3, 4))]}, {"axis": [0, -1]}),
    ]
    # -- rnn api cases --
    # -- distribution cases --
    c["center_loss"] = [
        ("update", {"X": [n((5, 3))], "Label": [np.array([[0], [2], [0], [3], [2]], np.int64)],
                    "Centers": [n((4, 3))], "CenterUpdateRate": [np.array([0.1])]},
         {"cluster_num": 4, "need_update": True}),
        ("no_update", {"X": [n((3, 4))], "Label": [np.array([[1], [0], [1]], np.int64)],
                       "Centers": [n((2, 4))], "CenterUpdateRate": [np.array([0.5])]},
         {"cluster_num": 2, "need_update": False}),
    ]
    # -- lod array cases --
    # -- double grad cases --
    # slice_grad, squeeze2_grad, unsqueeze2_grad (grads: the forward op again) and conv3d_grad
    # (conv3d_grad_grad). Their own generator, so that the cases after them keep their draws
    dg = np.random.default_rng(97).standard_normal
    c["slice_grad"] = [
        ("clamped_negative", {"Input": [dg((4, 5, 6))], "Out@GRAD": [dg((3, 5, 3))]},
         {"axes": [0, 2], "starts": [1, -4], "ends": [100, -1]}),
        ("decrease", {"Input": [dg((4, 5))], "Out@GRAD": [dg((5,))]},
         {"axes": [0], "starts": [2], "ends": [3], "decrease_axis": [0]}),
    ]
    c["squeeze2_grad"] = [("axes", {"XShape": [np.zeros((0, 2, 1, 3, 1))],
                                    "Out@GRAD": [dg((2, 3, 1))]}, {"axes": [1]}),
                          ("all", {"XShape": [np.zeros((0, 2, 1, 3, 1))],
                                   "Out@GRAD": [dg((2, 3))]}, {})]
    c["unsqueeze2_grad"] = [("axes", {"XShape": [np.zeros((0, 2, 3))],
                                      "Out@GRAD": [dg((1, 2, 1, 3))]}, {"axes": [0, 2]})]
    c["conv3d_grad"] = [
        ("plain", {"Input": [dg((1, 2, 3, 4, 3))], "Filter": [dg((3, 2, 2, 2, 2))],
                   "Output@GRAD": [dg((1, 3, 2, 3, 2))]}, {}),
        ("groups_stride_pad", {"Input": [dg((1, 4, 4, 3, 4))], "Filter": [dg((2, 2, 2, 2, 2))],
                               "Output@GRAD": [dg((1, 2, 3, 2, 2))]},
         {"groups": 2, "strides": [2, 1, 2], "paddings": [1, 0, 0]}),
        ("ndhwc", {"Input": [dg((1, 3, 3, 3, 2))], "Filter": [dg((2, 2, 2, 2, 2))],
                   "Output@GRAD": [dg((1, 2, 2, 2, 2))]}, {"data_format": "NDHWC"}),
    ]
    # -- norm double grad cases --
    # batch_norm_grad, instance_norm_grad (their *_grad_grad). Their own generator: the
    # cases after them keep their draws. The harness perturbs X with SavedMean and
    # SavedVariance held, while in training DX is the total derivative through the
    # statistics (Fluid's): there the cases have Y@GRAD = 0 (both derivatives 0) and check DDY
    # and DScale; tests/core/test_norm_double_grad.py checks DX through the statistics.
    # use_global_stats takes the statistics as constants: all three are checked
    nr = np.random.default_rng(81)

    def _bn_grad_ins(x, axes, c, dy, glob):
        mean = nr.standard_normal(c) if glob else x.mean(axis=axes)
        var = nr.uniform(0.5, 2.0, c) if glob else x.var(axis=axes)
        return {"X": [x], "Scale": [nr.standard_normal(c)], "Bias": [nr.standard_normal(c)],
                "Mean": [mean], "Variance": [var], "SavedMean": [mean],
                "SavedVariance": [1.0 / np.sqrt(var + 1e-5)], "Y@GRAD": [dy]}

    bn_x, bn_xl = nr.standard_normal((3, 2, 2, 3)), nr.standard_normal((2, 3, 2, 2))
    c["batch_norm_grad"] = [
        ("global_stats", _bn_grad_ins(bn_x, (0, 2, 3), 2, nr.standard_normal(bn_x.shape), True),
         {"use_global_stats": True}),
        ("global_stats_nhwc", _bn_grad_ins(bn_xl, (0, 1, 2), 2,
                                           nr.standard_normal(bn_xl.shape), True),
         {"use_global_stats": True, "data_layout": "NHWC"}),
        ("train_zero_dy", _bn_grad_ins(bn_x, (0, 2, 3), 2, np.zeros(bn_x.shape), False), {}),
    ]
    in_x = nr.standard_normal((2, 3, 2, 2))
    in_stats = {"SavedMean": [in_x.mean(axis=(2, 3)).reshape(-1)],
                "SavedVariance": [1.0 / np.sqrt(in_x.var(axis=(2, 3)).reshape(-1) + 1e-5)],
                "Y@GRAD": [np.zeros(in_x.shape)]}
    c["instance_norm_grad"] = [
        ("zero_dy", {"X": [in_x], "Scale": [nr.standard_normal(3)], **in_stats}, {}),
        ("zero_dy_no_scale", {"X": [in_x], **in_stats}, {}),
    ]
    # -- pyramid hash cases --
    # the grad ops with a double grad: their inputs are the forward values and Out@GRAD
    dd_x = _away_from(n((3, 4)), [0.0])
    c["relu_grad"] = [("2d", {"Out": [dd_x], "Out@GRAD": [n((3, 4))]}, {})]
    c["leaky_relu_grad"] = [("alpha", {"X": [dd_x], "Out@GRAD": [n((3, 4))]}, {"alpha": 0.1})]
    c["elu_grad"] = [("alpha", {"X": [dd_x], "Out@GRAD": [n((3, 4))]}, {"alpha": 1.3})]
    c["sqrt_grad"] = [("2d", {"Out": [u(0.5, 2.0, (3, 4))], "Out@GRAD": [n((3, 4))]}, {})]
    c["square_grad"] = [("2d", {"X": [n((3, 4))], "Out@GRAD": [n((3, 4))]}, {})]
    c["mul_grad"] = [
        ("2d", {"X": [n((4, 5))], "Y": [n((5, 3))], "Out@GRAD": [n((4, 3))]}, {}),
        ("x_num_col_dims=2", {"X": [n((2, 3, 4))], "Y": [n((4, 3))], "Out@GRAD": [n((2, 3, 3))]},
         {"x_num_col_dims": 2}),
    ]
    for ew in ("elementwise_add", "elementwise_sub", "elementwise_mul"):
        c[ew + "_grad"] = [
            ("same", {"X": [n((3, 4))], "Y": [n((3, 4))], "Out@GRAD": [n((3, 4))]}, {}),
            ("bcast_axis1", {"X": [n((2, 3, 4))], "Y": [n((3,))], "Out@GRAD": [n((2, 3, 4))]},
             {"axis": 1}),
        ]
    dd_dx, dd_dy = n((2, 3, 4)), _away_from(u(-2.0, 2.0, (3,)), [0.0], 0.3)
    dd_sx, dd_sy = n((3, 4)), _away_from(u(-2.0, 2.0, (3, 4)), [0.0], 0.3)
    c["elementwise_div_grad"] = [
        ("same", {"X": [dd_sx], "Y": [dd_sy], "Out": [dd_sx / dd_sy], "Out@GRAD": [n((3, 4))]},
         {}),
        ("bcast_axis1", {"X": [dd_dx], "Y": [dd_dy], "Out": [dd_dx / dd_dy[:, None]],
                         "Out@GRAD": [n((2, 3, 4))]}, {"axis": 1}),
    ]
    for red in ("reduce_sum", "reduce_mean"):
        c[red + "_grad"] = [
            ("dim1", {"X": [n((3, 4))], "Out@GRAD": [n((3,))]}, {"dim": [1]}),
            ("all_keep", {"X": [n((2, 3))], "Out@GRAD": [n((1, 1))]},
             {"dim": [0, 1], "keep_dim": True}),
        ]
    c["mean_grad"] = [("2d", {"X": [n((3, 4))], "Out@GRAD": [n((1,))]}, {})]
    c["reshape2_grad"] = [("3x4_to_4x3", {"XShape": [np.zeros((0, 3, 4))],
                                          "Out@GRAD": [n((4, 3))]}, {"shape": [4, 3]})]
    c["conv2d_grad"] = [
        ("pad1", {"Input": [n((2, 2, 4, 4))], "Filter": [n((3, 2, 3, 3))],
                  "Output@GRAD": [n((2, 3, 4, 4))]}, {"paddings": [1, 1]}),
        ("stride2_groups2", {"Input": [n((1, 4, 5, 5))], "Filter": [n((2, 2, 3, 3))],
                             "Output@GRAD": [n((1, 2, 3, 3))]},
         {"paddings": [1, 1], "strides": [2, 2], "groups": 2}),
        ("nhwc", {"Input": [n((1, 4, 4, 2))], "Filter": [n((3, 2, 3, 3))],
                  "Output@GRAD": [n((1, 4, 4, 3))]}, {"paddings": [1, 1], "data_format": "NHWC"}),
    ]
    c["depthwise_conv2d_grad"] = [
        ("depthwise", {"Input": [n((1, 2, 4, 4))], "Filter": [n((2, 1, 3, 3))],
                       "Output@GRAD": [n((1, 2, 2, 2))]}, {"groups": 2}),
    ]
    c["transpose2_grad"] = [("3d", {"XShape": [np.zeros((0, 2, 3, 4))],
                                    "Out@GRAD": [n((4, 2, 3))]}, {"axis": [2, 0, 1]})]
    c["pad_grad"] = [("2d_value", {"X": [n((2, 3))], "Out@GRAD": [n((3, 6))]},
                      {"paddings": [0, 1, 2, 1], "pad_value": 1.5})]
    # -- contrib lod cases --
    mmt_lods = {"X": [((0, 2, 2, 5),)], "Y": [((0, 3, 4, 5),)]}  # one empty pair
    c["match_matrix_tensor"] = [
        ("dim_t=2", {"X": [n((5, 3))], "Y": [n((5, 3))], "W": [n((3, 2, 3))]},
         {"dim_t": 2, "_lods": mmt_lods}),
    ]
    # well separated values, so that no perturbation reorders a row's top k
    topk_x = (rng.permutation(22) * 0.1 + u(0.0, 0.05, 22)).reshape(-1, 1)
    c["sequence_topk_avg_pooling"] = [
        ("short_rows", {"X": [topk_x], "ROW": [np.zeros((3, 1), np.int64)],
                        "COLUMN": [np.zeros((7, 1), np.int64)]},
         {"topks": [1, 2, 4], "channel_num": 2,
          "_lods": {"X": [((0, 16, 22),)], "ROW": [((0, 2, 3),)], "COLUMN": [((0, 4, 7),)]}}),
    ]
    vconv_lods = {"X": [((0, 24, 24, 36),)], "ROW": [((0, 3, 3, 5),)],
                  "COLUMN": [((0, 4, 6, 9),)]}
    c["var_conv_2d"] = [
        ("3x2_stride", {"X": [n((36, 1))], "ROW": [np.zeros((5, 1), np.int64)],
                        "COLUMN": [np.zeros((9, 1), np.int64)], "W": [n((3, 12))]},
         {"InputChannel": 2, "OutputChannel": 3, "KernelH": 3, "KernelW": 2, "StrideH": 1,
          "StrideW": 2, "_lods": vconv_lods}),
    ]
    fesp_ids = np.array([[1], [4], [1], [2], [0], [4]], dtype=np.int64)
    fesp_lods = {"_lods": {"Ids": [((0, 2, 2, 6),)]}}
    c["fused_embedding_seq_pool"] = [
        ("dense", {"W": [n((6, 3))], "Ids": [fesp_ids]}, fesp_lods),
        ("sparse_padding", {"W": [n((6, 3))], "Ids": [fesp_ids]},
         {"is_sparse": True, "padding_idx": 4, **fesp_lods}),
        ("two_ids_per_row", {"W": [n((6, 2))], "Ids": [fesp_ids.reshape(3, 2, 1)]},
         {"_lods": {"Ids": [((0, 1, 3),)]}}),
    ]
    # -- contrib cases --
    fea_sum = _away_from(n((3, 4)), [0.0])
    fea_y = n((4,))
    c["fused_elemwise_activation"] = [
        ("add_scale", {"X": [n((3, 4))], "Y": [n((3, 4))]},
         {"functor_list": ["elementwise_add", "scale"], "scale": 1.7}),
        ("scale_add_bcast", {"X": [n((2, 3, 4))], "Y": [n((3,))]},
         {"functor_list": ["scale", "elementwise_add"], "scale": -0.6, "axis": 1}),
        ("relu_add_saved", {"X": [fea_sum - fea_y], "Y": [fea_y]},
         {"functor_list": ["relu", "elementwise_add"], "save_intermediate_out": True}),
        ("add_relu", {"X": [n((3, 4))], "Y": [_away_from(n((4,)), [0.0])]},
         {"functor_list": ["elementwise_add", "relu"], "save_intermediate_out": True}),
        ("mul_scale", {"X": [n((3, 4))], "Y": [n((3, 4))]},
         {"functor_list": ["elementwise_mul", "scale"], "scale": 0.5}),
        ("tanh_add", {"X": [n((3, 4))], "Y": [n((3, 4))]},
         {"functor_list": ["tanh", "elementwise_add"]}),
        ("mul_tanh_bcast", {"X": [n((2, 3))], "Y": [n((3,))]},
         {"functor_list": ["elementwise_mul", "tanh"], "save_intermediate_out": True}),
        ("mul_sigmoid", {"X": [n((3, 4))], "Y": [n((3, 4))]},
         {"functor_list": ["elementwise_mul", "sigmoid"]}),
        ("x_smaller", {"X": [n((4,))], "Y": [n((3, 4))]},
         {"functor_list": ["elementwise_mul", "tanh"]}),
    ]
    c["shuffle_batch"] = [
        ("2d", {"X": [n((5, 3))]}, {"startup_seed": 7}),
        ("3d_seed_input", {"X": [n((2, 3, 2))], "Seed": [np.array([11], np.int64)]}, {}),
    ]
    c["partial_concat"] = [
        ("two", {"X": [n((3, 4)), n((3, 4))]}, {"start_index": 1, "length": 2}),
        ("negative_start", {"X": [n((2, 5)), n((2, 5)), n((2, 5))]}, {"start_index": -3}),
    ]
    c["partial_sum"] = [
        ("two", {"X": [n((3, 4)), n((3, 4))]}, {"start_index": 0, "length": 2}),
        ("rest", {"X": [n((2, 5)), n((2, 5)), n((2, 5))]}, {"start_index": 2}),
    ]
    c["batch_fc"] = [("3slots", {"Input": [n((3, 4, 2))], "W": [n((3, 2, 5))],
                                 "Bias": [n((3, 5))]}, {})]
    c["rank_attention"] = [
        ("max_rank2", {"X": [n((5, 3))],
                       "RankOffset": [np.array([[1, 1, 0, 2, 1], [2, 1, 0, 2, 1],
                                                [-1, -1, -1, -1, -1], [1, 1, 3, -1, -1],
                                                [2, 1, 2, 2, 4]], np.int32)],
                       "RankParam": [n((2 * 2 * 3, 4))]}, {"MaxRank": 2}),
    ]
    # -- amp cases --
    # -- weight norm cases --
    c["transpose"] = [("swap01", {"X": [n((3, 4, 2))]}, {"axis": [1, 0, 2]}),
                      ("4d", {"X": [n((2, 3, 4, 2))]}, {"axis": [0, 3, 1, 2]})]
    # -- rcnn target cases --
    # -- detection assign cases --
    rpt_quads = np.array([[0.5, 0.8, 6.2, 1.1, 5.7, 5.3, 0.9, 4.6],
                          [2.0, 2.0, 9.0, 3.0, 10.5, 9.5, 1.0, 8.0],
                          [3.1, 1.0, 7.9, 2.4, 6.6, 6.8, 2.2, 5.1]])
    c["roi_perspective_transform"] = [
        ("lod", {"X": [n((2, 2, 7, 8))], "ROIs": [rpt_quads]},
         {"transformed_height": 3, "transformed_width": 4, "_lods": {"ROIs": [((0, 2, 3),)]}}),
        ("scaled", {"X": [n((1, 2, 5, 6))], "ROIs": [rpt_quads]},
         {"transformed_height": 4, "transformed_width": 3, "spatial_scale": 0.6,
          "_lods": {"ROIs": [((0, 3),)]}}),
    ]
    # -- slice bounds from tensors (a Variable index or bound): their own generator --
    sg, i32 = np.random.default_rng(131).standard_normal, np.int32
    c["slice"] += [
        ("tensor_list", {"Input": [sg((4, 5))],
                         "StartsTensorList": [np.array([1], i32), np.array([-3], i32)],
                         "EndsTensorList": [np.array([3], np.int64), np.array([5], i32)]},
         {"axes": [0, 1], "starts": [-1, -3], "ends": [-1, 5], "infer_flags": [-1, -1]}),
        ("tensor_decrease", {"Input": [sg((4, 3))], "StartsTensor": [np.array([2], i32)],
                             "EndsTensor": [np.array([3], i32)]},
         {"axes": [0], "infer_flags": [-1], "decrease_axis": [0]}),
    ]
    c["depthwise_conv2d_transpose"] = [
        ("stride_asym_pad", {"Input": [n((2, 3, 3, 4))], "Filter": [n((3, 1, 3, 2))]},
         {"groups": 3, "strides": [2, 2], "paddings": [1, 0, 1, 2]}),
        ("nhwc_same", {"Input": [n((1, 4, 3, 2))], "Filter": [n((2, 1, 3, 3))]},
         {"groups": 2, "strides": [2, 1], "padding_algorithm": "SAME", "data_format": "NHWC"}),
    ]
    # -- tensor attr inputs (scale, unsqueeze2, split), the v1 shape ops and the norms of
    # Fluid 1.8 (test_tensor_attr_inputs2): their own generator --
    tg = np.random.default_rng(137)
    tn = tg.standard_normal
    c["scale"] += [("scale_tensor", {"X": [tn((3, 4))], "ScaleTensor": [np.array([-2.5])]},
                    {"scale": 7.0, "bias": 0.5})]
    c["unsqueeze2"] += [
        ("axes_tensor", {"X": [tn((3, 4))], "AxesTensor": [np.array([0, -1], np.int64)]}, {}),
        ("axes_tensor_list", {"X": [tn((3, 4))],
                              "AxesTensorList": [np.array([1], i32), np.array([3], i32)]}, {})]
    c["split"] += [
        ("axis_tensor", {"X": [tn((4, 6))], "AxisTensor": [np.array([1], i32)]},
         {"num": 3, "axis": 0, "_out_counts": {"Out": 3}}),
        ("sections_list", {"X": [tn((5, 3))],
                           "SectionsTensorList": [np.array([2], i32), np.array([-1], i32)]},
         {"sections": [-1, -1], "axis": 0, "_out_counts": {"Out": 2}})]
    c["squeeze"] = [("axes", {"X": [tn((3, 1, 4, 1))]}, {"axes": [1, -1]}),
                    ("all", {"X": [tn((1, 3, 1))]}, {})]
    c["unsqueeze"] = [("axes", {"X": [tn((3, 4))]}, {"axes": [0, 2]}),
                      ("axes_tensor", {"X": [tn((3, 4))], "AxesTensor": [np.array([1], i32)]},
                       {})]
    c["flatten"] = [("axis2", {"X": [tn((2, 3, 4))]}, {"axis": 2}),
                    ("axis0", {"X": [tn((2, 3))]}, {"axis": 0})]
    c["squared_l2_norm"] = [("x", {"X": [tn((3, 4))]}, {})]
    c["l1_norm"] = [("x", {"X": [_away_from(tn((3, 4)), [0.0])]}, {})]
    c["squared_l2_distance"] = [
        ("same_rows", {"X": [tn((3, 4))], "Y": [tn((3, 4))]}, {}),
        ("one_row_y", {"X": [tn((3, 2, 2))], "Y": [tn((1, 4))]}, {})]
    # -- sequence ops, Fluid 1.8 cases (test_sequence_fluid18.py) --
    sg = np.random.default_rng(18)
    sn = sg.standard_normal
    c["sequence_conv"] += [
        # paddingTrainable: PaddingData [up_pad + down_pad, D] gets a gradient too
        ("padding_trainable", {"X": [sn((7, 2))], "Filter": [sn((6, 3))],
                               "PaddingData": [sn((2, 2))]},
         {"contextStart": -1, "contextLength": 3, "paddingTrainable": True,
          "_lods": {"X": [((0, 2, 2, 5, 7),)]}}),
        ("padding_trainable_after", {"X": [sn((6, 2))], "Filter": [sn((6, 2))],
                                     "PaddingData": [sn((3, 2))]},
         {"contextStart": 1, "contextLength": 3, "paddingTrainable": True,
          "_lods": {"X": [((0, 1, 6),)]}}),
    ]
    c["sequence_unpad"] += [
        ("x_2d", {"X": [sn((3, 5))], "Length": [np.array([2, 0, 5])]}, {}),
    ]
    c["var_conv_2d"] += [
        # X's sequences shorter / longer than InputChannel * row * col: Fluid reads each
        # image from X's offset on, running into the next sequence and (zeros) past X's end
        ("uneven_x", {"X": [sn((11, 1))], "ROW": [np.zeros((4, 1), np.int64)],
                      "COLUMN": [np.zeros((5, 1), np.int64)], "W": [sn((2, 8))]},
         {"InputChannel": 2, "OutputChannel": 2, "KernelH": 2, "KernelW": 2,
          "_lods": {"X": [((0, 5, 11),)], "ROW": [((0, 2, 4),)],
                    "COLUMN": [((0, 2, 5),)]}}),
    ]
    # Fluid 1.8's pow with a FactorTensor (float32 [1]; it gets no gradient, it wins over the
    # attr) and data_norm's enable_scale_and_shift (scale_w, bias: true gradients; integer
    # statistics keep the statistic "gradients" out, as for the data_norm cases above)
    c["pow"] += [("factor_tensor", {"X": [u(0.5, 2.0, (3, 4))],
                                    "FactorTensor": [np.array([2.5], np.float32)]},
                  {"factor": 7.0})]
    c["data_norm"] += [
        ("scale_shift", {"X": [n((3, 4))], **dn_stats, "scale_w": [u(0.5, 2.0, 4)],
                         "bias": [n(4)]}, {"enable_scale_and_shift": True}),
        ("scale_shift_slot_dim", {"X": [u(0.5, 2.0, (3, 4))], **dn_stats,
                                  "scale_w": [u(0.5, 2.0, 4)], "bias": [n(4)]},
         {"enable_scale_and_shift": True, "slot_dim": 2}),
    ]
    # top_k (Fluid 1.8's top_k_grad: dOut scattered to Indices along the last axis) and sign
    # (a scale by 0); an rng of their own keeps the cases above as they were. Distinct values
    # only: at a tie top_k is not differentiable
    tk = np.random.default_rng(81)
    c["top_k"] = [
        ("rows", {"X": [tk.standard_normal((4, 6))]}, {"k": 3}),
        ("3d", {"X": [tk.standard_normal((2, 3, 5))]}, {"k": 2}),
        ("full_width", {"X": [tk.standard_normal((3, 4))]}, {"k": 4}),
        ("1d", {"X": [tk.standard_normal(7)]}, {"k": 1}),
        ("k_tensor", {"X": [tk.standard_normal((3, 5))], "K": [np.array([2], np.int32)]},
         {"k": 1}),
    ]
    c["sign"] = [("x", {"X": [_away_from(tk.standard_normal((3, 4)), [0.0])]}, {})]
    c["increment"] = [("step", {"X": [tk.standard_normal((2, 3))]}, {"step": -2.5})]
    return c


CASES = _build_cases(np.random.default_rng(0))
# host ops with a grad (recurrent: a sub-block run over steps) are checked through the
# executor, in tests/core/test_static_rnn.py
DIFF_OPS = [t for t in registry.registered()
            if registry.get(t).grad is not None and not registry.get(t).host]
# an op without cases still gets one test, which fails on the missing case
PARAMS = [pytest.param(op, i, id=f"{op}-{cid}") for op in DIFF_OPS
          for i, (cid, _, _) in enumerate(CASES.get(op, [("missing", None, None)]))]


# ---------------------------------------------------------------------------------------------
# the machinery: forward, grad ops from the maker, finite differences


def forward(op_type: str, ins: dict, attrs: dict) -> tuple[Any, dict]:
    """Run the forward kernel; return a fake op (names as the maker sees them) and the
    name → array environment of its inputs and outputs."""
    opdef = registry.get(op_type)
    full = dict(opdef.attrs)
    full.update(attrs)
    in_names = {s: [f"{s}.{i}" for i in range(len(v))] for s, v in ins.items()}
    res = {s: v for s, v in run_op(op_type, ins, attrs).items() if s != registry.LOD_KEY}
    out_names = {s: [f"{op_type}.{s}.{i}" for i in range(len(v))] for s, v in res.items()}
    env = {n: a for s in ins for n, a in zip(in_names[s], ins[s], strict=True)}
    env.update({n: a for s in res for n, a in zip(out_names[s], res[s], strict=True)})
    op = SimpleNamespace(type=op_type, inputs=in_names, outputs=out_names,
                         attrs={**full, "op_role": 1, "op_role_var": []})
    return op, env


def objective_outputs(op: Any) -> list[str]:
    """Forward outputs whose gradient the grad ops read."""
    descs = registry.get(op.type).grad(op)
    read = {n for d in descs for names in d["inputs"].values() for n in names}
    outs = [n for names in op.outputs.values() for n in names]
    return [n for n in outs if n + GRAD in read]


def analytic_grads(op: Any, env: dict, seeds: dict) -> dict:
    """Run the grad ops the maker builds; return input name → gradient."""
    env = dict(env)
    env.update({n + GRAD: r for n, r in seeds.items()})
    for desc in registry.get(op.type).grad(op):
        assert "op_role" not in desc["attrs"] and "op_role_var" not in desc["attrs"]
        gdef = registry.get(desc["type"])
        assert set(desc["inputs"]) <= set(gdef.inputs), (desc["type"], desc["inputs"])
        assert set(desc["outputs"]) <= set(gdef.outputs), (desc["type"], desc["outputs"])
        gins = {s: [env.get(n) for n in names] for s, names in desc["inputs"].items()}
        gattrs = dict(gdef.attrs)
        gattrs.update(desc["attrs"])
        res = gdef.kernel(gins, gattrs, tuple(desc["outputs"]))
        for slot, names in desc["outputs"].items():
            assert len(res[slot]) == len(names), (desc["type"], slot)
            env.update(zip(names, res[slot], strict=True))
    grads = {}
    for names in op.inputs.values():
        for n in names:
            g = env.get(n + GRAD)
            if g is not None:
                grads[n] = g.to_dense() if isinstance(g, SelectedRows) else g
    return grads


def numeric_grad(op: Any, ins: dict, attrs: dict, seeds: dict, slot: str, i: int):
    names = {n: (s, k) for s, ns in op.outputs.items() for k, n in enumerate(ns)}

    def f() -> float:
        res = run_op(op.type, ins, attrs)
        return sum(float((res[names[n][0]][names[n][1]] * r).sum()) for n, r in seeds.items())

    return central_differences(f, ins[slot][i], EPS)


def max_rel_err(a: np.ndarray, n: np.ndarray) -> float:
    return float(np.max(np.abs(a - n) / np.maximum(1.0, np.maximum(np.abs(a), np.abs(n)))))


# ---------------------------------------------------------------------------------------------
# tests


def test_every_differentiable_op_has_cases():
    missing = [op for op in DIFF_OPS if op not in CASES]
    assert not missing, f"add grad-check cases for {missing}"


def test_every_grad_op_belongs_to_a_differentiable_forward():
    for t in registry.registered():
        if t.endswith("_grad"):
            fwd = t[: -len("_grad")]
            assert registry.has(fwd), t
            assert registry.get(fwd).grad is not None, t


@pytest.mark.parametrize("op_type, case", PARAMS)
def test_grad_matches_finite_differences(op_type, case):
    if op_type not in CASES:
        pytest.fail(f"no grad-check case for {op_type}")
    _, ins, attrs = CASES[op_type][case]
    ins = {s: [a.copy() for a in v] for s, v in ins.items()}
    before = {s: [a.copy() for a in v] for s, v in ins.items()}
    op, env = forward(op_type, ins, attrs)
    rng = np.random.default_rng(1)
    seeds = {n: rng.standard_normal(env[n].shape) for n in objective_outputs(op)}
    assert seeds, f"{op_type}: the grad ops read no output gradient"
    grads = analytic_grads(op, env, seeds)
    for s, v in ins.items():  # kernels must not write into their inputs
        for a, b in zip(v, before[s], strict=True):
            np.testing.assert_array_equal(a, b)
    checked = 0
    for slot, names in op.inputs.items():
        for i, name in enumerate(names):
            if name not in grads or ins[slot][i].dtype.kind != "f":
                continue
            a = grads[name]
            assert a.shape == ins[slot][i].shape and a.dtype == np.float64, (name, a.shape)
            num = numeric_grad(op, ins, attrs, seeds, slot, i)
            err = max_rel_err(a, num)
            assert err <= TOL, f"{op_type} d{name}: max rel err {err:.2e}"
            checked += 1
    assert checked, f"{op_type}: no input gradient was produced"


def test_grad_kernels_skip_unrequested_gradients():
    x, y = np.ones((2, 3)), np.ones((3, 4))
    d = np.ones((2, 4))
    res = run_op("mul_grad", {"X": [x], "Y": [y], "Out@GRAD": [d]}, outs=("Y@GRAD",))
    assert set(res) == {"Y@GRAD"}


def test_missing_output_gradient_counts_as_zero():
    x = np.ones((2, 3))
    res = run_op("elementwise_add_grad", {"X": [x], "Y": [np.ones(3)], "Out@GRAD": [None]})
    np.testing.assert_array_equal(res["Y@GRAD"][0], np.zeros(3))
    res = run_op("softmax_with_cross_entropy_grad",
                 {"Label": [np.zeros((2, 1), np.int64)], "Softmax": [x], "Loss@GRAD": [None]})
    np.testing.assert_array_equal(res["Logits@GRAD"][0], np.zeros((2, 3)))


def test_float32_stays_float32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    out = run_op("mul", {"X": [x], "Y": [w]})["Out"][0]
    assert out.dtype == np.float32
    for op in ("relu", "sigmoid", "tanh", "mean", "softmax"):
        assert run_op(op, {"X": [x]})["Out"][0].dtype == np.float32, op
    sc = run_op("scale", {"X": [x]}, {"scale": np.float64(0.5), "bias": np.float64(1.0)})
    assert sc["Out"][0].dtype == np.float32
    lab = np.zeros((4, 1), np.int64)
    res = run_op("softmax_with_cross_entropy", {"Logits": [x], "Label": [lab]})
    assert res["Loss"][0].dtype == np.float32 and res["Softmax"][0].dtype == np.float32
    g = run_op("softmax_with_cross_entropy_grad",
               {"Label": [lab], "Softmax": res["Softmax"], "Loss@GRAD": [res["Loss"][0]]})
    assert g["Logits@GRAD"][0].dtype == np.float32
    mg = run_op("mean_grad", {"X": [x], "Out@GRAD": [np.ones(1, np.float32)]})
    assert mg["X@GRAD"][0].dtype == np.float32
