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


def _fed_grads_and_numeric(build, feed: dict, fed: list[str], params: tuple[str, ...] = (),
                           eps: float = 1e-6) -> dict:
    """The gradients append_backward gives the fed inputs ``fed`` (``build`` makes them
    ``stop_gradient=False``) and the parameters ``params``, with central differences of the
    loss (float64 throughout)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss = build()
        pairs = fluid.append_backward(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for p in params:
        scope.vars[p] = np.array(scope.vars[p], np.float64)
    grad_of = {p.name: g.name for p, g in pairs} | {n: n + "@GRAD" for n in fed}
    names = [*fed, *params]
    fetched = exe.run(main, feed=feed, fetch_list=[grad_of[n] for n in names], scope=scope)

    def loss_at(name: str, value: np.ndarray) -> float:
        if name in feed:
            return float(exe.run(main, feed={**feed, name: value}, fetch_list=[loss],
                                 scope=scope)[0].sum())
        scope.vars[name] = value
        return float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].sum())

    out = {}
    for name, analytic in zip(names, fetched, strict=True):
        base = np.array(feed[name] if name in feed else scope.vars[name], np.float64)
        numeric = np.zeros_like(base)
        for j in range(base.size):
            for sign in (1, -1):
                bumped = base.copy()
                bumped.flat[j] += sign * eps
                numeric.flat[j] += sign * loss_at(name, bumped) / (2 * eps)
        if name not in feed:
            scope.vars[name] = base
        out[name] = (np.array(analytic), numeric)
    return out


def _assert_fed_grads(build, feed, fed, params=()):
    got = _fed_grads_and_numeric(build, feed, fed, params)
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8, err_msg=name)
    return got


def _counter_loop(dtype: str = "float64"):
    """Paddle 1.8's TestApiWhileLoop_Backward: ``x = i * i; i = i + 1`` while ``i < 11``."""
    i = fluid.data("i", [1], dtype)
    x = fluid.data("x", [1], dtype)
    i.stop_gradient = x.stop_gradient = False
    eleven = layers.fill_constant([1], dtype, 11)

    def body(i, x):
        x = layers.elementwise_mul(x=i, y=i)
        return [layers.increment(i), x]

    out = layers.while_loop(lambda i, x: layers.less_than(i, eleven), body, [i, x])
    return layers.mean(out[1])


def test_paddles_while_loop_backward_gives_the_exact_gradient():
    """Non regression: i's gradient was 0 (increment had no gradient, so the gradient of the
    later steps stopped at the counter). From i = 1 the loop runs ten steps and the last x
    is i_9 * i_9 with i_9 = i + 9: d mean / d i = 2 * 10 = 20. Fluid 1.8 gives 110 (its test
    expects it): its while_grad adds the outer gradient of x, which the body overwrites, into
    every step, so it sums 2 * i_k over the ten steps; dask_fluid gives the exact one
    (docs/ops.md)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        mean = _counter_loop("float32")
        fluid.append_backward(mean)
    exe = fluid.Executor(fluid.CPUPlace())
    got, i_grad, x_grad = exe.run(main, feed={"i": np.ones(1, "float32"),
                                              "x": np.ones(1, "float32")},
                                  fetch_list=[mean.name, "i@GRAD", "x@GRAD"])
    np.testing.assert_allclose(got, [100.0])
    np.testing.assert_allclose(i_grad, [20.0])
    np.testing.assert_allclose(x_grad, [0.0])  # the loop overwrites x before reading it
    # i = 1 is where the step count changes (i < 11); central differences away from it
    grads = _assert_fed_grads(_counter_loop, {"i": np.array([1.25]), "x": np.array([1.0])},
                              ["i", "x"])
    np.testing.assert_allclose(grads["i"][0], [2 * 10.25])


def test_a_sum_carried_over_the_steps():
    """x = x + i * i over the steps from the fed i and x: both reach the loss."""
    def build():
        i = fluid.data("i", [1], "float64")
        x = fluid.data("x", [1], "float64")
        i.stop_gradient = x.stop_gradient = False
        n = layers.fill_constant([1], "float64", 5)

        def body(i, x):
            x = layers.elementwise_add(x, layers.elementwise_mul(i, i))
            return [layers.increment(i), x]

        _, x = layers.while_loop(lambda i, x: layers.less_than(i, n), body, [i, x])
        return layers.mean(layers.square(x))

    _assert_fed_grads(build, {"i": np.array([1.5]), "x": np.array([0.3])}, ["i", "x"])


def test_a_counter_the_body_reads_after_incrementing_it():
    """The body reads i after its last write (increment in place, then i * i), and the loss
    reads the last i too: that value's gradient from the later steps and the reader's add
    up."""
    def build():
        i = fluid.data("i", [1], "float64")
        x = fluid.data("x", [1], "float64")
        i.stop_gradient = x.stop_gradient = False
        n = layers.fill_constant([1], "float64", 5)
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            layers.increment(i, in_place=True)
            layers.assign(layers.elementwise_add(x, layers.elementwise_mul(i, i)), x)
            layers.less_than(i, n, cond=cond)
        return layers.elementwise_add(layers.mean(layers.square(x)), layers.mean(i))

    _assert_fed_grads(build, {"i": np.array([1.5]), "x": np.array([0.3])}, ["i", "x"])


def test_a_parameter_used_at_every_step_and_the_fed_start():
    def build():
        x = fluid.data("x", [2, 3], "float64")
        x.stop_gradient = False
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 3)

        def body(i, h):
            h = layers.fc(h, 3, act="tanh", param_attr="w", bias_attr="b")
            return [layers.increment(i, in_place=False), h]

        _, h = layers.while_loop(lambda i, h: layers.less_than(i, n), body, [i, x])
        return layers.mean(layers.square(h))

    got = _assert_fed_grads(build, {"x": XS[0]}, ["x"], ("w", "b"))
    assert all(np.abs(g[0]).max() > 1e-3 for g in got.values())


def test_a_loop_whose_steps_depend_on_a_fed_value():
    """while x < 10: x = x * s; from x = 1.3, s = 1.7 that is 4 steps, unchanged by the
    small differences."""
    def build():
        x = fluid.data("x", [1], "float64")
        s = fluid.data("s", [1], "float64")
        x.stop_gradient = s.stop_gradient = False
        limit = layers.fill_constant([1], "float64", 10.0)
        (y,) = layers.while_loop(lambda x: layers.less_than(x, limit),
                                 lambda x: [layers.elementwise_mul(x, s)], [x])
        return layers.mean(layers.square(y))

    got = _assert_fed_grads(build, {"x": np.array([1.3]), "s": np.array([1.7])}, ["x", "s"])
    # y = x s^4: d(y^2)/dx = 2 y s^4
    y = 1.3 * 1.7 ** 4
    np.testing.assert_allclose(got["x"][0], [2 * y * 1.7 ** 4])


def test_nested_while_loops():
    def build():
        x = fluid.data("x", [2, 3], "float64")
        x.stop_gradient = False
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 2)
        m = layers.fill_constant([1], "int64", 3)

        def inner(j, h):
            h = layers.fc(h, 3, act="tanh", param_attr="w", bias_attr=False)
            return [layers.increment(j, in_place=False), h]

        def body(i, h):
            j = layers.fill_constant([1], "int64", 0)
            _, h2 = layers.while_loop(lambda j, h: layers.less_than(j, m), inner, [j, h])
            return [layers.increment(i, in_place=False), layers.elementwise_mul(h2, h)]

        _, h = layers.while_loop(lambda i, h: layers.less_than(i, n), body, [i, x])
        return layers.mean(layers.square(h))

    got = _assert_fed_grads(build, {"x": XS[0]}, ["x"], ("w",))
    assert all(np.abs(g[0]).max() > 1e-4 for g in got.values())
