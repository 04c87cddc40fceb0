"""LookaheadOptimizer and RecomputeOptimizer (Fluid 1.8's wrappers of another optimizer):
values against numpy and against plain append_backward, the programs Fluid builds (the op
lists of Paddle's TestRecomputeOptimizer), and the errors."""

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.meta_optimizers import (
    LookaheadOptimizer,
    PipelineOptimizer,
    RecomputeOptimizer,
)

RNG = np.random.default_rng(0)
X = RNG.standard_normal((16, 3)).astype("float32")
Y = RNG.standard_normal((16, 1)).astype("float32")


# ---------------------------------------------------------------------------------------------
# Lookahead


def _linear(main, startup):
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="float32")
        pred = layers.fc(x, 1, param_attr=fluid.ParamAttr(name="w"),
                         bias_attr=fluid.ParamAttr(
                             name="b", initializer=fluid.initializer.Constant(0.3)))
        return layers.mean(layers.square_error_cost(pred, y))


def _grads(w, b):
    d = 2.0 * (X @ w + b - Y) / len(X)
    return {"w": X.T @ d, "b": d.sum(axis=0)}


@pytest.mark.parametrize("alpha,k", [(0.5, 3), (0.2, 1), (0.8, 5)])
def test_lookahead_matches_numpy_over_steps(alpha, k):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 3
    loss = _linear(main, startup)
    with fluid.program_guard(main, startup):
        LookaheadOptimizer(fluid.optimizer.SGD(0.1), alpha=alpha, k=k).minimize(
            loss, startup_program=startup)
    scope = fluid.Scope()
    exe = fluid.Executor()
    exe.run(startup, scope=scope)
    fast = {n: scope.get(n).astype("float64") for n in ("w", "b")}
    slow = {n: v.copy() for n, v in fast.items()}
    for n in fast:  # the startup program's assign: slow starts as the initial fast
        np.testing.assert_array_equal(scope.get(n + "@SLOW"), scope.get(n))
    for t in range(1, 8):
        g = _grads(fast["w"], fast["b"])
        fast = {n: fast[n] - 0.1 * g[n] for n in fast}
        if t % k == 0:
            slow = {n: alpha * fast[n] + (1 - alpha) * slow[n] for n in fast}
            fast = {n: v.copy() for n, v in slow.items()}
        exe.run(main, feed={"x": X, "y": Y}, scope=scope)
        assert int(np.asarray(scope.get("lookahead_step")).reshape(-1)[0]) == t
        for n in fast:
            np.testing.assert_allclose(scope.get(n), fast[n], rtol=1e-5, atol=1e-6,
                                       err_msg=f"fast {n} step {t}")
            np.testing.assert_allclose(scope.get(n + "@SLOW"), slow[n], rtol=1e-5,
                                       atol=1e-6, err_msg=f"slow {n} step {t}")


def test_lookahead_program_as_fluid_builds_it():
    main, startup = fluid.Program(), fluid.Program()
    loss = _linear(main, startup)
    with fluid.program_guard(main, startup):
        ops, params_grads = LookaheadOptimizer(fluid.optimizer.SGD(0.1)).minimize(
            loss, startup_program=startup)
    assert [op.type for op in ops] == ["sgd", "sgd"]  # the inner minimize's result
    block = main.global_block()
    for name in ("w", "b"):
        slow = block.var(name + "@SLOW")
        assert slow.persistable and list(slow.shape) == list(block.var(name).shape)
        assigns = [op for op in startup.global_block().ops if op.type == "assign"
                   and op.output_arg_names == [name + "@SLOW"]]
        assert len(assigns) == 1 and assigns[0].input_arg_names == [name]
    for name, dtype in (("lookahead_k", "int32"), ("lookahead_alpha", "float32"),
                        ("lookahead_step", "int32")):
        assert block.var(name).persistable and str(block.var(name).dtype) == dtype
        assert name in {n for op in startup.global_block().ops for n in op.output_arg_names}
    types = [op.type for op in block.ops]
    tail = types[types.index("sgd"):]
    assert tail[2:6] == ["increment", "fill_constant", "fill_constant", "elementwise_mod"]
    assert "equal" in tail and tail.count("conditional_block") == 2  # case and default
    inside = main.block(block.ops[types.index("conditional_block")].attrs["sub_block"])
    assert [op.type for op in inside.ops] == [
        "elementwise_mul", "elementwise_sub", "elementwise_mul", "elementwise_add",
        "assign", "assign"] * 2


@pytest.mark.parametrize("kwargs,exc", [
    ({"alpha": 1.5}, ValueError), ({"alpha": -0.1}, ValueError), ({"k": 0}, ValueError),
    ({"k": 2.0}, TypeError)])
def test_lookahead_rejects_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        LookaheadOptimizer(fluid.optimizer.SGD(0.1), **kwargs)
    with pytest.raises(ValueError, match="inner optimizer"):
        LookaheadOptimizer(None)


# ---------------------------------------------------------------------------------------------
# Recompute: the programs of Paddle's TestRecomputeOptimizer


def _net(with_dropout=False, return_input=False):
    program, startup = fluid.Program(), fluid.Program()
    block = program.global_block()
    mul_x = block.create_parameter(name="mul.x", shape=[5, 10], dtype="float32")
    mul_y = block.create_var(name="mul.y", shape=[10, 8], dtype="float32")
    mul_out = block.create_var(name="mul.out", shape=[5, 8], dtype="float32")
    b1 = block.create_parameter(name="b1", shape=[5, 8], dtype="float32")
    b1_out = block.create_var(name="b1_out", shape=[5, 8], dtype="float32")
    b2 = block.create_parameter(name="b2", shape=[5, 8], dtype="float32")
    b2_out = block.create_var(name="b2_out", shape=[5, 8], dtype="float32")
    mean_out = block.create_var(name="mean.out", shape=[1], dtype="float32")
    block.append_op("mul", inputs={"X": [mul_x], "Y": [mul_y]}, outputs={"Out": [mul_out]},
                    attrs={"x_num_col_dims": 1})
    add_in = mul_out
    if with_dropout:
        add_in = block.create_var(name="mul.out.dropout", shape=[5, 8], dtype="float32")
        mask = block.create_var(name="mul.out.mask", shape=[5, 8], dtype="float32")
        block.append_op("dropout", inputs={"X": [mul_out]},
                        outputs={"Out": [add_in], "Mask": [mask]},
                        attrs={"dropout_prob": 0.5})
    block.append_op("elementwise_add", inputs={"X": [add_in], "Y": [b1]},
                    outputs={"Out": [b1_out]})
    block.append_op("elementwise_add", inputs={"X": [b1_out], "Y": [b2]},
                    outputs={"Out": [b2_out]})
    block.append_op("mean", inputs={"X": [b2_out]}, outputs={"Out": [mean_out]})
    if return_input:
        return (program, startup), mul_x, mul_out, b1_out, b2_out, mean_out
    return (program, startup), mul_out, b1_out, b2_out, mean_out


FWD = ["mul", "elementwise_add", "elementwise_add", "mean"]
SGD3 = ["sgd", "sgd", "sgd"]


def _minimize(progs, loss, checkpoints):
    with fluid.program_guard(*progs):
        opt = RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=1.0))
        opt._set_checkpoints(checkpoints)
        return opt.minimize(loss)


def test_recompute_no_checkpoint_is_plain_backward():
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    _minimize(progs, mean_out, [])
    assert [op.type for op in mean_out.block.ops] == FWD + [
        "fill_constant", "mean_grad", "elementwise_add_grad", "elementwise_add_grad",
        "mul_grad"] + SGD3


@pytest.mark.parametrize("as_name", [False, True])
def test_recompute_one_checkpoint(as_name):
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    _minimize(progs, mean_out, [b1_out.name if as_name else b1_out])
    ops = mean_out.block.ops
    assert [op.type for op in ops] == FWD + [
        "fill_constant", "mean_grad", "elementwise_add_grad", "mul", "elementwise_add_grad",
        "mul_grad"] + SGD3
    # the recomputed mul writes the renamed variable, its grad op reads that one
    recomputed = ops[7]
    assert recomputed.output_arg_names == ["mul.out.subprog_0"]
    assert recomputed.attrs["op_role"] == int(fluid.framework.OpRole.Backward)
    assert "mul.out.subprog_0" in ops[8].input_arg_names
    assert "mul.out" not in ops[8].input_arg_names
    assert mean_out.block.has_var("mul.out.subprog_0")


@pytest.mark.parametrize("order", [0, 1])
def test_recompute_multi_checkpoint_in_any_order(order):
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    _minimize(progs, mean_out, [[mul_out, b2_out], [b2_out, mul_out]][order])
    ops = mean_out.block.ops
    assert [op.type for op in ops] == FWD + [
        "fill_constant", "mean_grad", "elementwise_add", "elementwise_add_grad",
        "elementwise_add_grad", "mul_grad"] + SGD3
    assert ops[6].output_arg_names == ["b1_out.subprog_0"]
    assert ops[6].input_arg_names == ["mul.out", "b1"]  # the checkpoint is not renamed


def test_recompute_adjacent_checkpoints_make_no_segment():
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    _minimize(progs, mean_out, [mul_out, b1_out])
    assert [op.type for op in mean_out.block.ops] == FWD + [
        "fill_constant", "mean_grad", "elementwise_add_grad", "elementwise_add_grad",
        "mul_grad"] + SGD3


def test_recompute_input_as_checkpoint():
    progs, mul_x, mul_out, b1_out, b2_out, mean_out = _net(return_input=True)
    _minimize(progs, mean_out, [mul_x, b2_out])
    assert [op.type for op in mean_out.block.ops] == FWD + [
        "fill_constant", "mean_grad", "mul", "elementwise_add", "elementwise_add_grad",
        "elementwise_add_grad", "mul_grad"] + SGD3


def test_recompute_backward_then_apply_gradients():
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    with fluid.program_guard(*progs):
        opt = RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=1.0))
        opt._set_checkpoints([b1_out])
        params_grads = opt.backward(mean_out)
        opt.apply_gradients(params_grads)
    assert [p.name for p, _ in params_grads] == ["mul.x", "b1", "b2"]
    assert [op.type for op in mean_out.block.ops] == FWD + [
        "fill_constant", "mean_grad", "elementwise_add_grad", "mul", "elementwise_add_grad",
        "mul_grad"] + SGD3


def test_recompute_keeps_dropout_outputs_so_the_mask_is_the_forward_one():
    """dask_fluid keeps dropout's outputs in memory, as Fluid 1.6: it is not run again.
    Fluid 1.8 instead inserts a seed op before the dropout and runs it again with the same
    seed (Paddle's test expects mul, seed, dropout, ..., mul, dropout, ...); dask_fluid has no
    seed op. The mask is the forward one either way."""
    progs, mul_out, b1_out, b2_out, mean_out = _net(with_dropout=True)
    _minimize(progs, mean_out, [b1_out])
    ops = mean_out.block.ops
    assert [op.type for op in ops] == [
        "mul", "dropout", "elementwise_add", "elementwise_add", "mean", "fill_constant",
        "mean_grad", "elementwise_add_grad", "mul", "elementwise_add_grad", "dropout_grad",
        "mul_grad"] + SGD3
    dropout_grad = ops[10]
    assert "mul.out.mask" in dropout_grad.input_arg_names


def test_recompute_load_raises_as_fluid():
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    opt = RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=1.0))
    with pytest.raises(NotImplementedError,
                       match="load function is not supported by Recompute Optimizer for now"):
        opt.load({})


def test_recompute_errors():
    progs, mul_out, b1_out, b2_out, mean_out = _net()
    opt = RecomputeOptimizer(fluid.optimizer.SGD(learning_rate=1.0))
    with pytest.raises(ValueError, match="_set_checkpoints first"):
        opt.minimize(mean_out)
    with pytest.raises(TypeError):
        opt._set_checkpoints(b1_out)
    with pytest.raises(TypeError):
        opt._set_checkpoints([1])
    opt._set_checkpoints([b1_out])
    with pytest.raises(NotImplementedError, match="callbacks"):
        opt.backward(mean_out, callbacks=[print])
    with pytest.raises(NotImplementedError, match="grad_clip"):
        opt.minimize(mean_out, grad_clip=fluid.clip.GradientClipByValue(1.0))
    with pytest.raises(NotImplementedError, match="PipelineOptimizer"):
        PipelineOptimizer(fluid.optimizer.SGD(0.1))


def test_recompute_rejects_ops_with_sub_blocks():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3], dtype="float32")
        h = layers.fc(x, 4)
        flag = layers.fill_constant([1], "bool", True)
        out = layers.cond(flag, lambda: layers.relu(h), lambda: layers.tanh(h))
        loss = layers.mean(layers.fc(out, 1))
        opt = RecomputeOptimizer(fluid.optimizer.SGD(0.1))
        opt._set_checkpoints([h, out])
        with pytest.raises(NotImplementedError, match="sub-block"):
            opt.minimize(loss)


# ---------------------------------------------------------------------------------------------
# Recompute: the same gradients as without it


def _mlp(checkpointed, dropout_seed=False):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[6], dtype="float32")
        y = layers.data(name="y", shape=[1], dtype="float32")
        h1 = layers.fc(x, 8, act="relu", param_attr=fluid.ParamAttr(name="w1"),
                       bias_attr=fluid.ParamAttr(name="b1"))
        h2 = layers.fc(h1, 8, act="tanh", param_attr=fluid.ParamAttr(name="w2"),
                       bias_attr=fluid.ParamAttr(name="b2"))
        if dropout_seed is not False:  # None: a mask drawn afresh each run
            h2 = layers.dropout(h2, 0.3, seed=dropout_seed)
        h3 = layers.fc(h2, 8, act="sigmoid", param_attr=fluid.ParamAttr(name="w3"),
                       bias_attr=fluid.ParamAttr(name="b3"))
        h4 = layers.fc(h3 * h1, 5, act="relu", param_attr=fluid.ParamAttr(name="w4"),
                       bias_attr=fluid.ParamAttr(name="b4"))
        pred = layers.fc(h4, 1, param_attr=fluid.ParamAttr(name="w5"),
                         bias_attr=fluid.ParamAttr(name="b5"))
        loss = layers.mean(layers.square_error_cost(pred, y))
        sgd = fluid.optimizer.SGD(0.05)
        if checkpointed:
            opt = RecomputeOptimizer(sgd)
            opt._set_checkpoints([h1, h3, h4])
            _, params_grads = opt.minimize(loss)
        else:
            _, params_grads = sgd.minimize(loss)
    return main, startup, loss, params_grads


@pytest.mark.parametrize("dropout_seed", [False, None, 11])
def test_recompute_gradients_equal_plain_backward_bit_for_bit(dropout_seed):
    feed = {"x": RNG.standard_normal((10, 6)).astype("float32"),
            "y": RNG.standard_normal((10, 1)).astype("float32")}
    results = []
    for checkpointed in (False, True):
        with fluid.unique_name.guard():  # the same names: an unseeded dropout's draws are
            # keyed by its output's name, so both programs draw the same masks
            main, startup, loss, params_grads = _mlp(checkpointed, dropout_seed)
        scope = fluid.Scope()
        exe = fluid.Executor()
        exe.run(startup, scope=scope)
        fetched = []
        for _ in range(3):  # the grads and, through the sgd updates, the parameters
            fetched.append(exe.run(main, feed=feed, scope=scope,
                                   fetch_list=[loss] + [g for _, g in params_grads]))
        params = {p.name: np.array(scope.get(p.name)) for p, _ in params_grads}
        results.append((main, [p.name for p, _ in params_grads], fetched, params))
    (plain, names0, f0, p0), (rec, names1, f1, p1) = results
    assert names0 == names1
    for a, b in zip(f0, f1, strict=True):
        for u, v in zip(a, b, strict=True):
            np.testing.assert_array_equal(u, v)
    for n in p0:
        np.testing.assert_array_equal(p0[n], p1[n])
    recomputed = [op for op in rec.global_block().ops
                  if op.attrs.get("op_role") == int(fluid.framework.OpRole.Backward)
                  and not op.type.endswith("_grad") and op.type not in ("sum", "fill_constant")]
    assert recomputed, "no forward op was recomputed"
    assert all(".subprog_" in n for op in recomputed for n in op.output_arg_names)
    assert "dropout" not in [op.type for op in recomputed]


def test_recompute_no_grad_set_and_an_inner_apply_optimize():
    progs, mul_out, b1_out, b2_out, mean_out = _net()

    class Inner:  # duck-typed: Fluid 1.8 calls the inner optimizer's apply_optimize
        _learning_rate = 1.0

        def apply_optimize(self, loss, startup_program, params_grads):
            self.got = (loss, startup_program, params_grads)
            return ["ops"]

    inner = Inner()
    with fluid.program_guard(*progs):
        opt = RecomputeOptimizer(inner)
        opt._set_checkpoints([b1_out])
        ops, params_grads = opt.minimize(mean_out, no_grad_set={"b2"})
    assert ops == ["ops"] and inner.got[2] is params_grads
    assert [p.name for p, _ in params_grads] == ["mul.x", "b1"]
    assert not mean_out.block.has_var("b2@GRAD")
