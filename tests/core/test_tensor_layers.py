"""Tensor layers where Fluid 1.8 takes more than a plain list or Variable: ``layers.reshape``
with the shape taken from the graph (``actual_shape``, a Variable ``shape``, a list holding
Variables) and in place, and ``layers.assign`` of a numpy array. Program structure as Fluid
builds it, values against numpy, training through an in-place reshape against the plain one."""

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

X = np.arange(24, dtype="float32").reshape(2, 3, 4)


def _run(main, startup, feed, fetch):
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_actual_shape_wins_at_run_time_and_the_list_gives_the_built_shape():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        actual = layers.data("actual", [2], dtype="int32", append_batch_size=False)
        out = layers.reshape(x, [-1, 12], actual_shape=actual)
    op = main.global_block().ops[-1]
    assert op.type == "reshape2"
    assert op.input("Shape") == [actual.name] and op.attr("shape") == [-1, 12]
    assert out.shape == (-1, 12)  # what the program knows before it runs
    assert actual.stop_gradient
    (got,) = _run(main, startup, {"x": X, "actual": np.array([4, -1], np.int32)}, [out])
    np.testing.assert_array_equal(got, X.reshape(4, 6))


def test_a_variable_shape_is_the_whole_shape():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        shape = layers.assign(np.array([0, 12, 1], np.int32))
        out = layers.reshape(x, shape)
    op = main.global_block().ops[-1]
    assert op.input("Shape") == [shape.name] and op.attr("shape") == []  # its default
    assert out.shape == (-1, -1, -1)  # Fluid: rank from Shape, every dim known at run time
    (got,) = _run(main, startup, {"x": X}, [out])
    np.testing.assert_array_equal(got, X.reshape(2, 12, 1))


def test_a_list_with_variables_becomes_shape_tensor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        rows = layers.data("rows", [1], dtype="int32", append_batch_size=False)
        out = layers.reshape(x, [rows, 0, -1])
    ops = main.global_block().ops
    op = ops[-1]
    # ints become one-element int32 constants, as Fluid's get_new_shape_tensor
    assert [o.type for o in ops] == ["fill_constant", "fill_constant", "reshape2"]
    assert [o.attr("force_cpu") for o in ops[:2]] == [True, True]
    assert op.input("ShapeTensor")[0] == rows.name and len(op.input("ShapeTensor")) == 3
    assert op.attr("shape") == [-1, 0, -1] and "Shape" not in op.inputs
    assert out.shape == (-1, 3, -1)
    (got,) = _run(main, startup, {"x": X, "rows": np.array([1], np.int32)}, [out])
    np.testing.assert_array_equal(got, X.reshape(1, 3, 8))


def test_shape_tensor_comes_before_actual_shape():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        rows = layers.data("rows", [1], dtype="int32", append_batch_size=False)
        actual = layers.data("actual", [2], dtype="int32", append_batch_size=False)
        out = layers.reshape(x, [rows, -1], actual_shape=actual)
    assert "Shape" not in main.global_block().ops[-1].inputs  # as Fluid: ignored then
    (got,) = _run(main, startup, {"x": X, "rows": np.array([6], np.int32),
                                  "actual": np.array([24], np.int32)}, [out])
    np.testing.assert_array_equal(got, X.reshape(6, 4))


def _trained_weights(inplace: bool) -> np.ndarray:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        h = layers.fc(x, size=6, num_flatten_dims=2)  # [-1, 3, 6]
        r = layers.reshape(h, [0, 18], inplace=inplace)
        if inplace:
            assert r is h and h.shape == (-1, 18)
        loss = layers.mean(layers.square(layers.fc(r, size=1)))
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    for _ in range(3):
        exe.run(main, feed={"x": X / 24}, fetch_list=[loss], scope=scope)
    return np.array(scope.get("fc_0.w_0"))


def test_inplace_reshape_trains_as_the_plain_one():
    with fluid.unique_name.guard():
        plain = _trained_weights(False)
    with fluid.unique_name.guard():
        inplace = _trained_weights(True)
    np.testing.assert_array_equal(inplace, plain)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"shape": 12}, TypeError,
     "The type of 'shape' in reshape must be list, tuple or Variable, but received int"),
    ({"shape": [2, 12], "actual_shape": [2, 12]}, TypeError,
     "actual_shape must be a Variable or None, got list"),
    ({"shape": []}, AssertionError, "shape must not be empty"),
    ({"shape": [-1, -1]}, AssertionError, "at most one dimension may be -1"),
    ({"shape": [0, 0, 0, 0]}, AssertionError, r"shape\[3\] is 0 .* has only 3 dims"),
    ({"shape": [2, -3]}, AssertionError, r"shape\[1\] = -3"),
    ({"shape": [2, 6.0]}, AssertionError, r"shape\[1\] = 6.0 is neither an int nor a Variable"),
])
def test_bad_shapes_are_refused_when_the_program_is_built(kwargs, error, match):
    """Fluid 1.8 asserts on the shape's values (Paddle's TestReshapeOpError catches
    AssertionError); here the same error is also a ValueError, and stays under python -O."""
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3, 4])
        with pytest.raises(error, match=match) as raised:
            layers.reshape(x, **kwargs)
    if error is AssertionError:
        assert isinstance(raised.value, ValueError)


def test_reshape_takes_numpy_ints_and_fill_constant_refuses_an_empty_shape():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3, 4])
        assert layers.reshape(x, [np.int64(-1), np.int32(6)]).shape == (-1, 6)
        with pytest.raises(AssertionError, match="The size of 'shape' in fill_constant can't "
                                                 "be zero") as raised:
            layers.fill_constant([], "float32", 1.0)
    assert isinstance(raised.value, ValueError)


# -- assign of a numpy array (Fluid 1.8: an assign_value op carries it) ------------------------

@pytest.mark.parametrize("value", [np.arange(6, dtype="float32").reshape(2, 3) / 7,
                                   np.array([[3, -1]], dtype="int32")])
def test_assign_a_numpy_array(value):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out = layers.assign(value)
    op = main.global_block().ops[-1]
    slot = "fp32_values" if value.dtype == np.float32 else "int32_values"
    assert op.type == "assign_value" and op.attr("shape") == list(value.shape)
    assert op.attr("dtype") == str(value.dtype) and len(op.attr(slot)) == value.size
    assert out.dtype == str(value.dtype) and out.shape == value.shape
    (got,) = _run(main, startup, {}, [out])
    np.testing.assert_array_equal(got, value)
    assert got.dtype == value.dtype


def test_assign_into_an_existing_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        target = layers.create_tensor("float32")
        out = layers.assign(np.ones((2, 2), "float32"), target)
    assert out is target
    np.testing.assert_array_equal(_run(main, startup, {}, [target])[0], np.ones((2, 2)))


@pytest.mark.parametrize("value, error, match", [
    (np.ones(3, "float64"), TypeError, "must be bool, float32, int32 or int64, but received "
                                       "float64"),
    (np.ones(3, "uint8"), TypeError, "must be bool, float32, int32 or int64, but received uint8"),
    ([1.0, 2.0], TypeError, "The type of 'input' in assign must be Variable or ndarray, but "
                            "received list"),
    (np.zeros(1024 * 1024 + 1, "float32"), ValueError, "more than a program carries"),
])
def test_assign_refuses_what_fluid_refuses(value, error, match):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(error, match=match):
            layers.assign(value)


@pytest.mark.parametrize("dim, keep, want", [(None, False, (1,)), (None, True, (1, 1, 1)),
                                             (1, False, (-1, 4)), ([0, -1], True, (1, 3, 1))])
def test_reduce_layers_infer_fluids_shapes(dim, keep, want):
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3, 4])
        for layer in (layers.reduce_sum, layers.reduce_max, layers.reduce_min,
                      layers.reduce_prod, layers.reduce_mean):
            assert layer(x, dim=dim, keep_dim=keep).shape == want
        flags = layers.less_than(x, x)
        assert layers.reduce_any(flags, dim=dim, keep_dim=keep).stop_gradient


def test_more_fluid_layers_build_and_run():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        flat = layers.flatten(x, axis=2)
        shp = layers.shape(x)
        total = layers.sum([x, x])
        w = layers.create_parameter([4, 2], "float32", name="mw")
        prod = layers.mul(x, w, x_num_col_dims=2)
        unit = layers.l2_normalize(x, axis=-1)
        clipped = layers.clip_by_norm(x, max_norm=1.0)
        mse = layers.mse_loss(x, layers.scale(x, 0.0))
    assert flat.shape == (-1, 4) and shp.shape == (3,) and prod.shape == (-1, 3, 2)
    xv = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = _run(main, startup, {"x": xv}, [flat, shp, total, prod, unit, clipped, mse, "mw"])
    g_flat, g_shp, g_total, g_prod, g_unit, g_clip, g_mse, g_w = got
    np.testing.assert_array_equal(g_flat, xv.reshape(6, 4))
    assert g_shp.tolist() == [2, 3, 4]
    np.testing.assert_array_equal(g_total, 2 * xv)
    np.testing.assert_allclose(g_prod, xv @ g_w, rtol=1e-5)
    np.testing.assert_allclose(g_unit, xv / np.linalg.norm(xv, axis=-1, keepdims=True),
                               rtol=1e-5)
    assert np.linalg.norm(g_clip) <= 1.0 + 1e-5
    np.testing.assert_allclose(g_mse, [np.mean(xv ** 2)], rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match=r"in range \[0, rank\(x\)\]"):
            layers.flatten(layers.data("y", [3]), axis=3)


def test_prelu_and_losses_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = layers.data("img", [3, 2, 2])
        for mode, shape in (("all", (1,)), ("channel", (1, 3, 1, 1)),
                            ("element", (1, 3, 2, 2))):
            layers.prelu(img, mode, param_attr=f"alpha_{mode}")
            assert main.global_block().var(f"alpha_{mode}").shape == shape
        prob = layers.data("prob", [1])
        label = layers.data("label", [1])
        ll = layers.log_loss(prob, label)
        hl = layers.huber_loss(prob, label, delta=0.5)
        with pytest.raises(ValueError, match="mode should be one of all, channel, element"):
            layers.prelu(img, "row")
    got = _run(main, startup, {"img": np.ones((1, 3, 2, 2), np.float32),
                               "prob": np.array([[0.5]], np.float32),
                               "label": np.array([[1.0]], np.float32)},
               ["alpha_channel", ll, hl])
    np.testing.assert_allclose(got[0], np.full((1, 3, 1, 1), 0.25))  # Fluid's initial alpha
    np.testing.assert_allclose(got[1], [[-np.log(0.5 + 1e-4)]], rtol=1e-5)
    np.testing.assert_allclose(got[2], [[0.125]])


def test_unstack_expand_as_where_scatter_kldiv_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        rows = layers.unstack(x, axis=1)
        big = layers.expand_as(layers.data("s", [2, 2], append_batch_size=False),
                               layers.data("t", [4, 6], append_batch_size=False))
        found = layers.where(layers.less_than(x, layers.fill_constant([1], "float32", 0.0)))
        upd = layers.data("u", [2, 4], append_batch_size=False)
        ids = layers.data("ids", [2], dtype="int64", append_batch_size=False)
        scattered = layers.scatter(layers.data("base", [5, 4], append_batch_size=False), ids,
                                   upd)
        kl = layers.kldiv_loss(layers.log(layers.softmax(x)), layers.softmax(x),
                               reduction="batchmean")
        with pytest.raises(ValueError, match="reduction must be"):
            layers.kldiv_loss(x, x, reduction="avg")
    assert len(rows) == 3 and rows[0].shape == (-1, 4) and kl.shape == (1,)
    xv = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = _run(main, startup, {"x": xv, "s": np.ones((2, 2), np.float32),
                               "t": np.zeros((4, 6), np.float32),
                               "u": np.ones((2, 4), np.float32),
                               "ids": np.array([4, 0]), "base": np.zeros((5, 4), np.float32)},
               [*rows, big, found, scattered, kl])
    for i in range(3):
        np.testing.assert_array_equal(got[i], xv[:, i])
    assert got[3].shape == (4, 6)
    np.testing.assert_array_equal(got[4], np.argwhere(xv < 0))
    assert got[5][[0, 4]].sum() == 8 and got[5][1:4].sum() == 0
    np.testing.assert_allclose(got[6], [0.0], atol=1e-6)  # a distribution against itself


def test_pad2d_reads_a_paddings_tensor_at_run_time():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2, 3, 4])
        pads = layers.data("pads", [4], dtype="int32", append_batch_size=False)
        out = layers.pad2d(x, pads, mode="edge", data_format="NCHW")
    op = main.global_block().ops[-1]
    assert op.input("Paddings") == ["pads"] and op.attrs["paddings"] == []
    assert out.shape == (-1, 2, -1, -1)  # known only at run time
    xv = np.random.default_rng(2).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for p in ([1, 0, 2, 1], [0, 2, 0, 0]):
        got, = _run(main, startup, {"x": xv, "pads": np.array(p, np.int32)}, [out])
        np.testing.assert_array_equal(got, np.pad(xv, ((0, 0), (0, 0), p[:2], p[2:]),
                                                  mode="edge"))
    with pytest.raises(fluid.executor.ExecutionError, match="4 values >= 0"):
        _run(main, startup, {"x": xv, "pads": np.array([1, -1, 0, 0], np.int32)}, [out])


def test_pad_pad2d_smooth_l1_layers():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2, 3, 4])
        padded = layers.pad(x, [0, 0, 0, 0, 1, 1, 0, 2])
        framed = layers.pad2d(x, [1, 1, 2, 0], mode="reflect")
        loss = layers.smooth_l1(x, layers.scale(x, 0.0))
        with pytest.raises(ValueError, match="mode should be one of constant, reflect, edge"):
            layers.pad2d(x, mode="wrap")
    assert padded.shape == (-1, 2, 5, 6) and framed.shape == (-1, 2, 5, 6)
    assert loss.shape == (-1, 1)
    xv = np.random.default_rng(1).standard_normal((1, 2, 3, 4)).astype(np.float32)
    g_pad, g_frame, g_loss = _run(main, startup, {"x": xv}, [padded, framed, loss])
    np.testing.assert_array_equal(g_pad, np.pad(xv, ((0, 0), (0, 0), (1, 1), (0, 2))))
    np.testing.assert_array_equal(g_frame, np.pad(xv, ((0, 0), (0, 0), (1, 1), (2, 0)),
                                                  mode="reflect"))
    a = np.abs(xv)
    np.testing.assert_allclose(g_loss, np.where(a < 1, 0.5 * xv ** 2, a - 0.5)
                               .reshape(1, -1).sum(axis=1, keepdims=True), rtol=1e-5)
