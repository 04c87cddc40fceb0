"""linear_chain_crf and crf_decoding against brute force: every tag sequence of every chain
enumerated, scored as Fluid's linear_chain_crf_op.h defines it, for log Z, the label's
likelihood and the best path; gradients are in test_grad_check.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dask_fluid.ops.registry import LOD_KEY

from . import run_op

rng = np.random.default_rng(0)


def _score(x, w, y):
    s = w[0, y[0]] + w[1, y[-1]] + sum(x[k, y[k]] for k in range(len(y)))
    return s + sum(w[2 + y[k - 1], y[k]] for k in range(1, len(y)))


def _brute(x, w):
    """(log Z, best path) of one chain by enumeration."""
    tags = x.shape[1]
    paths = list(itertools.product(range(tags), repeat=x.shape[0]))
    scores = np.array([_score(x, w, p) for p in paths])
    top = scores.max()
    return top + np.log(np.exp(scores - top).sum()), list(paths[int(np.argmax(scores))])


def test_linear_chain_crf_nll_is_log_z_minus_the_label_score():
    offsets = (0, 3, 4, 4, 8)  # chains of 3, 1, 0 and 4 steps
    x, w = rng.standard_normal((8, 3)), rng.standard_normal((5, 3))
    label = rng.integers(0, 3, (8, 1))
    res = run_op("linear_chain_crf", {"Emission": [x], "Transition": [w], "Label": [label]},
                 {"_lods": {"Emission": [(offsets,)]}})
    expected = []
    for a, e in zip(offsets[:-1], offsets[1:], strict=True):
        expected.append(0.0 if a == e else _brute(x[a:e], w)[0] - _score(x[a:e], w,
                                                                          label[a:e, 0]))
    np.testing.assert_allclose(res["LogLikelihood"][0][:, 0], expected, rtol=1e-10)
    np.testing.assert_allclose(res["Alpha"][0][[0, 1, 2, 3, 4, 7]].sum(axis=1), 1.0)
    np.testing.assert_allclose(res["TransitionExps"][0], np.exp(w))
    assert res[LOD_KEY]["Alpha"] == [(offsets,)] and res[LOD_KEY]["LogLikelihood"] == [None]


def test_padded_chains_with_length_give_the_same_costs_and_paths_as_lod():
    x, w = rng.standard_normal((2, 4, 3)), rng.standard_normal((5, 3))
    label, length = rng.integers(0, 3, (2, 4)), np.array([4, 2])
    padded = run_op("linear_chain_crf", {"Emission": [x], "Transition": [w], "Label": [label],
                                         "Length": [length]})
    flat = np.concatenate([x[0], x[1, :2]])
    flat_label = np.concatenate([label[0], label[1, :2]]).reshape(-1, 1)
    lod = {"_lods": {"Emission": [((0, 4, 6),)]}}
    plain = run_op("linear_chain_crf", {"Emission": [flat], "Transition": [w],
                                        "Label": [flat_label]}, lod)
    np.testing.assert_allclose(padded["LogLikelihood"][0], plain["LogLikelihood"][0], rtol=1e-12)
    path = run_op("crf_decoding", {"Emission": [x], "Transition": [w], "Length": [length]})
    flat_path = run_op("crf_decoding", {"Emission": [flat], "Transition": [w]}, lod)
    assert path["ViterbiPath"][0].shape == (2, 4)
    np.testing.assert_array_equal(path["ViterbiPath"][0][1, 2:], [0, 0])
    np.testing.assert_array_equal(np.concatenate([path["ViterbiPath"][0][0],
                                                  path["ViterbiPath"][0][1, :2]]),
                                  flat_path["ViterbiPath"][0][:, 0])


def test_crf_decoding_finds_the_best_path_and_compares_it_with_the_label():
    offsets = (0, 4, 5, 8)
    x, w = rng.standard_normal((8, 3)), rng.standard_normal((5, 3))
    lod = {"_lods": {"Emission": [(offsets,)]}}
    res = run_op("crf_decoding", {"Emission": [x], "Transition": [w]}, lod)
    best = sum((_brute(x[a:e], w)[1] for a, e in zip(offsets[:-1], offsets[1:], strict=True)),
               [])
    np.testing.assert_array_equal(res["ViterbiPath"][0][:, 0], best)
    assert res["ViterbiPath"][0].dtype == np.int64 and res[LOD_KEY]["ViterbiPath"] == [(offsets,)]
    label = np.array(best).reshape(-1, 1)
    label[[1, 6]] = (label[[1, 6]] + 1) % 3
    hits = run_op("crf_decoding", {"Emission": [x], "Transition": [w], "Label": [label]}, lod)
    np.testing.assert_array_equal(hits["ViterbiPath"][0][:, 0], [1, 0, 1, 1, 1, 1, 0, 1])


def test_crf_refuses_bad_transitions_labels_and_missing_lod():
    x, w = np.zeros((3, 2)), np.zeros((4, 2))
    lod = {"_lods": {"Emission": [((0, 3),)]}}
    with pytest.raises(ValueError, match=r"Transition must be \[D \+ 2, D\] = \[4, 2\]"):
        run_op("linear_chain_crf", {"Emission": [x], "Transition": [np.zeros((2, 2))],
                                    "Label": [np.zeros((3, 1), np.int64)]}, lod)
    with pytest.raises(ValueError, match=r"tag 2 is out of range: labels must lie in \[0, 2\)"):
        run_op("linear_chain_crf", {"Emission": [x], "Transition": [w],
                                    "Label": [np.array([[0], [2], [1]])]}, lod)
    with pytest.raises(ValueError, match=r"Input\(Emission\) has no LoD"):
        run_op("crf_decoding", {"Emission": [x], "Transition": [w]})
    with pytest.raises(ValueError, match=r"Length must give each of the 1 rows"):
        run_op("crf_decoding", {"Emission": [np.zeros((1, 3, 2))], "Transition": [w],
                                "Length": [np.array([4])]})
