import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.framework import OpRole, VarType


def _square_error_program(optimizer=None):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[1000], dtype="float32")
        y_predict = layers.fc(input=x, size=1000, act=None,
                              param_attr=fluid.ParamAttr(name="fc_w"),
                              bias_attr=fluid.ParamAttr(name="fc_b"))
        y = layers.data(name="y", shape=[1], dtype="float32")
        cost = layers.square_error_cost(input=y_predict, label=y)
        avg_cost = layers.mean(cost)
        (optimizer or fluid.optimizer.SGD(learning_rate=0.1)).minimize(avg_cost)
    return main, startup, avg_cost


def test_fluid_op_sequence_for_square_error_model():
    main, startup, _ = _square_error_program()
    assert [op.type for op in main.global_block().ops] == [
        "mul", "elementwise_add", "elementwise_sub", "square", "mean", "fill_constant",
        "mean_grad", "square_grad", "elementwise_sub_grad", "elementwise_add_grad", "mul_grad",
        "sgd", "sgd"]
    # Initialisers are prepended, as Fluid: lr, then the bias, then the weight.
    assert [op.type for op in startup.global_block().ops] == [
        "fill_constant", "fill_constant", "uniform_random"]


def test_op_roles_and_role_vars():
    main, _, _ = _square_error_program()
    ops = main.global_block().ops
    assert ops[4].attr("op_role") == OpRole.Forward | OpRole.Loss
    assert ops[5].attr("op_role") == OpRole.Backward | OpRole.Loss
    assert all(op.attr("op_role") == OpRole.Backward for op in ops[6:11])
    sgd_b, sgd_w = ops[11:]
    assert sgd_b.attr("op_role") == OpRole.Optimize
    assert sgd_b.attr("op_role_var") == ["fc_b", "fc_b@GRAD"]
    assert sgd_w.attr("op_role_var") == ["fc_w", "fc_w@GRAD"]
    # the last writer of each gradient records the pair
    assert ops[9].attr("op_role_var") == ["fc_b", "fc_b@GRAD"]
    assert ops[10].attr("op_role_var") == ["fc_w", "fc_w@GRAD"]


def test_unique_names_follow_fluid():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        h = layers.fc(x, 3, act="relu")
        layers.fc(h, 2)
    names = sorted(p.name for p in main.all_parameters())
    assert names == ["fc_0.b_0", "fc_0.w_0", "fc_1.b_0", "fc_1.w_0"]
    assert main.global_block().var("fc_0.w_0").shape == (4, 3)
    assert h.name == "fc_0.tmp_2"


def test_unique_name_guard_prefix_and_switch_follow_fluid():
    # Fluid 1.8's unique_name: guard(str|bytes) prefixes every name; switch() swaps the
    # generator and hands back the old one
    with fluid.unique_name.guard("A"):
        assert fluid.unique_name.generate("fc") == "Afc_0"
        assert fluid.unique_name.generate("fc") == "Afc_1"
    with fluid.unique_name.guard(b"B"):
        assert fluid.unique_name.generate("fc") == "Bfc_0"
    with fluid.unique_name.guard():
        assert fluid.unique_name.generate("fc") == "fc_0"
        old, checker = fluid.unique_name.switch()
        assert fluid.unique_name.generate("fc") == "fc_0"
        fluid.unique_name.switch(old, checker)
        assert fluid.unique_name.generate("fc") == "fc_1"
        fluid.unique_name.switch(fluid.unique_name.UniqueNameGenerator("C"))
        assert fluid.unique_name.generate("fc") == "Cfc_0"
        with pytest.raises(NotImplementedError, match="parameter-name checker"):
            fluid.unique_name.switch(None, object())


def test_block_create_parameter_initializes_and_checks_as_fluid():
    # Fluid 1.8's Block.create_parameter(initializer=...) appends the init op to that block;
    # Parameter refuses a None shape or dtype and an empty shape
    main = fluid.Program()
    block = main.global_block()
    w = block.create_parameter(name="fc.w", shape=[7, 3], dtype="float32",
                               initializer=fluid.initializer.ConstantInitializer(1.0625))
    assert [op.type for op in block.ops] == ["fill_constant"] and not w.stop_gradient
    got, = fluid.Executor().run(main, fetch_list=[w], scope=fluid.Scope())
    np.testing.assert_array_equal(got, np.full((7, 3), 1.0625, "float32"))
    for kwargs, match in ((dict(shape=None, dtype="float32"), "shape .* should not be None"),
                          (dict(shape=[1], dtype=None), "dtype .* should not be None"),
                          (dict(shape=[], dtype="float32"), "dimensions"),
                          (dict(shape=[-1], dtype="float32"), "positive shape")):
        with pytest.raises(ValueError, match=match):
            fluid.Program().global_block().create_parameter(name="p", **kwargs)


def test_backward_argument_types_are_checked_as_fluid_checks_them():
    # Fluid 1.8: check_type / _get_no_grad_set_name raise TypeError; before, a string was
    # read as its letters and a list of numbers was taken as names
    def net():
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup):
            d = fluid.data(name="d", shape=[None, 13], dtype="float32")
            loss = layers.mean(layers.fc(d, size=1))
        return main, startup, loss

    for kwargs in (dict(parameter_list="fc_0.w_0"), dict(parameter_list=[np.zeros(3)]),
                   dict(no_grad_set="fc_0.b_0"), dict(no_grad_set=[3])):
        main, startup, loss = net()
        with fluid.program_guard(main, startup), pytest.raises(TypeError, match="the type of"):
            fluid.optimizer.SGD(0.1).minimize(loss, **kwargs)
    main, startup, loss = net()
    with fluid.program_guard(main, startup):
        x = main.global_block().var("d")
        with pytest.raises(TypeError, match="target_gradients must be Variables"):
            fluid.gradients([loss], [x], target_gradients=x.name)
        with pytest.raises(TypeError, match="no_grad_set"):
            fluid.gradients([loss], [x], no_grad_set="fc_0.w_0")
    with pytest.raises(ValueError, match="random_seed must be an integer"):
        fluid.Program().random_seed = "seed"
    program = fluid.Program()
    program.random_seed = np.int64(5)
    assert program.random_seed == 5 and program.clone().random_seed == 5


def test_clone_for_test_keeps_only_the_variables_its_ops_use():
    # Fluid 1.8's clone(for_test=True) (prune_backward): the learning rate and the optimizer's
    # moments go with the training ops; data layers stay
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        layers.data(name="unused", shape=[1])
        loss = layers.mean(layers.fc(x, 3))
        fluid.optimizer.Adam(0.01).minimize(loss)
    test = main.clone(for_test=True)
    assert sorted(v.name for v in test.list_vars() if v.persistable) == ["fc_0.b_0",
                                                                          "fc_0.w_0"]
    assert test.global_block().has_var("unused")
    assert any(v.name.startswith("learning_rate") for v in main.list_vars())


def test_learning_rate_variable_name():
    main, _, _ = _square_error_program()
    assert main.global_block().has_var("learning_rate_0")
    assert main.global_block().var("learning_rate_0").persistable


def test_json_round_trip_is_identical():
    main, startup, _ = _square_error_program(fluid.optimizer.Adam(0.01))
    for prog in (main, startup):
        again = fluid.Program.from_json(prog.to_json())
        assert again == prog
        assert again.to_json() == prog.to_json()
        assert str(again) == str(prog)


def test_json_rejects_garbage():
    with pytest.raises(ValueError, match="not a dask_fluid program"):
        fluid.Program.from_json('{"blocks": []}')
    with pytest.raises(ValueError, match="invalid JSON"):
        fluid.Program.from_json("{nope")


def test_clone_for_test_drops_training_ops():
    main, _, _ = _square_error_program()
    test_prog = main.clone(for_test=True)
    assert [op.type for op in test_prog.global_block().ops] == [
        "mul", "elementwise_add", "elementwise_sub", "square", "mean"]
    assert len(main.global_block().ops) == 13


def test_program_prints_and_renders_html():
    main, _, _ = _square_error_program()
    text = str(main)
    assert "block 0" in text and "mul(" in text and "fc_w" in text
    html = main._repr_html_()
    assert "<table>" in html and "elementwise_add" in html


def test_program_guard_restores_on_error():
    before = fluid.default_main_program()
    with pytest.raises(RuntimeError):
        with fluid.program_guard(fluid.Program()):
            raise RuntimeError("boom")
    assert fluid.default_main_program() is before


def test_operator_checks_signature():
    prog = fluid.Program()
    block = prog.global_block()
    with pytest.raises(ValueError, match='Incorrect setting for input.*"mul".*Need'):
        block.append_op("mul", inputs={"A": ["x"]}, outputs={"Out": ["y"]})
    with pytest.raises(KeyError, match="no_such_op"):
        block.append_op("no_such_op")


def test_variable_redefinition_reports_shapes():
    block = fluid.Program().global_block()
    block.create_var(name="v", shape=[2, 3])
    with pytest.raises(ValueError, match=r"\[2, 3\].*\[4\]"):
        block.create_var(name="v", shape=[4])


def test_piecewise_decay_builds_switch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = layers.piecewise_decay([10000, 20000], [1.0, 0.5, 0.1])
    types = [op.type for op in main.global_block().ops]
    assert types == ["increment", "cast", "fill_constant", "fill_constant", "less_than",
                     "logical_not", "conditional_block", "fill_constant", "fill_constant",
                     "less_than", "logical_not", "logical_and", "logical_and",
                     "conditional_block", "fill_constant", "conditional_block"]
    assert main.num_blocks == 4
    assert all([op.type for op in main.block(i).ops] == ["assign"] for i in (1, 2, 3))
    assert lr.name == "learning_rate"


def test_exponential_decay_ops():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        layers.exponential_decay(0.1, 100, 0.5, staircase=True)
    # Fluid 1.8's math_op_patch: step / 100 and 0.1 * x are scale ops, 0.5 ** x is a
    # constant of x's shape and an elementwise_pow
    ops = main.global_block().ops
    assert [op.type for op in ops] == [
        "increment", "cast", "scale", "floor", "fill_constant", "elementwise_pow", "scale"]
    assert ops[2].attr("scale") == 1.0 / 100 and ops[2].attr("bias") == 0.0
    assert ops[4].attr("value") == 0.5 and ops[5].input("X") == ops[4].output("Out")
    assert ops[6].attr("scale") == 0.1
    assert all(op.attr("op_role") == OpRole.LRSched for op in ops)


def test_l2_and_clip_ops_follow_fluid_order():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[10])
        pred = layers.fc(x, 5, param_attr=fluid.ParamAttr(
            name="fc_w", gradient_clip=fluid.clip.GradientClipByValue(0.1)),
            bias_attr=fluid.ParamAttr(name="fc_b"))
        loss = layers.mean(pred)
        fluid.optimizer.SGD(0.1, regularization=fluid.regularizer.L2Decay(1e-4)).minimize(loss)
    opt_ops = [op for op in main.global_block().ops if op.attr("op_role") == OpRole.Optimize]
    by_param = {}
    for op in opt_ops:
        by_param.setdefault(op.attr("op_role_var")[0], []).append(op.type)
    assert by_param["fc_b"] == ["scale", "sum", "sgd"]
    assert by_param["fc_w"] == ["clip", "scale", "sum", "sgd"]


def test_backward_sums_gradients_of_reused_variables():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        h = layers.fc(x, 4)
        both = layers.elementwise_add(h, h)
        loss = layers.mean(both)
        fluid.append_backward(loss)
    types = [op.type for op in main.global_block().ops]
    assert "sum" in types
    sum_op = main.global_block().ops[types.index("sum")]
    assert sum_op.output("Out") == [h.name + "@GRAD"]
    assert all("@RENAME@" in n for n in sum_op.input("X"))
    grad_op = main.global_block().ops[types.index("elementwise_add_grad")]
    assert grad_op.output("X@GRAD") == sum_op.input("X")[:1]  # both parts renamed
    assert grad_op.output("Y@GRAD") == sum_op.input("X")[1:]


def test_one_grad_op_writing_a_gradient_twice_gets_it_summed():
    """Regression: elementwise_mul(h, h) writes h@GRAD as X@GRAD and as Y@GRAD; the first
    write kept the bare name and the sum read a part nobody wrote."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[3])
        h = layers.fc(x, 2, param_attr="w", bias_attr=False)
        loss = layers.mean(layers.elementwise_mul(h, h))
        fluid.append_backward(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    dw, w = exe.run(main, feed={"x": xv}, fetch_list=["w@GRAD", "w"], scope=scope)
    np.testing.assert_allclose(dw, xv.T @ (2 * (xv @ w) / 8), rtol=1e-5)


def test_stop_gradient_prunes_branch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        h = layers.fc(x, 4)
        h.stop_gradient = True
        loss = layers.mean(layers.fc(h, 1))
        params_grads = fluid.append_backward(loss)
    assert sorted(p.name for p, _ in params_grads) == ["fc_1.b_0", "fc_1.w_0"]
    assert "fc_0.w_0@GRAD" not in main.global_block().vars


def test_minimize_without_parameters_is_an_error():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        loss = layers.mean(x)
        with pytest.raises(ValueError, match="nothing to optimize"):
            fluid.optimizer.SGD(0.1).minimize(loss)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_optimizer_rejects_bad_learning_rate(bad):
    with pytest.raises(ValueError, match="learning_rate"):
        fluid.optimizer.SGD(bad)


def test_optimizer_learning_rate_is_a_float_and_may_be_zero():
    # Fluid 1.8's Optimizer checks the type: a float (or a Variable), an int is refused
    with pytest.raises(TypeError, match=r"learning rate should be a float.*write 1\.0"):
        fluid.optimizer.SGD(1)
    assert fluid.optimizer.SGD(0.0)._learning_rate == 0.0


def test_seeded_startup_is_deterministic_and_distinct_per_param():
    def init():
        main, startup = fluid.Program(), fluid.Program()
        startup.random_seed = 7
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            x = layers.data(name="x", shape=[8])
            layers.fc(layers.fc(x, 8), 8)
        scope = fluid.Scope()
        fluid.Executor().run(startup, scope=scope)
        return scope

    a, b = init(), init()
    for name in ("fc_0.w_0", "fc_1.w_0"):
        np.testing.assert_array_equal(a.get(name), b.get(name))
    assert not np.array_equal(a.get("fc_0.w_0"), a.get("fc_1.w_0"))


def test_backward_through_scale():
    """Non-regression: scale's grad op takes its incoming gradient in slot X."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        loss = layers.scale(layers.mean(layers.fc(x, 1)), scale=0.5)
        params_grads = fluid.append_backward(loss)
    assert sorted(p.name for p, _ in params_grads) == ["fc_0.b_0", "fc_0.w_0"]


def test_all_attrs_gives_block_attributes_as_blocks():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        lr = layers.piecewise_decay([2], [1.0, 0.5])
    cond = next(op for op in main.global_block().ops if op.type == "conditional_block")
    attrs = cond.all_attrs()
    assert attrs["sub_block"] is main.block(cond.attr("sub_block"))
    assert isinstance(cond.attr("sub_block"), int)  # stored as an index
    assert lr.name in main.global_block().vars


def test_parameter_clip_and_regularizer_survive_json():
    # framework reads them back through the hook clip installs (it imports no layer or clip)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        layers.fc(x, 2, param_attr=fluid.ParamAttr(
            name="w", gradient_clip=fluid.clip.GradientClipByNorm(2.5),
            regularizer=fluid.regularizer.L2Decay(0.01)))
    w = fluid.Program.from_json(main.to_json()).global_block().var("w")
    assert isinstance(w.gradient_clip_attr, fluid.clip.GradientClipByNorm)
    assert w.gradient_clip_attr.clip_norm == 2.5
    assert isinstance(w.regularizer, fluid.regularizer.L2Decay)


def test_framework_hooks_are_named():
    from dask_fluid.framework import install_hook

    with pytest.raises(ValueError, match="no hook 'binary'"):
        install_hook("binary", lambda *a: None)


def test_layers_record_the_attributes_fluid_records():
    """Placement and kernel hints that do not change values here are still kept on the ops
    and parameters, as Fluid 1.8 keeps them (saved programs and transpiled ones carry them)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [4, 3, 3])
        label = layers.data("label", [1], dtype="int64")
        bn = layers.batch_norm(x, do_model_average_for_mean_and_var=False)
        logits = layers.fc(bn, 4, param_attr=fluid.ParamAttr(do_model_average=False))
        layers.softmax(logits, use_cudnn=True)
        layers.softmax_with_cross_entropy(logits, label, numeric_stable_mode=False)
        layers.less_than(x, x, force_cpu=True)
        layers.less_than(x, x)
        layers.create_global_var([1], 0.5, "float32", force_cpu=True, name="g")
    ops = {op.type: op for op in main.global_block().ops}
    assert ops["softmax"].attr("use_cudnn") is True
    assert ops["softmax_with_cross_entropy"].attr("numeric_stable_mode") is False
    less = [op for op in main.global_block().ops if op.type == "less_than"]
    assert less[0].attr("force_cpu") is True and less[1].attr("force_cpu") is False
    init = {op.output("Out")[0]: op for op in startup.global_block().ops}
    assert init["g"].attr("force_cpu") is True
    assert init["fc_0.w_0"].type != "fill_constant"
    assert init["batch_norm_0.w_0"].attr("force_cpu") is False  # the scale's Constant(1.0)
    params = {p.name: p for p in main.global_block().all_parameters()}
    assert params["batch_norm_0.w_1"].do_model_average is False  # moving mean
    assert params["batch_norm_0.w_2"].do_model_average is False  # moving variance
    assert params["batch_norm_0.w_0"].do_model_average is True
    assert params["fc_0.w_0"].do_model_average is False
    # and a saved program keeps them
    again = fluid.Program.from_json(main.to_json())
    assert again.global_block().var("fc_0.w_0").do_model_average is False


def _rnn_program(kind):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        if kind == "dynamic":
            sent = layers.data("s", [4], lod_level=1)
            rnn = layers.DynamicRNN()
            with rnn.block():
                word = rnn.step_input(sent)
                mem = rnn.memory(shape=[8])
                h = layers.fc([word, mem], 8, act="tanh")
                rnn.update_memory(mem, h)
                rnn.output(h)
            loss = layers.mean(layers.sequence_pool(rnn(), "sum"))
        else:
            x = layers.data("x", [5, 2, 4], append_batch_size=False)
            rnn = layers.StaticRNN()
            with rnn.step():
                word = rnn.step_input(x)
                mem = rnn.memory(shape=[-1, 8], batch_ref=word)
                h = layers.fc([word, mem], 8, act="tanh")
                rnn.update_memory(mem, h)
                rnn.step_output(h)
            loss = layers.mean(rnn())
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main


@pytest.mark.parametrize("kind", ["dynamic", "static"])
def test_to_string_checks_programs_with_step_blocks(kind):
    """Every name the backward pass of a step block uses is declared, as in Fluid (the step's
    output gradients, which the recurrent grad op supplies, included)."""
    text = _rnn_program(kind).to_string(throw_on_error=True, with_details=True)
    assert "@GRAD" in text and "trainable=True" in text


def test_to_string_with_details_and_its_checks():
    main, startup, _ = _square_error_program()
    plain, detailed = main.to_string(False), main.to_string(False, with_details=True)
    assert "var fc_w : float32[1000, 1000] (persistable)" in plain
    assert ("var fc_w : float32[1000, 1000] (persistable, lod_level=0, is_data=False, "
            "trainable=True, optimize_attr={'learning_rate': 1.0}, regularizer=None, "
            "gradient_clip_attr=None, do_model_average=True)") in detailed
    assert "var x : float32[-1, 1000] (stop_gradient, lod_level=0, is_data=True)" in detailed
    assert str(main) == plain and main.to_string(True) == plain  # a sound program
    with pytest.raises(TypeError, match="take bools"):
        main.to_string("yes")
    # a hand-made op on a variable nobody declared: printed, or refused when checking
    main.global_block().append_op("scale", inputs={"X": ["nowhere"]},
                                  outputs={"Out": ["fc_w"]}, attrs={"scale": 2.0})
    assert "inputs={X=['nowhere']}" in main.to_string(False)
    with pytest.raises(ValueError, match=r"op 'scale' in block 0 uses variables no enclosing "
                                         r"block declares: \['nowhere'\]"):
        main.to_string(True)


def test_block_attrs_given_as_blocks_are_kept_as_block_indices_as_fluid_18():
    # Fluid 1.8's Operator turns a Block attr value (or a list of Blocks) into a block attr
    # (set_block_attr / set_blocks_attr): scripts building control flow or listen_and_serv
    # by hand pass the Block objects
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.fill_constant([1], "float32", 2.0)
        cond = layers.fill_constant([1], "bool", True)
        out = main.global_block().create_var(name="out", shape=[1], dtype="float32")
        sub = main._create_block()
        layers.assign(layers.scale(x, 3.0), output=out)
        main._rollback()
        scope = main.global_block().create_var(name="scope", type=VarType.STEP_SCOPES)
        op = main.global_block().append_op(
            "conditional_block", inputs={"Cond": [cond], "Input": [x]},
            outputs={"Out": [out], "Scope": [scope]},
            attrs={"sub_block": sub, "is_scalar_condition": True})
        op._set_attr("optimize_blocks", [sub, main.global_block()])
    assert op.attr("sub_block") == sub.idx and op.all_attrs()["sub_block"] is sub
    assert op.attr("optimize_blocks") == [sub.idx, 0]
    got, = fluid.Executor().run(main, fetch_list=[out], scope=fluid.Scope())
    np.testing.assert_array_equal(got, [6.0])
