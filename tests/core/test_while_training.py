"""Training through ``layers.While`` and ``while_loop`` (``while_grad``): the gradients of
the parameters a loop reads, of the tensors it carries from step to step and of the tensor
arrays it reads and writes equal central differences; a loop trains as the same recurrence
unrolled by hand; a loop that runs no step passes its gradient through; the loops that
cannot be differentiated are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric

T = 3
XS = np.random.default_rng(0).standard_normal((T, 2, 3))
FEED = {f"x{t}": XS[t] for t in range(T)}


def _inputs():
    """The T fed steps, and an array holding them (built outside the loop)."""
    steps = [layers.data(f"x{t}", [3], dtype="float64") for t in range(T)]
    arr = layers.create_array("float64")
    for t, x in enumerate(steps):
        layers.array_write(x, layers.fill_constant([1], "int64", t), array=arr)
    return steps, arr


def _rnn_by_while(dropout: bool = False):
    """h_t = tanh(x_t Wx + h_{t-1} Wh + b) over a While loop: x_t read from an array, h
    carried by assign, every h_t written to an array; the loss reads the last state and the
    array's first item."""
    _, x_arr = _inputs()
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", T)
    mem = layers.fill_constant([2, 4], "float64", 0.0)
    mem.stop_gradient = False  # as in Fluid, a stop_gradient variable takes no gradient
    h_arr = layers.create_array("float64")
    cond = layers.less_than(i, n)
    loop = layers.While(cond)
    with loop.block():
        xt = layers.array_read(x_arr, i)
        if dropout:  # a fixed mask, so the finite differences see the same one
            xt = layers.dropout(xt, 0.5, seed=3, dropout_implementation="upscale_in_train")
        h = layers.fc([xt, mem], 4, act="tanh", param_attr=["wx", "wh"], bias_attr="b")
        layers.assign(h, mem)
        layers.array_write(h, i, array=h_arr)
        layers.increment(i, in_place=True)
        layers.less_than(i, n, cond=cond)
    first = layers.array_read(h_arr, layers.fill_constant([1], "int64", 0))
    return layers.elementwise_add(layers.mean(layers.square(mem)), layers.mean(first))


def _rnn_unrolled():
    steps, _ = _inputs()
    mem = layers.fill_constant([2, 4], "float64", 0.0)
    outs = []
    for xt in steps:
        mem = layers.fc([xt, mem], 4, act="tanh", param_attr=["wx", "wh"], bias_attr="b")
        outs.append(mem)
    return layers.elementwise_add(layers.mean(layers.square(mem)), layers.mean(outs[0]))


def _assert_grads(build, feed, params):
    got = program_grads_and_numeric(build, feed, params)
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9, err_msg=name)
        assert np.abs(analytic).max() > 1e-3, name  # the loop reached the parameter


def test_a_while_rnn_gradients_equal_central_differences():
    _assert_grads(_rnn_by_while, FEED, ["wx", "wh", "b"])


def test_the_loop_program_has_fluids_while_grad():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss = _rnn_by_while()
        fluid.append_backward(loss)
    ops = main.global_block().ops
    loop = next(op for op in ops if op.type == "while")
    grad = next(op for op in ops if op.type == "while_grad")
    assert grad.input("StepScopes") == loop.output("StepScopes")
    assert set(grad.input("X")) == set(loop.input("X"))
    assert {"wx@GRAD", "wh@GRAD", "b@GRAD"} <= set(grad.output("X@GRAD"))
    body = main.block(grad.attr("sub_block"))
    assert body.ops[0].type == "while_step_state"  # the last forward op's values first
    assert {"read_from_array_grad", "write_to_array_grad", "mul_grad"} <= \
        {op.type for op in body.ops}


def test_dropout_in_the_loop_uses_each_steps_own_mask():
    _assert_grads(lambda: _rnn_by_while(dropout=True), FEED, ["wx", "wh", "b"])


def test_a_loop_trains_as_the_recurrence_unrolled():
    def train(build):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 7
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            loss = build()
            fluid.optimizer.Adam(0.05).minimize(loss)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        losses = [float(exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)[0][0])
                  for _ in range(5)]
        return losses, {p: np.array(scope.vars[p]) for p in ("wx", "wh", "b")}

    loop_losses, loop_params = train(_rnn_by_while)
    flat_losses, flat_params = train(_rnn_unrolled)
    np.testing.assert_allclose(loop_losses, flat_losses, rtol=1e-10)
    assert loop_losses[-1] < loop_losses[0]
    for name in loop_params:
        np.testing.assert_allclose(loop_params[name], flat_params[name], rtol=1e-10)


def _while_loop_net(steps: int):
    x = layers.data("x0", [3], dtype="float64")
    h0 = layers.fc(x, 3, param_attr="w0", bias_attr=False)
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", steps)

    def body(i, h):
        gate = layers.sigmoid(layers.fc(h, 3, param_attr="wg", bias_attr=False))
        return [layers.increment(i, in_place=False), layers.elementwise_mul(h, gate)]

    _, h = layers.while_loop(lambda i, h: layers.less_than(i, n), body, [i, h0])
    return layers.mean(layers.square(h))


@pytest.mark.parametrize("steps", [0, 1, 4])
def test_while_loop_gradients_including_a_loop_of_no_step(steps):
    got = program_grads_and_numeric(lambda: _while_loop_net(steps), {"x0": XS[0]},
                                    ["w0", "wg"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9, err_msg=name)
    assert (np.abs(got["wg"][0]).max() == 0) == (steps == 0)
    assert np.abs(got["w0"][0]).max() > 1e-3  # through the loop, or past it when it never ran


def test_a_cond_inside_the_loop_trains():
    def build():
        x = layers.data("x0", [3], dtype="float64")
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 3)
        one = layers.fill_constant([1], "int64", 1)

        def body(i, h):
            odd = layers.equal(layers.elementwise_mod(i, layers.fill_constant([1], "int64", 2)),
                               one)
            new = layers.cond(odd, lambda: layers.fc(h, 3, act="tanh", param_attr="wa"),
                              lambda: layers.scale(layers.fc(h, 3, param_attr="wb"), 0.5))
            return [layers.increment(i, in_place=False), new]

        h0 = layers.fc(x, 3, param_attr="w0", bias_attr=False)
        _, h = layers.while_loop(lambda i, h: layers.less_than(i, n), body, [i, h0])
        return layers.mean(layers.square(h))

    _assert_grads(build, {"x0": XS[0]}, ["w0", "wa", "wb"])


def test_a_loss_that_reads_only_the_array_a_loop_filled():
    """The carried state h is never read after the loop: its gradient enters the last step
    as zeros, and each step still passes the array item's gradient on through h."""
    x_value = np.random.default_rng(8).standard_normal((2, 3))

    def build():
        x = layers.data("x", [2, 3], dtype="float64", append_batch_size=False)
        w = layers.create_parameter([3, 3], "float64", name="w")
        h = layers.fill_constant([2, 3], "float64", 0.0)
        h.stop_gradient = False
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 3)
        arr = layers.create_array("float64")
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            new = layers.tanh(layers.elementwise_add(layers.matmul(h, w), x))
            layers.assign(new, h)
            layers.array_write(new, i, array=arr)
            layers.increment(i, in_place=True)
            layers.less_than(i, n, cond=cond)
        first = layers.array_read(arr, layers.fill_constant([1], "int64", 0))
        last = layers.array_read(arr, layers.fill_constant([1], "int64", 2))
        return layers.reduce_sum(layers.square(last) + first)

    analytic, numeric = program_grads_and_numeric(build, {"x": x_value}, ["w"])["w"]
    assert np.abs(analytic).max() > 0
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


def test_loops_that_cannot_be_differentiated_are_refused_by_name():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        i = layers.fill_constant([1], "int64", 0)
        h = layers.fc(x, 3)
        loop = layers.While(layers.less_than(i, layers.fill_constant([1], "int64", 2)),
                            is_test=True)
        with loop.block():
            layers.assign(layers.fc(h, 3, param_attr="w1"), h)
            layers.increment(i, in_place=True)
        with pytest.raises(NotImplementedError, match=r"While\(is_test=True\) loop"):
            fluid.append_backward(layers.mean(h))
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        i = layers.fill_constant([1], "int64", 0)
        h = layers.tanh(layers.fc(x, 3))  # tanh's gradient reads the value the loop replaces
        cond = layers.less_than(i, layers.fill_constant([1], "int64", 2))
        loop = layers.While(cond)
        with loop.block():
            layers.assign(layers.fc(h, 3, param_attr="w2"), h)
            layers.increment(i, in_place=True)
            layers.less_than(i, layers.fill_constant([1], "int64", 2), cond=cond)
        with pytest.raises(NotImplementedError, match="overwrites 'tanh_0.tmp_0': the "
                                                      "gradient of the 'tanh' op .* state = "
                                                      "layers.assign"):
            fluid.append_backward(layers.mean(h))
