"""``layers.conv3d``, ``conv3d_transpose``, ``pool3d`` and ``adaptive_pool3d`` as Fluid 1.8
builds them: ops, slots, attributes, parameters and their initializers, static shapes, values
through the executor against numpy, the errors Fluid gives, and a whole program's gradients
through conv3d → pool3d → conv3d_transpose against central differences."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from tests.programs import build as _build
from tests.programs import run as _run

from .numeric_grad import program_grads_and_numeric

RNG = np.random.default_rng(5)






def _correlate(x, w, stride=(1, 1, 1), pads=((0, 0),) * 3):
    """A plain NCDHW correlation (groups 1, no dilation) by output position."""
    xp = np.pad(x, ((0, 0), (0, 0), *pads))
    ks = w.shape[2:]
    outs = [(xp.shape[2 + i] - ks[i]) // stride[i] + 1 for i in range(3)]
    out = np.zeros((x.shape[0], w.shape[0], *outs))
    for o in itertools.product(*(range(v) for v in outs)):
        patch = xp[:, :, o[0] * stride[0]:o[0] * stride[0] + ks[0],
                   o[1] * stride[1]:o[1] * stride[1] + ks[1],
                   o[2] * stride[2]:o[2] * stride[2] + ks[2]]
        out[(slice(None), slice(None), *o)] = np.einsum("ncdhw,mcdhw->nm", patch, w)
    return out


# -- structure -----------------------------------------------------------------------------------

def test_conv3d_builds_fluids_op_parameters_and_shapes():
    def build():
        x = layers.data("x", [4, 5, 6, 7])
        y = layers.conv3d(x, num_filters=6, filter_size=[3, 2, 3], stride=[1, 2, 2],
                          padding=[1, 1, 0, 0, 2, 1], dilation=[2, 1, 1], groups=2, act="relu")
        same = layers.conv3d(x, 3, 3, stride=2, padding="SAME", dilation=2, bias_attr=False)
        last = layers.conv3d(layers.data("z", [5, 6, 7, 4]), 2, 1, data_format="NDHWC")
        return y, same, last

    main, startup, (y, same, last) = _build(build)
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["conv3d", "elementwise_add", "relu", "conv3d", "conv3d",
                                     "elementwise_add"]
    op = ops[0]
    assert op.input("Input") == ["x"] and op.input("Filter") == ["conv3d_0.w_0"]
    assert op.attr("strides") == [1, 2, 2] and op.attr("dilations") == [2, 1, 1]
    assert op.attr("paddings") == [1, 1, 0, 0, 2, 1]  # asymmetric: kept as 6
    assert op.attr("groups") == 2 and op.attr("padding_algorithm") == "EXPLICIT"
    assert op.attr("data_format") == "NCDHW" and op.attr("use_cudnn") is True
    assert ops[1].attr("axis") == 1 and ops[1].input("Y") == ["conv3d_0.b_0"]
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["conv3d_0.w_0"].shape == (6, 2, 3, 2, 3)
    assert params["conv3d_0.b_0"].shape == (6,)
    assert "conv3d_1.b_0" not in params
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["conv3d_0.w_0"].type == "gaussian_random"
    assert init["conv3d_0.w_0"].attr("mean") == 0.0
    assert init["conv3d_0.w_0"].attr("std") == pytest.approx(math.sqrt(2.0 / (18 * 4)))
    assert init["conv3d_0.b_0"].type == "fill_constant"
    # D: (5 + 2 - 2*2 - 1) + 1 = 3; H: (6 - 2) // 2 + 1 = 3; W: (7 + 3 - 3) // 2 + 1 = 4
    assert y.shape == (-1, 6, 3, 3, 4)
    assert ops[3].attr("padding_algorithm") == "SAME" and ops[3].attr("paddings") == [0, 0, 0]
    assert same.shape == (-1, 3, 3, 3, 4)
    assert ops[4].attr("data_format") == "NDHWC" and ops[5].attr("axis") == 4
    assert params["conv3d_2.b_0"].shape == (2,) and last.shape == (-1, 5, 6, 7, 2)


def test_conv3d_transpose_builds_fluids_op_and_shapes():
    def build():
        x = layers.data("x", [4, 3, 3, 4])
        up = layers.conv3d_transpose(x, num_filters=6, filter_size=[2, 3, 2], stride=2,
                                     padding=1, groups=2)
        sized = layers.conv3d_transpose(x, num_filters=2, output_size=[6, 7, 8], stride=2,
                                        padding=[1, 0, 0, 0, 0, 1], bias_attr=False)
        return up, sized

    main, startup, (up, sized) = _build(build)
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["conv3d_transpose", "elementwise_add", "conv3d_transpose"]
    op = ops[0]
    assert op.attr("paddings") == [1, 1, 1] and op.attr("strides") == [2, 2, 2]
    assert op.attr("groups") == 2 and op.attr("output_size") == []
    assert op.attr("data_format") == "NCHW"  # as Fluid 1.8 passes it
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["conv3d_transpose_0.w_0"].shape == (4, 3, 2, 3, 2)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["conv3d_transpose_0.w_0"].type == "uniform_random"  # Xavier
    # (3 - 1)*2 - 2 + 2 = 4, (3 - 1)*2 - 2 + 3 = 5, (4 - 1)*2 - 2 + 2 = 6
    assert up.shape == (-1, 6, 4, 5, 6)
    # filter from output_size: (6 - 4 + 1 - 1) + 1 = 3, (7 - 4 + 0 - 1) + 1 = 3,
    # (8 - 6 + 1 - 1) + 1 = 3
    assert params["conv3d_transpose_1.w_0"].shape == (4, 2, 3, 3, 3)
    assert ops[2].attr("output_size") == [6, 7, 8]
    assert ops[2].attr("paddings") == [1, 0, 0, 0, 0, 1] and sized.shape == (-1, 2, 6, 7, 8)


def test_pool3d_and_adaptive_pool3d_build_fluids_ops():
    def build():
        x = layers.data("x", [3, 5, 6, 7])
        a = layers.pool3d(x, pool_size=[2, 3, 2], pool_type="avg", pool_stride=2,
                          pool_padding=[1, 1, 1], ceil_mode=True, exclusive=False)
        b = layers.pool3d(x, pool_size=3, pool_stride=[2, 2, 3], pool_padding="SAME")
        g = layers.pool3d(x, global_pooling=True, pool_type="avg")
        m, mask = layers.adaptive_pool3d(x, [2, 3, 4], require_index=True)
        v = layers.adaptive_pool3d(x, 2, pool_type="avg")
        last = layers.pool3d(layers.data("z", [5, 6, 7, 3]), 2, pool_stride=2,
                             data_format="NDHWC")
        return a, b, g, m, mask, v, last

    main, _, (a, b, g, m, mask, v, last) = _build(build)
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["pool3d", "pool3d", "pool3d", "max_pool3d_with_index",
                                     "pool3d", "pool3d"]
    assert ops[0].attr("ksize") == [2, 3, 2] and ops[0].attr("paddings") == [1, 1, 1]
    assert ops[0].attr("ceil_mode") is True and ops[0].attr("exclusive") is False
    assert ops[0].attr("pooling_type") == "avg" and ops[0].attr("data_format") == "NCDHW"
    # ceil((5 + 2 - 2) / 2) + 1 = 4, ceil((6 + 2 - 3) / 2) + 1 = 4, ceil((7 + 2 - 2)/2) + 1 = 5
    assert a.shape == (-1, 3, 4, 4, 5)
    assert ops[1].attr("padding_algorithm") == "SAME" and b.shape == (-1, 3, 3, 3, 3)
    assert ops[2].attr("global_pooling") is True and g.shape == (-1, 3, 1, 1, 1)
    assert ops[3].output("Mask") == [mask.name] and mask.dtype == "int32"
    assert ops[3].attr("adaptive") is True and ops[3].attr("ksize") == [2, 3, 4]
    assert m.shape == (-1, 3, 2, 3, 4) and mask.shape == (-1, 3, 2, 3, 4)
    assert ops[4].attr("adaptive") is True and ops[4].attr("pooling_type") == "avg"
    assert v.shape == (-1, 3, 2, 2, 2)
    assert ops[5].attr("data_format") == "NDHWC" and last.shape == (-1, 2, 3, 3, 3)
    # without require_index a max adaptive pooling is still max_pool3d_with_index (1.8)
    main2, _, plain = _build(lambda: layers.adaptive_pool3d(layers.data("x", [1, 4, 4, 4]), 2))
    assert main2.global_block().ops[-1].type == "max_pool3d_with_index"
    assert plain.shape == (-1, 1, 2, 2, 2)


# -- values --------------------------------------------------------------------------------------

def test_conv3d_and_pool3d_values_through_the_executor():
    x = RNG.standard_normal((2, 3, 4, 5, 4)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 2, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)

    def build():
        img = layers.data("x", [3, 4, 5, 4])
        y = layers.conv3d(img, 4, [2, 3, 2], padding=[1, 0, 1],
                          param_attr=fluid.ParamAttr(
                              name="w", initializer=fluid.initializer.NumpyArrayInitializer(w)),
                          bias_attr=fluid.ParamAttr(
                              name="b", initializer=fluid.initializer.NumpyArrayInitializer(b)))
        p = layers.pool3d(y, [2, 2, 2], pool_type="avg", pool_stride=[1, 2, 2])
        q = layers.adaptive_pool3d(y, [1, 2, 2])
        return y, p, q

    main, startup, fetch = _build(build)
    (y, p, q), _ = _run(main, startup, {"x": x}, list(fetch))
    want = _correlate(x.astype(np.float64), w.astype(np.float64),
                      pads=((1, 1), (0, 0), (1, 1))) + b[None, :, None, None, None]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    od, oh, ow = want.shape[2] - 1, (want.shape[3] - 2) // 2 + 1, (want.shape[4] - 2) // 2 + 1
    avg = np.zeros((2, 4, od, oh, ow))
    for d, h, k in itertools.product(range(od), range(oh), range(ow)):
        avg[:, :, d, h, k] = want[:, :, d:d + 2, 2 * h:2 * h + 2, 2 * k:2 * k + 2].mean(
            axis=(2, 3, 4))
    np.testing.assert_allclose(p, avg, rtol=1e-4, atol=1e-4)
    # adaptive [1, 2, 2] of a [5, 3, 5] map: depth whole, rows [0, 2), [1, 3), cols [0, 3), [2, 5)
    rows, cols = [(0, 2), (1, 3)], [(0, 3), (2, 5)]
    for i, j in itertools.product(range(2), range(2)):
        np.testing.assert_allclose(
            q[:, :, 0, i, j], want[:, :, :, slice(*rows[i]), slice(*cols[j])].max(axis=(2, 3, 4)),
            rtol=1e-4, atol=1e-4)


def test_conv3d_transpose_values_are_the_adjoint_of_conv3d():
    """<conv3d_transpose(x, w), y> = <x, conv3d(y, w)> for the same filter, stride and
    padding: the transposed convolution is conv3d's adjoint."""
    x = RNG.standard_normal((1, 3, 2, 3, 2)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 2, 3)).astype(np.float32)

    def build():
        img = layers.data("x", [3, 2, 3, 2])
        return layers.conv3d_transpose(
            img, 2, filter_size=[3, 2, 3], stride=[2, 1, 2], padding=[1, 0, 1],
            param_attr=fluid.ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(w)),
            bias_attr=False)

    main, startup, out = _build(build)
    (t,), _ = _run(main, startup, {"x": x}, [out])
    assert t.shape == (1, 2, 3, 4, 3) and out.shape == (-1, 2, 3, 4, 3)
    y = RNG.standard_normal(t.shape)
    back = _correlate(y, w.astype(np.float64), stride=(2, 1, 2),
                      pads=((1, 1), (0, 0), (1, 1)))
    assert back.shape == x.shape
    np.testing.assert_allclose((t * y).sum(), (x * back).sum(), rtol=1e-4)


# -- errors --------------------------------------------------------------------------------------

def test_conv3d_layer_errors():
    def conv(**kw):
        return _build(lambda: layers.conv3d(layers.data("x", [4, 3, 3, 3]), **kw))

    with pytest.raises(ValueError, match="multiple of groups=3"):
        conv(num_filters=3, filter_size=1, groups=3)
    with pytest.raises(ValueError, match="filter_size must be an int or 3 ints"):
        conv(num_filters=2, filter_size=[1, 1])
    with pytest.raises(ValueError, match="padding must be 'SAME', 'VALID'"):
        conv(num_filters=2, filter_size=1, padding="FULL")
    with pytest.raises(ValueError, match="padding must be"):
        conv(num_filters=2, filter_size=1, padding=[1, 1])
    with pytest.raises(ValueError, match="batch or channel"):
        conv(num_filters=2, filter_size=1, padding=[[0, 0], [1, 1], [0, 0], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="data_format must be one of"):
        conv(num_filters=2, filter_size=1, data_format="NCHW")
    with pytest.raises(ValueError, match="leaves no output"):
        conv(num_filters=2, filter_size=4)
    with pytest.raises(ValueError, match="use_cudnn"):
        conv(num_filters=2, filter_size=1, use_cudnn=1)
    with pytest.raises(ValueError, match="param_attr cannot be False"):
        conv(num_filters=2, filter_size=1, param_attr=False)
    with pytest.raises(ValueError, match="must be 5-D"):
        _build(lambda: layers.conv3d(layers.data("x", [4, 3, 3]), 2, 1))
    with pytest.raises(TypeError, match="input must be a Variable"):
        layers.conv3d(np.zeros((1, 1, 1, 1, 1)), 2, 1)


def test_conv3d_transpose_layer_errors():
    def convt(**kw):
        return _build(lambda: layers.conv3d_transpose(layers.data("x", [4, 3, 3, 3]), **kw))

    with pytest.raises(ValueError, match="output_size must be set"):
        convt(num_filters=2)
    with pytest.raises(ValueError, match="multiple of groups=2"):
        convt(num_filters=3, filter_size=2, groups=2)
    with pytest.raises(ValueError, match="output_size must be an int or 3 ints"):
        convt(num_filters=2, filter_size=2, output_size=[4, 4])


def test_pool3d_layer_errors():
    def pool(**kw):
        return _build(lambda: layers.pool3d(layers.data("x", [2, 4, 4, 4]), **kw))

    with pytest.raises(ValueError, match="pool_type must be"):
        pool(pool_size=2, pool_type="min")
    with pytest.raises(ValueError, match="pool_size must be given"):
        pool()
    with pytest.raises(TypeError, match="use_cudnn"):
        pool(pool_size=2, use_cudnn="yes")
    with pytest.raises(ValueError, match="'VALID' needs ceil_mode=False"):
        pool(pool_size=2, pool_padding="VALID", ceil_mode=True)
    with pytest.raises(ValueError, match="leaves no output"):
        pool(pool_size=5)
    with pytest.raises(ValueError, match="pool_stride must be an int or 3 ints"):
        pool(pool_size=2, pool_stride=[1, 1])
    with pytest.raises(ValueError, match="require_index=True needs pool_type='max'"):
        _build(lambda: layers.adaptive_pool3d(layers.data("x", [2, 4, 4, 4]), 2, "avg",
                                              require_index=True))
    with pytest.raises(ValueError, match="pool_size must be positive"):
        _build(lambda: layers.adaptive_pool3d(layers.data("x", [2, 4, 4, 4]), [2, 0, 2]))
    with pytest.raises(TypeError, match="pool_size must be an int or a list/tuple"):
        _build(lambda: layers.adaptive_pool3d(layers.data("x", [2, 4, 4, 4]), 2.0))


# -- gradients -----------------------------------------------------------------------------------

def test_program_gradients_through_conv3d_pool3d_conv3d_transpose():
    x = RNG.standard_normal((1, 2, 4, 5, 4))
    weights = RNG.standard_normal((1, 2, 4, 5, 4))

    def build():
        img = layers.data("x", [2, 4, 5, 4], dtype="float64")
        wt = layers.data("wt", [2, 4, 5, 4], dtype="float64")
        h = layers.conv3d(img, 3, [2, 3, 2], padding=[1, 1, 0], param_attr="c3w",
                          bias_attr="c3b", act="tanh")   # [1, 3, 5, 5, 3]
        h = layers.pool3d(h, [2, 2, 2], pool_type="avg", pool_stride=[2, 2, 1],
                          ceil_mode=True)  # [1, 3, 3, 3, 2]
        m = layers.pool3d(h, 2, pool_stride=1, pool_padding=[1, 0, 0])  # max: [1, 3, 4, 2, 1]
        h = layers.elementwise_add(h, layers.reduce_mean(m))
        h = layers.conv3d_transpose(h, 2, filter_size=[2, 2, 3], stride=[1, 2, 2],
                                    padding=[0, 0, 0, 1, 0, 1], param_attr="ctw",
                                    bias_attr="ctb")
        assert h.shape == (-1, 2, 4, 5, 4)
        return layers.reduce_sum(layers.elementwise_mul(h, wt))

    got = program_grads_and_numeric(build, {"x": x, "wt": weights}, ["c3w", "c3b", "ctw", "ctb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name
