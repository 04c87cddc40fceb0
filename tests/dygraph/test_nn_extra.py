"""``dask_fluid.dygraph.nn_extra``: GRUUnit, BilinearTensorProduct, Conv3D, Conv3DTranspose,
SpectralNorm, NCE and TreeConv against the static ``fluid.layers`` programs run with the same
parameter values (outputs and parameter gradients of ``reduce_sum(out * fixed)``), central
differences in float64 for GRUUnit and BilinearTensorProduct, Fluid 1.8's parameter names and
shapes, and the errors bad arguments raise.

NCE draws its negatives with the op's ``seed`` attribute: both sides use the same non-zero
seed (and sampler settings), so they draw the same classes and the whole op is compared.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph, layers
from dask_fluid.dygraph.nn_extra import (
    NCE,
    BilinearTensorProduct,
    Conv3D,
    Conv3DTranspose,
    GRUUnit,
    SpectralNorm,
    TreeConv,
)


@pytest.fixture(autouse=True)
def fresh_names():
    with fluid.unique_name.guard():
        yield


def _rand(rng, shape, dtype="float32"):
    return rng.standard_normal(shape).astype(dtype)


def _dygraph_run(make, inputs, seed=0, grad_inputs=(), values=None):
    """Build the layer, give every parameter random values (or ``values``), run it on
    ``inputs`` and backward ``reduce_sum(out * fixed)``.

    Returns ``(outs, fixed, params, input_grads)``: the outputs (a list), the fixed weights,
    ``{structured name: (parameter name, value, gradient)}`` and the gradients of the inputs
    whose positions are in ``grad_inputs``."""
    rng = np.random.default_rng(seed)
    with dygraph.guard():
        layer = make()
        for name, p in layer.named_parameters():
            v = values[name] if values and name in values else \
                _rand(rng, p.shape, str(p.dtype))
            p.set_value(v)
        args = []
        for i, a in enumerate(inputs):
            var = dygraph.to_variable(a)
            if i in grad_inputs:
                var.stop_gradient = False
            args.append(var)
        out = layer(*args)
        outs = list(out) if isinstance(out, tuple) else [out]
        fixed = _rand(rng, outs[0].shape, str(outs[0].dtype))
        loss = layers.reduce_sum(outs[0] * dygraph.to_variable(fixed))
        loss.backward()
        params = {n: (p.name, p.numpy(), p.gradient()) for n, p in layer.named_parameters()}
        grads = [args[i].gradient() for i in grad_inputs]
        return [o.numpy() for o in outs], fixed, params, grads


def _static_run(build, feed, fixed, values):
    """``build()`` -> outputs (first one weighted) in a fresh program; ``values`` sets named
    variables in the scope after the startup program. Returns ``(outs, {param: grad})``."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        outs = build()
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        fw = layers.data("fixed_w", list(fixed.shape), dtype=str(fixed.dtype),
                         append_batch_size=False)
        loss = layers.reduce_sum(layers.elementwise_mul(outs[0], fw))
        pairs = fluid.backward.append_backward(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name, v in values.items():
        scope.set(name, v)
    got = exe.run(main, feed={**feed, "fixed_w": fixed},
                  fetch_list=[*outs, *[g for _, g in pairs]], scope=scope)
    n = len(outs)
    return got[:n], {p.name: np.asarray(g) for (p, _), g in zip(pairs, got[n:], strict=True)}


def _data(name, arr):
    return layers.data(name, list(arr.shape), dtype=str(arr.dtype), append_batch_size=False)


def _assert_match(dy_outs, dy_params, st_outs, st_grads, mapping, rtol=1e-5, atol=1e-5):
    """Outputs equal; each dygraph parameter's gradient equals the static one named in
    ``mapping`` (structured name -> static parameter name)."""
    assert len(dy_outs) == len(st_outs)
    for a, b in zip(dy_outs, st_outs, strict=True):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    for attr, static_name in mapping.items():
        grad = dy_params[attr][2]
        assert grad is not None, attr
        np.testing.assert_allclose(grad, st_grads[static_name], rtol=rtol, atol=atol)


def _numeric_check(make, inputs, param, seed=0, eps=1e-6):
    """The gradient ``loss.backward()`` gives ``param`` against central differences of the
    same loss, everything in float64."""
    _, fixed, params, _ = _dygraph_run(make, inputs, seed=seed)
    values = {n: v for n, (_, v, _) in params.items()}
    analytic = params[param][2]
    with dygraph.guard():
        layer = make()
        for name, p in layer.named_parameters():
            p.set_value(values[name])
        args = [dygraph.to_variable(a) for a in inputs]
        target = dict(layer.named_parameters())[param]

        def loss():
            with dygraph.no_grad():
                out = layer(*args)
                out = out[0] if isinstance(out, tuple) else out
                return float((out.numpy() * fixed).sum())

        base = values[param].copy()
        numeric = np.zeros_like(base)
        for j in range(base.size):
            for sign in (1, -1):
                bumped = base.copy()
                bumped.flat[j] += sign * eps
                target.set_value(bumped)
                numeric.flat[j] += sign * loss() / (2 * eps)
        target.set_value(base)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


# -- GRUUnit ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("origin_mode,act,gate,bias", [
    (False, "tanh", "sigmoid", True), (True, "relu", "sigmoid", True),
    (False, "identity", "tanh", False)])
def test_gru_unit_matches_static_gru_unit(origin_mode, act, gate, bias):
    rng = np.random.default_rng(1)
    x, h = _rand(rng, [4, 9]), _rand(rng, [4, 3])
    bias_attr = None if bias else False

    def make():
        return GRUUnit(9, bias_attr=bias_attr, activation=act, gate_activation=gate,
                       origin_mode=origin_mode)

    outs, fixed, params, _ = _dygraph_run(make, [x, h])
    values = {"W": params["weight"][1]}
    mapping = {"weight": "W"}
    if bias:
        values["B"] = params["bias"][1]
        mapping["bias"] = "B"
    st_outs, st_grads = _static_run(
        lambda: layers.gru_unit(_data("x", x), _data("h", h), 9, param_attr="W",
                                bias_attr="B" if bias else False, activation=act,
                                gate_activation=gate, origin_mode=origin_mode),
        {"x": x, "h": h}, fixed, values)
    _assert_match(outs, params, st_outs, st_grads, mapping)


def test_gru_unit_gradients_match_central_differences():
    rng = np.random.default_rng(2)
    x, h = _rand(rng, [3, 6], "float64"), _rand(rng, [3, 2], "float64")
    for param in ("weight", "bias"):
        _numeric_check(lambda: GRUUnit(6, dtype="float64"), [x, h], param)


def test_gru_unit_parameters_as_fluid():
    with dygraph.guard():
        g = GRUUnit(12)
        assert [(n, p.name, list(p.shape)) for n, p in g.named_parameters()] == [
            ("weight", "gru_unit_0.w_0", [4, 12]), ("bias", "gru_unit_0.b_0", [1, 12])]
        np.testing.assert_array_equal(g.bias.numpy(), 0)
        assert g.activation == 2 and g.gate_activation == 1
        assert GRUUnit(3, bias_attr=False).bias is None


# -- BilinearTensorProduct -----------------------------------------------------------------------

@pytest.mark.parametrize("act,bias", [(None, True), ("tanh", False)])
def test_bilinear_tensor_product_matches_static(act, bias):
    rng = np.random.default_rng(3)
    x, y = _rand(rng, [5, 3]), _rand(rng, [5, 4])

    def make():
        return BilinearTensorProduct(3, 4, 6, act=act, bias_attr=None if bias else False)

    outs, fixed, params, _ = _dygraph_run(make, [x, y])
    values, mapping = {"W": params["weight"][1]}, {"weight": "W"}
    if bias:
        values["B"], mapping["bias"] = params["bias"][1], "B"
    st_outs, st_grads = _static_run(
        lambda: layers.bilinear_tensor_product(_data("x", x), _data("y", y), 6, act=act,
                                               param_attr="W",
                                               bias_attr="B" if bias else False),
        {"x": x, "y": y}, fixed, values)
    _assert_match(outs, params, st_outs, st_grads, mapping)


def test_bilinear_tensor_product_central_differences_and_names():
    rng = np.random.default_rng(4)
    x, y = _rand(rng, [3, 2], "float64"), _rand(rng, [3, 3], "float64")
    for param in ("weight", "bias"):
        _numeric_check(lambda: BilinearTensorProduct(2, 3, 2, dtype="float64"), [x, y], param)
    with dygraph.guard():
        b = BilinearTensorProduct(2, 3, 4, name="out")
        assert [(n, p.name, list(p.shape)) for n, p in b.named_parameters()] == [
            ("weight", "bilinear_tensor_product_0.w_0", [4, 2, 3]),
            ("bias", "bilinear_tensor_product_0.b_0", [1, 4])]
        out = b(dygraph.to_variable(x.astype("float32")),
                dygraph.to_variable(y.astype("float32")))
        assert out.name.startswith("bilinear_tensor_product_0.out")
        assert out.shape == [3, 4]


# -- Conv3D, Conv3DTranspose -----------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(filter_size=3, padding=1, act="relu"),
    dict(filter_size=[2, 3, 2], stride=[1, 2, 1], dilation=[1, 1, 2], groups=2,
         bias_attr=False)])
def test_conv3d_matches_static_conv3d(kw):
    rng = np.random.default_rng(5)
    x = _rand(rng, [2, 4, 4, 5, 5])
    bias = kw.get("bias_attr", None) is not False
    outs, fixed, params, _ = _dygraph_run(lambda: Conv3D(4, 6, **kw), [x])
    values, mapping = {"W": params["weight"][1]}, {"weight": "W"}
    if bias:
        values["B"], mapping["bias"] = params["bias"][1], "B"
    static_kw = {k: v for k, v in kw.items() if k != "bias_attr"}
    st_outs, st_grads = _static_run(
        lambda: layers.conv3d(_data("x", x), 6, param_attr="W",
                              bias_attr="B" if bias else False, **static_kw),
        {"x": x}, fixed, values)
    _assert_match(outs, params, st_outs, st_grads, mapping, rtol=1e-4, atol=1e-4)


def test_conv3d_parameters_and_initialiser_as_fluid():
    with dygraph.guard():
        c = Conv3D(8, 16, 3, groups=2)
        assert [(n, p.name, list(p.shape)) for n, p in c.named_parameters()] == [
            ("weight", "conv3d_0.w_0", [16, 4, 3, 3, 3]), ("bias", "conv3d_0.b_0", [16])]
        # Normal(0, sqrt(2 / (27 * num_channels))); 1728 draws: within 10 % of it
        std = math.sqrt(2.0 / (27 * 8))
        assert abs(c.weight.numpy().std() / std - 1) < 0.1
        np.testing.assert_array_equal(c.bias.numpy(), 0)
        assert Conv3D(2, 2, 1, bias_attr=False).bias is None


@pytest.mark.parametrize("kw", [
    dict(filter_size=3, padding=1, stride=2, act="sigmoid"),
    dict(filter_size=[2, 3, 2], dilation=[1, 2, 1], groups=2)])
def test_conv3d_transpose_matches_static(kw):
    rng = np.random.default_rng(6)
    x = _rand(rng, [2, 4, 3, 3, 4])
    # a truthy bias_attr: the bias is added (see the test of the default below)
    outs, fixed, params, _ = _dygraph_run(
        lambda: Conv3DTranspose(4, 6, bias_attr=fluid.ParamAttr(), **kw), [x])
    st_outs, st_grads = _static_run(
        lambda: layers.conv3d_transpose(_data("x", x), 6, param_attr="W", bias_attr="B",
                                        **kw),
        {"x": x}, fixed, {"W": params["weight"][1], "B": params["bias"][1]})
    _assert_match(outs, params, st_outs, st_grads, {"weight": "W", "bias": "B"},
                  rtol=1e-4, atol=1e-4)


def test_conv3d_transpose_default_bias_is_created_but_not_added_as_fluid_1_8():
    rng = np.random.default_rng(7)
    x = _rand(rng, [1, 2, 3, 3, 3])
    outs, fixed, params, _ = _dygraph_run(lambda: Conv3DTranspose(2, 3, 2), [x])
    assert [(n, name, list(v.shape)) for n, (name, v, _) in params.items()] == [
        ("weight", "conv3d_transpose_0.w_0", [2, 3, 2, 2, 2]),
        ("bias", "conv3d_transpose_0.b_0", [3])]
    assert np.abs(params["bias"][1]).max() > 0  # a non-zero bias, yet not added
    assert params["bias"][2] is None
    st_outs, st_grads = _static_run(
        lambda: layers.conv3d_transpose(_data("x", x), 3, filter_size=2, param_attr="W",
                                        bias_attr=False),
        {"x": x}, fixed, {"W": params["weight"][1]})
    _assert_match(outs, params, st_outs, st_grads, {"weight": "W"}, rtol=1e-4, atol=1e-4)
    with dygraph.guard():
        assert Conv3DTranspose(2, 3, 2, bias_attr=False).bias is None


# -- SpectralNorm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape,dim,iters", [([4, 6], 0, 1), ([3, 4, 2, 2], 1, 3)])
def test_spectral_norm_matches_static(shape, dim, iters):
    rng = np.random.default_rng(8)
    w = _rand(rng, shape)
    outs, fixed, params, grads = _dygraph_run(
        lambda: SpectralNorm(shape, dim=dim, power_iters=iters), [w], grad_inputs=(0,))
    assert params["weight_u"][2] is None and params["weight_v"][2] is None

    def build():
        weight = layers.create_parameter(shape, "float32", name="Wt")
        return layers.spectral_norm(weight, dim=dim, power_iters=iters)

    values = {"Wt": w, "spectral_norm_0.w_0": params["weight_u"][1],
              "spectral_norm_0.w_1": params["weight_v"][1]}
    st_outs, st_grads = _static_run(build, {}, fixed, values)
    np.testing.assert_allclose(outs[0], st_outs[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads[0], st_grads["Wt"], rtol=1e-4, atol=1e-5)


def test_spectral_norm_parameters_as_fluid():
    with dygraph.guard():
        sn = SpectralNorm([3, 4, 5], dim=1, power_iters=2)
        assert [(n, p.name, list(p.shape), p.stop_gradient)
                for n, p in sn.named_parameters()] == [
            ("weight_u", "spectral_norm_0.w_0", [4], True),
            ("weight_v", "spectral_norm_0.w_1", [15], True)]


# -- NCE -------------------------------------------------------------------------------------------

_DIST = [0.05, 0.1, 0.2, 0.05, 0.15, 0.1, 0.05, 0.1, 0.1, 0.1]


@pytest.mark.parametrize("sampler,custom,bias,weighted", [
    ("uniform", None, True, False), ("log_uniform", None, False, True),
    ("custom_dist", _DIST, True, False)])
def test_nce_matches_static_nce_with_the_same_seed(sampler, custom, bias, weighted):
    rng = np.random.default_rng(9)
    x = _rand(rng, [4, 5])
    label = rng.integers(0, 10, size=(4, 1)).astype("int64")
    sw = np.abs(_rand(rng, [4, 1])) + 0.5
    kw = dict(num_neg_samples=3, sampler=sampler, custom_dist=custom, seed=11)
    inputs = [x, label, sw] if weighted else [x, label]
    outs, fixed, params, _ = _dygraph_run(
        lambda: NCE(10, 5, bias_attr="nce_b" if bias else None, **kw), inputs)
    values, mapping = {"W": params["weight"][1]}, {"weight": "W"}
    if bias:
        values["B"], mapping["bias"] = params["bias"][1], "B"
    else:
        assert "bias" not in params

    def build():
        weights = _data("sw", sw) if weighted else None
        return layers.nce(_data("x", x), _data("label", label), 10, sample_weight=weights,
                          param_attr="W", bias_attr="B" if bias else False, **kw)

    feed = {"x": x, "label": label, **({"sw": sw} if weighted else {})}
    st_outs, st_grads = _static_run(build, feed, fixed, values)
    _assert_match(outs, params, st_outs, st_grads, mapping)


def test_nce_fixed_seed_draws_the_same_and_names_as_fluid():
    rng = np.random.default_rng(10)
    x = _rand(rng, [3, 4])
    label = np.array([[1], [2], [3]], dtype="int64")
    with dygraph.guard():
        nce = NCE(8, 4, sampler="custom_dist", custom_dist=[0.125] * 8, seed=5,
                  bias_attr=True)
        # the three custom-dist tables come first (w_0..w_2) and stay out of parameters()
        assert [(n, p.name, list(p.shape)) for n, p in nce.named_parameters()] == [
            ("weight", "nce_0.w_3", [8, 4]), ("bias", "nce_0.b_0", [8, 1])]
        a = nce(dygraph.to_variable(x), dygraph.to_variable(label)).numpy()
        b = nce(dygraph.to_variable(x), dygraph.to_variable(label)).numpy()
        np.testing.assert_array_equal(a, b)
        assert a.shape == (3, 1)
        plain = NCE(8, 4)
        assert [(n, p.name) for n, p in plain.named_parameters()] == [("weight", "nce_1.w_0")]
        assert plain.bias is None


def test_nce_sparse_gradient_holds_the_dense_gradient_rows():
    rng = np.random.default_rng(13)
    x = _rand(rng, [3, 4])
    label = np.array([[1], [2], [3]], dtype="int64")
    weight = _rand(rng, [8, 4])
    grads = []
    for sparse in (False, True):
        with dygraph.guard():
            nce = NCE(8, 4, num_neg_samples=4, seed=3, is_sparse=sparse)
            nce.weight.set_value(weight)
            out = nce(dygraph.to_variable(x), dygraph.to_variable(label))
            layers.reduce_sum(out).backward()
            grads.append(nce.weight.gradient())
    values, rows = grads[1]
    dense = np.zeros_like(weight)
    np.add.at(dense, np.asarray(rows), np.asarray(values))
    assert np.abs(grads[0]).max() > 0
    np.testing.assert_allclose(dense, grads[0], rtol=1e-6, atol=1e-6)


# -- TreeConv --------------------------------------------------------------------------------------

def _tree_inputs(rng, dtype="float32"):
    nodes = _rand(rng, [2, 6, 5], dtype)
    edges = np.array([[[1, 2], [1, 3], [2, 4], [2, 5], [0, 0]],
                      [[1, 2], [2, 3], [3, 4], [1, 5], [5, 6]]], dtype="int32")
    return nodes, edges


@pytest.mark.parametrize("num_filters,bias,act", [(1, True, "tanh"), (3, False, "tanh"),
                                                  (6, True, None)])
def test_tree_conv_matches_static(num_filters, bias, act):
    rng = np.random.default_rng(11)
    nodes, edges = _tree_inputs(rng)

    def make():
        return TreeConv(5, 4, num_filters=num_filters, max_depth=2, act=act,
                        bias_attr=fluid.ParamAttr() if bias else None)

    outs, fixed, params, _ = _dygraph_run(make, [nodes, edges])
    values, mapping = {"W": params["weight"][1]}, {"weight": "W"}
    if bias:
        values["B"], mapping["bias"] = params["bias"][1], "B"

    def build():
        out = layers.tree_conv(_data("nodes", nodes), _data("edges", edges), 4,
                               num_filters=num_filters, max_depth=2, act=None,
                               param_attr="W", bias_attr=False)
        if bias:  # Fluid 1.8's dygraph bias: [num_filters] added from axis 1
            b = layers.create_parameter([num_filters], "float32", name="B")
            out = layers.elementwise_add(out, b, axis=1)
        return layers.tanh(out) if act == "tanh" else out

    st_outs, st_grads = _static_run(build, {"nodes": nodes, "edges": edges}, fixed, values)
    _assert_match(outs, params, st_outs, st_grads, mapping)


def test_tree_conv_parameters_as_fluid():
    with dygraph.guard():
        t = TreeConv(5, 4, num_filters=2, bias_attr=True)
        # Fluid 1.8 creates the bias first
        assert [(n, p.name, list(p.shape)) for n, p in t.named_parameters()] == [
            ("bias", "tree_conv_0.b_0", [2]), ("weight", "tree_conv_0.w_0", [5, 3, 4, 2])]
        plain = TreeConv(5, 4)
        assert plain.bias is None
        assert [p.name for p in plain.parameters()] == ["tree_conv_1.w_0"]


# -- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("make,err,match", [
    (lambda: GRUUnit(10), ValueError, "multiple of 3"),
    (lambda: GRUUnit(9, activation="gelu"), ValueError, "activation"),
    (lambda: BilinearTensorProduct(0, 3, 2), ValueError, "input1_dim"),
    (lambda: Conv3D(3, 4, 3, groups=2), ValueError, "divisible by groups"),
    (lambda: Conv3D(4, 4, [3, 3]), ValueError, "filter_size"),
    (lambda: Conv3D(4, 4, 3, use_cudnn=1), ValueError, "use_cudnn"),
    (lambda: Conv3D(4, 4, 3, param_attr=False), ValueError, "param_attr"),
    (lambda: Conv3DTranspose(4, 3, 3, groups=2), ValueError, "num_filters"),
    (lambda: Conv3DTranspose(4, 4, 3, padding=-1), ValueError, "padding"),
    (lambda: SpectralNorm([3, 0]), ValueError, "weight_shape"),
    (lambda: SpectralNorm([3, 4, 5], dim=2), ValueError, "dim can only be 0 or 1"),
    (lambda: SpectralNorm([3, 4], power_iters=-1), ValueError, "power_iters"),
    (lambda: NCE(10, 4, sampler="zipf"), ValueError, "sampler"),
    (lambda: NCE(10, 4, sampler="custom_dist"), ValueError, "custom_dist"),
    (lambda: NCE(10, 4, sampler="custom_dist", custom_dist=[0.5, 0.5]), ValueError,
     "custom_dist"),
    (lambda: TreeConv(5, 0), ValueError, "output_size"),
])
def test_bad_constructor_arguments_raise(make, err, match):
    with dygraph.guard(), pytest.raises(err, match=match):
        make()


def test_bad_forward_inputs_raise():
    rng = np.random.default_rng(12)
    with dygraph.guard():
        v = dygraph.to_variable
        with pytest.raises(ValueError, match=r"input must be \[N, 9\]"):
            GRUUnit(9)(v(_rand(rng, [2, 6])), v(_rand(rng, [2, 3])))
        with pytest.raises(ValueError, match="x must be"):
            BilinearTensorProduct(3, 4, 2)(v(_rand(rng, [2, 4])), v(_rand(rng, [2, 4])))
        with pytest.raises(ValueError, match="4 channels"):
            Conv3D(4, 2, 1)(v(_rand(rng, [1, 3, 2, 2, 2])))
        with pytest.raises(ValueError, match="5-D"):
            Conv3DTranspose(4, 2, 1)(v(_rand(rng, [1, 4, 2, 2])))
        with pytest.raises(ValueError, match="weight_shape"):
            SpectralNorm([3, 4])(v(_rand(rng, [4, 3])))
        with pytest.raises(TypeError, match="int64"):
            NCE(10, 4)(v(_rand(rng, [2, 4])), v(np.zeros((2, 1), "int32")))
        with pytest.raises(TypeError, match="Variable"):
            NCE(10, 4)(_rand(rng, [2, 4]), v(np.zeros((2, 1), "int64")))
        nodes, edges = _tree_inputs(rng)
        with pytest.raises(ValueError, match="num_filters=3 must be 1 or max_nodes=6"):
            TreeConv(5, 4, num_filters=3, bias_attr=True)(v(nodes), v(edges))
        with pytest.raises(ValueError, match="feature_size|nodes_vector must be"):
            TreeConv(4, 4)(v(nodes), v(edges))
