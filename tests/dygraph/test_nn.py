"""``fluid.dygraph.nn``'s layer classes as Fluid 1.8 has them.

Each layer's forward output, its parameters' (and input's) gradients of
``reduce_sum(out * w_fixed)``, and its updated state equal those of the static
``fluid.layers`` function run by the executor with the same parameter values, in float32 and
float64, and the dygraph forward traces the ops the static layer appends; Linear, Conv2D,
LayerNorm, BatchNorm, GroupNorm and InstanceNorm also match numpy written here, and Linear,
Conv2D, LayerNorm and BatchNorm's gradients match central differences in float64. Then:
parameter names, shapes and initial values as 1.8 makes them, ``train()`` / ``eval()`` for
Dropout and BatchNorm, and the errors bad arguments give.
"""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.dygraph import guard, no_grad, to_variable
from dask_fluid.dygraph.nn import (
    BatchNorm,
    Conv2D,
    Conv2DTranspose,
    Dropout,
    Embedding,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    Linear,
    Pool2D,
    PRelu,
)
from dask_fluid.dygraph.tracer import Tracer

CPU = fluid.CPUPlace()


def _pa(key: str) -> fluid.ParamAttr:
    """The static layer's parameter for the dygraph layer's ``state_dict`` key ``key``."""
    return fluid.ParamAttr(name="s_" + key.lstrip("_"))


def _tol(dtype: str) -> dict:
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == "float32" else {"rtol": 1e-10,
                                                                     "atol": 1e-11}


@pytest.fixture
def traced(monkeypatch):
    """The ops the dygraph tracer runs, in order."""
    ops = []
    run = Tracer.trace_op

    def spy(self, type, inputs=None, outputs=None, attrs=None):
        op = run(self, type, inputs, outputs, attrs)
        ops.append(op)
        return op

    monkeypatch.setattr(Tracer, "trace_op", spy)
    return ops


# -- the cases: a dygraph layer and the static layer it stands for --------------------------------
def _ids(shape):
    return np.random.default_rng(3).integers(0, 10, shape).astype(np.int64)


CASES = {
    "linear": dict(
        x=(3, 2, 5), dy=lambda d: Linear(5, 4, act="tanh", dtype=d),
        st=lambda x: layers.fc(x, 4, num_flatten_dims=2, param_attr=_pa("weight"),
                               bias_attr=_pa("bias"), act="tanh"),
        ops=["matmul", "elementwise_add", "tanh"]),  # fc multiplies with mul: same values
    "linear_no_bias": dict(
        x=(4, 5), dy=lambda d: Linear(5, 3, bias_attr=False, dtype=d),
        st=lambda x: layers.fc(x, 3, param_attr=_pa("weight"), bias_attr=False),
        ops=["matmul"]),
    "conv2d": dict(
        x=(2, 3, 7, 7), dy=lambda d: Conv2D(3, 4, 3, stride=2, padding=1, act="relu", dtype=d),
        st=lambda x: layers.conv2d(x, 4, 3, stride=2, padding=1, act="relu",
                                   param_attr=_pa("weight"), bias_attr=_pa("bias"))),
    "conv2d_groups_dilation": dict(
        x=(2, 4, 7, 6), dy=lambda d: Conv2D(4, 6, [3, 2], padding=[1, 0], dilation=2, groups=2,
                                            bias_attr=False, dtype=d),
        st=lambda x: layers.conv2d(x, 6, [3, 2], padding=[1, 0], dilation=2, groups=2,
                                   param_attr=_pa("weight"), bias_attr=False)),
    "conv2d_depthwise": dict(
        x=(2, 3, 5, 5), dy=lambda d: Conv2D(3, 6, 3, groups=3, use_cudnn=False, dtype=d),
        st=lambda x: layers.conv2d(x, 6, 3, groups=3, use_cudnn=False,
                                   param_attr=_pa("weight"), bias_attr=_pa("bias"))),
    "conv2d_transpose": dict(
        x=(2, 3, 4, 5), dy=lambda d: Conv2DTranspose(3, 4, 3, stride=2, padding=1,
                                                     act="sigmoid", dtype=d),
        st=lambda x: layers.conv2d_transpose(x, 4, filter_size=3, stride=2, padding=1,
                                             act="sigmoid", param_attr=_pa("weight"),
                                             bias_attr=_pa("bias"))),
    "conv2d_transpose_output_size": dict(
        x=(2, 4, 4, 4), dy=lambda d: Conv2DTranspose(4, 2, 3, output_size=[10, 10], stride=2,
                                                     groups=2, dtype=d),
        st=lambda x: layers.conv2d_transpose(x, 2, output_size=[10, 10], filter_size=3,
                                             stride=2, groups=2, param_attr=_pa("weight"),
                                             bias_attr=_pa("bias"))),
    "conv2d_transpose_depthwise": dict(  # depthwise_conv2d_transpose, as the static layer
        x=(2, 3, 4, 5), dy=lambda d: Conv2DTranspose(3, 3, 3, stride=2, groups=3,
                                                     use_cudnn=False, dtype=d),
        st=lambda x: layers.conv2d_transpose(x, 3, filter_size=3, stride=2, groups=3,
                                             use_cudnn=False, param_attr=_pa("weight"),
                                             bias_attr=_pa("bias"))),
    "pool2d_max": dict(
        x=(2, 3, 6, 5), dy=lambda d: Pool2D(3, "max", 2, 1),
        st=lambda x: layers.pool2d(x, 3, "max", 2, 1)),
    "pool2d_avg_ceil": dict(
        x=(2, 3, 5, 5), dy=lambda d: Pool2D(2, "avg", 2, ceil_mode=True, exclusive=False),
        st=lambda x: layers.pool2d(x, 2, "avg", 2, ceil_mode=True, exclusive=False)),
    "pool2d_global": dict(
        x=(2, 3, 4, 3), dy=lambda d: Pool2D(pool_type="avg", global_pooling=True),
        st=lambda x: layers.pool2d(x, pool_type="avg", global_pooling=True)),
    "batch_norm": dict(
        x=(4, 3, 3, 2), dy=lambda d: BatchNorm(3, act="relu", momentum=0.8, dtype=d),
        st=lambda x: layers.batch_norm(x, act="relu", momentum=0.8, param_attr=_pa("weight"),
                                       bias_attr=_pa("bias"), moving_mean_name="s_mean",
                                       moving_variance_name="s_variance")),
    "batch_norm_nhwc": dict(
        x=(2, 3, 2, 4), dy=lambda d: BatchNorm(4, epsilon=1e-3, data_layout="NHWC", dtype=d),
        st=lambda x: layers.batch_norm(x, epsilon=1e-3, data_layout="NHWC",
                                       param_attr=_pa("weight"), bias_attr=_pa("bias"),
                                       moving_mean_name="s_mean",
                                       moving_variance_name="s_variance")),
    "embedding": dict(
        ids=(3, 2), dy=lambda d: Embedding([10, 4], padding_idx=-7, dtype=d),
        st=lambda x, d: fluid.embedding(x, [10, 4], padding_idx=3, param_attr=_pa("weight"),
                                        dtype=d)),
    "layer_norm": dict(
        x=(2, 5, 3, 4), dy=lambda d: LayerNorm([3, 4], act="relu", dtype=d),
        st=lambda x: layers.layer_norm(x, begin_norm_axis=2, act="relu",
                                       param_attr=_pa("weight"), bias_attr=_pa("bias"))),
    "layer_norm_no_scale": dict(
        x=(3, 4), dy=lambda d: LayerNorm(4, scale=False, epsilon=1e-3, dtype=d),
        st=lambda x: layers.layer_norm(x, scale=False, epsilon=1e-3, bias_attr=_pa("bias"))),
    "dropout": dict(
        x=(4, 6), dy=lambda d: Dropout(0.4, seed=11),
        st=lambda x: layers.dropout(x, 0.4, seed=11)),
    "dropout_upscale": dict(
        x=(3, 2, 5), dy=lambda d: Dropout(0.25, seed=3,
                                          dropout_implementation="upscale_in_train"),
        st=lambda x: layers.dropout(x, 0.25, seed=3,
                                    dropout_implementation="upscale_in_train")),
    "prelu_all": dict(
        x=(2, 3, 4), dy=lambda d: PRelu("all", param_attr=fluid.initializer.Constant(0.3),
                                        dtype=d),
        st=lambda x: layers.prelu(x, "all", param_attr=_pa("weight"))),
    "prelu_channel": dict(
        x=(2, 3, 2, 2), dy=lambda d: PRelu("channel", channel=3, dtype=d),
        st=lambda x: layers.prelu(x, "channel", param_attr=_pa("weight"))),
    "prelu_element": dict(
        x=(2, 3, 2), dy=lambda d: PRelu("element", input_shape=[2, 3, 2], dtype=d),
        st=lambda x: layers.prelu(x, "element", param_attr=_pa("weight"))),
    "group_norm": dict(
        x=(2, 6, 3, 2), dy=lambda d: GroupNorm(6, 3, act="sigmoid", dtype=d),
        st=lambda x: layers.group_norm(x, 3, act="sigmoid", param_attr=_pa("weight"),
                                       bias_attr=_pa("bias"))),
    "group_norm_bare": dict(
        x=(2, 4, 5), dy=lambda d: GroupNorm(4, 2, param_attr=False, bias_attr=False, dtype=d),
        st=lambda x: layers.group_norm(x, 2, param_attr=False, bias_attr=False)),
    "instance_norm": dict(
        x=(2, 3, 4, 3), dy=lambda d: InstanceNorm(3, dtype=d),
        st=lambda x: layers.instance_norm(x, param_attr=_pa("scale"), bias_attr=_pa("bias"))),
}


def _input(case: dict, dtype: str) -> np.ndarray:
    if "ids" in case:
        ids = _ids(case["ids"])
        ids[0, 0] = 3  # the padding id
        return ids
    return np.random.default_rng(0).standard_normal(case["x"]).astype(dtype)


def _dygraph_run(case: dict, dtype: str, traced: list, place=CPU) -> dict:
    """The dygraph layer's output, gradients and state, and the ops its forward traced."""
    x_np = _input(case, dtype)
    x_grad = "ids" not in case
    with guard(place):
        fluid.default_main_program().random_seed = 5
        layer = case["dy"](dtype)
        # parameters a little away from their constant starts, so gradients are not special
        for key, p in layer.state_dict().items():
            if key not in ("_mean", "_variance"):
                rng = np.random.default_rng(len(key))
                p.set_value(p.numpy() + 0.1 * rng.standard_normal(p.shape).astype(p.dtype))
        before = {k: p.numpy() for k, p in layer.state_dict().items()}
        x = to_variable(x_np)
        x.stop_gradient = not x_grad
        del traced[:]
        out = layer(x)
        ops = list(traced)
        w_np = np.random.default_rng(1).standard_normal(out.shape).astype(dtype)
        loss = layers.reduce_sum(out * to_variable(w_np))
        loss.backward()
        return {
            "x": x_np, "w": w_np, "out": out.numpy(), "ops": ops, "before": before,
            "after": {k: p.numpy() for k, p in layer.state_dict().items()},
            "grads": {k: p.gradient() for k, p in layer.state_dict().items()
                      if p.gradient() is not None},
            "x_grad": x.gradient() if x_grad else None,
            "out_dtype": out.dtype,
        }


def _static_run(case: dict, dtype: str, dy: dict) -> dict:
    """The static layer run by the executor on the dygraph layer's inputs and parameters."""
    x_np, w_np = dy["x"], dy["w"]
    x_grad = dy["x_grad"] is not None
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data("x", list(x_np.shape), str(x_np.dtype))
        x.stop_gradient = not x_grad
        block = main.global_block()
        first = len(block.ops)
        out = case["st"](x, dtype) if "ids" in case else case["st"](x)
        ops = list(block.ops[first:])
        w = fluid.data("w", list(w_np.shape), dtype)
        loss = layers.reduce_sum(out * w)
        grads = {p.name: g for p, g in fluid.backward.append_backward(loss)}
    exe, scope = fluid.Executor(CPU), fluid.Scope()
    exe.run(startup, scope=scope)
    names = {"s_" + k.lstrip("_"): k for k in dy["before"]}
    assert set(names) <= set(scope.vars), "the static layer has the dygraph layer's parameters"
    for name, key in names.items():
        scope.vars[name] = dy["before"][key].copy()
    fetch = [out] + ([block.var("x@GRAD")] if x_grad else []) + [grads[n] for n in sorted(grads)]
    got = exe.run(main, feed={"x": x_np, "w": w_np}, fetch_list=fetch, scope=scope)
    return {
        "out": got[0], "ops": ops, "x_grad": got[1] if x_grad else None,
        "grads": {names[n]: g for n, g in zip(sorted(grads), got[1 + x_grad:], strict=True)},
        "after": {key: np.array(scope.vars[name]) for name, key in names.items()},
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_layer_equals_the_static_layer_with_the_same_parameters(name, dtype, traced):
    case = CASES[name]
    dy = _dygraph_run(case, dtype, traced)
    st = _static_run(case, dtype, dy)
    tol = _tol(dtype)
    assert dy["out_dtype"] == dtype and dy["out"].dtype == np.dtype(dtype)
    np.testing.assert_allclose(dy["out"], st["out"], **tol)
    # the parameters' gradients (and only the trainable ones have any), the input's
    assert set(dy["grads"]) == set(st["grads"])
    for key, g in st["grads"].items():
        np.testing.assert_allclose(dy["grads"][key], g, err_msg=key, **tol)
    if st["x_grad"] is not None:
        np.testing.assert_allclose(dy["x_grad"], st["x_grad"], **tol)
    # the state after the step: BatchNorm's moving statistics moved the same way
    for key, value in st["after"].items():
        np.testing.assert_allclose(dy["after"][key], value, err_msg=key, **tol)
    # the forward ran the ops the static layer appends, with its attributes
    want = case.get("ops", [op.type for op in st["ops"]])
    assert [op.type for op in dy["ops"]] == want
    for dop, sop in zip(dy["ops"], st["ops"], strict=False):
        if dop.type == sop.type:
            shared = set(dop.attrs) & set(sop.attrs) - {"op_role", "op_role_var", "is_test"}
            for attr in shared:
                assert dop.attr(attr) == sop.attr(attr), (dop.type, attr)


@pytest.mark.parametrize("name", list(CASES))
def test_layer_on_the_device_equals_the_cpu(name, device_xp, traced):
    """On CUDAPlace(0) (the real CuPy on a GPU, or the strict stand-in that refuses what CuPy
    refuses) the same values as on the CPU."""
    cpu = _dygraph_run(CASES[name], "float32", traced)
    dev = _dygraph_run(CASES[name], "float32", traced, place=fluid.CUDAPlace(0))
    tol = {"rtol": 1e-4, "atol": 1e-5}
    np.testing.assert_allclose(dev["out"], cpu["out"], **tol)
    assert set(dev["grads"]) == set(cpu["grads"])
    for key, g in cpu["grads"].items():
        np.testing.assert_allclose(dev["grads"][key], g, err_msg=key, **tol)
    for key, value in cpu["after"].items():
        np.testing.assert_allclose(dev["after"][key], value, err_msg=key, **tol)
    if cpu["x_grad"] is not None:
        np.testing.assert_allclose(dev["x_grad"], cpu["x_grad"], **tol)


def test_depthwise_conv_is_chosen_as_fluid_1_8_does(traced):
    with guard(CPU):
        x = to_variable(np.ones((1, 4, 3, 3), np.float32))
        for layer, op in ((Conv2D(4, 8, 1, groups=4, use_cudnn=False), "depthwise_conv2d"),
                          (Conv2D(4, 8, 1, groups=4), "conv2d"),  # cuDNN: plain conv2d
                          (Conv2D(4, 6, 1, groups=2, use_cudnn=False), "conv2d")):
            del traced[:]
            layer(x)
            assert traced[0].type == op and traced[0].attr("groups") == layer._groups
            assert traced[1].type == "elementwise_add" and traced[1].attr("axis") == 1


# -- against numpy --------------------------------------------------------------------------------
def _np_conv2d(x, w, b, stride, pad, dil, groups):
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, m, oh, ow), x.dtype)
    mg = m // groups
    for g in range(groups):
        for i in range(oh):
            for j in range(ow):
                r, c = i * stride[0], j * stride[1]
                patch = xp[:, g * cg:(g + 1) * cg, r:r + dil[0] * (kh - 1) + 1:dil[0],
                           c:c + dil[1] * (kw - 1) + 1:dil[1]]
                out[:, g * mg:(g + 1) * mg, i, j] = np.einsum(
                    "nckl,mckl->nm", patch, w[g * mg:(g + 1) * mg])
    return out if b is None else out + b.reshape(1, -1, 1, 1)


def _normalise(x, axes, eps):
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


def test_linear_and_conv2d_match_numpy():
    rng = np.random.default_rng(7)
    with guard(CPU):
        lin = Linear(5, 3, act="relu")
        x = rng.standard_normal((2, 4, 5)).astype(np.float32)
        want = np.maximum(x @ lin.weight.numpy() + lin.bias.numpy(), 0)
        np.testing.assert_allclose(lin(to_variable(x)).numpy(), want, rtol=1e-5, atol=1e-6)
        for kwargs, shape in ((dict(stride=2, padding=1), (2, 3, 6, 7)),
                              (dict(padding=[2, 1], dilation=[2, 1], groups=3), (1, 3, 5, 5))):
            conv = Conv2D(3, 6, [3, 2], **kwargs)
            conv.bias.set_value(rng.standard_normal(6).astype(np.float32))
            x = rng.standard_normal(shape).astype(np.float32)
            want = _np_conv2d(x, conv.weight.numpy(), conv.bias.numpy(), conv._stride,
                              conv._padding, conv._dilation, kwargs.get("groups", 1))
            np.testing.assert_allclose(conv(to_variable(x)).numpy(), want, rtol=1e-4,
                                       atol=1e-5)


def test_norm_layers_match_numpy():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 6, 3, 2)).astype(np.float64) * 3 + 1
    with guard(CPU):
        ln = LayerNorm([3, 2], epsilon=1e-4, dtype="float64")
        ln.weight.set_value(rng.standard_normal(6))
        ln.bias.set_value(rng.standard_normal(6))
        want = (_normalise(x, (2, 3), 1e-4) * ln.weight.numpy().reshape(3, 2)
                + ln.bias.numpy().reshape(3, 2))
        np.testing.assert_allclose(ln(to_variable(x)).numpy(), want, rtol=1e-10)

        bn = BatchNorm(6, momentum=0.7, dtype="float64")
        bn.weight.set_value(rng.standard_normal(6))
        bn.bias.set_value(rng.standard_normal(6))
        scale, shift = bn.weight.numpy().reshape(1, 6, 1, 1), bn.bias.numpy().reshape(1, 6, 1, 1)
        got = bn(to_variable(x)).numpy()
        np.testing.assert_allclose(got, _normalise(x, (0, 2, 3), 1e-5) * scale + shift,
                                   rtol=1e-10)
        # the moving statistics: momentum * old + (1 - momentum) * the batch's (biased var)
        np.testing.assert_allclose(bn._mean.numpy(), 0.3 * x.mean(axis=(0, 2, 3)), rtol=1e-10)
        np.testing.assert_allclose(bn._variance.numpy(), 0.7 + 0.3 * x.var(axis=(0, 2, 3)),
                                   rtol=1e-10)

        gn = GroupNorm(6, 2, dtype="float64")
        groups = x.reshape(4, 2, -1)
        want = _normalise(groups, (2,), 1e-5).reshape(x.shape)
        np.testing.assert_allclose(gn(to_variable(x)).numpy(), want, rtol=1e-10)

        inorm = InstanceNorm(6, epsilon=1e-3, dtype="float64")
        np.testing.assert_allclose(inorm(to_variable(x)).numpy(),
                                   _normalise(x, (2, 3), 1e-3), rtol=1e-10)


# -- gradients against central differences (float64) -----------------------------------------
def _numeric(f, array, eps=1e-6):
    g = np.zeros_like(array)
    for j in range(array.size):
        for sign in (1, -1):
            bumped = array.copy()
            bumped.flat[j] += sign * eps
            g.flat[j] += sign * f(bumped) / (2 * eps)
    return g


@pytest.mark.parametrize("make, shape", [
    (lambda: Linear(3, 2, act="sigmoid", dtype="float64"), (2, 3)),
    (lambda: Conv2D(2, 3, 2, padding=1, stride=[1, 2], dtype="float64"), (1, 2, 3, 4)),
    (lambda: LayerNorm(4, dtype="float64"), (3, 4)),
    (lambda: BatchNorm(2, dtype="float64"), (3, 2, 2)),
], ids=["linear", "conv2d", "layer_norm", "batch_norm"])
def test_gradients_match_central_differences(make, shape):
    rng = np.random.default_rng(11)
    with guard(CPU):
        fluid.default_main_program().random_seed = 3
        layer = make()
        for p in layer.parameters():
            if p.trainable:
                p.set_value(p.numpy() + 0.2 * rng.standard_normal(p.shape))
        x_np = rng.standard_normal(shape)
        x = to_variable(x_np)
        x.stop_gradient = False
        out = layer(x)
        w = rng.standard_normal(out.shape)
        layers.reduce_sum(out * to_variable(w)).backward()

        def loss(param, value):
            saved = param.numpy()
            param.set_value(value)
            with no_grad():
                got = float((layer(to_variable(x_np)).numpy() * w).sum())
            param.set_value(saved)
            return got

        for p in layer.parameters():
            if p.trainable:
                numeric = _numeric(lambda v, p=p: loss(p, v), p.numpy())
                np.testing.assert_allclose(p.gradient(), numeric, rtol=1e-6, atol=1e-8,
                                           err_msg=p.name)

        def loss_x(value):
            with no_grad():
                return float((layer(to_variable(value)).numpy() * w).sum())

        np.testing.assert_allclose(x.gradient(), _numeric(loss_x, x_np), rtol=1e-6, atol=1e-8)


# -- parameters as Fluid 1.8 makes them ---------------------------------------------------------
def _params(layer):
    return {k: (p.name, list(p.shape), p.dtype, p.trainable)
            for k, p in layer.state_dict().items()}


def test_parameter_names_shapes_and_attributes():
    with guard(CPU):
        assert _params(Linear(4, 3)) == {"weight": ("linear_0.w_0", [4, 3], "float32", True),
                                         "bias": ("linear_0.b_0", [3], "float32", True)}
        assert _params(Linear(4, 3, bias_attr=False, dtype="float64")) == {
            "weight": ("linear_1.w_0", [4, 3], "float64", True)}
        assert _params(Conv2D(6, 4, [3, 2], groups=2)) == {
            "weight": ("conv2d_0.w_0", [4, 3, 3, 2], "float32", True),
            "bias": ("conv2d_0.b_0", [4], "float32", True)}
        assert _params(Conv2DTranspose(6, 4, 3, groups=2)) == {
            "weight": ("conv2d_transpose_0.w_0", [6, 2, 3, 3], "float32", True),
            "bias": ("conv2d_transpose_0.b_0", [4], "float32", True)}
        bn = BatchNorm(5, dtype="float64")
        assert _params(bn) == {"weight": ("batch_norm_0.w_0", [5], "float64", True),
                               "bias": ("batch_norm_0.b_0", [5], "float64", True),
                               "_mean": ("batch_norm_0.w_1", [5], "float64", False),
                               "_variance": ("batch_norm_0.w_2", [5], "float64", False)}
        assert bn._mean.stop_gradient and bn._variance.stop_gradient
        named = BatchNorm(2, moving_mean_name="mm", moving_variance_name="mv")
        assert named._mean.name == "mm" and named._variance.name == "mv"
        assert _params(Embedding([7, 3])) == {
            "weight": ("embedding_0.w_0", [7, 3], "float32", True)}
        assert _params(LayerNorm([3, 4])) == {
            "weight": ("layer_norm_0.w_0", [12], "float32", True),
            "bias": ("layer_norm_0.b_0", [12], "float32", True)}
        assert _params(LayerNorm(3, scale=False)) == {
            "bias": ("layer_norm_1.b_0", [3], "float32", True)}
        assert _params(PRelu("all")) == {"weight": ("prelu_0.w_0", [1], "float32", True)}
        assert _params(PRelu("channel", channel=3))["weight"][1] == [1, 3, 1, 1]
        assert _params(PRelu("element", input_shape=[5, 2, 3]))["weight"][1] == [1, 2, 3]
        assert _params(GroupNorm(4, 2)) == {
            "weight": ("group_norm_0.w_0", [4], "float32", True),
            "bias": ("group_norm_0.b_0", [4], "float32", True)}
        assert _params(GroupNorm(4, 2, param_attr=False)) == {
            "bias": ("group_norm_1.b_0", [4], "float32", True)}
        assert _params(InstanceNorm(3)) == {
            "scale": ("instance_norm_0.w_0", [3], "float32", True),
            "bias": ("instance_norm_0.b_0", [3], "float32", True)}
        assert _params(InstanceNorm(3, param_attr=False, bias_attr=False)) == {}
        assert Pool2D(2).parameters() == [] and Dropout().parameters() == []
        # a ParamAttr's name and trainable flag are kept
        frozen = Linear(2, 2, param_attr=fluid.ParamAttr(name="fc.w", trainable=False))
        assert frozen.weight.name == "fc.w" and not frozen.weight.trainable


def test_default_initial_values():
    with guard(CPU):
        fluid.default_main_program().random_seed = 12
        bn = BatchNorm(3)
        for p, v in ((bn.weight, 1.0), (bn.bias, 0.0), (bn._mean, 0.0), (bn._variance, 1.0)):
            np.testing.assert_array_equal(p.numpy(), np.full(3, v, np.float32))
        for layer in (LayerNorm(4), GroupNorm(4, 2)):
            np.testing.assert_array_equal(layer.weight.numpy(), np.ones(4, np.float32))
            np.testing.assert_array_equal(layer.bias.numpy(), np.zeros(4, np.float32))
        inorm = InstanceNorm(4)
        np.testing.assert_array_equal(inorm.scale.numpy(), np.ones(4, np.float32))
        np.testing.assert_array_equal(inorm.bias.numpy(), np.zeros(4, np.float32))
        np.testing.assert_array_equal(PRelu("channel", channel=2).weight.numpy(),
                                      np.ones((1, 2, 1, 1), np.float32))
        # Conv2D: Normal(0, sqrt(2 / (KH * KW * num_channels))); the bias zeros
        conv = Conv2D(16, 64, 3)
        std = (2.0 / (9 * 16)) ** 0.5
        assert conv.weight.numpy().std() == pytest.approx(std, rel=0.05)
        assert abs(conv.weight.numpy().mean()) < 0.05 * std
        np.testing.assert_array_equal(conv.bias.numpy(), np.zeros(64, np.float32))
        # Linear and Embedding: Xavier uniform in ±sqrt(6 / (fan_in + fan_out))
        for w, limit in ((Linear(40, 60).weight, (6 / 100) ** 0.5),
                         (Embedding([50, 30]).weight, (6 / 80) ** 0.5)):
            values = w.numpy()
            assert np.abs(values).max() <= limit and np.abs(values).max() > 0.9 * limit
        # the guard's seed makes them reproducible
        first = Linear(3, 3).weight.numpy()
    with guard(CPU):
        fluid.default_main_program().random_seed = 12
        BatchNorm(3), LayerNorm(4), GroupNorm(4, 2), InstanceNorm(4), PRelu("all")
        Conv2D(16, 64, 3), Linear(40, 60), Embedding([50, 30])
        np.testing.assert_array_equal(Linear(3, 3).weight.numpy(), first)


def test_embedding_sparse_gradient_and_padding_row():
    ids = np.array([[1, 4], [4, 0]], np.int64)
    with guard(CPU):
        dense = Embedding([6, 3], padding_idx=0)
        sparse = Embedding([6, 3], is_sparse=True, padding_idx=0)
        sparse.weight.set_value(dense.weight.numpy())
        outs = [layer(to_variable(ids)) for layer in (dense, sparse)]
        np.testing.assert_array_equal(outs[0].numpy(), outs[1].numpy())
        np.testing.assert_array_equal(outs[0].numpy()[1, 1], np.zeros(3, np.float32))
        np.testing.assert_array_equal(outs[0].numpy()[0, 0], dense.weight.numpy()[1])
        for out in outs:
            layers.reduce_sum(out).backward()
        values, rows = sparse.weight.gradient()
        got = np.zeros((6, 3), np.float32)
        np.add.at(got, rows, values)
        np.testing.assert_allclose(got, dense.weight.gradient())
        np.testing.assert_array_equal(dense.weight.gradient()[[0, 1, 4]],
                                      [[0, 0, 0], [1, 1, 1], [2, 2, 2]])


# -- train() and eval() -----------------------------------------------------------------------
def test_batch_norm_train_updates_running_stats_eval_uses_them():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((8, 2, 3)).astype(np.float64) * 2 + 5
    with guard(CPU):
        bn = BatchNorm(2, momentum=0.5, dtype="float64")
        bn(to_variable(x))
        mean, var = bn._mean.numpy(), bn._variance.numpy()
        np.testing.assert_allclose(mean, 0.5 * x.mean(axis=(0, 2)), rtol=1e-12)
        np.testing.assert_allclose(var, 0.5 + 0.5 * x.var(axis=(0, 2)), rtol=1e-12)
        bn.eval()
        assert not bn.training
        y = bn(to_variable(x)).numpy()
        want = (x - mean.reshape(1, 2, 1)) / np.sqrt(var.reshape(1, 2, 1) + 1e-5)
        np.testing.assert_allclose(y, want, rtol=1e-12)
        np.testing.assert_array_equal(bn._mean.numpy(), mean)  # eval: left as they are
        np.testing.assert_array_equal(bn._variance.numpy(), var)
        bn.train()
        bn(to_variable(x))
        np.testing.assert_allclose(bn._mean.numpy(), 0.75 * x.mean(axis=(0, 2)), rtol=1e-12)

        # use_global_stats: the running statistics normalise in training too, unchanged
        frozen = BatchNorm(2, use_global_stats=True, dtype="float64")
        frozen._mean.set_value(np.array([1.0, -1.0]))
        np.testing.assert_allclose(frozen(to_variable(x)).numpy(),
                                   (x - [[[1.0], [-1.0]]]) / np.sqrt(1 + 1e-5), rtol=1e-12)
        np.testing.assert_array_equal(frozen._mean.numpy(), [1.0, -1.0])
        # trainable_statistics: the batch's statistics in eval mode too
        stats = BatchNorm(2, trainable_statistics=True, dtype="float64")
        stats.eval()
        np.testing.assert_allclose(stats(to_variable(x)).numpy(),
                                   _normalise(x, (0, 2), 1e-5), rtol=1e-10)


def test_dropout_train_and_eval():
    x = np.ones((20, 50), np.float32)
    with guard(CPU):
        down, up = Dropout(0.3), Dropout(0.3, dropout_implementation="upscale_in_train")
        a, b = down(to_variable(x)).numpy(), up(to_variable(x)).numpy()
        assert set(np.unique(a)) == {0.0, 1.0} and 0.2 < (a == 0).mean() < 0.4
        np.testing.assert_allclose(np.unique(b), [0.0, 1 / 0.7], rtol=1e-6)
        assert not np.array_equal(a, down(to_variable(x)).numpy())  # a new mask each call
        for layer in (down, up):
            layer.eval()
        np.testing.assert_allclose(down(to_variable(x)).numpy(), 0.7 * x, rtol=1e-6)
        np.testing.assert_array_equal(up(to_variable(x)).numpy(), x)
        down.train()
        assert (down(to_variable(x)).numpy() == 0).any()
        np.testing.assert_array_equal(Dropout(0.0)(to_variable(x)).numpy(), x)
        # the gradient goes through the kept elements only
        v = to_variable(x)
        v.stop_gradient = False
        out = Dropout(0.5, seed=4)(v)
        layers.reduce_sum(out).backward()
        np.testing.assert_array_equal(v.gradient(), out.numpy())


def test_dropout_seed_fixes_the_mask_as_fluid_1_8():
    x = np.ones((10, 10), np.float32)
    with guard(CPU):
        fluid.default_main_program().random_seed = 33  # taken as the seed when none is given
        layer = Dropout(0.5)
        first = layer(to_variable(x)).numpy()
        np.testing.assert_array_equal(layer(to_variable(x)).numpy(), first)
        np.testing.assert_array_equal(Dropout(0.5, seed=33)(to_variable(x)).numpy(), first)


def test_train_and_eval_reach_sublayers():
    class Net(fluid.dygraph.Layer):
        def __init__(self):
            super().__init__()
            self.bn = BatchNorm(3)
            self.drop = Dropout(0.5)

        def forward(self, x):
            return self.drop(self.bn(x))

    with guard(CPU):
        net = Net()
        net.eval()
        assert not net.bn.training and not net.drop.training
        x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
        out = net(to_variable(x)).numpy()
        np.testing.assert_allclose(out, 0.5 * x / np.sqrt(1 + 1e-5), rtol=1e-6)
        net.train()
        assert net.bn.training and net.drop.training


# -- errors --------------------------------------------------------------------------------------
def test_bad_arguments_raise_clear_errors():
    x4 = np.zeros((2, 3, 5, 5), np.float32)
    with guard(CPU):
        with pytest.raises(ValueError, match="has 3 channels, the layer was built for "
                                             "num_channels=4"):
            Conv2D(4, 2, 3)(to_variable(x4))
        with pytest.raises(ValueError, match="must have rank 4"):
            Conv2D(3, 2, 3)(to_variable(np.zeros((3, 5, 5), np.float32)))
        with pytest.raises(ValueError, match="leaves no output"):
            Conv2D(3, 2, 7)(to_variable(x4))
        with pytest.raises(ValueError, match="num_channels must be divisible by groups"):
            Conv2D(3, 6, 3, groups=2)
        with pytest.raises(ValueError, match="num_filters must be divisible by groups"):
            Conv2D(4, 3, 3, groups=2)
        with pytest.raises(ValueError, match="use_cudnn should be True or False"):
            Conv2D(3, 2, 3, use_cudnn=1)
        with pytest.raises(ValueError, match="param_attr should not be False"):
            Conv2D(3, 2, 3, param_attr=False)
        with pytest.raises(ValueError, match="filter_size must be an int or a list/tuple of 2"):
            Conv2D(3, 2, [3, 3, 3])
        with pytest.raises(ValueError, match="must both be divisible by groups=2"):
            Conv2DTranspose(3, 4, 3, groups=2)
        with pytest.raises(ValueError, match="output_size should be list or int"):
            Conv2DTranspose(3, 4, 3, output_size="big")
        with pytest.raises(ValueError, match="has 3 channels, the layer was built for "
                                             "num_channels=2"):
            Conv2DTranspose(2, 4, 3)(to_variable(x4))
        with pytest.raises(ValueError, match=r"output_size \[12, 12\] must be within "
                                             r"\[9, 11\) x \[9, 11\)"):
            Conv2DTranspose(3, 4, 3, output_size=[12, 12], stride=2, padding=1)(
                to_variable(x4))
        with pytest.raises(ValueError, match=r"output_size \[10, 11\] must be within"):
            Conv2DTranspose(3, 4, 3, output_size=[10, 11], stride=2, padding=1)(
                to_variable(x4))
        with pytest.raises(ValueError, match="Unknown pool_type: 'min'"):
            Pool2D(2, pool_type="min")
        with pytest.raises(ValueError, match="pool_size must be passed"):
            Pool2D()
        with pytest.raises(ValueError, match="leaves no output"):
            Pool2D(7)(to_variable(x4))
        # Fluid's order: the dtype check (int8, uint8 or a float) before the rank check
        with pytest.raises(TypeError, match="must be of dtype int8 or uint8 or float16"):
            Pool2D(2)(to_variable(np.zeros((2, 3), np.int32)))
        with pytest.raises(ValueError, match="last dim must be input_dim=4"):
            Linear(4, 2)(to_variable(np.zeros((2, 5), np.float32)))
        with pytest.raises(TypeError, match="is float64, the layer's parameters are float32"):
            Linear(4, 2)(to_variable(np.zeros((2, 4))))
        with pytest.raises(TypeError, match="must be a dygraph variable"):
            Linear(4, 2)(np.zeros((2, 4), np.float32))
        with pytest.raises(ValueError, match="unknown activation act='relu7'"):
            Linear(4, 2, act="relu7")
        with pytest.raises(TypeError, match="dtype must be 'float32' or 'float64'"):
            Linear(4, 2, dtype="int32")
        with pytest.raises(TypeError, match="dtype must be 'float32' or 'float64'"):
            Conv2D(3, 2, 3, dtype="float16")
        assert BatchNorm(2, dtype="float16").weight.dtype == "float32"  # as Fluid 1.8
        with pytest.raises(ValueError, match="has 3 channels, the layer was built for "
                                             "num_channels=2"):
            BatchNorm(2)(to_variable(x4))
        with pytest.raises(ValueError, match="bias_attr should not be False"):
            BatchNorm(2, bias_attr=False)
        with pytest.raises(ValueError, match="data_layout must be 'NCHW' or 'NHWC'"):
            BatchNorm(2, data_layout="NCWH")
        with pytest.raises(ValueError, match=r"Given normalized_shape is \[4\]"):
            LayerNorm(4)(to_variable(x4))
        with pytest.raises(ValueError, match="mode should be one of all, channel, element"):
            PRelu("row")
        with pytest.raises(ValueError, match="channel argument is required"):
            PRelu("channel")
        with pytest.raises(ValueError, match="must have 2 channels at dim 1"):
            PRelu("channel", channel=2)(to_variable(x4))
        with pytest.raises(ValueError, match="groups=4 must be a positive int dividing the 6"):
            GroupNorm(6, 4)
        with pytest.raises(ValueError, match="unsupported data layout:NHWC"):
            GroupNorm(6, 3, data_layout="NHWC")
        with pytest.raises(ValueError, match="must have 6 channels at dim 1"):
            GroupNorm(6, 3)(to_variable(x4))
        with pytest.raises(ValueError, match="epsilon must be between 0.0 and 0.001"):
            InstanceNorm(3, epsilon=0.1)
        with pytest.raises(ValueError, match="must be set to False at the same time"):
            InstanceNorm(3, param_attr=False)
        with pytest.raises(ValueError, match="p argument should between 0 and 1"):
            Dropout(1.5)
        with pytest.raises(ValueError, match="dropout_implementation argument should be"):
            Dropout(0.5, dropout_implementation="scale")
        with pytest.raises(ValueError, match=r"size must be \[vocab_size, emb_size\]"):
            Embedding([10])
        with pytest.raises(ValueError, match=r"padding_idx must be in \[-10, 10\)"):
            Embedding([10, 2], padding_idx=10)
        with pytest.raises(TypeError, match="must be int64"):
            Embedding([10, 2])(to_variable(np.zeros((2, 1), np.float32)))
        layer = Linear(2, 2)
    with pytest.raises(TypeError, match="a Variable of the program"):
        layer(np.zeros((1, 2), np.float32))  # outside the guard a layer takes Variables


def test_conv2d_transpose_emits_the_depthwise_op_as_fluid():
    with fluid.dygraph.guard():
        assert Conv2DTranspose(3, 3, 3, groups=3, use_cudnn=False)._op_type == \
            "depthwise_conv2d_transpose"  # Fluid 1.8's choice
        assert Conv2DTranspose(3, 3, 3, groups=3)._op_type == "conv2d_transpose"
        assert Conv2DTranspose(3, 6, 3, groups=3, use_cudnn=False)._op_type == \
            "conv2d_transpose"
