"""Fluid 1.8's layers/rnn.py API (RNNCell, GRUCell, LSTMCell, rnn): program structure and
parameters as Fluid builds them, one cell step and whole padded sequences against numpy
loops, gradients through ``rnn`` by central differences, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid

from .numeric_grad import program_grads_and_numeric

N, T, D, H = 3, 4, 3, 2


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru_np(x, h, wg, bg, wc, bc):
    g = _sig(np.concatenate([x, h], 1) @ wg + bg)
    r, u = g[:, :H], g[:, H:]
    c = np.tanh(np.concatenate([x, r * h], 1) @ wc + bc)
    return u * h + (1 - u) * c


def _lstm_np(x, h, c, w, b, forget_bias):
    g = np.concatenate([x, h], 1) @ w + b
    i, j, f, o = (g[:, k * H:(k + 1) * H] for k in range(4))
    new_c = c * _sig(f + forget_bias) + _sig(i) * np.tanh(j)
    return np.tanh(new_c) * _sig(o), new_c


def _run(main, startup, feed, fetch, params=()):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    outs = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    return outs, [np.array(scope.vars[p]) for p in params]



def test_gru_cell_one_step_and_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[N, D], dtype="float64", append_batch_size=False)
        h = fluid.layers.data(name="h", shape=[N, H], dtype="float64", append_batch_size=False)
        cell = fluid.layers.GRUCell(H, dtype="float64",
                                    bias_attr=fluid.ParamAttr(
                                        initializer=fluid.initializer.Uniform(-1, 1)))
        out, new_h = cell(x, h)
    assert out is new_h and out.shape == (N, H)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"GRUCell/BasicGRUUnit_0.w_0": (D + H, 2 * H),
                      "GRUCell/BasicGRUUnit_0.w_1": (D + H, H),
                      "GRUCell/BasicGRUUnit_0.b_0": (2 * H,),
                      "GRUCell/BasicGRUUnit_0.b_1": (H,)}
    types = [op.type for op in main.global_block().ops]
    assert types.count("matmul") == 2 and types.count("split") == 1
    assert types.count("sigmoid") == 1 and types.count("tanh") == 1
    init_types = {op.outputs["Out"][0]: op.type for op in startup.global_block().ops}
    assert init_types["GRUCell/BasicGRUUnit_0.w_0"] == "uniform_random"  # Xavier
    rng = np.random.default_rng(0)
    xv, hv = rng.standard_normal((N, D)), rng.standard_normal((N, H))
    (got,), (wg, wc, bg, bc) = _run(main, startup, {"x": xv, "h": hv}, [out],
                                    ["GRUCell/BasicGRUUnit_0.w_0", "GRUCell/BasicGRUUnit_0.w_1",
                                     "GRUCell/BasicGRUUnit_0.b_0",
                                     "GRUCell/BasicGRUUnit_0.b_1"])
    assert np.abs(bg).max() > 0
    np.testing.assert_allclose(got, _gru_np(xv, hv, wg, bg, wc, bc), rtol=1e-10)


def test_gru_cell_named_param_attr_gets_gate_and_candidate_suffixes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[N, D], dtype="float32", append_batch_size=False)
        h = fluid.layers.data(name="h", shape=[N, H], dtype="float32", append_batch_size=False)
        fluid.layers.GRUCell(H, param_attr=fluid.ParamAttr(name="w"),
                             bias_attr=fluid.ParamAttr(name="b"))(x, h)
    names = {p.name for p in main.global_block().all_parameters()}
    assert names == {"w_gate", "w_candidate", "b_gate", "b_candidate"}


@pytest.mark.parametrize("forget_bias", [1.0, 0.3])
def test_lstm_cell_one_step(forget_bias):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[N, D], dtype="float64", append_batch_size=False)
        h = fluid.layers.data(name="h", shape=[N, H], dtype="float64", append_batch_size=False)
        c = fluid.layers.data(name="c", shape=[N, H], dtype="float64", append_batch_size=False)
        cell = fluid.layers.LSTMCell(H, forget_bias=forget_bias, dtype="float64",
                                     bias_attr=fluid.ParamAttr(
                                         initializer=fluid.initializer.Uniform(-1, 1)))
        out, (nh, nc) = cell(x, [h, c])
    assert out is nh and cell.state_shape == [[H], [H]]
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params == {"LSTMCell/BasicLSTMUnit_0.w_0": (D + H, 4 * H),
                      "LSTMCell/BasicLSTMUnit_0.b_0": (4 * H,)}
    rng = np.random.default_rng(1)
    xv, hv, cv = (rng.standard_normal((N, k)) for k in (D, H, H))
    (gh, gc), (w, b) = _run(main, startup, {"x": xv, "h": hv, "c": cv}, [nh, nc],
                            ["LSTMCell/BasicLSTMUnit_0.w_0", "LSTMCell/BasicLSTMUnit_0.b_0"])
    eh, ec = _lstm_np(xv, hv, cv, w, b, forget_bias)
    np.testing.assert_allclose(gh, eh, rtol=1e-10)
    np.testing.assert_allclose(gc, ec, rtol=1e-10)


def test_get_initial_states_shapes_dtypes_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[T, N, D], dtype="float32",
                              append_batch_size=False)
        cell = fluid.layers.LSTMCell(H)
        h0, c0 = cell.get_initial_states(x, batch_dim_idx=1)
        custom = cell.get_initial_states([x], shape=[[2, 3], [-1, 5]], dtype="float64",
                                         init_value=1.5, batch_dim_idx=1)
    # the batch dim of a static shape is dask_fluid's fill_constant_batch_size_like's business
    assert h0.shape[1:] == (H,) and h0.dtype == "float32"
    assert custom[0].shape[1:] == (2, 3) and custom[1].shape[1:] == (5,)
    outs, _ = _run(main, startup, {"x": np.zeros((T, N, D), np.float32)},
                   [h0, c0, *custom])
    assert outs[0].shape == (N, H) and not outs[0].any() and not outs[1].any()
    assert outs[2].shape == (N, 2, 3) and outs[2].dtype == np.float64
    np.testing.assert_array_equal(outs[3], np.full((N, 5), 1.5))


def _build_rnn(kind, time_major, with_lengths, with_init, is_reverse=False):
    x_shape = [T, N, D] if time_major else [N, T, D]
    x = fluid.layers.data(name="x", shape=x_shape, dtype="float64", append_batch_size=False)
    x.stop_gradient = False
    lengths = (fluid.layers.data(name="len", shape=[N], dtype="int64",
                                 append_batch_size=False) if with_lengths else None)
    battr = fluid.ParamAttr(initializer=fluid.initializer.Uniform(-1, 1))
    if kind == "gru":
        cell = fluid.layers.GRUCell(H, bias_attr=battr, dtype="float64")
        init = (fluid.layers.data(name="h0", shape=[N, H], dtype="float64",
                                  append_batch_size=False) if with_init else None)
    else:
        cell = fluid.layers.LSTMCell(H, bias_attr=battr, dtype="float64")
        init = ([fluid.layers.data(name=n, shape=[N, H], dtype="float64",
                                   append_batch_size=False) for n in ("h0", "c0")]
                if with_init else None)
    return x, fluid.layers.rnn(cell, x, initial_states=init, sequence_length=lengths,
                               time_major=time_major, is_reverse=is_reverse)


def _rnn_np(kind, xs, lengths, h0, c0, params):
    """Per sequence and step: the cell's output at every step; the state kept past the
    sequence's length."""
    h, c = h0.copy(), c0.copy()
    outs = []
    for t in range(xs.shape[0]):
        if kind == "gru":
            nh = _gru_np(xs[t], h, *params)
            out, nc = nh, c
        else:
            nh, nc = _lstm_np(xs[t], h, c, *params, 1.0)
            out = nh
        outs.append(out)
        live = (t < lengths)[:, None]
        h, c = np.where(live, nh, h), np.where(live, nc, c)
    return np.stack(outs), h, c


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("time_major", [False, True])
@pytest.mark.parametrize("with_init", [False, True])
def test_rnn_padded_batch_against_numpy(kind, time_major, with_init):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x, (out, states) = _build_rnn(kind, time_major, True, with_init)
    assert "recurrent" in [op.type for op in main.global_block().ops]
    assert "sequence_mask" in [op.type for op in main.global_block().ops]
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((T, N, D))
    lengths = np.array([4, 1, 2])
    h0 = rng.standard_normal((N, H)) if with_init else np.zeros((N, H))
    c0 = rng.standard_normal((N, H)) if with_init else np.zeros((N, H))
    feed = {"x": xs if time_major else xs.transpose(1, 0, 2), "len": lengths}
    if with_init:
        feed.update(h0=h0, c0=c0) if kind == "lstm" else feed.update(h0=h0)
    fetch = [out, *(states if kind == "lstm" else [states])]
    pre = "GRUCell/BasicGRUUnit_0" if kind == "gru" else "LSTMCell/BasicLSTMUnit_0"
    pnames = ([f"{pre}.w_0", f"{pre}.b_0", f"{pre}.w_1", f"{pre}.b_1"] if kind == "gru"
              else [f"{pre}.w_0", f"{pre}.b_0"])
    got, params = _run(main, startup, feed, fetch, pnames)
    e_out, e_h, e_c = _rnn_np(kind, xs, lengths, h0, c0, params)
    np.testing.assert_allclose(got[0], e_out if time_major else e_out.transpose(1, 0, 2),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[1], e_h, rtol=1e-9, atol=1e-12)
    if kind == "lstm":
        np.testing.assert_allclose(got[2], e_c, rtol=1e-9, atol=1e-12)
    # past a length the output is still the cell's (1.8 does not zero it), not the state
    assert not np.allclose(got[0][1, 1:] if not time_major else got[0][1:, 1], 0)


def _reverse_rnn_np(kind, xs, lengths, h0, c0, params):
    """is_reverse by hand: steps T-1 .. 0, each output stored at its own step; a sequence's
    padding (visited first) keeps the initial state."""
    h, c = h0.copy(), c0.copy()
    outs = [None] * xs.shape[0]
    for t in reversed(range(xs.shape[0])):
        if kind == "gru":
            nh = _gru_np(xs[t], h, *params)
            nc = c
        else:
            nh, nc = _lstm_np(xs[t], h, c, *params, 1.0)
        outs[t] = nh
        live = (t < lengths)[:, None]
        h, c = np.where(live, nh, h), np.where(live, nc, c)
    return np.stack(outs), h, c


@pytest.mark.parametrize("kind", ["gru", "lstm"])
@pytest.mark.parametrize("time_major", [False, True])
def test_rnn_is_reverse_against_numpy(kind, time_major):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x, (out, states) = _build_rnn(kind, time_major, True, True, is_reverse=True)
    types = [op.type for op in main.global_block().ops]
    # Fluid 1.8: inputs and mask reversed before the StaticRNN, the outputs after it
    rec = types.index("recurrent")
    assert types[:rec].count("reverse") == 2 and types[rec:].count("reverse") == 1
    assert out.shape == ((T, N, H) if time_major else (N, T, H))
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((T, N, D))
    lengths = np.array([4, 1, 2])
    h0, c0 = rng.standard_normal((N, H)), rng.standard_normal((N, H))
    feed = {"x": xs if time_major else xs.transpose(1, 0, 2), "len": lengths, "h0": h0}
    if kind == "lstm":
        feed["c0"] = c0
    fetch = [out, *(states if kind == "lstm" else [states])]
    pre = "GRUCell/BasicGRUUnit_0" if kind == "gru" else "LSTMCell/BasicLSTMUnit_0"
    pnames = ([f"{pre}.w_0", f"{pre}.b_0", f"{pre}.w_1", f"{pre}.b_1"] if kind == "gru"
              else [f"{pre}.w_0", f"{pre}.b_0"])
    got, params = _run(main, startup, feed, fetch, pnames)
    e_out, e_h, e_c = _reverse_rnn_np(kind, xs, lengths, h0, c0, params)
    np.testing.assert_allclose(got[0], e_out if time_major else e_out.transpose(1, 0, 2),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got[1], e_h, rtol=1e-9, atol=1e-12)
    if kind == "lstm":
        np.testing.assert_allclose(got[2], e_c, rtol=1e-9, atol=1e-12)
    # not the forward direction's result
    f_out, _, _ = _rnn_np(kind, xs, lengths, h0, c0, params)
    assert not np.allclose(e_out, f_out)


def test_rnn_is_reverse_gradients_match_central_differences():
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((N, T, D))
    r_out = rng.standard_normal((N, T, H))

    def build():
        x, (out, h) = _build_rnn("gru", False, True, False, is_reverse=True)
        ro = fluid.layers.data(name="ro", shape=[N, T, H], dtype="float64",
                               append_batch_size=False)
        return fluid.layers.elementwise_add(
            fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, ro)),
            fluid.layers.reduce_sum(fluid.layers.square(h)))

    pre = "GRUCell/BasicGRUUnit_0"
    res = program_grads_and_numeric(build, {"x": xs, "len": np.array([4, 1, 3]), "ro": r_out},
                                    [f"{pre}.w_0", f"{pre}.w_1", f"{pre}.b_1"])
    for p, (analytic, numeric) in res.items():
        assert np.abs(numeric).max() > 1e-3, p
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=p)


def test_rnn_without_lengths_runs_every_step():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x, (out, h) = _build_rnn("gru", False, False, False)
    assert "sequence_mask" not in [op.type for op in main.global_block().ops]
    assert out.shape[1:] == (T, H)
    xs = np.random.default_rng(3).standard_normal((T, N, D))
    pre = "GRUCell/BasicGRUUnit_0"
    got, params = _run(main, startup, {"x": xs.transpose(1, 0, 2)}, [out, h],
                       [f"{pre}.w_0", f"{pre}.b_0", f"{pre}.w_1", f"{pre}.b_1"])
    e_out, e_h, _ = _rnn_np("gru", xs, np.full(N, T), np.zeros((N, H)), np.zeros((N, H)),
                            params)
    np.testing.assert_allclose(got[0], e_out.transpose(1, 0, 2), rtol=1e-9)
    np.testing.assert_allclose(got[1], e_h, rtol=1e-9)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_rnn_gradients_match_central_differences(kind):
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((N, T, D))
    r_out = rng.standard_normal((N, T, H))
    r_h = rng.standard_normal((N, H))

    def build():
        x, (out, states) = _build_rnn(kind, False, True, False)
        ro = fluid.layers.data(name="ro", shape=[N, T, H], dtype="float64",
                               append_batch_size=False)
        rh = fluid.layers.data(name="rh", shape=[N, H], dtype="float64",
                               append_batch_size=False)
        h = states if kind == "gru" else states[1]  # the LSTM's final cell state
        return fluid.layers.elementwise_add(
            fluid.layers.reduce_sum(fluid.layers.elementwise_mul(out, ro)),
            fluid.layers.reduce_sum(fluid.layers.elementwise_mul(h, rh)))

    pre = "GRUCell/BasicGRUUnit_0" if kind == "gru" else "LSTMCell/BasicLSTMUnit_0"
    params = ([f"{pre}.w_0", f"{pre}.w_1", f"{pre}.b_0"] if kind == "gru"
              else [f"{pre}.w_0", f"{pre}.b_0"])
    res = program_grads_and_numeric(build, {"x": xs, "len": np.array([4, 1, 3]), "ro": r_out,
                                            "rh": r_h}, params)
    for p, (analytic, numeric) in res.items():
        assert np.abs(numeric).max() > 1e-3, p
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=p)


def test_rnn_with_a_custom_cell_and_nested_states():
    class Acc(fluid.layers.RNNCell):
        """Output x + a; states (a + x, [2 * b])."""

        def call(self, inputs, states):
            a, (b,) = states
            na = fluid.layers.elementwise_add(a, inputs)
            return fluid.layers.elementwise_add(inputs, a), (na, [fluid.layers.scale(b, 2.0)])

        @property
        def state_shape(self):
            return ([D], [[D]])

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[T, N, D], dtype="float32",
                              append_batch_size=False)
        init = Acc().get_initial_states(x, init_value=1.0, batch_dim_idx=1)
        out, (a, (b,)) = fluid.layers.rnn(Acc(), x, initial_states=init, time_major=True)
    xs = np.random.default_rng(5).standard_normal((T, N, D)).astype(np.float32)
    got, _ = _run(main, startup, {"x": xs}, [out, a, b])
    prefix = 1.0 + np.concatenate([np.zeros((1, N, D)), np.cumsum(xs, 0)[:-1]])
    np.testing.assert_allclose(got[0], xs + prefix, rtol=1e-5)
    np.testing.assert_allclose(got[1], 1.0 + xs.sum(0), rtol=1e-5)
    np.testing.assert_allclose(got[2], np.full((N, D), 2.0 ** T))


def test_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[N, T, D], dtype="float32",
                              append_batch_size=False)
        xi = fluid.layers.data(name="xi", shape=[N, T, D], dtype="int64",
                               append_batch_size=False)
        cell = fluid.layers.GRUCell(H)
        with pytest.raises(TypeError, match="cell must be an RNNCell"):
            fluid.layers.rnn(lambda i, s: (i, s), x)
        with pytest.raises(TypeError, match=r"inputs\[0\] must be a float32/float64"):
            fluid.layers.rnn(cell, xi)
        with pytest.raises(TypeError, match="sequence_length must be a Variable"):
            fluid.layers.rnn(cell, x, sequence_length=[1, 2, 3])
        with pytest.raises(TypeError, match="initial_states must be"):
            fluid.layers.rnn(cell, x, initial_states=0.0)
        with pytest.raises(NotImplementedError, match="state_shape"):
            fluid.layers.RNNCell().get_initial_states(x)
        with pytest.raises(NotImplementedError):
            fluid.layers.RNNCell().call(x, x)
        with pytest.raises(NotImplementedError, match="LSTMCell\\(gate_activation"):
            fluid.layers.LSTMCell(H, gate_activation=fluid.layers.tanh)
        with pytest.raises(NotImplementedError, match="param_attr=False"):
            fluid.layers.LSTMCell(H, bias_attr=False)
        with pytest.raises(ValueError, match="hidden_size must be a positive int"):
            fluid.layers.GRUCell(0)
        with pytest.raises(TypeError, match="gate_activation must be a callable"):
            fluid.layers.GRUCell(H, gate_activation="sigmoid")
        with pytest.raises(TypeError, match=r"states must be \[hidden, cell\]"):
            fluid.layers.LSTMCell(H)(x, x)
    assert fluid.layers.rnn.__name__ == "rnn"


# -- decoding pieces: BasicDecoder with the embedding helpers, one step ------------------------

V, E = 5, 3


def _decoder_program(helper_kind, end_token=2):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        start = fluid.layers.data(name="start", shape=[N], dtype="int64",
                                  append_batch_size=False)
        h0 = fluid.layers.data(name="h0", shape=[N, H], dtype="float64",
                               append_batch_size=False)

        def embed(ids):
            return fluid.layers.gather(main.global_block().var("emb"), ids)

        table = fluid.layers.create_parameter([V, E], "float64", name="emb",
                                              default_initializer=fluid.initializer.Uniform(
                                                  -1, 1))
        assert table.name == "emb"
        cell = fluid.layers.GRUCell(H, dtype="float64",
                                    bias_attr=fluid.ParamAttr(
                                        initializer=fluid.initializer.Uniform(-1, 1)))
        if helper_kind == "greedy":
            helper = fluid.layers.GreedyEmbeddingHelper(embed, start, end_token)
        else:
            helper = fluid.layers.SampleEmbeddingHelper(embed, start, end_token,
                                                        softmax_temperature=0.5, seed=7)
        decoder = fluid.layers.BasicDecoder(
            cell, helper,
            output_fn=lambda x: fluid.layers.fc(x, V, param_attr=fluid.ParamAttr(name="ow"),
                                                bias_attr=False))
        inputs, states, finished = decoder.initialize(h0)
        time = fluid.layers.fill_constant([1], "int64", 0)
        outputs, next_states, next_inputs, next_finished = decoder.step(time, inputs, states)
    return (main, startup, [inputs, finished, outputs.cell_outputs, outputs.sample_ids,
                            next_states, next_inputs, next_finished], states is h0)


def _decoder_step_np(start, h0, params):
    emb, wg, bg, wc, bc, ow = params
    h1 = _gru_np(emb[start], h0, wg, bg, wc, bc)
    return emb[start], h1, h1 @ ow


@pytest.mark.parametrize("end_token", [2, 3])
def test_basic_decoder_greedy_step_against_numpy(end_token):
    main, startup, fetch, states_passed = _decoder_program("greedy", end_token)
    assert states_passed  # BasicDecoder.initialize returns the initial cell states as given
    rng = np.random.default_rng(6)
    start, h0 = np.array([0, 1, 4]), rng.standard_normal((N, H))
    pre = "GRUCell/BasicGRUUnit_0"
    got, params = _run(main, startup, {"start": start, "h0": h0}, fetch,
                       ["emb", f"{pre}.w_0", f"{pre}.b_0", f"{pre}.w_1", f"{pre}.b_1", "ow"])
    x0, h1, logits = _decoder_step_np(start, h0, params)
    np.testing.assert_allclose(got[0], x0)
    np.testing.assert_array_equal(got[1], np.zeros(N, bool))
    np.testing.assert_allclose(got[2], logits, rtol=1e-9)
    ids = logits.argmax(-1)
    np.testing.assert_array_equal(got[3], ids)
    assert got[3].dtype == np.int64
    np.testing.assert_allclose(got[4], h1, rtol=1e-9)
    np.testing.assert_allclose(got[5], params[0][ids])
    np.testing.assert_array_equal(got[6], ids == end_token)


def test_sample_embedding_helper_draws_valid_ids_and_finishes_on_end_token():
    main, startup, fetch, _ = _decoder_program("sample", end_token=1)
    assert "sampling_id" in [op.type for op in main.global_block().ops]
    assert "softmax" in [op.type for op in main.global_block().ops]
    rng = np.random.default_rng(7)
    got, (emb,) = _run(main, startup, {"start": np.array([0, 1, 4]),
                                       "h0": rng.standard_normal((N, H))}, fetch, ["emb"])
    ids = got[3]
    assert ids.shape == (N,) and ((ids >= 0) & (ids < V)).all()
    np.testing.assert_allclose(got[5], emb[ids])
    np.testing.assert_array_equal(got[6], ids == 1)


def test_decoding_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        start = fluid.layers.data(name="start", shape=[N], dtype="int64",
                                  append_batch_size=False)
        with pytest.raises(TypeError, match="embedding_fn must be callable"):
            fluid.layers.GreedyEmbeddingHelper(None, start, 1)
        with pytest.raises(TypeError, match="start_tokens must be a Variable"):
            fluid.layers.GreedyEmbeddingHelper(lambda x: x, 0, 1)
        with pytest.raises(ValueError, match="softmax_temperature must be > 0"):
            fluid.layers.SampleEmbeddingHelper(lambda x: x, start, 1, softmax_temperature=0.0)
        with pytest.raises(TypeError, match="helper must be a DecodeHelper"):
            fluid.layers.BasicDecoder(fluid.layers.GRUCell(H), object())
        with pytest.raises(NotImplementedError):
            fluid.layers.Decoder().initialize(None)
        with pytest.raises(NotImplementedError):
            fluid.layers.Decoder().finalize(None, None, None)
        with pytest.raises(NotImplementedError):
            fluid.layers.DecodeHelper().sample(None, None, None)
    assert fluid.layers.Decoder().tracks_own_finished is False
