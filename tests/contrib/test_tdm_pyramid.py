"""fluid.contrib.layers.tdm_child and tdm_sampler (Fluid 1.8): program structure, values
against ports of Paddle's test_tdm_child_op.py / test_tdm_sampler_op.py references, the
sampler's reproducibility, errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.contrib import layers as cl
from dask_fluid.executor import _SAMPLERS
from dask_fluid.ops import registry

# the binary tree of Fluid's docstrings: 0 root; 1, 2; 3, 4, 5, 6 (leaves, items 0..3)
TREE_INFO = np.array([[0, 0, 0, 1, 2],
                      [0, 1, 0, 3, 4], [0, 1, 0, 5, 6],
                      [0, 2, 1, 0, 0], [1, 2, 1, 0, 0], [2, 2, 2, 0, 0], [3, 2, 2, 0, 0]])
TRAVEL = np.array([[1, 3], [1, 4], [2, 5], [2, 6]])
LAYER = np.array([[1], [2], [3], [4], [5], [6]])


def _run_op(op, ins, attrs, seed_rng=None):
    kernel = registry.get(op).kernel
    attrs = dict(registry.get(op).attrs, **attrs)
    if seed_rng is not None:
        attrs["_rng"] = seed_rng
    return {k: v[0] for k, v in kernel({k: [v] for k, v in ins.items()}, attrs, ()).items()}


def _child_reference(x, info, child_nums):
    """Port of test_tdm_child_op.py's compute."""
    child, mask = [], []
    for node in x.reshape(-1):
        if node == 0 or info[node][3] == 0:
            child.append([0] * child_nums)
            mask.append([0] * child_nums)
        else:
            c = list(info[node][3:3 + child_nums])
            child.append(c)
            mask.append([1 if info[n][0] != 0 else 0 for n in c])
    return np.array(child), np.array(mask)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_tdm_child_kernel_against_reference(dtype):
    x = np.array([[0], [1], [2], [3], [6]], dtype=dtype)
    got = _run_op("tdm_child", {"X": x, "TreeInfo": TREE_INFO.astype("int64")},
                  {"child_nums": 2, "dtype": dtype})
    child, mask = _child_reference(x, TREE_INFO, 2)
    assert got["Child"].dtype == dtype and got["Child"].shape == (5, 1, 2)
    np.testing.assert_array_equal(got["Child"].reshape(5, 2), child)
    np.testing.assert_array_equal(got["LeafMask"].reshape(5, 2), mask)


def test_tdm_child_layer_runs_fluids_example():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [1], dtype="int32")
        child, mask = cl.tdm_child(x, 7, 2, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.NumpyArrayInitializer(TREE_INFO.astype("int32"))))
    op = main.global_block().ops[-1]
    assert op.type == "tdm_child" and op.attrs["child_nums"] == 2 and op.attrs["dtype"] == "int32"
    info = main.global_block().var(op.input("TreeInfo")[0])
    assert tuple(info.shape) == (7, 5) and info.stop_gradient
    assert tuple(child.shape) == (-1, 1, 2) and child.stop_gradient
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    c, m = exe.run(main, feed={"x": np.array([[2], [3]], "int32")}, fetch_list=[child, mask],
                   scope=scope)
    np.testing.assert_array_equal(c.reshape(2, 2), [[5, 6], [0, 0]])
    np.testing.assert_array_equal(m.reshape(2, 2), [[1, 1], [0, 0]])


def test_tdm_child_errors():
    with pytest.raises(ValueError, match="expected >= 0 and < 7"):
        _run_op("tdm_child", {"X": np.array([[7]]), "TreeInfo": TREE_INFO}, {"child_nums": 2})
    with pytest.raises(TypeError, match="Input\\(X\\) holds the wrong type"):
        _run_op("tdm_child", {"X": np.array([[1.0]]), "TreeInfo": TREE_INFO},
                {"child_nums": 2})
    x = fluid.layers.data("x", [1], dtype="int32")
    with pytest.raises(TypeError, match="dtype must be int32 or int64"):
        cl.tdm_child(x, 7, 2, dtype="float32")


def _check_samples(out, labels, mask, ids, negs, offsets, positive, travel=TRAVEL,
                   layer=LAYER):
    """What test_tdm_sampler_op.py checks: positives from the path, negatives distinct, of
    the layer, not the positive; padding masked."""
    layer = layer.reshape(-1)
    for r, item in enumerate(ids):
        col = 0
        for li, n in enumerate(negs):
            nodes = set(layer[offsets[li]:offsets[li + 1]].tolist())
            pos = travel[item][li]
            seg = slice(col, col + n + positive)
            if pos == 0:
                assert not out[r, seg].any() and not mask[r, seg].any()
                col += n + positive
                continue
            if positive:
                assert (out[r, col], labels[r, col], mask[r, col]) == (pos, 1, 1)
                col += 1
            got = out[r, col:col + n].tolist()
            assert len(set(got)) == n and pos not in got and set(got) <= nodes
            assert not labels[r, col:col + n].any() and mask[r, col:col + n].all()
            col += n


@pytest.mark.parametrize("positive", [True, False])
def test_tdm_sampler_kernel_properties(positive):
    ids = np.array([[0], [1], [2], [3]], "int64")
    attrs = {"neg_samples_num_list": [1, 3], "layer_offset_lod": [0, 2, 6],
             "output_positive": positive, "seed": 7, "dtype": "int64"}
    got = _run_op("tdm_sampler", {"X": ids, "Travel": TRAVEL, "Layer": LAYER}, attrs)
    width = 4 + 2 * positive
    assert got["Out"].shape == (4, width) and got["Out"].dtype == np.int64
    _check_samples(got["Out"], got["Labels"], got["Mask"], ids.reshape(-1), [1, 3], [0, 2, 6],
                   int(positive))
    # a non-zero seed: Fluid rebuilds its samplers from it each run, the same draws each time
    again = _run_op("tdm_sampler", {"X": ids, "Travel": TRAVEL, "Layer": LAYER}, attrs)
    np.testing.assert_array_equal(again["Out"], got["Out"])


@pytest.mark.parametrize("code, dtype", [(2, np.int32), (3, np.int64), (np.int64(3), np.int64),
                                         ("int32", np.int32)])
def test_tdm_sampler_takes_fluids_int_dtype_attr(code, dtype):
    # Fluid 1.8's op declares AddAttr<int>("dtype"): VarType 2 (INT32, its default) or 3
    ids = np.array([[0], [3]], "int64")
    attrs = {"neg_samples_num_list": [1, 2], "layer_offset_lod": [0, 2, 6], "seed": 3,
             "dtype": code}
    got = _run_op("tdm_sampler", {"X": ids, "Travel": TRAVEL, "Layer": LAYER}, attrs)
    for slot in ("Out", "Labels", "Mask"):
        assert got[slot].dtype == dtype and got[slot].shape == (2, 5)
    _check_samples(got["Out"], got["Labels"], got["Mask"], [0, 3], [1, 2], [0, 2, 6], 1)
    child = _run_op("tdm_child", {"X": ids, "TreeInfo": TREE_INFO},
                    {"child_nums": 2, "dtype": code})
    assert child["Child"].dtype == dtype and child["LeafMask"].dtype == dtype


def test_tdm_ops_refuse_a_non_integer_dtype_code():
    ins = {"X": np.array([[0]]), "Travel": TRAVEL, "Layer": LAYER}
    attrs = {"neg_samples_num_list": [1, 1], "layer_offset_lod": [0, 2, 6], "seed": 1}
    with pytest.raises(TypeError, match="tdm_sampler: dtype must be int32 or int64, got float32"):
        _run_op("tdm_sampler", ins, {**attrs, "dtype": 5})  # VarType FP32
    with pytest.raises(ValueError, match="unknown Fluid dtype code 7"):
        _run_op("tdm_sampler", ins, {**attrs, "dtype": 7})


def test_tdm_sampler_padding_of_an_unbalanced_tree():
    travel = np.array([[1, 3], [2, 0]])  # item 1 sits on layer 1: its layer-2 entry pads
    layer = np.array([[1], [2], [3], [4], [5]])
    got = _run_op("tdm_sampler", {"X": np.array([[0], [1]]), "Travel": travel, "Layer": layer},
                  {"neg_samples_num_list": [1, 2], "layer_offset_lod": [0, 2, 5],
                   "output_positive": True, "seed": 3})
    _check_samples(got["Out"], got["Labels"], got["Mask"], [0, 1], [1, 2], [0, 2, 5], 1,
                   travel, layer)
    np.testing.assert_array_equal(got["Mask"][1], [1, 1, 0, 0, 0])
    # zero negatives: Fluid's docstring example, the paths themselves
    got = _run_op("tdm_sampler", {"X": np.array([[0], [1], [2], [3]]), "Travel": TRAVEL,
                                  "Layer": LAYER},
                  {"neg_samples_num_list": [0, 0], "layer_offset_lod": [0, 2, 6]})
    np.testing.assert_array_equal(got["Out"], TRAVEL)
    assert got["Labels"].all() and got["Mask"].all()


def _sampler_program(output_list, seed=0, random_seed=0):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = random_seed
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [1], dtype="int32")
        res = cl.tdm_sampler(
            x, [1, 2], [2, 4], 4,
            tree_travel_attr=fluid.ParamAttr(
                initializer=fluid.initializer.NumpyArrayInitializer(TRAVEL.astype("int32"))),
            tree_layer_attr=fluid.ParamAttr(
                initializer=fluid.initializer.NumpyArrayInitializer(LAYER.astype("int32"))),
            output_list=output_list, seed=seed)
    return main, startup, res


def _run(main, startup, fetch, runs=1):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"x": np.array([[0], [1], [2], [3]], "int32")}
    return [exe.run(main, feed=feed, fetch_list=fetch, scope=scope) for _ in range(runs)]


def test_tdm_sampler_layer_program_and_values():
    main, startup, (out, labels, mask) = _sampler_program(output_list=False, seed=5)
    op = main.global_block().ops[-1]
    assert op.type == "tdm_sampler"
    assert op.attrs["layer_offset_lod"] == [0, 2, 6] and op.attrs["seed"] == 5
    assert op.attrs["neg_samples_num_list"] == [1, 2] and op.attrs["output_positive"] is True
    assert tuple(out.shape) == (-1, 5) and out.stop_gradient
    (o, la, m), = _run(main, startup, [out, labels, mask])
    _check_samples(o, la, m, [0, 1, 2, 3], [1, 2], [0, 2, 6], 1)


def test_tdm_sampler_output_list_slices_per_layer():
    main, startup, (outs, labels, masks) = _sampler_program(output_list=True, seed=5)
    assert [tuple(v.shape) for v in outs] == [(-1, 2, 1), (-1, 3, 1)]
    sampler = next(op for op in main.global_block().ops if op.type == "tdm_sampler")
    flat = main.global_block().var(sampler.output("Out")[0])  # the whole [N, 5] output
    res, = _run(main, startup, [*outs, *labels, flat])
    whole = res[-1]
    np.testing.assert_array_equal(res[0].reshape(4, 2), whole[:, :2])
    np.testing.assert_array_equal(res[1].reshape(4, 3), whole[:, 2:])
    np.testing.assert_array_equal(res[2].reshape(4, 2)[:, 0], 1)


@pytest.mark.skipif("tdm_sampler" not in _SAMPLERS,
                    reason="executor._SAMPLERS does not list tdm_sampler yet: seed 0 draws from "
                           "fresh entropy")
def test_tdm_sampler_seed_zero_follows_the_program_random_seed():
    main, startup, (out, _, _) = _sampler_program(output_list=False, random_seed=11)
    first = [r[0] for r in _run(main, startup, [out], runs=4)]
    second = [r[0] for r in _run(main, startup, [out], runs=4)]
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    # each run draws anew (6 orderings per item on layer 2)
    assert any((first[0] != r).any() for r in first[1:])


def test_tdm_sampler_nonzero_seed_draws_the_same_each_run():
    main, startup, (out, labels, mask) = _sampler_program(output_list=False, seed=5)
    runs = _run(main, startup, [out, labels, mask], runs=3)
    for o, la, m in runs:
        _check_samples(o, la, m, [0, 1, 2, 3], [1, 2], [0, 2, 6], 1)
        np.testing.assert_array_equal(o, runs[0][0])


def test_tdm_sampler_errors():
    x = fluid.layers.data("x", [1], dtype="int32")
    with pytest.raises(ValueError, match="must match the shape of layers"):
        cl.tdm_sampler(x, [1], [2, 4], 4)
    with pytest.raises(ValueError, match="must be less than the number of nodes"):
        cl.tdm_sampler(x, [2, 1], [2, 4], 4)
    with pytest.raises(ValueError, match="leaf_node_num must be less than"):
        cl.tdm_sampler(x, [1, 1], [2, 4], 6)
    with pytest.raises(TypeError, match="tree_dtype must be int32 or int64"):
        cl.tdm_sampler(x, [1, 1], [2, 4], 4, tree_dtype="float32")
    with pytest.raises(ValueError, match="expected >= 0 and < 4"):
        _run_op("tdm_sampler", {"X": np.array([[4]]), "Travel": TRAVEL, "Layer": LAYER},
                {"neg_samples_num_list": [1, 1], "layer_offset_lod": [0, 2, 6], "seed": 1})
    with pytest.raises(TypeError, match="same type"):
        _run_op("tdm_sampler", {"X": np.array([[0]]), "Travel": TRAVEL.astype("int32"),
                                "Layer": LAYER.astype("int64")},
                {"neg_samples_num_list": [1, 1], "layer_offset_lod": [0, 2, 6], "seed": 1})
