"""Kernels of ``spectral_norm``, ``inplace_abn``, ``sample_logits`` and ``tree_conv`` against
independent numpy references (SVD, batch norm composed with the activation, explicit loops,
an explicit tree traversal, ports of Paddle's unit-test cases), and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from . import run_op

# -- spectral_norm -------------------------------------------------------------------------------


def _sn_reference(w, u, v, dim, iters, eps):
    """Paddle's test_spectral_norm_op.py reference, rewritten: transpose dim first."""
    perm = [dim] + [i for i in range(w.ndim) if i != dim]
    mat = np.transpose(w, perm).reshape(w.shape[dim], -1)
    u, v = u.copy(), v.copy()
    for _ in range(iters):
        v = mat.T.dot(u)
        v /= np.linalg.norm(v) + eps
        u = mat.dot(v)
        u /= np.linalg.norm(u) + eps
    return w / u.dot(mat).dot(v)


@pytest.mark.parametrize("shape, dim, iters", [((2, 3), 0, 1), ((10, 12), 0, 5),
                                               ((3, 4, 2, 2), 1, 3), ((2, 5, 3), 1, 0)])
def test_spectral_norm_matches_the_power_iteration_reference(shape, dim, iters):
    rng = np.random.default_rng(3)
    w = rng.random(shape)
    h = shape[dim]
    u, v = rng.standard_normal(h), rng.standard_normal(w.size // h)
    u0, v0 = u.copy(), v.copy()
    out = run_op("spectral_norm", {"Weight": [w], "U": [u], "V": [v]},
                 {"dim": dim, "power_iters": iters, "eps": 1e-12})["Out"][0]
    np.testing.assert_allclose(out, _sn_reference(w, u, v, dim, iters, 1e-12), rtol=1e-12)
    # 1.8 does not write the iterated vectors back
    np.testing.assert_array_equal(u, u0)
    np.testing.assert_array_equal(v, v0)


def test_spectral_norm_paddle_case_ones_weight():
    # Paddle's first test case: weight of ones with row 1 = 2, U and V ones
    w = np.ones((2, 3))
    w[1, :] = 2.0
    out = run_op("spectral_norm", {"Weight": [w], "U": [np.ones(2)], "V": [np.ones(3)]},
                 {"dim": 0, "power_iters": 1})["Out"][0]
    sigma = np.linalg.svd(w, compute_uv=False)[0]  # rank 1: one iteration is exact
    np.testing.assert_allclose(out, w / sigma, rtol=1e-12)


def test_spectral_norm_sigma_tends_to_the_largest_singular_value():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 2, 4))
    out = run_op("spectral_norm", {"Weight": [w], "U": [rng.standard_normal(6)],
                                   "V": [rng.standard_normal(8)]},
                 {"dim": 0, "power_iters": 200})["Out"][0]
    sigma = np.linalg.svd(w.reshape(6, 8), compute_uv=False)[0]
    np.testing.assert_allclose(w / out, sigma, rtol=1e-9)
    assert np.linalg.svd(out.reshape(6, 8), compute_uv=False)[0] == pytest.approx(1.0)


def test_spectral_norm_grad_agrees_with_paddles_formula_for_a_uniform_out_grad():
    # Paddle's kernel: dW = dOut * (1 - u vᵀ Σ Out) / σ; equal to the exact one when dOut is
    # uniform (its unit test's mean loss)
    rng = np.random.default_rng(1)
    w, u, v = rng.random((4, 5)), rng.standard_normal(4), rng.standard_normal(5)
    d = np.full((4, 5), 0.05)
    got = run_op("spectral_norm_grad", {"Weight": [w], "U": [u], "V": [v], "Out@GRAD": [d]},
                 {"power_iters": 2})["Weight@GRAD"][0]
    uu, vv = u.copy(), v.copy()
    for _ in range(2):
        vv = w.T @ uu
        vv /= np.linalg.norm(vv) + 1e-12
        uu = w @ vv
        uu /= np.linalg.norm(uu) + 1e-12
    sigma = uu @ w @ vv
    paddle = d * (1 - np.outer(uu, vv) * (w / sigma).sum()) / sigma
    np.testing.assert_allclose(got, paddle, rtol=1e-12)


def test_spectral_norm_errors():
    w = np.ones((2, 3))
    with pytest.raises(ValueError, match="dim can only be 0 or 1"):
        run_op("spectral_norm", {"Weight": [w], "U": [np.ones(2)], "V": [np.ones(3)]},
               {"dim": 2})
    with pytest.raises(ValueError, match="U must have 2 elements and V 3"):
        run_op("spectral_norm", {"Weight": [w], "U": [np.ones(3)], "V": [np.ones(3)]})
    with pytest.raises(ValueError, match="rank 2 to 5"):
        run_op("spectral_norm", {"Weight": [np.ones(3)], "U": [np.ones(3)], "V": [np.ones(1)]})
    with pytest.raises(ValueError, match="power_iters must be >= 0"):
        run_op("spectral_norm", {"Weight": [w], "U": [np.ones(2)], "V": [np.ones(3)]},
               {"power_iters": -1})


# -- inplace_abn ---------------------------------------------------------------------------------

def _bn_ins(rng, shape, c):
    return {"X": [rng.standard_normal(shape)], "Scale": [rng.uniform(0.5, 1.5, c)],
            "Bias": [rng.standard_normal(c)], "Mean": [rng.standard_normal(c)],
            "Variance": [rng.uniform(0.5, 1.5, c)]}


@pytest.mark.parametrize("act, alpha", [("identity", 1.0), ("leaky_relu", 0.1), ("elu", 0.7)])
@pytest.mark.parametrize("attrs", [{}, {"is_test": True}, {"data_layout": "NHWC"}])
def test_inplace_abn_is_batch_norm_then_the_activation(act, alpha, attrs):
    rng = np.random.default_rng(2)
    ins = _bn_ins(rng, (4, 3, 2, 3), 3)
    bn = run_op("batch_norm", ins, attrs)
    abn = run_op("inplace_abn", ins, {**attrs, "activation": act, "alpha": alpha})
    z = bn["Y"][0]
    ref = {"identity": z, "leaky_relu": np.where(z > 0, z, alpha * z),
           "elu": np.where(z > 0, z, alpha * (np.exp(np.minimum(z, 0)) - 1))}[act]
    np.testing.assert_allclose(abn["Y"][0], ref, rtol=1e-12, atol=1e-14)
    for slot in ("MeanOut", "VarianceOut", "SavedMean", "SavedVariance"):
        np.testing.assert_allclose(abn[slot][0], bn[slot][0], rtol=1e-12)


def test_inplace_abn_grad_from_y_equals_batch_norm_grad_of_the_composition():
    rng = np.random.default_rng(4)
    ins = _bn_ins(rng, (5, 2, 3), 2)
    attrs = {"activation": "leaky_relu", "alpha": 0.2}
    fwd = run_op("inplace_abn", ins, attrs)
    z = run_op("batch_norm", ins)["Y"][0]
    dy = rng.standard_normal(z.shape)
    got = run_op("inplace_abn_grad", {"Y": fwd["Y"], "Scale": ins["Scale"], "Bias": ins["Bias"],
                                      "SavedMean": fwd["SavedMean"],
                                      "SavedVariance": fwd["SavedVariance"], "Y@GRAD": [dy]},
                 attrs)
    ref = run_op("batch_norm_grad", {**ins, "SavedMean": fwd["SavedMean"],
                                     "SavedVariance": fwd["SavedVariance"],
                                     "Y@GRAD": [dy * np.where(z > 0, 1.0, 0.2)]})
    for slot in ("X@GRAD", "Scale@GRAD", "Bias@GRAD"):
        np.testing.assert_allclose(got[slot][0], ref[slot][0], rtol=1e-8, atol=1e-10)


def test_inplace_abn_errors():
    ins = _bn_ins(np.random.default_rng(0), (2, 3), 3)
    with pytest.raises(ValueError, match="activation must be one of"):
        run_op("inplace_abn", ins, {"activation": "relu"})
    with pytest.raises(ValueError, match="alpha must be > 0 for elu"):
        run_op("inplace_abn", ins, {"activation": "elu", "alpha": 0.0})


# -- sample_logits -------------------------------------------------------------------------------

def _sampled_reference(logits, samples, probs, num_true, remove_hits):
    out = np.empty(samples.shape)
    for i in range(samples.shape[0]):
        for j in range(samples.shape[1]):
            out[i, j] = logits[i, samples[i, j]] - np.log(probs[i, j])
            if remove_hits and j >= num_true and samples[i, j] in samples[i, :num_true]:
                out[i, j] -= 1e20
    return out


@pytest.mark.parametrize("remove_hits", [True, False])
def test_sample_logits_customized_samples_by_loops(remove_hits):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((3, 7))
    labels = np.array([[1, 2], [0, 6], [3, 4]])
    samples = np.array([[1, 2, 5, 2, 0], [0, 6, 1, 3, 6], [3, 4, 2, 5, 1]])
    probs = rng.uniform(0.05, 0.9, samples.shape)
    res = run_op("sample_logits", {"Logits": [logits], "Labels": [labels],
                                   "CustomizedSamples": [samples],
                                   "CustomizedProbabilities": [probs]},
                 {"use_customized_samples": True, "num_samples": 3,
                  "remove_accidental_hits": remove_hits})
    np.testing.assert_allclose(res["SampledLogits"][0],
                               _sampled_reference(logits, samples, probs, 2, remove_hits))
    np.testing.assert_array_equal(res["SampledLabels"][0], [[0, 1]] * 3)
    np.testing.assert_array_equal(res["Samples"][0], samples)


def test_sample_logits_log_uniform_sampler():
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((4, 20))
    labels = np.array([[3], [0], [19], [7]])
    attrs = {"num_samples": 6, "seed": 11}
    a = run_op("sample_logits", {"Logits": [logits], "Labels": [labels]}, attrs)
    b = run_op("sample_logits", {"Logits": [logits], "Labels": [labels]}, attrs)
    s, p = a["Samples"][0], a["Probabilities"][0]
    np.testing.assert_array_equal(s, b["Samples"][0])  # deterministic per seed
    assert s.shape == (4, 7) and s.dtype == np.int64
    np.testing.assert_array_equal(s[:, 0], labels[:, 0])
    for row in s[:, 1:]:  # unique draws, the same for every row
        assert len(set(row.tolist())) == 6
        np.testing.assert_array_equal(row, s[0, 1:])
    q = np.log((s + 2.0) / (s + 1.0)) / np.log(21.0)
    # each probability is adjusted for the draws: 1 − (1 − q)^tries, or q · 6 without repeats
    tries = np.log1p(-p[0, 0]) / np.log1p(-q[0, 0]) if not np.allclose(p, q * 6) else 6
    np.testing.assert_allclose(p, q * 6 if tries == 6 else -np.expm1(tries * np.log1p(-q)))
    np.testing.assert_allclose(a["SampledLogits"][0],
                               _sampled_reference(logits, s, p, 1, True), rtol=1e-12)
    seeds = {tuple(run_op("sample_logits", {"Logits": [logits], "Labels": [labels]},
                          {"num_samples": 6, "seed": 0})["Samples"][0][0]) for _ in range(5)}
    assert len(seeds) > 1  # seed 0 draws anew each run


def test_sample_logits_grad_scatters_back_adding_repeats():
    samples = np.array([[1, 2, 2], [0, 3, 1]])
    d = np.arange(6.0).reshape(2, 3) + 1
    got = run_op("sample_logits_grad", {"Logits": [np.zeros((2, 4))], "Samples": [samples],
                                        "SampledLogits@GRAD": [d]})["Logits@GRAD"][0]
    np.testing.assert_array_equal(got, [[0, 1, 5, 0], [4, 6, 0, 5]])


def test_sample_logits_errors():
    logits, labels = np.zeros((2, 5)), np.zeros((2, 1), np.int64)
    with pytest.raises(ValueError, match="cannot exceed the 5 classes"):
        run_op("sample_logits", {"Logits": [logits], "Labels": [labels]}, {"num_samples": 6})
    with pytest.raises(ValueError, match="needs CustomizedSamples"):
        run_op("sample_logits", {"Logits": [logits], "Labels": [labels]},
               {"use_customized_samples": True})
    with pytest.raises(ValueError, match="must be 2-D"):
        run_op("sample_logits", {"Logits": [np.zeros(5)], "Labels": [labels]})


# -- tree_conv -----------------------------------------------------------------------------------

def _tree2col_reference(nodes, edges, max_depth):
    """The patches by explicit recursion over each root's descendants."""
    kids: dict[int, list[int]] = {}
    count = 1
    for u, v in edges:
        if u == 0 or v == 0:
            break
        kids.setdefault(u, []).append(v)
        count += 1
    f = nodes.shape[1]
    patches = np.zeros((count, f * 3))

    def visit(root, node, depth, index, siblings):
        eta_t = (max_depth - depth) / max_depth
        frac = 0.5 if siblings == 1 else (index - 1) / (siblings - 1)
        eta_l = (1 - eta_t) * frac
        eta_r = (1 - eta_t) * (1 - eta_l)
        for i in range(f):
            patches[root - 1, 3 * i] += eta_l * nodes[node - 1, i]
            patches[root - 1, 3 * i + 1] += eta_r * nodes[node - 1, i]
            patches[root - 1, 3 * i + 2] += eta_t * nodes[node - 1, i]
        if depth + 1 < max_depth:
            children = kids.get(node, [])
            for k, c in enumerate(children):
                visit(root, c, depth + 1, k + 1, len(children))

    for r in range(1, count + 1):
        visit(r, r, 0, 1, 1)
    return patches


@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_tree_conv_matches_tree2col_by_traversal(max_depth):
    rng = np.random.default_rng(7)
    # Paddle's test_tree_conv_op.py tree: 1 -> 2, 3; 2 -> 4, 5; 3 -> 6; 4 -> 7, 8, 9 ...
    edges = np.array([[[1, 2], [1, 3], [2, 4], [2, 5], [3, 6], [4, 7], [4, 8], [4, 9],
                       [0, 0], [0, 0]],
                      [[1, 2], [2, 3], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0],
                       [0, 0], [0, 0]]], np.int32)
    nodes = rng.standard_normal((2, 10, 4))
    filt = rng.standard_normal((4, 3, 2, 3))
    out = run_op("tree_conv", {"NodesVector": [nodes], "EdgeSet": [edges], "Filter": [filt]},
                 {"max_depth": max_depth})["Out"][0]
    assert out.shape == (2, 10, 2, 3)
    for b in range(2):
        patch = _tree2col_reference(nodes[b], edges[b], max_depth)
        ref = np.zeros((10, 6))
        ref[:len(patch)] = patch @ filt.reshape(12, 6)
        np.testing.assert_allclose(out[b].reshape(10, 6), ref, rtol=1e-12, atol=1e-14)


def test_tree_conv_errors():
    nodes, filt = np.zeros((1, 3, 2)), np.zeros((2, 3, 1, 1))
    with pytest.raises(ValueError, match="more than NodesVector's 3 rows"):
        run_op("tree_conv", {"NodesVector": [nodes], "Filter": [filt],
                             "EdgeSet": [np.array([[[1, 2], [2, 3], [3, 4]]], np.int32)]})
    with pytest.raises(ValueError, match=r"Filter must be \[2, 3, output_size"):
        run_op("tree_conv", {"NodesVector": [nodes], "Filter": [np.zeros((3, 3, 1, 1))],
                             "EdgeSet": [np.array([[[1, 2]]], np.int32)]})
    with pytest.raises(ValueError, match="max_depth must be >= 1"):
        run_op("tree_conv", {"NodesVector": [nodes], "Filter": [filt],
                             "EdgeSet": [np.array([[[1, 2]]], np.int32)]}, {"max_depth": 0})
