"""The CTR layers (continuous_value_model, data_norm, filter_by_instag, shard_index, hash,
merge_selected_rows, get_tensor_from_selected_rows) and mean_iou as Fluid 1.8 builds them:
program structure, values through the executor, errors, gradients through cvm and data_norm
against central differences, and data_norm's statistics over SGD steps against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.framework import VarType
from dask_fluid.ops import SelectedRows

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch, scope=None):
    exe, scope = fluid.Executor(fluid.CPUPlace()), scope or fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_data_norm_builds_fluids_parameters_and_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6])
        y = layers.data_norm(x, act="relu", slot_dim=3)
        layers.data_norm(x, name="other", param_attr={"batch_size": 5.0, "batch_square": 7.0})
    op = next(o for o in main.global_block().ops if o.type == "data_norm")
    assert op.input("BatchSize") == ["dn.batch_size"]
    assert op.input("BatchSum") == ["dn.batch_sum"]
    assert op.input("BatchSquareSum") == ["dn.batch_square_sum"]
    assert op.attr("slot_dim") == 3 and op.attr("epsilon") == pytest.approx(1e-5)
    assert op.attr("sync_stats") is False
    assert op.attr("summary_decay_rate") == pytest.approx(0.9999999)
    assert set(op.outputs) == {"Y", "Means", "Scales"}
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["dn.batch_size"].shape == (6,) and params["dn.batch_size"].trainable
    init = {o.output("Out")[0]: o.attr("value") for o in startup.global_block().ops}
    assert init["dn.batch_size"] == 1e4 and init["dn.batch_sum"] == 0.0
    assert init["dn.batch_square_sum"] == 1e4
    assert init["other.batch_size"] == 5.0 and init["other.batch_sum"] == 0.0
    assert init["other.batch_square_sum"] == 7.0
    other = [o for o in main.global_block().ops if o.type == "data_norm"][1]
    assert "slot_dim" not in other.attrs or other.attr("slot_dim") == -1
    assert main.global_block().ops[1].type == "relu" and y.shape == (-1, 6)


def test_data_norm_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [6])
        with pytest.raises(NotImplementedError, match=r"data_norm\(sync_stats=True\)"):
            layers.data_norm(x, sync_stats=True)
        with pytest.raises(NotImplementedError, match=r"data_norm\(param_attr="):
            layers.data_norm(x, param_attr=fluid.ParamAttr(name="p"))
        with pytest.raises(ValueError, match="data_layout must be"):
            layers.data_norm(x, data_layout="NCW")
        with pytest.raises(ValueError, match=r"slot_dim \(4\) must divide the 6"):
            layers.data_norm(x, slot_dim=4)
        with pytest.raises(TypeError, match="input must be a Variable"):
            layers.data_norm(np.ones((2, 6)))


def test_data_norm_statistics_over_sgd_steps():
    """Fluid's optimizer applies the statistics' "gradients" like any gradient:
    stat -= lr · (N, Σ x, Σ (x − mean)² + N·ε)."""
    lr, eps = 0.01, 1e-4
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3], dtype="float64")
        y = layers.data_norm(x, epsilon=eps)
        loss = layers.mean(y)
        fluid.optimizer.SGD(learning_rate=lr).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    size, total, square = np.full(3, 1e4), np.zeros(3), np.full(3, 1e4)
    rng = np.random.default_rng(0)
    for step in range(4):
        xv = rng.standard_normal((5 + step, 3)) * 3 + 1
        (got,) = exe.run(main, feed={"x": xv}, fetch_list=[y], scope=scope)
        means, scales = total / size, np.sqrt(size / square)
        np.testing.assert_allclose(got, (xv - means) * scales, rtol=1e-10)
        n = xv.shape[0]
        size, total, square = (size - lr * n, total - lr * xv.sum(axis=0),
                               square - lr * (((xv - means) ** 2).sum(axis=0) + n * eps))
    np.testing.assert_allclose(np.array(scope.vars["dn.batch_size"]), size, rtol=1e-12)
    np.testing.assert_allclose(np.array(scope.vars["dn.batch_sum"]), total, rtol=1e-10)
    np.testing.assert_allclose(np.array(scope.vars["dn.batch_square_sum"]), square, rtol=1e-10)


def test_data_norm_slot_dim_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], dtype="float64")
        y = layers.data_norm(x, slot_dim=2, param_attr={"batch_size": 4.0, "batch_sum": 2.0,
                                                        "batch_square": 16.0})
    xv = np.array([[1.0, 2.0, 0.0, 5.0], [0.0, 1.0, 3.0, 4.0]])
    (got,) = _run(main, startup, {"x": xv}, [y])
    expect = (xv - 0.5) * 0.5
    expect[0, 2:] = 0.0  # show 0: the slot is zeroed
    expect[1, :2] = 0.0
    np.testing.assert_allclose(got, expect, rtol=1e-12)


def test_continuous_value_model_structure_values_and_cvm_gradient():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], dtype="float64", stop_gradient=False)
        c = layers.data("c", [2], dtype="float64")
        y = layers.continuous_value_model(x, c, use_cvm=True)
        dropped = layers.continuous_value_model(x, c, use_cvm=False)
        loss = layers.reduce_sum(y) + layers.reduce_sum(dropped)
        fluid.append_backward(loss)
    op = next(o for o in main.global_block().ops if o.type == "cvm")
    assert op.input("X") == [x.name] and op.input("CVM") == [c.name]
    assert op.attr("use_cvm") is True and y.shape == (-1, 4) and dropped.shape == (-1, 2)
    xv = np.array([[3.0, 1.0, 0.5, -2.0], [0.0, 0.0, 1.0, 2.0]])
    cv = np.array([[3.0, 1.0], [7.0, 8.0]])
    got, got_dropped, dx = _run(main, startup, {"x": xv, "c": cv}, [y, dropped, "x@GRAD"])
    expect = xv.copy()
    expect[:, 0] = np.log(xv[:, 0] + 1)
    expect[:, 1] = np.log(xv[:, 1] + 1) - expect[:, 0]
    np.testing.assert_allclose(got, expect, rtol=1e-12)
    np.testing.assert_array_equal(got_dropped, xv[:, 2:])
    # each cvm_grad writes CVM into dX[:, :2]; the two uses add up
    np.testing.assert_array_equal(dx[:, :2], 2 * cv)
    np.testing.assert_array_equal(dx[:, 2:], np.full((2, 2), 2.0))


def test_continuous_value_model_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [4])
        c = layers.data("c", [2])
        with pytest.raises(TypeError, match="use_cvm must be a bool"):
            layers.continuous_value_model(x, c, use_cvm=1)
        with pytest.raises(ValueError, match="at least 2 columns"):
            layers.continuous_value_model(layers.data("z", [1]), c)
        with pytest.raises(TypeError, match="cvm must be a Variable"):
            layers.continuous_value_model(x, np.ones((2, 2)))


def test_gradients_through_data_norm_and_cvm():
    """fc → data_norm → cvm (use_cvm=False, zero CVM so Fluid's convention is the true
    derivative) → fc → weighted sum: the fc weights' gradients equal central differences."""
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((5, 3))
    wt = rng.standard_normal((5, 2))

    def build():
        x = layers.data("x", [3], dtype="float64")
        c = layers.data("c", [2], dtype="float64")
        w = layers.data("wt", [2], dtype="float64")
        h = layers.fc(x, 6, param_attr="w1", bias_attr="b1")
        h = layers.data_norm(h, act="tanh",
                             param_attr={"batch_size": 8.0, "batch_sum": 1.0,
                                         "batch_square": 6.0})
        h = layers.continuous_value_model(h, c, use_cvm=False)  # [N, 4]
        h = layers.fc(h, 2, param_attr="w2", bias_attr=False)
        return layers.reduce_sum(layers.elementwise_mul(h, w))

    got = program_grads_and_numeric(build, {"x": xv, "c": np.zeros((5, 2)), "wt": wt},
                                    ["w1", "b1", "w2"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["w1"][0]).sum() > 0


def test_filter_by_instag_through_the_executor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ins = layers.data("ins", [2], dtype="float64", lod_level=1)
        tag = layers.data("tag", [1], dtype="int64", lod_level=1)
        flt = layers.data("flt", [1], dtype="int64", append_batch_size=False)
        out, weight = layers.filter_by_instag(ins, tag, flt, is_lod=True)
    op = main.global_block().ops[-1]
    assert op.type == "filter_by_instag" and op.attr("is_lod") is True
    assert op.attr("out_val_if_empty") == 0
    assert out.shape == (-1, 2) and weight.shape == (-1, 1) and weight.dtype == "float32"
    place = fluid.CPUPlace()
    iv = np.arange(10.0).reshape(5, 2)
    feed = {"ins": fluid.create_lod_tensor(iv, [[2, 1, 2]], place),
            "tag": fluid.create_lod_tensor(np.array([[1], [5], [1], [5]], np.int64),
                                           [[1, 2, 1]], place),
            "flt": np.array([5], np.int64)}
    exe = fluid.Executor(place)
    exe.run(startup)
    got, w = exe.run(main, feed=feed, fetch_list=[out, weight], return_numpy=False)
    np.testing.assert_array_equal(np.array(got), iv[[2, 3, 4]])  # instances 1 and 2
    assert got.lod() == [[0, 1, 3]]
    np.testing.assert_array_equal(np.array(w), [[1.0], [1.0]])


def test_filter_by_instag_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        ins = layers.data("ins", [2], lod_level=1)
        tag = layers.data("tag", [1], dtype="int64", lod_level=1)
        with pytest.raises(TypeError, match="is_lod must be a bool"):
            layers.filter_by_instag(ins, tag, tag, is_lod=1)
        with pytest.raises(TypeError, match="out_val_if_empty must be a python int"):
            layers.filter_by_instag(ins, tag, tag, True, out_val_if_empty=0.5)


def test_shard_index_and_hash_through_the_executor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [1], dtype="int64")
        sh = layers.shard_index(x, index_num=20, nshards=2, shard_id=1, ignore_value=-3)
        h = layers.hash(layers.data("h", [1], dtype="int32"), hash_size=10000, num_hash=2)
    ops = {o.type: o for o in main.global_block().ops}
    assert ops["shard_index"].attrs["index_num"] == 20 and sh.shape == (-1, 1)
    assert ops["hash"].attr("mod_by") == 10000 and ops["hash"].attr("num_hash") == 2
    assert h.shape == (-1, 2, 1) and h.dtype == "int32"
    xv = np.array([[0], [9], [10], [19]], np.int64)
    np.random.seed(1)
    hv = np.random.randint(0, 10, (8, 1)).astype("int32")
    got_sh, got_h = _run(main, startup, {"x": xv, "h": hv}, [sh, h])
    np.testing.assert_array_equal(got_sh, [[-3], [-3], [0], [9]])
    np.testing.assert_array_equal(got_h[:3, :, 0], [[3481, 7475], [1719, 5986], [8473, 694]])


def test_shard_index_and_hash_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [1], dtype="int64")
        with pytest.raises(ValueError, match=r"shard_id \(2\) must be in \[0, 2\)"):
            layers.shard_index(x, 20, 2, 2)
        with pytest.raises(TypeError, match="input must be int32 or int64"):
            layers.shard_index(layers.data("f", [1]), 20, 2, 0)
        with pytest.raises(TypeError, match="hash_size must be a python int"):
            layers.hash(x, hash_size=1024.5)
        with pytest.raises(TypeError, match="num_hash must be a python int"):
            layers.hash(x, hash_size=2**32, num_hash=2.5)
        with pytest.raises(TypeError, match="input must be int32 or int64"):
            layers.hash(layers.data("x2", [1], lod_level=1), hash_size=2**32)


def test_selected_rows_layers_through_the_executor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        sr = main.global_block().create_var(name="sr", shape=(10, 2), dtype="float32",
                                            type=VarType.SELECTED_ROWS, persistable=True)
        merged = layers.merge_selected_rows(sr)
        value = layers.get_tensor_from_selected_rows(merged)
    assert merged.type == VarType.SELECTED_ROWS and value.shape == (-1, 2)
    scope = fluid.Scope()
    scope.vars["sr"] = SelectedRows(np.array([7, 2, 7], np.int64),
                                    np.arange(6, dtype=np.float32).reshape(3, 2), 10)
    (got,) = _run(main, startup, {}, [value], scope=scope)
    np.testing.assert_array_equal(got, [[2.0, 3.0], [4.0, 6.0]])  # rows 2 and 7
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        dense = layers.data("d", [2])
        with pytest.raises(TypeError, match="x must be a SELECTED_ROWS variable"):
            layers.merge_selected_rows(dense)
        with pytest.raises(TypeError, match="x must be a SELECTED_ROWS variable"):
            layers.get_tensor_from_selected_rows(dense)


def test_mean_iou_layer():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        p = layers.data("p", [4], dtype="int64")
        lab = layers.data("l", [4], dtype="int64")
        miou, wrong, correct = layers.mean_iou(p, lab, 3)
    op = main.global_block().ops[-1]
    assert op.type == "mean_iou" and op.attr("num_classes") == 3
    assert miou.shape == (1,) and miou.dtype == "float32" and wrong.dtype == "int32"
    pv = np.array([[0, 1, 2, 2]], np.int64)
    lv = np.array([[0, 1, 1, 2]], np.int64)
    got_iou, got_w, got_c = _run(main, startup, {"p": pv, "l": lv}, [miou, wrong, correct])
    np.testing.assert_array_equal(got_c, [1, 1, 1])
    np.testing.assert_array_equal(got_w, [0, 1, 1])
    np.testing.assert_allclose(got_iou, [(1 + 0.5 + 0.5) / 3], rtol=1e-6)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        f = layers.data("f", [4])
        with pytest.raises(TypeError, match="input must be int32 or int64"):
            layers.mean_iou(f, f, 3)
        with pytest.raises(ValueError, match="num_classes must be > 0"):
            layers.mean_iou(layers.data("q", [4], dtype="int32"),
                            layers.data("r", [4], dtype="int32"), 0)
