"""``fluid.dygraph`` learning-rate decays (Fluid 1.8's ``dygraph/learning_rate_scheduler.py``).

An optimizer given one of these as ``learning_rate`` calls it once per ``minimize``: the call
returns that step's rate as a ``[1]`` dygraph variable and advances the step counter by
``step``. The epoch decays (``StepDecay``, ``MultiStepDecay``, ``LambdaDecay``) change their
rate only when ``epoch()`` is called, and ``ReduceLROnPlateau`` when ``step(loss)`` is.

Followed: Paddle 1.8's classes, arguments, defaults and state keys (the stored Paddle source is
newer; where it differs, 1.8 wins). Fluid builds each step's rate from float32 ops on
``[1]`` variables; here the 1.8 formula is evaluated in Python floats (double) and the result
rounded once to the decay's ``dtype``, so values agree with Fluid's to float32 rounding.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import unique_name
from ..framework import Variable, _dygraph_tracer
from ..layers.learning_rate_scheduler import register_dygraph_decays

__all__ = [
    "CosineDecay", "ExponentialDecay", "InverseTimeDecay", "LambdaDecay", "LearningRateDecay",
    "LinearLrWarmup", "MultiStepDecay", "NaturalExpDecay", "NoamDecay", "PiecewiseDecay",
    "PolynomialDecay", "ReduceLROnPlateau", "StepDecay",
]

_DTYPES = ("float16", "float32", "float64")


# -- argument checks ---------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _number(name: str, value: Any) -> float:
    if not _is_number(value):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _positive(name: str, value: Any) -> float:
    v = _number(name, value)
    if not v > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return v


def _rate_value(name: str, value: Any) -> float | Variable:
    """A learning rate given as a number or as a one-element variable (Fluid 1.8 accepts both
    for the step decays); a variable is read at each step."""
    if isinstance(value, Variable):
        shape = value.shape
        if shape is None or int(np.prod(shape)) != 1:
            raise ValueError(f"{name} given as a variable must hold one value, got shape "
                             f"{None if shape is None else list(shape)}")
        return value
    return _number(name, value)


def _as_float(value: float | Variable) -> float:
    return float(np.asarray(value.numpy()).reshape(-1)[0]) if isinstance(value, Variable) \
        else float(value)


# -- the base classes ----------------------------------------------------------------------------
class LearningRateDecay:
    """Base of the step decays: ``__call__`` gives the rate of step ``step_num`` and advances
    ``step_num`` by ``step``.

    Parameters
    ----------
    begin : int, default 0
        The first step number.
    step : int, default 1
        How much each call advances the step number.
    dtype : str, default "float32"
        The rate variable's dtype.
    """

    def __init__(self, begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        if not _is_number(begin):
            raise TypeError(f"begin must be a number, got {type(begin).__name__}")
        if not _is_number(step):
            raise TypeError(f"step must be a number, got {type(step).__name__}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
        self.step_num = begin
        self.step_size = step
        self.dtype = dtype

    def __call__(self) -> Variable:
        """This step's rate as a ``[1]`` variable; the step number moves on by ``step``."""
        lr = self.step()
        if not isinstance(lr, Variable):  # 1.8 wraps floats only; an int rate is a rate too
            lr = self.create_lr_var(lr)
        self.step_num += self.step_size
        return lr

    def create_lr_var(self, lr: float) -> Variable:
        """A ``[1]`` dygraph variable of the decay's dtype holding ``lr``.

        Raises
        ------
        RuntimeError
            Outside ``fluid.dygraph.guard``.
        """
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError(f"{type(self).__name__} makes dygraph variables: call it "
                               "inside fluid.dygraph.guard()")
        value = tracer.executor.to_place(np.array([float(lr)], dtype=self.dtype))
        return tracer.wrap(value, name=unique_name.generate("learning_rate"))

    def step(self) -> float | Variable:
        """The rate of step ``step_num`` (without advancing it)."""
        raise NotImplementedError(f"{type(self).__name__}.step: a LearningRateDecay subclass "
                                  "defines the rate of a step")

    # -- state (what optimizer.state_dict saves under "LR_Scheduler") ----------------------------
    def _state_keys(self) -> list[str]:
        return ["step_num"]

    def state_dict(self) -> dict[str, Any]:
        """The decay's state: its attributes named by ``_state_keys`` (a one-value variable
        as a float, as 1.8 stores it as a number)."""
        out: dict[str, Any] = {}
        for key in self._state_keys():
            if key not in self.__dict__:
                continue
            value = self.__dict__[key]
            if isinstance(value, Variable):
                value = _as_float(value)
            out[key] = value
        return out

    def set_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        Raises
        ------
        TypeError
            ``state_dict`` is not a mapping.
        RuntimeError
            A key of the state is missing (as Fluid 1.8).
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        keys = self._state_keys()
        for key in keys:
            if key not in state_dict:
                raise RuntimeError("Please check whether state_dict is correct for optimizer. "
                                   f"Can't find [ {key} ] in state_dict")
        for key in keys:
            value = state_dict[key]
            if isinstance(value, np.generic):  # a numpy scalar from an older file
                value = value.item()
            self.__dict__[key] = value
        if len(state_dict) > len(keys):
            warnings.warn("There are some unused values in state_dict. Maybe the optimizer have "
                          "different 'LearningRateDecay' when invoking state_dict and set_dict",
                          stacklevel=2)

    set_state_dict = set_dict

    # -- what an optimizer with this learning rate saves and restores (its state_dict,
    # set_dict, current_step_lr call these: the optimizer sits below this module) --------------
    #: whether the optimizer saves the step number as "global_step" (1.8: not for epoch decays)
    _saves_global_step = True

    def _optimizer_state(self, tracer: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"LR_Scheduler": self.state_dict()}
        if self._saves_global_step:
            step = tracer.executor.to_place(np.array([self.step_num], dtype="int32"))
            out["global_step"] = tracer.wrap(step, name="global_step")
        return out

    def _restore_optimizer_state(self, state_dict: Mapping[str, Any],
                                 as_array: Callable[[str, Any], np.ndarray]) -> None:
        if "LR_Scheduler" not in state_dict:
            raise RuntimeError("the optimizer's learning rate is a LearningRateDecay, but "
                               "state_dict has no 'LR_Scheduler' entry")
        self.set_dict(state_dict["LR_Scheduler"])
        if self._saves_global_step:
            if "global_step" not in state_dict:
                raise RuntimeError("Global step not in state dict, Dygraph use "
                                   "LearningRateDecay, global_step must in state_dict")
            step = as_array("global_step", state_dict["global_step"])
            if step.shape != (1,):
                raise ValueError(f"global step shape is (1,), the shape is {step.shape}")
            self.step_num = int(step[0])

    def _next_rate(self) -> float | Variable:
        """The rate the next ``minimize`` takes, nothing advanced (1.8's
        ``current_step_lr`` before the first step)."""
        return self.step()


class _HeldRate(LearningRateDecay):
    """A decay whose rate changes when it is told (an epoch, a loss), not per step: it holds
    the rate in ``learning_rate`` and calling it advances nothing."""

    learning_rate: float | Variable

    def __call__(self) -> Variable:
        """The current rate as a ``[1]`` variable."""
        if not isinstance(self.learning_rate, Variable):
            self.learning_rate = self.create_lr_var(self.learning_rate)
        return self.learning_rate

    def _next_rate(self) -> float | Variable:
        return self()


class _LearningRateEpochDecay(_HeldRate):
    """Base of the epoch decays (1.8): the rate changes when :meth:`epoch` is called, and
    ``__call__`` returns the current one without advancing anything."""

    def __init__(self, learning_rate: float, dtype: str | None = None) -> None:
        if not _is_number(learning_rate):
            raise TypeError("The type of 'learning_rate' must be 'float, int', but received "
                            f"{type(learning_rate).__name__}.")
        if learning_rate < 0:
            raise ValueError(f"Invalid learning rate: {learning_rate}")
        dtype = "float32" if dtype is None else dtype
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
        self.dtype = dtype
        self.base_lr = float(learning_rate)
        self.epoch_num = -1
        # a float until the optimizer asks (1.8 wraps it lazily in __call__ the same way)
        self.learning_rate: float | Variable = self.base_lr
        self.epoch()

    _saves_global_step = False

    def _state_keys(self) -> list[str]:
        return ["epoch_num", "learning_rate"]


    def epoch(self, epoch: int | None = None) -> None:
        """Move to the next epoch (or to ``epoch``) and compute its rate."""
        if epoch is None:
            self.epoch_num += 1
        else:
            if not isinstance(epoch, numbers.Integral) or isinstance(epoch, bool):
                raise TypeError(f"epoch must be an int, got {type(epoch).__name__}")
            self.epoch_num = int(epoch)
        self.learning_rate = float(self.get_lr())

    def step(self) -> float | Variable:
        """The current rate (epoch decays move on with :meth:`epoch`, not per step)."""
        return self.learning_rate

    def get_lr(self) -> float:
        """The rate of epoch ``epoch_num``."""
        raise NotImplementedError(f"{type(self).__name__}.get_lr: an epoch decay defines the "
                                  "rate of an epoch")


# -- step decays -------------------------------------------------------------------------------
class PiecewiseDecay(LearningRateDecay):
    """``values[i]`` while ``step_num < boundaries[i]``, ``values[-1]`` after the last.

    Parameters
    ----------
    boundaries : list of int
        Increasing step numbers.
    values : list of float
        ``len(boundaries) + 1`` rates.
    begin : int
        The first step number (no default, as in 1.8).
    step : int, default 1
    dtype : str, default "float32"
    """

    def __init__(self, boundaries: Sequence[float], values: Sequence[float], begin: int,
                 step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        if not isinstance(boundaries, Sequence) or not isinstance(values, Sequence):
            raise TypeError("boundaries and values must be lists")
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"PiecewiseDecay needs len(values) == len(boundaries) + 1, got "
                             f"{len(values)} values and {len(boundaries)} boundaries")
        if list(boundaries) != sorted(boundaries):
            raise ValueError(f"PiecewiseDecay boundaries must increase, got {list(boundaries)}")
        self.boundaries = list(boundaries)
        self.values = [_number("values[i]", v) for v in values]
        self.vars = list(self.values)

    def step(self) -> float | Variable:
        for boundary, value in zip(self.boundaries, self.vars, strict=False):
            if self.step_num < boundary:
                return value  # 1.8 returns the float here, a variable after the last boundary
        return self.create_lr_var(self.vars[-1])


class _RatioDecay(LearningRateDecay):
    """The decays of ``ratio = step_num / decay_steps`` (floored when ``staircase``)."""

    def __init__(self, learning_rate: float | Variable, decay_steps: int, decay_rate: float,
                 staircase: bool = False, begin: int = 0, step: int = 1,
                 dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        self.learning_rate = _rate_value("learning_rate", learning_rate)
        self.decay_steps = _positive("decay_steps", decay_steps)
        self.decay_rate = _number("decay_rate", decay_rate)
        self.staircase = bool(staircase)

    def _ratio(self) -> float:
        ratio = self.step_num / self.decay_steps
        return math.floor(ratio) if self.staircase else ratio

    def _decayed(self, lr: float, ratio: float) -> float:
        raise NotImplementedError(f"{type(self).__name__}._decayed")

    def step(self) -> Variable:
        return self.create_lr_var(self._decayed(_as_float(self.learning_rate), self._ratio()))


class NaturalExpDecay(_RatioDecay):
    """``learning_rate * exp(-decay_rate * ratio)``, ``ratio = step_num / decay_steps``
    (floored when ``staircase``).

    Parameters
    ----------
    learning_rate : float or Variable
    decay_steps : int
    decay_rate : float
    staircase : bool, default False
    begin : int, default 0
    step : int, default 1
    dtype : str, default "float32"
    """

    def _decayed(self, lr: float, ratio: float) -> float:
        return lr * math.exp(-self.decay_rate * ratio)


class ExponentialDecay(_RatioDecay):
    """``learning_rate * decay_rate ** ratio``, ``ratio = step_num / decay_steps`` (floored
    when ``staircase``). Arguments as :class:`NaturalExpDecay`."""

    def _decayed(self, lr: float, ratio: float) -> float:
        return lr * self.decay_rate ** ratio


class InverseTimeDecay(_RatioDecay):
    """``learning_rate / (1 + decay_rate * ratio)``, ``ratio = step_num / decay_steps``
    (floored when ``staircase``). Arguments as :class:`NaturalExpDecay`."""

    def _decayed(self, lr: float, ratio: float) -> float:
        return lr / (1 + self.decay_rate * ratio)


class PolynomialDecay(LearningRateDecay):
    """``(learning_rate - end_learning_rate) * (1 - s / d) ** power + end_learning_rate``.

    Without ``cycle``, ``s = min(step_num, decay_steps)`` and ``d = decay_steps``; with it,
    ``s = step_num`` and ``d = decay_steps * ceil(step_num / decay_steps)`` (1 at step 0).

    Parameters
    ----------
    learning_rate : float or Variable
    decay_steps : int
    end_learning_rate : float, default 0.0001
    power : float, default 1.0
    cycle : bool, default False
    begin : int, default 0
    step : int, default 1
    dtype : str, default "float32"
    """

    def __init__(self, learning_rate: float | Variable, decay_steps: int,
                 end_learning_rate: float = 0.0001, power: float = 1.0, cycle: bool = False,
                 begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        self.learning_rate = _rate_value("learning_rate", learning_rate)
        self.decay_steps = _positive("decay_steps", decay_steps)
        self.end_learning_rate = _number("end_learning_rate", end_learning_rate)
        self.power = _number("power", power)
        self.cycle = bool(cycle)

    def step(self) -> Variable:
        step_num, decay_steps = self.step_num, self.decay_steps
        if self.cycle:
            div = math.ceil(step_num / decay_steps) if step_num != 0 else 1.0
            decay_steps = decay_steps * div
        else:
            step_num = min(step_num, decay_steps)
        lr = _as_float(self.learning_rate)
        return self.create_lr_var((lr - self.end_learning_rate) *
                                  (1 - step_num / decay_steps) ** self.power +
                                  self.end_learning_rate)


class CosineDecay(LearningRateDecay):
    """``learning_rate * 0.5 * (cos(floor(step_num / step_each_epoch) * pi / epochs) + 1)``.

    Parameters
    ----------
    learning_rate : float or Variable
    step_each_epoch : int
    epochs : int
    begin : int, default 0
    step : int, default 1
    dtype : str, default "float32"
    """

    def __init__(self, learning_rate: float | Variable, step_each_epoch: int, epochs: int,
                 begin: int = 0, step: int = 1, dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        self.learning_rate = _rate_value("learning_rate", learning_rate)
        self.step_each_epoch = _positive("step_each_epoch", step_each_epoch)
        self.epochs = _positive("epochs", epochs)

    def step(self) -> Variable:
        cur_epoch = math.floor(self.step_num / self.step_each_epoch)
        return self.create_lr_var(_as_float(self.learning_rate) * 0.5 *
                                  (math.cos(cur_epoch * math.pi / self.epochs) + 1))


class NoamDecay(LearningRateDecay):
    """``learning_rate * d_model ** -0.5 * min(step_num ** -0.5,
    warmup_steps ** -1.5 * step_num)`` (the Transformer's schedule; steps count from 1).

    Parameters
    ----------
    d_model : int
    warmup_steps : int
    begin : int, default 1
        Must be >= 1 (``step_num ** -0.5`` at 0 is infinite).
    step : int, default 1
    dtype : str, default "float32"
    learning_rate : float or Variable, default 1.0
    """

    def __init__(self, d_model: float, warmup_steps: float, begin: int = 1, step: int = 1,
                 dtype: str = "float32", learning_rate: float | Variable = 1.0) -> None:
        super().__init__(begin, step, dtype)
        if begin <= 0:
            raise ValueError(f"NoamDecay counts steps from 1: begin must be >= 1, got {begin}")
        self.learning_rate = _rate_value("learning_rate", learning_rate)
        self.d_model = _positive("d_model", d_model)
        self.warmup_steps = _positive("warmup_steps", warmup_steps)

    def step(self) -> Variable:
        a = self.step_num ** -0.5
        b = self.warmup_steps ** -1.5 * self.step_num
        return self.create_lr_var(_as_float(self.learning_rate) * self.d_model ** -0.5 *
                                  min(a, b))


class LinearLrWarmup(LearningRateDecay):
    """``start_lr + (end_lr - start_lr) * step_num / warmup_steps`` while
    ``step_num < warmup_steps``, then ``learning_rate`` (a number, or a decay that is called
    each step, warm-up steps included, as 1.8 does).

    Parameters
    ----------
    learning_rate : float, int or LearningRateDecay
    warmup_steps : int
    start_lr : float
    end_lr : float
        Greater than ``start_lr``.
    begin : int, default 1
    step : int, default 1
    dtype : str, default "float32"
    """

    def __init__(self, learning_rate: float | LearningRateDecay, warmup_steps: int,
                 start_lr: float, end_lr: float, begin: int = 1, step: int = 1,
                 dtype: str = "float32") -> None:
        super().__init__(begin, step, dtype)
        if not (_is_number(learning_rate) or isinstance(learning_rate, LearningRateDecay)):
            raise TypeError("the type of learning_rate should be [int, float or "
                            f"LearningRateDecay], the current type is "
                            f"{type(learning_rate).__name__}")
        self.learning_rate = learning_rate
        self.warmup_steps = _positive("warmup_steps", warmup_steps)
        self.start_lr = _number("start_lr", start_lr)
        end_lr = _number("end_lr", end_lr)
        if not end_lr > self.start_lr:
            raise ValueError(f"end_lr {end_lr} must be greater than start_lr {self.start_lr}")
        self.lr_ratio_before_warmup = (end_lr - self.start_lr) / self.warmup_steps

    def step(self) -> float | Variable:
        base_lr = self.learning_rate
        if isinstance(base_lr, LearningRateDecay):
            base_lr = base_lr()  # 1.8: the wrapped decay advances on every step
        if self.step_num < self.warmup_steps:
            return self.lr_ratio_before_warmup * self.step_num + self.start_lr
        return base_lr


class ReduceLROnPlateau(_HeldRate):
    """Multiply the rate by ``decay_rate`` when the loss given to :meth:`step` has not improved
    for more than ``patience`` calls (then wait ``cooldown`` calls).

    Parameters
    ----------
    learning_rate : float, int or Variable
    mode : {"min", "max"}, default "min"
        Whether a lower (``min``) or higher (``max``) loss is an improvement.
    decay_rate : float, default 0.1
        Below 1.
    patience : int, default 10
    verbose : bool, default False
        Print each reduction.
    threshold : float, default 1e-4
    threshold_mode : {"rel", "abs"}, default "rel"
        An improvement beats the best loss by ``best * threshold`` (``rel``) or ``threshold``.
    cooldown : int, default 0
    min_lr : float, default 0
    eps : float, default 1e-8
        Reductions smaller than this are skipped.
    dtype : str, default "float32"
    """

    def __init__(self, learning_rate: float | Variable, mode: str = "min",
                 decay_rate: float = 0.1, patience: int = 10, verbose: bool = False,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float = 0, eps: float = 1e-8, dtype: str = "float32") -> None:
        super().__init__(dtype=dtype)
        if not isinstance(mode, str) or mode.lower() not in ("min", "max"):
            raise ValueError(f"mode {mode!r} is unknown: give 'min' or 'max'")
        self.mode = mode.lower()
        if _number("decay_rate", decay_rate) >= 1.0:
            raise ValueError("new_lr = origin_lr * decay_rate and decay_rate should be < 1.0.")
        self.decay_rate = float(decay_rate)
        if not isinstance(threshold_mode, str) or threshold_mode.lower() not in ("rel", "abs"):
            raise ValueError(f"threshold mode {threshold_mode!r} is unknown: give 'rel' or "
                             "'abs'")
        self.threshold_mode = threshold_mode.lower()
        if not (_is_number(learning_rate) or isinstance(learning_rate, Variable)):
            raise TypeError("The type of 'learning_rate' in 'ReduceLROnPlateau' must be "
                            f"'float, int, Variable', but received {type(learning_rate).__name__}.")
        self.learning_rate: float | Variable = _rate_value("learning_rate", learning_rate)
        self.verbose = bool(verbose)
        _number("patience", patience)
        _number("cooldown", cooldown)
        self.patience = patience
        self.threshold = _number("threshold", threshold)
        self.cooldown = cooldown
        self.min_lr = _number("min_lr", min_lr)
        self.eps = _number("eps", eps)
        self.cooldown_counter = 0
        self.best_loss: float | None = None
        self.num_bad_epochs = 0
        self.epoch_num = 0

    def _state_keys(self) -> list[str]:
        return ["cooldown_counter", "best_loss", "num_bad_epochs", "epoch_num", "learning_rate"]


    def step(self, loss: Variable) -> None:  # type: ignore[override]
        """Record one epoch's ``loss`` (a one-value variable) and reduce the rate when it has
        stopped improving; the optimizer's next ``minimize`` uses the new rate.

        Raises
        ------
        TypeError
            ``loss`` is not a variable.
        ValueError
            ``loss`` holds more than one value.
        """
        if not isinstance(loss, Variable):
            raise TypeError(f"ReduceLROnPlateau.step: loss must be a Variable, got "
                            f"{type(loss).__name__}")
        if loss.shape is None or int(np.prod(loss.shape)) != 1:
            raise ValueError("the loss given to ReduceLROnPlateau.step must hold one value, "
                             f"its shape is {loss.shape}: call fluid.layers.mean first")
        current = _as_float(loss)
        self.epoch_num += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self.best_loss is None or self._is_better(current, self.best_loss):
            self.best_loss = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
            old_lr = _as_float(self.learning_rate)
            new_lr = max(old_lr * self.decay_rate, self.min_lr)
            if old_lr - new_lr > self.eps:
                if self.verbose:
                    print(f"Epoch {self.epoch_num}: reducing learning rate from {old_lr} to "
                          f"{new_lr}.")
                self.learning_rate = new_lr

    def _is_better(self, current: float, best: float) -> bool:
        if self.mode == "min":
            margin = best * self.threshold if self.threshold_mode == "rel" else self.threshold
            return current < best - margin
        margin = best * self.threshold if self.threshold_mode == "rel" else self.threshold
        return current > best + margin


# -- epoch decays ------------------------------------------------------------------------------
class StepDecay(_LearningRateEpochDecay):
    """``learning_rate * decay_rate ** (epoch // step_size)``; call :meth:`epoch` after each
    epoch.

    Parameters
    ----------
    learning_rate : float or int
    step_size : int
    decay_rate : float, default 0.1
        Below 1.
    """

    def __init__(self, learning_rate: float, step_size: int, decay_rate: float = 0.1) -> None:
        if not isinstance(step_size, int) or isinstance(step_size, bool):
            raise TypeError("The type of 'step_size' must be 'int', but received "
                            f"{type(step_size).__name__}.")
        if step_size <= 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if _number("decay_rate", decay_rate) >= 1.0:
            raise ValueError("decay_rate should be < 1.0.")
        self.step_size = step_size
        self.decay_rate = float(decay_rate)
        super().__init__(learning_rate)

    def get_lr(self) -> float:
        return self.base_lr * self.decay_rate ** (self.epoch_num // self.step_size)


class MultiStepDecay(_LearningRateEpochDecay):
    """``learning_rate * decay_rate ** i`` where ``i`` is how many ``milestones`` the epoch
    has reached; call :meth:`epoch` after each epoch.

    Parameters
    ----------
    learning_rate : float or int
    milestones : list or tuple of int
        Increasing epochs.
    decay_rate : float, default 0.1
        Below 1.
    """

    def __init__(self, learning_rate: float, milestones: Sequence[int],
                 decay_rate: float = 0.1) -> None:
        if not isinstance(milestones, (tuple, list)):
            raise TypeError("The type of 'milestones' in 'MultiStepDecay' must be 'tuple, "
                            f"list', but received {type(milestones).__name__}.")
        if not all(a < b for a, b in zip(milestones, milestones[1:], strict=False)):
            raise ValueError("The elements of milestones must be incremented")
        if _number("decay_rate", decay_rate) >= 1.0:
            raise ValueError("decay_rate should be < 1.0.")
        self.milestones = list(milestones)
        self.decay_rate = float(decay_rate)
        super().__init__(learning_rate)

    def get_lr(self) -> float:
        for i, milestone in enumerate(self.milestones):
            if self.epoch_num < milestone:
                return self.base_lr * self.decay_rate ** i
        return self.base_lr * self.decay_rate ** len(self.milestones)


class LambdaDecay(_LearningRateEpochDecay):
    """``learning_rate * lr_lambda(epoch)``; call :meth:`epoch` after each epoch.

    Parameters
    ----------
    learning_rate : float or int
    lr_lambda : callable
        Epoch number -> multiplicative factor.
    """

    def __init__(self, learning_rate: float, lr_lambda: Callable[[int], float]) -> None:
        if not callable(lr_lambda):
            raise TypeError("The type of 'lr_lambda' in 'LambdaDecay' must be 'function', but "
                            f"received {type(lr_lambda).__name__}.")
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate)

    def get_lr(self) -> float:
        return self.base_lr * float(self.lr_lambda(self.epoch_num))


register_dygraph_decays({cls.__name__: cls for cls in (
    CosineDecay, ExponentialDecay, InverseTimeDecay, LinearLrWarmup, NaturalExpDecay,
    NoamDecay, PiecewiseDecay, PolynomialDecay)})  # what fluid.layers' decays return here
