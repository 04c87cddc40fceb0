"""Second-order gradients: the grad ops of Fluid 1.8's double-differentiable ops have grad
makers (``*_grad_grad`` ops), so ``fluid.gradients`` of a gradient and a loss over gradients
(WGAN-GP's gradient penalty) differentiate through them."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import numeric_gradient, program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    return main, startup


def _input(shape, name="x"):
    x = fluid.data(name, shape, "float64")
    x.stop_gradient = False
    return x


# -- fluid.gradients of a gradient -------------------------------------------------------------

def test_second_derivative_of_a_cube():
    # y = Σ x³ as square(x) · x: dy/dx = 3x², d(Σ dy/dx)/dx = 6x
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([3, 4])
        y = layers.reduce_sum(layers.elementwise_mul(layers.square(x), x))
        gx, = fluid.gradients(y, x)
        ggx, = fluid.gradients(gx, x)
    assert {"square_grad_grad", "elementwise_mul_grad_grad"} <= {
        op.type for op in main.global_block().ops}
    xv = np.random.default_rng(0).standard_normal((3, 4))
    g1, g2 = _run(main, startup, {"x": xv}, [gx, ggx])
    np.testing.assert_allclose(g1, 3 * xv ** 2, rtol=1e-12)
    np.testing.assert_allclose(g2, 6 * xv, rtol=1e-12)


def test_second_derivative_of_sqrt_and_a_division():
    # y = Σ sqrt(x) / x = Σ x^-1/2: y' = -x^-3/2 / 2, (Σ y')' = 3/4 x^-5/2
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([2, 3])
        y = layers.reduce_sum(layers.elementwise_div(layers.sqrt(x), x))
        gx, = fluid.gradients(y, x)
        ggx, = fluid.gradients(gx, x)
    xv = np.random.default_rng(1).uniform(0.5, 2.0, (2, 3))
    g1, g2 = _run(main, startup, {"x": xv}, [gx, ggx])
    np.testing.assert_allclose(g1, -0.5 * xv ** -1.5, rtol=1e-12)
    np.testing.assert_allclose(g2, 0.75 * xv ** -2.5, rtol=1e-12)


def _elu_mlp(x, w, b):
    # Σ elu(x W + b)²: mul, elementwise_add, elu, square, reduce_sum
    h = layers.elu(layers.elementwise_add(layers.mul(x, w), b), alpha=0.7)
    return layers.reduce_sum(layers.square(h))


def _shapes_and_means(x, w, b):
    # reshape2, transpose2, pad, scale, reduce_mean, mean, elementwise_sub/mul/div, relu,
    # leaky_relu, sqrt: each a grad op differentiated again
    h = layers.transpose(layers.reshape(layers.mul(x, w), [2, 2, 2]), [1, 0, 2])
    h = layers.pad(layers.reshape(h, [2, 4]), [1, 0, 0, 1], pad_value=0.5)
    h = layers.elementwise_sub(layers.scale(h, 1.5), b)
    r = layers.relu(h) + layers.leaky_relu(h, alpha=0.3)
    q = layers.elementwise_div(layers.elementwise_mul(r, h), layers.sqrt(layers.square(h) + 1.0))
    return layers.mean(layers.reduce_mean(layers.square(q), dim=1))


@pytest.mark.parametrize("f", [_elu_mlp, _shapes_and_means], ids=["elu_mlp", "shapes"])
def test_hessian_vector_product_matches_differences(f):
    # gradients(<∇f(x), v>, x) is the Hessian of f times v: checked by central differences
    # of ∇f along x
    rng = np.random.default_rng(2)
    wv, bv, vv = rng.standard_normal((3, 4)), rng.standard_normal(5), rng.standard_normal((2, 3))
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([2, 3])
        v = fluid.data("v", [2, 3], "float64")
        w = fluid.data("w", [3, 4], "float64")
        b = fluid.data("b", [5], "float64")
        gx, = fluid.gradients(f(x, w, layers.slice(b, [0], [0], [4]) if f is _elu_mlp else b),
                              x)
        first_pass = len(main.global_block().ops)
        hv, = fluid.gradients(layers.reduce_sum(layers.elementwise_mul(gx, v)), x)
    second = {op.type for op in main.global_block().ops[first_pass:]}
    if f is _shapes_and_means:
        assert {f"{t}_grad_grad" for t in ("reshape2", "elementwise_sub", "elementwise_div",
                                           "relu", "leaky_relu", "sqrt")} <= second
        assert {"transpose2", "pad", "scale", "reduce_mean", "mean"} <= second
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = rng.standard_normal((2, 3))
    feed = {"v": vv, "w": wv, "b": bv}
    got, = exe.run(main, feed={"x": xv, **feed}, fetch_list=[hv], scope=scope)

    def dot(xa):
        return float((exe.run(main, feed={"x": xa, **feed}, fetch_list=[gx],
                              scope=scope)[0] * vv).sum())

    box = [xv.copy()]
    num = numeric_gradient(lambda: dot(box[0]), lambda: box[0],
                           lambda a: box.__setitem__(0, a))
    assert np.abs(got).max() > 1e-3
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7)


def test_op_without_double_grad_raises_clearly():
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([2, 3])
        gx, = fluid.gradients(layers.reduce_sum(layers.sigmoid(x)), x)
        with pytest.raises(NotImplementedError, match="sigmoid_grad.*second-order"):
            fluid.gradients(gx, x)


# -- a gradient penalty trained with minimize ---------------------------------------------------

def _penalty(d_out, x):
    # WGAN-GP: mean((‖∂D/∂x‖₂ − 1)²) over the batch
    gx, = fluid.gradients(d_out, x)
    norm = layers.sqrt(layers.reduce_sum(layers.square(gx), dim=1))
    return layers.mean(layers.square(norm - 1.0))


def _mlp_critic(x):
    h = layers.fc(x, 5, act="relu")
    h = layers.leaky_relu(layers.fc(h, 4), alpha=0.2)
    return layers.fc(h, 1)


def _conv_critic(x):
    h = layers.conv2d(x, num_filters=3, filter_size=3, padding=1, act="relu")
    h = layers.conv2d(h, num_filters=2, filter_size=3, stride=2)
    h = layers.reshape(layers.leaky_relu(h, alpha=0.1), [-1, 8])
    return layers.reduce_mean(layers.fc(h, 1), dim=1)


@pytest.mark.parametrize("critic, shape", [(_mlp_critic, [4, 3]),
                                           (_conv_critic, [2, 2, 5, 5])],
                         ids=["mlp", "conv"])
def test_gradient_penalty_parameter_grads_match_differences(critic, shape):
    rng = np.random.default_rng(3)
    xv = rng.standard_normal(shape)

    def build():
        x = _input(shape)
        return _penalty(critic(x), x)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fluid.append_backward(build())
    types = {op.type for op in main.global_block().ops}
    assert {"mul_grad_grad", "elementwise_add_grad_grad", "leaky_relu_grad_grad"} <= types
    if critic is _conv_critic:
        assert {"conv2d_grad_grad", "reshape2_grad_grad", "relu_grad_grad"} <= types
    # the critic's last bias shifts D(x) only, not its gradient: the penalty has none for it
    *params, last_bias = [p.name for p in main.global_block().all_parameters()]
    assert len(params) >= 3 and last_bias.endswith(".b_0")
    for name, (analytic, numeric) in program_grads_and_numeric(build, {"x": xv},
                                                                params).items():
        assert np.abs(analytic).max() > 0 or name.endswith(".b_0"), name
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_gradient_penalty_minimize_with_sgd_steps_along_the_gradient():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((4, 3))
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([4, 3])
        loss = _penalty(_mlp_critic(x), x)
        _, pairs = fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)
    assert {"mul_grad_grad", "relu_grad_grad", "leaky_relu_grad_grad",
            "elementwise_add_grad_grad"} <= {op.type for op in main.global_block().ops}
    # not the last bias: the critic's gradient (an earlier pass's variables) does not depend
    # on it, though that pass declared its gradient
    assert sorted(p.name for p, _ in pairs) == sorted(
        p.name for p in main.global_block().all_parameters()[:-1])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    before = {p.name: np.array(scope.vars[p.name]) for p, _ in pairs}
    fetched = exe.run(main, feed={"x": xv}, fetch_list=[loss] + [g for _, g in pairs],
                      scope=scope)
    for (p, _), g in zip(pairs, fetched[1:], strict=True):
        np.testing.assert_allclose(np.array(scope.vars[p.name]), before[p.name] - 0.1 * g,
                                   rtol=1e-6, atol=1e-7)
    loss2, = exe.run(main, feed={"x": xv}, fetch_list=[loss], scope=scope)
    assert float(loss2[0]) < float(fetched[0][0])
