"""``fluid.dygraph.StaticModelRunner``: an inference model fluid.io saved, run and fine-tuned in
dygraph mode. References: the static executor on the same model, and the static program's
own gradients and SGD step."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import dygraph
from dask_fluid.dygraph.static_runner import StaticModelRunner


def _build(dropout: bool = True, seed: int = 3):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", shape=[6])
        h = fluid.layers.fc(x, 8, act="relu")
        h = fluid.layers.batch_norm(h)
        if dropout:
            h = fluid.layers.dropout(h, 0.3)
        out = fluid.layers.fc(h, 3)
    return main, startup, x, out


def _save(path, dropout: bool = True):
    main, startup, x, out = _build(dropout)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.save_inference_model(path, ["x"], [out], exe, main)
    return path, {p.name: np.array(scope.get(p.name)) for p in main.all_parameters()}


@pytest.fixture
def saved(tmp_path):
    return _save(str(tmp_path / "m"))


def test_runs_the_saved_model_as_the_executor_does(saved):
    path, _ = saved
    xv = np.random.default_rng(0).standard_normal((5, 6)).astype("float32")
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(path, exe)
        expected = exe.run(program, feed={feeds[0]: xv}, fetch_list=fetches)[0]
    with dygraph.guard(fluid.CPUPlace()):
        runner = StaticModelRunner(path)
        runner.eval()
        got = runner(dygraph.to_variable(xv))
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-6)
        # batch norm's running statistics are parameters too (not trainable), as in Fluid
        assert sorted((p.name, p.trainable) for p in runner.parameters()) == [
            ("batch_norm_0.b_0", True), ("batch_norm_0.w_0", True), ("batch_norm_0.w_1", False),
            ("batch_norm_0.w_2", False), ("fc_0.b_0", True), ("fc_0.w_0", True),
            ("fc_1.b_0", True), ("fc_1.w_0", True)]
        with pytest.raises(ValueError, match="takes 1 inputs"):
            runner(dygraph.to_variable(xv), dygraph.to_variable(xv))


def test_fine_tunes_the_loaded_parameters(tmp_path):
    path, values = _save(str(tmp_path / "m"), dropout=False)
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((5, 6)).astype("float32")
    yv = rng.integers(0, 3, (5, 1)).astype("int64")
    with dygraph.guard(fluid.CPUPlace()):
        runner = StaticModelRunner(path)  # training mode: batch norm on the batch
        opt = fluid.optimizer.SGD(0.1, parameter_list=runner.parameters())
        logits = runner(dygraph.to_variable(xv))
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            logits, dygraph.to_variable(yv)))
        loss.backward()
        grads = {p.name: p.gradient() for p in runner.parameters() if p.trainable}
        opt.minimize(loss)
        tuned = {p.name: p.numpy() for p in runner.parameters()}
    # the training program from the same values: its gradients, its SGD step, its statistics
    main, startup, x, out = _build(dropout=False)
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        y = fluid.layers.data("y", shape=[1], dtype="int64")
        st_loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(out, y))
        params_grads = fluid.backward.append_backward(st_loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for name, value in values.items():
        scope.set(name, value.copy())
    fetched = exe.run(main, feed={"x": xv, "y": yv},
                      fetch_list=[g for _, g in params_grads], scope=scope)
    assert sorted(p.name for p, _ in params_grads) == sorted(grads)
    for (param, _), g in zip(params_grads, fetched, strict=True):
        np.testing.assert_allclose(grads[param.name], g, rtol=1e-5, atol=1e-7,
                                   err_msg=param.name)
        np.testing.assert_allclose(tuned[param.name], values[param.name] - 0.1 * g,
                                   rtol=1e-5, atol=1e-7, err_msg=param.name)
    for stat in ("batch_norm_0.w_1", "batch_norm_0.w_2"):  # running mean and variance
        np.testing.assert_allclose(tuned[stat], np.array(scope.get(stat)), rtol=1e-5)


def test_training_mode_sets_is_test_and_needs_the_guard(saved):
    path, _ = saved
    with pytest.raises(RuntimeError, match="dygraph mode only"):
        StaticModelRunner(path)
    xv = np.random.default_rng(2).standard_normal((4, 6)).astype("float32")
    with dygraph.guard(fluid.CPUPlace()):
        fluid.default_main_program().random_seed = 4
        runner = StaticModelRunner(path)
        runner.train()
        a, b = runner(dygraph.to_variable(xv)).numpy(), runner(dygraph.to_variable(xv)).numpy()
        # the saved dropout has its program's random_seed as its fixed seed (Fluid 1.8): the
        # same mask each call
        np.testing.assert_array_equal(a, b)
        runner.eval()
        c, d = runner(dygraph.to_variable(xv)).numpy(), runner(dygraph.to_variable(xv)).numpy()
        np.testing.assert_array_equal(c, d)
        assert not np.allclose(a, c)  # training: dropout, and batch norm uses the batch
