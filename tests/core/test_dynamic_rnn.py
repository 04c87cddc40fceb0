"""DynamicRNN (op ``dynamic_recurrent`` and its gradient): the forward against a loop over each
sequence on its own, gradients of the weights, the step and static inputs and the memories'
inits by finite differences through the executor, equality with dynamic_gru, training, the
errors; and the same for nested (2-level LoD) step inputs, with the lod_level each part has
at build time and a DynamicRNN inside a DynamicRNN."""

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
    _assert_finite_differences(exe, main, scope, loss, _feed, data, params,
                               dict(zip(names, fetched, strict=True)))


def _assert_finite_differences(exe, main, scope, loss, feed_of, data, params, analytic):
    """The fetched ``analytic`` gradients of ``params`` (in ``scope``) and of the fed ``x``,
    ``enc`` and ``h0`` (in ``data``, fed through ``feed_of``) equal central differences of
    the loss."""
    def f() -> float:
        value, = exe.run(main, feed=feed_of(data), fetch_list=[loss], scope=scope)
        return float(value[0])

    for name in params:
        num = numeric_gradient(f, lambda n=name: scope.get(n), lambda v, n=name: scope.set(n, v))
        np.testing.assert_allclose(np.array(analytic[f"{name}@GRAD"]), num, rtol=1e-6,
                                   atol=1e-7, err_msg=name)
    for name in ("x", "enc", "h0"):
        lod = isinstance(data[name], tuple)

        def get(n=name, lod=lod):
            return data[n][0] if lod else data[n]

        def put(v, n=name, lod=lod):
            data[n] = (v, data[n][1]) if lod else v

        np.testing.assert_allclose(np.array(analytic[f"{name}@GRAD"]),
                                   numeric_gradient(f, get, put), rtol=1e-6, atol=1e-7,
                                   err_msg=name)


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


# -- nested (2-level LoD) step inputs -----------------------------------------------------------
# Fluid 1.8 steps over the top-level sequences: each step's input is the t-th sub-sequence of
# every running sequence, all its rows, a LoD tensor of the lower level (lod_tensor_to_array);
# the outputs come back in the sequences' own order (array_to_lod_tensor)

E = 2
TOP = [2, 0, 3, 1, 3]              # an empty sequence, a tie for the longest
SUB = [2, 1, 3, 0, 2, 1, 2, 1, 1]  # an empty sub-sequence (sequence 2's second)
ENC_TOP = [1, 2, 1, 2, 1]
ENC_SUB = [2, 1, 1, 3, 1, 2, 1]
NESTED_PARAMS = ("wp", "wh", "wc", "wr", "b")


def _offsets(lengths):
    return np.cumsum([0, *lengths])


def _build_nested():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 11
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float64", lod_level=2)
        enc = fluid.layers.data(name="enc", shape=[E], dtype="float64", lod_level=2)
        h0 = fluid.layers.data(name="h0", shape=[H], dtype="float64")
        r1 = fluid.layers.data(name="r1", shape=[H], dtype="float64")
        r2 = fluid.layers.data(name="r2", shape=[H], dtype="float64")
        for v in (x, enc, h0):
            v.stop_gradient = False
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            words = drnn.step_input(x)        # the t-th sub-sequence of each running sequence
            source = drnn.static_input(enc)   # the running sequences' whole 2-level sequences
            prev = drnn.memory(init=h0, need_reorder=True)
            pooled = fluid.layers.sequence_pool(words, "sum")
            # the largest of the source's sub-sequence sums: reads both of its LoD levels
            context = fluid.layers.sequence_pool(fluid.layers.sequence_pool(source, "sum"),
                                                 "max")
            h = fluid.layers.fc([pooled, prev, context], H, act="tanh",
                                param_attr=[fluid.ParamAttr(name=n) for n in ("wp", "wh", "wc")],
                                bias_attr=fluid.ParamAttr(name="b"))
            drnn.update_memory(prev, h)
            # a row per word: the words' projection scaled by their sub-sequence's state
            proj = fluid.layers.fc(words, H, param_attr=fluid.ParamAttr(name="wr"),
                                   bias_attr=False)
            per_word = fluid.layers.elementwise_mul(proj, fluid.layers.sequence_expand(h, words))
            drnn.output(h, per_word)
        hidden, rows = drnn()
        loss = (fluid.layers.reduce_sum(fluid.layers.elementwise_mul(hidden, r1))
                + fluid.layers.reduce_sum(fluid.layers.elementwise_mul(rows, r2)))
    return main, startup, hidden, rows, loss


def _nested_data(seed):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((sum(SUB), D)), [TOP, SUB]),
            "enc": (rng.standard_normal((sum(ENC_SUB), E)), [ENC_TOP, ENC_SUB]),
            "h0": rng.standard_normal((len(TOP), H)),
            "r1": rng.standard_normal((len(SUB), H)),
            "r2": rng.standard_normal((sum(SUB), H))}


def _nested_feed(data):
    return {k: fluid.create_lod_tensor(v[0], v[1], fluid.CPUPlace()) if isinstance(v, tuple)
            else v for k, v in data.items()}


def _nested_reference(data, p):
    """Each sequence on its own: its sub-sequences in turn, summed words, the source's
    largest sub-sequence sum."""
    x, enc = data["x"][0], data["enc"][0]
    top, sub = _offsets(TOP), _offsets(SUB)
    enc_top, enc_sub = _offsets(ENC_TOP), _offsets(ENC_SUB)
    hidden, rows = np.zeros((len(SUB), H)), np.zeros((len(x), H))
    for i in range(len(TOP)):
        sums = [enc[enc_sub[j]:enc_sub[j + 1]].sum(axis=0)
                for j in range(enc_top[i], enc_top[i + 1])]
        context = np.max(sums, axis=0)
        h = data["h0"][i]
        for j in range(top[i], top[i + 1]):   # sub-sequence j is step j - top[i]
            words = x[sub[j]:sub[j + 1]]
            h = np.tanh(words.sum(axis=0) @ p["wp"] + h @ p["wh"] + context @ p["wc"] + p["b"])
            hidden[j] = h
            rows[sub[j]:sub[j + 1]] = (words @ p["wr"]) * h
    return hidden, rows


def test_nested_step_input_forward_matches_a_loop_over_each_sequence():
    main, startup, hidden, rows, _ = _build_nested()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    data = _nested_data(0)
    for _ in range(2):  # the second run must not see the first one's output LoDs
        got_hidden, got_rows = exe.run(main, feed=_nested_feed(data), scope=scope,
                                       fetch_list=[hidden, rows], return_numpy=False)
    ref_hidden, ref_rows = _nested_reference(
        data, {n: np.asarray(scope.get(n)) for n in NESTED_PARAMS})
    np.testing.assert_allclose(np.array(got_hidden), ref_hidden, rtol=1e-12)
    np.testing.assert_allclose(np.array(got_rows), ref_rows, rtol=1e-12)
    # a row per step and sequence: one per sub-sequence, under the sequences; a sub-sequence
    # per step and sequence: the step input's two levels
    assert got_hidden.recursive_sequence_lengths() == [TOP]
    assert got_rows.recursive_sequence_lengths() == [TOP, SUB]


def test_nested_gradients_match_finite_differences():
    main, startup, _, _, loss = _build_nested()
    with fluid.program_guard(main, startup):
        pairs = fluid.backward.append_backward(loss)
    assert sorted(p.name for p, _ in pairs) == sorted(NESTED_PARAMS)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    data = _nested_data(1)
    names = [*(f"{p}@GRAD" for p in NESTED_PARAMS), "x@GRAD", "enc@GRAD", "h0@GRAD"]
    fetched = exe.run(main, feed=_nested_feed(data), scope=scope, fetch_list=names,
                      return_numpy=False)
    assert fetched[-3].recursive_sequence_lengths() == [TOP, SUB]
    assert fetched[-2].recursive_sequence_lengths() == [ENC_TOP, ENC_SUB]
    _assert_finite_differences(exe, main, scope, loss, _nested_feed, data, NESTED_PARAMS,
                               dict(zip(names, fetched, strict=True)))


def test_lod_levels_at_build_time_and_the_outputs_lod():
    # Fluid's compile-time InferShape: lod_tensor_to_array gives X's lod_level - 1 and
    # read_from_array shares it (step_input); reorder_lod_tensor_by_rank and
    # shrink_rnn_memory share X's (static_input); write_to_array shares the step value's and
    # array_to_lod_tensor adds one (output)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float64", lod_level=2)
        enc = fluid.layers.data(name="enc", shape=[E], dtype="float64", lod_level=1)
        nested = fluid.layers.data(name="nested", shape=[E], dtype="float64", lod_level=2)
        ctx = fluid.layers.data(name="ctx", shape=[E], dtype="float64")
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            words = drnn.step_input(x)
            s1, s2, s0 = (drnn.static_input(v) for v in (enc, nested, ctx))
            assert (words.lod_level, s1.lod_level, s2.lod_level, s0.lod_level) == (1, 1, 2, 0)
            pooled = fluid.layers.sequence_pool(words, "sum")
            drnn.output(words, pooled, s1, s0)
        outs = drnn()
    assert [o.lod_level for o in outs] == [2, 1, 2, 1]
    one_level = fluid.layers.DynamicRNN()
    with fluid.program_guard(main, startup):
        y = fluid.layers.data(name="y", shape=[D], dtype="float64", lod_level=1)
        with one_level.block():
            row = one_level.step_input(y)
            assert row.lod_level == 0
            one_level.output(row)
    assert one_level().lod_level == 1

    rng = np.random.default_rng(4)
    data = {"x": (rng.standard_normal((sum(SUB), D)), [TOP, SUB]),
            "enc": (rng.standard_normal((sum(ENC_TOP), E)), [ENC_TOP]),
            "nested": (rng.standard_normal((sum(ENC_SUB), E)), [ENC_TOP, ENC_SUB]),
            "ctx": rng.standard_normal((len(TOP), E)),
            "y": (rng.standard_normal((len(SUB), D)), [TOP])}
    exe = fluid.Executor()
    exe.run(startup)
    got = exe.run(main, feed=_nested_feed(data), fetch_list=outs, return_numpy=False)
    words_out, _, s1_out, s0_out = got
    # the step input put back together is the input, LoD and all
    np.testing.assert_array_equal(np.array(words_out), data["x"][0])
    assert words_out.recursive_sequence_lengths() == [TOP, SUB]
    # a static input's whole sequence (or row) at every step of its sequence
    enc_top = _offsets(ENC_TOP)
    steps = [i for i, n in enumerate(TOP) for _ in range(n)]   # the sequence of each step
    np.testing.assert_array_equal(
        np.array(s1_out), np.concatenate([data["enc"][0][enc_top[i]:enc_top[i + 1]]
                                          for i in steps]))
    assert s1_out.recursive_sequence_lengths() == [TOP, [ENC_TOP[i] for i in steps]]
    np.testing.assert_array_equal(np.array(s0_out), data["ctx"][steps])
    assert s0_out.recursive_sequence_lengths() == [TOP]


def test_a_dynamic_rnn_nested_in_a_dynamic_rnn():
    # Fluid's test_train_nested_dynamic_rnn: the outer one steps over sentences, the inner one
    # over the words of the current sentence of each paragraph
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float64", lod_level=2)
        x.stop_gradient = False
        outer = fluid.layers.DynamicRNN()
        with outer.block():
            sentences = outer.step_input(x)
            total = outer.memory(shape=[H], dtype="float64")
            inner = fluid.layers.DynamicRNN()
            with inner.block():
                word = inner.step_input(sentences)
                assert word.lod_level == 0
                h_prev = inner.memory(shape=[H], dtype="float64")
                h = fluid.layers.fc([word, h_prev], H, act="tanh", bias_attr=False,
                                    param_attr=[fluid.ParamAttr(name="a"),
                                                fluid.ParamAttr(name="u")])
                inner.update_memory(h_prev, h)
                inner.output(h)
            last = fluid.layers.sequence_last_step(inner())
            new_total = fluid.layers.elementwise_add(last, total)
            outer.update_memory(total, new_total)
            outer.output(new_total)
        out = outer()
        loss = fluid.layers.reduce_sum(fluid.layers.square(out))
        fluid.backward.append_backward(loss)
    top, sub = [2, 1, 3], [2, 1, 3, 1, 2, 2]
    rng = np.random.default_rng(5)
    data = {"x": (rng.standard_normal((sum(sub), D)), [top, sub])}
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got, d_x, d_a = exe.run(main, feed=_nested_feed(data), scope=scope,
                            fetch_list=[out, "x@GRAD", "a@GRAD"], return_numpy=False)
    a, u = np.asarray(scope.get("a")), np.asarray(scope.get("u"))
    ref = []
    top_off, sub_off = _offsets(top), _offsets(sub)
    for i in range(len(top)):
        acc = np.zeros(H)
        for j in range(top_off[i], top_off[i + 1]):
            h = np.zeros(H)
            for row in data["x"][0][sub_off[j]:sub_off[j + 1]]:
                h = np.tanh(row @ a + h @ u)
            acc = acc + h
            ref.append(acc)
    np.testing.assert_allclose(np.array(got), ref, rtol=1e-12)
    assert got.recursive_sequence_lengths() == [top]

    def f() -> float:
        value, = exe.run(main, feed=_nested_feed(data), fetch_list=[loss], scope=scope)
        return float(value[0])

    def put(v):
        data["x"] = (v, data["x"][1])

    np.testing.assert_allclose(np.array(d_x), numeric_gradient(f, lambda: data["x"][0], put),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.array(d_a), numeric_gradient(f, lambda: scope.get("a"),
                                                               lambda v: scope.set("a", v)),
                               rtol=1e-6, atol=1e-7)


def test_an_output_needs_one_unit_per_running_sequence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[D], dtype="float64", lod_level=2)
        drnn = fluid.layers.DynamicRNN()
        with drnn.block():
            drnn.step_input(x)
            drnn.output(fluid.layers.fill_constant([7, D], "float64", 1.0))
        out = drnn()
    exe = fluid.Executor()
    exe.run(startup)
    feed = {"x": fluid.create_lod_tensor(np.ones((sum(SUB), D)), [TOP, SUB], fluid.CPUPlace())}
    with pytest.raises(fluid.ExecutionError, match=r"has 7 rows at step 0; it needs one per "
                                                   r"running sequence \(4\)"):
        exe.run(main, feed=feed, fetch_list=[out])
