"""Fluid 1.8's Bilinear initializer, init_on_cpu / force_init_on_cpu, and error clipping
(``ErrorClipByValue`` with ``append_backward(callbacks=[error_clip_callback])``)."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import initializer, layers
from dask_fluid.clip import ErrorClipByValue, error_clip_callback


def _programs():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    return main, startup


# -- Bilinear ------------------------------------------------------------------------------------

def _bilinear_param(shape, dtype="float32"):
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        w = layers.create_parameter(shape, dtype, attr=fluid.ParamAttr(
            name="w", initializer=initializer.Bilinear()))
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    return startup, np.array(scope.vars[w.name])


@pytest.mark.parametrize("k, row", [(4, [0.25, 0.75, 0.75, 0.25]), (3, [0.25, 0.75, 0.75]),
                                    (2, [1.0, 0.0]),  # f = 1, c = 0
                                    (5, [1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3])])  # factor 3
def test_bilinear_values_are_fluids_kernel(k, row):
    # f = ceil(K / 2), c = (2f - 1 - f % 2) / 2f, w = (1 - |x/f - c|)(1 - |y/f - c|)
    startup, w = _bilinear_param([2, 1, k, k])
    op, = startup.global_block().ops
    assert op.type == "assign_value" and op.attrs["shape"] == [2, 1, k, k]
    assert w.dtype == np.float32
    expect = np.outer(row, row).astype(np.float32)
    for ch in range(2):
        np.testing.assert_allclose(w[ch, 0], expect, rtol=1e-6)


def test_bilinear_upsamples_with_conv2d_transpose():
    # Fluid's recipe for factor 2: filter 2f - f % 2, stride f, padding ceil((f - 1) / 2)
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data("x", [1, 2, 3, 4], "float32")
        up = layers.conv2d_transpose(x, num_filters=2, filter_size=4, padding=1, stride=2,
                                     groups=2, bias_attr=False, param_attr=fluid.ParamAttr(
                                         initializer=initializer.Bilinear()))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    ramp = np.broadcast_to(np.arange(4, dtype=np.float32), (1, 2, 3, 4)).copy()
    ramp[:, 1] *= 3.0
    out, = exe.run(main, feed={"x": ramp}, fetch_list=[up], scope=scope)
    assert out.shape == (1, 2, 6, 8)
    # half-pixel bilinear interpolation inside the border: output o samples (o + 0.5) / 2 - 0.5
    pos = (np.arange(1, 7) + 0.5) / 2 - 0.5
    np.testing.assert_allclose(out[0, 0, 1:-1, 1:-1], np.broadcast_to(pos, (4, 6)), rtol=1e-6)
    np.testing.assert_allclose(out[0, 1, 1:-1, 1:-1], 3 * np.broadcast_to(pos, (4, 6)),
                               rtol=1e-6)


def test_float16_bilinear_and_numpy_array_inits_go_through_float32_and_a_cast():
    # Fluid 1.8: assign_value carries float32 values into a temporary, a cast appended after
    # it makes the float16 parameter
    startup, w = _bilinear_param([2, 1, 4, 4], "float16")
    assert [op.type for op in startup.global_block().ops] == ["assign_value", "cast"]
    cast = startup.global_block().ops[1]
    assert cast.outputs["Out"] == ["w"] and cast.inputs["X"][0].startswith("bilinear_init.w.tmp")
    assert w.dtype == np.float16
    np.testing.assert_array_equal(w, _bilinear_param([2, 1, 4, 4])[1].astype(np.float16))
    main, startup = _programs()
    value = np.arange(6, dtype=np.float64).reshape(2, 3) / 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        v = layers.create_parameter([2, 3], "float16", attr=fluid.ParamAttr(
            name="v", initializer=initializer.NumpyArrayInitializer(value)))
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    assert [op.type for op in startup.global_block().ops] == ["assign_value", "cast"]
    assert startup.global_block().ops[0].attrs["dtype"] == "float32"
    got = np.array(scope.vars[v.name])
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, value.astype(np.float32).astype(np.float16))


@pytest.mark.parametrize("shape, dtype, match", [
    ([2, 3, 3], "float32", "4 dims"), ([1, 1, 3, 4], "float32", "square"),
    ([1, 1, 3, 3], "float64", "float32"), ([1024, 2, 32, 32], "float32", "1024 \\* 1024")])
def test_bilinear_refuses_what_fluid_refuses(shape, dtype, match):
    with pytest.raises(ValueError, match=match):
        _bilinear_param(shape, dtype)


# -- init_on_cpu ---------------------------------------------------------------------------------

def _fill_attrs(startup):
    return {op.outputs["Out"][0]: op.attrs["force_cpu"] for op in startup.global_block().ops
            if op.type == "fill_constant"}


def test_init_on_cpu_sets_force_cpu_of_constant_initializers():
    main, startup = _programs()
    assert initializer.force_init_on_cpu() is False
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        a = layers.create_global_var([1], 0.0, "float32", persistable=True, name="a")
        with initializer.init_on_cpu():
            assert initializer.force_init_on_cpu() is True
            with initializer.init_on_cpu():  # nested: still on, restored to on
                pass
            assert initializer.force_init_on_cpu() is True
            step = layers.create_global_var([1], 3.0, "int64", persistable=True, name="step")
            # a random initialiser has no force_cpu attr, in Fluid as here
            w = layers.create_parameter([2, 2], "float32", name="w")
        layers.create_global_var([1], 1.0, "float32", persistable=True, force_cpu=True,
                                     name="b")
    assert initializer.force_init_on_cpu() is False
    assert _fill_attrs(startup) == {"a": False, "step": True, "b": True}
    w_op, = [op for op in startup.global_block().ops if op.outputs["Out"] == [w.name]]
    assert "force_cpu" not in w_op.attrs
    # the attr is recorded only: the values are made where the executor runs
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    assert np.array(scope.vars[step.name]).tolist() == [3]
    assert np.array(scope.vars[a.name]).tolist() == [0.0]


def test_init_on_cpu_restores_the_flag_after_an_error():
    with pytest.raises(RuntimeError), initializer.init_on_cpu():
        raise RuntimeError("inside")
    assert initializer.force_init_on_cpu() is False


# -- error clip ----------------------------------------------------------------------------------

CLIP = 0.02


def _net(error_clip=None, callbacks=None):
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data("x", [4, 3], "float32")
        hidden = layers.fc(x, 5)
        if error_clip is not None:
            hidden.error_clip = error_clip
        loss = layers.mean(layers.square(layers.fc(hidden, 2)))
        pairs = fluid.append_backward(loss, callbacks=callbacks)
    return main, startup, hidden, pairs


def _run(main, startup, fetch, feed):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def test_error_clip_clips_the_gradient_after_its_grad_op():
    xv = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32) * 3
    plain_main, plain_start, h0, pairs0 = _net()
    main, startup, hidden, pairs = _net(ErrorClipByValue(CLIP), [error_clip_callback])
    ops = main.global_block().ops
    hgrad = hidden.name + "@GRAD"
    (i, clip_op), = [(i, op) for i, op in enumerate(ops) if op.type == "clip"]
    assert hgrad in ops[i - 1].output_arg_names  # right after the grad op writing it
    assert clip_op.inputs["X"] == clip_op.outputs["Out"] == [hgrad]
    assert (clip_op.attrs["min"], clip_op.attrs["max"]) == (-CLIP, CLIP)

    names = [hgrad] + [g.name for _, g in pairs0]
    plain, _ = _run(plain_main, plain_start, names, {"x": xv})
    clipped, _ = _run(main, startup, names, {"x": xv})
    assert np.abs(plain[0]).max() > CLIP  # the clip bites
    np.testing.assert_allclose(clipped[0], np.clip(plain[0], -CLIP, CLIP), rtol=1e-6)
    grads = dict(zip([p.name for p, _ in pairs0], plain[1:], strict=True))
    clipped_grads = dict(zip([p.name for p, _ in pairs], clipped[1:], strict=True))
    # the first fc's weight gradient reads the clipped gradient: xᵀ · clip(dhidden)
    np.testing.assert_allclose(clipped_grads["fc_0.w_0"], xv.T @ np.clip(plain[0], -CLIP, CLIP),
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(clipped_grads["fc_0.b_0"],
                               np.clip(plain[0], -CLIP, CLIP).sum(0), rtol=1e-5, atol=1e-7)
    # the ops before the clipped variable's grad op are untouched
    np.testing.assert_allclose(clipped_grads["fc_1.w_0"], grads["fc_1.w_0"], rtol=1e-6)


def test_training_with_error_clip_steps_along_the_clipped_gradient():
    xv = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32) * 3
    main, startup, hidden, _ = _net(ErrorClipByValue(CLIP, min=-CLIP / 2), [error_clip_callback])
    with fluid.program_guard(main, startup):
        pairs = [(p, g) for p, g in _net_pairs(main)]
        fluid.optimizer.SGD(learning_rate=0.5).apply_gradients(pairs)
    plain_main, plain_start, h0, _ = _net()
    (dh,), _ = _run(plain_main, plain_start, [h0.name + "@GRAD"], {"x": xv})
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    w0 = np.array(scope.vars["fc_0.w_0"])
    exe.run(main, feed={"x": xv}, scope=scope)
    np.testing.assert_allclose(np.array(scope.vars["fc_0.w_0"]),
                               w0 - 0.5 * xv.T @ np.clip(dh, -CLIP / 2, CLIP), rtol=1e-5,
                               atol=1e-6)


def _net_pairs(main):
    block = main.global_block()
    return [(p, block.var(p.name + "@GRAD")) for p in block.all_parameters()]


def test_without_error_clip_the_callback_changes_nothing():
    xv = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    plain_main, plain_start, _, pairs0 = _net()
    main, startup, _, pairs = _net(None, [error_clip_callback])
    assert [op.type for op in main.global_block().ops] == [
        op.type for op in plain_main.global_block().ops]
    a, _ = _run(plain_main, plain_start, [g.name for _, g in pairs0], {"x": xv})
    b, _ = _run(main, startup, [g.name for _, g in pairs], {"x": xv})
    for u, v in zip(a, b, strict=True):
        np.testing.assert_array_equal(u, v)


def test_callbacks_are_called_after_each_grad_op_with_fluids_context():
    seen = []

    def cb(block, context):
        seen.append((block.ops[-1].type, context["__current_op_desc__"] is block.ops[-1],
                     dict(context)))

    main, _, hidden, _ = _net(None, [cb])
    grad_ops = [op for op in main.global_block().ops if op.attrs.get("op_role") == 1]
    assert [t for t, _, _ in seen] == [op.type for op in grad_ops]
    assert all(same for _, same, _ in seen)
    assert seen[-1][2][hidden.name + "@GRAD"] == hidden.name


def test_bad_error_clips_and_callbacks_raise():
    with pytest.raises(TypeError, match="error_clip.*BaseErrorClipAttr"):
        _net(error_clip="0.1", callbacks=[error_clip_callback])
    with pytest.raises(TypeError, match="callbacks must be a list"):
        _net(callbacks=error_clip_callback)
    with pytest.raises(ValueError, match="must be a callable"):
        _net(callbacks=[1])
    with pytest.raises(ValueError, match="min <= max"):
        ErrorClipByValue(0.1, min=0.5)
    clip = ErrorClipByValue(2)
    assert (clip.min, clip.max) == (-2.0, 2.0)
    assert str(clip) == "ByValue, min=-2.000000, max=2.000000"


def test_minimize_applies_error_clips_as_fluid_does():
    """Optimizer.backward adds error_clip_callback itself (Fluid 1.8), also through a
    Variable's error_clip= argument."""
    xv = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32) * 3
    main, startup = _programs()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.data("x", [4, 3], "float32")
        hidden = layers.fc(x, 5)
        hidden.error_clip = ErrorClipByValue(CLIP)
        loss = layers.mean(layers.square(layers.fc(hidden, 2)))
        fluid.optimizer.SGD(learning_rate=0.5).minimize(loss)
    clips = [op for op in main.global_block().ops if op.type == "clip"]
    assert [op.inputs["X"] for op in clips] == [[hidden.name + "@GRAD"]]
    plain_main, plain_start, h0, _ = _net()
    (dh,), _ = _run(plain_main, plain_start, [h0.name + "@GRAD"], {"x": xv})
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    w0 = np.array(scope.vars["fc_0.w_0"])
    exe.run(main, feed={"x": xv}, scope=scope)
    np.testing.assert_allclose(np.array(scope.vars["fc_0.w_0"]),
                               w0 - 0.5 * xv.T @ np.clip(dh, -CLIP, CLIP), rtol=1e-5, atol=1e-6)
    block = main.global_block()
    var = block.create_var(name="v_with_clip", shape=[2], error_clip=ErrorClipByValue(1.0))
    assert var.error_clip.max == 1.0


def test_layers_fill_constant_inside_init_on_cpu_is_forced_on_cpu():
    main, startup = _programs()
    with fluid.program_guard(main, startup):
        with initializer.init_on_cpu():
            a = layers.fill_constant([2], "float32", 1.0)
        b = layers.fill_constant([2], "float32", 1.0)
    attrs = {op.output("Out")[0]: op.attrs["force_cpu"] for op in main.global_block().ops}
    assert attrs == {a.name: True, b.name: False}


@pytest.mark.parametrize("dygraph_mode", [False, True])
def test_global_norm_clip_of_a_sparse_gradient_equals_the_dense_one(dygraph_mode):
    # Fluid 1.8 merges a sparse gradient's rows into a dense tensor for the global norm and
    # scales the rows (elementwise_mul of a SelectedRows by the scale)
    ids = np.array([[1], [3], [1], [0]], "int64")
    table = np.arange(40, dtype="float32").reshape(5, 8) / 10.0

    def train(sparse):
        init = fluid.ParamAttr(name="emb", initializer=initializer.NumpyArrayInitializer(table))
        clip = fluid.clip.GradientClipByGlobalNorm(0.05)
        if dygraph_mode:
            with fluid.dygraph.guard(fluid.CPUPlace()):
                emb = fluid.dygraph.Embedding([5, 8], is_sparse=sparse, param_attr=init)
                opt = fluid.optimizer.SGD(1.0, parameter_list=emb.parameters(), grad_clip=clip)
                loss = layers.reduce_sum(emb(fluid.dygraph.to_variable(ids)) * 3.0)
                loss.backward()
                opt.minimize(loss)
                return emb.weight.numpy()
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = layers.data("ids", [1], dtype="int64")
            loss = layers.reduce_sum(layers.embedding(x, [5, 8], is_sparse=sparse,
                                                      param_attr=init) * 3.0)
            fluid.optimizer.SGD(1.0, grad_clip=clip).minimize(loss)
        exe, scope = fluid.Executor(), fluid.Scope()
        exe.run(startup, scope=scope)
        exe.run(main, feed={"ids": ids}, scope=scope)
        return np.array(scope.get("emb"))

    dense_grad = np.zeros((5, 8), "float32")
    np.add.at(dense_grad, ids[:, 0], 3.0)
    expected = table - dense_grad * 0.05 / np.linalg.norm(dense_grad)
    np.testing.assert_allclose(train(sparse=False), expected, rtol=1e-5)
    np.testing.assert_allclose(train(sparse=True), expected, rtol=1e-5)
