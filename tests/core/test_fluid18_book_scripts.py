"""What the scripts of Fluid 1.8's book (python/paddle/fluid/tests/book/) rely on, each as
Fluid 1.8's source has it: ``fluid.layers.device`` importable, ``layers.data`` shapes with a
None or negative dim, ``ParamAttr`` from a bool or a regularizer, ``save_inference_model`` of a
training program without targets, outputs sharing only their ``X``'s LoD, every fetch a
LoDTensor with ``return_numpy=False``, and ``append_backward`` over listed non-parameters."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.lod import LoDTensor


@pytest.fixture
def programs():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        yield main, startup


def test_layers_device_imports_and_get_places_says_what_to_use():
    from dask_fluid.layers import device

    assert device.__all__ == []
    with pytest.raises(NotImplementedError, match="with_data_parallel"):
        device.get_places()


def test_data_with_a_none_or_negative_dim_is_the_full_shape(programs):
    assert fluid.layers.data("a", [3]).shape == (-1, 3)
    assert fluid.layers.data("b", [-1, 3]).shape == (-1, 3)
    assert fluid.layers.data("c", [None, 3]).shape == (-1, 3)
    assert fluid.layers.data("d", [2, -1, 5]).shape == (2, -1, 5)
    with pytest.raises(TypeError, match="shape must be a list or tuple"):
        fluid.layers.data("e", 3)
    with pytest.raises(TypeError, match="name must be a str, got int"):  # Fluid's check_type
        fluid.layers.data(1, [2])


@pytest.mark.parametrize("bias_attr, biased", [(True, True), (None, True), (False, False)])
def test_a_bool_bias_attr_turns_the_bias_on_or_off(programs, bias_attr, biased):
    main, _ = programs
    img = fluid.layers.data("img", [3, 8, 8])
    x = fluid.layers.data("x", [4])
    fluid.layers.conv2d(img, num_filters=4, filter_size=3, bias_attr=bias_attr)
    fluid.layers.fc(x, size=2, bias_attr=bias_attr)
    biases = [p for p in main.global_block().all_parameters() if ".b_" in p.name]
    assert len(biases) == (2 if biased else 0)


def test_a_regularizer_as_param_attr_decays_that_parameter(programs):
    main, _ = programs
    x = fluid.layers.data("x", [4])
    decay = fluid.regularizer.L2Decay(1e-4)
    fluid.layers.fc(x, size=2, param_attr=decay)
    (w,) = [p for p in main.global_block().all_parameters() if ".w_" in p.name]
    assert w.regularizer is decay
    attrs = fluid.ParamAttr._to_attr([True, "named", decay])
    assert [type(a) for a in attrs] == [fluid.ParamAttr] * 3
    assert attrs[1].name == "named" and attrs[2].regularizer is decay
    with pytest.raises(TypeError, match="cannot use int as a ParamAttr"):
        fluid.ParamAttr._to_attr(3)
    with pytest.raises(TypeError, match="takes one ParamAttr, got list"):
        fluid.layers.fc(x, size=2, bias_attr=[None, None])


def test_save_inference_model_of_a_training_program_needs_no_target(programs, tmp_path):
    main, startup = programs
    x = fluid.layers.data("x", [13])
    fluid.layers.fc(x, size=1)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    with fluid.scope_guard(scope):
        assert fluid.io.save_inference_model(str(tmp_path), [], [], exe, main,
                                             export_for_deployment=False) == []
        with pytest.raises(ValueError, match="'target_vars' should be a list of Variable"):
            fluid.io.save_inference_model(str(tmp_path / "deploy"), ["x"], [], exe, main)
    assert sorted(os.listdir(tmp_path)) == ["__model__.main_program", "fc_0.b_0", "fc_0.w_0"]
    with open(tmp_path / "__model__.main_program") as f:
        assert json.load(f)["fetch"] == []


def _lod_of(t: LoDTensor) -> list:
    assert isinstance(t, LoDTensor)
    return t.recursive_sequence_lengths()


def test_outputs_share_the_lod_of_x_only(programs):
    # Fluid: ShareLoD("X", "Out") from the first input; sum_op.cc: "the output only shares
    # the LoD information with the first input"
    main, startup = programs
    a = fluid.layers.data("a", [4])
    b = fluid.layers.data("b", [4], lod_level=2)
    later = [fluid.layers.sums([a, b]), fluid.layers.elementwise_add(a, b),
             fluid.layers.fc([a, b], size=3), fluid.layers.concat([a, b])]
    first = [fluid.layers.sums([b, a]), fluid.layers.elementwise_add(b, a),
             fluid.layers.fc([b, a], size=3), fluid.layers.concat([b, a])]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    bv = fluid.create_lod_tensor(np.ones((2, 4), "float32"), [[1, 1], [1, 1]], fluid.CPUPlace())
    outs = exe.run(main, feed={"a": np.ones((2, 4), "float32"), "b": bv},
                   fetch_list=later + first, scope=scope, return_numpy=False)
    assert [_lod_of(t) for t in outs[:4]] == [[]] * 4
    assert [_lod_of(t) for t in outs[4:]] == [[[1, 1], [1, 1]]] * 4
    np.testing.assert_array_equal(np.array(outs[0]), np.full((2, 4), 2.0))


def test_every_fetch_is_a_lod_tensor_without_return_numpy(programs):
    main, startup = programs
    x = fluid.layers.data("x", [3])
    y = fluid.layers.scale(x, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    (t,) = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y], scope=scope,
                   return_numpy=False)
    assert t.lod() == [] and t.recursive_sequence_lengths() == [] and t.shape() == [2, 3]
    np.testing.assert_array_equal(np.array(t), np.full((2, 3), 2.0))
    (n,) = exe.run(main, feed={"x": np.ones((2, 3), "float32")}, fetch_list=[y], scope=scope)
    assert isinstance(n, np.ndarray)


def test_append_backward_gives_the_listed_variables_gradients(programs):
    main, startup = programs
    inp = fluid.layers.data("inp", [3], append_batch_size=False)
    inp.stop_gradient = False
    h = fluid.layers.relu(inp)
    out = fluid.layers.fc(h, size=2, param_attr=fluid.ParamAttr(name="w"),
                          bias_attr=fluid.ParamAttr(name="frozen", trainable=False))
    loss = fluid.layers.reduce_sum(fluid.layers.elementwise_mul(h, h)) + \
        fluid.layers.reduce_sum(out)
    # in the list's order; a frozen parameter stops the gradient, so it has none (as in Fluid)
    pairs = fluid.backward.append_backward(loss, parameter_list=[h.name, "frozen", "w"])
    assert [(p.name, g.name) for p, g in pairs] == [(h.name, h.name + "@GRAD"), ("w", "w@GRAD")]
    with pytest.raises(ValueError, match=r"\['nope'\].*not variables"):
        fluid.backward.append_backward(loss, parameter_list=["nope"])
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    v = np.array([1.0, -2.0, 3.0], "float32")
    (g,) = exe.run(main, feed={"inp": v}, fetch_list=[pairs[0][1]], scope=scope)
    w = np.array(scope.get("w"))
    np.testing.assert_allclose(g, 2 * np.maximum(v, 0) + w.sum(1), rtol=1e-6)


def test_minimize_updates_only_the_listed_trainable_parameters(programs):
    main, startup = programs
    x = fluid.layers.data("x", [3])
    y = fluid.layers.fc(x, size=1, param_attr=fluid.ParamAttr(name="frozen", trainable=False),
                        bias_attr=fluid.ParamAttr(name="bias"))
    loss = fluid.layers.mean(y)
    # a listed layer output gets a gradient from append_backward but is no parameter
    _, pairs = fluid.optimizer.SGD(0.5).minimize(loss,
                                                 parameter_list=["frozen", "bias", y.name])
    assert [p.name for p, _ in pairs] == ["bias"]
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    before = np.array(scope.get("frozen"))
    exe.run(main, feed={"x": np.ones((4, 3), "float32")}, scope=scope)
    np.testing.assert_array_equal(np.array(scope.get("frozen")), before)
    np.testing.assert_allclose(np.array(scope.get("bias")), [-0.5])


def test_wrapped_decorator_keeps_the_signature():
    import inspect

    from dask_fluid.wrapped_decorator import signature_safe_contextmanager, wrap_decorator

    events = []

    @signature_safe_contextmanager
    def guard(tag: str, level: int = 1):
        """Guard docs."""
        events.append(("enter", tag, level))
        yield tag * level
        events.append(("exit", tag))

    with guard("ab", level=2) as got:
        assert got == "abab"
    assert events == [("enter", "ab", 2), ("exit", "ab")]
    assert guard.__name__ == "guard" and guard.__doc__ == "Guard docs."
    assert list(inspect.signature(guard).parameters) == ["tag", "level"]
    doubled = wrap_decorator(lambda f: lambda *a: 2 * f(*a))(lambda x: x + 1)
    assert doubled(3) == 8


def test_as_numpy_reads_what_return_numpy_false_fetched(programs):
    from dask_fluid.executor import as_numpy

    main, startup = programs
    x = fluid.layers.data("x", [3])
    seq = fluid.layers.data("seq", [1], lod_level=1)
    y = fluid.layers.scale(x, 2.0)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    s = fluid.create_lod_tensor(np.ones((3, 1), "float32"), [[1, 2]], fluid.CPUPlace())
    got = exe.run(main, feed={"x": np.ones((2, 3), "float32"), "seq": s}, fetch_list=[y, seq],
                  scope=scope, return_numpy=False)
    (arr,) = as_numpy(got[:1])
    np.testing.assert_array_equal(arr, np.full((2, 3), 2.0))
    with pytest.raises(RuntimeError, match="hold LoD information"):
        as_numpy(got[1])
    with pytest.raises(TypeError, match="fetched LoDTensors"):
        as_numpy("x")
