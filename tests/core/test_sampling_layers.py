"""Random layers drawn in the main program (Fluid 1.8's ``uniform_random``,
``gaussian_random``, their ``_batch_size_like`` forms, ``sampling_id`` and ``random_crop``):
the programs Fluid builds, seed 0 drawing anew each run while a fresh scope replays the
stream, a nonzero seed drawing the same values every run, initialisers untouched, the
distributions, and sampling_id and random_crop against references written from Fluid's
kernels."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.ops.random_ops import random_crop as random_crop_kernel
from dask_fluid.ops.random_ops import sampling_id as sampling_id_kernel


def _programs(build):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 5
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        out = build()
    return main, startup, out


def _runs(main, startup, fetch, feed=None, times=2):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return [exe.run(main, feed=feed or {}, fetch_list=fetch, scope=scope)
            for _ in range(times)]


def test_programs_as_fluid_builds_them():
    def build():
        n = layers.fill_constant([1], "int64", 3)
        u = layers.uniform_random([2, n], min=-2.0, max=3.0, seed=4)
        g = layers.gaussian_random(layers.assign(np.array([4, 2], np.int32)), mean=1.0,
                                   std=0.5, dtype="float64")
        x = layers.data("x", [7])
        like = layers.uniform_random_batch_size_like(x, [-1, 3], output_dim_idx=0)
        return u, g, like

    main, _, (u, g, like) = _programs(build)
    ops = {op.type: op for op in main.global_block().ops}
    op = ops["uniform_random"]
    assert op.attr("shape") == [2, -1] and op.attr("seed") == 4
    assert (op.attr("min"), op.attr("max"), op.attr("dtype")) == (-2.0, 3.0, "float32")
    const, var = (main.global_block().var(n) for n in op.input("ShapeTensorList"))
    assert var.dtype == "int64" and const.dtype == "int32"  # the int became a constant
    assert u.shape == (2, -1) and u.stop_gradient
    assert ops["gaussian_random"].input("ShapeTensor") and g.dtype == "float64"
    assert ops["gaussian_random"].attr("mean") == 1.0 and ops["gaussian_random"].attr("std") == 0.5
    assert like.shape == (-1, 3)
    assert ops["uniform_random_batch_size_like"].attr("input_dim_idx") == 0
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [7])
        with pytest.raises(TypeError, match="dtype must be one of"):
            layers.uniform_random([2], dtype="int32")
        with pytest.raises(TypeError, match="shape must be a non-empty list"):
            layers.gaussian_random([])
        with pytest.raises(TypeError, match="seed must be an int"):
            layers.uniform_random([2], seed=1.5)
        with pytest.raises(ValueError, match="input_dim_idx 2 must index input"):
            layers.gaussian_random_batch_size_like(x, [-1, 3], input_dim_idx=2)
        with pytest.raises(ValueError, match="sampling_id: x .* must be 2-D"):
            layers.sampling_id(layers.data("y", [2, 3]))
        with pytest.raises(ValueError, match="must be at most the trailing dims"):
            layers.random_crop(x, [8])


def test_seed_zero_draws_anew_each_run_and_a_fresh_scope_replays_it():
    def build():
        x = layers.data("x", [3])
        return (layers.uniform_random([4, 3]), layers.gaussian_random([4, 3], seed=9),
                layers.gaussian_random_batch_size_like(x, [-1, 2]),
                layers.fc(x, 2, param_attr="w"))

    main, startup, outs = _programs(build)
    feed = {"x": np.ones((5, 3), np.float32)}
    first, second = _runs(main, startup, list(outs), feed)
    again, _ = _runs(main, startup, list(outs), feed)
    assert not np.array_equal(first[0], second[0])  # seed 0: a new draw each run
    assert not np.array_equal(first[2], second[2]) and first[2].shape == (5, 2)
    np.testing.assert_array_equal(first[1], second[1])  # seed 9: the same every run
    for a, b in zip(first, again, strict=True):  # a fresh scope replays every stream
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(first[3], second[3])  # the initialised weight stays put


def test_distributions():
    def build():
        return (layers.uniform_random([200, 100], min=2.0, max=5.0),
                layers.gaussian_random([200, 100], mean=-1.0, std=3.0, dtype="float64"))

    main, startup, outs = _programs(build)
    (u, g), = _runs(main, startup, list(outs), times=1)
    assert u.dtype == np.float32 and 2.0 <= u.min() and u.max() < 5.0
    assert u.mean() == pytest.approx(3.5, abs=0.03)
    assert u.var() == pytest.approx(9 / 12, rel=0.05)
    assert g.dtype == np.float64
    assert g.mean() == pytest.approx(-1.0, abs=0.1) and g.std() == pytest.approx(3.0, rel=0.03)


def _sampling_by_loops(probs, r):
    """Fluid 1.8's sampling_id loop: subtract each probability from r until it goes below
    zero; the last column when it never does."""
    ids = []
    for row, left in zip(probs, r, strict=True):
        idx = len(row) - 1
        for j, p in enumerate(row):
            left -= p
            if left < 0:
                idx = j
                break
        ids.append(idx)
    return np.array(ids, np.int64)


def test_sampling_id_against_the_kernel_loop_and_its_frequencies():
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=50)
    probs[3] = 0.0  # never below zero: the last column
    attrs = {"min": 0.0, "max": 1.0, "_rng": np.random.default_rng(8)}
    got = sampling_id_kernel({"X": [probs]}, attrs, ("Out",))["Out"][0]
    r = np.random.default_rng(8).uniform(0.0, 1.0, size=50)
    np.testing.assert_array_equal(got, _sampling_by_loops(probs, r))
    assert got[3] == 3 and got.dtype == np.int64

    weights = np.array([0.1, 0.6, 0.3], np.float32)

    def build():
        p = layers.data("p", [3])
        return layers.sampling_id(p)

    main, startup, ids = _programs(build)
    runs = _runs(main, startup, [ids], {"p": np.tile(weights, (4000, 1))})
    freq = np.bincount(runs[0][0], minlength=3) / 4000
    np.testing.assert_allclose(freq, weights, atol=0.03)
    assert not np.array_equal(runs[0][0], runs[1][0])


def test_random_crop_windows_seeds_and_replay():
    x = np.arange(2 * 3 * 6 * 5, dtype=np.float32).reshape(2, 3, 6, 5)

    def build():
        img = layers.data("img", [3, 6, 5])
        return layers.random_crop(img, [4, 3], seed=21)

    main, startup, crop = _programs(build)
    op = main.global_block().ops[-1]
    seed_name = op.input("Seed")[0]
    assert op.type == "random_crop" and op.output("SeedOut") == [seed_name]
    assert op.attr("startup_seed") == 21 and crop.shape == (-1, 3, 4, 3)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    assert int(np.array(scope.vars[seed_name]).ravel()[0]) == 21
    first = exe.run(main, feed={"img": x}, fetch_list=[crop], scope=scope)[0]
    seed_after = int(np.array(scope.vars[seed_name]).ravel()[0])
    second = exe.run(main, feed={"img": x}, fetch_list=[crop], scope=scope)[0]
    assert seed_after != 21 and not np.array_equal(first, second)
    for crops in (first, second):
        for n in range(2):
            for c in range(3):  # each instance (n, c) is one window of its own 6 x 5 map
                top, left = divmod(int(crops[n, c, 0, 0] - x[n, c, 0, 0]), 5)
                np.testing.assert_array_equal(crops[n, c], x[n, c, top:top + 4, left:left + 3])
    scope.vars[seed_name] = np.array([21], np.int64)  # the seed replays its crops
    np.testing.assert_array_equal(
        exe.run(main, feed={"img": x}, fetch_list=[crop], scope=scope)[0], first)
    with pytest.raises(ValueError, match="must be the trailing dims of X"):
        random_crop_kernel({"X": [x]}, {"shape": [7, 3], "startup_seed": 1}, ("Out", "SeedOut"))
