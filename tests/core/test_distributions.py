"""``layers.Uniform``, ``Normal``, ``Categorical`` and ``MultivariateNormalDiag`` as Fluid 1.8
builds them: entropy / log_prob / KL against scipy's closed forms, sample shapes and moments,
whole-program gradients against central differences, and the errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.initializer import NumpyArrayInitializer
from dask_fluid.layers.distributions import Distribution

from .numeric_grad import program_grads_and_numeric

pytestmark = pytest.mark.filterwarnings("ignore:data type of argument only support float32")


def _build_and_run(build, feed=None):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        outs = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return outs, exe.run(main, feed=feed or {}, fetch_list=list(outs), scope=scope)


def _kl_normal(m1, s1, m2, s2):
    return np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5


@pytest.mark.filterwarnings("ignore:divide by zero")
def test_uniform_and_normal_closed_forms():
    low, high = np.array([0.5, -1.0, 2.0], np.float32), np.array([1.5, 3.0, 2.25], np.float32)
    loc, scale = np.array([0.3, -1.2, 2.0], np.float32), np.array([0.7, 2.5, 1.1], np.float32)
    loc2, scale2 = np.array([-0.4, 0.1, 1.0], np.float32), np.array([1.3, 0.6, 0.9], np.float32)
    vals = np.array([1.0, 3.5, 2.1], np.float32)

    def build():
        value = layers.assign(vals)
        u, n = layers.Uniform(low, high), layers.Normal(loc, scale)
        n2 = layers.Normal(loc2, scale2)
        return (u.entropy(), u.log_prob(value), n.entropy(), n.log_prob(value),
                n.kl_divergence(n2), layers.Normal(0.5, 2.0).entropy())

    outs, (ue, ulp, ne, nlp, kl, scalar_e) = _build_and_run(build)
    assert [tuple(o.shape) for o in outs[:5]] == [(3,)] * 5
    np.testing.assert_allclose(ue, stats.uniform(low, high - low).entropy(), rtol=1e-5)
    # 3.5 lies outside [-1, 3): log 0 = -inf, as Fluid's log(lb * ub)
    want = stats.uniform(low, high - low).logpdf(vals)
    assert np.isneginf(ulp[1]) and np.isneginf(want[1])
    np.testing.assert_allclose(ulp[[0, 2]], want[[0, 2]], rtol=1e-5)
    np.testing.assert_allclose(ne, stats.norm(loc, scale).entropy(), rtol=1e-5)
    np.testing.assert_allclose(nlp, stats.norm(loc, scale).logpdf(vals), rtol=1e-5)
    np.testing.assert_allclose(kl, _kl_normal(loc, scale, loc2, scale2), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(scalar_e, [stats.norm(0.5, 2.0).entropy()], rtol=1e-5)


def test_categorical_and_multivariate_normal_closed_forms():
    rng = np.random.default_rng(1)
    la, lb = (rng.standard_normal((2, 5)).astype(np.float32) * 3 for _ in range(2))
    loc_a, loc_b = np.array([0.3, -0.5, 1.0], np.float32), np.array([0.2, 0.4, -0.7], np.float32)
    var_a, var_b = np.array([0.4, 1.5, 0.8]), np.array([0.3, 0.9, 2.0])

    def build():
        a, b = layers.Categorical(la), layers.Categorical(lb)
        ma = layers.MultivariateNormalDiag(loc_a, np.diag(var_a).astype(np.float32))
        mb = layers.MultivariateNormalDiag(list(loc_b), np.diag(var_b).astype(np.float32))
        return a.entropy(), a.kl_divergence(b), ma.entropy(), ma.kl_divergence(mb)

    outs, (ce, ckl, me, mkl) = _build_and_run(build)
    assert tuple(outs[0].shape) == (2, 1) and tuple(outs[1].shape) == (2, 1)
    pa = np.exp(la) / np.exp(la).sum(-1, keepdims=True)
    pb = np.exp(lb) / np.exp(lb).sum(-1, keepdims=True)
    np.testing.assert_allclose(ce[:, 0], stats.entropy(pa, axis=-1), rtol=1e-5)
    np.testing.assert_allclose(ckl[:, 0], stats.entropy(pa, pb, axis=-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(me, [stats.multivariate_normal(loc_a, np.diag(var_a)).entropy()],
                               rtol=1e-5)
    d = loc_b - loc_a
    want = 0.5 * ((var_a / var_b).sum() + (d * d / var_b).sum() - 3
                  + np.log(var_b.prod() / var_a.prod()))
    assert mkl.shape == (1,)
    np.testing.assert_allclose(mkl, [want], rtol=1e-5)


def test_samples_shapes_and_moments():
    count = 20000
    loc, scale = np.array([1.0, -2.0], np.float32), np.array([0.5, 3.0], np.float32)
    low, high = np.array([-1.0, 2.0], np.float32), np.array([1.0, 2.5], np.float32)

    def build():
        batch_loc = layers.data("bl", [2], append_batch_size=True)
        batch_scale = layers.data("bs", [2], append_batch_size=True)
        return (layers.Normal(loc, scale).sample([count], seed=3),
                layers.Uniform(low, high).sample([count], seed=5),
                layers.Normal(0.0, 2.0).sample([4, 3]),
                layers.Uniform(3.0, [5.0, 6.0, 7.0]).sample([2]),
                layers.Normal(batch_loc, batch_scale).sample([]),
                layers.Uniform(batch_loc, batch_loc + batch_scale).sample([]))

    feed = {"bl": np.tile(loc, (count, 1)), "bs": np.tile(scale, (count, 1))}
    outs, (ns, us, scalar, bcast, vns, vus) = _build_and_run(build, feed)
    assert [tuple(o.shape) for o in outs[:4]] == [(count, 2), (count, 2), (4, 3), (2, 3)]
    assert scalar.shape == (4, 3) and bcast.shape == (2, 3) and vns.shape == (count, 2)
    # 5 standard errors: the mean's is std / sqrt(n), the std's about std / sqrt(2 n)
    for draws in (ns, vns):
        np.testing.assert_array_less(np.abs(draws.mean(0) - loc), 5 * scale / np.sqrt(count))
        np.testing.assert_array_less(np.abs(draws.std(0) - scale),
                                     5 * scale / np.sqrt(2 * count))
    ustd = (high - low) / np.sqrt(12)
    for draws, lo, hi in ((us, low, high), (vus, loc, loc + scale)):
        assert (draws >= lo).all() and (draws < hi).all()
        width = (hi - lo) / np.sqrt(12)
        np.testing.assert_array_less(np.abs(draws.mean(0) - (lo + hi) / 2),
                                     5 * width / np.sqrt(count))
    np.testing.assert_array_less(np.abs(us.std(0) - ustd), 5 * ustd / np.sqrt(count))
    assert (bcast >= 3.0).all() and (bcast < np.array([5.0, 6.0, 7.0])).all()


def test_log_prob_and_kl_gradients_match_central_differences():
    rng = np.random.default_rng(2)
    value = rng.standard_normal((4, 3)).astype(np.float32)

    def param(name, init):
        return layers.create_parameter(list(init.shape), "float32", name=name,
                                       default_initializer=NumpyArrayInitializer(init))

    def build():
        v = layers.data("v", [3])
        loc, scale = param("loc", rng.standard_normal(3)), param("scale", rng.uniform(0.5, 2, 3))
        loc2 = param("loc2", rng.standard_normal(3))
        scale2 = param("scale2", rng.uniform(0.5, 2, 3))
        logits, logits2 = param("lg", rng.standard_normal((2, 4))), param("lg2",
                                                                          rng.standard_normal(4))
        high = param("high", rng.uniform(2, 3, 3))
        n, n2 = layers.Normal(loc, scale), layers.Normal(loc2, scale2)
        cat, cat2 = layers.Categorical(logits), layers.Categorical(logits2)
        uni = layers.Uniform(layers.assign(np.full(3, -3.0, np.float32)), high)
        mloc, mloc2 = param("mloc", rng.standard_normal(3)), param("mloc2",
                                                                   rng.standard_normal(3))
        mcov = param("mcov", np.diag(rng.uniform(0.5, 2, 3)))
        mcov2 = param("mcov2", np.diag(rng.uniform(0.5, 2, 3)))
        mvn = layers.MultivariateNormalDiag(mloc, mcov)
        mvn2 = layers.MultivariateNormalDiag(mloc2, mcov2)
        parts = [n.log_prob(v), n.kl_divergence(n2), n.entropy(), cat.entropy(),
                 cat.kl_divergence(cat2), uni.log_prob(v), uni.entropy(), mvn.entropy(),
                 mvn.kl_divergence(mvn2)]
        return layers.sums([layers.reduce_sum(p) for p in parts])

    names = ["loc", "scale", "loc2", "scale2", "lg", "lg2", "high", "mloc", "mloc2", "mcov",
             "mcov2"]
    value = np.clip(value, -2.5, 1.5)  # inside every [-3, high)
    got = program_grads_and_numeric(build, {"v": value}, names)
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name


def test_program_structure_uses_fluids_layers():
    main = fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, fluid.Program()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            n = layers.Normal([0.0, 1.0], 2.0)
        assert any("convert to float32" in str(w.message) for w in caught)
        n.sample([3], seed=11)
    types = [o.type for o in main.global_block().ops]
    assert types[:2] == ["assign_value", "assign_value"]
    assert "gaussian_random" in types
    op = next(o for o in main.global_block().ops if o.type == "gaussian_random")
    assert op.attr("shape") == [3, 2] and op.attr("seed") == 11
    assert main.global_block().ops[1].attr("shape") == [2]  # the scale broadcast to [2]


def test_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [3])
        with pytest.raises(TypeError, match="Uniform: low must be one of"):
            layers.Uniform(1, 2.0)
        with pytest.raises(TypeError, match="Categorical: logits must be one of"):
            layers.Categorical(1.0)
        with pytest.raises(ValueError, match="all arguments should be Variable"):
            layers.Normal(x, 1.0)
        n = layers.Normal(0.0, 1.0)
        with pytest.raises(TypeError, match="sample: shape must be one of"):
            n.sample((2,))
        with pytest.raises(TypeError, match="sample: seed must be one of"):
            n.sample([2], seed=True)
        with pytest.raises(TypeError, match="log_prob: value must be a Variable"):
            n.log_prob(np.ones(3, np.float32))
        with pytest.raises(TypeError, match="kl_divergence: other must be one of"):
            n.kl_divergence(layers.Uniform(0.0, 1.0))
        with pytest.raises(ValueError, match="scale must be a \\[k, k\\] matrix"):
            layers.MultivariateNormalDiag([0.0, 1.0], [1.0, 2.0])
        with pytest.raises(NotImplementedError, match="Distribution.sample"):
            Distribution().sample([1])
        with pytest.raises(NotImplementedError, match="Categorical.log_prob"):
            layers.Categorical([0.5, 0.5]).log_prob(x)
