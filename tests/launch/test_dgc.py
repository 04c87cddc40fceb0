"""DGCMomentumOptimizer (Fluid 1.8's Deep Gradient Compression) over nccl2 trainers: the program
Fluid builds, the dgc ops against a reference written here, and two trainers in threads
against a numpy simulation of the whole algorithm (dense momentum until the ramp-up, then each
trainer's top-k of its accumulated momentum summed)."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.framework import OP_ROLE_KEY, OP_ROLE_VAR_KEY, OpRole
from dask_fluid.ops.dgc_ops import dgc, dgc_clip_by_norm, dgc_momentum, encode
from dask_fluid.ops.registry import to_host
from dask_fluid.transpiler import DistributeTranspiler, DistributeTranspilerConfig

from .. import strict_cupy
from . import cluster

IN, OUT, BATCH, STEPS = 64, 256, 8, 6  # W: 64 x 256 = 16384 elements, the smallest DGC takes
LR, MU = 0.05, 0.9


def _net(rampup_begin_step=2, rampup_step=1, sparsity=(0.99,), nesterov=False,
         regularization=None, grad_clip=None, num_trainers=None):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [IN])
        y = fluid.layers.data("y", [OUT])
        pred = fluid.layers.fc(x, OUT, param_attr=fluid.ParamAttr(name="w"),
                               bias_attr=fluid.ParamAttr(name="b"))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        opt = fluid.optimizer.DGCMomentumOptimizer(
            LR, MU, rampup_begin_step=rampup_begin_step, rampup_step=rampup_step,
            sparsity=list(sparsity), use_nesterov=nesterov, regularization=regularization,
            grad_clip=grad_clip, num_trainers=num_trainers)
        opt.minimize(loss)
    return main, startup, loss


def _batches():
    rng = np.random.RandomState(3)
    return [(rng.normal(size=(BATCH, IN)).astype("float32"),
             rng.normal(size=(BATCH, OUT)).astype("float32")) for _ in range(STEPS)]


# -- the program ------------------------------------------------------------------------------

def test_the_program_fluid_builds():
    main, startup, _ = _net(regularization=fluid.regularizer.L2Decay(1e-3))
    ops = main.global_block().ops
    types = [op.type for op in ops]
    assert main._enable_dgc
    # the step counter: incremented first thing (from -1: 0 at the first step)
    assert types[0] == "increment" and ops[0].input("X") == ["__g_dgc_counter__"]
    init = {op.output("Out")[0]: op.attrs["value"] for op in startup.global_block().ops
            if op.type == "fill_constant"}
    assert init["__g_dgc_counter__"] == -1.0 and init["__g_nranks__"] == -1.0
    assert init["__g_rampup_begin_step__"] == 2.0
    for suffix in ("__dgc_k__", "__dgc_encoded__", "__dgc_gather__"):
        assert init["w" + suffix] == 0.0 and "b" + suffix not in init
    # one dgc op, after the backward ops, for w only (b has 256 elements); it now names the
    # (param, grad) pair, the backward op that made w@GRAD no longer does
    [d] = [op for op in ops if op.type == "dgc"]
    assert d.attrs[OP_ROLE_KEY] == OpRole.Backward
    assert d.attrs[OP_ROLE_VAR_KEY] == ["w", "w@GRAD"]
    assert d.input("Grad") == d.output("Grad_out") == ["w@GRAD"]
    assert d.input("U") == d.output("U_out") == ["w__dgc_u__0"]
    assert d.input("V") == d.output("V_out") == ["w__dgc_v__0"]
    assert d.input("nranks") == ["__g_nranks__"]
    assert (d.attrs["m"], d.attrs["sparsity"], d.attrs["rampup_begin_step"],
            d.attrs["rampup_step"], d.attrs["regular_type"]) == (MU, [0.99], 2.0, 1.0, 2)
    assert d.attrs["regular_coeff"] == pytest.approx(1e-3)
    assert not any("w" in (op.attrs.get(OP_ROLE_VAR_KEY) or []) for op in ops
                   if op.type != "dgc" and op.attrs.get(OP_ROLE_KEY) == OpRole.Backward)
    first_opt = next(i for i, op in enumerate(ops) if op.attrs.get(OP_ROLE_KEY, 0)
                     & OpRole.Optimize)
    assert types.index("dgc") < first_opt
    # w: dgc_momentum with the dgc op's U as its velocity, undecayed (the dgc op decays);
    # b: momentum with its own U accumulator, after the usual L2 decay ops
    [dm] = [op for op in ops if op.type == "dgc_momentum"]
    assert dm.input("Param") == ["w"] and dm.input("Grad") == ["w@GRAD"]
    assert dm.input("Velocity") == ["w__dgc_u__0"] and dm.output("Grad_out") == ["w@GRAD"]
    assert dm.attrs["rampup_begin_step"] == 2.0
    [mo] = [op for op in ops if op.type == "momentum"]
    assert mo.input("Param") == ["b"] and mo.input("Velocity") == ["b__dgc_u__0"]
    assert mo.input("Grad") != ["b@GRAD"]  # the decayed gradient
    decayed = {n for op in ops[first_opt:] if op.type in ("scale", "sum")
               for n in op.input_arg_names}
    assert "b" in decayed and "w" not in decayed


def test_grad_clip_is_a_dgc_clip_by_norm_scaled_by_the_trainers():
    main, _, _ = _net(grad_clip=fluid.clip.GradientClipByNorm(4.0), num_trainers=4)
    ops = main.global_block().ops
    [clip] = [op for op in ops if op.type == "dgc_clip_by_norm"]
    assert clip.input("X") == clip.output("Out") == ["w@GRAD"]
    assert clip.attrs["max_norm"] == pytest.approx(2.0)  # 4 / sqrt(4)
    assert [op.type for op in ops].index("dgc_clip_by_norm") < [op.type for op in ops].index("dgc")
    # b is clipped as by any optimizer
    assert any(op.type == "clip_by_norm" and op.input("X") == ["b@GRAD"] for op in ops)


def test_bad_arguments_are_clear_errors():
    dgc_opt = fluid.optimizer.DGCMomentumOptimizer
    with pytest.raises(TypeError, match="GradientClipByNorm"):
        dgc_opt(0.1, 0.9, 0, grad_clip=fluid.clip.GradientClipByValue(1.0))
    with pytest.raises(ValueError, match="num_trainers"):
        dgc_opt(0.1, 0.9, 0, grad_clip=fluid.clip.GradientClipByNorm(1.0))
    with pytest.raises(ValueError, match="rampup_begin_step"):
        dgc_opt(0.1, 0.9, -1)
    with pytest.raises(ValueError, match="sparsity"):
        dgc_opt(0.1, 0.9, 0, sparsity=[1.5])
    with pytest.raises(TypeError, match="L1Decay or L2Decay"):
        dgc_opt(0.1, 0.9, 0, regularization=object())
    with fluid.dygraph.guard(), pytest.raises(RuntimeError, match="dygraph"):
        dgc_opt(0.1, 0.9, 0)


@pytest.mark.parametrize("mode", ["pserver", "collective"])
def test_other_transpile_modes_refuse_dgc_programs(mode):
    main, startup, _ = _net()
    config = DistributeTranspilerConfig()
    config.mode = mode
    with pytest.raises(ValueError, match="DGCMomentumOptimizer.*nccl2"):
        DistributeTranspiler(config=config).transpile(
            0, program=main, startup_program=startup, pservers="127.0.0.1:1",
            trainers=2 if mode == "pserver" else "127.0.0.1:1,127.0.0.1:2",
            current_endpoint="127.0.0.1:1")


def test_a_local_run_says_dgc_needs_several_trainers():
    main, startup, loss = _net()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    x, y = _batches()[0]
    with pytest.raises(fluid.executor.ExecutionError, match="num_trainers <= 1"):
        exe.run(main, feed={"x": x, "y": y}, scope=scope)


# -- the ops against a reference ---------------------------------------------------------------

def _ref_dgc(u, v, g, p, step, nranks, *, m, nesterov, sparsity, begin, ramp, rtype, coeff):
    """The dgc op, written from Fluid 1.8's dgc_op.h (float64)."""
    u, v = u.astype(np.float64), v.astype(np.float64)
    grad = nranks * g.astype(np.float64)
    grad = grad + (coeff * np.sign(p) if rtype == 1 else coeff * p if rtype == 2 else 0)
    if step < begin:
        return dict(U=u, V=v, G=grad, idx=None)
    s = sparsity[min(int((step - begin) * len(sparsity) / ramp), len(sparsity) - 1)]
    k = int(g.size * (1 - s))
    if nesterov:
        u = m * (u + grad)
        v = v + u + grad
    else:
        u = m * u + grad
        v = v + u
    idx = np.sort(np.argsort(-np.abs(v.ravel()), kind="stable")[:k])
    vals = v.ravel()[idx].copy()
    u.ravel()[idx] = 0
    v.ravel()[idx] = 0
    return dict(U=u, V=v, G=np.zeros_like(grad), idx=idx, vals=vals, k=k)


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("rtype", [0, 1, 2])
@pytest.mark.parametrize("step", [0, 2, 4, 9])
def test_dgc_op_against_the_reference(nesterov, rtype, step):
    rng = np.random.default_rng(step + 10 * rtype + 100 * nesterov)
    u, v, g, p = (rng.normal(size=(40, 50)).astype(np.float32) for _ in range(4))
    attrs = {"m": 0.8, "use_nesterov": nesterov, "sparsity": [0.75, 0.9, 0.99],
             "rampup_begin_step": 2.0, "rampup_step": 6.0, "regular_coeff": 0.01,
             "regular_type": rtype}
    want = _ref_dgc(u, v, g, p, step, 2, m=0.8, nesterov=nesterov, sparsity=[0.75, 0.9, 0.99],
                    begin=2, ramp=6, rtype=rtype, coeff=0.01)
    ins = {"U": [u.copy()], "V": [v.copy()], "Grad": [g], "Param": [p],
           "current_step": [np.array([step], np.float32)], "nranks": [np.array([2.0], "f4")]}
    out = dgc(ins, attrs, ())
    np.testing.assert_allclose(out["Grad_out"][0], want["G"], rtol=1e-5, atol=1e-6)
    if want["idx"] is None:  # before the ramp-up: only the gradient changes
        assert set(out) == {"Grad_out"}
        np.testing.assert_array_equal(ins["U"][0], u)
        return
    np.testing.assert_allclose(out["U_out"][0], want["U"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["V_out"][0], want["V"], rtol=1e-5, atol=1e-5)
    k = want["k"]
    assert out["k"][0].tolist() == [k] and out["GatherBuff"][0].shape == (2 * k * 2,)
    enc = out["EncodeGrad"][0]
    assert enc.dtype == np.float32 and enc.shape == (2 * k,)
    np.testing.assert_array_equal(enc[:k].view(np.int32), want["idx"])  # Fluid's layout
    np.testing.assert_allclose(enc[k:], want["vals"], rtol=1e-5)


def test_encode_takes_the_largest_magnitudes():
    v = np.array([[0.5, -3.0, 0.1], [2.0, -0.2, 1.0]], np.float32)
    idx, enc = encode(v, 2)
    assert idx.tolist() == [1, 3]
    assert enc[:2].view(np.int32).tolist() == [1, 3] and enc[2:].tolist() == [-3.0, 2.0]
    idx, enc = encode(v, 0)
    assert idx.size == 0 and enc.size == 0


def test_dgc_momentum_and_dgc_clip_by_norm():
    rng = np.random.default_rng(0)
    p, g, vel = (rng.normal(size=(30,)).astype(np.float32) for _ in range(3))
    lr, two = np.array([0.1], np.float32), np.array([2.0], np.float32)
    attrs = {"mu": 0.9, "use_nesterov": False, "rampup_begin_step": 3.0}

    def run(step):
        ins = {"Param": [p.copy()], "Grad": [g], "Velocity": [vel.copy()],
               "LearningRate": [lr], "current_step": [np.array([step], np.float32)],
               "nranks": [two]}
        return dgc_momentum(ins, attrs, ())

    before, after = run(2), run(3)
    np.testing.assert_allclose(before["Grad_out"][0], g / 2)
    np.testing.assert_allclose(before["VelocityOut"][0], 0.9 * vel + g / 2, rtol=1e-6)
    np.testing.assert_allclose(before["ParamOut"][0], p - 0.1 * (0.9 * vel + g / 2), rtol=1e-6)
    np.testing.assert_allclose(after["ParamOut"][0], p - 0.1 * g / 2, rtol=1e-6)  # plain SGD
    np.testing.assert_array_equal(after["VelocityOut"][0], vel)
    assert dgc_momentum({}, {"rampup_begin_step": -1.0}, ()) == {}
    x = rng.normal(size=(10,)).astype(np.float32) * 5
    norm = np.linalg.norm(x)
    clip = {"max_norm": 1.0, "rampup_begin_step": 3.0}
    out = dgc_clip_by_norm({"X": [x], "current_step": [np.array([2.0], "f4")]}, clip, ())
    assert out["Out"][0] is x  # before the ramp-up: unclipped
    out = dgc_clip_by_norm({"X": [x], "current_step": [np.array([3.0], "f4")]}, clip, ())
    np.testing.assert_allclose(out["Out"][0], x / norm, rtol=1e-6)


# -- two trainers ------------------------------------------------------------------------------

def _simulate(w0, b0, batches, *, begin, sparsity, ramp=1, nranks=2):
    """Two trainers of DGC momentum in float64: the module docstring's algorithm."""
    w, b = w0.astype(np.float64), b0.astype(np.float64)
    uw, ub = np.zeros_like(w), np.zeros_like(b)
    us, vs = [None] * nranks, [np.zeros_like(w) for _ in range(nranks)]
    half = BATCH // nranks
    for step, (x, y) in enumerate(batches):
        gws, gbs = [], []
        for r in range(nranks):
            xr, yr = x[r * half:(r + 1) * half], y[r * half:(r + 1) * half]
            d = 2 * (xr @ w + b - yr) / (half * OUT)
            gws.append(xr.T @ d)
            gbs.append(d.sum(0))
        ub = MU * ub + np.mean(gbs, axis=0)
        b = b - LR * ub
        if step < begin:
            uw = MU * uw + np.mean(gws, axis=0)
            w = w - LR * uw
            continue
        if us[0] is None:  # each trainer's momentum starts from the dense phase's velocity
            us = [uw.copy() for _ in range(nranks)]
        s = sparsity[min(int((step - begin) * len(sparsity) / ramp), len(sparsity) - 1)]
        k = int(w.size * (1 - s))
        total = np.zeros_like(w)
        for r in range(nranks):
            us[r] = MU * us[r] + gws[r]
            vs[r] = vs[r] + us[r]
            idx = np.argsort(-np.abs(vs[r].ravel()), kind="stable")[:k]
            total.ravel()[idx] += vs[r].ravel()[idx]
            vs[r].ravel()[idx] = 0
            us[r].ravel()[idx] = 0
        w = w - LR * total / nranks
    return w, b


def _two_dgc_trainers(monkeypatch, endpoints: list[str], place=None, **net_args) -> list[dict]:
    monkeypatch.setenv("DASK_FLUID_JOB_SECRET", "dgc")

    def programs(rank: int):
        main, startup, loss = _net(**net_args)
        return startup, cluster.nccl2_trainer(main, startup, loss, rank, endpoints)

    built = [programs(rank) for rank in range(2)]  # program_guard is process-wide

    def trainer(rank: int) -> dict:
        startup, compiled = built[rank]
        exe, scope = fluid.Executor(place or fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        first = {n: np.array(to_host(scope.get(n))) for n in ("w", "b")}
        half = slice(BATCH // 2 * rank, BATCH // 2 * (rank + 1))
        for x, y in _batches():
            exe.run(compiled, feed={"x": x[half], "y": y[half]}, scope=scope)
        exe.close()
        return {**{n: np.array(to_host(scope.get(n))) for n in
                   ("w", "b", "__g_dgc_counter__", "__g_nranks__", "w__dgc_gather__")},
                **{n + "0": v for n, v in first.items()}}

    return cluster.in_threads(2, trainer)


@pytest.mark.parametrize("device", ["cpu", "strict"])
def test_two_trainers_follow_the_dgc_algorithm(device, monkeypatch, request, held_endpoints):
    place = None
    if device == "strict":  # CUDAPlace on the strict CPU CuPy: device arrays, the ring on host
        strict_cupy.device_module("strict", request)
        place = fluid.CUDAPlace(0)
    t0, t1 = _two_dgc_trainers(monkeypatch, held_endpoints(2), place, rampup_begin_step=2,
                                sparsity=(0.99,))
    for name in ("w", "b"):
        np.testing.assert_array_equal(t0[name], t1[name])  # the same bits on both
    assert t0["__g_dgc_counter__"].tolist() == [STEPS - 1]
    assert t0["__g_nranks__"].tolist() == [2.0]
    k = int(IN * OUT * 0.01)
    assert t0["w__dgc_gather__"].shape == (2 * 2 * k,)  # both trainers' k indices and values
    w, b = _simulate(t0["w0"], t0["b0"], _batches(), begin=2, sparsity=[0.99])
    np.testing.assert_allclose(t0["b"], b, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(t0["w"], w, rtol=1e-4, atol=1e-6)
    # the control: dense momentum would have moved w elsewhere
    dense, _ = _simulate(t0["w0"], t0["b0"], _batches(), begin=STEPS, sparsity=[0.99])
    assert not np.allclose(t0["w"], dense, rtol=1e-3, atol=1e-5)


def test_the_sparsity_ramps_up_through_its_list(monkeypatch, held_endpoints):
    t0, _ = _two_dgc_trainers(monkeypatch, held_endpoints(2), rampup_begin_step=1, rampup_step=4,
                              sparsity=(0.5, 0.9, 0.99, 0.999))
    w, _ = _simulate(t0["w0"], t0["b0"], _batches(), begin=1, ramp=4,
                     sparsity=[0.5, 0.9, 0.99, 0.999])
    np.testing.assert_allclose(t0["w"], w, rtol=1e-4, atol=1e-6)
    # the last step (step 5, 4 past the start): the last entry, 0.999
    assert t0["w__dgc_gather__"].shape == (2 * 2 * int(IN * OUT * 0.001),)


def test_recompute_around_dgc_appends_the_dgc_ops_after_its_backward_pass():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [IN])
        h = fluid.layers.fc(x, OUT, act="relu", param_attr=fluid.ParamAttr(name="w"))
        loss = fluid.layers.mean(fluid.layers.fc(h, 1))
        opt = fluid.optimizer.RecomputeOptimizer(
            fluid.optimizer.DGCMomentumOptimizer(LR, MU, rampup_begin_step=0))
        opt._set_checkpoints([h])
        opt.minimize(loss)
    types = [op.type for op in main.global_block().ops]
    assert types[0] == "increment" and types.count("dgc") == 1
    assert types.index("dgc") < types.index("dgc_momentum")
    assert any(".subprog_" in n for op in main.global_block().ops for n in op.output_arg_names)


@pytest.mark.parametrize("kind", ["strict", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_the_dgc_kernels_on_a_device_give_the_host_results(kind, request):
    xp = strict_cupy.device_module(kind, request)
    rng = np.random.default_rng(4)
    u, v, g, p = (rng.normal(size=(64, 300)).astype(np.float32) for _ in range(4))
    attrs = {"m": 0.9, "use_nesterov": False, "sparsity": [0.99], "rampup_begin_step": 0.0,
             "rampup_step": 1.0, "regular_coeff": 1e-3, "regular_type": 2}

    def ins(mod):
        return {"U": [mod.asarray(u.copy())], "V": [mod.asarray(v.copy())],
                "Grad": [mod.asarray(g)], "Param": [mod.asarray(p)],
                "current_step": [mod.asarray(np.array([3.0], "f4"))],
                "nranks": [mod.asarray(np.array([2.0], "f4"))]}

    host, dev = dgc(ins(np), attrs, ()), dgc(ins(xp), attrs, ())
    for slot in ("U_out", "V_out", "EncodeGrad", "Grad_out", "k"):
        assert type(dev[slot][0]).__module__.startswith("cupy"), slot  # stayed on the device
        np.testing.assert_allclose(to_host(dev[slot][0]), host[slot][0], rtol=1e-6,
                                   atol=1e-6, err_msg=slot)
    enc = to_host(dev["EncodeGrad"][0])
    np.testing.assert_array_equal(enc[:192].view(np.int32), host["EncodeGrad"][0][:192].view(
        np.int32))
    mom = {"Param": [xp.asarray(p.copy())], "Grad": [xp.asarray(g)],
           "Velocity": [xp.asarray(u.copy())], "LearningRate": [xp.asarray(np.array([0.1], "f4"))],
           "current_step": [xp.asarray(np.array([0.0], "f4"))],
           "nranks": [xp.asarray(np.array([2.0], "f4"))]}
    out = dgc_momentum(mom, {"mu": 0.9, "rampup_begin_step": 1.0}, ())
    np.testing.assert_allclose(to_host(out["ParamOut"][0]), p - 0.1 * (0.9 * u + g / 2),
                               rtol=1e-5, atol=1e-6)
