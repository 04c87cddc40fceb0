"""``@declarative``, ``ProgramTranslator`` and ``jit.save``/``jit.load`` in dygraph mode.

The reference of every check is the same layer run as written (``ProgramTranslator().enable
(False)``: Python control flow on the values, one traced op at a time): training through the
translated program must give the same losses and parameters, bit for bit on these small nets.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.dygraph import (
    BatchNorm,
    Dropout,
    Linear,
    ProgramTranslator,
    declarative,
    to_variable,
)

L = fluid.layers


@pytest.fixture(autouse=True)
def _translator():
    ProgramTranslator.reset()
    yield
    ProgramTranslator.reset()
    fluid.dygraph.set_code_level(0)
    fluid.dygraph.set_verbosity(0)


class Net(fluid.dygraph.Layer):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.fc1 = Linear(4, 8, act="relu")
        self.bn = BatchNorm(8)
        self.drop = Dropout(dropout)
        self.fc2 = Linear(8, 3)

    @declarative
    def forward(self, x, label=None):
        h = self.drop(self.bn(self.fc1(x)))
        if L.reduce_mean(h) > 0.0:
            h = h * 2.0
        else:
            h = h - 1.0
        i = L.fill_constant([1], "int64", 0)
        while i < 2:
            h = L.tanh(h)
            i = i + 1
        logits = self.fc2(h)
        if label is None:
            return logits
        loss = L.reduce_mean(L.softmax_with_cross_entropy(logits, label))
        return loss, logits


def _init(net):
    rs = np.random.RandomState(3)
    for p in net.parameters():
        if p.trainable:
            p.set_value(rs.uniform(-0.5, 0.5, p.shape).astype(p.dtype))


def _batches(n, rows=5):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((rows, 4)).astype("float32"),
             rng.integers(0, 3, (rows, 1)).astype("int64")) for _ in range(n)]


def _train(translated, steps=4):
    ProgramTranslator().enable(translated)
    with fluid.dygraph.guard():
        net = Net()
        _init(net)
        opt = fluid.optimizer.Momentum(0.1, 0.9, parameter_list=net.parameters())
        losses = []
        for x, y in _batches(steps):
            loss, _ = net(to_variable(x), to_variable(y))
            loss.backward()
            opt.minimize(loss)
            net.clear_gradients()
            losses.append(float(loss.numpy()[0]))
        net.eval()
        evaluated = net(to_variable(_batches(1)[0][0])).numpy()
        return losses, {p.name: p.numpy() for p in net.parameters()}, evaluated


def test_training_through_the_translated_program_equals_training_as_written():
    losses, params, evaluated = _train(True)
    ref_losses, ref_params, ref_evaluated = _train(False)
    assert losses == ref_losses
    for name, value in params.items():  # batch norm's running statistics included
        np.testing.assert_array_equal(value, ref_params[name], err_msg=name)
    np.testing.assert_array_equal(evaluated, ref_evaluated)


def test_the_program_holds_the_control_flow_and_is_built_once_per_signature():
    with fluid.dygraph.guard():
        net = Net()
        x, y = _batches(1)[0]
        net(to_variable(x), to_variable(y))
        net(to_variable(x * 2), to_variable(y))
        cache = ProgramTranslator().get_program_cache()
        assert len(cache) == 1
        program = net.forward.concrete_program.main_program
        types = {op.type for block in program.blocks for op in block.ops}
        assert {"conditional_block", "while", "select_input"} <= types
        net(to_variable(np.ones((7, 4), "float32")))  # another batch size, no label
        assert len(cache) == 2
        net.eval()
        net(to_variable(x), to_variable(y))  # eval mode: a program of its own
        assert len(cache) == 3


def test_each_call_returns_its_own_variables():
    with fluid.dygraph.guard():
        net = Net()
        x, _ = _batches(1)[0]
        a = net(to_variable(x))
        b = net(to_variable(x + 1.0))
        assert a is not b
        assert not np.array_equal(a.numpy(), b.numpy())


def test_dropout_is_on_in_train_mode_and_off_in_eval_mode():
    with fluid.dygraph.guard():
        net = Net(dropout=0.5)
        x, _ = _batches(1, rows=50)[0]
        net.eval()
        first, second = net(to_variable(x)).numpy(), net(to_variable(x)).numpy()
        np.testing.assert_array_equal(first, second)
        ProgramTranslator().enable(False)
        np.testing.assert_allclose(net(to_variable(x)).numpy(), first, rtol=1e-6)
        ProgramTranslator().enable(True)
        net.train()
        assert not np.array_equal(net(to_variable(x)).numpy(), net(to_variable(x)).numpy())


@declarative
def clipped_sum(x, limit):
    total = L.reduce_sum(x)
    while total > limit:
        total = total * 0.5
    return total


def test_a_declarative_function_and_the_translator_api():
    translator = ProgramTranslator()
    assert translator is ProgramTranslator() is ProgramTranslator.get_instance()
    with pytest.raises(TypeError, match="bool"):
        translator.enable(1)
    with fluid.dygraph.guard():
        x = to_variable(np.full([4], 3.0, "float32"))
        limit = to_variable(np.array([2.0], "float32"))
        assert clipped_sum(x, limit).numpy()[0] == pytest.approx(1.5)
        out = translator.get_output(clipped_sum.dygraph_function, x, limit)
        assert out.numpy()[0] == pytest.approx(1.5)
        main, startup, inputs, outputs = translator.get_program(clipped_sum, x, limit)
        assert [v.name for v in inputs] == ["x", "limit"] and len(outputs) == 1
        assert any(op.type == "while" for op in main.global_block().ops)
    assert "convert_while_loop" in translator.get_code(clipped_sum)
    # outside dygraph mode the translated function builds its ops into the current program
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xs = fluid.data("xs", [4], "float32")
        lim = fluid.data("lim", [1], "float32")
        total = clipped_sum(xs, lim)
    got, = fluid.Executor().run(main, feed={"xs": np.full([4], 3.0, "float32"),
                                            "lim": np.array([5.0], "float32")},
                                fetch_list=[total])
    assert got[0] == pytest.approx(3.0)


def test_dygraph_to_static_func_builds_control_flow_in_static_programs():
    def pick(x):
        if L.reduce_mean(x) > 0:
            return x
        return -x

    func = fluid.dygraph.dygraph_to_static_func(pick)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = fluid.data("x", [3], "float32")
        y = func(x)
    assert any(op.type == "conditional_block" for op in main.global_block().ops)
    got, = fluid.Executor().run(main, feed={"x": -np.ones(3, "float32")}, fetch_list=[y])
    np.testing.assert_array_equal(got, np.ones(3, "float32"))


def test_save_load_predicts_the_same_and_fine_tunes(tmp_path):
    path = str(tmp_path / "model")
    x, y = _batches(1)[0]
    with fluid.dygraph.guard():
        net = Net()
        _init(net)
        net.eval()
        expected = net(to_variable(x)).numpy()
        fluid.dygraph.jit.save(net, path)
        assert sorted(os.listdir(path)) == ["__model__", "__variables.info__", "__variables__"]
        loaded = fluid.dygraph.jit.load(path)
        loaded.eval()
        np.testing.assert_array_equal(loaded(x).numpy(), expected)
        # another batch size than the example's: the model's ops take any
        np.testing.assert_allclose(loaded(np.concatenate([x, x])).numpy()[5:], expected,
                                   rtol=1e-6)
        # fine-tuning the loaded layer moves its parameters, not the original's
        loaded.train()
        before = [p.numpy().copy() for p in loaded.parameters() if p.trainable]
        opt = fluid.optimizer.SGD(0.5, parameter_list=loaded.parameters())
        loss = L.reduce_mean(L.softmax_with_cross_entropy(loaded(x), to_variable(y)))
        loss.backward()
        opt.minimize(loss)
        after = [p.numpy() for p in loaded.parameters() if p.trainable]
        assert all(not np.array_equal(a, b) for a, b in zip(after, before, strict=True))
        np.testing.assert_array_equal(net(to_variable(x)).numpy(), expected)
    # fluid.io reads it as an inference model
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(
            path, exe, params_filename="__variables__")
        got, = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)
    np.testing.assert_array_equal(got, expected)


def test_save_with_configs_and_input_spec(tmp_path):
    x, y = _batches(1)[0]
    with fluid.dygraph.guard():
        net = Net()
        loss, logits = net(to_variable(x), to_variable(y))
        configs = fluid.dygraph.jit.SaveLoadConfig()
        configs.output_spec = [logits]
        configs.model_filename = "net.model"
        configs.separate_params = True
        fluid.dygraph.jit.save(net, str(tmp_path), configs=configs)
        assert "net.model" in os.listdir(tmp_path) and "__variables__" not in os.listdir(tmp_path)
        loaded = fluid.dygraph.jit.load(str(tmp_path), configs=configs)
        # the label is not an input of the logits: the saved model takes x only
        np.testing.assert_allclose(loaded(x).numpy(), logits.numpy(), rtol=1e-6)
        with pytest.raises(ValueError, match="does not exist among the outputs"):
            configs.output_spec = [to_variable(x)]
            fluid.dygraph.jit.save(net, str(tmp_path / "other"), configs=configs)
        with pytest.raises(TypeError, match="output_spec"):
            configs.output_spec = [x]
        fresh = Net()
        fluid.dygraph.jit.save(fresh, str(tmp_path / "spec"), input_spec=[x])
        assert fluid.dygraph.jit.load(str(tmp_path / "spec"))(x).shape == [5, 3]


def test_clear_errors():
    class Plain(fluid.dygraph.Layer):
        def __init__(self):
            super().__init__()
            self.fc = Linear(4, 2)

        def forward(self, x):
            return self.fc(x)

    class MakesParams(fluid.dygraph.Layer):
        @declarative
        def forward(self, x):
            return L.fc(x, 2)

    with fluid.dygraph.guard():
        with pytest.raises(TypeError, match="should be a StaticLayer"):
            fluid.dygraph.jit.save(Plain(), "/tmp/never")
        with pytest.raises(RuntimeError, match="has not run as a program yet"):
            fluid.dygraph.jit.save(Net(), "/tmp/never")
        with pytest.raises(TypeError, match="creates parameters"):
            MakesParams()(to_variable(np.ones((2, 4), "float32")))
        with pytest.raises(ValueError, match="holds no saved model"):
            fluid.dygraph.jit.load("/nonexistent/model")
    with pytest.raises(RuntimeError, match="dygraph mode"):
        fluid.dygraph.jit.load("/nonexistent/model")
    with pytest.raises(TypeError):
        fluid.dygraph.set_code_level("high")


def test_set_code_level_prints_the_translated_code(capsys):
    def shown(x):
        if L.reduce_mean(x) > 0:
            x = x + 1.0
        return x

    fluid.dygraph.set_code_level(100)
    with fluid.dygraph.guard():
        declarative(shown)(to_variable(np.ones(2, "float32")))
    out = capsys.readouterr().out
    assert "convert_ifelse" in out and "def shown" in out


def test_translation_off_runs_the_function_as_written():
    ProgramTranslator().enable(False)
    with fluid.dygraph.guard():
        net = Net()
        net(to_variable(_batches(1)[0][0]))
    assert len(ProgramTranslator().get_program_cache()) == 0


class Recurrent(fluid.dygraph.Layer):
    """A cell unrolled over the steps of the input (a Python loop on its shape) and a loop on
    the values (shrink until small: a program loop, differentiated through while_grad)."""

    def __init__(self):
        super().__init__()
        self.cell = Linear(6, 3, act="tanh")
        self.out = Linear(3, 2)

    @declarative
    def forward(self, x):
        h = L.fill_constant_batch_size_like(x, [-1, 3], "float32", 0.0)
        for t in range(x.shape[1]):
            h = self.cell(L.concat([x[:, t, :], h], axis=1))
        steps = L.fill_constant([1], "int64", 0)
        while L.reduce_sum(L.abs(h)) > 1.0 and steps < 10:
            h = h * 0.7
            steps = steps + 1
        return L.reduce_mean(self.out(h)), steps


def _recurrent_step(translated):
    ProgramTranslator().enable(translated)
    x = np.random.default_rng(4).standard_normal((4, 5, 3)).astype("float32")
    with fluid.dygraph.guard():
        net = Recurrent()
        _init(net)
        loss, steps = net(to_variable(x))
        loss.backward()
        return float(loss.numpy()[0]), int(steps.numpy()[0]), {
            p.name: p.gradient() for p in net.parameters()}


def test_gradients_through_unrolled_steps_and_a_value_loop_equal_the_eager_ones():
    loss, steps, grads = _recurrent_step(True)
    ref_loss, ref_steps, ref_grads = _recurrent_step(False)
    assert steps == ref_steps > 0
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, ref_grads[name], rtol=1e-5, atol=1e-7, err_msg=name)


class Decoder(fluid.dygraph.Layer):
    """Steps until the state is small (a loop on the values), collecting every state in a
    Python list: a tensor array in the program, stacked and read by the output layer."""

    def __init__(self):
        super().__init__()
        self.cell = Linear(3, 3, act="tanh")
        self.out = Linear(3, 2)

    @declarative
    def forward(self, h):
        states = []
        steps = L.fill_constant([1], "int64", 0)
        while L.reduce_sum(L.abs(h)) > 0.5 and steps < 6:
            h = self.cell(h) * 0.8
            states.append(h)
            steps = steps + 1
        return L.reduce_mean(self.out(L.stack(states, axis=1))), len(states)


def _decoder_step(translated):
    ProgramTranslator().enable(translated)
    h = np.random.default_rng(5).standard_normal((4, 3)).astype("float32")
    with fluid.dygraph.guard():
        net = Decoder()
        _init(net)
        loss, n = net(to_variable(h))
        loss.backward()
        n = int(n.numpy()[0]) if hasattr(n, "numpy") else n
        return float(loss.numpy()[0]), n, {p.name: p.gradient() for p in net.parameters()}


def test_gradients_through_a_list_grown_in_a_value_loop_equal_the_eager_ones():
    loss, n, grads = _decoder_step(True)
    ref_loss, ref_n, ref_grads = _decoder_step(False)
    assert n == ref_n > 1
    assert loss == pytest.approx(ref_loss, rel=1e-6)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, ref_grads[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_the_translator_saves_the_last_program_as_an_inference_model(tmp_path, caplog):
    fluid.dygraph.set_verbosity(1)
    with fluid.dygraph.guard():
        with pytest.raises(RuntimeError, match="no @declarative function has run yet"):
            ProgramTranslator().save_inference_model(str(tmp_path / "none"))
        net = Net()
        x, y = _batches(1)[0]
        with caplog.at_level("INFO", logger="dask_fluid.dygraph.dygraph_to_static"):
            loss, logits = net(to_variable(x), to_variable(y))
        ProgramTranslator().save_inference_model(str(tmp_path / "m"), feed=[0], fetch=[1])
        with pytest.raises(ValueError, match="indices of the program's 2 inputs"):
            ProgramTranslator().save_inference_model(str(tmp_path / "bad"), fetch=[5])
        net.eval()
        evaluated = net(to_variable(x)).numpy()
    assert any("built the program" in r.message for r in caplog.records)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        program, feeds, fetches = fluid.io.load_inference_model(str(tmp_path / "m"), exe)
        got, = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches)
    assert feeds == ["x"]
    # the saved program is the test one: batch norm on the statistics the step updated
    np.testing.assert_allclose(got, evaluated, rtol=1e-5, atol=1e-6)


class ConvPool(fluid.dygraph.Layer):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = fluid.dygraph.Conv2D(c_in, c_out, 3, padding=1, act="relu")
        self.pool = fluid.dygraph.Pool2D(2, "max", 2)

    def forward(self, x):
        return self.pool(self.conv(x))


class MNIST(fluid.dygraph.Layer):
    """The shape of Paddle 1.8's dygraph_to_static MNIST test model: conv-pool blocks, an fc,
    and a forward that also gives the accuracy and the loss when a label is passed."""

    def __init__(self):
        super().__init__()
        self.blocks = fluid.dygraph.LayerList([ConvPool(1, 4), ConvPool(4, 8)])
        self.fc = Linear(8 * 2 * 2, 10, act="softmax")

    @declarative
    def forward(self, x, label=None):
        for block in self.blocks:
            x = block(x)
        x = self.fc(L.reshape(x, [-1, 8 * 2 * 2]))
        if label is not None:
            acc = L.accuracy(input=x, label=label)
            loss = L.cross_entropy(x, label)
            return x, acc, L.mean(loss)
        return x


def _mnist_steps(translated, steps=3):
    ProgramTranslator().enable(translated)
    rng = np.random.default_rng(7)
    with fluid.dygraph.guard():
        net = MNIST()
        _init(net)
        opt = fluid.optimizer.Adam(0.01, parameter_list=net.parameters())
        out = []
        for _ in range(steps):
            x = rng.standard_normal((6, 1, 8, 8)).astype("float32")
            y = rng.integers(0, 10, (6, 1)).astype("int64")
            _, acc, loss = net(to_variable(x), to_variable(y))
            loss.backward()
            opt.minimize(loss)
            net.clear_gradients()
            out.append((float(loss.numpy()[0]), float(acc.numpy()[0])))
        return out, {p.name: p.numpy() for p in net.parameters()}


def test_a_conv_model_with_a_python_loop_over_its_blocks_trains_as_written():
    got, params = _mnist_steps(True)
    ref, ref_params = _mnist_steps(False)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    for name, value in params.items():
        np.testing.assert_allclose(value, ref_params[name], rtol=1e-5, atol=1e-6, err_msg=name)


class _Base(fluid.dygraph.Layer):
    def __init__(self):
        super().__init__()
        self.fc = Linear(3, 3)

    def forward(self, x):
        if L.reduce_mean(x) > 0:
            return self.fc(x)
        return x


class _Child(_Base):
    @declarative
    def forward(self, x):
        def inner(v):  # a nested function with its own early return
            if L.reduce_sum(v) > 4.0:
                return v * 0.5
            return v + 1.0

        with fluid.dygraph.no_grad():
            c = x * 2.0
        return super().forward(inner(x)) + c


@pytest.mark.parametrize("scale", [1.0, 0.1, -1.0])
def test_super_nested_functions_and_context_managers(scale):
    x = np.full((2, 3), scale, "float32")
    results = []
    for translated in (True, False):
        ProgramTranslator().enable(translated)
        with fluid.dygraph.guard():
            net = _Child()
            _init(net)
            results.append(net(to_variable(x)).numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)


def test_a_layer_with_a_declarative_forward_is_freed_with_its_programs():
    import gc
    import weakref

    with fluid.dygraph.guard():
        bound_before = len(Net.forward._bound)
        net = Net()
        out = net(to_variable(_batches(1)[0][0]))
        assert len(Net.forward._bound) == bound_before + 1
        ref = weakref.ref(net)
        del net, out
        gc.collect()
        assert ref() is None
        assert len(Net.forward._bound) == bound_before
