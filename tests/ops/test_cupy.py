"""The same kernels on cupy and numpy give the same results.

Every grad-check case of ``test_grad_check`` runs forward and backward on both array modules
(float64; agreement to 1e-9 relative: GPU transcendental functions may differ in the last
bits); the non-differentiable kernels, the optimizers (dense and SelectedRows) and the random
ops (bit-identical, since they draw on the host) are compared too.

Each test runs twice: on the real CuPy with a CUDA GPU (``gpu``, skipped without one) and on
``tests/strict_cupy.py`` (``strict``, always), a CuPy on the CPU that refuses what CuPy refuses
(implicit host copies, host arrays in device arithmetic), so a kernel that only works on numpy
fails without a GPU too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dask_fluid.ops import SelectedRows
from dask_fluid.ops.registry import LOD_KEY

from . import run_op
from .test_grad_check import CASES, PARAMS, analytic_grads, forward, objective_outputs


@pytest.fixture
def cp(device_xp):
    return device_xp


def to_cp(cp: Any, obj: Any) -> Any:
    if isinstance(obj, SelectedRows):
        return SelectedRows(cp.asarray(obj.rows), cp.asarray(obj.value), obj.height)
    if isinstance(obj, np.ndarray):
        return cp.asarray(obj)
    if isinstance(obj, dict):
        return {k: to_cp(cp, v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cp(cp, v) for v in obj]
    return obj


def assert_same(cp: Any, gpu: Any, cpu: Any, rtol: float = 1e-9, what: str = "") -> None:
    if isinstance(cpu, SelectedRows):
        assert isinstance(gpu, SelectedRows) and gpu.height == cpu.height, what
        np.testing.assert_array_equal(cp.asnumpy(gpu.rows), cpu.rows, err_msg=what)
        assert_same(cp, gpu.value, cpu.value, rtol, what)
        return
    assert isinstance(gpu, cp.ndarray), (what, type(gpu))
    assert gpu.dtype == cpu.dtype and gpu.shape == cpu.shape, (what, gpu.dtype, gpu.shape)
    np.testing.assert_allclose(cp.asnumpy(gpu), cpu, rtol=rtol, atol=1e-12, err_msg=what)


def assert_same_result(cp: Any, gpu: dict, cpu: dict, what: str) -> None:
    assert set(gpu) == set(cpu), what
    if LOD_KEY in cpu:  # the outputs' LoDs (host tuples)
        assert gpu[LOD_KEY] == cpu[LOD_KEY], what
    for slot in (s for s in cpu if s != LOD_KEY):
        assert len(gpu[slot]) == len(cpu[slot]), (what, slot)
        for g, c in zip(gpu[slot], cpu[slot], strict=True):
            assert_same(cp, g, c, what=f"{what} {slot}")


@pytest.mark.parametrize("op_type, case", PARAMS)
def test_forward_and_grad_match_numpy(cp, op_type, case):
    _, ins, attrs = CASES[op_type][case]
    op_n, env_n = forward(op_type, ins, attrs)
    op_c, env_c = forward(op_type, to_cp(cp, ins), attrs)
    for name, value in env_n.items():
        assert_same(cp, env_c[name], value, what=f"{op_type} {name}")
    rng = np.random.default_rng(1)
    seeds = {n: rng.standard_normal(env_n[n].shape) for n in objective_outputs(op_n)}
    grads_n = analytic_grads(op_n, env_n, seeds)
    grads_c = analytic_grads(op_c, env_c, to_cp(cp, seeds))
    assert set(grads_c) == set(grads_n)
    for name, g in grads_n.items():
        assert_same(cp, grads_c[name], g, what=f"{op_type} d{name}")


def _forward_cases() -> list[tuple[str, dict, dict]]:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 5))
    ties = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    label = np.array([[1], [0], [4], [2], [2], [3]], np.int64)
    sr = SelectedRows(np.array([5, 1, 5, 0], np.int64), rng.standard_normal((4, 3)), 8)
    sr2 = SelectedRows(np.array([2], np.int64), rng.standard_normal((1, 3)), 8)
    ids = np.array([[7], [3], [7], [12], [4]], np.int64)
    shards = run_op("split_ids", {"Ids": [ids]}, {"num_shards": 2})["Out"]
    table = rng.standard_normal((20, 3))
    return [
        ("top_k", {"X": [x]}, {"k": 1}),
        ("top_k", {"X": [ties]}, {"k": 2}),
        ("accuracy", {"Out": [x[:, :1]], "Indices": [label], "Label": [label[::-1].copy()]}, {}),
        ("cast", {"X": [x]}, {"out_dtype": "float32"}),
        ("less_than", {"X": [x], "Y": [x[0].copy()]}, {}),
        ("logical_not", {"X": [x > 0]}, {}),
        ("logical_and", {"X": [x > 0], "Y": [x < 1]}, {}),
        ("increment", {"X": [np.array([2], np.int64)]}, {"step": 3.0}),
        ("sign", {"X": [x]}, {}),
        ("floor", {"X": [x]}, {}),
        ("fill_zeros_like", {"X": [x]}, {}),
        ("split_byref", {"X": [x]}, {"sections": [2, 4]}),
        ("split_selected_rows", {"X": [sr]}, {"height_sections": [2, 3, 3]}),
        ("split_ids", {"Ids": [ids, ids[:2].copy()]}, {"num_shards": 3}),
        ("split_ids", {"Ids": [sr]}, {"num_shards": 2}),
        ("merge_ids", {"Ids": [ids], "Rows": shards,
                       "X": [table[s[:, 0]] for s in shards]}, {}),
        ("ref_by_trainer_id", {"X": [x, 2 * x], "TrainerId": [np.array([1], np.int64)]}, {}),
        ("sum", {"X": [sr, sr2]}, {}),
        ("sum", {"X": [np.ones((8, 3)), sr, sr2]}, {}),
        ("scale", {"X": [sr]}, {"scale": 3.0}),
        ("lookup_table", {"W": [table], "Ids": [ids]}, {"padding_idx": 7}),
        ("dropout", {"X": [x]}, {"is_test": True, "dropout_prob": 0.25}),
    ]


@pytest.mark.parametrize("case", range(len(_forward_cases())))
def test_forward_only_kernels_match_numpy(cp, case):
    op_type, ins, attrs = _forward_cases()[case]
    assert_same_result(cp, run_op(op_type, to_cp(cp, ins), attrs), run_op(op_type, ins, attrs),
                       f"{op_type}#{case}")


def test_selected_rows_helpers_on_cupy(cp):
    sr = SelectedRows(np.array([5, 1, 5, 0], np.int64), np.arange(8.0).reshape(4, 2), 6)
    g = to_cp(cp, sr)
    assert g.xp is cp
    assert_same(cp, g.to_dense(), sr.to_dense())
    assert_same(cp, g.merged(), sr.merged())


@pytest.mark.parametrize("op, attrs, slots", [
    ("sgd", {}, []),
    ("momentum", {"mu": 0.9, "use_nesterov": True}, ["Velocity"]),
    ("adam", {}, ["Moment1", "Moment2"]),
    ("adagrad", {}, ["Moment"]),
    ("rmsprop", {"centered": True, "momentum": 0.5}, ["MeanSquare", "Moment", "MeanGrad"]),
    ("adamax", {}, ["Moment", "InfNorm"]),
    ("decayed_adagrad", {}, ["Moment"]),
    ("ftrl", {"l1": 0.01, "l2": 0.1}, ["SquaredAccumulator", "LinearAccumulator"]),
    ("lars_momentum", {"mu": 0.9}, ["Velocity"]),
    ("lamb", {}, ["Moment1", "Moment2"]),
])
@pytest.mark.parametrize("sparse", [False, True])
def test_optimizers_match_numpy(cp, op, attrs, slots, sparse):
    if sparse and op == "lars_momentum":
        pytest.skip(f"{op} takes dense gradients only, as in Paddle")
    rng = np.random.default_rng(4)
    ins = {"Param": [rng.standard_normal((6, 3))], "LearningRate": [np.array([0.1])]}
    for s in slots:
        ins[s] = [rng.uniform(0.5, 1.0, (6, 3)) if s != "MeanGrad" else
                  rng.uniform(-0.1, 0.1, (6, 3))]
    if op in ("adam", "lamb", "adamax"):
        ins["Beta1Pow"] = [np.array([0.9])]
    if op in ("adam", "lamb"):
        ins["Beta2Pow"] = [np.array([0.999])]
    ins["Grad"] = [SelectedRows(np.array([4, 1, 4], np.int64), rng.standard_normal((3, 3)), 6)
                   if sparse else rng.standard_normal((6, 3))]
    gpu_ins = to_cp(cp, ins)
    res_c = run_op(op, gpu_ins, attrs)
    res_n = run_op(op, ins, attrs)
    assert res_c["ParamOut"][0] is gpu_ins["Param"][0]  # in place on the device too
    assert_same_result(cp, res_c, res_n, op)


@pytest.mark.parametrize("op", ["uniform_random", "gaussian_random",
                                "truncated_gaussian_random", "fake_init"])
def test_random_ops_are_bit_identical_on_gpu(cp, op):
    attrs = {"shape": [5, 4], "seed": 3, "_out_name": "w", "full_shape": [9, 4],
             "row_offset": 2}
    cpu = run_op(op, {}, attrs)["Out"][0]
    gpu = run_op(op, {}, {**attrs, "_place": "gpu"})["Out"][0]
    assert isinstance(gpu, cp.ndarray) and gpu.dtype == np.float32
    np.testing.assert_array_equal(cp.asnumpy(gpu), cpu)


def test_sampling_ops_are_the_same_on_both_devices(cp):
    """The run-stream draws (sampling_id, a _batch_size_like op) and random_crop give the same
    values on both devices for the same generator and seed."""
    rng = np.random.default_rng(4)
    probs = rng.dirichlet(np.ones(5), size=7)
    images = rng.standard_normal((3, 2, 6, 5))
    cases = [
        ("sampling_id", {"X": [probs]}, {"seed": 0}),
        ("uniform_random_batch_size_like", {"Input": [probs]},
         {"shape": [-1, 3], "_out_name": "u"}),
        ("gaussian_random_batch_size_like", {"Input": [probs]},
         {"shape": [2, -1], "input_dim_idx": 1, "output_dim_idx": 1, "_out_name": "g"}),
        ("random_crop", {"X": [images], "Seed": [np.array([11], np.int64)]},
         {"shape": [4, 3]}),
    ]
    for op, ins, attrs in cases:
        cpu = run_op(op, ins, {**attrs, "_rng": np.random.default_rng(9)})
        gpu = run_op(op, to_cp(cp, ins), {**attrs, "_rng": np.random.default_rng(9),
                                           "_place": "gpu"})
        assert_same_result(cp, gpu, cpu, op)


def test_dropout_mask_is_the_same_on_both_devices(cp):
    x = np.random.default_rng(0).standard_normal((40, 30)).astype(np.float32)
    attrs = {"dropout_prob": 0.4, "dropout_implementation": "upscale_in_train"}
    cpu = run_op("dropout", {"X": [x]}, {**attrs, "_rng": np.random.default_rng(9)})
    gpu = run_op("dropout", {"X": [cp.asarray(x)]}, {**attrs, "_rng": np.random.default_rng(9)})
    assert_same_result(cp, gpu, cpu, "dropout")


def test_fill_constant_on_gpu_and_float32_hot_path(cp):
    out = run_op("fill_constant", {}, {"shape": [2, 2], "value": 1.5, "_place": "gpu"})["Out"][0]
    assert isinstance(out, cp.ndarray) and out.dtype == np.float32 and float(out[0, 0]) == 1.5
    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal((8, 5)).astype(np.float32))
    lab = cp.asarray(rng.integers(0, 5, (8, 1)))
    res = run_op("softmax_with_cross_entropy", {"Logits": [x], "Label": [lab]})
    assert res["Loss"][0].dtype == np.float32
    with pytest.raises(ValueError, match=r"label 9 is out of range"):
        run_op("softmax_with_cross_entropy",
               {"Logits": [x], "Label": [cp.full((8, 1), 9, dtype=cp.int64)]})
