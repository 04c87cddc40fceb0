"""``run_program`` and ``PartialProgram``: a static program run in dygraph mode as one traced op.

References: the executor on the same static program and values (forward outputs, batch norm's
statistics), the program's own ``fluid.gradients`` (gradients through ``cond`` and
``while_loop``) and its SGD step; dropout's gradient against the mask its forward drew.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph, layers
from dask_fluid.dygraph.dygraph_to_static.partial_program import PartialProgram

RNG = np.random.default_rng(0)
XV = RNG.standard_normal((3, 4)).astype("float32")


# -- programs -----------------------------------------------------------------------------------
def _control_flow_net(x):
    """fc, then a cond on the mean's sign, then a while_loop of three fc steps: a loss."""
    h = layers.fc(x, 5, act="tanh", param_attr=fluid.ParamAttr(name="w0"),
                  bias_attr=fluid.ParamAttr(name="b0"))
    positive = layers.reduce_mean(h) > layers.fill_constant([1], "float32", 0.0)
    h = layers.cond(positive, lambda: h * 2.0, lambda: layers.square(h) - 1.0)
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", 3)

    def body(i, h):
        return [i + 1, layers.tanh(layers.fc(h, 5, param_attr=fluid.ParamAttr(name="w1"),
                                             bias_attr=False))]

    _, h = layers.while_loop(lambda i, h: i < n, body, [i, h])
    return h, layers.reduce_sum(h)


def _batch_norm_net(x):
    h = layers.fc(x, 4, param_attr=fluid.ParamAttr(name="w0"), bias_attr=False)
    h = layers.batch_norm(h, param_attr=fluid.ParamAttr(name="bn_scale"),
                          bias_attr=fluid.ParamAttr(name="bn_bias"),
                          moving_mean_name="bn_mean", moving_variance_name="bn_var")
    return h, layers.reduce_mean(h * h)


def _build(net, seed: int = 1, sgd: float | None = None):
    """``net`` in a new program: (main, startup, x, outputs, the persistables' values); with
    ``sgd`` (a learning rate) also the training program of its last output, as
    ``main.train``."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", shape=[4])
        outputs = list(net(x))
        if sgd is not None:  # in the same name guard: its names are new ones
            main.train = main.clone()
            with fluid.program_guard(main.train, startup):
                loss = main.train.global_block().var(outputs[-1].name)
                fluid.optimizer.SGD(sgd).minimize(loss)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        fluid.Executor(fluid.CPUPlace()).run(startup)
    values = {name: np.array(scope.get(name)) for name in scope.keys()}
    return main, startup, x, outputs, values


def _run_static(main, fetches, values, feed, train=False):
    """Run ``main`` (fetching ``fetches``) on a scope holding ``values``; the scope too."""
    scope = fluid.Scope()
    for name, value in values.items():
        scope.set(name, value.copy())
    with fluid.scope_guard(scope):
        got = fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=fetches)
    return got, scope


def _static_grads(main, loss, wrt, values, feed):
    """The loss and its gradients with respect to ``wrt`` (names) by ``fluid.gradients``."""
    program = main.clone()
    block = program.global_block()
    targets = [block.var(n) for n in wrt]
    for var in targets:
        var.stop_gradient = False
    with fluid.program_guard(program):
        grads = fluid.gradients([block.var(loss.name)], targets)
    got, _ = _run_static(program, [loss.name] + grads, values, feed)
    return got[0], dict(zip(wrt, got[1:], strict=True))


def _params(main, values):
    """Dygraph parameters named and valued as ``main``'s (inside a guard)."""
    holder = dygraph.Layer()
    out = []
    for p in main.all_parameters():
        param = holder.create_parameter(
            p.shape, attr=fluid.ParamAttr(name=p.name, trainable=p.trainable), dtype=p.dtype)
        param.set_value(values[p.name])
        param.stop_gradient = p.stop_gradient
        out.append(param)
    return out


# -- forward and gradients ----------------------------------------------------------------------
@pytest.mark.parametrize("shift", [-2.0, 2.0], ids=["true_branch", "false_branch"])
def test_forward_and_gradients_match_the_static_program(shift):
    main, _, x, (h, loss), values = _build(_control_flow_net)
    xv = XV + shift
    names = [p.name for p in main.all_parameters()]
    expected_loss, expected = _static_grads(main, loss, names + ["x"], values, {"x": xv})
    (expected_h,), _ = _run_static(main, [h], values, {"x": xv})
    runner = PartialProgram(main, [x], [h, loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        xvar = dygraph.to_variable(xv)
        xvar.stop_gradient = False
        got_h, got_loss = runner([xvar], params, training=True)
        np.testing.assert_allclose(got_h.numpy(), expected_h, rtol=1e-6)
        np.testing.assert_allclose(got_loss.numpy(), expected_loss, rtol=1e-6)
        got_loss.backward()
        for p in params:
            np.testing.assert_allclose(p.gradient(), expected[p.name], rtol=1e-5, atol=1e-7,
                                       err_msg=p.name)
        np.testing.assert_allclose(xvar.gradient(), expected["x"], rtol=1e-5, atol=1e-7)


def _squared_net(x):
    h, _ = _control_flow_net(x)
    return h, layers.reduce_sum(layers.square(h))


def test_the_gradient_flows_on_into_the_ops_before_and_after():
    # dygraph ops on both sides: x -> scale -> run_program(h) -> square -> sum; the static
    # reference: d/dx sum(h(3x)^2) through the program that squares and sums too
    main, _, x, (h, total), values = _build(_squared_net)
    _, expected = _static_grads(main, total, ["x"], values, {"x": 3.0 * XV})
    runner = PartialProgram(main, [x], [h], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        xvar = dygraph.to_variable(XV)
        xvar.stop_gradient = False
        (out,) = runner([xvar * 3.0], params, training=True)
        loss = layers.reduce_sum(layers.square(out))
        loss.backward()
        np.testing.assert_allclose(xvar.gradient(), 3.0 * expected["x"], rtol=1e-5,
                                   atol=1e-7)


def test_inputs_that_stop_gradients_get_none_and_unused_inputs_zeros():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        a = layers.data("a", shape=[4])
        b = layers.data("b", shape=[4])
        out = layers.reduce_sum(layers.fc(a, 2, param_attr=fluid.ParamAttr(name="w")))
        _ = layers.scale(b, 2.0)  # b reaches no output
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        fluid.Executor().run(startup)
    values = {n: np.array(scope.get(n)) for n in scope.keys()}
    runner = PartialProgram(main, [a, b], [out], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        av = dygraph.to_variable(XV)  # stop_gradient (to_variable's default)
        bv = dygraph.to_variable(XV)
        bv.stop_gradient = False
        b_before = bv * 1.0  # an op before: it reads the gradient run_program gives b
        (loss,) = runner([av, b_before], params, training=True)
        loss.backward()
        assert av.gradient() is None
        np.testing.assert_array_equal(bv.gradient(), np.zeros_like(XV))
        assert params[0].gradient() is not None


def test_a_second_backward_pass_starts_from_the_forward_values():
    main, _, x, (_, loss), values = _build(_control_flow_net)
    runner = PartialProgram(main, [x], [loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        (out,) = runner([dygraph.to_variable(XV)], params, training=True)
        out.backward()
        once = [p.gradient() for p in params]
        out.backward()  # gradients add up: twice the first pass's
        for p, g in zip(params, once, strict=True):
            np.testing.assert_allclose(p.gradient(), 2 * g, rtol=1e-6, err_msg=p.name)


def test_the_graph_outlives_the_partial_program():
    main, _, x, (_, loss), values = _build(_control_flow_net)
    expected_loss, expected = _static_grads(main, loss, ["w1"], values, {"x": XV})
    runner = PartialProgram(main, [x], [loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        (out,) = runner([dygraph.to_variable(XV)], params, training=True)
        del runner
        gc.collect()
        out.backward()  # the kept scope holds the plan it ran
        np.testing.assert_allclose(params[-1].gradient(), expected["w1"], rtol=1e-5)


def test_a_dygraph_linear_s_parameters():
    with dygraph.guard(fluid.CPUPlace()):
        linear = dygraph.Linear(4, 3, act="relu")
        w, b = linear.weight, linear.bias
        main, startup = fluid.Program(), fluid.Program()
        with fluid.framework._dygraph_tracer_guard(None), fluid.program_guard(main, startup):
            x = layers.data("x", shape=[4])
            out = layers.reduce_sum(layers.fc(x, 3, act="relu",
                                              param_attr=fluid.ParamAttr(name=w.name),
                                              bias_attr=fluid.ParamAttr(name=b.name)))
        runner = PartialProgram(main, [x], [out], main.all_parameters())
        (loss,) = runner([dygraph.to_variable(XV)], [w, b], training=True)
        loss.backward()
        reference = layers.reduce_sum(linear(dygraph.to_variable(XV)))
        np.testing.assert_allclose(loss.numpy(), reference.numpy(), rtol=1e-6)
        got = w.gradient()
        w.clear_gradient()
        reference.backward()
        np.testing.assert_allclose(got, w.gradient(), rtol=1e-6)


# -- dropout, eval mode, batch norm ---------------------------------------------------------------
def _dropout_net(implementation):
    def net(x):
        y = layers.dropout(x, 0.4, dropout_implementation=implementation)
        return y, layers.reduce_sum(y)
    return net


def test_dropout_s_gradient_uses_the_forward_mask():
    # no random_seed: the op draws a new mask each run (with one, Fluid 1.8 fixes the mask)
    main, _, x, (y, total), values = _build(_dropout_net("upscale_in_train"), seed=0)
    runner = PartialProgram(main, [x], [y, total], [])
    xv = np.abs(XV) + 0.5  # no zeros of its own
    with dygraph.guard(fluid.CPUPlace()):
        masks = []
        for _ in range(2):
            xvar = dygraph.to_variable(xv)
            xvar.stop_gradient = False
            out, loss = runner([xvar], [], training=True)
            loss.backward()
            kept = out.numpy() != 0
            assert 0 < kept.sum() < kept.size
            np.testing.assert_allclose(out.numpy()[kept], xv[kept] / 0.6, rtol=1e-6)
            np.testing.assert_allclose(xvar.gradient(), kept / 0.6, rtol=1e-6)
            masks.append(kept)
    assert not np.array_equal(*masks)  # the random stream goes on from call to call


@pytest.mark.parametrize("implementation,scale", [("upscale_in_train", 1.0),
                                                  ("downgrade_in_infer", 0.6)])
def test_eval_mode_runs_without_dropout(implementation, scale):
    main, _, x, (y, _), values = _build(_dropout_net(implementation))
    runner = PartialProgram(main, [x], [y], [])
    with dygraph.guard(fluid.CPUPlace()):
        (out,) = runner([dygraph.to_variable(XV)], [], training=False)
        np.testing.assert_allclose(out.numpy(), XV * scale, rtol=1e-6)


def test_batch_norm_statistics_are_written_back_in_training_only():
    main, _, x, (h, loss), values = _build(_batch_norm_net)
    (train_h,), train_scope = _run_static(main, [h], values, {"x": XV})
    (eval_h,), _ = _run_static(main.clone(for_test=True), [h], values, {"x": XV})
    _, expected = _static_grads(main, loss, ["w0", "bn_scale", "bn_bias"], values, {"x": XV})
    runner = PartialProgram(main, [x], [h, loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = {p.name: p for p in _params(main, values)}
        ordered = list(params.values())
        (got,) = runner([dygraph.to_variable(XV)], ordered, training=False)[:1]
        np.testing.assert_allclose(got.numpy(), eval_h, rtol=1e-5, atol=1e-6)
        for name in ("bn_mean", "bn_var"):  # eval mode: the running statistics are read only
            np.testing.assert_array_equal(params[name].numpy(), values[name])
        got, loss = runner([dygraph.to_variable(XV)], ordered, training=True)
        np.testing.assert_allclose(got.numpy(), train_h, rtol=1e-5, atol=1e-6)
        for name in ("bn_mean", "bn_var"):
            np.testing.assert_allclose(params[name].numpy(), np.array(train_scope.get(name)),
                                       rtol=1e-6)
            assert not np.allclose(params[name].numpy(), values[name])
        loss.backward()
        assert params["bn_mean"].gradient() is None  # a statistic, not trained
        for name, grad in expected.items():
            np.testing.assert_allclose(params[name].gradient(), grad, rtol=1e-4, atol=1e-6)


def test_buffers_are_read_and_written_back():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", shape=[4])
        counter = layers.create_global_var([1], 0.0, "float32", persistable=True,
                                           name="counter")
        layers.increment(counter, 1.0, in_place=True)
        out = layers.reduce_sum(layers.elementwise_mul(x, counter))
    with pytest.raises(ValueError, match=r"reads the persistable variables \['counter'\]"):
        PartialProgram(main, [x], [out], [])
    runner = PartialProgram(main, [x], [out], [], buffers=[counter])
    with dygraph.guard(fluid.CPUPlace()):
        held = dygraph.to_variable(np.zeros([1], "float32"), name="counter")
        for step in (1.0, 2.0):
            (got,) = runner([dygraph.to_variable(XV)], [], training=True, buffers=[held])
            np.testing.assert_allclose(held.numpy(), [step])
            np.testing.assert_allclose(got.numpy(), XV.sum() * step, rtol=1e-5)


# -- training -----------------------------------------------------------------------------------
def test_an_sgd_step_matches_the_static_program_s():
    main, _, x, (_, loss), values = _build(_control_flow_net, sgd=0.1)
    _, scope = _run_static(main.train, [loss.name], values, {"x": XV})
    runner = PartialProgram(main, [x], [loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        opt = fluid.optimizer.SGD(0.1, parameter_list=params)
        (out,) = runner([dygraph.to_variable(XV)], params, training=True)
        out.backward()
        opt.minimize(out)
        for p in params:
            assert not np.allclose(p.numpy(), values[p.name])
            np.testing.assert_allclose(p.numpy(), np.array(scope.get(p.name)), rtol=1e-5,
                                       atol=1e-7, err_msg=p.name)


# -- errors -------------------------------------------------------------------------------------
def test_errors():
    main, _, x, (_, loss), values = _build(_control_flow_net)
    runner = PartialProgram(main, [x], [loss], main.all_parameters())
    with pytest.raises(RuntimeError, match="inside fluid.dygraph.guard"):
        runner([], [], training=True)
    with dygraph.guard(fluid.CPUPlace()):
        params = _params(main, values)
        xv = dygraph.to_variable(XV)
        with pytest.raises(ValueError, match=r"takes 1 inputs \['x'\], got 2"):
            runner([xv, xv], params, training=True)
        with pytest.raises(ValueError, match=r"takes 3 parameters \['w0', 'b0', 'w1'\]"):
            runner([xv], params[:2], training=True)
        with pytest.raises(ValueError, match=r"parameters\[0\] is 'b0', the program expects "
                                             r"'w0'"):
            runner([xv], [params[1], params[0], params[2]], training=True)
        with pytest.raises(TypeError, match=r"inputs\[0\] must be a dygraph variable"):
            runner([XV], params, training=True)
    with pytest.raises(ValueError, match="not a variable of the program"):
        PartialProgram(main, [x], [fluid.Program().global_block().create_var(name="y")], [])
    with pytest.raises(ValueError, match="reads the persistable variables"):
        PartialProgram(main, [x], [loss], main.all_parameters()[:2])


def test_a_while_loop_built_for_test_refuses_the_backward_pass_only():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", shape=[4])
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 2)
        _, h = layers.while_loop(lambda i, h: i < n, lambda i, h: [i + 1, h * 2.0], [i, x],
                                 is_test=True)
        out = layers.reduce_sum(h)
    runner = PartialProgram(main, [x], [out], [])
    with dygraph.guard(fluid.CPUPlace()):
        xvar = dygraph.to_variable(XV)
        xvar.stop_gradient = False
        (got,) = runner([xvar], [], training=True)
        np.testing.assert_allclose(got.numpy(), 4 * XV.sum(), rtol=1e-5)
        with pytest.raises(NotImplementedError, match="run_program.*is_test=True"):
            got.backward()


def test_eval_mode_differentiates_the_test_program():
    # a frozen batch norm (eval mode) in a model still trained: the test program's gradients
    main, _, x, (h, loss), values = _build(_batch_norm_net)
    test = main.clone(for_test=True)
    _, expected = _static_grads(test, test.global_block().var(loss.name),
                                ["w0", "bn_scale", "bn_bias"], values, {"x": XV})
    runner = PartialProgram(main, [x], [loss], main.all_parameters())
    with dygraph.guard(fluid.CPUPlace()):
        params = {p.name: p for p in _params(main, values)}
        (got,) = runner([dygraph.to_variable(XV)], list(params.values()), training=False)
        got.backward()
        for name, grad in expected.items():
            np.testing.assert_allclose(params[name].gradient(), grad, rtol=1e-5, atol=1e-7)


def test_lod_inputs_keep_their_sequences():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = layers.data("x", shape=[4], lod_level=1)
        pooled = layers.sequence_pool(x, "sum")
        out = layers.reduce_sum(layers.square(pooled))
    runner = PartialProgram(main, [x], [pooled, out], [])
    lod_x = fluid.create_lod_tensor(XV, [[1, 2]], fluid.CPUPlace())
    (expected,), _ = _run_static(main, [pooled], {}, {"x": lod_x})
    with dygraph.guard(fluid.CPUPlace()):
        xvar = dygraph.to_variable(lod_x)
        xvar.stop_gradient = False
        got, loss = runner([xvar], [], training=True)
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
        (gx,) = dygraph.grad(loss, xvar)
        # d/dx sum((x0)^2 + (x1 + x2)^2): each row gets twice its sequence's sum
        np.testing.assert_allclose(gx.numpy(), 2 * expected[[0, 1, 1]], rtol=1e-6)
