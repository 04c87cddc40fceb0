"""Fluid 1.8's contrib.layers.rnn_impl (BasicGRUUnit, basic_gru, BasicLSTMUnit, basic_lstm):
parameters named as Fluid names them, whole networks (2 layers, bidirectional, padded,
batch-first or time-major) against numpy loops, dropout in training and test programs,
gradients by central differences, a short training run, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.contrib.layers import BasicGRUUnit, BasicLSTMUnit, basic_gru, basic_lstm

from ..core.numeric_grad import program_grads_and_numeric

B, T, D, H = 3, 4, 3, 2
UNIFORM = fluid.ParamAttr(initializer=fluid.initializer.Uniform(-0.8, 0.8))


@pytest.fixture(autouse=True)
def fresh_names():
    with fluid.unique_name.guard():
        yield


# -- numpy references (ported from Paddle's test_basic_gru_api / test_basic_lstm_api) ------

def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gru_step(x, h, p):
    wg, bg, wc, bc = p
    g = _sig(np.concatenate([x, h], 1) @ wg + bg)
    r, u = np.split(g, 2, axis=1)
    c = np.tanh(np.concatenate([x, r * h], 1) @ wc + bc)
    return [u * h + (1 - u) * c]


def _lstm_step(forget_bias):
    def step(x, states, p):
        h, c = states
        w, b = p
        i, j, f, o = np.split(np.concatenate([x, h], 1) @ w + b, 4, axis=1)
        new_c = c * _sig(f + forget_bias) + _sig(i) * np.tanh(j)
        return [np.tanh(new_c) * _sig(o), new_c]
    return step


def _net_np(step, n_states, x, lengths, inits, params, num_layers, bidirectional,
            batch_first, drop_scale=1.0):
    """The stacked (bi)directional RNN as Fluid builds it; ``drop_scale`` is what dropout
    does to each layer's output at test time (1 - p for downgrade_in_infer)."""
    xs = x.transpose(1, 0, 2) if batch_first else x
    t_len, batch = xs.shape[:2]
    mask = (np.ones((t_len, batch)) if lengths is None
            else (np.arange(t_len)[:, None] < lengths[None, :]).astype(np.float64))
    n_dir = 2 if bidirectional else 1

    def direction(seq, m, d):
        states = [[(inits[k][i * n_dir + d] if inits is not None else np.zeros((batch, H)))
                   for k in range(n_states)] for i in range(num_layers)]
        outs = []
        for t in range(t_len):
            inp = seq[t]
            for i in range(num_layers):
                new = step(inp, states[i] if n_states > 1 else states[i][0], params[d][i])
                mt = m[t][:, None]
                states[i] = [n * mt + s * (1 - mt) for n, s in zip(new, states[i], strict=True)]
                inp = states[i][0] * drop_scale
            outs.append(inp)
        lasts = [np.stack([states[i][k] for i in range(num_layers)]) for k in range(n_states)]
        return np.stack(outs), lasts

    out, lasts = direction(xs, mask, 0)
    if bidirectional:
        bw_out, bw_lasts = direction(xs[::-1], mask[::-1], 1)
        out = np.concatenate([out, bw_out[::-1]], axis=2)
        lasts = [np.stack([f, b], 1).reshape(2 * num_layers, batch, H)
                 for f, b in zip(lasts, bw_lasts, strict=True)]
    if batch_first:
        out = out.transpose(1, 0, 2)
    return out, lasts


def _gru_params(scope, name, num_layers, bidirectional):
    params = []
    for infix in ["_layers_", "_reverse_layers_"][:2 if bidirectional else 1]:
        params.append([[np.array(scope.vars[f"{name}{infix}{i}/BasicGRUUnit_0.{s}"])
                        for s in ("w_0", "b_0", "w_1", "b_1")] for i in range(num_layers)])
    return params


def _lstm_params(scope, name, num_layers, bidirectional):
    params = []
    for infix in ["_layers_", "_reverse_layers_"][:2 if bidirectional else 1]:
        params.append([[np.array(scope.vars[f"{name}{infix}{i}/BasicLSTMUnit_0.{s}"])
                        for s in ("w_0", "b_0")] for i in range(num_layers)])
    return params


def _data(name, shape, dtype="float64"):
    return fluid.layers.data(name=name, shape=shape, dtype=dtype, append_batch_size=False)


def _feed(batch_first, with_lengths, n_init, n_dir, num_layers, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-1, 1, (B, T, D) if batch_first else (T, B, D))
    feed = {"x": x}
    if with_lengths:
        feed["len"] = np.array([4, 1, 3], np.int64)
    for k in range(n_init):
        feed[f"init{k}"] = rng.uniform(-1, 1, (num_layers * n_dir, B, H))
    return feed


def _build(kind, batch_first, with_lengths, with_init, bidirectional, num_layers=2,
           dropout_prob=0.0, forget_bias=1.0):
    n_dir = 2 if bidirectional else 1
    x = _data("x", [-1, T, D] if batch_first else [T, -1, D])
    lengths = _data("len", [-1], "int64") if with_lengths else None
    n_states = 1 if kind == "gru" else 2
    inits = ([_data(f"init{k}", [num_layers * n_dir, -1, H]) for k in range(n_states)]
             if with_init else [None] * n_states)
    common = dict(num_layers=num_layers, sequence_length=lengths, dropout_prob=dropout_prob,
                  bidirectional=bidirectional, batch_first=batch_first, bias_attr=UNIFORM,
                  dtype="float64")
    if kind == "gru":
        return basic_gru(x, inits[0], H, **common)
    return basic_lstm(x, inits[0], inits[1], H, forget_bias=forget_bias, **common)


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


CASES = [  # (batch_first, with_lengths, with_init, bidirectional)
    (True, False, False, False),
    (False, True, True, False),
    (True, True, True, True),
    (False, True, False, True),
]


@pytest.mark.parametrize("batch_first,with_lengths,with_init,bidirectional", CASES)
def test_basic_gru_against_numpy(batch_first, with_lengths, with_init, bidirectional):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out, last = _build("gru", batch_first, with_lengths, with_init, bidirectional)
    n_dir = 2 if bidirectional else 1
    assert out.shape == ((-1, T, n_dir * H) if batch_first else (T, -1, n_dir * H))
    assert last.shape == (2 * n_dir, -1, H)
    feed = _feed(batch_first, with_lengths, 1 if with_init else 0, n_dir, 2)
    (got_out, got_last), scope = _run(main, startup, feed, [out, last])
    want_out, (want_last,) = _net_np(
        _gru_step, 1, feed["x"], feed.get("len"), [feed["init0"]] if with_init else None,
        _gru_params(scope, "basic_gru", 2, bidirectional), 2, bidirectional, batch_first)
    np.testing.assert_allclose(got_out, want_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_last, want_last, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("batch_first,with_lengths,with_init,bidirectional", CASES)
def test_basic_lstm_against_numpy(batch_first, with_lengths, with_init, bidirectional):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        out, last_h, last_c = _build("lstm", batch_first, with_lengths, with_init,
                                     bidirectional, forget_bias=0.5)
    n_dir = 2 if bidirectional else 1
    assert last_h.shape == last_c.shape == (2 * n_dir, -1, H)
    feed = _feed(batch_first, with_lengths, 2 if with_init else 0, n_dir, 2)
    (got_out, got_h, got_c), scope = _run(main, startup, feed, [out, last_h, last_c])
    want_out, (want_h, want_c) = _net_np(
        _lstm_step(0.5), 2, feed["x"], feed.get("len"),
        [feed["init0"], feed["init1"]] if with_init else None,
        _lstm_params(scope, "basic_lstm", 2, bidirectional), 2, bidirectional, batch_first)
    for got, want in ((got_out, want_out), (got_h, want_h), (got_c, want_c)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_parameter_names_and_shapes_as_fluid():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = _data("x", [-1, T, D], "float32")
        basic_gru(x, None, H, num_layers=2, bidirectional=True)
        basic_lstm(x, None, None, H, num_layers=1, bidirectional=True)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    want = {}
    for infix in ("_layers_", "_reverse_layers_"):
        for i, d in ((0, D), (1, H)):
            u = f"basic_gru{infix}{i}/BasicGRUUnit_0"
            want.update({f"{u}.w_0": (d + H, 2 * H), f"{u}.w_1": (d + H, H),
                         f"{u}.b_0": (2 * H,), f"{u}.b_1": (H,)})
        u = f"basic_lstm{infix}0/BasicLSTMUnit_0"
        want.update({f"{u}.w_0": (D + H, 4 * H), f"{u}.b_0": (4 * H,)})
    assert params == want
    # the forget bias is a fill_constant in the global block, as Fluid makes it
    fills = [op for op in main.global_block().ops if op.type == "fill_constant"]
    assert any(op.attrs["value"] == 1.0 and list(op.attrs["shape"]) == [1] for op in fills)


def test_named_param_attrs_get_fluid_suffixes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = _data("x", [-1, T, D], "float32")
        basic_gru(x, None, H, num_layers=2, bidirectional=True,
                  param_attr=fluid.ParamAttr(name="gw"), bias_attr=fluid.ParamAttr(name="gb"))
        basic_lstm(x, None, None, H, bidirectional=True,
                   param_attr=fluid.ParamAttr(name="lw"), bias_attr=fluid.ParamAttr(name="lb"))
    names = {p.name for p in main.global_block().all_parameters()}
    want = {f"g{wb}_{direc}_{wb}_{i}_{part}" for wb in "wb" for direc in ("fw", "bw")
            for i in range(2) for part in ("gate", "candidate")}
    want |= {f"l{wb}_{direc}_{wb}_0" for wb in "wb" for direc in ("fw", "bw")}
    assert names == want


def test_units_one_step_and_parameters():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, h, c = _data("x", [B, D]), _data("h", [B, H]), _data("c", [B, H])
        gru = BasicGRUUnit("g", H, bias_attr=UNIFORM, dtype="float64")
        lstm = BasicLSTMUnit("l", H, bias_attr=UNIFORM, forget_bias=0.3, dtype="float64")
        assert gru.parameters() == [] and lstm.parameters() == []
        new_h = gru(x, h)
        lstm_h, lstm_c = lstm(x, h, c)
    assert gru.full_name() == "g/BasicGRUUnit_0"
    assert [p.name for p in gru.parameters()] == [
        "g/BasicGRUUnit_0.w_0", "g/BasicGRUUnit_0.w_1", "g/BasicGRUUnit_0.b_0",
        "g/BasicGRUUnit_0.b_1"]
    assert [p.name for p in lstm.parameters()] == ["l/BasicLSTMUnit_0.w_0",
                                                   "l/BasicLSTMUnit_0.b_0"]
    rng = np.random.RandomState(1)
    feed = {k: rng.uniform(-1, 1, s) for k, s in (("x", (B, D)), ("h", (B, H)), ("c", (B, H)))}
    (g, lh, lc), scope = _run(main, startup, feed, [new_h, lstm_h, lstm_c])
    gp = [np.array(scope.vars[f"g/BasicGRUUnit_0.{s}"]) for s in ("w_0", "b_0", "w_1", "b_1")]
    np.testing.assert_allclose(g, _gru_step(feed["x"], feed["h"], gp)[0], rtol=1e-12)
    lp = [np.array(scope.vars[f"l/BasicLSTMUnit_0.{s}"]) for s in ("w_0", "b_0")]
    want_h, want_c = _lstm_step(0.3)(feed["x"], [feed["h"], feed["c"]], lp)
    np.testing.assert_allclose(lh, want_h, rtol=1e-12)
    np.testing.assert_allclose(lc, want_c, rtol=1e-12)


def test_gru_unit_custom_activations_are_used():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x, h = _data("x", [B, D]), _data("h", [B, H])
        unit = BasicGRUUnit("g", H, bias_attr=UNIFORM, gate_activation=fluid.layers.relu,
                            activation=fluid.layers.relu, dtype="float64")
        out = unit(x, h)
    rng = np.random.RandomState(2)
    feed = {"x": rng.uniform(-1, 1, (B, D)), "h": rng.uniform(-1, 1, (B, H))}
    (got,), scope = _run(main, startup, feed, [out])
    wg, bg, wc, bc = (np.array(scope.vars[f"g/BasicGRUUnit_0.{s}"])
                      for s in ("w_0", "b_0", "w_1", "b_1"))
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    r, u = np.split(relu(np.concatenate([feed["x"], feed["h"]], 1) @ wg + bg), 2, axis=1)
    cand = relu(np.concatenate([feed["x"], r * feed["h"]], 1) @ wc + bc)
    np.testing.assert_allclose(got, u * feed["h"] + (1 - u) * cand, rtol=1e-12)


# -- dropout ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_dropout_in_test_program_matches_fluid_implementation(kind):
    """basic_gru drops with downgrade_in_infer (test: outputs scaled by 1 - p), basic_lstm
    with upscale_in_train (test: identity); a clone(for_test=True) sets is_test."""
    p = 0.4
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        outs = _build(kind, True, True, False, True, dropout_prob=p)
    drops = [op for blk in main.blocks for op in blk.ops if op.type == "dropout"]
    assert len(drops) == 2 * 2  # per direction: after each of the 2 layers
    impl = "downgrade_in_infer" if kind == "gru" else "upscale_in_train"
    assert {op.attrs["dropout_implementation"] for op in drops} == {impl}
    assert not any(op.attrs["is_test"] for op in drops)
    test_prog = main.clone(for_test=True)
    assert all(op.attrs["is_test"] for blk in test_prog.blocks for op in blk.ops
               if op.type == "dropout")
    feed = _feed(True, True, 0, 2, 2)
    got, scope = _run(test_prog, startup, feed, list(outs))
    step, n_states, params = ((_gru_step, 1, _gru_params(scope, "basic_gru", 2, True))
                              if kind == "gru" else
                              (_lstm_step(1.0), 2, _lstm_params(scope, "basic_lstm", 2, True)))
    want_out, want_lasts = _net_np(step, n_states, feed["x"], feed["len"], None, params, 2,
                                   True, True, drop_scale=(1 - p) if kind == "gru" else 1.0)
    np.testing.assert_allclose(got[0], want_out, rtol=1e-10, atol=1e-12)
    for g, w in zip(got[1:], want_lasts, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_dropout_in_training_drops_the_output_not_the_states(kind):
    p = 0.5
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        outs = _build(kind, False, False, False, False, num_layers=1, dropout_prob=p)
    feed = _feed(False, False, 0, 1, 1)
    got, scope = _run(main, startup, feed, list(outs))
    if kind == "gru":
        step, n, params = _gru_step, 1, _gru_params(scope, "basic_gru", 1, False)
    else:
        step, n, params = _lstm_step(1.0), 2, _lstm_params(scope, "basic_lstm", 1, False)
    want_out, want_lasts = _net_np(step, n, feed["x"], None, None, params, 1, False, False)
    for g, w in zip(got[1:], want_lasts, strict=True):  # the states are never dropped
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    kept = got[0] != 0
    assert 0 < kept.sum() < kept.size
    scale = 1.0 if kind == "gru" else 1.0 / (1 - p)  # upscale_in_train for the LSTM
    np.testing.assert_allclose(got[0][kept], want_out[kept] * scale, rtol=1e-10)


# -- gradients and training -------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_gradients_match_central_differences(kind):
    feed = _feed(True, True, 2 if kind == "lstm" else 1, 2, 2, seed=5)
    feed["x"] = feed["x"][:, :3]

    def build():
        x = _data("x", [-1, 3, D])
        lengths = _data("len", [-1], "int64")
        n_states = 1 if kind == "gru" else 2
        inits = [_data(f"init{k}", [4, -1, H]) for k in range(n_states)]
        common = dict(num_layers=2, sequence_length=lengths, bidirectional=True,
                      bias_attr=UNIFORM, dtype="float64")
        outs = (basic_gru(x, inits[0], H, **common) if kind == "gru"
                else basic_lstm(x, inits[0], inits[1], H, **common))
        # weight every output so no gradient cancels out
        total = None
        for k, o in enumerate(outs):
            term = fluid.layers.reduce_sum(fluid.layers.square(o) * (k + 1.5))
            total = term if total is None else total + term
        return total

    unit = "BasicGRUUnit_0" if kind == "gru" else "BasicLSTMUnit_0"
    params = [f"basic_{kind}_layers_0/{unit}.w_0", f"basic_{kind}_layers_1/{unit}.b_0",
              f"basic_{kind}_reverse_layers_0/{unit}.b_0",
              f"basic_{kind}_reverse_layers_1/{unit}.w_0"]
    if kind == "gru":
        params.append(f"basic_gru_layers_1/{unit}.w_1")
    for name, (analytic, numeric) in program_grads_and_numeric(build, feed, params).items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_training_run_loss_drops():
    rng = np.random.RandomState(0)
    x_np = rng.uniform(-1, 1, (8, 5, D)).astype("float32")
    y_np = (x_np.sum(axis=(1, 2)) > 0).astype("float32")[:, None]
    lens = rng.randint(2, 6, 8).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[5, D], dtype="float32")
        y = fluid.layers.data(name="y", shape=[1], dtype="float32")
        seq = fluid.layers.data(name="len", shape=[-1], dtype="int64",
                                append_batch_size=False)
        _, last_h, _ = basic_lstm(x, None, None, 8, num_layers=2, sequence_length=seq,
                                  bidirectional=True, dropout_prob=0.1)
        feat = fluid.layers.transpose(last_h, [1, 0, 2])  # [batch, 2 layers * 2 dirs, 8]
        logits = fluid.layers.fc(fluid.layers.reshape(feat, [-1, 4 * 8]), 1)
        loss = fluid.layers.mean(fluid.layers.sigmoid_cross_entropy_with_logits(logits, y))
        fluid.optimizer.Adam(learning_rate=0.05).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": x_np, "y": y_np, "len": lens},
                            fetch_list=[loss], scope=scope)[0].sum()) for _ in range(25)]
    assert losses[-1] < 0.5 * losses[0]


# -- errors -----------------------------------------------------------------------------------

def test_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = _data("x", [-1, T, D], "float32")
        h = _data("h", [2, -1, H], "float32")
        with pytest.raises(TypeError, match="input must be a Variable"):
            basic_gru(np.zeros((2, T, D)), None, H)
        with pytest.raises(ValueError, match="input must be 3-D"):
            basic_gru(_data("x2", [-1, D], "float32"), None, H)
        with pytest.raises(ValueError, match="hidden_size must be a positive int"):
            basic_gru(x, None, 0)
        with pytest.raises(ValueError, match="num_layers must be a positive int"):
            basic_lstm(x, None, None, H, num_layers=1.5)
        with pytest.raises(ValueError, match="dropout_prob must be a float in"):
            basic_gru(x, None, H, dropout_prob=1.0)
        with pytest.raises(TypeError, match="sequence_length must be a Variable"):
            basic_gru(x, None, H, sequence_length=[1, 2])
        with pytest.raises(ValueError, match="init_hidden and init_cell must both"):
            basic_lstm(x, h, None, H)
        with pytest.raises(TypeError, match="bidirectional must be a bool"):
            basic_gru(x, None, H, bidirectional="yes")
        with pytest.raises(NotImplementedError, match=r"basic_lstm\(gate_activation=\.\.\."):
            basic_lstm(x, None, None, H, gate_activation=fluid.layers.relu)
        with pytest.raises(NotImplementedError, match=r"BasicLSTMUnit\(gate_activation"):
            BasicLSTMUnit("u", H, activation=fluid.layers.relu)
        with pytest.raises(NotImplementedError, match=r"basic_gru\(param_attr=False\)"):
            basic_gru(x, None, H, param_attr=False)
        with pytest.raises(NotImplementedError, match="bias_attr=<unnamed>"):
            basic_lstm(x, None, None, H, bidirectional=True,
                       param_attr=fluid.ParamAttr(name="w"))
        with pytest.raises(TypeError, match="gate_activation must be a callable"):
            BasicGRUUnit("u", H, gate_activation="sigmoid")
        with pytest.raises(ValueError, match="dtype must be"):
            BasicGRUUnit("u", H, dtype="int32")
        with pytest.raises(TypeError, match="pre_hidden must be a Variable"):
            BasicGRUUnit("u", H)(_data("s", [B, D], "float32"), None)


def test_units_are_layers_that_run_in_dygraph_mode_too():
    from dask_fluid import dygraph

    rng = np.random.RandomState(3)
    x, h, c = (rng.uniform(-1, 1, s) for s in ((B, D), (B, H), (B, H)))
    with dygraph.guard(fluid.CPUPlace()):
        gru = BasicGRUUnit("g", H, bias_attr=UNIFORM, dtype="float64")
        lstm = BasicLSTMUnit("l", H, bias_attr=UNIFORM, forget_bias=0.3, dtype="float64")
        assert isinstance(gru, dygraph.Layer) and gru.parameters() == []
        new_h = gru(dygraph.to_variable(x), dygraph.to_variable(h))
        lstm_h, lstm_c = lstm(dygraph.to_variable(x), dygraph.to_variable(h),
                              dygraph.to_variable(c))
        assert list(gru.state_dict()) == ["_gate_weight", "_candidate_weight", "_gate_bias",
                                          "_candidate_bias"]
        assert [p.name for p in lstm.parameters()] == ["l/BasicLSTMUnit_0.w_0",
                                                       "l/BasicLSTMUnit_0.b_0"]
        gp = [gru._gate_weight.numpy(), gru._gate_bias.numpy(), gru._candidate_weight.numpy(),
              gru._candidate_bias.numpy()]
        np.testing.assert_allclose(new_h.numpy(), _gru_step(x, h, gp)[0], rtol=1e-12)
        want_h, want_c = _lstm_step(0.3)(x, [h, c], [lstm._weight.numpy(), lstm._bias.numpy()])
        np.testing.assert_allclose(lstm_h.numpy(), want_h, rtol=1e-12)
        np.testing.assert_allclose(lstm_c.numpy(), want_c, rtol=1e-12)
        # the gradients reach the unit's parameters: a step of SGD lowers the loss
        opt = fluid.optimizer.SGD(0.5, parameter_list=gru.parameters())
        losses = []
        for _ in range(3):
            out = gru(dygraph.to_variable(x), dygraph.to_variable(h))
            loss = fluid.layers.reduce_mean(fluid.layers.square(out))
            loss.backward()
            opt.minimize(loss)
            gru.clear_gradients()
            losses.append(float(loss.numpy()))
        assert losses[2] < losses[1] < losses[0]
