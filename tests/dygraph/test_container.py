"""``fluid.dygraph``'s containers as Fluid 1.8 has them: ``Sequential``, ``LayerList`` and
``ParameterList`` register their items (``parameters()``, ``state_dict()`` keys such as
``0.weight`` / ``fc.weight``, ``train()`` / ``eval()``), index and change like Fluid's, and a
Sequential MLP trains with SGD."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.dygraph import Layer, guard, to_variable
from dask_fluid.dygraph.container import LayerList, ParameterList, Sequential
from dask_fluid.dygraph.nn import BatchNorm, Dropout, Linear

CPU = fluid.CPUPlace()


def _x(*shape):
    return to_variable(np.random.default_rng(0).standard_normal(shape).astype(np.float32))


# -- Sequential ----------------------------------------------------------------------------------
def test_sequential_registers_positional_layers_and_chains_them():
    with guard(CPU):
        first, second = Linear(4, 3, act="relu"), Linear(3, 2)
        model = Sequential(first, second)
        assert len(model) == 2 and model[0] is first and model[1] is second
        assert model[-1] is second
        assert list(model.state_dict()) == ["0.weight", "0.bias", "1.weight", "1.bias"]
        assert model.state_dict()["1.weight"] is second.weight
        assert [p.name for p in model.parameters()] == [
            "linear_0.w_0", "linear_0.b_0", "linear_1.w_0", "linear_1.b_0"]
        x = _x(5, 4)
        np.testing.assert_array_equal(model(x).numpy(), second(first(x)).numpy())
        assert [layer for layer in model] == [first, second]


def test_sequential_with_names():
    with guard(CPU):
        fc, out = Linear(4, 3), Linear(3, 1)
        model = Sequential(("fc", fc), ("out", out))
        assert model["fc"] is fc and model.fc is fc and model["out"] is out
        assert model[1] is out  # a position also finds a named layer
        assert list(model.state_dict()) == ["fc.weight", "fc.bias", "out.weight", "out.bias"]
        with pytest.raises(KeyError, match="has no sub-layer 'head'"):
            model["head"]
        with pytest.raises(TypeError, match="give layers, or \\(name, layer\\) pairs"):
            Sequential(("a", fc), out)


def test_sequential_set_and_delete_items():
    with guard(CPU):
        model = Sequential(Linear(4, 4), Linear(4, 2))
        replacement = Linear(4, 4, bias_attr=False)
        model[0] = replacement
        assert model[0] is replacement and len(model) == 2
        assert list(model.state_dict()) == ["0.weight", "1.weight", "1.bias"]
        model["extra"] = Linear(2, 1)
        assert len(model) == 3 and model(_x(3, 4)).shape == [3, 1]
        del model["extra"]
        del model[0]
        assert len(model) == 1 and list(model.state_dict()) == ["1.weight", "1.bias"]
        with pytest.raises(TypeError, match="expected a Layer"):
            model[0] = "relu"
        with pytest.raises(TypeError, match="expected a Layer"):
            Sequential(Linear(2, 2), lambda x: x)
        with pytest.raises(IndexError, match="index 5 is out of range for 1 items"):
            model[5]


def test_sequential_nested_state_dict_and_modes():
    class Net(Layer):
        def __init__(self):
            super().__init__()
            self.body = Sequential(Linear(4, 4), BatchNorm(4), Dropout(0.5))
            self.head = Linear(4, 1)

        def forward(self, x):
            return self.head(self.body(x))

    with guard(CPU):
        net = Net()
        assert list(net.state_dict()) == [
            "body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias", "body.1._mean",
            "body.1._variance", "head.weight", "head.bias"]
        assert len(net.parameters()) == 8
        net.eval()
        assert not any(layer.training for layer in net.body)
        net.train()
        assert all(layer.training for layer in net.body)


# -- LayerList ---------------------------------------------------------------------------------
def test_layer_list_append_extend_insert_index_iterate():
    with guard(CPU):
        a, b, c, d = Linear(2, 2), Linear(2, 2), Linear(2, 2), Linear(2, 2)
        layers_ = LayerList([a, b])
        assert len(layers_) == 2 and layers_[0] is a and layers_[-1] is b
        assert layers_.append(c) is layers_ and layers_[2] is c
        layers_.extend([d])
        assert list(layers_) == [a, b, c, d]
        e = Linear(2, 2)
        layers_.insert(1, e)
        assert list(layers_) == [a, e, b, c, d]
        assert list(layers_._sub_layers) == ["0", "1", "2", "3", "4"]
        assert layers_.state_dict()["1.weight"] is e.weight
        part = layers_[1:3]
        assert isinstance(part, LayerList) and list(part) == [e, b]
        f = Linear(2, 2)
        layers_[0] = f
        assert layers_[0] is f and layers_.state_dict()["0.weight"] is f.weight
        del layers_[1]
        assert list(layers_) == [f, b, c, d] and list(layers_._sub_layers) == ["0", "1", "2",
                                                                               "3"]
        del layers_[1:3]
        assert list(layers_) == [f, d]
        with pytest.raises(IndexError, match="index 2 is out of range for 2 items"):
            layers_[2]
        with pytest.raises(TypeError, match="expected a Layer"):
            layers_.append(3)


def test_layer_list_parameters_reach_the_owner_and_train():
    class Stack(Layer):
        def __init__(self):
            super().__init__()
            self.blocks = LayerList([Linear(3, 3, act="tanh") for _ in range(3)])

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return x

    with guard(CPU):
        net = Stack()
        assert len(net.parameters()) == 6
        assert list(net.state_dict())[:2] == ["blocks.0.weight", "blocks.0.bias"]
        x = _x(4, 3)
        layers.reduce_sum(net(x)).backward()
        assert all(p.gradient() is not None for p in net.parameters())


# -- ParameterList -----------------------------------------------------------------------------
def test_parameter_list():
    class Weights(Layer):
        def __init__(self, n):
            super().__init__()
            self.params = ParameterList(
                [self.create_parameter([2, 2], dtype="float32") for _ in range(n)])

        def forward(self, x):
            for w in self.params:
                x = layers.matmul(x, w)
            return x

    with guard(CPU):
        net = Weights(2)
        assert len(net.params) == 2 and len(net.parameters()) == 2
        extra = net.create_parameter([2, 2], dtype="float32")
        assert net.params.append(extra) is net.params
        assert len(net.params) == 3 and net.params[2] is extra and net.params[-1] is extra
        assert list(net.state_dict()) == ["params.0", "params.1", "params.2"]
        assert [p.name for p in net.params] == [p.name for p in net.parameters()]
        x = _x(1, 2)
        out = net(x)
        want = x.numpy() @ net.params[0].numpy() @ net.params[1].numpy() @ extra.numpy()
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5)
        layers.reduce_sum(out).backward()
        assert all(p.gradient() is not None for p in net.params)
        replacement = net.create_parameter([2, 2], dtype="float32")
        net.params[0] = replacement
        assert net.params[0] is replacement and net.state_dict()["params.0"] is replacement
        with pytest.raises(TypeError, match="expected a Parameter"):
            net.params.append(np.zeros((2, 2)))
        with pytest.raises(IndexError):
            net.params[3]


# -- training -------------------------------------------------------------------------------------
def _train_mlp(seed: int) -> list[float]:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.5).astype(np.float32)
    with guard(CPU):
        fluid.default_main_program().random_seed = seed
        model = Sequential(Linear(4, 16, act="relu"), Linear(16, 1))
        opt = fluid.optimizer.SGD(learning_rate=0.02, parameter_list=model.parameters())
        losses = []
        for _ in range(30):
            pred = model(to_variable(x))
            loss = layers.reduce_mean(layers.square(pred - to_variable(y)))
            loss.backward()
            opt.minimize(loss)
            model.clear_gradients()
            losses.append(float(loss))
    return losses


def test_sequential_mlp_trains_with_sgd():
    losses = _train_mlp(seed=90)
    assert losses[-1] < 0.3 * losses[0]
    assert (np.diff(losses) < 0).sum() >= 25  # mostly downhill
    assert _train_mlp(seed=90) == losses  # the seed fixes the start, so the whole run
