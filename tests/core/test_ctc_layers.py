"""CTC layers: the programs Fluid 1.8 builds (warpctc, ctc_greedy_decoder = top_k +
ctc_align, edit_distance with sequence_erase), their values through the executor with LoD
feeds, a small model trained with warpctc, and whole-program gradients."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch, return_numpy=True):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, return_numpy=return_numpy)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ctc_by_alpha(x, label, blank):
    """−log p(label | x) by the alpha recursion in probability space (one sequence)."""
    p = _softmax(x.astype(np.float64))
    ext = [blank]
    for v in label:
        ext += [v, blank]
    alpha = np.zeros(len(ext))
    alpha[0] = p[0, blank]
    if len(ext) > 1:
        alpha[1] = p[0, ext[1]]
    for t in range(1, len(x)):
        new = np.zeros_like(alpha)
        for s in range(len(ext)):
            a = alpha[s] + (alpha[s - 1] if s > 0 else 0.0)
            if s > 1 and ext[s] != blank and ext[s] != ext[s - 2]:
                a += alpha[s - 2]
            new[s] = a * p[t, ext[s]]
        alpha = new
    return -np.log(alpha[-1] + (alpha[-2] if len(ext) > 1 else 0.0))


def test_warpctc_builds_fluids_op():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [5], lod_level=1)
        y = layers.data("y", [1], dtype="int32", lod_level=1)
        loss = layers.warpctc(x, y, blank=4, norm_by_times=True)
        xp = layers.data("xp", [3, 2, 5], append_batch_size=False)
        yp = layers.data("yp", [2, 3], dtype="int32", append_batch_size=False)
        xl = layers.data("xl", [2], dtype="int64", append_batch_size=False)
        yl = layers.data("yl", [2], dtype="int64", append_batch_size=False)
        padded = layers.warpctc(xp, yp, input_length=xl, label_length=yl)
    ops = [o for o in main.global_block().ops if o.type == "warpctc"]
    assert len(ops) == 2
    assert ops[0].input("Logits") == ["x"] and ops[0].input("Label") == ["y"]
    assert ops[0].output("Loss") == [loss.name] and len(ops[0].output("WarpCTCGrad")) == 1
    assert ops[0].attr("blank") == 4 and ops[0].attr("norm_by_times") is True
    assert ops[1].input("LogitsLength") == ["xl"] and ops[1].input("LabelLength") == ["yl"]
    assert ops[1].attr("blank") == 0 and ops[1].attr("norm_by_times") is False
    assert tuple(loss.shape) == (-1, 1) and tuple(padded.shape) == (-1, 1)
    assert loss.dtype == "float32"


def test_warpctc_argument_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [5], lod_level=1)
        y = layers.data("y", [1], dtype="int32", lod_level=1)
        y64 = layers.data("y64", [1], dtype="int64", lod_level=1)
        xl = layers.data("xl", [1], dtype="int64")
        with pytest.raises(TypeError, match=r"label must have dtype in \['int32'\]"):
            layers.warpctc(x, y64)
        with pytest.raises(ValueError, match="blank=5 must lie in"):
            layers.warpctc(x, y, blank=5)
        with pytest.raises(ValueError, match="both input_length and label_length"):
            layers.warpctc(x, y, input_length=xl)
        with pytest.raises(TypeError, match="input must be a Variable"):
            layers.warpctc(np.zeros((2, 5)), y)


def test_warpctc_values_through_the_executor():
    rng = np.random.default_rng(0)
    lengths, labels = [4, 3, 2], [[1, 2], [3], [2, 2]]
    x = rng.standard_normal((sum(lengths), 4)).astype(np.float32)
    lab = np.array(sum(labels, []), np.int32).reshape(-1, 1)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        xv = layers.data("x", [4], lod_level=1)
        yv = layers.data("y", [1], dtype="int32", lod_level=1)
        loss = layers.warpctc(xv, yv)
    feed = {"x": fluid.create_lod_tensor(x, [lengths], fluid.CPUPlace()),
            "y": fluid.create_lod_tensor(lab, [[len(v) for v in labels]], fluid.CPUPlace())}
    (got,) = _run(main, startup, feed, [loss])
    o = np.cumsum([0] + lengths)
    expected = [_ctc_by_alpha(x[o[i]:o[i + 1]], labels[i], 0) for i in range(2)] + [0.0]
    np.testing.assert_allclose(got.ravel(), expected, rtol=1e-5)  # [2, 2] needs 3 steps


def test_ctc_greedy_decoder_is_topk_then_ctc_align():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4], lod_level=1)
        out = layers.ctc_greedy_decoder(x, blank=0)
        xp = layers.data("xp", [3, 4])
        xl = layers.data("xl", [1], dtype="int64")
        pout, plen = layers.ctc_greedy_decoder(xp, blank=3, input_length=xl, padding_value=-1)
    types = [o.type for o in main.global_block().ops]
    assert types == ["top_k", "ctc_align", "top_k", "squeeze2", "ctc_align"]
    ops = main.global_block().ops
    assert ops[0].attr("k") == 1 and ops[1].input("Input") == ops[0].output("Indices")
    assert ops[1].attr("merge_repeated") is True and ops[1].attr("blank") == 0
    assert ops[3].attr("axes") == [2] and ops[4].input("InputLength") == ["xl"]
    assert ops[4].attr("padding_value") == -1 and ops[4].output("OutputLength") == [plen.name]
    assert out.dtype == "int64" and tuple(out.shape) == (-1, 1)
    assert tuple(pout.shape) == (-1, 3) and tuple(plen.shape) == (-1, 1)

    probs = np.array([[0.6, 0.1, 0.3, 0.1], [0.3, 0.2, 0.4, 0.1], [0.1, 0.5, 0.1, 0.3],
                      [0.5, 0.1, 0.3, 0.1], [0.5, 0.1, 0.3, 0.1], [0.2, 0.2, 0.2, 0.4],
                      [0.2, 0.2, 0.1, 0.5], [0.5, 0.1, 0.3, 0.1]], np.float32)
    padded = np.stack([probs[:3], probs[4:7]])  # [2, 3, 4]
    feed = {"x": fluid.create_lod_tensor(probs, [[4, 4]], fluid.CPUPlace()), "xp": padded,
            "xl": np.array([[3], [2]], np.int64)}
    got, got_pad, got_len = _run(main, startup, feed, [out, pout, plen], return_numpy=False)
    # Fluid's documented example: [[2], [1], [3]] with lod [[2, 1]]
    assert np.asarray(got).ravel().tolist() == [2, 1, 3]
    assert got.recursive_sequence_lengths() == [[2, 1]]
    # blank 3: sequence 0's argmaxes 0 2 1 -> 0 2 1; sequence 1 (2 steps) 0 3 -> 0
    assert np.asarray(got_pad).tolist() == [[0, 2, 1], [0, -1, -1]]
    assert np.asarray(got_len).tolist() == [[3], [1]]


def test_edit_distance_builds_ops_and_computes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        h = layers.data("h", [1], dtype="int64", lod_level=1)
        r = layers.data("r", [1], dtype="int64", lod_level=1)
        dist, num = layers.edit_distance(h, r, ignored_tokens=[0])
        raw, _ = layers.edit_distance(h, r, normalized=False)
        with pytest.raises(TypeError, match="must have dtype in"):
            layers.edit_distance(layers.data("f", [1], lod_level=1), r)
        hp = layers.data("hp", [4], dtype="int64")
        with pytest.raises(NotImplementedError, match="ignored_tokens"):
            layers.edit_distance(hp, hp, ignored_tokens=[1], input_length=num,
                                 label_length=num)
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["sequence_erase", "sequence_erase", "edit_distance",
                                     "edit_distance"]
    assert ops[0].attr("tokens") == [0] and ops[0].input("X") == ["h"]
    assert ops[2].input("Hyps") == ops[0].output("Out")
    assert ops[2].input("Refs") == ops[1].output("Out")
    assert ops[2].attr("normalized") is True and ops[3].attr("normalized") is False
    assert tuple(num.shape) == (1,) and dist.dtype == "float32"
    assert not hasattr(layers, "sequence_erase")  # not a public layer in Fluid 1.8

    hyps, refs = [[1, 0, 2, 3], [4, 4]], [[1, 2, 0, 0, 5], [4, 0]]
    feed = {"h": fluid.create_lod_tensor(np.array(sum(hyps, []), np.int64)[:, None],
                                         [[len(v) for v in hyps]], fluid.CPUPlace()),
            "r": fluid.create_lod_tensor(np.array(sum(refs, []), np.int64)[:, None],
                                         [[len(v) for v in refs]], fluid.CPUPlace())}
    got, got_num, got_raw = _run(main, startup, feed, [dist, num, raw])
    # without the 0s: [1 2 3] vs [1 2 5] -> 1 / 3; [4 4] vs [4] -> 1 / 1
    np.testing.assert_allclose(got.ravel(), [1 / 3, 1.0], rtol=1e-6)
    assert got_num.tolist() == [2]
    # with them: [1 0 2 3] vs [1 2 0 0 5] -> 3; [4 4] vs [4 0] -> 1
    np.testing.assert_allclose(got_raw.ravel(), [3.0, 1.0])


def test_small_model_trained_with_warpctc_lowers_its_loss():
    rng = np.random.default_rng(7)
    lengths, labels = [6, 5, 7], [[1, 2], [3], [2, 1, 3]]
    feats = rng.standard_normal((sum(lengths), 5)).astype(np.float32)
    lab = np.array(sum(labels, []), np.int32)[:, None]
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [5], lod_level=1)
        y = layers.data("y", [1], dtype="int32", lod_level=1)
        hidden = layers.fc(x, size=8, act="tanh")
        logits = layers.fc(hidden, size=4)
        cost = layers.mean(layers.warpctc(logits, y, norm_by_times=False))
        fluid.optimizer.SGD(learning_rate=0.2).minimize(cost)
    feed = {"x": fluid.create_lod_tensor(feats, [lengths], fluid.CPUPlace()),
            "y": fluid.create_lod_tensor(lab, [[len(v) for v in labels]], fluid.CPUPlace())}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[cost], scope=scope)[0].ravel()[0])
              for _ in range(30)]
    assert losses[-1] < 0.6 * losses[0], losses
    assert all(np.isfinite(losses))


@pytest.mark.parametrize("padded", [False, True])
def test_whole_program_gradient_through_warpctc(padded):
    rng = np.random.default_rng(8)
    lengths, labels = [4, 3], [[1, 2], [2]]
    feats = rng.standard_normal((sum(lengths), 3))
    lab = np.array(sum(labels, []), np.int32)[:, None]
    weights = rng.uniform(0.5, 1.5, (2, 1))

    def build():
        w = layers.data("w", [2, 1], dtype="float64", append_batch_size=False)
        attr = fluid.ParamAttr(name="proj")
        bias = fluid.ParamAttr(name="proj_b")
        if padded:
            x = layers.data("x", [4, 2, 3], dtype="float64", append_batch_size=False)
            y = layers.data("y", [2, 2], dtype="int32", append_batch_size=False)
            xl = layers.data("xl", [2], dtype="int64", append_batch_size=False)
            yl = layers.data("yl", [2], dtype="int64", append_batch_size=False)
            logits = layers.fc(x, size=3, num_flatten_dims=2, param_attr=attr, bias_attr=bias)
            loss = layers.warpctc(logits, y, blank=0, input_length=xl, label_length=yl)
        else:
            x = layers.data("x", [3], dtype="float64", lod_level=1)
            y = layers.data("y", [1], dtype="int32", lod_level=1)
            logits = layers.fc(x, size=3, param_attr=attr, bias_attr=bias)
            loss = layers.warpctc(logits, y, blank=0)
        return layers.reduce_sum(layers.elementwise_mul(loss, w))

    if padded:
        px = np.zeros((4, 2, 3))
        px[:4, 0], px[:3, 1] = feats[:4], feats[4:]
        feed = {"x": px, "y": np.array([[1, 2], [2, 0]], np.int32),
                "xl": np.array(lengths, np.int64), "yl": np.array([2, 1], np.int64),
                "w": weights}
    else:
        feed = {"x": fluid.create_lod_tensor(feats, [lengths], fluid.CPUPlace()),
                "y": fluid.create_lod_tensor(lab, [[2, 1]], fluid.CPUPlace()), "w": weights}
    got = program_grads_and_numeric(build, feed, ["proj", "proj_b"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0
