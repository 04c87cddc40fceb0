"""``layers.py_func`` (Fluid 1.8): a Python function as an op, forward and backward: its
values against numpy, training through it against the same net built from Fluid ops (a
``tanh`` with its gradient by hand), LoD in and out, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers


def _tanh(x):
    return np.tanh(np.array(x))


def _tanh_grad(y, dy):  # x skipped: the gradient needs only the output
    return np.array(dy) * (1 - np.square(np.array(y)))


def _net(use_py_func: bool):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [4])
        h = layers.fc(x, 6)
        if use_py_func:
            out = main.current_block().create_var(name="py_tanh", dtype="float32",
                                                  shape=h.shape)
            layers.py_func(_tanh, h, out, backward_func=_tanh_grad,
                           skip_vars_in_backward_input=h)
            h = out
        else:
            h = layers.tanh(h)
        loss = layers.mean(layers.fc(h, 1))
        fluid.optimizer.SGD(0.5).minimize(loss)
    return main, startup, loss


def test_training_through_py_func_equals_fluid_ops():
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    weights = []
    for use in (True, False):
        main, startup, loss = _net(use)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        losses = [float(exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope)[0][0])
                  for _ in range(3)]
        weights.append((losses, np.array(scope.vars["fc_0.w_0"])))
    np.testing.assert_allclose(weights[0][0], weights[1][0], rtol=1e-5)
    np.testing.assert_allclose(weights[0][1], weights[1][1], rtol=1e-5, atol=1e-6)
    ops = [op for op in _net(True)[0].global_block().ops if op.type == "py_func"]
    assert len(ops) == 2  # forward, and its gradient op
    assert ops[0].attr("backward_skip_vars") == ["fc_0.tmp_1"]
    assert ops[1].input("X") == ["py_tanh", "py_tanh@GRAD"]  # the skipped input left out


def test_several_outputs_and_lod():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        words = layers.data("words", [1], lod_level=1)
        block = main.current_block()
        doubled = block.create_var(name="doubled", dtype="float32", shape=[-1, 1])
        total = block.create_var(name="total", dtype="float32", shape=[1])

        def both(t):
            arr = np.array(t)
            out = fluid.LoDTensor()
            out.set(2 * arr, fluid.CPUPlace())
            out.set_lod(t.lod())
            return out, np.array([arr.sum()], np.float32)

        layers.py_func(both, words, [doubled, total])
        pooled = layers.sequence_pool(doubled, "sum")
    seq = fluid.create_lod_tensor(np.arange(5, dtype=np.float32).reshape(5, 1), [[2, 3]],
                                  fluid.CPUPlace())
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    got_pool, got_total = exe.run(main, feed={"words": seq}, fetch_list=[pooled, total])
    np.testing.assert_array_equal(got_pool, [[2], [18]])
    assert got_total.tolist() == [10.0]


def test_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = layers.data("x", [2])
        out = fluid.default_main_program().current_block().create_var(
            name="o", dtype="float32", shape=[-1, 2])
        shapeless = fluid.default_main_program().current_block().create_var(name="s")
        with pytest.raises(TypeError, match="func must be callable"):
            layers.py_func(3, x, out)
        with pytest.raises(ValueError, match="should be provided by users manually"):
            layers.py_func(_tanh, x, shapeless)
        other = layers.data("other", [2])
        with pytest.raises(ValueError, match="Variable other is not found in forward inputs"):
            layers.py_func(_tanh, x, out, backward_func=_tanh_grad,
                           skip_vars_in_backward_input=other)
        layers.py_func(lambda t: (np.array(t), np.array(t)), x, out)
    with pytest.raises(fluid.ExecutionError, match="returned 2 values for 1 outputs"):
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=["o"])
    # another process's program: the ids are this process's only
    main.global_block().ops[-1].attrs["forward_callable_id"] = 10**6
    with pytest.raises(fluid.ExecutionError, match="callable id 1000000 is not registered"):
        fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": np.ones((1, 2), np.float32)},
                                             fetch_list=["o"])
