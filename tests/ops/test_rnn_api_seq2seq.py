"""``fluid.layers.rnn`` chained as a seq2seq model (Fluid 1.8's test_rnn_cell_api seq2seq):
the final states of an rnn over inputs of unknown length are ``[batch, hidden]`` at compile
time (Fluid's ``x[-1]``, a slice with decrease_axis), so a second rnn started from them
steps rank-2 states; a 2-layer LSTM encoder-decoder against a numpy loop, and SGD on it.
``TrainingHelper.initialize``'s step-0 inputs drop the time axis the same way."""

from __future__ import annotations

import numpy as np

import dask_fluid as fluid

N, TS, TT, D, H = 3, 5, 4, 6, 6  # batch, source/target steps, input and hidden sizes
FORGET_BIAS = 1.0


def _sig(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_np(x, h, c, w, b):
    g = np.concatenate([x, h], 1) @ w + b
    i, j, f, o = np.split(g, 4, axis=1)
    new_c = c * _sig(f + FORGET_BIAS) + _sig(i) * np.tanh(j)
    return np.tanh(new_c) * _sig(o), new_c


def _stack_np(x, states, params, lengths=None):
    """The 2-layer cell over ``x`` [N, T, D]: the last layer's outputs [N, T, H] and the
    final [(h, c), ...]; past a sequence's length its states are kept (Fluid's rnn mask)."""
    outs = []
    for t in range(x.shape[1]):
        inp, new = x[:, t], []
        for (h, c), (w, b) in zip(states, params, strict=True):
            inp, nc = _lstm_np(inp, h, c, w, b)
            new.append((inp, nc))
        outs.append(inp)
        if lengths is not None:
            m = (t < lengths).astype(x.dtype)[:, None]
            new = [(m * nh + (1 - m) * h, m * nc + (1 - m) * c)
                   for (nh, nc), (h, c) in zip(new, states, strict=True)]
        states = new
    return np.stack(outs, 1), states


class _StackedLSTM(fluid.layers.RNNCell):
    """Two LSTMCells, the first's output the second's input; records its step inputs."""

    def __init__(self) -> None:
        self.cells = [fluid.layers.LSTMCell(H, dtype="float64") for _ in range(2)]
        self.step_shapes: list[tuple] = []

    def call(self, step_input, states):
        new_states = []
        for cell, state in zip(self.cells, states, strict=True):
            self.step_shapes.append((tuple(step_input.shape), [tuple(s.shape) for s in state]))
            step_input, new_state = cell(step_input, state)
            new_states.append(new_state)
        return step_input, new_states

    @property
    def state_shape(self):
        return [cell.state_shape for cell in self.cells]

    @property
    def state_dtype(self):
        # without it get_initial_states makes float32 states, as Fluid 1.8's does
        return "float64"


def _build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        # the time dims are unknown (None), as the seq2seq test's embeddings are
        src = fluid.data(name="src", shape=[None, None, D], dtype="float64")
        src_len = fluid.data(name="src_len", shape=[None], dtype="int64")
        trg = fluid.data(name="trg", shape=[None, None, D], dtype="float64")
        y = fluid.data(name="y", shape=[None, None, H], dtype="float64")
        enc, dec = _StackedLSTM(), _StackedLSTM()
        _, enc_final = fluid.layers.rnn(enc, src, sequence_length=src_len)
        dec_out, _ = fluid.layers.rnn(dec, trg, initial_states=enc_final)
        loss = fluid.layers.reduce_mean(fluid.layers.square(dec_out - y))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, enc, dec, enc_final, dec_out, loss


def _feed(rng):
    return {"src": rng.standard_normal((N, TS, D)), "src_len": np.array([5, 2, 3]),
            "trg": rng.standard_normal((N, TT, D)),
            "y": rng.uniform(-0.5, 0.5, (N, TT, H))}


def test_final_states_drop_the_unknown_time_axis_at_compile_time():
    _, _, enc, dec, enc_final, dec_out, _ = _build()
    assert [[tuple(s.shape) for s in layer] for layer in enc_final] == [[(-1, H)] * 2] * 2
    assert tuple(dec_out.shape) == (-1, -1, H)
    # the decoder's layers step [batch, size] inputs and states, as the encoder's do
    assert enc.step_shapes == dec.step_shapes == [((-1, D), [(-1, H)] * 2),
                                                  ((-1, H), [(-1, H)] * 2)]


def test_encoder_decoder_matches_numpy_and_sgd_lowers_the_loss():
    main, startup, _, _, _, dec_out, loss = _build()
    feed = _feed(np.random.default_rng(0))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    names = [(f"LSTMCell/BasicLSTMUnit_{k}.w_0", f"LSTMCell/BasicLSTMUnit_{k}.b_0")
             for k in range(4)]
    params = [(np.array(scope.vars[w]), np.array(scope.vars[b])) for w, b in names]
    zeros = [(np.zeros((N, H)), np.zeros((N, H)))] * 2
    _, enc_states = _stack_np(feed["src"], zeros, params[:2], feed["src_len"])
    want, _ = _stack_np(feed["trg"], enc_states, params[2:])
    losses = []
    for step in range(5):
        got, cur = exe.run(main, feed=feed, fetch_list=[dec_out, loss], scope=scope)
        if step == 0:  # the fetched values are from before this step's update
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(cur, np.mean((want - feed["y"]) ** 2), rtol=1e-10)
        losses.append(float(np.asarray(cur).reshape(())))
    assert all(b < a for a, b in zip(losses[:-1], losses[1:], strict=True)), losses


def test_training_helper_step0_inputs_drop_the_unknown_time_axis():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, None, D], dtype="float32")
        length = fluid.data(name="len", shape=[None], dtype="int64")
        batch_major, _ = fluid.layers.TrainingHelper(x, length).initialize()
        time_major, _ = fluid.layers.TrainingHelper(x, length, time_major=True).initialize()
    assert tuple(batch_major.shape) == tuple(time_major.shape) == (-1, D)
    xv = np.random.default_rng(1).standard_normal((N, TS, D)).astype("float32")
    got_b, got_t = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": xv, "len": np.array([1, 2, 3])}, fetch_list=[batch_major, time_major])
    np.testing.assert_array_equal(got_b, xv[:, 0])
    np.testing.assert_array_equal(got_t, xv[0])
