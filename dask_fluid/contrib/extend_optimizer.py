"""``fluid.contrib.extend_optimizer`` (Fluid 1.8): ``extend_with_decoupled_weight_decay``.

Fluid 1.8's ``contrib/extend_optimizer/extend_optimizer_with_weight_decay.py``: the returned
optimizer class appends, after the backward pass and before the optimizer's own update ops,
per decayed parameter (under ``_optimized_guard([param, grad])`` and ``name_scope('weight
decay')``)::

    scaled = param * coeff              # scale op (elementwise_mul for a Variable coeff)
    tmp = elementwise_sub(param, scaled)
    assign(tmp, output=param)

so one step is ``param <- update(param * (1 - coeff), grad(param))``: the decay is
``coeff * param`` itself, not multiplied by the learning rate (AdamW's ``new = optimized -
coeff * param``, as Fluid documents it, for updates that do not read the parameter).
"""

from __future__ import annotations

from typing import Any

from ..framework import Parameter, Program, Variable, name_scope, program_guard
from ..layers import nn, tensor
from ..optimizer import Optimizer

__all__: list[str] = ["extend_with_decoupled_weight_decay"]


class DecoupledWeightDecay:
    """The mix-in ``extend_with_decoupled_weight_decay`` puts before the base optimizer
    (Fluid 1.8's ``DecoupledWeightDecay``).

    Parameters
    ----------
    coeff : float or Variable
        The decay coefficient (a float, as Fluid: an int raises ``TypeError``).
    apply_decay_param_fun : callable or None
        ``f(param_name) -> bool``: only parameters for which it is true are decayed.
    **kwargs
        The base optimizer's arguments.
    """

    def __init__(self, coeff: float | Variable = 0.0, apply_decay_param_fun: Any = None,
                 **kwargs: Any) -> None:
        if not isinstance(coeff, (float, Variable)):
            raise TypeError(f"weight_decay (coeff) should be float or Variable, got "
                            f"{type(coeff).__name__} {coeff!r}")
        if apply_decay_param_fun is not None and not callable(apply_decay_param_fun):
            raise TypeError(f"apply_decay_param_fun must be callable or None, got "
                            f"{apply_decay_param_fun!r}")
        self._params_name: set[str] = set()
        self._apply_decay_param_fun = apply_decay_param_fun
        self._coeff = coeff
        super().__init__(**kwargs)

    def _scale_parameters(self, params_and_grads: list[tuple[Parameter, Variable]]
                          ) -> list[tuple[Parameter, Variable, Variable]]:
        """``(param, grad, param * coeff)`` for each parameter to decay (ops appended now, so
        the scaled value is the parameter before any update)."""
        # Fluid 1.8 returns None here, then fails iterating it: no decay ops instead
        if isinstance(self._coeff, float) and self._coeff == 0.0:
            return []
        scaled_params = []
        for param, grad in params_and_grads:
            if grad is None:  # no gradient: nothing to update
                continue
            if (self._apply_decay_param_fun is not None
                    and not self._apply_decay_param_fun(param.name)):
                continue
            if isinstance(self._coeff, Variable) and self._coeff.dtype != param.dtype:
                raise TypeError(f"the type of coeff ({self._coeff.dtype}) and parameter "
                                f"{param.name!r} ({param.dtype}) is not consistent")
            if param.name in self._params_name:
                raise ValueError(f"parameter {param.name!r} is already decayed by this "
                                 "optimizer (minimize called twice on it)")
            with param.block.program._optimized_guard([param, grad]), \
                    name_scope("weight decay"):
                scaled_params.append((param, grad, param * self._coeff))
                self._params_name.add(param.name)
        return scaled_params

    def backward(self, **kargs: Any) -> list[tuple[Parameter, Variable]]:
        return super().backward(**kargs)

    def apply_optimize(self, loss: Variable, startup_program: Program | None,
                       params_grads: list[tuple[Parameter, Variable]]) -> list:
        """The base optimizer's update ops for ``params_grads`` (Fluid 1.8's
        ``Optimizer.apply_optimize``: ``apply_gradients`` in the loss's program). No weight
        decay: as in Fluid, only :meth:`minimize` adds it."""
        base = getattr(super(), "apply_optimize", None)
        if base is not None:
            return base(loss=loss, startup_program=startup_program, params_grads=params_grads)
        with program_guard(loss.block.program, startup_program):
            return self.apply_gradients(params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Any = None, no_grad_set: Any = None) -> tuple[list, list]:
        """Backward, the decay ops, then the base optimizer's update ops (Fluid 1.8's
        ``DecoupledWeightDecay.minimize``).

        Returns
        -------
        (optimize_ops, params_grads)
        """
        params_grads = self.backward(loss=loss, startup_program=startup_program,
                                     parameter_list=parameter_list, no_grad_set=no_grad_set)
        for param, grad, scaled_param in self._scale_parameters(params_grads):
            with param.block.program._optimized_guard([param, grad]), \
                    name_scope("weight decay"):
                updated_param = nn.elementwise_sub(x=param, y=scaled_param)
                tensor.assign(input=updated_param, output=param)
        optimize_ops = self.apply_optimize(loss=loss, params_grads=params_grads,
                                           startup_program=startup_program)
        return optimize_ops, params_grads

    def __str__(self) -> str:
        return " ".join(["Weight Decay, params:", ",".join(self._params_name)])


def extend_with_decoupled_weight_decay(base_optimizer: type) -> type:
    """An optimizer class with decoupled weight decay (Fluid 1.8's
    ``fluid.contrib.extend_with_decoupled_weight_decay``; `Loshchilov & Hutter
    <https://arxiv.org/abs/1711.05101>`_).

    Parameters
    ----------
    base_optimizer : type
        A subclass of ``fluid.optimizer.Optimizer`` (``Adam``, ``Momentum``, ``SGD``...).

    Returns
    -------
    type
        ``OptimizerWithDecoupledWeightDecay(weight_decay, apply_decay_param_fun=None,
        **base_kwargs)``; its ``minimize`` scales each decayed parameter by ``1 -
        weight_decay`` (see the module doc) before the base update.

    Raises
    ------
    TypeError
        ``base_optimizer`` is not an Optimizer subclass.

    Examples
    --------
    >>> AdamW = fluid.contrib.extend_with_decoupled_weight_decay(fluid.optimizer.Adam)
    >>> AdamW(learning_rate=0.1, weight_decay=0.01).minimize(cost)
    """
    if not isinstance(base_optimizer, type) or not issubclass(base_optimizer, Optimizer):
        raise TypeError(f"The input(base_optimizer) should be a derived class of Optimizer, "
                        f"got {base_optimizer!r}")

    class OptimizerWithDecoupledWeightDecay(DecoupledWeightDecay, base_optimizer):
        """``base_optimizer`` with decoupled weight decay.

        Parameters
        ----------
        weight_decay : float or Variable
            The decay coefficient.
        apply_decay_param_fun : callable or None
            Decay only the parameters whose name it accepts.
        **kwargs
            The base optimizer's arguments (by keyword).
        """

        def __init__(self, weight_decay: float | Variable, apply_decay_param_fun: Any = None,
                     **kwargs: Any) -> None:
            super().__init__(weight_decay, apply_decay_param_fun, **kwargs)

    return OptimizerWithDecoupledWeightDecay
