"""``layers.rank_loss``, ``margin_rank_loss``, ``bpr_loss``, ``teacher_student_sigmoid_loss``,
``bilinear_tensor_product``, ``add_position_encoding``, ``dice_loss`` and ``npair_loss`` as
Fluid 1.8 builds them: ops, slots, attributes, parameters and shapes; values through the
executor against numpy; the errors; and a whole program's gradients through all of them
against central differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _softplus(v):
    return np.maximum(v, 0) + np.log1p(np.exp(-np.abs(v)))


def test_ranking_losses_build_fluids_ops_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        label = layers.data("label", [1])
        left = layers.data("left", [1])
        right = layers.data("right", [1])
        rank = layers.rank_loss(label, left, right)
        margin = layers.margin_rank_loss(label, left, right)
        logits = layers.data("logits", [4])
        pos = layers.data("pos", [1], dtype="int64")
        bpr = layers.bpr_loss(logits, pos)
        tlabel = layers.data("tlabel", [1])
        tssl = layers.teacher_student_sigmoid_loss(left, tlabel, soft_max_up_bound=10.0)
    ops = {o.type: o for o in main.global_block().ops}
    assert [o.type for o in main.global_block().ops] == [
        "rank_loss", "margin_rank_loss", "bpr_loss", "teacher_student_sigmoid_loss"]
    assert ops["rank_loss"].input("Label") == [label.name]
    assert ops["rank_loss"].input("Left") == [left.name]
    assert ops["margin_rank_loss"].input("X1") == [left.name]
    assert ops["margin_rank_loss"].input("X2") == [right.name]
    assert ops["margin_rank_loss"].attr("margin") == pytest.approx(0.1)
    assert len(ops["margin_rank_loss"].output("Activated")) == 1
    assert ops["bpr_loss"].output("Y") == [bpr.name]
    assert ops["teacher_student_sigmoid_loss"].attr("soft_max_up_bound") == 10.0
    assert ops["teacher_student_sigmoid_loss"].attr("soft_max_lower_bound") == -15.0
    assert rank.shape == margin.shape == bpr.shape == tssl.shape == (-1, 1)
    rng = np.random.default_rng(3)
    lab = np.array([[1.0], [-1.0], [1.0], [0.5]], np.float32)
    lv = rng.standard_normal((4, 1)).astype(np.float32)
    rv = rng.standard_normal((4, 1)).astype(np.float32)
    xv = rng.standard_normal((4, 4)).astype(np.float32)
    pv = np.array([[0], [3], [1], [2]], np.int64)
    tv = np.array([[-2.0], [-1.0], [0.25], [1.5]], np.float32)
    got = _run(main, startup, {"label": lab, "left": lv, "right": rv, "logits": xv, "pos": pv,
                               "tlabel": tv}, [rank, margin, bpr, tssl])
    o = lv - rv
    np.testing.assert_allclose(got[0], np.log1p(np.exp(o)) - lab * o, rtol=1e-5)
    np.testing.assert_allclose(got[1], np.maximum(0, -lab * o + 0.1), rtol=1e-5, atol=1e-7)
    want_bpr = [-np.mean([np.log(1 / (1 + np.exp(xv[i, j] - xv[i, pv[i, 0]])))
                          for j in range(4) if j != pv[i, 0]]) for i in range(4)]
    np.testing.assert_allclose(got[2][:, 0], want_bpr, rtol=1e-5)
    sp = _softplus(lv[:, 0].astype(np.float64))
    want_t = [sp[0], sp[1] - lv[1, 0], 2 * sp[2] - 0.25 * lv[2, 0], 2 * sp[3] - 1.5 * lv[3, 0]]
    np.testing.assert_allclose(got[3][:, 0], want_t, rtol=1e-5)


def test_ranking_loss_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = layers.data("a", [1])
        with pytest.raises(ValueError, match="rank_loss: left must be a Variable, got ndarray"):
            layers.rank_loss(a, np.zeros((2, 1)), a)
        with pytest.raises(ValueError, match="rank_loss: right 'w' must be \\[N, 1\\] or \\[N\\]"):
            layers.rank_loss(a, a, layers.data("w", [3]))
        with pytest.raises(ValueError, match="margin_rank_loss: label must be a Variable"):
            layers.margin_rank_loss(None, a, a)
        with pytest.raises(ValueError, match="margin_rank_loss: label, left and right must all "
                                             "be \\[N, 1\\]"):
            layers.margin_rank_loss(a, a, layers.data("v", [2]))
        x = layers.data("x", [5])
        with pytest.raises(TypeError, match="bpr_loss: label must be int64 class indices, got "
                                            "float32"):
            layers.bpr_loss(x, a)
        with pytest.raises(ValueError, match="bpr_loss: label must have input's shape"):
            layers.bpr_loss(x, layers.data("i", [2], dtype="int64"))
        with pytest.raises(TypeError, match="label must be a float tensor"):
            layers.teacher_student_sigmoid_loss(a, layers.data("j", [1], dtype="int64"))
        with pytest.raises(ValueError, match="teacher_student_sigmoid_loss: input 'x' must be "
                                             "\\[N, 1\\]"):
            layers.teacher_student_sigmoid_loss(x, a)


def test_bilinear_tensor_product_parameters_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        y = layers.data("y", [2])
        out = layers.bilinear_tensor_product(x, y, size=5, act="tanh")
        plain = layers.bilinear_tensor_product(x, y, 3, name="btp", bias_attr=False)
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert set(params) == {"bilinear_tensor_product_0.w_0", "bilinear_tensor_product_0.b_0",
                           "btp.w_0"}
    assert params["bilinear_tensor_product_0.w_0"].shape == (5, 4, 2)
    assert params["bilinear_tensor_product_0.b_0"].shape == (1, 5)
    assert params["btp.w_0"].shape == (3, 4, 2)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    w_init = init["bilinear_tensor_product_0.w_0"]
    assert w_init.type == "uniform_random"  # Xavier: fan_in 4·2, fan_out 5·2
    assert w_init.attr("max") == pytest.approx(math.sqrt(6.0 / 18))
    assert init["bilinear_tensor_product_0.b_0"].type == "fill_constant"
    assert init["bilinear_tensor_product_0.b_0"].attr("value") == 0.0
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["bilinear_tensor_product", "tanh", "bilinear_tensor_product"]
    assert ops[0].input("Weight") == ["bilinear_tensor_product_0.w_0"]
    assert ops[0].input("Bias") == ["bilinear_tensor_product_0.b_0"]
    assert "Bias" not in ops[2].inputs or not ops[2].input("Bias")
    assert plain.name == "btp"  # Fluid names the output after the layer
    assert out.shape == (-1, 5) and plain.shape == (-1, 3)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    yv = rng.standard_normal((3, 2)).astype(np.float32)
    got, got_plain = exe.run(main, feed={"x": xv, "y": yv}, fetch_list=[out, plain], scope=scope)
    w = np.asarray(scope.vars["bilinear_tensor_product_0.w_0"])
    b = np.asarray(scope.vars["bilinear_tensor_product_0.b_0"])
    want = np.array([[xv[n] @ w[i] @ yv[n] for i in range(5)] for n in range(3)]) + b
    np.testing.assert_allclose(got, np.tanh(want), rtol=1e-5, atol=1e-6)
    w2 = np.asarray(scope.vars["btp.w_0"])
    np.testing.assert_allclose(got_plain, np.einsum("nj,ijk,nk->ni", xv, w2, yv), rtol=1e-5,
                               atol=1e-6)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        a = layers.data("a", [4])
        with pytest.raises(ValueError, match="size must be a positive int, got 0"):
            layers.bilinear_tensor_product(a, a, 0)
        with pytest.raises(ValueError, match="x and y must be 2-D with known second dims"):
            layers.bilinear_tensor_product(a, layers.data("c", [2, 3]), 2)


def _pe_table(positions, hidden):
    half = hidden // 2
    k = np.arange(half)
    val = np.asarray(positions, np.float64)[:, None] / 10000.0 ** (k / (half - 1))
    return np.concatenate([np.sin(val), np.cos(val)], axis=1)


def test_add_position_encoding_dense_and_lod_inputs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        dense = layers.add_position_encoding(x, alpha=0.5, beta=2.0)
        seq = layers.data("s", [4], lod_level=1)
        by_seq = layers.add_position_encoding(seq, 1.0, 1.0, name="pos_enc")
    ops = main.global_block().ops
    assert [o.type for o in ops] == ["add_position_encoding"] * 2
    assert ops[0].attr("alpha") == 0.5 and ops[0].attr("beta") == 2.0
    assert dense.shape == (-1, 3, 4) and by_seq.name == "pos_enc" and by_seq.shape == (-1, 4)
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((2, 3, 4)).astype(np.float32)
    sv = rng.standard_normal((5, 4)).astype(np.float32)
    feed = {"x": xv, "s": fluid.create_lod_tensor(sv, [[3, 2]], fluid.CPUPlace())}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got_dense, got_seq = exe.run(main, feed=feed, fetch_list=[dense, by_seq], scope=scope,
                                 return_numpy=False)
    np.testing.assert_allclose(np.asarray(got_dense),
                               0.5 * xv + 2.0 * _pe_table(range(3), 4)[None], rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_seq), sv + _pe_table([0, 1, 2, 0, 1], 4),
                               rtol=1e-5, atol=1e-6)
    assert got_seq.recursive_sequence_lengths() == [[3, 2]]  # Out keeps X's LoD
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="must be 3-D \\[batch, seq_len, hidden\\] or 2-D "
                                             "with lod_level 1"):
            layers.add_position_encoding(layers.data("d", [4]), 1.0, 1.0)
        with pytest.raises(ValueError, match="the hidden size must be even, got 5"):
            layers.add_position_encoding(layers.data("e", [2, 5]), 1.0, 1.0)
        with pytest.raises(ValueError, match="beta must be >= 0, got -1"):
            layers.add_position_encoding(layers.data("f", [2, 4]), 1.0, -1)


def test_dice_loss_is_fluids_op_sequence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [3, 4])
        lab = layers.data("lab", [3, 1], dtype="int64")
        loss = layers.dice_loss(x, lab, epsilon=0.01)
    ops = main.global_block().ops
    assert [o.type for o in ops] == [
        "one_hot", "elementwise_mul", "reduce_sum", "reduce_sum", "reduce_sum",
        "elementwise_add", "scale", "scale", "elementwise_div", "scale", "reduce_mean"]
    assert ops[0].attr("depth") == 4 and ops[2].attr("dim") == [1, 2]
    # math_op_patch: a batch-sized right operand gets axis 0, a scalar becomes a scale op
    assert ops[1].attr("axis") == 0 and ops[5].attr("axis") == 0
    assert (ops[6].attr("scale"), ops[6].attr("bias")) == (2.0, 0.0)
    assert (ops[7].attr("scale"), ops[7].attr("bias")) == (1.0, pytest.approx(0.01))
    assert (ops[9].attr("scale"), ops[9].attr("bias")) == (-1.0, 1.0)
    assert loss.shape == (1,)
    rng = np.random.default_rng(8)
    xv = rng.uniform(0.05, 1.0, (2, 3, 4)).astype(np.float32)
    lv = rng.integers(0, 4, (2, 3, 1))
    (got,) = _run(main, startup, {"x": xv, "lab": lv}, [loss])
    hot = np.eye(4)[lv[..., 0]]
    inse = (xv * hot).sum(axis=(1, 2))
    want = np.mean(1 - 2 * inse / (xv.sum(axis=(1, 2)) + hot.sum(axis=(1, 2)) + 0.01))
    np.testing.assert_allclose(got, [want], rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="dice_loss: label must have input's rank 3"):
            layers.dice_loss(layers.data("y", [3, 4]), layers.data("m", [1], dtype="int64"))


def _npair_reference(a, p, labels, l2_reg):
    same = (labels[:, None] == labels[None, :]).astype(np.float64)
    target = same / same.sum(axis=1, keepdims=True)
    l2 = 0.25 * l2_reg * (np.mean((a * a).sum(1)) + np.mean((p * p).sum(1)))
    sim = a @ p.T
    logp = sim - sim.max(1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
    ce = -(target * logp).sum(1, keepdims=True)
    return l2 + np.mean((target * ce).sum(0))


def test_npair_loss_is_fluids_op_sequence():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        a = layers.data("a", [5, 3], append_batch_size=False)
        p = layers.data("p", [5, 3], append_batch_size=False)
        lab = layers.data("lab", [5], append_batch_size=False)
        loss = layers.npair_loss(a, p, lab, l2_reg=0.01)
    ops = main.global_block().ops
    assert [o.type for o in ops] == [
        "reshape2", "expand", "transpose2", "equal", "cast", "reduce_sum", "elementwise_div",
        "square", "reduce_sum", "reduce_mean", "square", "reduce_sum", "reduce_mean",
        "elementwise_add", "scale", "scale", "matmul", "softmax_with_cross_entropy",
        "elementwise_mul", "reduce_sum", "reduce_mean", "elementwise_add"]
    assert ops[0].output("Out") == ["lab"]  # Fluid's inplace reshape
    assert ops[1].attr("expand_times") == [1, 5]
    assert ops[4].attr("out_dtype") == "float32"
    assert ops[14].attr("scale") == 0.25 and ops[15].attr("scale") == pytest.approx(0.01)
    assert ops[16].attr("transpose_Y") is True and ops[16].attr("transpose_X") is False
    assert ops[17].attr("soft_label") is True
    assert loss.shape == (1,)
    rng = np.random.default_rng(9)
    av = rng.standard_normal((5, 3)).astype(np.float32)
    pv = rng.standard_normal((5, 3)).astype(np.float32)
    lv = np.array([2.0, 0.0, 2.0, 1.0, 0.0], np.float32)
    (got,) = _run(main, startup, {"a": av, "p": pv, "lab": lv}, [loss])
    np.testing.assert_allclose(got, [_npair_reference(av.astype(np.float64),
                                                      pv.astype(np.float64), lv, 0.01)],
                               rtol=1e-5)
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        with pytest.raises(ValueError, match="npair_loss: labels 'u' needs a known batch size"):
            layers.npair_loss(a, p, layers.data("u", [1]))


def test_gradients_through_the_loss_layers():
    """bilinear_tensor_product → add_position_encoding → fc scores → rank, margin, bpr,
    teacher-student and dice losses: the parameters' gradients equal central differences of
    the summed loss."""
    rng = np.random.default_rng(10)
    feed = {
        "x": rng.standard_normal((4, 3)), "y": rng.standard_normal((4, 2)),
        "rl": np.array([[1.0], [0.0], [0.5], [1.0]]),
        "ml": np.array([[1.0], [-1.0], [-1.0], [1.0]]),
        "cls": np.array([[0], [3], [1], [2]], np.int64),
        "tl": np.array([[-2.0], [-1.0], [0.3], [1.6]]),
    }

    def build():
        x = layers.data("x", [4, 3], dtype="float64", append_batch_size=False)
        y = layers.data("y", [4, 2], dtype="float64", append_batch_size=False)
        h = layers.bilinear_tensor_product(x, y, 4, act="tanh", param_attr="bw",
                                           bias_attr="bb")  # [4, 4]
        h = layers.reshape(layers.add_position_encoding(layers.reshape(h, [4, 2, 2]), 0.7, 0.5),
                           [4, 4])
        left = layers.fc(h, 1, param_attr="wl", bias_attr=False)
        right = layers.fc(h, 1, param_attr="wr", bias_attr=False)
        rl = layers.data("rl", [4, 1], dtype="float64", append_batch_size=False)
        ml = layers.data("ml", [4, 1], dtype="float64", append_batch_size=False)
        cls = layers.data("cls", [4, 1], dtype="int64", append_batch_size=False)
        tl = layers.data("tl", [4, 1], dtype="float64", append_batch_size=False)
        parts = [layers.rank_loss(rl, left, right), layers.margin_rank_loss(ml, left, right, 0.3),
                 layers.bpr_loss(h, cls), layers.teacher_student_sigmoid_loss(left, tl)]
        total = layers.reduce_sum(layers.concat(parts, axis=1))
        return layers.elementwise_add(total, layers.dice_loss(layers.softmax(h), cls))

    got = program_grads_and_numeric(build, feed, ["bw", "bb", "wl", "wr"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


def test_gradients_through_npair_loss():
    """npair_loss's cross-entropy part is float32 whatever the input (Fluid 1.8 casts its
    labels to float32, and the Variable product casts the float64 cross entropy to its
    left operand's dtype): central differences with a step float32 can resolve."""
    rng = np.random.default_rng(11)
    feed = {"x": rng.standard_normal((4, 3)), "nl": np.array([1.0, 0.0, 1.0, 2.0], np.float32)}

    def build():
        x = layers.data("x", [4, 3], dtype="float64", append_batch_size=False)
        h = layers.fc(x, 4, act="tanh", param_attr="w", bias_attr="b")
        nl = layers.data("nl", [4], dtype="float32", append_batch_size=False)
        return layers.npair_loss(h, layers.tanh(h), nl, 0.5)

    got = program_grads_and_numeric(build, feed, ["w", "b"], eps=1e-3)
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-3, atol=5e-4, err_msg=name)
        assert np.abs(analytic).sum() > 0, name
