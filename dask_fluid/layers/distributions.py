"""Fluid 1.8's layers/distributions.py: Uniform, Normal, Categorical, MultivariateNormalDiag.

Pure Python compositions of existing layers, op for op as Fluid 1.8 builds them: numbers,
lists and numpy arrays become float32 ``assign_value`` constants broadcast against each other;
Variables are used as given (then every parameter must be a Variable).
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..framework import Variable
from .nn import _binary_op, elementwise_pow, log, matmul, reduce_max, reduce_prod, reduce_sum
from .nn import exp as _exp
from .sampling import (
    gaussian_random,
    gaussian_random_batch_size_like,
    uniform_random,
    uniform_random_batch_size_like,
)
from .tensor import assign, cast, fill_constant_batch_size_like, less_than, ones, reshape, zeros

__all__: list[str] = ["Uniform", "Normal", "Categorical", "MultivariateNormalDiag"]


def _check_type(value: Any, arg: str, types: tuple, where: str) -> None:
    # bool is an int, and Fluid's check_type refuses it for the int ``seed`` too
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = ", ".join(t.__name__ for t in types)
        raise TypeError(f"{where}: {arg} must be one of ({names}), got "
                        f"{type(value).__name__} {value!r}")


def _check_float_var(value: Any, arg: str, where: str) -> None:
    if not isinstance(value, Variable):
        raise TypeError(f"{where}: {arg} must be a Variable, got {type(value).__name__}")
    if str(value.dtype) not in ("float32", "float64"):
        raise TypeError(f"{where}: {arg} must be float32 or float64, got {value.dtype}")


def _arith(a: Any, b: Any, op_type: str) -> Variable:
    """``a <op> b`` with a Variable on either side, as the operators build it."""
    if isinstance(a, Variable):
        return _binary_op(a, b, op_type, False)
    return _binary_op(b, a, op_type, True)


def _add(a: Any, b: Any) -> Variable:
    return _arith(a, b, "elementwise_add")


def _sub(a: Any, b: Any) -> Variable:
    return _arith(a, b, "elementwise_sub")


def _mul(a: Any, b: Any) -> Variable:
    return _arith(a, b, "elementwise_mul")


def _div(a: Any, b: Any) -> Variable:
    return _arith(a, b, "elementwise_div")


class Distribution:
    """The abstract base class of Fluid 1.8's probability distributions: ``sample``,
    ``entropy``, ``kl_divergence`` and ``log_prob`` raise ``NotImplementedError`` here."""

    def sample(self, *args: Any, **kwargs: Any) -> Variable:
        """Samples from the distribution."""
        raise NotImplementedError(f"{type(self).__name__}.sample is not implemented")

    def entropy(self) -> Variable:
        """The entropy of the distribution."""
        raise NotImplementedError(f"{type(self).__name__}.entropy is not implemented")

    def kl_divergence(self, other: Distribution) -> Variable:
        """The KL divergence between this distribution and ``other``."""
        raise NotImplementedError(f"{type(self).__name__}.kl_divergence is not implemented")

    def log_prob(self, value: Variable) -> Variable:
        """The log probability density / mass of ``value``."""
        raise NotImplementedError(f"{type(self).__name__}.log_prob is not implemented")

    def _validate_args(self, *args: Any) -> bool:
        """True when the arguments are Variables; mixing Variables and numbers is an error."""
        is_variable = any(isinstance(a, Variable) for a in args)
        if is_variable and not all(isinstance(a, Variable) for a in args):
            raise ValueError(f"{type(self).__name__}: if one argument is Variable, all "
                             f"arguments should be Variable, got "
                             f"{[type(a).__name__ for a in args]}")
        return is_variable

    def _to_variable(self, *args: Any) -> tuple[Variable, ...]:
        """Numbers, lists and arrays as float32 constants broadcast to their common shape
        (Fluid 1.8 converts other dtypes to float32 with a warning)."""
        numpy_args = []
        tmp: Any = 0.0
        for arg in args:
            if not isinstance(arg, (float, list, np.ndarray)):
                raise TypeError(f"{type(self).__name__}: arguments must be float, list, "
                                f"numpy.ndarray or Variable, got {type(arg).__name__}")
            arg_np = np.array(np.zeros(1) + arg if isinstance(arg, float) else arg)
            if str(arg_np.dtype) != "float32":
                warnings.warn("data type of argument only support float32, your argument will "
                              "be convert to float32.", stacklevel=3)
                arg_np = arg_np.astype("float32")
            tmp = tmp + arg_np
            numpy_args.append(arg_np)
        return tuple(assign(np.ascontiguousarray(np.broadcast_arrays(a, tmp)[0]))
                     for a in numpy_args)


class Uniform(Distribution):
    """The uniform distribution on ``[low, high)`` (Fluid 1.8's ``layers.Uniform``):
    ``low`` and ``high`` are floats, lists, numpy arrays or Variables that broadcast."""

    def __init__(self, low: Any, high: Any) -> None:
        _check_type(low, "low", (float, np.ndarray, Variable, list), "Uniform")
        _check_type(high, "high", (float, np.ndarray, Variable, list), "Uniform")
        self.all_arg_is_float = False
        self.batch_size_unknown = False
        if self._validate_args(low, high):
            self.batch_size_unknown = True
            self.low, self.high = low, high
        else:
            self.all_arg_is_float = isinstance(low, float) and isinstance(high, float)
            self.low, self.high = self._to_variable(low, high)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape`` (just ``shape`` when both parameters are
        floats): ``uniform_random`` on [0, 1) scaled by ``high - low``, plus ``low``."""
        _check_type(shape, "shape", (list,), "sample")
        _check_type(seed, "seed", (int,), "sample")
        batch_shape = list(_add(self.low, self.high).shape)
        output_shape = shape + batch_shape
        if self.batch_size_unknown:
            # Fluid 1.8 draws [batch..., shape...] sized from the run-time batch and then
            # reshapes (not transposes) it to shape + batch_shape
            zero_tmp = fill_constant_batch_size_like(_add(self.low, self.high),
                                                     batch_shape + shape, self.low.dtype, 0.0)
            uniform_random_tmp = uniform_random_batch_size_like(
                zero_tmp, zero_tmp.shape, dtype=self.low.dtype, min=0.0, max=1.0, seed=seed)
            output = _add(_mul(uniform_random_tmp, _sub(_add(zero_tmp, self.high), self.low)),
                          self.low)
            return reshape(output, output_shape)
        output = _add(_mul(uniform_random(output_shape, dtype=self.low.dtype, min=0.0,
                                          max=1.0, seed=seed),
                           _add(zeros(output_shape, dtype=self.low.dtype),
                                _sub(self.high, self.low))),
                      self.low)
        return reshape(output, shape) if self.all_arg_is_float else output

    def log_prob(self, value: Variable) -> Variable:
        """``log(1[low < value < high]) - log(high - low)`` (``-inf`` outside)."""
        _check_float_var(value, "value", "log_prob")
        lb = cast(less_than(self.low, value), dtype=value.dtype)
        ub = cast(less_than(value, self.high), dtype=value.dtype)
        return _sub(log(_mul(lb, ub)), log(_sub(self.high, self.low)))

    def entropy(self) -> Variable:
        """``log(high - low)`` nats."""
        return log(_sub(self.high, self.low))


class Normal(Distribution):
    """The normal distribution N(loc, scale²) (Fluid 1.8's ``layers.Normal``): ``loc`` and
    ``scale`` are floats, lists, numpy arrays or Variables that broadcast."""

    def __init__(self, loc: Any, scale: Any) -> None:
        _check_type(loc, "loc", (float, np.ndarray, Variable, list), "Normal")
        _check_type(scale, "scale", (float, np.ndarray, Variable, list), "Normal")
        self.batch_size_unknown = False
        self.all_arg_is_float = False
        if self._validate_args(loc, scale):
            self.batch_size_unknown = True
            self.loc, self.scale = loc, scale
        else:
            self.all_arg_is_float = isinstance(loc, float) and isinstance(scale, float)
            self.loc, self.scale = self._to_variable(loc, scale)

    def sample(self, shape: list[int], seed: int = 0) -> Variable:
        """Samples of shape ``shape + batch_shape`` (just ``shape`` when both parameters are
        floats): standard normal draws times ``scale`` plus ``loc``."""
        _check_type(shape, "shape", (list,), "sample")
        _check_type(seed, "seed", (int,), "sample")
        batch_shape = list(_add(self.loc, self.scale).shape)
        output_shape = shape + batch_shape
        if self.batch_size_unknown:
            zero_tmp = fill_constant_batch_size_like(_add(self.loc, self.scale),
                                                     batch_shape + shape, self.loc.dtype, 0.0)
            normal_random_tmp = gaussian_random_batch_size_like(
                zero_tmp, zero_tmp.shape, mean=0.0, std=1.0, seed=seed, dtype=self.loc.dtype)
            output = _add(_mul(normal_random_tmp, _add(zero_tmp, self.scale)), self.loc)
            return reshape(output, output_shape)
        output = _add(_mul(gaussian_random(output_shape, mean=0.0, std=1.0, seed=seed,
                                           dtype=self.loc.dtype),
                           _add(zeros(output_shape, dtype=self.loc.dtype), self.scale)),
                      self.loc)
        return reshape(output, shape) if self.all_arg_is_float else output

    def entropy(self) -> Variable:
        """``0.5 + 0.5 log(2 pi) + log(scale)`` nats, of the broadcast batch shape."""
        batch_shape = list(_add(self.loc, self.scale).shape)
        zero_tmp = fill_constant_batch_size_like(_add(self.loc, self.scale), batch_shape,
                                                 self.loc.dtype, 0.0)
        return _add(0.5 + 0.5 * math.log(2 * math.pi), log(_add(self.scale, zero_tmp)))

    def log_prob(self, value: Variable) -> Variable:
        """``-(value - loc)² / (2 scale²) - log(scale) - log(sqrt(2 pi))``."""
        _check_float_var(value, "value", "log_prob")
        var = _mul(self.scale, self.scale)
        log_scale = log(self.scale)
        diff = _sub(value, self.loc)
        return _sub(_sub(_div(_mul(-1.0, _mul(diff, diff)), _mul(2.0, var)), log_scale),
                    math.log(math.sqrt(2.0 * math.pi)))

    def kl_divergence(self, other: Normal) -> Variable:
        """KL(self || other) = ``0.5 (r + t - 1 - log r)`` with ``r = (scale / other.scale)²``
        and ``t = ((loc - other.loc) / other.scale)²``."""
        _check_type(other, "other", (Normal,), "kl_divergence")
        var_ratio = _div(self.scale, other.scale)
        var_ratio = _mul(var_ratio, var_ratio)
        t1 = _div(_sub(self.loc, other.loc), other.scale)
        t1 = _mul(t1, t1)
        return _mul(0.5, _sub(_sub(_add(var_ratio, t1), 1.0), log(var_ratio)))


class Categorical(Distribution):
    """The categorical distribution over the last axis of ``logits`` (Fluid 1.8's
    ``layers.Categorical``): ``logits`` is a list, numpy array or Variable."""

    def __init__(self, logits: Any) -> None:
        _check_type(logits, "logits", (np.ndarray, Variable, list), "Categorical")
        if self._validate_args(logits):
            self.logits = logits
        else:
            self.logits = self._to_variable(logits)[0]

    def _normalized(self, logits: Variable) -> tuple[Variable, Variable, Variable]:
        # shifted by the max so exp cannot overflow
        shifted = _sub(logits, reduce_max(logits, dim=-1, keep_dim=True))
        e_logits = _exp(shifted)
        return shifted, e_logits, reduce_sum(e_logits, dim=-1, keep_dim=True)

    def kl_divergence(self, other: Categorical) -> Variable:
        """``sum(p (log p - log q), -1)`` keeping the last axis as 1."""
        _check_type(other, "other", (Categorical,), "kl_divergence")
        logits, e_logits, z = self._normalized(self.logits)
        other_logits, _, other_z = self._normalized(other.logits)
        prob = _div(e_logits, z)
        gap = _add(_sub(_sub(logits, log(z)), other_logits), log(other_z))
        return reduce_sum(_mul(prob, gap), dim=-1, keep_dim=True)

    def entropy(self) -> Variable:
        """``-sum(p log p, -1)`` nats, keeping the last axis as 1."""
        logits, e_logits, z = self._normalized(self.logits)
        prob = _div(e_logits, z)
        return _mul(-1.0, reduce_sum(_mul(prob, _sub(logits, log(z))), dim=-1, keep_dim=True))


class MultivariateNormalDiag(Distribution):
    """A multivariate normal with mean ``loc`` ``[k]`` and diagonal covariance matrix
    ``scale`` ``[k, k]`` (Fluid 1.8's ``layers.MultivariateNormalDiag``; as there, ``scale``
    is used as the covariance: the entropy and KL read its diagonal as variances)."""

    def __init__(self, loc: Any, scale: Any) -> None:
        _check_type(loc, "loc", (np.ndarray, Variable, list), "MultivariateNormalDiag")
        _check_type(scale, "scale", (np.ndarray, Variable, list), "MultivariateNormalDiag")
        if self._validate_args(loc, scale):
            self.loc, self.scale = loc, scale
        else:
            # converted one by one: Fluid 1.8 broadcasts loc [k] against scale [k, k] here,
            # which turns the KL's quadratic form into a [k, k] matrix of wrong values
            self.loc, self.scale = self._to_variable(loc)[0], self._to_variable(scale)[0]
        shape = list(self.scale.shape or ())
        if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 0:
            raise ValueError(f"MultivariateNormalDiag: scale must be a [k, k] matrix of known "
                             f"k, got shape {shape}")

    def _eye(self, k: int) -> Variable:
        # Fluid 1.8 builds tensor.diag(tensor.ones([k])); the same constant as assign_value
        eye = assign(np.eye(k, dtype=str(self.loc.dtype)))
        eye.stop_gradient = True
        return eye

    def _det(self, value: Variable) -> Variable:
        """The product of the diagonal (off-diagonal zeros replaced by ones)."""
        batch_shape = list(value.shape)
        one_all = ones(shape=batch_shape, dtype=self.loc.dtype)
        return reduce_prod(_sub(_add(value, one_all), self._eye(batch_shape[0])))

    def _inv(self, value: Variable) -> Variable:
        """The diagonal inverted elementwise: ``value ** (1 - 2 I)`` (off-diagonal 0¹ = 0)."""
        batch_shape = list(value.shape)
        one_all = ones(shape=batch_shape, dtype=self.loc.dtype)
        exponent = _sub(one_all, _mul(2.0, self._eye(batch_shape[0])))
        exponent.stop_gradient = True  # a constant (its gradient would take log 0)
        return elementwise_pow(value, exponent)

    def entropy(self) -> Variable:
        """``0.5 (k (1 + log 2 pi) + log det scale)`` nats, shape ``[1]``."""
        return _mul(0.5, _add(self.scale.shape[0] * (1.0 + math.log(2 * math.pi)),
                              log(self._det(self.scale))))

    def kl_divergence(self, other: MultivariateNormalDiag) -> Variable:
        """``0.5 (tr(S2⁻¹ S1) + d S2⁻¹ d - k + log det S2 - log det S1)``, ``d`` the mean
        difference."""
        _check_type(other, "other", (MultivariateNormalDiag,), "kl_divergence")
        tr_cov_matmul = reduce_sum(_mul(self._inv(other.scale), self.scale))
        loc_matmul_cov = matmul(_sub(other.loc, self.loc), self._inv(other.scale))
        tri_matmul = matmul(loc_matmul_cov, _sub(other.loc, self.loc))
        k = list(self.scale.shape)[0]
        ln_cov = _sub(log(self._det(other.scale)), log(self._det(self.scale)))
        return _mul(0.5, _add(_sub(_add(tr_cov_matmul, tri_matmul), k), ln_cov))
