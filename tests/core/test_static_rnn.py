"""StaticRNN (op ``recurrent`` and its gradient): the forward against a numpy loop, gradients
of the weights, the step inputs and the initial memories by finite differences through the
executor, equality with the same cell unrolled by hand, training, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid

from .numeric_grad import numeric_gradient

T, N, D, H = 3, 2, 3, 4


def _build(dtype="float64", with_init=True, second_memory=True):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[T, N, D], dtype=dtype, append_batch_size=False)
        x.stop_gradient = False
        h0 = fluid.layers.data(name="h0", shape=[N, H], dtype=dtype, append_batch_size=False)
        h0.stop_gradient = False
        r = fluid.layers.data(name="r", shape=[T, N, H], dtype=dtype, append_batch_size=False)
        rnn = fluid.layers.StaticRNN()
        with rnn.step():
            word = rnn.step_input(x)
            prev = (rnn.memory(init=h0) if with_init
                    else rnn.memory(shape=[-1, H], batch_ref=word))
            h = fluid.layers.fc([word, prev], H, act="tanh",
                                param_attr=[fluid.ParamAttr(name="wx"),
                                            fluid.ParamAttr(name="wh")],
                                bias_attr=fluid.ParamAttr(name="b"))
            rnn.update_memory(prev, h)
            if second_memory:  # a running sum of the hidden states, init_value 0.5
                acc = rnn.memory(shape=[-1, H], batch_ref=word, init_value=0.5)
                new_acc = fluid.layers.elementwise_add(acc, h)
                rnn.update_memory(acc, new_acc)
                rnn.step_output(fluid.layers.elementwise_mul(new_acc, h))
            # h is a step output and a memory's new value: its gradient has both parts
            rnn.step_output(h)
        outs = rnn()
        out = outs[0] if second_memory else outs
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, r))
        if second_memory:
            loss = loss + fluid.layers.reduce_sum(fluid.layers.elementwise_mul(outs[1], r))
    return main, startup, out, loss


def _reference(x, h0, wx, wh, b, second_memory=True):
    h, acc, outs = h0, np.full_like(h0, 0.5), []
    for t in range(x.shape[0]):
        h = np.tanh(x[t] @ wx + h @ wh + b)
        acc = acc + h
        outs.append(acc * h if second_memory else h)
    return np.stack(outs)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((T, N, D)), "h0": rng.standard_normal((N, H)),
            "r": rng.standard_normal((T, N, H))}


def test_forward_matches_a_loop_over_the_steps():
    main, startup, out, _ = _build()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _data()
    got, = exe.run(main, feed=feed, fetch_list=[out], scope=scope)
    assert got.shape == (T, N, H)
    ref = _reference(feed["x"], feed["h0"], *(np.asarray(scope.get(n)) for n in ("wx", "wh", "b")))
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_a_memory_without_init_starts_at_its_init_value():
    main, startup, out, _ = _build(with_init=False, second_memory=False)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _data()
    got, = exe.run(main, feed={"x": feed["x"], "r": feed["r"]}, fetch_list=[out], scope=scope)
    params = [np.asarray(scope.get(n)) for n in ("wx", "wh", "b")]
    ref = _reference(feed["x"], np.zeros((N, H)), *params, second_memory=False)
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_gradients_match_finite_differences():
    main, startup, _, loss = _build()
    with fluid.program_guard(main, startup):
        pairs = fluid.backward.append_backward(loss)
    types = [op.type for op in main.global_block().ops]
    assert types.count("recurrent") == 1 and types.count("recurrent_grad") == 1
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = _data(1)
    grad_names = {p.name: g.name for p, g in pairs}
    names = ["wx", "wh", "b", "x@GRAD", "h0@GRAD"]
    fetched = exe.run(main, feed=feed, scope=scope,
                      fetch_list=[grad_names["wx"], grad_names["wh"], grad_names["b"],
                                  "x@GRAD", "h0@GRAD"])
    analytic = dict(zip(names, fetched, strict=True))

    def f() -> float:
        value, = exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
        return float(value[0])

    for name in ("wx", "wh", "b"):
        num = numeric_gradient(f, lambda n=name: scope.get(n), lambda v, n=name: scope.set(n, v))
        np.testing.assert_allclose(analytic[name], num, rtol=1e-6, atol=1e-7, err_msg=name)
    for name in ("x", "h0"):
        def put(v, n=name):
            feed[n] = v
        num = numeric_gradient(f, lambda n=name: feed[n], put)
        np.testing.assert_allclose(analytic[f"{name}@GRAD"], num, rtol=1e-6, atol=1e-7,
                                   err_msg=name)


def test_a_gru_unit_step_equals_the_cell_unrolled_by_hand():
    # the same weights in a StaticRNN and in a Python loop of gru_unit ops: equal losses and
    # equal weight gradients, so the recurrent gradient sums the steps as the unrolled graph
    rng = np.random.default_rng(4)
    steps, batch, d = 4, 3, 5
    x = rng.standard_normal((steps, batch, 3 * d)).astype(np.float32)
    attrs = dict(param_attr=fluid.ParamAttr(name="gw"), bias_attr=fluid.ParamAttr(name="gb"))

    def build(static):
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 5
        with fluid.program_guard(main, startup):
            seq = fluid.layers.data(name="seq", shape=[steps, batch, 3 * d], dtype="float32",
                                    append_batch_size=False)
            if static:
                rnn = fluid.layers.StaticRNN()
                with rnn.step():
                    xt = rnn.step_input(seq)
                    prev = rnn.memory(shape=[-1, d], batch_ref=xt)
                    h, _, _ = fluid.layers.gru_unit(xt, prev, 3 * d, **attrs)
                    rnn.update_memory(prev, h)
                    rnn.step_output(h)
                hs = rnn()
            else:
                parts = fluid.layers.split(seq, steps, dim=0)
                h = fluid.layers.fill_constant_batch_size_like(
                    parts[0], [-1, d], "float32", 0.0, input_dim_idx=1)
                outs = []
                for p in parts:
                    h, _, _ = fluid.layers.gru_unit(fluid.layers.squeeze(p, [0]), h, 3 * d,
                                                    **attrs)
                    outs.append(h)
                hs = fluid.layers.stack(outs)
            loss = fluid.layers.reduce_mean(fluid.layers.square(hs))
            fluid.backward.append_backward(loss)
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        scope.set("gb", np.linspace(-1, 1, 3 * d, dtype=np.float32).reshape(1, -1))
        return exe.run(main, feed={"seq": x}, fetch_list=[hs, loss, "gw@GRAD", "gb@GRAD"],
                       scope=scope)

    for a, b in zip(build(True), build(False), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)


def test_a_static_rnn_learns_to_count_ones():
    # regression target: how many of the T inputs were 1 -- needs the memory to carry a count
    rng = np.random.default_rng(2)
    steps, batch = 5, 64
    bits = rng.integers(0, 2, (steps, batch, 1)).astype(np.float32)
    target = bits.sum(axis=0)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[steps, batch, 1], dtype="float32",
                              append_batch_size=False)
        y = fluid.layers.data(name="y", shape=[batch, 1], dtype="float32",
                              append_batch_size=False)
        rnn = fluid.layers.StaticRNN()
        with rnn.step():
            bit = rnn.step_input(x)
            prev = rnn.memory(shape=[-1, 8], batch_ref=bit)
            h = fluid.layers.fc([bit, prev], 8, act="relu")
            rnn.update_memory(prev, h)
            rnn.step_output(h)
        hs = rnn()
        last = fluid.layers.squeeze(fluid.layers.slice(hs, [0], [steps - 1], [steps]), [0])
        pred = fluid.layers.fc(last, 1)
        loss = fluid.layers.reduce_mean(fluid.layers.square(pred - y))
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": bits, "y": target}, fetch_list=[loss],
                            scope=scope)[0][0]) for _ in range(300)]
    assert losses[-1] < 0.02 * losses[0], (losses[0], losses[-1])


def test_errors_name_what_is_wrong():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[T, N, D], dtype="float32",
                              append_batch_size=False)
        z = fluid.layers.data(name="z", shape=[T + 1, N, D], dtype="float32",
                              append_batch_size=False)
        rnn = fluid.layers.StaticRNN()
        with pytest.raises(ValueError, match=r"step_input must be called inside"):
            rnn.step_input(x)
        with pytest.raises(ValueError, match="call rnn\\(\\) after"):
            rnn()
        with pytest.raises(ValueError, match="never updated"):
            with rnn.step():
                w = rnn.step_input(x)
                rnn.memory(shape=[-1, H], batch_ref=w)
                rnn.step_output(w)
        rnn = fluid.layers.StaticRNN()
        with pytest.raises(ValueError, match="every step input needs 3 time steps"):
            with rnn.step():
                rnn.step_input(x)
                rnn.step_input(z)
        rnn = fluid.layers.StaticRNN()
        with pytest.raises(ValueError, match="is made inside the step block"):
            with rnn.step():
                rnn.step_input(fluid.layers.scale(x, 2.0))
        rnn = fluid.layers.StaticRNN()
        with pytest.raises(ValueError, match="is not a memory of this StaticRNN"):
            with rnn.step():
                w = rnn.step_input(x)
                rnn.update_memory(w, w)
        rnn = fluid.layers.StaticRNN()
        with pytest.raises(ValueError, match="needs init, or shape and batch_ref"):
            with rnn.step():
                rnn.memory()
