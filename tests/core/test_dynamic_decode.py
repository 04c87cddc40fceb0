"""Fluid 1.8's ``layers.dynamic_decode`` with ``BasicDecoder`` (+ ``GreedyEmbeddingHelper``,
``TrainingHelper``) and ``BeamSearchDecoder``: the While loop it builds, the decoded ids,
logits, lengths and states against numpy loops run with the parameters read from the
scope, and gradients of a teacher-forced loss against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric

N, H, E, V = 2, 4, 3, 6
START, END = 0, 1
GRU = "GRUCell/BasicGRUUnit_0"
PARAMS = ["emb", f"{GRU}.w_0", f"{GRU}.b_0", f"{GRU}.w_1", f"{GRU}.b_1", "out_w"]


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru(x, h, wg, bg, wc, bc):
    g = _sig(np.concatenate([x, h], -1) @ wg + bg)
    r, u = g[..., :H], g[..., H:]
    c = np.tanh(np.concatenate([x, r * h], -1) @ wc + bc)
    return u * h + (1 - u) * c


def _embedding_fn(ids):
    return layers.embedding(layers.unsqueeze(ids, [len(ids.shape)]), size=[V, E],
                            param_attr=fluid.ParamAttr(
                                name="emb", initializer=fluid.initializer.Normal(0.0, 1.0)),
                            dtype="float64")


def _output_fn(x):
    return layers.fc(x, V, num_flatten_dims=len(x.shape) - 1,
                     param_attr=fluid.ParamAttr(
                         name="out_w", initializer=fluid.initializer.Normal(0.0, 2.0)),
                     bias_attr=False)


def _cell():
    return layers.GRUCell(H, bias_attr=fluid.ParamAttr(
        initializer=fluid.initializer.Uniform(-1, 1)), dtype="float64")


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    outs = exe.run(main, feed=feed, fetch_list=fetch, scope=scope)
    return outs, [np.array(scope.vars[p]) for p in PARAMS]


def _greedy_np(h0, params, max_step_num, end=END):
    emb, wg, bg, wc, bc, w_out = params
    x, h = emb[np.full(N, START)], h0.copy()
    finished = np.zeros(N, bool)
    lengths = np.zeros(N, np.int64)
    logits_all, ids_all = [], []
    step = 0
    while True:
        h = _gru(x, h, wg, bg, wc, bc)
        logits = h @ w_out
        ids = logits.argmax(-1)
        logits_all.append(logits)
        ids_all.append(ids)
        lengths += ~finished
        finished = finished | (ids == end)
        x = emb[ids]
        step += 1
        if finished.all() or step > max_step_num:
            break
    return np.stack(logits_all, 1), np.stack(ids_all, 1), lengths, h


@pytest.mark.parametrize("is_test", [False, True])
def test_greedy_dynamic_decode_against_numpy(is_test):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        h0 = layers.data("h0", [N, H], dtype="float64", append_batch_size=False)
        start = layers.fill_constant_batch_size_like(h0, [-1], "int64", START)
        helper = layers.GreedyEmbeddingHelper(_embedding_fn, start, END)
        decoder = layers.BasicDecoder(_cell(), helper, output_fn=_output_fn)
        outputs, states, lengths = layers.dynamic_decode(
            decoder, inits=h0, max_step_num=4, is_test=is_test, return_length=True)
    types = [op.type for op in main.global_block().ops]
    assert "while" in types and types.count("tensor_array_to_tensor") == 2
    assert lengths.dtype == "int64"
    rng = np.random.default_rng(1)
    h0_value = rng.standard_normal((N, H))
    (logits, ids, got_len, h), params = _run(
        main, startup, {"h0": h0_value},
        [outputs.cell_outputs, outputs.sample_ids, lengths, states])
    e_logits, e_ids, e_len, e_h = _greedy_np(h0_value, params, 4)
    np.testing.assert_array_equal(ids, e_ids)
    np.testing.assert_allclose(logits, e_logits, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got_len, e_len)
    np.testing.assert_allclose(h, e_h, rtol=1e-9, atol=1e-12)


def test_greedy_output_time_major_and_end_token_stops_the_loop():
    h0_value = np.random.default_rng(2).standard_normal((N, H))
    stopped_early = False
    for end in range(V):  # the same parameters (fixed seeds), each token as the end one
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 11
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            h0 = layers.data("h0", [N, H], dtype="float64", append_batch_size=False)
            start = layers.fill_constant_batch_size_like(h0, [-1], "int64", START)
            helper = layers.GreedyEmbeddingHelper(_embedding_fn, start, end)
            decoder = layers.BasicDecoder(_cell(), helper, output_fn=_output_fn)
            outputs, _, lengths = layers.dynamic_decode(
                decoder, inits=h0, max_step_num=12, output_time_major=True,
                return_length=True)
        (ids, got_len), params = _run(main, startup, {"h0": h0_value},
                                      [outputs.sample_ids, lengths])
        _, e_ids, e_len, _ = _greedy_np(h0_value, params, 12, end)
        np.testing.assert_array_equal(ids, e_ids.T)
        np.testing.assert_array_equal(got_len, e_len)
        stopped_early |= ids.shape[0] < 13 or e_len.min() < 13
    assert stopped_early


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _beam_search_np(h0, params, beam, max_step_num, end):
    """Fluid 1.8's beam search by hand: per batch entry, the beam*vocab candidates ranked by
    total log probability; a finished beam only extends with end (log prob 0)."""
    emb, wg, bg, wc, bc, w_out = params
    h = np.repeat(h0[:, None], beam, 1)
    log_probs = np.tile([0.0] + [-1e9] * (beam - 1), (N, 1))
    finished = np.zeros((N, beam), bool)
    lengths = np.zeros((N, beam), np.int64)
    ids = np.full((N, beam), START)
    scores_all, ids_all, parents_all = [], [], []
    step = 0
    while True:
        new_h = np.empty_like(h)
        total = np.empty((N, beam, V))
        for b in range(N):
            for k in range(beam):
                new_h[b, k] = _gru(emb[ids[b, k]], h[b, k], wg, bg, wc, bc)
                lp = _log_softmax(new_h[b, k] @ w_out)
                if finished[b, k]:
                    lp = np.where(np.arange(V) == end, 0.0, -1e9)
                total[b, k] = lp + log_probs[b, k]
        n_h, n_lp, n_fin, n_len = (np.empty_like(a) for a in (h, log_probs, finished, lengths))
        s_step, i_step, p_step = (np.empty((N, beam), t) for t in (float, np.int64, np.int64))
        for b in range(N):
            flat = total[b].reshape(-1)
            order = sorted(range(beam * V), key=lambda j: -flat[j])[:beam]
            for k, j in enumerate(order):
                parent, token = divmod(j, V)
                s_step[b, k], i_step[b, k], p_step[b, k] = flat[j], token, parent
                n_h[b, k], n_lp[b, k] = new_h[b, parent], flat[j]
                n_len[b, k] = lengths[b, parent] + (not finished[b, parent])
                n_fin[b, k] = finished[b, parent] or token == end
        h, log_probs, finished, lengths, ids = n_h, n_lp, n_fin, n_len, i_step
        scores_all.append(s_step)
        ids_all.append(i_step)
        parents_all.append(p_step)
        step += 1
        if finished.all() or step > max_step_num:
            break
    # backtrack: the last step's ids, then each step's id of the beam the next came from
    T = len(ids_all)
    out = np.empty((T, N, beam), np.int64)
    for b in range(N):
        for k in range(beam):
            p = k
            for t in range(T - 1, -1, -1):
                out[t, b, k] = ids_all[t][b, p]
                p = parents_all[t][b, p]
    return out, np.stack(scores_all), lengths, h, log_probs, finished


@pytest.mark.parametrize("beam", [2, 3])
def test_beam_search_decoder_against_numpy(beam):
    h0_value = np.random.default_rng(3).standard_normal((N, H))
    early = False
    for end in (1, 2, 4):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 5
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            h0 = layers.data("h0", [N, H], dtype="float64", append_batch_size=False)
            decoder = layers.BeamSearchDecoder(_cell(), START, end, beam,
                                               embedding_fn=_embedding_fn,
                                               output_fn=_output_fn)
            ids, states, lengths = layers.dynamic_decode(decoder, inits=h0, max_step_num=6,
                                                         return_length=True)
        assert "gather_tree" in [op.type for op in main.global_block().ops]
        (got_ids, got_len, got_h, got_lp, got_fin), params = _run(
            main, startup, {"h0": h0_value},
            [ids, lengths, states.cell_states, states.log_probs, states.finished])
        e_ids, _, e_len, e_h, e_lp, e_fin = _beam_search_np(h0_value, params, beam, 6, end)
        np.testing.assert_array_equal(got_ids, e_ids.transpose(1, 0, 2))
        np.testing.assert_array_equal(got_len, e_len)
        np.testing.assert_array_equal(got_fin, e_fin)
        np.testing.assert_allclose(got_lp, e_lp, rtol=1e-9)
        np.testing.assert_allclose(got_h, e_h, rtol=1e-9, atol=1e-12)
        early |= e_len.min() < 7
    assert early


def test_tile_beam_merge_with_batch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [N, 2, 3], dtype="float64", append_batch_size=False)
        y = layers.BeamSearchDecoder.tile_beam_merge_with_batch(x, 3)
    xv = np.random.default_rng(4).standard_normal((N, 2, 3))
    (got,) = fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=[y],
                                                  scope=fluid.Scope())
    np.testing.assert_array_equal(got, np.repeat(xv, 3, axis=0))


T = 3
LENS = np.array([3, 2])


def _teacher_forced(x, lens, impute_finished=True):
    cell = _cell()
    h0 = layers.data("h0", [N, H], dtype="float64", append_batch_size=False)
    helper = layers.TrainingHelper(x, lens)
    decoder = layers.BasicDecoder(cell, helper, output_fn=_output_fn)
    return layers.dynamic_decode(decoder, inits=h0, impute_finished=impute_finished,
                                 return_length=True)


def test_training_helper_forward_against_numpy():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [N, T, E], dtype="float64", append_batch_size=False)
        lens = layers.data("lens", [N], dtype="int64", append_batch_size=False)
        _embedding_fn(layers.fill_constant([N], "int64", 0))  # creates "emb" for _run
        outputs, h, lengths = _teacher_forced(x, lens)
    rng = np.random.default_rng(6)
    xv, h0v = rng.standard_normal((N, T, E)), rng.standard_normal((N, H))
    (logits, got_h, got_len), params = _run(main, startup, {"x": xv, "lens": LENS, "h0": h0v},
                                            [outputs.cell_outputs, h, lengths])
    _, wg, bg, wc, bc, w_out = params
    hs, e_logits = h0v.copy(), []
    for t in range(T):  # every step reads step t of x; impute_finished keeps ended states
        new = _gru(xv[:, t], hs, wg, bg, wc, bc)
        e_logits.append(new @ w_out)
        hs = np.where((t < LENS)[:, None], new, hs)
    np.testing.assert_allclose(logits, np.stack(e_logits, 1), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_h, hs, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got_len, LENS)


def test_training_helper_loss_gradients_match_central_differences():
    rng = np.random.default_rng(7)
    feed = {"x": rng.standard_normal((N, T, E)), "lens": LENS, "h0": rng.standard_normal((N, H)),
            "r": rng.standard_normal((N, T, V))}

    def build():
        x = layers.data("x", [N, T, E], dtype="float64", append_batch_size=False)
        lens = layers.data("lens", [N], dtype="int64", append_batch_size=False)
        r = layers.data("r", [N, T, V], dtype="float64", append_batch_size=False)
        outputs, h, _ = _teacher_forced(x, lens)
        return layers.elementwise_add(
            layers.reduce_sum(layers.elementwise_mul(outputs.cell_outputs, r)),
            layers.reduce_sum(layers.square(h)))

    res = program_grads_and_numeric(build, feed, [f"{GRU}.w_0", f"{GRU}.w_1", f"{GRU}.b_1",
                                                  "out_w"])
    for p, (analytic, numeric) in res.items():
        assert np.abs(numeric).max() > 1e-3, p
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=p)


def test_program_structure():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [N, T, E], dtype="float64", append_batch_size=False)
        lens = layers.data("lens", [N], dtype="int64", append_batch_size=False)
        outputs, _, _ = _teacher_forced(x, lens)
    block = main.global_block()
    loop = next(op for op in block.ops if op.type == "while")
    assert loop.attrs["is_test"] is False
    stacks = [op for op in block.ops if op.type == "tensor_array_to_tensor"]
    assert len(stacks) == 2
    assert all(op.attrs["axis"] == 0 and op.attrs["use_stack"] is True for op in stacks)
    # the output arrays live outside the loop; the step's inputs/states are read in it
    arrays = {op.input("X")[0] for op in stacks}
    assert all(block.has_var(a) for a in arrays)
    body = main.block(loop.attrs["sub_block"])
    assert "read_from_array" in [op.type for op in body.ops]
    assert outputs.cell_outputs.shape[0] == N and outputs.cell_outputs.shape[-1] == V


def test_decode_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        h0 = layers.data("h0", [N, H], dtype="float64", append_batch_size=False)
        with pytest.raises(TypeError, match="decoder must be a Decoder"):
            layers.dynamic_decode(_cell(), inits=h0)
        start = layers.fill_constant_batch_size_like(h0, [-1], "int64", START)
        decoder = layers.BasicDecoder(_cell(), layers.GreedyEmbeddingHelper(
            _embedding_fn, start, END), output_fn=_output_fn)
        with pytest.raises(TypeError, match="max_step_num must be an int"):
            layers.dynamic_decode(decoder, inits=h0, max_step_num=2.5)
        with pytest.raises(ValueError, match="beam_size must be a positive int"):
            layers.BeamSearchDecoder(_cell(), START, END, 0)
        with pytest.raises(TypeError, match="embedding_fn must be callable"):
            layers.BeamSearchDecoder(_cell(), START, END, 2, embedding_fn=3)
        with pytest.raises(TypeError, match="sequence_length must be a Variable"):
            layers.TrainingHelper(h0, [3, 2])
