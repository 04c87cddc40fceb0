"""``fluid.device_guard`` (Fluid 1.8): the ``op_device`` attr of the ops built inside, its
errors, and an executor on ``CUDAPlace(0)`` running the ``"cpu"`` ops on the host with numpy
while the others stay on the device. Each value check runs on the real CuPy with a GPU and on
the strict CPU CuPy everywhere (``device_xp``), and compares with the same network on
``CPUPlace``."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.framework import OP_DEVICE_KEY, device_guard
from dask_fluid.ops import registry

STEPS = 3


def _program(build: Callable[[], tuple]) -> tuple:
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        out = build()
    return main, startup, out


def _devices(program: fluid.Program) -> dict[str, str | None]:
    return {op.type: op.attrs.get(OP_DEVICE_KEY) for op in program.global_block().ops}


# -- program structure --------------------------------------------------------------------------
def test_ops_built_inside_get_op_device_and_outside_none():
    def build():
        x = fluid.layers.data("x", shape=[4])
        a = fluid.layers.relu(x)
        with device_guard("cpu"):
            b = fluid.layers.scale(a, 2.0)
        with device_guard("gpu"):
            c = fluid.layers.sigmoid(b)
        return (fluid.layers.tanh(c),)

    main, _, _ = _program(build)
    assert _devices(main) == {"relu": None, "scale": "cpu", "sigmoid": "gpu", "tanh": None}


def test_guards_nest_and_restore_and_keep_the_index():
    def build():
        x = fluid.layers.data("x", shape=[4])
        with device_guard("cpu"):
            a = fluid.layers.relu(x)
            with device_guard("gpu:1"):
                b = fluid.layers.sigmoid(a)
                with device_guard(None):
                    c = fluid.layers.tanh(b)
                with device_guard(""):
                    d = fluid.layers.exp(c)
            e = fluid.layers.scale(d, 2.0)
        return (fluid.layers.abs(e),)

    main, _, _ = _program(build)
    assert _devices(main) == {"relu": "cpu", "sigmoid": "gpu:1", "tanh": None, "exp": "",
                              "scale": "cpu", "abs": None}


def test_guard_restores_after_an_error():
    with pytest.raises(RuntimeError), device_guard("cpu"):
        raise RuntimeError("inside")
    main, _, _ = _program(lambda: (fluid.layers.relu(fluid.layers.data("x", shape=[2])),))
    assert _devices(main) == {"relu": None}


@pytest.mark.parametrize("device, message", [
    ("cpu:0", "Should not set device id for cpu."),
    ("cpu1", "The Attr(device) should be 'cpu' or 'gpu'"),
    ("xpu", "But received xpu"),
    ("gpu:a", "must be a non-negative integer"),
    ("tpu:0", "But received tpu"),
])
def test_bad_devices_raise_value_error(device, message):
    with pytest.raises(ValueError) as info, device_guard(device):
        pass
    assert message in str(info.value)


def test_host_ops_warn_and_get_no_op_device():
    def build():
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 3)
        cond = fluid.layers.less_than(i, n)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with device_guard("cpu"):
                loop = fluid.layers.While(cond)
                with loop.block():
                    fluid.layers.increment(i, 1, in_place=True)
                    fluid.layers.less_than(i, n, cond=cond)
        return i, caught

    main, startup, (i, caught) = _program(build)
    assert [str(w.message) for w in caught] == ["The Op(while) is not support to set device."]
    ops = {op.type: op for op in main.global_block().ops}
    assert OP_DEVICE_KEY not in ops["while"].attrs
    assert {op.attrs.get(OP_DEVICE_KEY) for op in main.block(1).ops} == {"cpu"}
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=fluid.Scope())
    assert exe.run(main, fetch_list=[i], scope=fluid.Scope())[0].tolist() == [3]


def test_clone_keeps_the_devices_and_grad_ops_follow_the_forward_op():
    def build():
        x = fluid.layers.data("x", shape=[4])
        with device_guard("cpu"):
            h = fluid.layers.fc(x, 3)
        loss = fluid.layers.mean(h)
        fluid.optimizer.SGD(0.1).minimize(loss)
        return (loss,)

    main, _, _ = _program(build)
    clone = main.clone()
    for program in (main, clone):
        devices = _devices(program)
        assert devices["mul"] == devices["elementwise_add"] == "cpu"
        assert devices["mean"] is None
        assert devices["mul_grad"] == "cpu"  # backward copies the forward op's attrs


def test_gpu_index_is_ignored_with_fluid_warning_on_cpu():
    def build():
        x = fluid.layers.data("x", shape=[2])
        with device_guard("gpu:3"):
            y = fluid.layers.scale(x, 3.0)
        return (y,)

    main, startup, (y,) = _program(build)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.warns(UserWarning, match="Device index is only supported under pipeline"):
        out = exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=[y],
                      scope=fluid.Scope())
    np.testing.assert_allclose(out[0], 3.0)


# -- values on CUDAPlace ------------------------------------------------------------------------
def _on_both(build: Callable[[], tuple], feeds: list[dict]) -> dict:
    got = {}
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        main, startup, fetches = _program(build)
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        got[type(place).__name__] = [
            [np.array(v) for v in exe.run(main, feed=feed, fetch_list=list(fetches),
                                          scope=scope, return_numpy=False)]
            for feed in feeds]
    return got


def _assert_same(got: dict, rtol: float = 1e-5) -> None:
    for cpu, gpu in zip(got["CPUPlace"], got["CUDAPlace"], strict=True):
        for c, g in zip(cpu, gpu, strict=True):
            np.testing.assert_allclose(g, c, rtol=rtol, atol=1e-6)


def _dense_with_cpu_layers():
    x = fluid.layers.data("x", shape=[5])
    y = fluid.layers.data("y", shape=[1], dtype="int64")
    h = fluid.layers.fc(x, 8, act="relu")
    with device_guard("cpu"):  # gradients flow through these ops and their parameters
        h = fluid.layers.fc(h, 6, act="tanh")
        h = fluid.layers.dropout(h, 0.2)
    with device_guard("gpu"):
        pred = fluid.layers.fc(h, 3, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, y))
    fluid.optimizer.Adam(0.05).minimize(loss)
    return loss, pred


def _dense_batches() -> list[dict]:
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal((6, 5)).astype(np.float32),
             "y": rng.integers(0, 3, (6, 1))} for _ in range(STEPS)]


def test_training_through_cpu_ops_on_cuda_place_equals_cpu_place(device_xp):
    got = _on_both(_dense_with_cpu_layers, _dense_batches())
    _assert_same(got, rtol=1e-4)
    losses = [run[0].item() for run in got["CUDAPlace"]]
    assert losses[0] != losses[-1]  # it trained


def test_cpu_ops_see_numpy_and_the_others_the_device(device_xp, monkeypatch):
    seen: dict[str, list[str]] = {}

    def spy(op_type: str) -> None:
        opdef = registry.get(op_type)
        kernel = opdef.resolve()

        def run(ins, attrs, outs, *rest):
            seen.setdefault(op_type, []).extend(
                type(a).__module__.split(".")[0] for arrays in ins.values() for a in arrays
                if a is not None)
            return kernel(ins, attrs, outs, *rest)
        monkeypatch.setattr(opdef, "kernel", run)

    for op_type in ("scale", "sigmoid", "elementwise_add"):
        spy(op_type)

    def build():
        x = fluid.layers.data("x", shape=[3])
        a = fluid.layers.sigmoid(x)  # device
        with device_guard("cpu"):
            b = fluid.layers.scale(a, 2.0)  # host: reads a device array
            c = fluid.layers.scale(b, 0.5, bias=1.0)
        d = fluid.layers.elementwise_add(c, a)  # device: reads the host output, moved back
        return b, d

    main, startup, (b, d) = _program(build)
    exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    got_b, got_d = exe.run(main, feed={"x": feed}, fetch_list=[b, d], scope=scope)
    a = 1 / (1 + np.exp(-feed))
    np.testing.assert_allclose(got_b, 2 * a, rtol=1e-6)
    np.testing.assert_allclose(got_d, a + 1 + a, rtol=1e-6)
    device = device_xp.__name__.split(".")[0]
    assert set(seen["scale"]) == {"numpy"}
    assert set(seen["sigmoid"]) == set(seen["elementwise_add"]) == {device}
    # b is read by no GPU op: it stays on the host; c was moved to the device when d read it
    assert isinstance(scope.vars[b.name], np.ndarray)
    c_name = main.global_block().ops[2].output("Out")[0]
    assert type(scope.vars[c_name]).__module__.split(".")[0] == device
    assert type(scope.vars[d.name]).__module__.split(".")[0] == device


def test_nothing_is_moved_without_cpu_ops(device_xp):
    main, _, _ = _program(lambda: (fluid.layers.relu(fluid.layers.data("x", shape=[2])),))
    exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
    exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, scope=scope)
    steps = next(iter(exe._cache.values())).steps
    assert [(s.on_host, s.to_device) for s in steps] == [(False, ())]


def _sequence_with_cpu_lod_op():
    w = fluid.layers.data("w", shape=[1], dtype="int64", lod_level=1)
    y = fluid.layers.data("y", shape=[1], dtype="int64")
    emb = fluid.layers.embedding(w, size=[20, 8])
    h = fluid.layers.fc(emb, 8, act="tanh")
    with device_guard("cpu"):
        pooled = fluid.layers.sequence_pool(h, "sum")
    pred = fluid.layers.fc(pooled, 2, act="softmax")
    loss = fluid.layers.mean(fluid.layers.cross_entropy(pred, y))
    fluid.optimizer.SGD(0.1).minimize(loss)
    return loss, pooled


def test_lod_op_on_cpu_inside_a_cuda_place_network(device_xp):
    words = np.array([[1], [2], [3], [4], [5], [9]], np.int64)
    got = {}
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        main, startup, fetches = _program(_sequence_with_cpu_lod_op)
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        got[type(place).__name__] = [
            [np.array(v) for v in exe.run(
                main, feed={"w": fluid.create_lod_tensor(words, [[2, 3, 1]], place),
                            "y": np.array([[0], [1], [1]])},
                fetch_list=list(fetches), scope=scope, return_numpy=False)]
            for _ in range(STEPS)]
    _assert_same(got, rtol=1e-4)


def test_a_cpu_op_writing_a_persistable_leaves_it_usable_next_run(device_xp):
    def build():
        x = fluid.layers.data("x", shape=[2])
        counter = fluid.layers.create_global_var([1], 0.0, "float32", persistable=True,
                                                 name="counter")
        with device_guard("cpu"):
            fluid.layers.increment(counter, 1.0, in_place=True)
        return (fluid.layers.elementwise_mul(x, counter),)

    main, startup, (out,) = _program(build)
    exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
    exe.run(startup, scope=scope)
    for step in range(1, 4):
        got = exe.run(main, feed={"x": np.ones((1, 2), np.float32)}, fetch_list=[out],
                      scope=scope)
        np.testing.assert_allclose(got[0], step)


def test_cpu_ops_inside_a_while_loop_on_cuda_place(device_xp):
    def build():
        i = fluid.layers.fill_constant([1], "int64", 0)
        n = fluid.layers.fill_constant([1], "int64", 4)
        acc = fluid.layers.fill_constant([2], "float32", 1.0)
        cond = fluid.layers.less_than(i, n)
        loop = fluid.layers.While(cond)
        with loop.block():
            with device_guard("cpu"):
                doubled = fluid.layers.scale(acc, 2.0)  # host, read on the device below
            fluid.layers.assign(fluid.layers.elementwise_add(doubled, acc), acc)
            fluid.layers.increment(i, 1, in_place=True)
            fluid.layers.less_than(i, n, cond=cond)
        return (acc,)

    got = {}
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        main, startup, (acc,) = _program(build)
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        got[type(place).__name__] = exe.run(main, fetch_list=[acc], scope=scope)[0]
    np.testing.assert_allclose(got["CUDAPlace"], got["CPUPlace"])
    np.testing.assert_allclose(got["CUDAPlace"], [81.0, 81.0])


def test_grad_ops_take_their_forward_ops_device_and_clones_keep_their_ops_as_built():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [3])
        x.stop_gradient = False
        with fluid.device_guard("cpu"):
            h = fluid.layers.tanh(x)
        fluid.append_backward(fluid.layers.mean(h))
    devices = {op.type: op.attrs.get("op_device") for op in main.global_block().ops}
    assert devices["tanh"] == devices["tanh_grad"] == "cpu"  # Fluid 1.8's _append_backward_ops_
    assert devices["mean"] is None and devices["mean_grad"] is None
    with fluid.device_guard("gpu"), fluid.name_scope("outer"):
        clone = main.clone()
    assert [(op.type, op.attrs.get("op_device"), op.attrs.get("op_namescope"))
            for op in clone.global_block().ops] == [
        (op.type, op.attrs.get("op_device"), None) for op in main.global_block().ops]
