"""``fluid.contrib.mixed_precision`` (dask_fluid/contrib/mixed_precision) against what Fluid 1.8's
decorator.py, fp16_lists.py and fp16_utils.py build: the op lists, the float16 rewrite, the
loss-scaling variables and ops, training that tracks float32 and the dynamic loss scaling."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.contrib import mixed_precision as mp
from dask_fluid.contrib.mixed_precision import fp16_lists
from dask_fluid.contrib.mixed_precision.fp16_utils import rewrite_program
from dask_fluid.framework import OpRole


def _mlp(x, y):
    h = fluid.layers.fc(x, 16, act="relu")
    logits = fluid.layers.fc(h, 4)
    return fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))


def _build(amp: bool, make_opt=lambda: fluid.optimizer.SGD(learning_rate=0.1), net="mlp",
           **amp_kwargs):
    main, start = fluid.Program(), fluid.Program()
    main.random_seed = start.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, start):
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        if net == "mlp":
            x = fluid.layers.data("x", shape=[8], dtype="float32")
            loss = _mlp(x, y)
        else:
            x = fluid.layers.data("x", shape=[1, 8, 8], dtype="float32")
            c = fluid.layers.conv2d(x, 4, 3, act="relu")
            p = fluid.layers.pool2d(c, 2, pool_stride=2)
            loss = fluid.layers.mean(
                fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(p, 4), y))
        opt = make_opt()
        if amp:
            opt = mp.decorate(opt, **amp_kwargs)
        result = opt.minimize(loss)
    return main, start, loss, opt, result


def _data(net="mlp", n=32, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n, 8) if net == "mlp" else (n, 1, 8, 8)
    return {"x": rng.standard_normal(shape).astype("float32"),
            "y": rng.integers(0, 4, (n, 1)).astype("int64")}


def _ops(prog, type_):
    return [op for op in prog.global_block().ops if op.type == type_]


# -- lists --------------------------------------------------------------------------------------


def test_default_lists_are_fluids():
    lists = mp.AutoMixedPrecisionLists()
    assert lists.white_list == {"conv2d", "matmul", "mul"}
    assert lists.black_list == {"exp", "square", "log", "mean", "sum", "cos_sim", "softmax",
                                "softmax_with_cross_entropy",
                                "sigmoid_cross_entropy_with_logits", "cross_entropy",
                                "cross_entropy2"}
    assert {"elementwise_add", "relu", "pool2d", "batch_norm", "cast", "reshape2"} \
        <= lists.gray_list
    assert lists.black_varnames is None
    # the module's sets are copied, not shared
    lists.white_list.add("tanh")
    assert "tanh" not in fp16_lists.white_list


def test_custom_lists_move_ops():
    lists = mp.AutoMixedPrecisionLists(custom_white_list={"mean", "relu"},
                                       custom_black_list={"mul"})
    assert "mean" in lists.white_list and "mean" not in lists.black_list
    assert "relu" in lists.white_list and "relu" not in lists.gray_list
    assert "mul" in lists.black_list and "mul" not in lists.white_list
    with pytest.raises(ValueError, match="Custom white list overlap custom black list"):
        mp.AutoMixedPrecisionLists(custom_white_list={"mul"}, custom_black_list={"mul"})
    with pytest.raises(TypeError, match="must be a set or list of op names"):
        mp.AutoMixedPrecisionLists(custom_white_list="mul")


# -- the rewrite --------------------------------------------------------------------------------


def test_rewrite_program_casts_around_white_ops():
    main, start = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, start):
        x = fluid.layers.data("x", shape=[8], dtype="float32")
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        _mlp(x, y)
    rewrite_program(main, mp.AutoMixedPrecisionLists())
    block = main.global_block()
    # Fluid inserts each cast at the op's index, so the last input's cast comes first
    assert [op.type for op in block.ops] == [
        "cast", "cast", "mul", "cast", "elementwise_add", "relu",
        "cast", "mul", "cast", "elementwise_add", "cast", "softmax_with_cross_entropy", "mean"]
    casts = _ops(main, "cast")
    assert [(c.input("X")[0], c.output("Out")[0]) for c in casts] == [
        ("fc_0.w_0", "fc_0.w_0.cast_fp16"), ("x", "x.cast_fp16"),
        ("fc_0.b_0", "fc_0.b_0.cast_fp16"), ("fc_1.w_0", "fc_1.w_0.cast_fp16"),
        ("fc_1.b_0", "fc_1.b_0.cast_fp16"), ("fc_1.tmp_1", "fc_1.tmp_1.cast_fp32")]
    assert [(c.attr("in_dtype"), c.attr("out_dtype")) for c in casts] == \
        [("float32", "float16")] * 5 + [("float16", "float32")]
    mul = _ops(main, "mul")[0]
    assert mul.input("X") == ["x.cast_fp16"] and mul.input("Y") == ["fc_0.w_0.cast_fp16"]
    # the white op and the gray ops after it compute in float16; parameters stay float32
    for name in ("fc_0.tmp_0", "fc_0.tmp_1", "fc_0.tmp_2", "fc_1.tmp_0", "fc_1.tmp_1",
                 "x.cast_fp16", "fc_0.w_0.cast_fp16"):
        assert block.var(name).dtype == "float16", name
    for p in main.all_parameters():
        assert p.dtype == "float32"
    sce = _ops(main, "softmax_with_cross_entropy")[0]
    assert sce.input("Logits") == ["fc_1.tmp_1.cast_fp32"]
    assert block.var(sce.output("Loss")[0]).dtype == "float32"


def test_rewrite_with_custom_lists_and_black_varnames():
    def rewritten(lists):
        main, start = fluid.Program(), fluid.Program()
        with fluid.unique_name.guard(), fluid.program_guard(main, start):
            x = fluid.layers.data("x", shape=[8], dtype="float32")
            y = fluid.layers.data("y", shape=[1], dtype="int64")
            _mlp(x, y)
        rewrite_program(main, lists)
        return main

    # mul kept in float32: nothing runs in float16, no cast
    assert not _ops(rewritten(mp.AutoMixedPrecisionLists(custom_black_list={"mul"})), "cast")
    # a black variable keeps its readers and writers in float32: the first fc stays float32
    main = rewritten(mp.AutoMixedPrecisionLists(custom_black_varnames={"fc_0.tmp_0"}))
    assert main.global_block().var("fc_0.tmp_0").dtype == "float32"
    assert main.global_block().var("fc_1.tmp_0").dtype == "float16"
    with pytest.raises(TypeError, match="amp_lists must be an AutoMixedPrecisionLists"):
        rewrite_program(main, {"mul"})


# -- decorate + minimize ------------------------------------------------------------------------


def test_decorate_defaults_are_fluid_18s():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        opt = mp.decorate(fluid.optimizer.SGD(0.1))
    assert isinstance(opt, mp.decorator.OptimizerWithMixedPrecision)
    assert opt._use_dynamic_loss_scaling is True
    assert (opt._incr_ratio, opt._decr_ratio) == (2.0, 0.8)
    init = {op.output("Out")[0]: op.attr("value") for op in _ops(start, "fill_constant")}
    assert init[opt.get_loss_scaling().name] == 2.0**15
    steps = [op.attr("value") for op in _ops(main, "fill_constant")]
    assert steps == [1000.0, 2.0]  # incr_every_n_steps, decr_every_n_nan_or_inf
    assert opt.get_scaled_loss() is None


def test_minimize_builds_fluid_18s_program():
    main, start, loss, opt, (ops, pgs) = _build(True, init_loss_scaling=128.0)
    block = main.global_block()
    scaling = opt.get_loss_scaling()
    assert scaling.name == "loss_scaling_0" and scaling.dtype == "float32"
    assert scaling.persistable and scaling.shape == (1,)
    good, bad = block.var("num_good_steps_0"), block.var("num_bad_steps_0")
    assert good.dtype == bad.dtype == "int32" and good.persistable and bad.persistable
    init = {op.output("Out")[0]: (op.attr("value"), op.attr("dtype"))
            for op in _ops(start, "fill_constant")}
    assert init["loss_scaling_0"] == (128.0, "float32")
    assert init["num_good_steps_0"] == (0.0, "int32")
    assert init["num_bad_steps_0"] == (0.0, "int32")
    # a float32 learning rate made by decorate
    lr = [op for op in _ops(start, "fill_constant") if "learning_rate" in op.output("Out")[0]]
    assert len(lr) == 1 and lr[0].attr("value") == pytest.approx(0.1)

    # the scaled loss: loss * loss_scaling, the start of the backward pass
    scaled = opt.get_scaled_loss()
    mul = [op for op in _ops(main, "elementwise_mul") if op.output("Out") == [scaled.name]]
    assert mul and mul[0].input("X") == [loss.name] and mul[0].input("Y") == [scaling.name]

    # the float32 parameter gradients come from casts moved behind the backward ops with the
    # Optimize role (update_role_var_grad); the ops writing their float16 inputs carry op_role_var
    types = [op.type for op in block.ops]
    last_backward = max(i for i, op in enumerate(block.ops)
                        if op.attr("op_role") & OpRole.Backward and op.type != "cast")
    param_casts = [op for op in _ops(main, "cast")
                   if op.output("Out")[0].endswith("@GRAD") and
                   block.var(op.output("Out")[0]).dtype == "float32" and
                   op.output("Out")[0][:-5] in {p.name for p in main.all_parameters()}]
    assert len(param_casts) == 4
    for op in param_casts:
        assert op.attr("op_role") == OpRole.Optimize
        assert block.ops.index(op) > last_backward
        assert "op_role_var" not in op.attrs
        assert block.var(op.input("X")[0]).dtype == "float16"
    mul_grads = _ops(main, "mul_grad")
    assert all(op.attr("op_role_var")[:2] for op in mul_grads)

    # the returned gradients are the float32 ones divided by the loss scaling
    assert len(pgs) == 4
    divs = {op.output("Out")[0]: op for op in _ops(main, "elementwise_div")}
    for p, g in pgs:
        assert g.name in divs
        assert divs[g.name].input("X") == [p.name + "@GRAD"]
        assert divs[g.name].input("Y") == [scaling.name]
        assert g.dtype == "float32"
    # the overflow check: reduce_sum of each, concat, reduce_sum, isfinite
    i_fin = types.index("isfinite")
    assert types[i_fin - 6:i_fin] == ["reduce_sum"] * 4 + ["concat", "reduce_sum"]
    # update_loss_scaling's Switch (two top-level cases) and the zeroing Switch (two more)
    conds = _ops(main, "conditional_block")
    assert len(conds) == 4
    assert conds[-1].output("Out") == sorted(g.name for _, g in pgs)
    sub_types = {op.type for b in main.blocks[1:] for op in b.ops}
    assert {"less_than", "increment", "assign", "fill_zeros_like", "isfinite"} <= sub_types
    # the optimize ops come last and read the unscaled gradients
    assert len(ops) == 4 and types[-4:] == ["sgd"] * 4
    assert {op.input("Grad")[0] for op in ops} == {g.name for _, g in pgs}


def test_static_loss_scaling_builds_no_check():
    main, start, loss, opt, (ops, pgs) = _build(True, use_dynamic_loss_scaling=False,
                                                init_loss_scaling=8.0)
    assert not _ops(main, "isfinite") and not _ops(main, "conditional_block")
    assert not main.global_block().has_var("num_good_steps_0")
    assert len(_ops(main, "elementwise_div")) == 4


# -- training -----------------------------------------------------------------------------------


def _train(main, start, fetch, feed, steps):
    exe = fluid.Executor(fluid.CPUPlace())
    out = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(start)
        for _ in range(steps):
            out.append([np.asarray(v).copy() for v in exe.run(main, feed=feed,
                                                               fetch_list=fetch)])
    return out


@pytest.mark.parametrize("make_opt", [
    lambda: fluid.optimizer.SGD(learning_rate=0.1),
    lambda: fluid.optimizer.Adam(learning_rate=0.01),
], ids=["sgd", "adam"])
def test_mlp_with_amp_tracks_float32(make_opt):
    feed = _data()
    main32, start32, loss32, _, _ = _build(False, make_opt)
    main16, start16, loss16, opt, _ = _build(True, make_opt, init_loss_scaling=1024.0)
    l32 = [r[0].item() for r in _train(main32, start32, [loss32], feed, 10)]
    runs = _train(main16, start16, [loss16, opt.get_loss_scaling(), "fc_0.tmp_0"], feed, 10)
    l16 = [r[0].item() for r in runs]
    assert runs[0][2].dtype == np.float16  # the first fc's matmul ran in float16
    assert all(r[1].item() == 1024.0 for r in runs)  # no overflow: the scaling is kept
    np.testing.assert_allclose(l16, l32, rtol=5e-3)
    assert l16[-1] < l16[0] - 0.1


def test_conv_net_with_amp_tracks_float32():
    feed = _data("conv", n=16)
    mom = lambda: fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9)  # noqa: E731
    main32, start32, loss32, _, _ = _build(False, mom, net="conv")
    main16, start16, loss16, _, _ = _build(True, mom, net="conv", init_loss_scaling=64.0)
    assert {"conv2d", "pool2d"} <= {op.type for op in main16.global_block().ops}
    conv_out = _ops(main16, "conv2d")[0].output("Output")[0]
    assert main16.global_block().var(conv_out).dtype == "float16"
    l32 = [r[0].item() for r in _train(main32, start32, [loss32], feed, 6)]
    runs = _train(main16, start16, [loss16, conv_out], feed, 6)
    assert runs[0][1].dtype == np.float16
    np.testing.assert_allclose([r[0].item() for r in runs], l32, rtol=5e-3)


# the overflowing steps' casts and matmuls warn, as numpy does on inf and nan
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_dynamic_loss_scaling_on_overflow_and_recovery():
    main, start, loss, opt, _ = _build(True, init_loss_scaling=1024.0, incr_every_n_steps=2,
                                       decr_every_n_nan_or_inf=2, incr_ratio=2.0,
                                       decr_ratio=0.5)
    good_feed = _data()
    # 1e5 is finite in float32 but past float16's range: its cast to float16 is inf
    bad_feed = {"x": np.full((32, 8), 1e5, np.float32), "y": good_feed["y"]}
    params = sorted(p.name for p in main.all_parameters())
    fetch = [opt.get_loss_scaling(), "num_good_steps_0", "num_bad_steps_0", *params]
    exe = fluid.Executor(fluid.CPUPlace())
    history = []
    with fluid.scope_guard(fluid.Scope()):
        exe.run(start)
        before = [np.asarray(fluid.global_scope().find_var(n).get_tensor()).copy()
                  for n in params]
        for feed in [bad_feed] * 3 + [good_feed] * 3:
            out = exe.run(main, feed=feed, fetch_list=fetch)
            history.append((out[0].item(), out[1].item(), out[2].item(),
                            [np.asarray(v).copy() for v in out[3:]]))
    # Fluid 1.8 compares less_than(decr_every_n_nan_or_inf, num_bad_steps + 1): the scaling
    # shrinks on the bad step that follows decr_every_n_nan_or_inf bad steps, here the third
    assert [(s, g, b) for s, g, b, _ in history[:3]] == [(1024.0, 0, 1), (1024.0, 0, 2),
                                                         (512.0, 0, 0)]
    # the overflowing steps' gradients were zeroed: SGD left the parameters as they were
    for _, _, _, values in history[:3]:
        for got, want in zip(values, before, strict=True):
            np.testing.assert_array_equal(got, want)
    # good steps: the parameters move, and likewise the scaling doubles on the step after
    # incr_every_n_steps good ones
    assert [(s, g, b) for s, g, b, _ in history[3:]] == [(512.0, 1, 0), (512.0, 2, 0),
                                                         (1024.0, 0, 0)]
    assert not np.array_equal(history[3][3][0], before[0])
    assert all(np.isfinite(v).all() for _, _, _, vals in history for v in vals)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_scaling_never_drops_below_one():
    main, start, loss, opt, _ = _build(True, init_loss_scaling=1.5, decr_every_n_nan_or_inf=1,
                                       decr_ratio=0.5)
    bad_feed = {"x": np.full((4, 8), 1e5, np.float32), "y": np.zeros((4, 1), np.int64)}
    scales = [r[0].item() for r in _train(main, start, [opt.get_loss_scaling()], bad_feed, 4)]
    assert scales == [1.5, 1.0, 1.0, 1.0]


# -- errors -------------------------------------------------------------------------------------


def test_errors():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        with pytest.raises(TypeError, match="optimizer must be a fluid.optimizer.Optimizer"):
            mp.decorate("sgd")
        with pytest.raises(TypeError, match="amp_lists must be an AutoMixedPrecisionLists"):
            mp.decorate(fluid.optimizer.SGD(0.1), amp_lists={"mul"})
        with pytest.raises(ValueError, match="decr_ratio must be in"):
            mp.decorate(fluid.optimizer.SGD(0.1), decr_ratio=1.5)
        with pytest.raises(ValueError, match="incr_every_n_steps must be an int >= 1"):
            mp.decorate(fluid.optimizer.SGD(0.1), incr_every_n_steps=0)
        with pytest.raises(ValueError, match="init_loss_scaling must be > 0"):
            mp.decorate(fluid.optimizer.SGD(0.1), init_loss_scaling=0.0)
        x = fluid.layers.data("x", shape=[8], dtype="float32")
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        loss = _mlp(x, y)
        opt = mp.decorate(fluid.optimizer.SGD(0.1))
        with pytest.raises(NotImplementedError,
                           match=r"backward\(callbacks=...\) is not implemented in dask_fluid"):
            opt.backward(loss, callbacks=[lambda *a: None])
    other_main, other_start = fluid.Program(), fluid.Program()
    with fluid.program_guard(other_main, other_start):
        elsewhere = mp.decorate(fluid.optimizer.SGD(0.1))
    with pytest.raises(ValueError, match="the loss is not in the program"):
        elsewhere.minimize(loss)


def test_exported_as_fluid_has_them():
    assert set(mp.__all__) == {"decorate", "AutoMixedPrecisionLists"}
    assert fluid.contrib.mixed_precision.decorate is mp.decorate
    assert fluid.contrib.decorate is mp.decorate
