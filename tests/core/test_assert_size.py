"""``layers.Assert`` (op ``assert``, Fluid 1.8's control_flow.Assert and assert_op.cc) and
``layers.size`` (op ``size``, int64 [1]), and the ``transpose`` op weight norm appends."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.executor import ExecutionError
from dask_fluid.ops import registry

L = fluid.layers


def _run(main, feed=None, fetch=()):
    exe = fluid.Executor(fluid.CPUPlace())
    return exe.run(main, feed=feed or {}, fetch_list=list(fetch), scope=fluid.Scope())


# -- Assert ------------------------------------------------------------------------------------

def test_assert_op_as_fluid_builds_it():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.fill_constant(shape=[2, 3], dtype="float32", value=2.0)
        cond = L.reduce_max(x) < 1.0
        op = L.Assert(cond, [x], 10, "example_assert_layer")
        op2 = L.Assert(cond)
    assert op.type == "assert" and op is main.global_block().ops[-2]
    assert op.input("Cond") == [cond.name] and op.input("Data") == [x.name]
    assert op.attrs["summarize"] == 10
    assert not any(op.outputs.values())  # no output: the op runs where it stands
    assert op2.input("Data") == [] and op2.attrs["summarize"] == 20
    assert registry.get("assert").grad is None  # Fluid's EmptyGradOpMaker


def test_assert_true_passes():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.fill_constant(shape=[2, 3], dtype="float32", value=2.0)
        L.Assert(L.reduce_max(x) > 1.0, [x])
        y = x * 3.0
    (res,) = _run(main, fetch=[y])
    np.testing.assert_array_equal(res, np.full((2, 3), 6.0, np.float32))


def test_assert_false_fails_with_the_tensors(capsys):
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", shape=[3], lod_level=1)
        n = L.fill_constant(shape=[1], dtype="int64", value=7)
        cond = L.reduce_max(x) < 1.0
        L.Assert(cond, [x, n], summarize=4)
        y = x * 2.0
    xv = np.arange(15, dtype=np.float32).reshape(5, 3)
    feed = {"x": fluid.create_lod_tensor(xv, [[2, 3]], fluid.CPUPlace())}
    with pytest.raises(ExecutionError) as info:
        _run(main, feed, [y])
    msg = str(info.value)
    assert (f"The condition variable '{cond.name}' of AssertOp must be true, but received "
            "false") in msg
    assert f"Variable: {x.name}" in msg and f"Variable: {n.name}" in msg
    assert "  - lod: {{0, 2, 5}}" in msg
    assert "  - shape: [5, 3]" in msg and "  - dtype: float32" in msg
    assert "  - data: [0.0 1.0 2.0 3.0]" in msg  # summarize=4 values
    assert "  - data: [7]" in msg and "  - dtype: int64" in msg
    # printed on standard output too, as Fluid's formatter does before it throws
    assert "  - data: [0.0 1.0 2.0 3.0]" in capsys.readouterr().out


def test_assert_summarize_all():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.assign(np.arange(30, dtype=np.int32))
        L.Assert(L.reduce_sum(x) < 0, [x], summarize=-1)
    with pytest.raises(ExecutionError) as info:
        _run(main)
    assert "  - data: [" + " ".join(str(i) for i in range(30)) + "]" in str(info.value)


def test_assert_default_summarize_is_20():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.assign(np.arange(30, dtype=np.int32))
        L.Assert(L.reduce_sum(x) < 0, [x])
    with pytest.raises(ExecutionError) as info:
        _run(main)
    assert "  - data: [" + " ".join(str(i) for i in range(20)) + "]" in str(info.value)


def test_assert_cond_must_have_one_element():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.assign(np.array([1.0, 2.0], np.float32))
        L.Assert(x > 0.0)
    with pytest.raises(ExecutionError, match=r"exactly one element, got shape \[2\]"):
        _run(main)


def test_assert_in_cond_branch():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", shape=[1], append_batch_size=False)

        def true_fn():
            L.Assert(L.reduce_sum(x) < 10.0, [x])
            return x * 2.0

        out = L.cond(L.reduce_sum(x) > 0.0, true_fn, lambda: x - 1.0)
    (res,) = _run(main, {"x": np.array([3.0], np.float32)}, [out])
    np.testing.assert_allclose(res, [6.0])
    (res,) = _run(main, {"x": np.array([-30.0], np.float32)}, [out])  # branch not taken
    np.testing.assert_allclose(res, [-31.0])
    with pytest.raises(ExecutionError, match="AssertOp must be true"):
        _run(main, {"x": np.array([30.0], np.float32)}, [out])


def test_assert_in_while_block():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        i = L.fill_constant([1], "int64", 0)
        n = L.fill_constant([1], "int64", 3)
        limit = L.data("limit", shape=[1], dtype="int64", append_batch_size=False)
        c = L.less_than(i, n)
        loop = L.While(c)
        with loop.block():
            L.Assert(L.less_than(i, limit), [i], summarize=-1)
            L.increment(i, in_place=True)
            L.less_than(i, n, cond=c)
    (res,) = _run(main, {"limit": np.array([5], np.int64)}, [i])
    assert res.tolist() == [3]
    with pytest.raises(ExecutionError) as info:
        _run(main, {"limit": np.array([2], np.int64)}, [i])
    assert "  - data: [2]" in str(info.value)  # the third pass fails


def test_assert_does_not_block_backward():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = L.data("x", shape=[3])
        h = L.fc(x, 2)
        L.Assert(L.reduce_sum(h) < 1e9, [h, x])
        loss = L.mean(h)
        fluid.optimizer.SGD(0.1).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    (res,) = exe.run(main, feed={"x": np.ones((2, 3), np.float32)}, fetch_list=[loss],
                     scope=scope)
    assert np.isfinite(res).all()


def test_assert_argument_errors():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.fill_constant(shape=[1], dtype="float32", value=1.0)
        cond = x > 0.0
        with pytest.raises(TypeError, match="cond must be a bool Variable, got float32"):
            L.Assert(x)
        with pytest.raises(TypeError, match="cond must be a bool Variable"):
            L.Assert(True)
        with pytest.raises(TypeError, match="data must be a list or tuple"):
            L.Assert(cond, x)
        with pytest.raises(TypeError, match=r"data\[1\] must be a Variable"):
            L.Assert(cond, [x, 3])
        with pytest.raises(TypeError, match="summarize must be an int"):
            L.Assert(cond, [x], summarize=2.5)
        with pytest.raises(TypeError, match="name must be a str"):
            L.Assert(cond, name=3)


# -- size --------------------------------------------------------------------------------------

def test_size_plain_and_lod():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", shape=[2, 3])
        y = L.data("y", shape=[4], lod_level=1)
        b = L.data("b", shape=[1], dtype="bool")
        sx, sy, sb = L.size(x), L.size(y), L.size(b)
    assert sx.dtype == "int64" and tuple(sx.shape) == (1,) and sx.stop_gradient
    assert main.global_block().ops[0].type == "size"
    assert main.global_block().ops[0].input("Input") == [x.name]
    feed = {"x": np.zeros((5, 2, 3), np.float32),
            "y": fluid.create_lod_tensor(np.zeros((7, 4), np.float32), [[3, 4]],
                                         fluid.CPUPlace()),
            "b": np.zeros((2, 1), bool)}
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    rx, ry, rb = exe.run(main, feed=feed, fetch_list=[sx, sy, sb], scope=scope)
    for r, want in ((rx, 30), (ry, 28), (rb, 2)):
        assert r.dtype == np.int64 and r.shape == (1,) and r.tolist() == [want]
    # the count has no LoD even though its input has one
    assert not scope.lods.get(sy.name)


def test_size_of_empty_tensor_and_use_downstream():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", shape=[3], append_batch_size=True)
        s = L.cast(L.size(x), "float32")
        y = L.reduce_sum(x) * s
    (rs, ry) = _run(main, {"x": np.full((2, 3), 4.0, np.float32)}, [s, y])
    assert rs.tolist() == [6.0] and np.allclose(ry, 144.0)
    (rs,) = _run(main, {"x": np.zeros((0, 3), np.float32)}, [s])
    assert rs.tolist() == [0.0]


def test_size_has_no_gradient_and_errors():
    assert registry.get("size").grad is None
    with pytest.raises(TypeError, match="size: input must be a Variable, got list"):
        L.size([1, 2])


# -- transpose (the op weight norm appends) ---------------------------------------------------

def test_transpose_op_values_and_errors():
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    kernel = registry.get("transpose").kernel
    out = kernel({"X": [x]}, {"axis": [1, 0, 2]}, ("Out",))["Out"][0]
    np.testing.assert_array_equal(out, x.transpose(1, 0, 2))
    grad = registry.get("transpose_grad").kernel
    d = grad({"X": [x], "Out@GRAD": [out]}, {"axis": [1, 0, 2]}, ("X@GRAD",))["X@GRAD"][0]
    np.testing.assert_array_equal(d, x)
    with pytest.raises(ValueError, match="not a permutation"):
        kernel({"X": [x]}, {"axis": [0, 0, 2]}, ("Out",))
