"""DynamicRNN (op ``dynamic_recurrent`` and its gradient): the forward against a loop over each
sequence on its own, gradients of the weights, the step and static inputs and the memories'
inits by finite differences through the executor, equality with dynamic_gru, training, and
the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid

from .numeric_grad import numeric_gradient

D, H = 3, 4
LENGTHS = [2, 0, 4, 1, 4]          # an empty sequence, and a tie for the longest
ENC_LENGTHS = [3, 1, 2, 2, 1]


def _build(need_reorder=True, dtype="float64"):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype=dtype, lod_level=1)
        enc = fluid.layers.data(name="enc", shape=[H], dtype=dtype, lod_level=1)
        h0 = fluid.layers.data(name="h0", shape=[H], dtype=dtype)
        r = fluid.layers.data(name="r", shape=[H], dtype=dtype, lod_level=1)
        for v in (x, enc, h0):
            v.stop_gradient = False
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(x)
            source = drnn.static_input(enc)
            prev = drnn.memory(init=h0, need_reorder=need_reorder)
            count = drnn.memory(shape=[1], value=0.5, dtype=dtype)
            # attention-like read of the whole source sequence: sum_j enc_j * prev (the
            # LoD input first: an output shares the LoD of X only, as in Fluid)
            context = fluid.layers.sequence_pool(
                fluid.layers.elementwise_mul(source, fluid.layers.sequence_expand(prev, source)),
                "sum")
            h = fluid.layers.fc([word, prev, context], H, act="tanh",
                                param_attr=[fluid.ParamAttr(name=n) for n in ("wx", "wh", "wc")],
                                bias_attr=fluid.ParamAttr(name="b"))
            new_count = fluid.layers.scale(count, 1.0, bias=1.0)
            drnn.update_memory(prev, h)
            drnn.update_memory(count, new_count)
            drnn.output(fluid.layers.elementwise_mul(h, new_count, axis=0), h)
        scaled, hidden = drnn()
        loss = (fluid.layers.reduce_sum(fluid.layers.elementwise_mul(scaled, r))
                + fluid.layers.reduce_sum(fluid.layers.elementwise_mul(hidden, r)))
    return main, startup, scaled, hidden, loss


def _lod(rng, lengths, width):
    return rng.standard_normal((sum(lengths), width)), lengths


def _feed(arrays):
    return {k: fluid.create_lod_tensor(v[0], [v[1]], fluid.CPUPlace()) if isinstance(v, tuple)
            else v for k, v in arrays.items()}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": _lod(rng, LENGTHS, D), "enc": _lod(rng, ENC_LENGTHS, H),
            "h0": rng.standard_normal((len(LENGTHS), H)), "r": _lod(rng, LENGTHS, H)}


def _rank_order(lengths):
    return sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep order


def _reference(data, params, need_reorder):
    """Each sequence on its own, in its own order."""
    x, lengths = data["x"]
    enc, enc_lengths = data["enc"]
    starts, enc_starts = np.cumsum([0, *lengths]), np.cumsum([0, *enc_lengths])
    rank = _rank_order(lengths)
    scaled, hidden = np.zeros((len(x), H)), np.zeros((len(x), H))
    for i, n in enumerate(lengths):
        # without reordering, init row k belongs to the k-th longest sequence
        h = data["h0"][i] if need_reorder else data["h0"][rank.index(i)]
        count = 0.5
        source = enc[enc_starts[i]:enc_starts[i + 1]]
        for t in range(n):
            context = (h * source).sum(axis=0)
            row = x[starts[i] + t]
            h = np.tanh(row @ params["wx"] + h @ params["wh"] + context @ params["wc"]
                        + params["b"])
            count += 1.0
            scaled[starts[i] + t], hidden[starts[i] + t] = h * count, h
    return scaled, hidden


@pytest.mark.parametrize("need_reorder", [True, False])
def test_forward_matches_a_loop_over_each_sequence(need_reorder):
    main, startup, scaled, hidden, _ = _build(need_reorder)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    data = _data()
    got_scaled, got_hidden = exe.run(main, feed=_feed(data), fetch_list=[scaled, hidden],
                                     scope=scope, return_numpy=False)
    params = {n: np.asarray(scope.get(n)) for n in ("wx", "wh", "wc", "b")}
    ref_scaled, ref_hidden = _reference(data, params, need_reorder)
    np.testing.assert_allclose(np.array(got_scaled), ref_scaled, rtol=1e-12)
    np.testing.assert_allclose(np.array(got_hidden), ref_hidden, rtol=1e-12)
    # the outputs carry the step input's LoD
    assert got_hidden.recursive_sequence_lengths() == [LENGTHS]


@pytest.mark.parametrize("need_reorder", [True, False])
def test_gradients_match_finite_differences(need_reorder):
    main, startup, _, _, loss = _build(need_reorder)
    with fluid.program_guard(main, startup):
        pairs = fluid.backward.append_backward(loss)
    types = [op.type for op in main.global_block().ops]
    assert types.count("dynamic_recurrent") == 1 and types.count("dynamic_recurrent_grad") == 1
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    data = _data(1)
    params = sorted(p.name for p, _ in pairs)
    assert params == ["b", "wc", "wh", "wx"]
    names = [*(f"{p}@GRAD" for p in params), "x@GRAD", "enc@GRAD", "h0@GRAD"]
    fetched = exe.run(main, feed=_feed(data), scope=scope, fetch_list=names,
                      return_numpy=False)
    # the gradients of the LoD inputs keep their LoD
    assert fetched[-3].recursive_sequence_lengths() == [LENGTHS]
    assert fetched[-2].recursive_sequence_lengths() == [ENC_LENGTHS]
    analytic = {n: np.array(v) for n, v in zip(names, fetched, strict=True)}

    def f() -> float:
        value, = exe.run(main, feed=_feed(data), fetch_list=[loss], scope=scope)
        return float(value[0])

    for name in params:
        num = numeric_gradient(f, lambda n=name: scope.get(n), lambda v, n=name: scope.set(n, v))
        np.testing.assert_allclose(analytic[f"{name}@GRAD"], num, rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    for name in ("x", "enc", "h0"):
        lod = isinstance(data[name], tuple)

        def get(n=name, lod=lod):
            return data[n][0] if lod else data[n]

        def put(v, n=name, lod=lod):
            data[n] = (v, data[n][1]) if lod else v

        np.testing.assert_allclose(analytic[f"{name}@GRAD"], numeric_gradient(f, get, put),
                                   rtol=1e-6, atol=1e-7, err_msg=name)


def test_a_gru_unit_block_equals_dynamic_gru_with_the_same_weights():
    # dynamic_gru runs its own kernel over the same sequences: equal hidden states, loss and
    # weight gradients show the recurrence, its order and its gradient
    rng = np.random.default_rng(3)
    d, lengths = 4, [3, 1, 5, 2]
    x = rng.standard_normal((sum(lengths), 3 * d)).astype(np.float32)
    attrs = dict(param_attr=fluid.ParamAttr(name="gw"), bias_attr=fluid.ParamAttr(name="gb"))

    def build(dynamic_rnn):
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 5
        with fluid.program_guard(main, startup):
            seq = fluid.layers.data(name="seq", shape=[3 * d], dtype="float32", lod_level=1)
            if dynamic_rnn:
                drnn = fluid.layers.DynamicRNN()
                with drnn.block():
                    xt = drnn.step_input(seq)
                    prev = drnn.memory(shape=[d])
                    h, _, _ = fluid.layers.gru_unit(xt, prev, 3 * d, **attrs)
                    drnn.update_memory(prev, h)
                    drnn.output(h)
                hs = drnn()
            else:
                hs = fluid.layers.dynamic_gru(seq, d, **attrs)
            loss = fluid.layers.reduce_mean(fluid.layers.square(hs))
            fluid.backward.append_backward(loss)
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        scope.set("gb", np.linspace(-1, 1, 3 * d, dtype=np.float32).reshape(1, -1))
        feed = {"seq": fluid.create_lod_tensor(x, [lengths], fluid.CPUPlace())}
        got = exe.run(main, feed=feed, fetch_list=[hs, loss, "gw@GRAD", "gb@GRAD"],
                      scope=scope, return_numpy=False)
        return [np.array(v) for v in got]

    for a, b in zip(build(True), build(False), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)


def test_a_dynamic_rnn_learns_word_order_over_sequences_of_any_length():
    # class 1 iff word 1 comes before word 2 somewhere in a sequence of 2 to 6 words
    rng = np.random.default_rng(9)
    n = 48
    lengths = rng.integers(2, 7, n).tolist()
    labels = np.arange(n) % 2
    seqs = []
    for i, length in enumerate(lengths):
        ids = rng.integers(3, 8, length)
        a, b = sorted(rng.choice(length, 2, replace=False))
        ids[a], ids[b] = (1, 2) if labels[i] else (2, 1)
        seqs.append(ids)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 2
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[8, 8])
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            w = drnn.step_input(emb)
            prev = drnn.memory(shape=[16])
            h = fluid.layers.fc([w, prev], 16, act="tanh")
            drnn.update_memory(prev, h)
            drnn.output(h)
        last = fluid.layers.sequence_last_step(drnn())
        predict = fluid.layers.fc(last, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        acc = fluid.layers.accuracy(predict, label)
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"words": fluid.create_lod_tensor(np.concatenate(seqs).reshape(-1, 1), [lengths],
                                             fluid.CPUPlace()),
            "label": labels.reshape(-1, 1).astype(np.int64)}
    for _ in range(200):
        a, = exe.run(main, feed=feed, fetch_list=[acc], scope=scope)
    assert float(a[0]) == 1.0


def test_errors_name_what_is_wrong():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float32", lod_level=1)
        drnn = fluid.layers.DynamicRNN()
        with pytest.raises(ValueError, match="step_input must be called inside 'with "
                                             "rnn.block"):
            drnn.step_input(x)
        with pytest.raises(ValueError, match="is made inside the step block or already an "
                                             "input of it"):
            with drnn.block():
                drnn.step_input(x)
                drnn.static_input(x)
        drnn = fluid.layers.DynamicRNN()
        with pytest.raises(ValueError, match="needs a step_input before it"):
            with drnn.block():
                drnn.memory(shape=[4])
        drnn = fluid.layers.DynamicRNN()
        with pytest.raises(NotImplementedError, match="only level 0"):
            with drnn.block():
                drnn.step_input(x, level=1)
        drnn = fluid.layers.DynamicRNN()
        with pytest.raises(ValueError, match="never updated"):
            with drnn.block():
                w = drnn.step_input(x)
                drnn.memory(shape=[4])
                drnn.output(w)


def _run_one(feed, **kwargs):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float64", lod_level=1)
        h0 = fluid.layers.data(name="h0", shape=[D], dtype="float64")
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            w = drnn.step_input(x)
            prev = drnn.memory(init=h0, **kwargs)
            h = fluid.layers.elementwise_add(w, prev)
            drnn.update_memory(prev, h)
            drnn.output(h)
        out = drnn()
    exe = fluid.Executor()
    exe.run(startup)
    return exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)


def test_running_sums_and_the_errors_of_bad_feeds():
    rows = np.arange(12, dtype=np.float64).reshape(4, 3)
    x = fluid.create_lod_tensor(rows, [[3, 1]], fluid.CPUPlace())
    out, = _run_one({"x": x, "h0": np.zeros((2, 3))}, need_reorder=True)
    np.testing.assert_array_equal(np.array(out), [rows[0], rows[0] + rows[1],
                                                  rows[0] + rows[1] + rows[2], rows[3]])
    with pytest.raises(fluid.ExecutionError, match="step input 'x' has no LoD; feed it as a "
                                                   "LoD tensor"):
        _run_one({"x": rows, "h0": np.zeros((2, 3))})
    with pytest.raises(fluid.ExecutionError, match=r"init 'h0' has 1 rows; it needs one per "
                                                   r"sequence \(2\)"):
        _run_one({"x": x, "h0": np.zeros((1, 3))}, need_reorder=True)


def test_step_inputs_with_different_sequence_lengths_are_refused():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        a = fluid.layers.data(name="a", shape=[2], dtype="float64", lod_level=1)
        b = fluid.layers.data(name="b", shape=[2], dtype="float64", lod_level=1)
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            h = fluid.layers.elementwise_add(drnn.step_input(a), drnn.step_input(b))
            drnn.output(h)
        out = drnn()
    exe = fluid.Executor()
    exe.run(startup)
    feed = {"a": fluid.create_lod_tensor(np.ones((3, 2)), [[2, 1]], fluid.CPUPlace()),
            "b": fluid.create_lod_tensor(np.ones((3, 2)), [[1, 1, 1]], fluid.CPUPlace())}
    with pytest.raises(fluid.ExecutionError, match="step inputs 'a' and 'b' must have "
                                                   "sequences of the same lengths"):
        exe.run(main, feed=feed, fetch_list=[out], return_numpy=False)


def test_a_static_input_without_lod_is_one_row_per_sequence():
    # Fluid's reorder_lod_tensor_by_rank takes "a Tensor without lod, such as the output of
    # sequence_pool_op": row k belongs to sequence k, and in the step it has no LoD
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[H], dtype="float64", lod_level=1)
        ctx = fluid.layers.data(name="ctx", shape=[H], dtype="float64")
        r = fluid.layers.data(name="r", shape=[H], dtype="float64", lod_level=1)
        ctx.stop_gradient = False
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            word = drnn.step_input(x)
            c = drnn.static_input(ctx)
            drnn.output(fluid.layers.elementwise_mul(word, fluid.layers.tanh(c)))
        out = drnn()
        loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, r))
        fluid.backward.append_backward(loss)
    rng = np.random.default_rng(3)
    data = {"x": _lod(rng, LENGTHS, H), "ctx": rng.standard_normal((len(LENGTHS), H)),
            "r": _lod(rng, LENGTHS, H)}
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got, grad = exe.run(main, feed=_feed(data), fetch_list=[out, "ctx@GRAD"], scope=scope,
                        return_numpy=False)
    rows = np.repeat(np.arange(len(LENGTHS)), LENGTHS)  # the sequence of each step row
    np.testing.assert_allclose(np.array(got), data["x"][0] * np.tanh(data["ctx"][rows]),
                               rtol=1e-12)
    assert got.recursive_sequence_lengths() == [LENGTHS]

    def f() -> float:
        value, = exe.run(main, feed=_feed(data), fetch_list=[loss], scope=scope)
        return float(value[0])

    def put(v):
        data["ctx"] = v

    np.testing.assert_allclose(np.array(grad), numeric_gradient(f, lambda: data["ctx"], put),
                               rtol=1e-6, atol=1e-7)
    data["ctx"] = data["ctx"][:3]
    with pytest.raises(fluid.ExecutionError, match=r"static input 'ctx' has 3 rows \(no LoD"):
        exe.run(main, feed=_feed(data), fetch_list=[loss], scope=scope)
