"""Kernel of ``amp_check_finite_and_scale`` (dask_fluid/ops/amp_ops.py) against numpy, as Fluid's
``amp_check_finite_and_scale_op.h`` computes it, and through a program."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.ops import registry

from . import run_op


def _check(xs, scale):
    return run_op("amp_check_finite_and_scale",
                  {"X": list(xs), "Scale": [np.asarray([scale], dtype=xs[0].dtype)]})


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_finite_inputs_are_all_scaled(dtype):
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((3, 4)).astype(dtype), rng.standard_normal(5).astype(dtype)]
    out = _check(xs, 0.125)
    assert len(out["Out"]) == 2
    for got, x in zip(out["Out"], xs, strict=True):
        assert got.dtype == x.dtype and got.shape == x.shape
        np.testing.assert_array_equal(got, x * x.dtype.type(0.125))
    np.testing.assert_array_equal(out["FoundInfinite"][0], [False])
    assert out["FoundInfinite"][0].dtype == np.bool_ and out["FoundInfinite"][0].shape == (1,)


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_scaling_stops_at_the_first_non_finite_tensor(bad):
    xs = [np.arange(4, dtype=np.float32), np.ones((2, 2), np.float32),
          np.full(3, 2.0, np.float32)]
    xs[1][0, 1] = bad
    out = _check(xs, 4.0)
    np.testing.assert_array_equal(out["FoundInfinite"][0], [True])
    # Fluid's loop scales X[0], finds X[1] non-finite and breaks: X[1] and X[2] are not scaled
    np.testing.assert_array_equal(out["Out"][0], xs[0] * 4)
    np.testing.assert_array_equal(out["Out"][1], xs[1])
    np.testing.assert_array_equal(out["Out"][2], xs[2])


def test_float16_overflow_is_found():
    # 1e5 is past float16's largest value (65504): the cast gives inf
    with np.errstate(over="ignore"):
        x = np.array([1e5, 1.0], np.float32).astype(np.float16)
    assert np.isinf(x[0])
    out = _check([x], 0.5)
    assert bool(out["FoundInfinite"][0][0])


def test_errors():
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="Scale must be a tensor of one element"):
        run_op("amp_check_finite_and_scale", {"X": [x], "Scale": [np.ones(2, np.float32)]})
    with pytest.raises(TypeError, match=r"X\[0\] must be a float tensor"):
        run_op("amp_check_finite_and_scale",
               {"X": [np.ones(3, np.int32)], "Scale": [np.ones(1, np.float32)]})


def test_registered_without_gradient():
    opdef = registry.get("amp_check_finite_and_scale")
    assert opdef.inputs == ("X", "Scale") and opdef.outputs == ("Out", "FoundInfinite")
    assert opdef.grad is None


def test_in_a_program_writes_the_gradients_in_place():
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        a = fluid.layers.data("a", shape=[3], dtype="float32", append_batch_size=False)
        b = fluid.layers.data("b", shape=[2], dtype="float32", append_batch_size=False)
        scale = fluid.layers.fill_constant([1], "float32", 0.5)
        found = main.global_block().create_var(name="found_inf", dtype="bool", shape=[1])
        main.global_block().append_op(
            "amp_check_finite_and_scale", inputs={"X": [a, b], "Scale": [scale]},
            outputs={"Out": [a, b], "FoundInfinite": [found]})
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(start)
        av, bv, fv = exe.run(main, feed={"a": np.array([2.0, 4.0, 6.0], np.float32),
                                         "b": np.array([8.0, 1e30], np.float32)},
                             fetch_list=[a, b, found])
    np.testing.assert_allclose(av, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(bv, [4.0, 5e29], rtol=1e-6)
    np.testing.assert_array_equal(fv, [False])


@pytest.mark.parametrize("bad_at", [None, 1])
def test_device_arrays_match_numpy(device_xp, bad_at):
    # on CuPy (or strict_cupy: no implicit host copy) the kernel gives numpy's results
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(3)]
    if bad_at is not None:
        xs[bad_at][1, 2] = np.nan
    scale = np.array([2.0], np.float32)
    want = run_op("amp_check_finite_and_scale", {"X": xs, "Scale": [scale]})
    got = run_op("amp_check_finite_and_scale",
                 {"X": [device_xp.asarray(x) for x in xs], "Scale": [device_xp.asarray(scale)]})
    for g, w in zip(got["Out"], want["Out"], strict=True):
        assert type(g).__module__.split(".")[0] != "numpy"
        np.testing.assert_array_equal(g.get(), w)
    np.testing.assert_array_equal(got["FoundInfinite"][0].get(), want["FoundInfinite"][0])
