"""Optimizer kernels: sgd, momentum, lars_momentum, adam, adamax, adagrad, decayed_adagrad,
rmsprop, ftrl and lamb (Paddle 1.8's update rules).

Each kernel updates the parameter and its state arrays in place and returns those same arrays
as its outputs (``ParamOut`` is bound to the ``Param`` variable in Fluid's programs, so no copy
is needed). Each update rule is written once, as a function of the parameter, gradient and
state arrays; a SelectedRows gradient first merges its duplicate rows (summing them), then the
same rule runs on the gathered touched rows, which are written back: rows the gradient does not
touch keep their parameter and state (Fluid's ``lazy_mode``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import register
from .selected_rows import SelectedRows, xp_of


def _apply(update: Callable[..., None], param: Any, grad: Any, states: list[Any]) -> None:
    """Run ``update(param, grad, *states)`` in place, on the touched rows for a sparse grad."""
    if not isinstance(grad, SelectedRows):
        update(param, grad, *states)
        return
    g = grad.merged()
    if g.height != param.shape[0]:
        raise ValueError(f"sparse gradient of height {g.height} does not match the parameter "
                         f"of shape {list(param.shape)}")
    rows = g.rows
    p_rows = param[rows]
    s_rows = [s[rows] for s in states]
    update(p_rows, g.value, *s_rows)
    param[rows] = p_rows
    for s, s_r in zip(states, s_rows, strict=True):
        s[rows] = s_r


def _lr(ins: dict, param: Any) -> Any:
    """LearningRate ([1]) as a 0-d array of the parameter's dtype: stays on the device."""
    lr = ins["LearningRate"][0].reshape(())
    return lr if lr.dtype == param.dtype else lr.astype(param.dtype)


def _f(param: Any, value: float) -> Any:
    return param.dtype.type(value)


@register("sgd", ("Param", "Grad", "LearningRate"), ("ParamOut",))
def sgd(ins: dict, attrs: dict, outs: tuple) -> dict:
    """ParamOut = Param − lr · Grad."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    lr = _lr(ins, param)

    def update(p, g):
        p -= lr * g

    _apply(update, param, grad, [])
    return {"ParamOut": [param]}


@register("momentum", ("Param", "Grad", "Velocity", "LearningRate"), ("ParamOut", "VelocityOut"),
          {"mu": 0.9, "use_nesterov": False})
def momentum(ins: dict, attrs: dict, outs: tuple) -> dict:
    """v = mu·v + g; p −= lr·(g + mu·v) with Nesterov, else p −= lr·v."""
    param, grad, vel = ins["Param"][0], ins["Grad"][0], ins["Velocity"][0]
    lr = _lr(ins, param)
    mu = _f(param, attrs.get("mu", 0.9))
    nesterov = attrs.get("use_nesterov", False)

    def update(p, g, v):
        v *= mu
        v += g
        if nesterov:
            p -= (g + mu * v) * lr
        else:
            p -= lr * v

    _apply(update, param, grad, [vel])
    return {"ParamOut": [param], "VelocityOut": [vel]}


@register("lars_momentum", ("Param", "Grad", "Velocity", "LearningRate"),
          ("ParamOut", "VelocityOut"),
          {"mu": 0.0001, "lars_coeff": 0.001, "lars_weight_decay": 0.0005})
def lars_momentum(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Layer-wise adaptive rate (Paddle's lars_momentum_op.h): with ``‖p‖ > 0`` and ``‖g‖ > 0``
    the rate is ``lr·coeff·‖p‖ / (‖g‖ + decay·‖p‖)`` (else ``lr``); ``v = mu·v + rate·(g +
    decay·p)``; ``p −= v``. Dense gradients only, as in Paddle."""
    param, grad, vel = ins["Param"][0], ins["Grad"][0], ins["Velocity"][0]
    if isinstance(grad, SelectedRows):
        raise NotImplementedError("lars_momentum with a sparse (SelectedRows) gradient is not "
                                  "implemented, as in Paddle 1.8: use a dense embedding")
    xp = xp_of(param)
    lr = _lr(ins, param)
    mu = _f(param, attrs.get("mu", 0.0001))
    coeff = _f(param, attrs.get("lars_coeff", 0.001))
    decay = _f(param, attrs.get("lars_weight_decay", 0.0005))
    p_norm = xp.sqrt((param * param).sum())
    g_norm = xp.sqrt((grad * grad).sum())
    scaled = lr * coeff * p_norm / (g_norm + decay * p_norm)
    rate = xp.where((p_norm > 0) & (g_norm > 0), scaled, lr).astype(param.dtype)
    vel *= mu
    vel += rate * (grad + decay * param)
    param -= vel
    return {"ParamOut": [param], "VelocityOut": [vel]}


#: Fluid 1.8's adam takes β1/β2 from these ``[1]`` float32 tensors too (dispensable)
_ADAM_BETA_TENSORS = ("Beta1Tensor", "Beta2Tensor")


def _adam_beta(param: Any, ins: dict, attrs: dict, n: int) -> Any:
    """β1 or β2 (``n``) as Fluid 1.8's AdamOpKernel reads it: the ``Beta<n>Tensor`` input
    over the ``beta<n>`` attr, as a scalar of the parameter's dtype.

    Raises
    ------
    TypeError
        A beta tensor that is not float32 (Fluid reads it as ``data<float>``).
    ValueError
        A beta tensor of other than one element.
    """
    value = attrs.get(f"beta{n}", (0.9, 0.999)[n - 1])
    t = (ins.get(f"Beta{n}Tensor") or [None])[0]
    if t is not None:
        if t.dtype != np.float32:
            raise TypeError(f"adam: Beta{n}Tensor must be a float32 tensor, got {t.dtype}")
        if t.size != 1:
            raise ValueError(f"adam: Beta{n}Tensor must have 1 element, got {t.size} "
                             f"(shape {list(t.shape)})")
        value = t.reshape(-1)[0].item()  # .item(): numpy or cupy
    return _f(param, value)


@register("adam",
          ("Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow")
          + _ADAM_BETA_TENSORS,
          ("ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"),
          {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_mode": False},
          optional=_ADAM_BETA_TENSORS)
def adam(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Fluid 1.x Adam: lr_t = lr·√(1−β2ᵗ)/(1−β1ᵗ), m1 = β1·m1 + (1−β1)·g,
    m2 = β2·m2 + (1−β2)·g², p −= lr_t·m1 / (√m2 + ε·√(1−β2ᵗ)); β1 and β2 from the
    ``Beta1Tensor``/``Beta2Tensor`` inputs when bound, else the attributes.

    Where the op binds ``Beta1PowOut``/``Beta2PowOut`` (Fluid 1.8's AdamOptimizer does; it
    appends no ``scale`` ops), they get β1ᵗ·β1 and β2ᵗ·β2 after the update; an op without them
    (a program of older Fluid, which advanced the powers with ``scale`` ops) leaves them.
    """
    param, grad = ins["Param"][0], ins["Grad"][0]
    m1, m2 = ins["Moment1"][0], ins["Moment2"][0]
    xp = xp_of(param)
    b1, b2 = _adam_beta(param, ins, attrs, 1), _adam_beta(param, ins, attrs, 2)
    eps = _f(param, attrs.get("epsilon", 1e-8))
    b1p = ins["Beta1Pow"][0].reshape(()).astype(param.dtype)
    b2p = ins["Beta2Pow"][0].reshape(()).astype(param.dtype)
    one = _f(param, 1.0)
    sqrt_1m_b2p = xp.sqrt(one - b2p)
    lr_t = _lr(ins, param) * sqrt_1m_b2p / (one - b1p)
    eps_hat = eps * sqrt_1m_b2p

    def update(p, g, m1, m2):
        m1 *= b1
        m1 += (one - b1) * g
        m2 *= b2
        m2 += (one - b2) * g * g
        p -= lr_t * m1 / (xp.sqrt(m2) + eps_hat)

    _apply(update, param, grad, [m1, m2])
    res = {"ParamOut": [param], "Moment1Out": [m1], "Moment2Out": [m2]}
    for slot, beta in (("Beta1Pow", b1), ("Beta2Pow", b2)):
        if slot + "Out" in outs:
            power = ins[slot][0]
            res[slot + "Out"] = [power * power.dtype.type(beta)]
    return res


@register("adagrad", ("Param", "Grad", "Moment", "LearningRate"), ("ParamOut", "MomentOut"),
          {"epsilon": 1e-6})
def adagrad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """m += g²; p −= lr·g / (√m + ε)."""
    param, grad, mom = ins["Param"][0], ins["Grad"][0], ins["Moment"][0]
    xp = xp_of(param)
    lr = _lr(ins, param)
    eps = _f(param, attrs.get("epsilon", 1e-6))

    def update(p, g, m):
        m += g * g
        p -= lr * g / (xp.sqrt(m) + eps)

    _apply(update, param, grad, [mom])
    return {"ParamOut": [param], "MomentOut": [mom]}


@register("rmsprop",
          ("Param", "MeanSquare", "Grad", "Moment", "LearningRate", "MeanGrad"),
          ("ParamOut", "MomentOut", "MeanSquareOut", "MeanGradOut"),
          {"epsilon": 1e-10, "decay": 0.9, "momentum": 0.0, "centered": False},
          optional=("MeanGrad",))
def rmsprop(ins: dict, attrs: dict, outs: tuple) -> dict:
    """ms = ρ·ms + (1−ρ)·g²; centered: mg = ρ·mg + (1−ρ)·g,
    mom = μ·mom + lr·g/√(ms − mg² + ε), else mom = μ·mom + lr·g/√(ms + ε); p −= mom."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    ms, mom = ins["MeanSquare"][0], ins["Moment"][0]
    xp = xp_of(param)
    lr = _lr(ins, param)
    eps = _f(param, attrs.get("epsilon", 1e-10))
    rho, mu = _f(param, attrs.get("decay", 0.9)), _f(param, attrs.get("momentum", 0.0))
    one = _f(param, 1.0)
    centered = attrs.get("centered", False)
    mg = ins.get("MeanGrad", [None])[0] if ins.get("MeanGrad") else None
    if centered and mg is None:
        raise ValueError("rmsprop: centered=True needs the MeanGrad input")

    def update(p, g, ms, mom, *mg):
        ms *= rho
        ms += (one - rho) * g * g
        if centered:
            mg[0][...] = rho * mg[0] + (one - rho) * g
            denom = xp.sqrt(ms - mg[0] * mg[0] + eps)
        else:
            denom = xp.sqrt(ms + eps)
        mom *= mu
        mom += lr * g / denom
        p -= mom

    states = [ms, mom] + ([mg] if centered else [])
    _apply(update, param, grad, states)
    res = {"ParamOut": [param], "MomentOut": [mom], "MeanSquareOut": [ms]}
    if "MeanGradOut" in outs and mg is not None:
        res["MeanGradOut"] = [mg]
    return res


@register("adamax", ("Param", "Grad", "LearningRate", "Moment", "InfNorm", "Beta1Pow"),
          ("ParamOut", "MomentOut", "InfNormOut"),
          {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8})
def adamax(ins: dict, attrs: dict, outs: tuple) -> dict:
    """m = β1·m + (1−β1)·g; u = max(β2·u + ε, |g|); p −= lr / (1 − β1^t) · m / u
    (β1^t from Beta1Pow, which the optimizer's ``scale`` op advances)."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    m, u = ins["Moment"][0], ins["InfNorm"][0]
    xp = xp_of(param)
    lr = _lr(ins, param) / (1 - ins["Beta1Pow"][0].reshape(()).astype(param.dtype))
    b1, b2 = _f(param, attrs.get("beta1", 0.9)), _f(param, attrs.get("beta2", 0.999))
    eps = _f(param, attrs.get("epsilon", 1e-8))

    def update(p, g, m, u):
        m *= b1
        m += (1 - b1) * g
        u[...] = xp.maximum(b2 * u + eps, xp.abs(g))
        p -= lr * m / u

    _apply(update, param, grad, [m, u])
    return {"ParamOut": [param], "MomentOut": [m], "InfNormOut": [u]}


@register("decayed_adagrad", ("Param", "Grad", "Moment", "LearningRate"),
          ("ParamOut", "MomentOut"), {"decay": 0.95, "epsilon": 1e-6})
def decayed_adagrad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """m = decay·m + (1 − decay)·g²; p −= lr·g / (√m + ε)."""
    param, grad, m = ins["Param"][0], ins["Grad"][0], ins["Moment"][0]
    xp = xp_of(param)
    lr = _lr(ins, param)
    decay, eps = _f(param, attrs.get("decay", 0.95)), _f(param, attrs.get("epsilon", 1e-6))

    def update(p, g, m):
        m *= decay
        m += (1 - decay) * g * g
        p -= lr * g / (xp.sqrt(m) + eps)

    _apply(update, param, grad, [m])
    return {"ParamOut": [param], "MomentOut": [m]}


@register("ftrl", ("Param", "SquaredAccumulator", "LinearAccumulator", "Grad", "LearningRate"),
          ("ParamOut", "SquaredAccumOut", "LinearAccumOut"),
          {"l1": 0.0, "l2": 0.0, "lr_power": -0.5})
def ftrl(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Follow-the-regularized-leader (Paddle's ftrl_op.h): n' = n + g²;
    z += g − (n'^−lrp − n^−lrp) / lr · p; p = (l1·sign(z) − z) / (n'^−lrp / lr + 2·l2) where
    |z| > l1, else 0."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    sq, lin = ins["SquaredAccumulator"][0], ins["LinearAccumulator"][0]
    xp = xp_of(param)
    lr = _lr(ins, param)
    l1, l2 = _f(param, attrs.get("l1", 0.0)), _f(param, attrs.get("l2", 0.0))
    power = float(attrs.get("lr_power", -0.5))

    def root(a):
        return xp.sqrt(a) if power == -0.5 else a ** param.dtype.type(-power)

    def update(p, g, n, z):
        new_n = n + g * g
        z += g - (root(new_n) - root(n)) / lr * p
        shrink = (l1 * xp.sign(z) - z) / (root(new_n) / lr + 2 * l2)
        p[...] = xp.where(xp.abs(z) > l1, shrink, param.dtype.type(0))
        n[...] = new_n

    _apply(update, param, grad, [sq, lin])
    return {"ParamOut": [param], "SquaredAccumOut": [sq], "LinearAccumOut": [lin]}


@register("lamb",
          ("Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow"),
          ("ParamOut", "Moment1Out", "Moment2Out"),
          {"weight_decay": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6})
def lamb(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Adam's moments without bias correction, r = m1 / (√m2 + ε) + wd·p, scaled by the trust
    ratio ‖p‖ / ‖r‖ (1 when either is 0): p −= lr·ratio·r (Paddle 1.8's lamb_op.h; its
    LambOptimizer passes Beta1Pow/Beta2Pow, "not used in op temporarily", and never advances
    them). A sparse (SelectedRows) gradient is, as in lamb_op.h, merged and then read as zero
    in the rows it lacks: every row's moments decay and the trust ratio covers the whole
    parameter; one without rows updates nothing."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    m1, m2 = ins["Moment1"][0], ins["Moment2"][0]
    if isinstance(grad, SelectedRows):
        if len(grad.rows) == 0:  # lamb_op.h returns before touching anything
            return {"ParamOut": [param], "Moment1Out": [m1], "Moment2Out": [m2]}
        grad = grad.to_dense()
    xp = xp_of(param)
    lr = _lr(ins, param)
    b1, b2 = _f(param, attrs.get("beta1", 0.9)), _f(param, attrs.get("beta2", 0.999))
    eps, wd = _f(param, attrs.get("epsilon", 1e-6)), _f(param, attrs.get("weight_decay", 0.01))
    m1 *= b1
    m1 += (1 - b1) * grad
    m2 *= b2
    m2 += (1 - b2) * grad * grad
    r = m1 / (xp.sqrt(m2) + eps) + wd * param
    p_norm, r_norm = xp.sqrt((param * param).sum()), xp.sqrt((r * r).sum())
    ratio = xp.where((p_norm > 0) & (r_norm > 0), p_norm / r_norm, param.dtype.type(1))
    param -= lr * ratio.astype(param.dtype) * r
    return {"ParamOut": [param], "Moment1Out": [m1], "Moment2Out": [m2]}


#: Paddle's default max_average_window (INT64_MAX)
_INT64_MAX = 2**63 - 1


def _dense_only(op: str, grad: Any) -> None:
    if isinstance(grad, SelectedRows):  # Paddle 1.8 enforces a LoDTensor Grad for these ops
        raise NotImplementedError(f"{op} with a sparse (SelectedRows) gradient is not "
                                  "implemented in dask_fluid (nor in Paddle 1.8)")


@register("adadelta", ("Param", "Grad", "AvgSquaredGrad", "AvgSquaredUpdate"),
          ("ParamOut", "AvgSquaredGradOut", "AvgSquaredUpdateOut"),
          {"rho": 0.95, "epsilon": 1e-6})
def adadelta(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle 1.8's adadelta_op.h: E[g²] = ρ·E[g²] + (1 − ρ)·g²;
    Δ = −√((E[Δ²] + ε) / (E[g²] + ε))·g; E[Δ²] = ρ·E[Δ²] + (1 − ρ)·Δ²; p += Δ.
    The op has no LearningRate input (Fluid's AdadeltaOptimizer never passes one). Dense
    only."""
    param, grad = ins["Param"][0], ins["Grad"][0]
    _dense_only("adadelta", grad)
    g2, u2 = ins["AvgSquaredGrad"][0], ins["AvgSquaredUpdate"][0]
    xp = xp_of(param)
    rho, eps = _f(param, attrs.get("rho", 0.95)), _f(param, attrs.get("epsilon", 1e-6))
    g2 *= rho
    g2 += (1 - rho) * grad * grad
    update = -xp.sqrt((u2 + eps) / (g2 + eps)) * grad
    u2 *= rho
    u2 += (1 - rho) * update * update
    param += update
    return {"ParamOut": [param], "AvgSquaredGradOut": [g2], "AvgSquaredUpdateOut": [u2]}


@register("dpsgd", ("Param", "Grad", "LearningRate"), ("ParamOut",),
          {"clip": 10.0, "batch_size": 16.0, "sigma": 1.0, "seed": 0})
def dpsgd(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Paddle 1.8's dpsgd_op.h (CCS16 differentially private SGD): the whole gradient is
    scaled down to L2 norm ``clip`` when longer, and ONE Gaussian draw ``n ~ N(0, sigma²)``
    (a scalar, as Paddle's Box–Muller draw) is added for the whole tensor:
    p −= lr·(g / max(1, ‖g‖/clip) + n / batch_size). Dense only.

    The draw: Paddle seeds its engine from ``seed`` (re-seeded each run, so a non-zero seed
    gives the same noise every step) or, with seed 0, from ``time(NULL)``. Here a non-zero
    seed does the same (``numpy.random.default_rng(seed)`` per run); with seed 0 the draw
    comes from ``attrs["_rng"]``, the executor's per-op stream seeded by the program's
    ``random_seed`` (reproducible), or a fresh unseeded generator when run without one. The
    scalar is drawn on the host and applied on the parameter's device."""
    import numpy as np  # (this module's kernels otherwise need only the array module)

    param, grad = ins["Param"][0], ins["Grad"][0]
    _dense_only("dpsgd", grad)
    xp = xp_of(param)
    lr = _lr(ins, param)
    clip = float(attrs.get("clip", 10.0))
    batch_size = float(attrs.get("batch_size", 16.0))
    sigma = float(attrs.get("sigma", 1.0))
    seed = int(attrs.get("seed", 0) or 0)
    if seed:
        rng = np.random.default_rng(seed)
    else:
        rng = attrs.get("_rng") or np.random.default_rng()
    noise = float(rng.standard_normal()) * sigma
    # Paddle accumulates the norm in float; a device-side where avoids a host sync
    norm = xp.sqrt((grad.astype(np.float32) ** 2).sum())
    scale = xp.where(norm > np.float32(clip), norm / np.float32(clip), np.float32(1.0))
    param -= lr * (grad / scale.astype(param.dtype) + _f(param, noise / batch_size))
    return {"ParamOut": [param]}


@register("average_accumulates",
          ("param", "in_sum_1", "in_sum_2", "in_sum_3", "in_num_accumulates",
           "in_old_num_accumulates", "in_num_updates"),
          ("out_sum_1", "out_sum_2", "out_sum_3", "out_num_accumulates",
           "out_old_num_accumulates", "out_num_updates"),
          {"average_window": 0.0, "min_average_window": 10000,
           "max_average_window": _INT64_MAX})
def average_accumulates(ins: dict, attrs: dict, outs: tuple) -> dict:
    """ModelAverage's window sums (Paddle 1.8's average_accumulates_op.h), in place as in a
    Fluid program (where each ``out_*`` is the ``in_*`` variable, so later steps read the
    updated sums): sum_1 += param; every 16384 updates sum_2 += sum_1, sum_1 = 0 (precision);
    once num_accumulates ≥ min_average_window and ≥ min(max_average_window,
    ⌊num_updates·average_window⌋) the window restarts: sum_3 = sum_1 + sum_2, sum_1 = sum_2 =
    0, old_num_accumulates = num_accumulates, num_accumulates = 0. The counters are int64
    [1] arrays; both branches are device-side ``where``s, so no host sync."""
    import numpy as np

    param = ins["param"][0]
    s1, s2, s3 = ins["in_sum_1"][0], ins["in_sum_2"][0], ins["in_sum_3"][0]
    n_acc, old_acc = ins["in_num_accumulates"][0], ins["in_old_num_accumulates"][0]
    n_upd = ins["in_num_updates"][0]
    xp = xp_of(param)
    rate = np.float32(attrs.get("average_window", 0.0))
    min_w = int(attrs.get("min_average_window", 10000))
    max_w = int(attrs.get("max_average_window", _INT64_MAX))
    if min_w > max_w:
        raise ValueError(f"average_accumulates: min_average_window ({min_w}) must be <= "
                         f"max_average_window ({max_w})")
    zero = param.dtype.type(0)
    n_upd += 1
    n_acc += 1
    s1 += param
    # Paddle's kMaxNumAccumulates: move sum_1 into sum_2 to limit the float error
    move = (n_upd % 16384 == 0).reshape(())
    s2[...] = xp.where(move, s2 + s1, s2)
    s1[...] = xp.where(move, zero, s1)
    # C++: std::min<int64_t>(max, num_updates * average_window), the product in float
    window = xp.minimum(np.int64(max_w), (n_upd.astype(np.float32) * rate).astype(np.int64))
    restart = ((n_acc >= min_w) & (n_acc >= window)).reshape(())
    s3[...] = xp.where(restart, s1 + s2, s3)
    s1[...] = xp.where(restart, zero, s1)
    s2[...] = xp.where(restart, zero, s2)
    old_acc[...] = xp.where(restart, n_acc, old_acc)
    n_acc[...] = xp.where(restart, np.int64(0), n_acc)
    return {"out_sum_1": [s1], "out_sum_2": [s2], "out_sum_3": [s3],
            "out_num_accumulates": [n_acc], "out_old_num_accumulates": [old_acc],
            "out_num_updates": [n_upd]}
