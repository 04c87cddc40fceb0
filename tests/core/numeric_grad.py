"""Central differences of a scalar function of one array, for the tests that check a whole
program's gradients through the executor (StaticRNN, DynamicRNN, cond, image layers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import dask_fluid as fluid


def numeric_gradient(f: Callable[[], float], get: Callable[[], np.ndarray],
                     put: Callable[[np.ndarray], None], eps: float = 1e-6) -> np.ndarray:
    """d f / d x by (f(x + eps) - f(x - eps)) / 2 eps per element, where ``get()`` reads x
    and ``put(v)`` sets it; x is restored afterwards."""
    base = np.array(get(), dtype=np.float64)
    g = np.zeros_like(base)
    for j in range(base.size):
        for sign in (1, -1):
            bumped = base.copy()
            bumped.flat[j] += sign * eps
            put(bumped)
            g.flat[j] += sign * f() / (2 * eps)
    put(base)
    return g


def program_grads_and_numeric(build: Callable[[], Any], feed: dict, params: list[str],
                              eps: float = 1e-6) -> dict:
    """The analytic gradients append_backward gives the parameters, and central differences
    (step ``eps``) of the loss (float64 kept by the scope's arrays)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 4
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        loss = build()
        pairs = fluid.append_backward(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for p in params:  # float64 parameters: differences precise enough
        scope.vars[p] = np.array(scope.vars[p], np.float64)
    grads = {p.name: g.name for p, g in pairs}
    fetched = exe.run(main, feed=feed, fetch_list=[grads[p] for p in params], scope=scope)

    def loss_value():
        return float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].sum())

    out = {}
    for p, g in zip(params, fetched, strict=True):
        numeric = numeric_gradient(loss_value, lambda p=p: scope.vars[p],
                                   lambda v, p=p: scope.vars.__setitem__(p, v), eps)
        out[p] = (np.array(g), numeric)
    return out
