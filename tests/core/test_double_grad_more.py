"""Second-order gradients through slice, squeeze2, unsqueeze2 and conv3d: the grad ops that
Paddle 1.8 makes differentiable (slice_grad, squeeze2_grad and unsqueeze2_grad by running the
forward op again, conv3d_grad by conv3d_grad_grad), checked against central differences of
the first-order gradients the program computes, and a gradient penalty through all four."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import numeric_gradient, program_grads_and_numeric


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


def _input(shape, name="x"):
    x = fluid.data(name, shape, "float64")
    x.stop_gradient = False
    return x


def _cube_sum(h):
    # Σ h³: nonlinear, so that the second pass differentiates the grad ops of h's path
    return layers.reduce_sum(layers.elementwise_mul(layers.square(h), h))


def _slices_and_squeezes(x):
    # x [2, 3, 4] -> slice [2, 2, 3] -> unsqueeze [2, 1, 2, 1, 3] -> cube -> squeeze [2, 2, 3]
    # -> slice [2, 1, 3]
    h = layers.slice(x, axes=[1, 2], starts=[1, -3], ends=[100, 4])
    h = layers.unsqueeze(h, [1, 3])
    h = layers.elementwise_mul(layers.square(h), h)
    h = layers.squeeze(h, [1, 3])
    h = layers.slice(h, axes=[1], starts=[1], ends=[2])
    return _cube_sum(h)


def _slices_with_tensor_bounds(x):
    # the bounds as Variables (StartsTensorList, EndsTensor): the second pass's slice must
    # read them too, else it would slice with the attributes' -1s
    one = layers.fill_constant([1], "int32", 1)
    h = layers.slice(x, axes=[1, 2], starts=[one, -3], ends=layers.fill_constant([2], "int32",
                                                                                    4))
    h = layers.elementwise_mul(layers.square(h), h)
    return _cube_sum(h[:, one])


def _conv3d(x):
    h = layers.conv3d(x, num_filters=2, filter_size=2, padding=[1, 0, 0], stride=[1, 1, 2],
                      bias_attr=False)
    return _cube_sum(h)


CASES = {
    # (function, x shape, second-pass op types it must contain)
    "slices": (_slices_and_squeezes, [2, 3, 4],
               {"slice", "squeeze2", "unsqueeze2", "elementwise_mul_grad_grad"}),
    "conv3d": (_conv3d, [1, 2, 3, 3, 4], {"conv3d_grad_grad"}),
    "tensor_bounds": (_slices_with_tensor_bounds, [2, 3, 4],
                      {"slice", "elementwise_mul_grad_grad"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hessian_vector_product_matches_differences(case):
    # gradients(<∇f(x), v>, x) is the Hessian of f times v: checked by central differences
    # of the program's own ∇f along x
    f, shape, second_types = CASES[case]
    rng = np.random.default_rng(11)
    vv = rng.standard_normal(shape)
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input(shape)
        v = fluid.data("v", shape, "float64")
        gx, = fluid.gradients(f(x), x)
        first_pass = len(main.global_block().ops)
        hv, = fluid.gradients(layers.reduce_sum(layers.elementwise_mul(gx, v)), x)
    assert second_types <= {op.type for op in main.global_block().ops[first_pass:]}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name in [p.name for p in main.global_block().all_parameters()]:
        scope.vars[name] = np.array(scope.vars[name], np.float64)
    xv = rng.standard_normal(shape)
    got, = exe.run(main, feed={"x": xv, "v": vv}, fetch_list=[hv], scope=scope)

    def dot(xa):
        return float((exe.run(main, feed={"x": xa, "v": vv}, fetch_list=[gx],
                              scope=scope)[0] * vv).sum())

    box = [xv.copy()]
    num = numeric_gradient(lambda: dot(box[0]), lambda: box[0],
                           lambda a: box.__setitem__(0, a))
    assert np.abs(got).max() > 1e-3
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-7)


def test_squeeze_and_slice_second_derivative_in_closed_form():
    # y = Σ slice(x)⁴ read through unsqueeze and squeeze: ∂(Σ ∂y/∂x)/∂x = 12 x² on the
    # sliced region and 0 outside it
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = _input([3, 4])
        h = layers.squeeze(layers.unsqueeze(layers.slice(x, [1], [1], [3]), [0]), [0])
        y = layers.reduce_sum(layers.square(layers.square(h)))
        gx, = fluid.gradients(y, x)
        ggx, = fluid.gradients(gx, x)
    xv = np.random.default_rng(12).standard_normal((3, 4))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    g1, g2 = exe.run(main, feed={"x": xv}, fetch_list=[gx, ggx], scope=scope)
    mask = np.zeros((3, 4))
    mask[:, 1:3] = 1.0
    np.testing.assert_allclose(g1, 4 * xv ** 3 * mask, rtol=1e-12)
    np.testing.assert_allclose(g2, 12 * xv ** 2 * mask, rtol=1e-12)


# -- a gradient penalty through conv3d, slice, squeeze2 and unsqueeze2 --------------------------

def _penalty(d_out, x):
    # WGAN-GP: mean((‖∂D/∂x‖₂ − 1)²) over the batch
    gx, = fluid.gradients(d_out, x)
    norm = layers.sqrt(layers.reduce_sum(layers.reshape(layers.square(gx), [2, -1]), dim=1))
    return layers.mean(layers.square(norm - 1.0))


def _critic(x):
    # x [2, 1, 3, 4, 4]: conv3d, relu, a slice of the depth, squeeze of that unit dim,
    # unsqueeze of a new one, leaky_relu, fc
    h = layers.conv3d(x, num_filters=2, filter_size=2, padding=1, act="relu")
    h = layers.squeeze(layers.slice(h, axes=[2], starts=[1], ends=[2]), [2])  # [2, 2, 5, 5]
    h = layers.leaky_relu(layers.unsqueeze(h, [1]), alpha=0.2)  # [2, 1, 2, 5, 5]
    return layers.fc(layers.reshape(h, [2, 50]), 1)


def test_gradient_penalty_parameter_grads_match_differences():
    xv = np.random.default_rng(13).standard_normal((2, 1, 3, 4, 4))

    def build():
        x = _input([2, 1, 3, 4, 4])
        return _penalty(_critic(x), x)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        fluid.append_backward(build())
    types = {op.type for op in main.global_block().ops}
    assert {"conv3d_grad_grad", "slice", "squeeze2", "unsqueeze2", "relu_grad_grad",
            "leaky_relu_grad_grad", "mul_grad_grad"} <= types
    # the conv3d filter and bias and the fc weight (the fc bias shifts D(x) only; the conv3d
    # bias moves ∂D/∂x only through relu's mask, piecewise constant: its gradient is 0)
    *params, last_bias = [p.name for p in main.global_block().all_parameters()]
    assert len(params) == 3 and last_bias.endswith(".b_0")
    for name, (analytic, numeric) in program_grads_and_numeric(build, {"x": xv},
                                                                params).items():
        assert np.abs(analytic).max() > 0 or name.endswith(".b_0"), name
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
