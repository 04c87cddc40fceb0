"""``layers.tensor_array_to_tensor`` (Fluid 1.8): the array's items concatenated (or
stacked) along ``axis``, each item's size along it in ``OutIndex``; the program Fluid
builds, the static shape, the values against numpy, the gradient back to the items (fed
steps written into the array, and an array filled inside a While loop) against central
differences, and the errors."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.executor import ExecutionError

from .numeric_grad import program_grads_and_numeric

RNG = np.random.default_rng(3)
# items of different sizes along axis 1 (a concat along 1 allows it)
ITEMS = [RNG.standard_normal((2, w, 3)) for w in (1, 3, 2)]
SAME = [RNG.standard_normal((2, 4, 3)) for _ in range(3)]


def _array(items, prefix="x"):
    xs = [layers.data(f"{prefix}{k}", list(a.shape), dtype="float64",
                      append_batch_size=False) for k, a in enumerate(items)]
    arr = layers.create_array("float64")
    for k, x in enumerate(xs):
        layers.array_write(x, layers.fill_constant([1], "int64", k), array=arr)
    return xs, arr


def _run(items, axis, use_stack):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        _, arr = _array(items)
        out, index = layers.tensor_array_to_tensor(arr, axis=axis, use_stack=use_stack)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {f"x{k}": a for k, a in enumerate(items)}
    res = exe.run(main, feed=feed, fetch_list=[out, index], scope=fluid.Scope())
    return main, out, index, res


def _concat_by_hand(items, axis):
    """numpy reference by explicit element copies, not np.concatenate."""
    axis = axis % items[0].ndim
    shape = list(items[0].shape)
    shape[axis] = sum(a.shape[axis] for a in items)
    out = np.empty(shape)
    start = 0
    for a in items:
        for idx in np.ndindex(*a.shape):
            j = list(idx)
            j[axis] += start
            out[tuple(j)] = a[idx]
        start += a.shape[axis]
    return out


def test_program_structure_and_static_shapes():
    main, out, index, _ = _run(ITEMS, 1, False)
    op = next(o for o in main.global_block().ops if o.type == "tensor_array_to_tensor")
    assert op.input("X") == [main.global_block().ops[-2].output("Out")[0]]
    assert op.output("Out") == [out.name] and op.output("OutIndex") == [index.name]
    assert op.attrs["axis"] == 1 and op.attrs["use_stack"] is False
    assert list(out.shape) == [2, -1, 3] and out.dtype == "float64"
    assert index.dtype == "int32"
    main, out, _, _ = _run(SAME, 0, True)
    assert list(out.shape) == [-1, 2, 4, 3]
    main, out, _, _ = _run(SAME, -1, True)
    assert list(out.shape) == [2, 4, 3, -1]


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_values_and_index(axis):
    items = ITEMS if axis == 1 else SAME
    _, _, _, (got, index) = _run(items, axis, False)
    np.testing.assert_array_equal(got, _concat_by_hand(items, axis))
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index, [a.shape[axis] for a in items])


@pytest.mark.parametrize("axis", [0, 1, 3, -1, -4])
def test_stack_values_and_index(axis):
    _, _, _, (got, index) = _run(SAME, axis, True)
    k = axis % 4
    assert got.shape[k] == len(SAME)
    for j, a in enumerate(SAME):
        np.testing.assert_array_equal(np.take(got, j, axis=k), a)
    # Fluid's kernel gives each item's size along axis, stacked too (1 past the last dim)
    np.testing.assert_array_equal(index, [a.shape[k] if k < a.ndim else 1 for a in SAME])


def test_gradient_reaches_the_fed_items():
    weights = [RNG.standard_normal(a.shape) for a in ITEMS]

    def build():
        xs, arr = _array(ITEMS)
        ps = [layers.create_parameter(list(a.shape), "float64", name=f"p{k}")
              for k, a in enumerate(ITEMS)]
        arr2 = layers.create_array("float64")
        for k, (x, p) in enumerate(zip(xs, ps, strict=True)):
            layers.array_write(layers.elementwise_mul(x, p),
                               layers.fill_constant([1], "int64", k), array=arr2)
        out, _ = layers.tensor_array_to_tensor(arr2, axis=1)
        # a nonlinear loss, so each item's part of the gradient matters
        return layers.reduce_sum(layers.square(layers.tanh(out)))

    feed = {f"x{k}": w for k, w in enumerate(weights)}
    res = program_grads_and_numeric(build, feed, ["p0", "p1", "p2"])
    for p, (analytic, numeric) in res.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=p)


def test_gradient_of_a_stack_of_an_array_filled_in_a_while_loop():
    T = 3
    xs_value = RNG.standard_normal((2, 3))

    def build():
        x = layers.data("x", [2, 3], dtype="float64", append_batch_size=False)
        w = layers.create_parameter([3, 3], "float64", name="w")
        h = layers.fill_constant([2, 3], "float64", 0.0)
        h.stop_gradient = False
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", T)
        arr = layers.create_array("float64")
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            new = layers.tanh(layers.elementwise_add(layers.matmul(h, w), x))
            layers.assign(new, h)
            layers.array_write(new, i, array=arr)
            layers.increment(i, in_place=True)
            layers.less_than(i, n, cond=cond)
        out, _ = layers.tensor_array_to_tensor(arr, axis=1, use_stack=True)
        # distinct weights per step (small integers: exact in float32)
        scale = layers.cast(layers.assign(
            np.arange(1, 1 + 2 * T * 3, dtype="float32").reshape(2, T, 3)), "float64")
        # the loss also reads the carried state after the loop (the loop's gradient of a
        # carried tensor starts from one)
        return layers.elementwise_add(layers.reduce_sum(layers.elementwise_mul(out, scale)),
                                      layers.reduce_sum(h))

    res = program_grads_and_numeric(build, {"x": xs_value}, ["w"])
    analytic, numeric = res["w"]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7)


def test_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [2, 3], dtype="float64", append_batch_size=False)
        with pytest.raises(TypeError, match="input must be a tensor array"):
            layers.tensor_array_to_tensor(x)
        arr = layers.create_array("float64")
        layers.array_write(x, layers.fill_constant([1], "int64", 0), array=arr)
        with pytest.raises(ValueError, match="axis 3 is out of range"):
            layers.tensor_array_to_tensor(arr, axis=3, use_stack=True)
        with pytest.raises(TypeError, match="axis must be an int"):
            layers.tensor_array_to_tensor(arr, axis=1.0)
        empty = layers.create_array("float64")
        layers.tensor_array_to_tensor(empty, axis=0)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(ExecutionError, match="is empty"):
        exe.run(main, feed={"x": np.zeros((2, 3))}, fetch_list=[], scope=fluid.Scope())
    # items that do not agree off the axis
    with pytest.raises(ExecutionError, match="do not match"):
        _run([np.zeros((2, 3)), np.zeros((3, 3))], 1, False)


@pytest.mark.parametrize("use_stack, axis", [(False, 1), (True, -1)])
def test_kernels_on_device_arrays(device_xp, use_stack, axis):
    """The kernels called directly on device arrays (strict CuPy everywhere, real CuPy on a
    GPU): no host copies, the same values as numpy, the gradient split back per item and
    added into what the gradient array already holds."""
    from types import SimpleNamespace

    from dask_fluid.control_flow_ops import _tensor_array_to_tensor, _tensor_array_to_tensor_grad
    from dask_fluid.lod import LoDTensor, LoDTensorArray

    cp = device_xp
    items = ITEMS if not use_stack else SAME
    arr = LoDTensorArray(LoDTensor._of(cp.asarray(a), ()) for a in items)
    op = SimpleNamespace(input=lambda s: ["arr"], output=lambda s: ["arr@GRAD"])
    have = LoDTensorArray(LoDTensor._of(cp.asarray(np.ones_like(a)), ()) for a in items)
    ctx = SimpleNamespace(op=op, scope=SimpleNamespace(vars={"arr@GRAD": have}),
                          executor=SimpleNamespace(place=None))
    attrs = {"axis": axis, "use_stack": use_stack}
    res = _tensor_array_to_tensor({"X": [arr]}, attrs, ("Out", "OutIndex"), ctx)
    out, index = res["Out"][0], res["OutIndex"][0]
    expect = np.stack(items, axis) if use_stack else np.concatenate(items, axis)
    np.testing.assert_array_equal(cp.asnumpy(out), expect)
    np.testing.assert_array_equal(cp.asnumpy(index), [1] * 3 if use_stack
                                  else [a.shape[axis] for a in items])
    d = RNG.standard_normal(expect.shape)
    grads = _tensor_array_to_tensor_grad({"X": [arr], "Out@GRAD": [cp.asarray(d)]}, attrs,
                                         ("X@GRAD",), ctx)["X@GRAD"][0]
    parts = ([np.take(d, k, axis) for k in range(3)] if use_stack
             else np.split(d, np.cumsum([a.shape[axis] for a in items])[:-1], axis))
    for g, part in zip(grads, parts, strict=True):
        np.testing.assert_array_equal(cp.asnumpy(g._array), part + 1.0)


def test_dygraph_takes_the_list_create_array_gives_as_fluid():
    items = [np.arange(24, dtype="float32").reshape(2, 3, 4) + i for i in range(2)]
    static = [_run(items, 1, use_stack) for use_stack in (True, False)]
    with fluid.dygraph.guard():
        arr = [fluid.dygraph.to_variable(a) for a in items]
        for use_stack, (_, _, _, (want, want_index)) in zip((True, False), static,
                                                           strict=True):
            out, index = layers.tensor_array_to_tensor(arr, axis=1, use_stack=use_stack)
            np.testing.assert_array_equal(out.numpy(), want)
            np.testing.assert_array_equal(index.numpy(), want_index)
        with pytest.raises(TypeError, match="the list create_array gives"):
            layers.tensor_array_to_tensor(arr[0], axis=1)
