"""Dygraph behaviours Fluid 1.8's test_imperative_*.py rely on (regression tests for the
differences a run of those tests found): TracedLayer sharing the layer's parameters and
naming its program as 1.8's tracer, ``minimize`` without ``backward``, a zero learning rate,
``grad`` of leaf outputs, skipped backward passes, zero gradients of unused split outputs,
``value().get_tensor().set``, and the ``paddle.fluid`` names 1.8 exports."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import compat, dygraph
from dask_fluid.dygraph import Linear, TracedLayer, to_variable

X = np.array([[1.0, 2.0, 3.0]], dtype="float32")


# -- TracedLayer ------------------------------------------------------------------------------
def test_traced_layer_runs_with_the_current_parameters():
    """Non regression: the traced program copied the parameters at trace time."""
    with dygraph.guard(fluid.CPUPlace()):
        model = Linear(3, 2)
        x = to_variable(X)
        _, traced = TracedLayer.trace(model, inputs=[x])
        opt = fluid.optimizer.SGD(0.5, parameter_list=model.parameters())
        loss = fluid.layers.reduce_sum(model(x))
        loss.backward()
        opt.minimize(loss)
        w, b = model.weight.numpy(), model.bias.numpy()
        np.testing.assert_allclose(traced([X])[0], X @ w + b, rtol=1e-6)
        model.weight.set_value(np.zeros((3, 2), "float32"))
        model.bias.set_value(np.array([1.0, -2.0], "float32"))
        np.testing.assert_array_equal(traced([X])[0], [[1.0, -2.0]])


def test_traced_program_is_named_as_fluid_18s_tracer():
    """feed_i for the inputs, fetch_i for the outputs, t_i for the rest in op order;
    parameters keep their names: tracing twice gives the same program."""
    with dygraph.guard(fluid.CPUPlace()):
        model = Linear(3, 2, act="relu")
        x = to_variable(X)
        programs = []
        for _ in range(2):
            _, traced = TracedLayer.trace(model, inputs=[x])
            block = traced.program.global_block()
            programs.append(([(op.type, op.input_arg_names, op.output_arg_names)
                              for op in block.ops], sorted(block.vars)))
            w, b = model.weight.name, model.bias.name
            assert programs[-1] == (
                [("matmul", ["feed_0", w], ["t_0"]),
                 ("elementwise_add", ["t_0", b], ["t_1"]),
                 ("relu", ["t_1"], ["fetch_0"])],
                sorted(["feed_0", "fetch_0", "t_0", "t_1", w, b]))
            assert block.var(w).persistable and not block.var("t_0").persistable
        assert programs[0] == programs[1]


def test_framework_has_fluid_18s_dygraph_guard():
    from dask_fluid.framework import _dygraph_guard, in_dygraph_mode

    with dygraph.guard(fluid.CPUPlace()):
        with _dygraph_guard(None):
            assert not in_dygraph_mode()
        assert in_dygraph_mode()


def test_framework_has_fluid_18s_dygraph_place_guard():
    from dask_fluid.framework import _dygraph_place_guard, _dygraph_tracer

    with _dygraph_place_guard(place=fluid.CPUPlace()):  # static mode: nothing runs on it
        pass
    marker = fluid.CPUPlace()
    with dygraph.guard(fluid.CPUPlace()):
        before = _dygraph_tracer().place
        with _dygraph_place_guard(place=marker):
            assert _dygraph_tracer().place is marker
            np.testing.assert_array_equal((to_variable(X) * 2.0).numpy(), X * 2.0)
        assert _dygraph_tracer().place is before


# -- optimizers -------------------------------------------------------------------------------
def test_minimize_without_backward_updates_nothing_and_advances_the_decay():
    """Fluid 1.8's TestOptimizerLearningRate.test_lr_decay: minimize(loss) with no gradient."""
    with dygraph.guard(fluid.CPUPlace()):
        model = Linear(10, 10)
        loss = fluid.layers.reduce_mean(model(to_variable(np.ones((10, 10), "float32"))))
        before = [p.numpy() for p in model.parameters()]
        adam = fluid.optimizer.Adam(dygraph.PiecewiseDecay([2, 4], [0.2, 0.4, 0.6], 0),
                                    parameter_list=model.parameters())
        rates = []
        for _ in range(5):
            adam.minimize(loss)
            rates.append(adam.current_step_lr())
        np.testing.assert_allclose(rates, [0.2, 0.2, 0.4, 0.4, 0.6], rtol=1e-6)
        for param, value in zip(model.parameters(), before, strict=True):
            np.testing.assert_array_equal(param.numpy(), value)


@pytest.mark.parametrize("make", [
    lambda lr, ps: fluid.optimizer.SGD(lr, parameter_list=ps),
    lambda lr, ps: fluid.optimizer.Momentum(lr, 0.9, parameter_list=ps),
    lambda lr, ps: fluid.optimizer.Adam(learning_rate=lr, beta1=0.8, beta2=0.6,
                                        parameter_list=ps),
    lambda lr, ps: fluid.optimizer.Adagrad(lr, parameter_list=ps),
    lambda lr, ps: fluid.optimizer.RMSProp(lr, parameter_list=ps),
])
def test_a_zero_learning_rate_trains_nothing(make):
    """Fluid 1.8's test_imperative_save_load builds Adam(learning_rate=0.0, ...)."""
    with dygraph.guard(fluid.CPUPlace()):
        model = Linear(3, 2)
        opt = make(0.0, model.parameters())
        before = [p.numpy() for p in model.parameters()]
        loss = fluid.layers.reduce_sum(model(to_variable(X)))
        loss.backward()
        opt.minimize(loss)
        for param, value in zip(model.parameters(), before, strict=True):
            np.testing.assert_array_equal(param.numpy(), value)
        assert opt.current_step_lr() == 0.0


def test_a_zero_learning_rate_in_a_static_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[3])
        loss = fluid.layers.reduce_sum(fluid.layers.fc(x, 2))
        fluid.optimizer.SGD(0.0).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    names = [p.name for p in main.global_block().all_parameters()]
    before = [np.array(scope.get(n)) for n in names]
    exe.run(main, feed={"x": X}, fetch_list=[loss], scope=scope)
    for name, value in zip(names, before, strict=True):
        np.testing.assert_array_equal(np.array(scope.get(name)), value)


def test_an_int_learning_rate_is_a_type_error_as_in_fluid_18():
    with pytest.raises(TypeError, match=r"float.*got int 1 \(write 1.0\)"):
        fluid.optimizer.SGD(1)
    with dygraph.guard(fluid.CPUPlace()):
        with pytest.raises(TypeError, match="LearningRateDecay"):
            fluid.optimizer.Adam(0, parameter_list=Linear(2, 2).parameters())


@pytest.mark.parametrize("name", ["ModelAverage", "ExponentialMovingAverage",
                                  "LookaheadOptimizer", "RecomputeOptimizer"])
def test_whole_program_optimizers_say_they_do_not_work_in_dygraph_mode(name):
    make = {"ModelAverage": lambda: fluid.optimizer.ModelAverage(0.15),
            "ExponentialMovingAverage": lambda: fluid.optimizer.ExponentialMovingAverage(0.999),
            "LookaheadOptimizer": lambda: fluid.optimizer.LookaheadOptimizer(
                fluid.optimizer.SGD(0.1, parameter_list=layer.parameters())),
            "RecomputeOptimizer": lambda: fluid.optimizer.RecomputeOptimizer(
                fluid.optimizer.SGD(0.1, parameter_list=layer.parameters()))}
    with dygraph.guard(fluid.CPUPlace()):
        layer = Linear(2, 2)
        with pytest.raises(RuntimeError, match=f"don't support {name}"):
            make[name]()


# -- gradients --------------------------------------------------------------------------------
def test_grad_of_an_output_that_is_the_input():
    """Fluid 1.8's test_imperative_double_grad test_simple_example."""
    xv = np.random.default_rng(0).random((2, 3)).astype("float32")
    with dygraph.guard(fluid.CPUPlace()):
        x = to_variable(xv)
        x.stop_gradient = False
        y = x + 1.0
        for create_graph in (False, True):
            (dx,) = dygraph.grad([x], [x], create_graph=create_graph)
            np.testing.assert_array_equal(dx.numpy(), np.ones((2, 3)))
            assert dx.stop_gradient != create_graph
            (twice,) = dygraph.grad([y, x], [x], create_graph=create_graph)
            np.testing.assert_array_equal(twice.numpy(), np.full((2, 3), 2.0))
            assert twice.stop_gradient != create_graph
            (dy,) = dygraph.grad([x, y], [y], create_graph=create_graph)
            np.testing.assert_array_equal(dy.numpy(), np.ones((2, 3)))
            assert dy.stop_gradient != create_graph
            assert dygraph.grad([x], [y], allow_unused=True) == [None]
        seed = to_variable(np.full((2, 3), 3.0, "float32"))
        (dx,) = dygraph.grad([y, x], [x], grad_outputs=[None, seed])
        np.testing.assert_array_equal(dx.numpy(), np.full((2, 3), 4.0))
        # the caller's grad_output comes back as a copy that takes gradients, not itself
        (dy,) = dygraph.grad([y], [y], grad_outputs=[seed], create_graph=True)
        np.testing.assert_array_equal(dy.numpy(), np.full((2, 3), 3.0))
        assert dy is not seed and not dy.stop_gradient and seed.stop_gradient


def test_backward_of_a_loss_that_stops_gradients_is_skipped():
    """Fluid 1.8's test_auto_prune9: stop_gradient set after the forward pass; and
    test_case4_with_no_grad_op_maker: a loss with no grad op behind it."""
    with dygraph.guard(fluid.CPUPlace()):
        linear, linear2 = Linear(13, 5), Linear(5, 3)
        out1 = linear(to_variable(np.arange(26).reshape(2, 13).astype("float32")))
        out2 = linear2(out1)
        before = [p.numpy() for p in linear.parameters() + linear2.parameters()]
        out2.stop_gradient = True
        out2.backward()
        assert linear2.weight._grad_ivar() is None and linear.weight.gradient() is None
        opt = fluid.optimizer.SGD(0.003, parameter_list=linear.parameters() +
                                  linear2.parameters())
        opt.minimize(out2)
        for param, value in zip(linear.parameters() + linear2.parameters(), before,
                                strict=True):
            np.testing.assert_array_equal(param.numpy(), value)
        out = fluid.layers.gaussian_random(shape=[20, 30])
        fluid.layers.mean(out).backward()
        assert out.gradient() is None


def test_an_unused_split_output_gets_a_zero_gradient():
    """Fluid 1.8's engine fills the gradients a grad op reads that nothing produced with zeros
    (BasicEngine::CheckBackwardInputs), test_auto_prune3/5's part2."""
    with dygraph.guard(fluid.CPUPlace()):
        lin = Linear(4, 6)
        feat = lin(to_variable(np.ones((2, 4), "float32")))
        part1, part2 = fluid.layers.split(feat, num_or_sections=[2, 4], dim=1)
        loss = fluid.layers.reduce_sum(part1 * 3.0)
        loss.backward()
        np.testing.assert_array_equal(part2.gradient(), np.zeros((2, 4), "float32"))
        np.testing.assert_array_equal(part1.gradient(), np.full((2, 2), 3.0, "float32"))
        expected_w = np.zeros((4, 6), "float32")
        expected_w[:, :2] = 2 * 3.0  # two rows of ones, each column of part1 times 3
        np.testing.assert_array_equal(lin.weight.gradient(), expected_w)


def test_a_value_stopped_after_it_was_computed_gets_a_zero_gradient():
    """test_auto_prune6: out1 (a layer's output) is stopped after the forward pass; its
    gradient is zeros (Fluid 1.8's "Set StopGradient Grad ... as zero") and nothing reaches
    the layer behind it; a data input never took gradients and has none."""
    with dygraph.guard(fluid.CPUPlace()):
        lin = Linear(4, 3)
        data = to_variable(np.ones((2, 5), "float32"))
        out1 = lin(to_variable(np.ones((2, 4), "float32")))
        out1.stop_gradient = True
        w = to_variable(np.ones((2, 3), "float32"))
        w.stop_gradient = False
        fluid.layers.reduce_sum(fluid.layers.concat([out1, w, data], axis=1) * 2.0).backward()
        np.testing.assert_array_equal(out1.gradient(), np.zeros((2, 3), "float32"))
        np.testing.assert_array_equal(w.gradient(), np.full((2, 3), 2.0, "float32"))
        assert lin.weight.gradient() is None and data.gradient() is None


# -- values and names -------------------------------------------------------------------------
def test_value_get_tensor_set_writes_the_variable():
    """Fluid 1.8's test_imperative_save_load zeroes parameters this way."""
    with dygraph.guard(fluid.CPUPlace()):
        lin = Linear(2, 2)
        tensor = lin.weight.value().get_tensor()
        tensor.set(np.zeros((2, 2), "float32"), fluid.CPUPlace())
        np.testing.assert_array_equal(lin.weight.numpy(), np.zeros((2, 2)))
        lin.weight.set_value(np.eye(2, dtype="float32"))
        np.testing.assert_array_equal(np.array(tensor), np.eye(2))  # reads the current value
        np.testing.assert_array_equal(np.array(lin.weight.value()), np.eye(2))


def test_paddle_fluid_has_fluid_18s_names():
    compat.install()
    try:
        paddle_fluid = importlib.import_module("paddle.fluid")
        core = importlib.import_module("paddle.fluid.core")
        for name in ("Layer", "Linear", "Conv2D", "Pool2D", "Embedding", "BatchNorm",
                     "LayerNorm", "GRUUnit", "NCE", "PRelu", "Dropout", "GroupNorm",
                     "SpectralNorm", "TreeConv", "Conv3D", "Conv2DTranspose", "Conv3DTranspose",
                     "BilinearTensorProduct", "InstanceNorm"):
            assert getattr(paddle_fluid, name) is getattr(dygraph, name)
        with dygraph.guard(fluid.CPUPlace()):
            assert isinstance(Linear(2, 2).weight, core.VarBase)
            assert isinstance(to_variable(X), core.VarBase)
        assert core.grad_var_suffix() == "@GRAD"
        with pytest.raises(AttributeError, match="PaddleTensor is not implemented"):
            core.PaddleTensor  # noqa: B018 - the inference predictor's API
    finally:
        compat.uninstall()


def test_pool2d_global_pooling_ignores_pool_size():
    # Fluid 1.8's models (SE-ResNeXt) pass pool_size=0 with global_pooling=True
    xv = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
    with dygraph.guard(fluid.CPUPlace()):
        pool = dygraph.Pool2D(pool_size=0, pool_type="avg", global_pooling=True)
        np.testing.assert_allclose(pool(to_variable(xv)).numpy().ravel(), [7.5])
        with pytest.raises(ValueError, match="pool_size and pool_stride must be positive"):
            dygraph.Pool2D(pool_size=0, pool_type="avg")


def test_a_custom_layer_through_fluid_18s_layer_helper():
    """A layer written as Fluid 1.8's own: LayerHelper(type, **locals()) and its helpers."""
    from dask_fluid.layer_helper import LayerHelper

    def my_fc(input, size, param_attr=None, bias_attr=None, act=None, name=None):
        helper = LayerHelper("my_fc", **locals())
        dtype = helper.input_dtype()
        w = helper.create_parameter(attr=helper.param_attr, shape=[input.shape[1], size],
                                    dtype=dtype)
        out = helper.create_variable(name=f"{helper.name}.out", dtype=dtype, shape=[-1, size])
        helper.append_op("mul", inputs={"X": [helper.input()], "Y": [w]},
                         outputs={"Out": [out]})
        return helper.append_activation(helper.append_bias_op(out))

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3])
        y = my_fc(x, 2, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(0.5)),
            bias_attr=fluid.ParamAttr(name="b", initializer=fluid.initializer.Constant(-1.0)),
            act="relu")
        no_bias = my_fc(x, 2, bias_attr=False)
    types = [op.type for op in main.global_block().ops]
    assert types == ["mul", "elementwise_add", "relu", "mul"]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = np.array([[1.0, 2.0, 3.0], [-1.0, -1.0, 0.0]], "float32")
    got, _ = exe.run(main, feed={"x": xv}, fetch_list=[y, no_bias], scope=scope)
    np.testing.assert_allclose(got, np.maximum(xv.sum(1, keepdims=True) * 0.5 - 1.0, 0)
                               .repeat(2, axis=1))
    with pytest.raises(ValueError, match="only takes one input"):
        LayerHelper("two", input=[x, x]).input()
    with fluid.program_guard(main, startup):
        helper = LayerHelper("no_shape")
        with pytest.raises(ValueError, match="shape of .* is unknown"):
            helper.append_bias_op(helper.create_variable_for_type_inference("float32"))


def test_optimizer_clear_gradients_and_own_parameters():
    """Fluid 1.8's Optimizer.clear_gradients and Layer.named_parameters(include_sublayers=
    False) (the layer's own parameters only, as test_imperative_named_members)."""

    class Outer(fluid.dygraph.Layer):
        def __init__(self):
            super().__init__()
            self.w = self.create_parameter([2, 2])
            self.fc = Linear(2, 2)

        def forward(self, x):
            return self.fc(fluid.layers.matmul(x, self.w))

    with dygraph.guard(fluid.CPUPlace()):
        net = Outer()
        assert [n for n, _ in net.named_parameters(include_sublayers=False)] == ["w"]
        assert len(net.parameters(include_sublayers=False)) == 1
        assert net.sublayers(include_sublayers=False) == []
        assert len(net.parameters()) == 3
        sgd = fluid.optimizer.SGD(0.1, parameter_list=net.parameters())
        fluid.layers.reduce_sum(net(to_variable(np.ones((1, 2), "float32")))).backward()
        assert all(p.gradient() is not None for p in net.parameters())
        sgd.clear_gradients()
        assert all(p.gradient() is None for p in net.parameters())


def test_grad_takes_no_grad_vars_as_a_set():
    with dygraph.guard(fluid.CPUPlace()):
        x = to_variable(X)
        x.stop_gradient = False
        y = x * 2.0
        z = y * 3.0 + x
        (dx,) = dygraph.grad([z], [x], no_grad_vars={y})
        np.testing.assert_array_equal(dx.numpy(), np.ones_like(X))


def test_traced_layer_takes_nested_inputs():
    """test_imperative_transformer_sorted_gradient traces a layer with lists of inputs."""

    class Pair(fluid.dygraph.Layer):
        def __init__(self):
            super().__init__()
            self.fc = Linear(3, 2)

        def forward(self, pair, z):
            return self.fc(pair[0] + pair[1] * 2.0 + z)

    with dygraph.guard(fluid.CPUPlace()):
        layer = Pair()
        a, b, c = (to_variable(X * k) for k in (1.0, 2.0, 3.0))
        out, traced = dygraph.TracedLayer.trace(layer, [[a, b], c])
        (static,) = traced([X, 2 * X, 3 * X])
        np.testing.assert_allclose(static, out.numpy(), rtol=1e-6)
        np.testing.assert_allclose(out.numpy(), layer.fc(to_variable(8 * X)).numpy(),
                                   rtol=1e-6)


def test_traced_layer_switch_sets_is_test():
    """Fluid 1.8's private TracedLayer._switch, which test_imperative_resnet calls."""
    with dygraph.guard(fluid.CPUPlace()):
        layer = fluid.dygraph.Dropout(p=0.5)
        xv = np.ones((4, 50), "float32")
        layer.eval()
        out, traced = dygraph.TracedLayer.trace(layer, [to_variable(xv)])
        np.testing.assert_allclose(traced([xv])[0], xv * 0.5)  # downgrade_in_infer
        traced._switch(is_test=False)
        dropped = traced([xv])[0]
        assert set(np.unique(dropped)) <= {0.0, 1.0} and 0 < dropped.sum() < dropped.size
        traced._switch(is_test=True)
        np.testing.assert_allclose(traced([xv])[0], xv * 0.5)
