"""A beam-search decoder as Fluid 1.8 users write one (``While``, tensor arrays,
``beam_search``, ``beam_search_decode``, the LoD of each step carried by ``lod_reset``),
against a plain numpy beam search over the same toy model: each hypothesis a list of tokens
and running log-probabilities, ended hypotheses kept with their score, a source finished when
all its picks are ended ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.initializer import NumpyArrayInitializer

V, D, BEAM, END, MAX_LEN = 7, 5, 3, 1, 6


def _decoder(emb, pos, w):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        start = layers.data("start", [1], dtype="int64", lod_level=2)
        init = layers.data("init", [1], dtype="float32", lod_level=2)
        step = layers.fill_constant([1], "int64", 0)
        max_len = layers.fill_constant([1], "int64", MAX_LEN)
        ids = layers.array_write(start, step)
        scores = layers.array_write(init, step)
        cond = layers.less_than(step, max_len)
        loop = layers.While(cond)
        with loop.block():
            pre_ids = layers.array_read(ids, step)
            pre_scores = layers.array_read(scores, step)
            h = layers.embedding(pre_ids, size=[V, D],
                                 param_attr=fluid.ParamAttr("emb", NumpyArrayInitializer(emb)))
            # the step's position too: paths through the same transitions in another order
            # then score differently, so that no two hypotheses tie
            at = layers.embedding(layers.reshape(step, [1, 1]), size=[MAX_LEN, D],
                                  param_attr=fluid.ParamAttr("pos", NumpyArrayInitializer(pos)))
            h = layers.elementwise_add(h, layers.reshape(at, [D]), axis=1)
            probs = layers.fc(h, V, act="softmax", bias_attr=False,
                              param_attr=fluid.ParamAttr("w", NumpyArrayInitializer(w)))
            top_scores, top_ids = layers.topk(probs, k=BEAM)
            accu = layers.elementwise_add(layers.log(top_scores),
                                          layers.reshape(pre_scores, [-1]), axis=0)
            top_ids = layers.lod_reset(top_ids, pre_ids)
            sel_ids, sel_scores = layers.beam_search(pre_ids, pre_scores, top_ids, accu,
                                                     beam_size=BEAM, end_id=END)
            layers.increment(step, in_place=True)
            layers.array_write(sel_ids, step, array=ids)
            layers.array_write(sel_scores, step, array=scores)
            going = layers.less_than(step, max_len)
            layers.logical_and(going, layers.logical_not(layers.is_empty(sel_ids)), out=cond)
        sentences, sentence_scores = layers.beam_search_decode(ids, scores, BEAM, END)
    return main, startup, sentences, sentence_scores


def _numpy_beam_search(emb, pos, w, starts):
    """Each source: hypotheses (tokens, scores per token, ended); per step every live one
    offers its BEAM most likely next tokens (running log-probability), every ended one offers
    the end token at its score; the BEAM best (by score, then by the later hypothesis) go on.
    A source stops when all its picks continue ended hypotheses with the end token."""
    results = []
    for start in starts:
        hyps = [([start], [0.0], start == END)]
        finished = None
        for position in range(MAX_LEN):
            offers = []
            for order, (tokens, scores, ended) in enumerate(hyps):
                if ended:
                    offers.append((scores[-1], order, END, tokens, scores, True))
                    continue
                logits = (emb[tokens[-1]] + pos[position]) @ w
                p = np.exp(logits - logits.max())
                p = (p / p.sum()).astype(np.float32)
                for tok in np.argsort(-p, kind="stable")[:BEAM]:
                    s = float(np.float32(np.float32(math.log(p[tok])) + np.float32(scores[-1])))
                    offers.append((s, order, int(tok), tokens, scores, False))
            offers.sort(key=lambda o: (-o[0], -o[1]))
            picks = offers[:BEAM]
            if all(ended and tok == END for _, _, tok, _, _, ended in picks):
                finished = [(t, s) for t, s, _ in hyps]
                break
            # the next step's hypotheses, grouped by the hypothesis they extend (as the LoD)
            picks.sort(key=lambda o: o[1])
            hyps = [(tokens if ended else tokens + [tok], scores if ended else scores + [s],
                     ended or tok == END) for s, _, tok, tokens, scores, ended in picks]
        if finished is None:
            finished = [(t, s) for t, s, _ in hyps]
        finished.sort(key=lambda h: -h[1][-1])
        results.append(finished)
    return results


@pytest.mark.parametrize("seed, end_bias", [(0, 0.8), (1, 0.8), (2, 0.8), (3, 8.0)])
def test_beam_decoding_matches_a_numpy_beam_search(seed, end_bias):
    """end_bias 8: every hypothesis ends within a few steps, the sources are pruned and the
    loop stops on is_empty before MAX_LEN."""
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((V, D)).astype(np.float32)
    w = (2 * rng.standard_normal((D, V))).astype(np.float32)
    pos = rng.standard_normal((MAX_LEN, D)).astype(np.float32)
    w[:, END] += end_bias  # some (or all) hypotheses end before MAX_LEN
    main, startup, sentences, sentence_scores = _decoder(emb, pos, w)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    starts = [0, 2, 4]
    place = fluid.CPUPlace()
    lengths = [[1] * len(starts)] * 2
    feed = {"start": fluid.create_lod_tensor(np.array(starts, np.int64)[:, None], lengths,
                                             place),
            "init": fluid.create_lod_tensor(np.zeros((len(starts), 1), np.float32), lengths,
                                            place)}
    got_ids, got_scores = exe.run(main, feed=feed, fetch_list=[sentences, sentence_scores],
                                  scope=scope, return_numpy=False)
    lod = got_ids.lod()
    assert got_scores.lod() == lod and len(lod[0]) == len(starts) + 1
    tokens, values = np.array(got_ids), np.array(got_scores)
    want = _numpy_beam_search(emb, pos, w, starts)
    for src, hyps in enumerate(want):
        first, last = lod[0][src], lod[0][src + 1]
        got = [(tokens[lod[1][h]:lod[1][h + 1]].tolist(), values[lod[1][h]:lod[1][h + 1]])
               for h in range(first, last)]
        finals = [scores[-1] for _, scores in got]
        assert finals == sorted(finals, reverse=True), f"source {src}: best first"
        # equal final scores come in no particular order (Fluid sorts with std::sort)
        rank = lambda h: (-round(float(h[1][-1]), 4), h[0])  # noqa: E731
        assert len(got) == len(hyps), f"source {src}"
        for (g_tokens, g_scores), (w_tokens, w_scores) in zip(sorted(got, key=rank),
                                                              sorted(hyps, key=rank),
                                                              strict=True):
            assert g_tokens == w_tokens, f"source {src}"
            np.testing.assert_allclose(g_scores, w_scores, rtol=1e-5, atol=1e-6)
    if end_bias > 1:
        assert all(h[0][-1] == END and len(h[0]) <= MAX_LEN for hyps in want for h in hyps)
