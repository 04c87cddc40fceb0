"""``layers.cond``, ``case`` and ``switch_case`` (Fluid 1.8: each branch in a
ConditionalBlock that runs only when taken, the results merged by ``select_input``): the
taken branch's values for every choice, nested results, program structure, and the errors
Fluid gives."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_cond_runs_only_the_taken_branch():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2])
        flag = layers.data("flag", [1], dtype="bool", append_batch_size=False)
        out = layers.cond(flag, lambda: layers.scale(x, 2.0), lambda: layers.scale(x, -1.0))
        pair = layers.cond(flag, lambda: (x, [layers.scale(x, 3.0)]),
                           lambda: (layers.scale(x, 0.0), [x]))
    ops = [op.type for op in main.global_block().ops]
    assert ops.count("conditional_block") == 4 and ops.count("select_input") == 3
    assert isinstance(pair, tuple) and isinstance(pair[1], list)
    x_val = np.array([[1.0, -2.0]], np.float32)
    for taken in (True, False):
        got = _run(main, startup, {"x": x_val, "flag": np.array([taken])},
                   [out, pair[0], pair[1][0]])
        want = [x_val * 2, x_val, x_val * 3] if taken else [-x_val, 0 * x_val, x_val]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert main.to_string(True)


def test_case_and_switch_case_pick_like_fluid():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        i = layers.data("i", [1], dtype="int32", append_batch_size=False)
        one = layers.fill_constant([1], "float32", 1.0)
        by_key = layers.switch_case(i, {1: lambda: layers.scale(one, 10.0),
                                        2: lambda: layers.scale(one, 20.0)},
                                    default=lambda: layers.scale(one, -1.0))
        by_list = layers.switch_case(i, [lambda: layers.scale(one, 0.0),
                                         lambda: layers.scale(one, 1.0)])  # last: default
        i64 = layers.cast(i, "int64")
        first_true = layers.case(
            [(layers.less_than(i64, layers.fill_constant([1], "int64", 1)),
              lambda: layers.scale(one, 5.0)),
             (layers.less_than(i64, layers.fill_constant([1], "int64", 3)),
              lambda: layers.scale(one, 6.0))],
            default=lambda: layers.scale(one, 7.0))
    for v, want in ((0, [-1, 0, 5]), (1, [10, 1, 6]), (2, [20, 1, 6]), (5, [-1, 1, 7])):
        got = _run(main, startup, {"i": np.array([v], np.int32)},
                   [by_key, by_list, first_true])
        assert [float(g[0]) for g in got] == want, v


def test_errors_fluid_gives():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [2])
        flag = layers.fill_constant([1], "bool", True)
        with pytest.raises(TypeError, match="pred must be a bool Variable"):
            layers.cond(x, lambda: x, lambda: x)
        with pytest.raises(TypeError, match="true_fn in cond must be callable"):
            layers.cond(flag, 3, lambda: x)
        with pytest.raises(ValueError, match="true_fn returns None while false_fn returns "
                                             "non-None"):
            layers.cond(flag, lambda: None, lambda: x)
        with pytest.raises(ValueError, match="differ in structure"):
            layers.cond(flag, lambda: [x, x], lambda: [x])
        assert layers.cond(flag, lambda: None, lambda: None) is None
        with pytest.raises(TypeError, match="must be \\(pred, fn\\) tuples"):
            layers.case([flag])
        with pytest.raises(TypeError, match="default in Op\\(case\\) must be callable"):
            layers.case([(flag, lambda: x)], default=1)
        i = layers.fill_constant([1], "int64", 0)
        with pytest.raises(ValueError, match="'1' appears more than once"):
            layers.switch_case(i, [(1, lambda: x), (1, lambda: x)])
        with pytest.raises(TypeError, match="branch_index in Op\\(switch_case\\) must be an "
                                            "integer Variable"):
            layers.switch_case(x, [lambda: x])


@pytest.mark.parametrize("taken", [True, False])
def test_gradients_through_cond_match_finite_differences(taken):
    """Both branches read the same weights; only the taken one's ops contribute, and the
    other branch's block gives zeros (conditional_block_grad, select_output)."""
    x = np.random.default_rng(1).standard_normal((3, 4))

    def build():
        xv = layers.data("x", [4], dtype="float64")
        flag = layers.data("flag", [1], dtype="bool", append_batch_size=False)
        h = layers.fc(xv, 3, act="tanh", param_attr="w", bias_attr="b")
        out = layers.cond(flag, lambda: layers.square(h),
                          lambda: layers.scale(layers.fc(h, 3, param_attr="v",
                                                         bias_attr=False), 2.0))
        return layers.mean(out)

    got = program_grads_and_numeric(build, {"x": x, "flag": np.array([taken])}, ["w", "b", "v"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8, err_msg=name)
    assert (np.abs(got["v"][0]).sum() == 0) == taken  # v only lives in the false branch


def test_gradients_through_a_switch():
    """Switch: the first case that holds runs; the parameters of the others get zeros."""
    x = np.random.default_rng(2).standard_normal((2, 3))

    def build():
        xv = layers.data("x", [3], dtype="float64")
        k = layers.data("k", [1], dtype="int64", append_batch_size=False)
        out = layers.create_tensor("float64")  # (a fill_constant's output stops gradients)
        with layers.Switch() as switch:
            with switch.case(layers.less_than(k, layers.fill_constant([1], "int64", 1))):
                layers.assign(layers.fc(xv, 2, param_attr="a", bias_attr=False), out)
            with switch.default():
                layers.assign(layers.tanh(layers.fc(xv, 2, param_attr="c", bias_attr=False)),
                              out)
        return layers.mean(layers.square(out))

    for k, live, dead in ((0, "a", "c"), (5, "c", "a")):
        got = program_grads_and_numeric(build, {"x": x, "k": np.array([k])}, ["a", "c"])
        np.testing.assert_allclose(got[live][0], got[live][1], rtol=1e-5, atol=1e-8)
        assert np.abs(got[live][0]).sum() > 0 and np.abs(got[dead][0]).sum() == 0


def test_gradients_of_what_a_block_reads_and_overwrites():
    """A variable the block reads and then overwrites: when the block does not run it keeps
    its value, so its gradient passes through (as for Fluid 1.8's list grown in a branch, a
    tensor array the block writes in place: tests/dygraph/test_dygraph_to_static.py); when
    it runs, the gradient of its old value is the one through the ops that read it."""
    x = np.random.default_rng(3).standard_normal((2, 3))

    def build():
        xv = layers.data("x", [3], dtype="float64")
        k = layers.data("k", [1], dtype="int64", append_batch_size=False)
        h = layers.fc(xv, 2, param_attr="w", bias_attr=False)
        with layers.Switch() as switch:
            with switch.case(layers.less_than(k, layers.fill_constant([1], "int64", 1))):
                layers.assign(layers.tanh(h) * 3.0, h)
        return layers.mean(layers.square(h))

    # not run: the gradient passes through; run: only through tanh (the old value's), not
    # summed with the new value's (both used to be wrong: zeroed, and summed)
    for k in (5, 0):
        got = program_grads_and_numeric(build, {"x": x, "k": np.array([k])}, ["w"])
        np.testing.assert_allclose(got["w"][0], got["w"][1], rtol=1e-5, atol=1e-8)
        assert np.abs(got["w"][0]).sum() > 0


def test_a_block_that_reads_what_it_overwrote():
    """The branch overwrites h, then reads its new value: that value's gradient is the one
    from after the block plus the reader's (the reader's used to be taken for the old
    value's, and the one from after the block dropped)."""
    x = np.random.default_rng(4).standard_normal((2, 3))

    def build():
        xv = layers.data("x", [3], dtype="float64")
        k = layers.data("k", [1], dtype="int64", append_batch_size=False)
        h = layers.fc(xv, 2, param_attr="w", bias_attr=False)
        g = layers.fc(xv, 2, param_attr="v", bias_attr=False)
        with layers.Switch() as switch:
            with switch.case(layers.less_than(k, layers.fill_constant([1], "int64", 1))):
                layers.assign(layers.tanh(h) * 3.0, h)
                layers.assign(layers.elementwise_add(h, g) * 2.0, g)
        return layers.mean(layers.square(h)) + layers.mean(g)

    for k in (5, 0):
        got = program_grads_and_numeric(build, {"x": x, "k": np.array([k])}, ["w", "v"])
        for name, (analytic, numeric) in got.items():
            np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8, err_msg=name)


def test_a_python_bool_for_a_condition_says_what_to_use():
    # a Variable's == builds an equal op, as Fluid 1.8's math_op_patch; a Python bool (here
    # `2 == 0` of two numbers) for a condition gets an error that says what to use
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        two = layers.fill_constant([1], "int32", 2)
        with pytest.raises(TypeError, match=r"got bool .*layers\.equal"):
            layers.case([(2 == 0, lambda: two)])  # noqa: PLR0133
        with pytest.raises(TypeError, match=r"got bool .*layers\.equal"):
            layers.cond(2 == 0, lambda: two, lambda: two)  # noqa: PLR0133
        with pytest.raises(TypeError, match="name must be a str"):
            layers.cond(layers.equal(two, two), lambda: two, lambda: two, name=set())
        assert two.grad_name == two.name + "@GRAD"  # Fluid 1.8's Variable.grad_name


def test_an_op_reading_an_outer_variable_twice_gets_one_gradient():
    """cond's block lists each outer variable it reads once (Fluid's complete() takes a set),
    as StaticRNN's step does: listed twice, a*a in a branch got d/da = 4a, and w*w in a step
    4w x; the same ops outside give 2a and 2w x."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[1], dtype="float32")
        x.stop_gradient = False
        a = layers.scale(x, 2.0)
        pred = layers.fill_constant(shape=[1], dtype="bool", value=True)
        out = layers.cond(pred, lambda: layers.elementwise_mul(a, a), lambda: a)
        fluid.backward.append_backward(layers.mean(out))
    da, dx = fluid.Executor().run(main, feed={"x": np.array([3.0], np.float32)},
                                  fetch_list=[a.name + "@GRAD", x.name + "@GRAD"],
                                  scope=fluid.Scope())
    assert (float(da[0]), float(dx[0])) == (12.0, 24.0)

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xs = layers.data("xs", shape=[3, 1, 2], dtype="float64", append_batch_size=False)
        w = layers.create_parameter([1, 2], "float64", name="w",
                                    default_initializer=fluid.initializer.Constant(1.5))
        rnn = layers.StaticRNN()
        with rnn.step():
            xt = rnn.step_input(xs)
            rnn.step_output(layers.elementwise_mul(xt, layers.elementwise_mul(w, w)))
        fluid.backward.append_backward(layers.mean(rnn()))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    values = np.arange(6, dtype="float64").reshape(3, 1, 2)
    (dw,) = exe.run(main, feed={"xs": values}, fetch_list=["w@GRAD"], scope=scope)
    np.testing.assert_allclose(dw.ravel(), (2 * 1.5 * values).sum(axis=(0, 1)) / 6)


def _cond_param_grads(true_fn, false_fn, outside, steps=2):
    """x@GRAD and z@GRAD after each of ``steps`` runs of mean(outside(x, z) + cond(...)), the
    true branch taken; no optimizer, so every run should give the same gradients."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        def param(name, value):
            return layers.create_parameter([2], "float32", name=name,
                                           default_initializer=fluid.initializer.Constant(value))
        x, z = param("x", 1.0), param("z", 3.0)
        c = layers.fill_constant([1], "float32", 3.0)
        out = layers.cond(layers.greater_than(c, layers.fill_constant([1], "float32", 1.0)),
                          lambda: true_fn(x, z), lambda: false_fn(x, z))
        fluid.backward.append_backward(layers.mean(layers.sum([outside(x, z), out])))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return [[float(v[0]) for v in exe.run(main, fetch_list=["x@GRAD", "z@GRAD"], scope=scope)]
            for _ in range(steps)]


def test_cond_gradients_of_the_taken_branch_are_its_own_every_step():
    """The branch's grad block runs in a scope of its own (Fluid: the block's scope): an
    input it gives no gradient gets zero, not the value an earlier step left under its
    gradient's name; and its partial sums do not overwrite the enclosing block's."""
    # x only feeds a dead op in the taken branch: its gradient is the outside one's, 1/2
    got = _cond_param_grads(lambda x, z: (layers.elementwise_mul(x, z), z + 1.0)[1],
                            lambda x, z: z + 2.0, lambda x, z: x + z)
    assert got == [[0.5, 1.0], [0.5, 1.0]]
    # z twice in the branch (its grad block sums two partials), minus z outside: (2 - 1) / 2
    got = _cond_param_grads(lambda x, z: layers.elementwise_add(layers.elementwise_add(z, x), z),
                            lambda x, z: layers.elementwise_add(x, z),
                            lambda x, z: layers.elementwise_sub(x, z))
    assert got == [[1.0, 0.5], [1.0, 0.5]]


def test_minimize_inside_a_branch_is_refused_not_run_every_step():
    """Fluid 1.8 runs a branch's minimize only when the branch runs (a grad block of the
    branch); here its ops would join the global block and run every step: refused."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [4], dtype="float32")
        loss = layers.mean(layers.fc(x, 1, bias_attr=False))
        flag = layers.data("flag", [1], dtype="bool", append_batch_size=False)

        def branch(lr):
            def fn():
                fluid.optimizer.SGD(learning_rate=lr).minimize(loss)
                return loss
            return fn

        with pytest.raises(NotImplementedError, match="inside a control-flow block"):
            layers.case([(flag, branch(0.1))], branch(100.0))


@pytest.mark.parametrize("lod_level", [0, 1])
def test_ifelse_parts_rows_or_sequences(lod_level):
    """Fluid 1.8's IfElse: each row (or sequence) through the branch its condition picks,
    merged back in order; both branches run on their parts."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2], lod_level=lod_level)
        pick = layers.data("pick", [1], dtype="bool", append_batch_size=False)
        ie = layers.IfElse(pick)
        with ie.true_block():
            part = ie.input(x)
            ie.output(layers.scale(part, 10.0), part)
        with ie.false_block():
            part = ie.input(x)
            ie.output(layers.scale(part, -1.0), layers.scale(part, 0.0))
        scaled, kept = ie()
    ops = [op.type for op in main.global_block().ops]
    assert ops.count("split_lod_tensor") == 1 and ops.count("merge_lod_tensor") == 2
    x_val = np.arange(10, dtype=np.float32).reshape(5, 2)
    if lod_level:
        seqs, mask = [[0, 2], [2, 3], [3, 5]], np.array([True, False, True])
        feed_x = fluid.create_lod_tensor(x_val, [[2, 1, 2]], fluid.CPUPlace())
    else:
        seqs = [[i, i + 1] for i in range(5)]
        mask = np.array([True, False, False, True, True])
        feed_x = x_val
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    got_scaled, got_kept = exe.run(main, feed={"x": feed_x, "pick": mask[:, None]},
                                   fetch_list=[scaled, kept], scope=scope,
                                   return_numpy=not lod_level)
    want_scaled = np.concatenate([x_val[a:b] * (10 if m else -1)
                                  for (a, b), m in zip(seqs, mask, strict=True)])
    want_kept = np.concatenate([x_val[a:b] * (1 if m else 0)
                                for (a, b), m in zip(seqs, mask, strict=True)])
    np.testing.assert_array_equal(np.array(got_scaled), want_scaled)
    np.testing.assert_array_equal(np.array(got_kept), want_kept)
    if lod_level:
        assert got_scaled.lod() == [[0, 2, 3, 5]]


def test_ifelse_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [2])
        pick = layers.data("pick", [1], dtype="bool")
        ie = layers.IfElse(pick)
        with pytest.raises(ValueError, match="input must in true/false blocks"):
            ie.input(x)
        with pytest.raises(ValueError, match="Must invoke true_block/false_block"):
            ie()
        with ie.true_block():
            ie.output(ie.input(x), ie.input(x))
        with ie.false_block():
            ie.output(ie.input(x))
        with pytest.raises(ValueError, match="The output side must be same"):
            ie()
        with pytest.raises(TypeError, match="cond must be a Variable"):
            layers.IfElse(True)


def test_gradients_through_ifelse():
    """Each row through its branch's fc; the weights' gradients from the rows that took it
    (split_lod_tensor/merge_lod_tensor and both conditional blocks differentiated)."""
    x = np.random.default_rng(3).standard_normal((5, 3))
    mask = np.array([[True], [False], [True], [True], [False]])

    def build():
        xv = layers.data("x", [3], dtype="float64")
        pick = layers.data("pick", [1], dtype="bool")
        ie = layers.IfElse(pick)
        with ie.true_block():
            ie.output(layers.fc(ie.input(xv), 2, act="tanh", param_attr="t", bias_attr=False))
        with ie.false_block():
            ie.output(layers.fc(ie.input(xv), 2, param_attr="f", bias_attr=False))
        merged, = ie()
        return layers.mean(layers.square(merged))

    got = program_grads_and_numeric(build, {"x": x, "pick": mask}, ["t", "f"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8, err_msg=name)
        assert np.abs(analytic).sum() > 0
