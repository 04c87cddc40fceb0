"""Fluid 1.8's creation and inspection layers of layers/tensor.py: the programs they build,
their static shapes, values through the executor, errors and a gradient through reverse."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _build(fn):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        out = fn()
    return main, startup, out


def _run(main, startup, feed, fetch, **kw):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, **kw)


def _ops(main, type_):
    return [o for o in main.global_block().ops if o.type == type_]


def test_argmin_and_argsort_build_fluids_ops_and_values():
    x = np.array([[[5, 8, 9, 5], [0, 0, 1, 7], [6, 9, 2, 4]],
                  [[5, 2, 4, 2], [4, 7, 7, 9], [1, 7, 0, 6]]], np.float32)

    def build():
        xv = layers.data("x", [2, 3, 4], append_batch_size=False)
        return layers.argmin(xv, axis=1), *layers.argsort(xv, axis=-1, descending=True)

    main, startup, (amin, out, ids) = _build(build)
    (op,) = _ops(main, "arg_min")
    assert op.attr("axis") == 1 and op.output("Out") == [amin.name]
    (sop,) = _ops(main, "argsort")
    assert sop.attr("axis") == -1 and sop.attr("descending") is True
    assert sop.output("Out") == [out.name] and sop.output("Indices") == [ids.name]
    assert amin.shape == (2, 4) and amin.dtype == "int64"
    assert out.shape == ids.shape == (2, 3, 4) and ids.dtype == "int64"
    assert out.stop_gradient and ids.stop_gradient  # as Fluid 1.8 creates them
    got_min, got_out, got_ids = _run(main, startup, {"x": x}, [amin, out, ids])
    np.testing.assert_array_equal(got_min, [[1, 1, 1, 2], [2, 0, 2, 0]])
    np.testing.assert_array_equal(got_out, -np.sort(-x, axis=-1))
    np.testing.assert_array_equal(np.take_along_axis(x, got_ids, -1), got_out)
    with pytest.raises(ValueError, match="argmin: axis must be in"):
        _build(lambda: layers.argmin(layers.data("y", [3]), axis=2))
    with pytest.raises(TypeError, match="argsort: input must be a Variable"):
        _build(lambda: layers.argsort(x))


def test_reverse_zeros_like_ones_like():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)

    def build():
        xv = layers.data("x", [3, 4], append_batch_size=False)
        return (layers.reverse(xv, 0), layers.reverse(xv, [0, 1]), layers.zeros_like(xv),
                layers.ones_like(xv))

    main, startup, (r0, r01, z, o) = _build(build)
    assert [op.attr("axis") for op in _ops(main, "reverse")] == [[0], [0, 1]]
    assert len(_ops(main, "fill_zeros_like")) == 1
    (fop,) = _ops(main, "fill_any_like")
    assert fop.attr("value") == 1.0
    assert r0.shape == z.shape == o.shape == (3, 4) and z.stop_gradient
    got = _run(main, startup, {"x": x}, [r0, r01, z, o])
    np.testing.assert_array_equal(got[0], x[::-1])
    np.testing.assert_array_equal(got[1], x[::-1, ::-1])
    np.testing.assert_array_equal(got[2], np.zeros((3, 4)))
    np.testing.assert_array_equal(got[3], np.ones((3, 4)))
    assert got[3].dtype == np.float32
    with pytest.raises(TypeError, match="reverse: axis must be an int, list or tuple"):
        _build(lambda: layers.reverse(layers.data("y", [3]), "0"))
    with pytest.raises(ValueError, match="reverse: axis 2 is out of range"):
        _build(lambda: layers.reverse(layers.data("y", [3]), 2))

    def array_input():
        arr = layers.create_array("float32")
        return layers.reverse(arr, 0)

    with pytest.raises(NotImplementedError, match=r"reverse\(x=<LoDTensorArray>\)"):
        _build(array_input)


def test_range_and_linspace_take_numbers_or_variables():
    def build():
        start = layers.fill_constant([1], "int64", 3)
        return (layers.range(0, 10, 2, "int32"), layers.range(start, 7, 1, "int32"),
                layers.linspace(0, 10, 5, "float32"),
                layers.linspace(layers.fill_constant([1], "float64", 1.0), 2.0,
                                layers.fill_constant([1], "int32", 3), "float64"))

    main, startup, (a, b, c, d) = _build(build)
    (rop, rop2) = _ops(main, "range")
    assert set(rop.input_names) >= {"Start", "End", "Step"}
    assert a.shape == (5,) and b.shape == (-1,) and a.dtype == "int32"
    assert len(_ops(main, "cast")) == 1  # the int64 start is cast to int32, as Fluid does
    assert c.shape == (5,) and d.shape == (-1,) and d.dtype == "float64"
    got = _run(main, startup, {}, [a, b, c, d])
    np.testing.assert_array_equal(got[0], [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(got[1], [3, 4, 5, 6])
    assert got[0].dtype == np.int32
    np.testing.assert_allclose(got[2], [0.0, 2.5, 5.0, 7.5, 10.0])
    np.testing.assert_allclose(got[3], [1.0, 1.5, 2.0])
    with pytest.raises(TypeError, match="range: dtype must be"):
        _build(lambda: layers.range(0, 3, 1, "bool"))
    with pytest.raises(ValueError, match="range: step must not be 0"):
        _build(lambda: layers.range(0, 3, 0, "int32"))
    with pytest.raises(TypeError, match="linspace: num must be an int"):
        _build(lambda: layers.linspace(0, 1, 2.5, "float32"))
    with pytest.raises(ValueError, match="linspace: num must be positive"):
        _build(lambda: layers.linspace(0, 1, 0, "float32"))


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")
def test_diag_eye_and_the_inf_nan_checks():
    def build():
        xv = layers.data("x", [3], append_batch_size=False)
        logs = layers.log(xv)  # log 0 = -inf: the feed itself may not hold inf
        return (layers.diag(np.arange(3, 6, dtype="int32")), layers.eye(2, 3, dtype="int32"),
                layers.eye(2, batch_shape=[3]), layers.has_inf(logs), layers.has_nan(logs),
                layers.isfinite(logs), layers.isfinite(xv), layers.has_inf(xv))

    main, startup, outs = _build(build)
    dg, e, eb, hi, hn, fin = outs[:6]
    assert dg.shape == (3, 3) and e.shape == (2, 3) and eb.shape == (3, 2, 2)
    eop = _ops(main, "eye")[0]
    assert eop.attr("num_rows") == 2 and eop.attr("num_columns") == 3
    assert len(_ops(main, "reshape2")) == 1 and _ops(main, "expand")[0].attr("expand_times") \
        == [3, 1, 1]
    assert hi.shape == hn.shape == fin.shape == (1,) and fin.dtype == "bool"
    x = np.array([1.0, 0.0, 2.0], np.float32)
    got = _run(main, startup, {"x": x}, list(outs))
    np.testing.assert_array_equal(got[0], np.diag([3, 4, 5]))
    np.testing.assert_array_equal(got[1], np.eye(2, 3))
    assert got[1].dtype == np.int32
    np.testing.assert_array_equal(got[2], np.stack([np.eye(2)] * 3))
    assert got[3].tolist() == [True] and got[4].tolist() == [False]
    assert got[5].tolist() == [False] and got[6].tolist() == [True]
    assert got[7].tolist() == [False]
    with pytest.raises(TypeError, match="eye: num_rows should be a non-negative int"):
        _build(lambda: layers.eye(-1))
    with pytest.raises(TypeError, match="eye: batch_shape should be a list of positive ints"):
        _build(lambda: layers.eye(2, batch_shape=[0]))
    with pytest.raises(ValueError, match="diag: diagonal must be 1-D"):
        _build(lambda: layers.diag(layers.data("m", [2, 2], append_batch_size=False)))


def test_gradient_through_reverse_and_argsort():
    x = np.random.default_rng(5).standard_normal((3, 4))

    def build():
        xv = layers.data("x", [3, 4], dtype="float64", append_batch_size=False)
        w = layers.create_parameter([3, 4], "float64", name="w")
        flipped = layers.reverse(layers.elementwise_mul(xv, w), [0, 1])
        out, _ = layers.argsort(layers.elementwise_add(flipped, w), axis=1)
        out.stop_gradient = False  # Fluid 1.8 creates it stopped; opt in to the sort grad
        weights = layers.assign(np.arange(12, dtype=np.float32).reshape(3, 4))
        return layers.reduce_sum(layers.elementwise_mul(out, layers.cast(weights, "float64")))

    got = program_grads_and_numeric(build, {"x": x}, ["w"])
    analytic, numeric = got["w"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)
    assert np.abs(analytic).sum() > 0


def test_lod_append_adds_a_level_below_xs_lod():
    xv = np.arange(6, dtype=np.float32).reshape(6, 1)

    def build():
        x = layers.data("x", [1], lod_level=1)
        offsets = layers.data("offs", [7], dtype="int32", append_batch_size=False)
        return layers.lod_append(x, [0, 1, 2, 3, 4, 5, 6]), layers.lod_append(x, offsets)

    main, startup, (a, b) = _build(build)
    first, second = _ops(main, "lod_reset")
    assert first.attr("append") is True and first.attr("target_lod") == list(range(7))
    assert second.input("Y") == ["offs"] and second.attr("append") is True
    assert a.shape == (-1, 1)
    # x's level (2 and 4 parts) now counts the sequences of the appended level
    feed = {"x": fluid.create_lod_tensor(xv, [[2, 4]], fluid.CPUPlace()),
            "offs": np.array([0, 0, 2, 3, 4, 5, 6], np.int32)}
    got_a, got_b = _run(main, startup, feed, [a, b], return_numpy=False)
    assert got_a.lod() == [[0, 2, 6], list(range(7))]
    assert got_b.lod() == [[0, 2, 6], [0, 0, 2, 3, 4, 5, 6]]
    np.testing.assert_array_equal(np.array(got_a), xv)
    with pytest.raises(ValueError, match="lod_append: level must be a list, tuple or Variable"):
        _build(lambda: layers.lod_append(layers.data("y", [1]), 3))
    with pytest.raises(ValueError, match="lod_append: level must be one level of offsets"):
        _build(lambda: layers.lod_append(layers.data("y", [1]), [[0, 1]]))
