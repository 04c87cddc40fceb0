"""``layers.image_resize``, ``resize_bilinear``, ``resize_nearest``, ``resize_trilinear`` and
``image_resize_short`` as Fluid 1.8 builds them: op types, input slots and attributes for each
way of giving the size, static output shapes, values through the executor against numpy, the
errors Fluid gives, and a whole program's gradients through them against central
differences."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_interp_ops import bilinear_ref, nearest_ref, trilinear_ref
from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _ops(main, type):
    return [o for o in main.global_block().ops if o.type == type]


def _slot(op, slot):
    return op.input(slot) if slot in op.inputs else []


def test_int_out_shape_sets_the_attrs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4, 5])
        y = layers.resize_bilinear(x, out_shape=(6, 8))
        z = layers.resize_nearest(x, out_shape=[2, 3], align_corners=False)
    (bi,) = _ops(main, "bilinear_interp")
    assert bi.input("X") == ["x"] and bi.output("Out") == [y.name]
    for slot in ("OutSize", "SizeTensor", "Scale"):
        assert not _slot(bi, slot)
    assert {k: bi.attr(k) for k in ("out_d", "out_h", "out_w", "interp_method", "align_corners",
                                    "align_mode", "data_layout")} == {
        "out_d": -1, "out_h": 6, "out_w": 8, "interp_method": "bilinear",
        "align_corners": True, "align_mode": 1, "data_layout": "NCHW"}
    assert y.shape == (-1, 3, 6, 8) and y.dtype == x.dtype
    (ne,) = _ops(main, "nearest_interp")
    assert ne.attr("interp_method") == "nearest" and ne.attr("align_corners") is False
    assert ne.attr("out_h") == 2 and ne.attr("out_w") == 3 and ne.attr("align_mode") == 1
    assert z.shape == (-1, 3, 2, 3)


def test_out_shape_with_variables_becomes_size_tensor():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4, 5])
        h = layers.data("h", [1], dtype="int32", append_batch_size=False)
        y = layers.image_resize(x, out_shape=[h, 7], resample="NEAREST")
    (op,) = _ops(main, "nearest_interp")
    sizes = op.input("SizeTensor")
    assert sizes[0] == "h" and len(sizes) == 2
    (fill,) = [o for o in main.global_block().ops if o.type == "fill_constant"]
    assert fill.output("Out") == [sizes[1]]
    assert fill.attr("value") == 7.0 and fill.attr("dtype") == "int32"
    assert fill.attr("shape") == [1] and fill.attr("force_cpu") is True
    assert op.attr("out_h") == -1 and op.attr("out_w") == 7
    assert y.shape == (-1, 3, -1, 7)  # InferShape takes the attrs with a SizeTensor
    assert h.stop_gradient
    xv = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    (out,) = _run(main, startup, {"x": xv, "h": np.array([6], np.int32)}, [y])
    np.testing.assert_array_equal(out, nearest_ref(xv, 6, 7).astype(np.float32))


def test_out_shape_variable_and_actual_shape_become_out_size():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [2, 3, 4])
        size = layers.data("size", [2], dtype="int32", append_batch_size=False)
        actual = layers.data("actual", [2], dtype="int32", append_batch_size=False)
        y = layers.resize_bilinear(x, out_shape=size, align_corners=False, align_mode=0)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            z = layers.resize_bilinear(x, out_shape=[5, 5], actual_shape=actual)
    assert any("actual_shape will be deprecated" in str(w.message) for w in caught)
    a, b = _ops(main, "bilinear_interp")
    assert a.input("OutSize") == ["size"] and a.attr("out_h") == -1 and a.attr("out_w") == -1
    assert y.shape == (-1, 2, -1, -1)
    assert b.input("OutSize") == ["actual"] and b.attr("out_h") == 5
    assert z.shape == (-1, 2, 5, 5)  # OutSize is read at run time only
    assert size.stop_gradient and actual.stop_gradient
    xv = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
    oy, oz = _run(main, startup, {"x": xv, "size": np.array([5, 7], np.int32),
                                  "actual": np.array([2, 6], np.int32)}, [y, z])
    np.testing.assert_allclose(oy, bilinear_ref(xv, 5, 7, False, 0), rtol=1e-5, atol=1e-5)
    # at run time actual_shape wins over out_shape
    np.testing.assert_allclose(oz, bilinear_ref(xv, 2, 6), rtol=1e-5, atol=1e-5)


def test_scale_attr_and_scale_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [2, 4, 6])
        free = layers.data("free", [2, 2, -1, 6], append_batch_size=False)
        s = layers.data("s", [1], append_batch_size=False)
        y = layers.resize_bilinear(x, scale=1.5)
        y2 = layers.resize_nearest(free, scale=2)
        z = layers.image_resize(x, scale=s)
        both = layers.resize_bilinear(x, out_shape=[3, 3], scale=2.0)
    a, _, c, d = [o for o in main.global_block().ops]
    assert a.attr("scale") == 1.5 and a.attr("out_h") == -1 and y.shape == (-1, 2, 6, 9)
    assert y2.shape == (2, 2, -1, 12)  # an unknown dim stays unknown
    assert c.input("Scale") == ["s"] and s.stop_gradient and z.shape == (-1, 2, -1, -1)
    # out_shape given: Fluid 1.8 does not read scale at all
    assert "scale" not in d.attrs or d.attr("scale") in (None, 0.0)
    assert both.shape == (-1, 2, 3, 3)
    xv = np.random.default_rng(1).standard_normal((1, 2, 4, 6)).astype(np.float32)
    oy, oz = _run(main, startup, {"x": xv, "s": np.array([0.5], np.float32),
                                  "free": np.zeros((2, 2, 3, 6), np.float32)}, [y, z])
    np.testing.assert_allclose(oy, bilinear_ref(xv, 6, 9), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(oz, bilinear_ref(xv, 2, 3), rtol=1e-5, atol=1e-5)


def test_channels_last_and_trilinear():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4, 5, 3])  # NHWC
        y = layers.resize_bilinear(x, [7, 2], data_format="NHWC", align_corners=False)
        v = layers.data("v", [2, 3, 4, 2])  # NCDHW
        t = layers.resize_trilinear(v, [4, 2, 5], align_corners=False, align_mode=0)
        vl = layers.data("vl", [3, 4, 2, 2])  # NDHWC
        tl = layers.resize_trilinear(vl, scale=2.0, data_format="NDHWC")
    bi = _ops(main, "bilinear_interp")[0]
    assert bi.attr("data_layout") == "NHWC" and y.shape == (-1, 7, 2, 3)
    tri, tri_l = _ops(main, "trilinear_interp")
    assert tri.attr("interp_method") == "trilinear" and tri.attr("data_layout") == "NCHW"
    assert (tri.attr("out_d"), tri.attr("out_h"), tri.attr("out_w")) == (4, 2, 5)
    assert t.shape == (-1, 2, 4, 2, 5)
    assert tri_l.attr("data_layout") == "NHWC" and tl.shape == (-1, 6, 8, 4, 2)
    rng = np.random.default_rng(2)
    xv = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    vv = rng.standard_normal((1, 2, 3, 4, 2)).astype(np.float32)
    oy, ot = _run(main, startup, {"x": xv, "v": vv,
                                  "vl": np.zeros((1, 3, 4, 2, 2), np.float32)}, [y, t])
    np.testing.assert_allclose(oy, bilinear_ref(xv, 7, 2, False, 1, nhwc=True), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(ot, trilinear_ref(vv, 4, 2, 5, False, 0), rtol=1e-5, atol=1e-5)


def test_image_resize_short_keeps_the_aspect_ratio():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        wide = layers.data("wide", [3, 4, 6])
        tall = layers.data("tall", [3, 7, 3])
        a = layers.image_resize_short(wide, 6)
        b = layers.image_resize_short(tall, 4, resample="NEAREST")
    assert a.shape == (-1, 3, 6, 9)  # 6 · 6/4 = 9
    assert b.shape == (-1, 3, 9, 4)  # int(7 · 4/3 + 0.5) = int(9.83) = 9
    first, second = main.global_block().ops
    assert first.type == "bilinear_interp" and second.type == "nearest_interp"
    assert (second.attr("out_h"), second.attr("out_w")) == (9, 4)
    tv = np.random.default_rng(3).standard_normal((1, 3, 7, 3)).astype(np.float32)
    (ob,) = _run(main, startup, {"wide": np.zeros((1, 3, 4, 6), np.float32), "tall": tv}, [b])
    np.testing.assert_array_equal(ob, nearest_ref(tv, 9, 4).astype(np.float32))


def test_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4, 5])
        v = layers.data("v", [2, 3, 4, 5])
        with pytest.raises(ValueError, match="one of out_shape and scale must not be None"):
            layers.resize_bilinear(x)
        with pytest.raises(ValueError, match="'BILINEAR', 'TRILINEAR' or 'NEAREST'.*'BICUBIC'"):
            layers.image_resize(x, [2, 2], resample="BICUBIC")
        with pytest.raises(ValueError, match="'BILINEAR' and 'NEAREST' only support 4-D"):
            layers.resize_nearest(v, [2, 2])
        with pytest.raises(ValueError, match="'TRILINEAR' only supports 5-D"):
            layers.resize_trilinear(x, [2, 2, 2])
        with pytest.raises(TypeError, match="align_corners should be a bool value, got 1"):
            layers.resize_bilinear(x, [2, 2], align_corners=1)
        with pytest.raises(ValueError, match="align_mode can only be 0 or 1, got 2"):
            layers.resize_bilinear(x, [2, 2], align_mode=2)
        with pytest.raises(ValueError, match="only 'NCHW' or 'NHWC' supported for 4-D"):
            layers.resize_bilinear(x, [2, 2], data_format="NCDHW")
        with pytest.raises(ValueError, match="only 'NCDHW' or 'NDHWC' supported for 5-D"):
            layers.resize_trilinear(v, [2, 2, 2], data_format="NCHW")
        with pytest.raises(TypeError, match="out_shape should be a list or tuple or Variable"):
            layers.resize_bilinear(x, 5)
        with pytest.raises(ValueError, match="out_shape length should be 2 for input 4-D"):
            layers.resize_bilinear(x, [2, 2, 2])
        with pytest.raises(ValueError, match="out_shape length should be 3 for input 5-D"):
            layers.resize_trilinear(v, [2, 2])
        with pytest.raises(ValueError, match="must be greater than 0, got \\[0, 2\\]"):
            layers.resize_bilinear(x, [0, 2])
        with pytest.raises(TypeError, match="must be an int or a Variable, got 2.5"):
            layers.resize_bilinear(x, [2.5, 2])
        with pytest.raises(ValueError, match=r"\(scale\) should be greater than zero, got -1.0"):
            layers.resize_bilinear(x, scale=-1.0)
        with pytest.raises(TypeError, match=r"\(scale\)'s type should be float, int or Variable"):
            layers.resize_bilinear(x, scale="2")
        with pytest.raises(TypeError, match="actual_shape should either be Variable or None"):
            layers.resize_bilinear(x, [2, 2], actual_shape=[2, 2])
        with pytest.raises(TypeError, match="image_resize: input must be a Variable"):
            layers.image_resize(np.zeros((1, 3, 4, 5)), [2, 2])
        with pytest.raises(ValueError, match="rank of input must be 4"):
            layers.image_resize_short(v, 3)


def test_gradients_through_the_resize_layers():
    """conv2d → resize_bilinear (half-pixel) → resize_nearest (sizes from a fed SizeTensor)
    and a trilinear resize of a parameter → weighted sums: the parameters' gradients equal
    central differences of the loss."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 3, 4))
    w1 = rng.standard_normal((2, 3, 5, 7))
    w2 = rng.standard_normal((2, 3, 6, 3))
    w3 = rng.standard_normal((1, 2, 3, 4, 3))

    def build():
        xv = layers.data("x", [2, 3, 4], dtype="float64")
        hv = layers.data("h", [1], dtype="int32", append_batch_size=False)
        wv1 = layers.data("w1", [2, 3, 5, 7], dtype="float64", append_batch_size=False)
        wv2 = layers.data("w2", [2, 3, 6, 3], dtype="float64", append_batch_size=False)
        wv3 = layers.data("w3", [1, 2, 3, 4, 3], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 3, 1, param_attr="filt", bias_attr="fb")  # [N, 3, 3, 4]
        up = layers.resize_bilinear(h, [5, 7], align_corners=False, align_mode=0)
        near = layers.resize_nearest(up, [hv, 3], align_corners=False)  # [N, 3, 6, 3]
        vol = layers.create_parameter([1, 2, 2, 3, 2], "float64", name="vol")
        tri = layers.resize_trilinear(vol, [3, 4, 3])
        terms = [layers.reduce_sum(layers.elementwise_mul(up, wv1)),
                 layers.reduce_sum(layers.elementwise_mul(near, wv2)),
                 layers.reduce_sum(layers.elementwise_mul(tri, wv3))]
        return layers.sums(terms)

    feed = {"x": x, "h": np.array([6], np.int32), "w1": w1, "w2": w2, "w3": w3}
    got = program_grads_and_numeric(build, feed, ["filt", "fb", "vol"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name
