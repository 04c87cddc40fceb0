"""layers.dynamic_lstmp (op lstmp) and layers.lstm (op cudnn_lstm): the program Fluid 1.8
builds, values through the executor against loop references, errors, and whole-program
gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_lstmp_ops import cudnn_lstm_by_loops, cudnn_weights, lstmp_by_loops
from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch, params=None):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name, value in (params or {}).items():
        scope.vars[name] = value
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope, return_numpy=False)


def test_dynamic_lstmp_builds_fluids_op_and_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [12], lod_level=1)
        h0, c0 = layers.data("h0", [2]), layers.data("c0", [3])
        proj, cell = layers.dynamic_lstmp(x, 12, 2, h_0=h0, c_0=c0, cell_clip=0.5,
                                          proj_activation="identity", is_reverse=True)
        plain, _ = layers.dynamic_lstmp(x, 12, 4, use_peepholes=False, name="named")
    op = next(o for o in main.global_block().ops if o.type == "lstmp")
    assert op.input("Input") == [x.name] and op.input("H0") == [h0.name]
    assert op.input("C0") == [c0.name]
    assert op.input("Weight") == ["lstmp_0.w_0"] and op.input("ProjWeight") == ["lstmp_0.w_1"]
    assert op.input("Bias") == ["lstmp_0.b_0"]
    assert op.output("Projection") == [proj.name] and op.output("Cell") == [cell.name]
    for slot in ("BatchHidden", "BatchGate", "BatchCellPreAct"):
        assert len(op.output(slot)) == 1
    assert op.attr("cell_clip") == pytest.approx(0.5) and op.attr("proj_clip") == 0.0
    assert op.attr("use_peepholes") is True and op.attr("is_reverse") is True
    assert op.attr("proj_activation") == "identity" and op.attr("cell_activation") == "tanh"
    assert op.attr("gate_activation") == "sigmoid"
    assert op.attr("candidate_activation") == "tanh"
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert params["lstmp_0.w_0"] == (2, 12) and params["lstmp_0.w_1"] == (3, 2)
    assert params["lstmp_0.b_0"] == (1, 21)
    assert params["named.w_0"] == (4, 12) and params["named.w_1"] == (3, 4)
    assert params["named.b_0"] == (1, 12)  # no peepholes: the 4D gate biases only
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["lstmp_0.w_0"].type == init["lstmp_0.w_1"].type == "uniform_random"  # Xavier
    assert init["lstmp_0.b_0"].type == "fill_constant" and init["lstmp_0.b_0"].attr("value") == 0
    assert proj.shape == (-1, 2) and cell.shape == (-1, 3) and plain.shape == (-1, 4)


def test_dynamic_lstmp_values_and_lod_through_the_executor():
    rng = np.random.default_rng(21)
    d, p, lengths = 3, 2, [2, 4, 1]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4 * d], dtype="float64", lod_level=1)
        h0 = layers.data("h0", [p], dtype="float64")
        c0 = layers.data("c0", [d], dtype="float64")
        proj, cell = layers.dynamic_lstmp(x, 4 * d, p, h_0=h0, c_0=c0, dtype="float64",
                                          cell_activation="sigmoid", proj_activation="relu",
                                          cell_clip=0.6, proj_clip=0.5)
    xv = rng.normal(size=(sum(lengths), 4 * d))
    h0v, c0v = rng.normal(size=(3, p)), rng.normal(size=(3, d))
    w, pw, b = rng.normal(size=(p, 4 * d)), rng.normal(size=(d, p)), rng.normal(size=(1, 7 * d))
    feed = {"x": fluid.create_lod_tensor(xv, [lengths], fluid.CPUPlace()), "h0": h0v, "c0": c0v}
    got_r, got_c = _run(main, startup, feed, [proj, cell],
                        {"lstmp_0.w_0": w, "lstmp_0.w_1": pw, "lstmp_0.b_0": b})
    want_r, want_c = lstmp_by_loops(xv, [0, 2, 6, 7], w, pw, b, h0v, c0v, cell="sigmoid",
                                    proj="relu", cell_clip=0.6, proj_clip=0.5)
    np.testing.assert_allclose(np.array(got_r), want_r, rtol=1e-12)
    np.testing.assert_allclose(np.array(got_c), want_c, rtol=1e-12)
    assert got_r.lod() == got_c.lod() == [[0, 2, 6, 7]]


def test_dynamic_lstmp_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [8], lod_level=1)
        with pytest.raises(ValueError, match="bias_attr cannot be False"):
            layers.dynamic_lstmp(x, 8, 3, bias_attr=False)
        with pytest.raises(ValueError, match="h_0 needs c_0"):
            layers.dynamic_lstmp(x, 8, 3, h_0=layers.data("h", [3]))
        with pytest.raises(ValueError, match=r"input must be \[T, size\] = \[T, 16\]"):
            layers.dynamic_lstmp(x, 16, 3)
        with pytest.raises(ValueError, match="size is four times the hidden size, got 6"):
            layers.dynamic_lstmp(x, 6, 3)
        with pytest.raises(ValueError, match="cell_clip must not be negative"):
            layers.dynamic_lstmp(x, 8, 3, cell_clip=-1.0)
        with pytest.raises(ValueError, match="proj_activation 'softmax'"):
            layers.dynamic_lstmp(x, 8, 3, proj_activation="softmax")
        with pytest.raises(ValueError, match=r"h_0 must be \[num_sequences, 3\]"):
            layers.dynamic_lstmp(x, 8, 3, h_0=layers.data("h2", [2]),
                                 c_0=layers.data("c2", [2]))
        with pytest.raises(TypeError, match="input must be a Variable"):
            layers.dynamic_lstmp(np.zeros((2, 8)), 8, 3)


def test_dynamic_lstmp_whole_program_gradient():
    rng = np.random.default_rng(23)
    lengths = [3, 1, 2]
    xv = rng.normal(size=(6, 3))
    h0v, c0v = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    wv = rng.normal(size=(6, 2))

    def build():
        x = layers.data("x", [3], dtype="float64", lod_level=1)
        h0 = layers.data("h0", [2], dtype="float64")
        c0 = layers.data("c0", [2], dtype="float64")
        wt = layers.data("wt", [2], dtype="float64")
        gates = layers.fc(x, 8, param_attr=fluid.ParamAttr(name="fc_w"), bias_attr=False)
        proj, cell = layers.dynamic_lstmp(gates, 8, 2, h_0=h0, c_0=c0, dtype="float64",
                                          is_reverse=True, proj_clip=5.0)
        # both outputs reach the loss (Fluid 1.8's kernel would drop the Cell's gradient)
        return layers.reduce_sum(layers.elementwise_mul(proj, wt)) + layers.reduce_sum(cell)

    feed = {"x": fluid.create_lod_tensor(xv, [lengths], fluid.CPUPlace()), "h0": h0v,
            "c0": c0v, "wt": wv}
    got = program_grads_and_numeric(build, feed,
                                    ["fc_w", "lstmp_0.w_0", "lstmp_0.w_1", "lstmp_0.b_0"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


# ---------------------------------------------------------------------------------------------
# layers.lstm


def test_lstm_builds_fluids_op_and_parameter():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [5, 4, 3], append_batch_size=False)
        h = layers.fill_constant([4, 4, 6], "float32", 0.0)
        out, last_h, last_c = layers.lstm(x, h, h, 5, 6, 2, is_bidirec=True, seed=7)
        one, _, _ = layers.lstm(x, layers.fill_constant([1, 4, 6], "float32", 0.0),
                                layers.fill_constant([1, 4, 6], "float32", 0.0), 5, 6, 1,
                                name="mine", dropout_prob=0.3,
                                default_initializer=fluid.initializer.Constant(0.1))
    op = next(o for o in main.global_block().ops if o.type == "cudnn_lstm")
    assert op.input("Input") == [x.name] and op.input("InitH") == [h.name]
    assert op.input("InitC") == [h.name] and op.input("W") == ["cudnn_lstm_0.w_0"]
    assert op.output("Out") == [out.name] and op.output("LastH") == [last_h.name]
    assert op.output("LastC") == [last_c.name]
    assert len(op.output("Reserve")) == len(op.output("StateOut")) == 1
    assert op.attr("is_bidirec") is True and op.attr("input_size") == 3
    assert op.attr("hidden_size") == 6 and op.attr("num_layers") == 2
    assert op.attr("is_test") is False and op.attr("dropout_prob") == 0.0
    assert op.attr("seed") == 7
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    # layer 0: 2 x (24 x 3 + 24 x 6 + 48); layer 1 (input 12 wide): 2 x (24 x 12 + 24 x 6 + 48)
    assert params["cudnn_lstm_0.w_0"] == (2 * (72 + 144 + 48) + 2 * (288 + 144 + 48),)
    assert params["mine.w_0"] == (72 + 144 + 48,)
    init = {o.output("Out")[0]: o for o in startup.global_block().ops}
    assert init["cudnn_lstm_0.w_0"].type == "uniform_random"  # Xavier by default
    assert init["mine.w_0"].type == "fill_constant"
    assert out.shape == (5, 4, 12) and last_h.shape == last_c.shape == (4, 4, 6)
    assert one.shape == (5, 4, 6)


def test_lstm_values_through_the_executor():
    rng = np.random.default_rng(29)
    n_t, batch, isz, hid, nl = 4, 3, 2, 3, 2
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [n_t, batch, isz], dtype="float64", append_batch_size=False)
        h0 = layers.data("h0", [2 * nl, batch, hid], dtype="float64", append_batch_size=False)
        c0 = layers.data("c0", [2 * nl, batch, hid], dtype="float64", append_batch_size=False)
        out, last_h, last_c = layers.lstm(x, h0, c0, n_t, hid, nl, is_bidirec=True,
                                          dropout_prob=0.5, is_test=True)
    prm, flat = cudnn_weights(rng, isz, hid, nl, 2)
    xv, h0v, c0v = (rng.normal(size=s) for s in ((n_t, batch, isz), (4, batch, hid),
                                                  (4, batch, hid)))
    got = _run(main, startup, {"x": xv, "h0": h0v, "c0": c0v}, [out, last_h, last_c],
               {"cudnn_lstm_0.w_0": flat})
    for g, want in zip(got, cudnn_lstm_by_loops(xv, h0v, c0v, prm, nl, 2), strict=True):
        np.testing.assert_allclose(np.array(g), want, rtol=1e-12, atol=1e-12)


def test_lstm_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [5, 4, 3], append_batch_size=False)
        h = layers.fill_constant([2, 4, 6], "float32", 0.0)
        with pytest.raises(ValueError, match=r"init_h must be \[num_layers \* dirs, batch_size, "
                                             r"hidden_size\] = \[4, 4, 6\]"):
            layers.lstm(x, h, h, 5, 6, 2, is_bidirec=True)
        with pytest.raises(ValueError, match=r"init_c must be .* = \[2, 4, 5\]"):
            layers.lstm(x, layers.fill_constant([2, 4, 5], "float32", 0.0), h, 5, 5, 2)
        with pytest.raises(TypeError, match="hidden_size must be an int"):
            layers.lstm(x, h, h, 5, 6.0, 2)
        with pytest.raises(ValueError, match="dropout_prob must be in"):
            layers.lstm(x, h, h, 5, 6, 2, dropout_prob=1.5)
        with pytest.raises(ValueError, match=r"input must be \[seq_len, batch_size"):
            layers.lstm(layers.data("flat", [3]), h, h, 5, 6, 2)
        with pytest.raises(TypeError, match="init_h must be a Variable"):
            layers.lstm(x, np.zeros((2, 4, 6)), h, 5, 6, 2)


def test_lstm_whole_program_gradient():
    rng = np.random.default_rng(31)
    n_t, batch, isz, hid = 3, 2, 2, 2
    xv = rng.normal(size=(n_t, batch, isz))
    h0v, c0v = rng.normal(size=(2, 4, batch, hid))
    wv = rng.normal(size=(n_t, batch, 2 * hid))

    def build():
        x = layers.data("x", [n_t, batch, isz], dtype="float64", append_batch_size=False)
        h0 = layers.data("h0", [4, batch, hid], dtype="float64", append_batch_size=False)
        c0 = layers.data("c0", [4, batch, hid], dtype="float64", append_batch_size=False)
        wt = layers.data("wt", [n_t, batch, 2 * hid], dtype="float64", append_batch_size=False)
        feat = layers.fc(x, isz, num_flatten_dims=2, param_attr=fluid.ParamAttr(name="fc_w"),
                         bias_attr=False)
        out, last_h, last_c = layers.lstm(feat, h0, c0, n_t, hid, 2, is_bidirec=True)
        return (layers.reduce_sum(layers.elementwise_mul(out, wt)) + layers.reduce_sum(last_h)
                + layers.reduce_sum(last_c))

    got = program_grads_and_numeric(build, {"x": xv, "h0": h0v, "c0": c0v, "wt": wv},
                                    ["fc_w", "cudnn_lstm_0.w_0"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


def test_lstm_with_dropout_trains_with_new_masks_each_step_and_none_in_test():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [6, 4, 3], append_batch_size=False)
        h = layers.fill_constant([2, 4, 5], "float32", 0.0)
        out, _, _ = layers.lstm(x, h, h, 6, 5, 2, dropout_prob=0.5)
        loss = layers.mean(layers.square(out))
        test = main.clone(for_test=True)
        fluid.optimizer.SGD(0.5).minimize(loss)
    op = next(o for o in main.global_block().ops if o.type == "cudnn_lstm")
    grad_op = next(o for o in main.global_block().ops if o.type == "cudnn_lstm_grad")
    assert grad_op.input("Reserve") == op.output("Reserve")  # the masks reach the gradient
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = np.random.default_rng(0).normal(size=(6, 4, 3)).astype("float32")
    masks, losses = [], []
    for _ in range(3):
        lv, mv = exe.run(main, feed={"x": xv}, fetch_list=[loss, op.output("Reserve")[0]],
                         scope=scope)
        losses.append(float(lv[0]))
        masks.append(mv)
    assert masks[0].shape == (1, 6, 4, 5) and not np.array_equal(masks[0], masks[1])
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    a, b = (exe.run(test, feed={"x": xv}, fetch_list=[out.name], scope=scope)[0]
            for _ in range(2))
    np.testing.assert_array_equal(a, b)  # is_test: no dropout, the same output
