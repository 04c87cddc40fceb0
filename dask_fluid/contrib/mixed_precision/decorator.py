"""``decorate`` and the optimizer it returns, as Fluid 1.8's
``python/paddle/fluid/contrib/mixed_precision/decorator.py``.

The decorated optimizer's ``backward`` rewrites the forward ops into float16 and float32
(:func:`~.fp16_utils.rewrite_program`), multiplies the loss by the loss scaling and returns
the gradients divided by it. Its ``apply_gradients`` (with dynamic loss scaling) checks the
gradients' sum for an inf or nan (``reduce_sum`` + ``concat`` + ``isfinite``), updates the
scaling (:func:`~.fp16_utils.update_loss_scaling`) and, on an overflow, zeroes every gradient
before the wrapped optimizer's update: Fluid 1.8 skips a step that way, so an SGD step leaves
the parameters as they are, while optimizers with state (momentum, Adam) still apply it.
Parameters, optimizer state and the learning rate stay float32.
"""

from __future__ import annotations

from typing import Any

from ... import layers, unique_name
from ...framework import Program, Variable, default_main_program, default_startup_program
from ...layers.control_flow import Switch
from ...optimizer import Optimizer
from .fp16_lists import AutoMixedPrecisionLists
from .fp16_utils import rewrite_program, update_loss_scaling, update_role_var_grad

__all__ = ["decorate"]


class OptimizerWithMixedPrecision:
    """An optimizer with mixed-precision training: loss scaling, the float16 rewrite of the
    program and skipped steps on overflow, as Fluid 1.8's
    ``fluid.contrib.mixed_precision.decorator.OptimizerWithMixedPrecision``. Made by
    :func:`decorate`; its loss-scaling variables are created in the default main and startup
    programs of the moment.

    Parameters
    ----------
    optimizer : Optimizer
    amp_lists : AutoMixedPrecisionLists
    init_loss_scaling : float
    use_dynamic_loss_scaling : bool
    incr_every_n_steps : int
    decr_every_n_nan_or_inf : int
    incr_ratio : float
    decr_ratio : float
    """

    def __init__(self, optimizer: Optimizer, amp_lists: AutoMixedPrecisionLists,
                 init_loss_scaling: float, use_dynamic_loss_scaling: bool,
                 incr_every_n_steps: int, decr_every_n_nan_or_inf: int, incr_ratio: float,
                 decr_ratio: float) -> None:
        self._optimizer = optimizer
        self._amp_lists = amp_lists
        self._params_grads: list | None = None
        self._train_program: Program = default_main_program()
        self._startup_prog: Program = default_startup_program()
        self._scaled_loss: Variable | None = None
        self._loss_scaling = layers.create_global_var(
            name=unique_name.generate("loss_scaling"), shape=[1], value=init_loss_scaling,
            dtype="float32", persistable=True)
        self._use_dynamic_loss_scaling = use_dynamic_loss_scaling
        if self._use_dynamic_loss_scaling:
            # int32 [1] tensors appended to the main program, as Fluid compares them with
            # less_than against the counters
            self._incr_every_n_steps = layers.fill_constant(
                shape=[1], dtype="int32", value=incr_every_n_steps)
            self._decr_every_n_nan_or_inf = layers.fill_constant(
                shape=[1], dtype="int32", value=decr_every_n_nan_or_inf)
            self._incr_ratio = incr_ratio
            self._decr_ratio = decr_ratio
            self._num_good_steps = layers.create_global_var(
                name=unique_name.generate("num_good_steps"), shape=[1], value=0,
                dtype="int32", persistable=True)
            self._num_bad_steps = layers.create_global_var(
                name=unique_name.generate("num_bad_steps"), shape=[1], value=0,
                dtype="int32", persistable=True)
        # the learning rate is float32, the dtype of the (master) parameters (Fluid sets its
        # optimizer's _learning_rate_map; dask_fluid's optimizers keep it in _lr_var)
        if not isinstance(optimizer._learning_rate, Variable):
            optimizer._lr_var[id(self._train_program)] = layers.create_global_var(
                name=unique_name.generate("learning_rate"), shape=[1],
                value=float(optimizer._learning_rate), dtype="float32", persistable=True)

    def get_loss_scaling(self) -> Variable:
        """The loss scaling variable (float32, ``[1]``); fetch it to read the current value."""
        return self._loss_scaling

    def get_scaled_loss(self) -> Variable | None:
        """The loss multiplied by the loss scaling (None before :meth:`backward`)."""
        return self._scaled_loss

    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Any = None, no_grad_set: Any = None,
                 callbacks: Any = None) -> list[tuple[Variable, Variable]]:
        """Rewrite the program into float16/float32, scale ``loss`` and append the backward
        pass; return the ``(param, grad / loss_scaling)`` pairs.

        Raises
        ------
        ValueError
            ``loss`` is not in the program that was the default main program at
            :func:`decorate`.
        NotImplementedError
            ``callbacks`` is given.
        """
        if callbacks is not None:
            raise NotImplementedError(
                "OptimizerWithMixedPrecision.backward(callbacks=...) is not implemented in "
                "dask_fluid")
        if not isinstance(loss, Variable):
            raise TypeError(f"backward: loss must be a Variable, got {type(loss).__name__}")
        if loss.block.program is not self._train_program:
            # Fluid rewrites and scales in the program of decorate() time: a loss elsewhere
            # would be trained unscaled with casts in another program
            raise ValueError("backward: the loss is not in the program that was the default "
                             "main program when decorate() ran; call decorate() inside the "
                             "same program_guard as the network")
        rewrite_program(self._train_program, self._amp_lists)
        self._scaled_loss = loss * self._loss_scaling
        self._params_grads = self._optimizer.backward(self._scaled_loss, startup_program,
                                                      parameter_list, no_grad_set)
        # Change the op_role_var attr for some ops, so that gradients transferred across
        # devices can be float16
        update_role_var_grad(self._train_program, self._params_grads)
        scaled_params_grads = []
        for p, g in self._params_grads:
            with self._train_program._optimized_guard([p, g]):
                scaled_g = g / self._loss_scaling
                scaled_params_grads.append((p, scaled_g))
        return scaled_params_grads

    def apply_gradients(self, scaled_params_grads: list[tuple[Variable, Variable]]) -> list:
        """With dynamic loss scaling, check the gradients, update the loss scaling and zero
        the gradients of an overflowing step; then append the wrapped optimizer's update.

        Returns
        -------
        list of Operator
            The optimize ops.
        """
        if self._use_dynamic_loss_scaling:
            grads = [layers.reduce_sum(g) for _, g in scaled_params_grads]
            all_grads = layers.concat(grads)
            all_grads_sum = layers.reduce_sum(all_grads)
            is_overall_finite = layers.isfinite(all_grads_sum)

            update_loss_scaling(is_overall_finite, self._loss_scaling, self._num_good_steps,
                                self._num_bad_steps, self._incr_every_n_steps,
                                self._decr_every_n_nan_or_inf, self._incr_ratio,
                                self._decr_ratio)

            # apply_gradients appends its ops to the global block, so the update cannot sit
            # in a Switch branch: the overflowing step zeroes the gradients instead
            with Switch() as switch:
                with switch.case(is_overall_finite):
                    pass
                with switch.default():
                    for _, g in scaled_params_grads:
                        layers.assign(layers.zeros_like(g), g)

        return self._optimizer.apply_gradients(scaled_params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> tuple[list, list]:
        """:meth:`backward` then :meth:`apply_gradients`.

        Returns
        -------
        (optimize_ops, scaled_params_grads)
        """
        scaled_params_grads = self.backward(loss, startup_program=startup_program,
                                            parameter_list=parameter_list,
                                            no_grad_set=no_grad_set)
        optimize_ops = self.apply_gradients(scaled_params_grads)
        return optimize_ops, scaled_params_grads


def decorate(optimizer: Optimizer, amp_lists: AutoMixedPrecisionLists | None = None,
             init_loss_scaling: float = 2.0**15, incr_every_n_steps: int = 1000,
             decr_every_n_nan_or_inf: int = 2, incr_ratio: float = 2.0,
             decr_ratio: float = 0.8, use_dynamic_loss_scaling: bool = True
             ) -> OptimizerWithMixedPrecision:
    """Wrap ``optimizer`` for mixed-precision training, as Fluid 1.8's
    ``fluid.contrib.mixed_precision.decorate``.

    Call it under the ``program_guard`` of the network (its loss-scaling variables go to the
    default main and startup programs of the moment).

    Parameters
    ----------
    optimizer : Optimizer
    amp_lists : AutoMixedPrecisionLists, optional
        Which ops run in float16; Fluid's default lists when None.
    init_loss_scaling : float
        The initial loss scaling (default 2**15).
    incr_every_n_steps : int
        Multiply the scaling by ``incr_ratio`` after this many consecutive finite steps.
    decr_every_n_nan_or_inf : int
        Multiply it by ``decr_ratio`` after this many accumulated steps with inf or nan.
    incr_ratio, decr_ratio : float
    use_dynamic_loss_scaling : bool
        Update the scaling and skip overflowing steps; otherwise the scaling is fixed and no
        check is made.

    Returns
    -------
    OptimizerWithMixedPrecision

    Raises
    ------
    TypeError
        ``optimizer`` is not an Optimizer or ``amp_lists`` not an AutoMixedPrecisionLists.
    ValueError
        A loss-scaling argument is out of range.

    Examples
    --------
    >>> mp_optimizer = fluid.contrib.mixed_precision.decorate(
    ...     fluid.optimizer.SGD(learning_rate=0.01), init_loss_scaling=8.0)
    >>> ops, param_grads = mp_optimizer.minimize(loss)
    >>> scaled_loss = mp_optimizer.get_scaled_loss()
    """
    if not isinstance(optimizer, Optimizer):
        raise TypeError(f"decorate: optimizer must be a fluid.optimizer.Optimizer, got "
                        f"{type(optimizer).__name__}")
    if amp_lists is None:
        amp_lists = AutoMixedPrecisionLists()
    elif not isinstance(amp_lists, AutoMixedPrecisionLists):
        raise TypeError(f"decorate: amp_lists must be an AutoMixedPrecisionLists, got "
                        f"{type(amp_lists).__name__}")
    # Fluid checks none of these; a wrong one would silently never scale or never recover
    if not float(init_loss_scaling) > 0:
        raise ValueError(f"decorate: init_loss_scaling must be > 0, got {init_loss_scaling}")
    if use_dynamic_loss_scaling:
        for name, value in (("incr_every_n_steps", incr_every_n_steps),
                            ("decr_every_n_nan_or_inf", decr_every_n_nan_or_inf)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"decorate: {name} must be an int >= 1, got {value!r}")
        if not float(incr_ratio) > 1.0:
            raise ValueError(f"decorate: incr_ratio must be > 1, got {incr_ratio}")
        if not 0.0 < float(decr_ratio) < 1.0:
            raise ValueError(f"decorate: decr_ratio must be in (0, 1), got {decr_ratio}")
    return OptimizerWithMixedPrecision(optimizer, amp_lists, float(init_loss_scaling),
                                       bool(use_dynamic_loss_scaling), incr_every_n_steps,
                                       decr_every_n_nan_or_inf, float(incr_ratio),
                                       float(decr_ratio))
