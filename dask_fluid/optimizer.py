"""Optimizers: ``minimize`` appends backward, clip, decay and one optimize op per parameter.

As in Fluid, parameters are processed in name order, accumulators are persistable variables
initialised by the startup program (``<param>_<acc>_0``), and every optimize-side op carries
``op_role = Optimize`` and ``op_role_var = [param, grad]`` so the transpiler can move it to the
pserver that owns the parameter.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from . import unique_name
from .backward import append_backward
from .clip import GradientClipByNorm, append_gradient_clip_ops, error_clip_callback
from .distributed_table import distributed_table_name
from .framework import (
    OP_ROLE_KEY,
    OP_ROLE_VAR_KEY,
    OpRole,
    Parameter,
    Program,
    Variable,
    VarType,
    _dygraph_tracer,
    default_main_program,
    in_dygraph_mode,
    program_guard,
    refuse_in_dygraph,
)
from .initializer import ConstantInitializer
from .layer_helper import LayerHelper
from .layers.tensor import create_global_var
from .meta_optimizers import (
    LookaheadOptimizer,
    PipelineOptimizer,
    RecomputeOptimizer,
)
from .model_average import ExponentialMovingAverage, ModelAverage
from .ops.dgc_ops import (
    DGC_COUNTER,
    DGC_ENCODED,
    DGC_GATHER,
    DGC_K,
    DGC_MIN_NUMEL,
    DGC_NRANKS,
    DGC_RAMPUP_BEGIN,
)
from .regularizer import L1DecayRegularizer, L2DecayRegularizer, append_regularization_ops

logger = logging.getLogger("dask_fluid.optimizer")


def _check_betas(beta1: Any, beta2: Any, allow_variable: bool = False) -> tuple[Any, Any]:
    """The betas as floats in [0, 1); with ``allow_variable`` (Adam, as Fluid 1.8) a Variable
    stays one, its value known only when the program runs."""
    out = []
    for arg, val in (("beta1", beta1), ("beta2", beta2)):
        if isinstance(val, Variable):
            if not allow_variable:
                raise TypeError(f"{arg} must be a float here, got a Variable ({val.name!r})")
            out.append(val)
            continue
        if not 0.0 <= float(val) < 1.0:
            raise ValueError(f"{arg} must be in [0, 1), got {val}")
        out.append(float(val))
    return out[0], out[1]


def _check_learning_rate(value: Any) -> float:
    """A number learning rate: a float, as Fluid 1.8's Optimizer requires (an int is a
    TypeError there, and here); 0.0 included (1.8's tests build Adam(learning_rate=0.0) to
    check restored state without training). Fluid 1.8 takes a negative or NaN rate too; here
    it is refused, as before (a sign error more often than gradient ascent)."""
    if not isinstance(value, float):
        fix = f" (write {float(value)!r})" if isinstance(value, int) and \
            not isinstance(value, bool) else ""
        raise TypeError(f"learning rate should be a float, a Variable or (in dygraph mode) a "
                        f"fluid.dygraph LearningRateDecay, got {type(value).__name__} "
                        f"{value!r}{fix}")
    return _check_positive("learning_rate", value, allow_zero=True)


def _check_positive(name: str, value: Any, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {value!r}") from None
    if v < 0 or (v == 0 and not allow_zero) or v != v:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


class Optimizer:
    """Base class. Subclasses define ``type``, ``_create_accumulators`` and
    ``_append_optimize_op``."""

    type = ""

    def __init__(self, learning_rate: float | Variable, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        if _is_lr_schedule(learning_rate):
            if not in_dygraph_mode():
                raise TypeError("a dygraph learning-rate decay (fluid.dygraph.*Decay) works in "
                                "dygraph mode only; in a static program use the "
                                "fluid.layers.*_decay functions")
        elif not isinstance(learning_rate, Variable):
            learning_rate = _check_learning_rate(learning_rate)
        self._learning_rate = learning_rate
        self.regularization = regularization
        if grad_clip is not None and not callable(grad_clip):
            raise TypeError(f"grad_clip must be a fluid.clip.GradientClipBy* object, got "
                            f"{type(grad_clip).__name__}")
        #: applied to all (param, grad) pairs before regularization (Fluid 1.8's grad_clip=)
        self._grad_clip = grad_clip
        self._name = name
        #: Fluid 1.8's ``parameter_list=``: the parameters ``minimize`` updates when it is
        #: given none (all trainable ones when None; required in dygraph mode)
        self._parameter_list = _check_parameter_list(parameter_list)
        if in_dygraph_mode() and self._parameter_list is None:  # as Fluid 1.8
            raise AttributeError("parameter_list argument given to the Optimizer should not be "
                                 "None in dygraph mode.")
        self._lr_var: dict[int, Variable] = {}
        self._accumulators: dict[str, dict[str, Variable]] = {}

    # -- learning rate ----------------------------------------------------------------------
    def _global_learning_rate(self, program: Program, dtype: str = "float32") -> Variable:
        if isinstance(self._learning_rate, Variable):
            return self._learning_rate
        if _is_lr_schedule(self._learning_rate) and id(program) not in self._lr_var:
            # dygraph: this step's rate (apply_gradients takes one per minimize)
            self._lr_var[id(program)] = self._learning_rate()
        if id(program) not in self._lr_var:
            # the parameters' dtype, so a float64 model is not stepped by a rounded rate
            self._lr_var[id(program)] = create_global_var(
                [1], self._learning_rate, dtype, persistable=True,
                name=unique_name.generate("learning_rate"))
        return self._lr_var[id(program)]

    def _next_schedule_rate(self, program: Program) -> None:
        """A decay's rate of the next step (dygraph: one per minimize); a float or a variable
        rate stays as it is."""
        if _is_lr_schedule(self._learning_rate):
            self._lr_var.pop(id(program), None)
            self._global_learning_rate(program)

    def _param_lr(self, block, param: Parameter) -> Variable:
        lr = self._global_learning_rate(block.program, param.dtype)
        ratio = param.optimize_attr.get("learning_rate", 1.0)
        if ratio == 1.0:
            return lr
        out = block.create_var(name=unique_name.generate(f"{param.name}.lr"), shape=[1],
                               dtype=lr.dtype)
        # Fluid's _create_param_lr runs under _lr_schedule_guard(is_with_opt=True): the op is
        # an LR-schedule op, so the transpiler puts it in the pservers' LR block
        block.append_op("scale", inputs={"X": [lr]}, outputs={"Out": [out]},
                        attrs={"scale": float(ratio),
                               OP_ROLE_KEY: int(OpRole.LRSched | OpRole.Optimize),
                               OP_ROLE_VAR_KEY: []})
        return out

    # -- accumulators -----------------------------------------------------------------------
    def _add_accumulator(self, name: str, param: Parameter, fill_value: float = 0.0,
                         shape: list[int] | None = None) -> Variable:
        made = self._accumulators.get(name, {}).get(param.name)
        if made is not None and in_dygraph_mode():
            return made  # dygraph: each minimize asks again; the state is kept (Fluid 1.8)
        block = param.block.program.global_block()
        var = block.create_var(name=unique_name.generate(f"{param.name}_{name}"),
                               shape=list(shape or param.shape), dtype=param.dtype,
                               persistable=True, stop_gradient=True)
        LayerHelper(self.type).set_variable_initializer(var, ConstantInitializer(fill_value))
        self._accumulators.setdefault(name, {})[param.name] = var
        if in_dygraph_mode():
            self._restore_accumulator(var)  # from set_dict's holder, as Fluid 1.8
        return var

    def _acc(self, name: str, param: Parameter) -> Variable:
        return self._accumulators[name][param.name]

    def _create_accumulators(self, block, params: list[Parameter]) -> None:
        """Create the optimizer state of each parameter (none for SGD)."""

    def _append_optimize_op(self, block, param_and_grad):
        raise NotImplementedError(f"{type(self).__name__} does not append an optimize op")

    def _finish_update(self, block, params_grads) -> None:
        """Ops run once per parameter after its optimize op (Adam's beta powers)."""

    def _advance_powers(self, block, params_grads, powers: list[tuple[str, float]]) -> None:
        """A ``scale`` op per parameter and ``(accumulator, beta)``: ``beta^t`` to
        ``beta^(t+1)`` after the update, as Fluid appends them."""
        for p, g in params_grads:
            with block.program._optimized_guard([p, g]):
                for acc, beta in powers:
                    var = self._acc(acc, p)
                    block.append_op("scale", inputs={"X": [var]}, outputs={"Out": [var]},
                                    attrs={"scale": beta})

    # -- the pass ---------------------------------------------------------------------------
    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list=None, no_grad_set=None, callbacks=None):
        """``append_backward`` with the variables' error clips applied (Fluid 1.8 always adds
        ``error_clip_callback`` to ``callbacks``; a copy here, not the caller's list)."""
        parameter_list = parameter_list or self._parameter_list
        if in_dygraph_mode():
            # Fluid 1.8: the gradients loss.backward() left in the parameters
            pairs = ((p, p._grad_ivar()) for p in parameter_list if p.trainable)
            return [(p, g) for p, g in pairs if g is not None]
        callbacks = [*(callbacks or ()), error_clip_callback]
        pairs = append_backward(loss, parameter_list, no_grad_set, callbacks)
        # what append_backward returns for a listed non-parameter or frozen parameter is
        # not updated (Fluid 1.8's optimization pass skips parameters not trainable)
        return [(p, g) for p, g in pairs if isinstance(p, Parameter) and p.trainable]

    def apply_gradients(self, params_grads: list[tuple[Parameter, Variable]]) -> list:
        """Clip, decay and optimize ops for sorted ``(param, grad)`` pairs."""
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        if not params_grads and in_dygraph_mode():
            # Fluid 1.8: no parameter has a gradient (no loss.backward() yet, or one that
            # reached none of them): nothing is updated, but the step's learning rate is still
            # taken, so a decay advances
            self._next_schedule_rate(_dygraph_tracer().program)
            return []
        if not params_grads:
            raise ValueError("the loss does not depend on any trainable parameter: "
                             "nothing to optimize" + (" (call loss.backward() before "
                                                      "minimize)" if in_dygraph_mode() else ""))
        program = params_grads[0][0].block.program
        self._next_schedule_rate(program)
        block = program.global_block()
        params_grads, table_op = self._update_distributed_table(program, params_grads)
        if not params_grads:  # the table is the only parameter
            return [table_op]
        processed = self._clipped_and_decayed(program, params_grads)
        start = len(block.ops)
        self._create_accumulators(block, [p for p, _ in processed])
        self._global_learning_rate(program, processed[0][0].dtype)
        ops = []
        for param, grad in processed:
            with program._optimized_guard([param, grad]):
                ops.append(self._append_optimize_op(block, (param, grad)))
        self._finish_update(block, processed)
        if not in_dygraph_mode():
            # Fluid 1.8's _create_optimization_pass: every op the pass appended (a parameter's
            # learning-rate scale, the optimizer's own, _finish_update's), not the clip ops
            ops = list(block.ops[start:])
        return ops + ([table_op] if table_op is not None else [])

    def _clipped_and_decayed(self, program: Program, params_grads: list) -> list:
        """The pairs with their gradients clipped (``grad_clip=``, else each parameter's own
        clip) and then weight-decayed, as Fluid 1.8's ``apply_gradients``."""
        if self._grad_clip is not None:  # Fluid 1.8: grad_clip= replaces per-parameter clips
            params_grads = self._grad_clip(params_grads)
        else:
            params_grads = append_gradient_clip_ops(params_grads)
        return append_regularization_ops(params_grads, self.regularization)

    def _update_distributed_table(self, program: Program, params_grads: list) -> tuple:
        """Fluid 1.8's ``_process_distribute_lookuptable``: the table looked up with
        ``is_distributed=True`` lives sharded on the pservers, which update it with plain SGD
        only; it gets an ``sgd`` op of its own, appended first, and no clipping,
        regularization or optimizer state. Returns the other pairs and that op (or None)."""
        table = distributed_table_name(program.global_block())
        rest = [(p, g) for p, g in params_grads if p.name != table]
        if len(rest) == len(params_grads):
            return params_grads, None
        param, grad = next((p, g) for p, g in params_grads if p.name == table)
        block = program.global_block()
        with program._optimized_guard([param, grad]):
            lr = self._param_lr(block, param)
            op = block.append_op("sgd", inputs={"Param": [param], "Grad": [grad],
                                                "LearningRate": [lr]},
                                 outputs={"ParamOut": [param]})
        if type(self) is not SGDOptimizer:
            logger.warning("the distributed lookup table %r is updated by sgd, not %s: Fluid's "
                           "pservers support only SGD for it", table, type(self).__name__)
        return rest, op

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list=None, no_grad_set=None, grad_clip: Any = None):
        """Append the backward pass and the optimize ops of ``loss``; ``grad_clip`` (Fluid
        1.8's argument of ``minimize``) replaces the optimizer's own.

        Returns
        -------
        (optimize_ops, params_grads)
        """
        if grad_clip is not None:
            if not callable(grad_clip):
                raise TypeError(f"grad_clip must be a fluid.clip.GradientClipBy* object, got "
                                f"{type(grad_clip).__name__}")
            self._grad_clip = grad_clip
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        if in_dygraph_mode():
            # as Fluid 1.8's minimize: the update is not differentiated
            tracer = _dygraph_tracer()
            with tracer.no_grad():
                ops = self.apply_gradients(params_grads)
            tracer.step_done(loss)  # a training step, for whoever counts them
            return ops, params_grads
        return self.apply_gradients(params_grads), params_grads

    # -- dygraph state (Fluid 1.8's Optimizer.state_dict / set_dict / current_step_lr /
    # set_lr; 1.8 decorates each with @dygraph_only) ----------------------------------------
    def _require_dygraph(self, api: str) -> Any:
        tracer = _dygraph_tracer()
        if tracer is None:
            raise RuntimeError(f"Optimizer.{api}() works in dygraph mode only: call it "
                               "inside fluid.dygraph.guard()")
        return tracer

    def clear_gradients(self) -> None:
        """Clear the gradient of each trainable parameter of ``parameter_list`` (Fluid 1.8's
        dygraph ``Optimizer.clear_gradients``, the same as each parameter's
        ``clear_gradient()``)."""
        self._require_dygraph("clear_gradients")
        for param in self._parameter_list or ():
            if param.trainable:
                param.clear_gradient()

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state: each accumulator variable by its name, and, when the
        learning rate is a ``fluid.dygraph`` decay, its state under ``"LR_Scheduler"`` plus
        (step decays) its step number as the int32 ``[1]`` variable ``"global_step"``.

        Returns
        -------
        dict
            What ``save_dygraph`` writes to ``.pdopt`` and :meth:`set_dict` restores.
        """
        tracer = self._require_dygraph("state_dict")
        out: dict[str, Any] = {}
        for accs in self._accumulators.values():
            for var in accs.values():
                out[var.name] = var
        if _is_lr_schedule(self._learning_rate):
            out.update(self._learning_rate._optimizer_state(tracer))
        return out

    def set_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (or ``load_dygraph``'s optimizer dict).

        Existing accumulators take their values now; those the next ``minimize`` creates take
        theirs then (Fluid 1.8 keeps the dict as ``_accumulators_holder`` for that).

        Raises
        ------
        TypeError
            ``state_dict`` is not a dict, or a value is not a variable or array.
        RuntimeError
            A value the optimizer needs is missing (an accumulator, ``"LR_Scheduler"`` or
            ``"global_step"`` of a decay).
        ValueError
            A value's shape differs from the variable's (``TypeError`` for its dtype).
        """
        self._require_dygraph("set_dict")
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        if _is_lr_schedule(self._learning_rate):
            self._learning_rate._restore_optimizer_state(state_dict, self._state_array)
        # Fluid 1.8's holder: accumulators the next minimize creates take their values from
        # it (_add_accumulator), those that exist take theirs now
        self._accumulators_holder = state_dict
        for accs in self._accumulators.values():
            for var in accs.values():
                self._restore_accumulator(var)

    def _restore_accumulator(self, var: Variable) -> None:
        holder = getattr(self, "_accumulators_holder", None)
        if not holder:
            return
        if var.name not in holder:
            raise RuntimeError(f"Optimizer set error, optimizer variable {var.name} not found "
                               "in the state dict given to set_dict")
        var.set_value(self._state_array(var.name, holder[var.name]))

    @staticmethod
    def _state_array(name: str, value: Any) -> Any:
        """A state-dict value (variable or numpy array) as a numpy array."""
        if isinstance(value, Variable):
            return value.numpy()
        if isinstance(value, np.ndarray):
            return value
        raise TypeError(f"state dict value {name!r} is a {type(value).__name__}: give a "
                        "variable or a numpy array")

    def current_step_lr(self) -> float:
        """The learning rate: that of the last ``minimize`` (a decay's rate of the step it
        took), else the rate the next one will use.

        Returns
        -------
        float
        """
        tracer = self._require_dygraph("current_step_lr")
        lr = self._learning_rate
        current = lr if isinstance(lr, Variable) else self._lr_var.get(id(tracer.program))
        if current is not None:
            return float(np.asarray(current.numpy()).reshape(-1)[0])
        if not _is_lr_schedule(lr):
            return float(lr)
        next_rate = getattr(lr, "_next_rate", None)
        if next_rate is None:
            raise TypeError(f"current_step_lr: the learning rate is a {type(lr).__name__}, "
                            "not a fluid.dygraph LearningRateDecay; its rate is known after "
                            "the first minimize")
        step_lr = next_rate()
        if isinstance(step_lr, Variable):
            return float(np.asarray(step_lr.numpy()).reshape(-1)[0])
        return float(step_lr)

    def set_lr(self, value: float | Variable) -> None:
        """Use ``value`` as the learning rate from the next ``minimize`` on (Fluid 1.8).

        Parameters
        ----------
        value : float or Variable
            A float, or a ``[1]`` variable (used as it is, later changes included).

        Raises
        ------
        TypeError
            ``value`` is neither a float nor a variable.
        RuntimeError
            The learning rate is a ``LearningRateDecay`` (the two would conflict).
        ValueError
            A variable's shape is not ``[1]``, or the float is negative.
        """
        tracer = self._require_dygraph("set_lr")
        if not isinstance(value, (Variable, float)):
            raise TypeError("The type of 'value' in optimizer.set_lr must be (float, Variable), "
                            f"but received {type(value).__name__}.")
        if _is_lr_schedule(self._learning_rate):
            raise RuntimeError("optimizer's learning rate can't be LearningRateDecay when "
                               "invoke this API, because this will lead to conflict.")
        key = id(tracer.program)
        if isinstance(value, float):
            self._learning_rate = _check_learning_rate(value)
            # the next minimize makes the rate variable afresh (a variable the caller passed
            # before is left as it is)
            self._lr_var.pop(key, None)
            return
        if value.shape is None or tuple(value.shape) != (1,):
            raise ValueError("optimizer's learning rate must be 1-D Tensor with shape[1], got "
                             f"shape {value.shape}")
        self._learning_rate = value
        self._lr_var[key] = value


class SGDOptimizer(Optimizer):
    """``p -= lr * g``."""

    type = "sgd"

    def _append_optimize_op(self, block, pg):
        p, g = pg
        return block.append_op("sgd", inputs={"Param": [p], "Grad": [g],
                                              "LearningRate": [self._param_lr(block, p)]},
                               outputs={"ParamOut": [p]})


class MomentumOptimizer(Optimizer):
    """``v = mu * v + g``; ``p -= lr * v`` (or ``lr * (g + mu * v)`` with Nesterov)."""

    type = "momentum"

    def __init__(self, learning_rate, momentum: float, parameter_list: Any = None,
                 use_nesterov: bool = False, regularization: Any = None,
                 grad_clip: Any = None, name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum = _check_positive("momentum", momentum, allow_zero=True)
        self._use_nesterov = bool(use_nesterov)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("velocity", p)

    def _op_attrs(self) -> dict:
        return {"mu": self._momentum, "use_nesterov": self._use_nesterov}

    def _append_optimize_op(self, block, pg):
        p, g = pg
        v = self._acc("velocity", p)
        return block.append_op(
            self.type,
            inputs={"Param": [p], "Grad": [g], "Velocity": [v],
                    "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p], "VelocityOut": [v]}, attrs=self._op_attrs())


class LarsMomentumOptimizer(MomentumOptimizer):
    """Momentum with a layer-wise adaptive rate (LARS): each parameter's step is scaled by
    ``lars_coeff·‖p‖ / (‖g‖ + lars_weight_decay·‖p‖)`` (the ``lars_momentum`` op)."""

    type = "lars_momentum"

    def __init__(self, learning_rate, momentum: float, lars_coeff: float = 0.001,
                 lars_weight_decay: float = 0.0005, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate, momentum, parameter_list=parameter_list,
                         regularization=regularization, grad_clip=grad_clip, name=name)
        self._lars_coeff = _check_positive("lars_coeff", lars_coeff, allow_zero=True)
        self._lars_weight_decay = _check_positive("lars_weight_decay", lars_weight_decay,
                                                  allow_zero=True)

    def _op_attrs(self) -> dict:
        return {"mu": self._momentum, "lars_coeff": self._lars_coeff,
                "lars_weight_decay": self._lars_weight_decay}


class AdamOptimizer(Optimizer):
    """Adam (Fluid 1.x form: bias correction folded into the step size).

    As in Fluid 1.8, ``beta1`` and ``beta2`` may each be a float or a ``[1]`` float32
    Variable. A Variable is read by the ``adam`` op at run time (its ``Beta1Tensor`` /
    ``Beta2Tensor`` input; in dygraph mode its value at each step, as an attr), and its
    ``beta_pow`` accumulator starts, as Fluid's does, at 0.9 (β1) or 0.999 (β2), not at the
    Variable's value.
    """

    type = "adam"

    def __init__(self, learning_rate: float | Variable = 0.001,
                 beta1: float | Variable = 0.9, beta2: float | Variable = 0.999,
                 epsilon: float = 1e-8, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None, lazy_mode: bool = False) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1, self._beta2 = _check_betas(beta1, beta2, allow_variable=True)
        self._epsilon = _check_positive("epsilon", epsilon)
        self._lazy_mode = bool(lazy_mode)

    def _create_accumulators(self, block, params):
        # Fluid 1.8 starts the power of a Variable beta at the default beta's value
        b1 = 0.9 if isinstance(self._beta1, Variable) else self._beta1
        b2 = 0.999 if isinstance(self._beta2, Variable) else self._beta2
        for p in params:
            self._add_accumulator("moment1", p)
            self._add_accumulator("moment2", p)
            self._add_accumulator("beta1_pow_acc", p, b1, [1])
            self._add_accumulator("beta2_pow_acc", p, b2, [1])

    def _append_optimize_op(self, block, pg):
        p, g = pg
        m1, m2 = self._acc("moment1", p), self._acc("moment2", p)
        inputs = {"Param": [p], "Grad": [g], "LearningRate": [self._param_lr(block, p)],
                  "Moment1": [m1], "Moment2": [m2],
                  "Beta1Pow": [self._acc("beta1_pow_acc", p)],
                  "Beta2Pow": [self._acc("beta2_pow_acc", p)]}
        attrs: dict[str, Any] = {"epsilon": self._epsilon, "lazy_mode": self._lazy_mode}
        for n, beta in ((1, self._beta1), (2, self._beta2)):
            if not isinstance(beta, Variable):
                attrs[f"beta{n}"] = beta
            elif in_dygraph_mode():
                # Fluid 1.8's dygraph Adam passes the Variable's value now as the attr
                attrs[f"beta{n}"] = float(np.asarray(beta.numpy()).reshape(-1)[0])
            else:
                inputs[f"Beta{n}Tensor"] = [beta]
        return block.append_op(
            "adam", inputs=inputs,
            # Fluid 1.8: the op advances the beta powers itself (no scale ops after it)
            outputs={"ParamOut": [p], "Moment1Out": [m1], "Moment2Out": [m2],
                     "Beta1PowOut": [self._acc("beta1_pow_acc", p)],
                     "Beta2PowOut": [self._acc("beta2_pow_acc", p)]},
            attrs=attrs)


class AdamaxOptimizer(Optimizer):
    """Adamax: Adam with the infinity norm (the ``adamax`` op; ``beta1`` power advanced by a
    ``scale`` op after each update)."""

    type = "adamax"

    def __init__(self, learning_rate: float | Variable = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1, self._beta2 = _check_betas(beta1, beta2)
        self._epsilon = _check_positive("epsilon", epsilon)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("moment", p)
            self._add_accumulator("inf_norm", p)
            self._add_accumulator("beta1_pow_acc", p, self._beta1, [1])

    def _append_optimize_op(self, block, pg):
        p, g = pg
        m, u = self._acc("moment", p), self._acc("inf_norm", p)
        return block.append_op(
            "adamax",
            inputs={"Param": [p], "Grad": [g], "LearningRate": [self._param_lr(block, p)],
                    "Moment": [m], "InfNorm": [u],
                    "Beta1Pow": [self._acc("beta1_pow_acc", p)]},
            outputs={"ParamOut": [p], "MomentOut": [m], "InfNormOut": [u]},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon})

    def _finish_update(self, block, params_grads):
        self._advance_powers(block, params_grads, [("beta1_pow_acc", self._beta1)])


class LambOptimizer(AdamOptimizer):
    """LAMB: Adam's moments (not bias-corrected, as Fluid 1.8's ``lamb`` op) plus weight decay,
    scaled per parameter by the trust ratio ``‖p‖ / ‖r‖``. ``exclude_from_weight_decay_fn(param)``
    true gives that parameter no decay. The beta powers are passed to the op and, as in Fluid
    1.8, never advanced."""

    type = "lamb"

    def __init__(self, learning_rate: float | Variable = 0.001, lamb_weight_decay: float = 0.01,
                 beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-6,
                 parameter_list: Any = None, regularization: Any = None,
                 grad_clip: Any = None, exclude_from_weight_decay_fn: Any = None,
                 name: str | None = None) -> None:
        # Fluid 1.8's lamb op has no beta tensor inputs (only Adam's does)
        _check_betas(beta1, beta2)
        super().__init__(learning_rate, beta1, beta2, epsilon, parameter_list, regularization,
                         grad_clip, name)
        self._weight_decay = _check_positive("lamb_weight_decay", lamb_weight_decay,
                                             allow_zero=True)
        self._exclude = exclude_from_weight_decay_fn

    def _append_optimize_op(self, block, pg):
        p, g = pg
        m1, m2 = self._acc("moment1", p), self._acc("moment2", p)
        decay = 0.0 if self._exclude is not None and self._exclude(p) else self._weight_decay
        return block.append_op(
            "lamb",
            inputs={"Param": [p], "Grad": [g], "LearningRate": [self._param_lr(block, p)],
                    "Moment1": [m1], "Moment2": [m2],
                    "Beta1Pow": [self._acc("beta1_pow_acc", p)],
                    "Beta2Pow": [self._acc("beta2_pow_acc", p)]},
            outputs={"ParamOut": [p], "Moment1Out": [m1], "Moment2Out": [m2]},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "weight_decay": decay})


class AdagradOptimizer(Optimizer):
    """``m += g²``; ``p -= lr * g / (sqrt(m) + eps)``."""

    type = "adagrad"

    def __init__(self, learning_rate, epsilon: float = 1e-6, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None, name: str | None = None,
                 initial_accumulator_value: float = 0.0) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon = _check_positive("epsilon", epsilon)
        self._initial = _check_positive("initial_accumulator_value",
                                        initial_accumulator_value, allow_zero=True)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("moment", p, self._initial)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        m = self._acc("moment", p)
        return block.append_op(
            "adagrad",
            inputs={"Param": [p], "Grad": [g], "Moment": [m],
                    "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p], "MomentOut": [m]}, attrs={"epsilon": self._epsilon})


class RMSPropOptimizer(Optimizer):
    """RMSProp with optional momentum and centering."""

    type = "rmsprop"

    def __init__(self, learning_rate, rho: float = 0.95, epsilon: float = 1e-6,
                 momentum: float = 0.0, centered: bool = False, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        if not 0.0 <= float(rho) < 1.0:
            raise ValueError(f"rho must be in [0, 1), got {rho}")
        self._rho = float(rho)
        self._epsilon = _check_positive("epsilon", epsilon)
        self._momentum = _check_positive("momentum", momentum, allow_zero=True)
        self._centered = bool(centered)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("momentum", p)
            self._add_accumulator("mean_square", p)
            self._add_accumulator("mean_grad", p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        mom, ms, mg = (self._acc(n, p) for n in ("momentum", "mean_square", "mean_grad"))
        return block.append_op(
            "rmsprop",
            inputs={"Param": [p], "Grad": [g], "Moment": [mom], "MeanSquare": [ms],
                    "MeanGrad": [mg], "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p], "MomentOut": [mom], "MeanSquareOut": [ms],
                     "MeanGradOut": [mg]},
            attrs={"epsilon": self._epsilon, "decay": self._rho, "momentum": self._momentum,
                   "centered": self._centered})


class DecayedAdagradOptimizer(Optimizer):
    """``m = decay * m + (1 - decay) * g²``; ``p -= lr * g / (sqrt(m) + eps)``."""

    type = "decayed_adagrad"

    def __init__(self, learning_rate, decay: float = 0.95, epsilon: float = 1e-6,
                 parameter_list: Any = None, regularization: Any = None,
                 grad_clip: Any = None, name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        if not 0.0 <= float(decay) < 1.0:
            raise ValueError(f"decay must be in [0, 1), got {decay}")
        self._decay = float(decay)
        self._epsilon = _check_positive("epsilon", epsilon)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("moment", p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        m = self._acc("moment", p)
        return block.append_op(
            "decayed_adagrad",
            inputs={"Param": [p], "Grad": [g], "Moment": [m],
                    "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p], "MomentOut": [m]},
            attrs={"decay": self._decay, "epsilon": self._epsilon})


class FtrlOptimizer(Optimizer):
    """Follow-the-regularized-leader with L1/L2 (the ``ftrl`` op)."""

    type = "ftrl"

    def __init__(self, learning_rate, l1: float = 0.0, l2: float = 0.0,
                 lr_power: float = -0.5, parameter_list: Any = None,
                 regularization: Any = None, grad_clip: Any = None,
                 name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._l1 = _check_positive("l1", l1, allow_zero=True)
        self._l2 = _check_positive("l2", l2, allow_zero=True)
        self._lr_power = float(lr_power)

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("squared", p)
            self._add_accumulator("linear", p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        sq, lin = self._acc("squared", p), self._acc("linear", p)
        return block.append_op(
            "ftrl",
            inputs={"Param": [p], "Grad": [g], "SquaredAccumulator": [sq],
                    "LinearAccumulator": [lin], "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p], "SquaredAccumOut": [sq], "LinearAccumOut": [lin]},
            attrs={"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power})


SGD = SGDOptimizer
Momentum = MomentumOptimizer
LarsMomentum = LarsMomentumOptimizer
Adam = AdamOptimizer
Adagrad = AdagradOptimizer
Adamax = AdamaxOptimizer
DecayedAdagrad = DecayedAdagradOptimizer
Ftrl = FtrlOptimizer
Lamb = LambOptimizer
RMSProp = RMSPropOptimizer


def _is_lr_schedule(learning_rate: Any) -> bool:
    """Whether ``learning_rate`` is a dygraph decay object (``fluid.dygraph.*Decay``: called
    once per step for that step's rate)."""
    return callable(learning_rate) and not isinstance(learning_rate, Variable)


def _check_parameter_list(parameter_list: Any) -> list | None:
    if parameter_list is None:
        return None
    if isinstance(parameter_list, (str, Variable)) or not hasattr(parameter_list, "__iter__"):
        raise TypeError(f"parameter_list must be a list of Parameters or names, got "
                        f"{type(parameter_list).__name__}")
    return list(parameter_list)


class AdadeltaOptimizer(Optimizer):
    """Adadelta, following Fluid 1.8's ``fluid.optimizer.AdadeltaOptimizer``.

    Per parameter (the ``adadelta`` op, accumulators ``_avg_squared_grad`` and
    ``_avg_squared_update``)::

        E[g²]  = rho * E[g²] + (1 - rho) * g²
        delta  = -sqrt((E[dx²] + epsilon) / (E[g²] + epsilon)) * g
        E[dx²] = rho * E[dx²] + (1 - rho) * delta²
        param += delta

    Parameters
    ----------
    learning_rate : float or Variable
        Required and checked, and the program gets its learning-rate variable, but, as in
        Fluid 1.8, the ``adadelta`` op takes no learning rate: it does not scale the step.
    epsilon : float
        Added inside both square roots, > 0.
    rho : float
        Decay of both running averages, in [0, 1).
    parameter_list : list of Parameter or str, optional
        The parameters ``minimize`` updates when it is given none (all trainable ones when
        None).
    regularization, grad_clip, name
        As every optimizer's.

    Notes
    -----
    Dense gradients only (Paddle 1.8's kernel enforces a LoDTensor gradient); a sparse one
    raises ``NotImplementedError`` when the op runs. As the op has no ``LearningRate`` input,
    the pserver transpiler does not recognise it as an optimizer op (Fluid's
    ``_is_optimizer_op``), as in Fluid.
    """

    type = "adadelta"

    def __init__(self, learning_rate: float | Variable, epsilon: float = 1.0e-6,
                 rho: float = 0.95, parameter_list: Any = None, regularization: Any = None,
                 grad_clip: Any = None, name: str | None = None) -> None:
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon = _check_positive("epsilon", epsilon)
        rho_f = _check_positive("rho", rho, allow_zero=True)
        if rho_f >= 1.0:
            raise ValueError(f"rho must be in [0, 1), got {rho!r}")
        self._rho = rho_f

    def _create_accumulators(self, block, params):
        for p in params:
            self._add_accumulator("_avg_squared_grad", p)
            self._add_accumulator("_avg_squared_update", p)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        g2, u2 = self._acc("_avg_squared_grad", p), self._acc("_avg_squared_update", p)
        return block.append_op(
            "adadelta",
            inputs={"Param": [p], "Grad": [g], "AvgSquaredGrad": [g2],
                    "AvgSquaredUpdate": [u2]},
            outputs={"ParamOut": [p], "AvgSquaredGradOut": [g2],
                     "AvgSquaredUpdateOut": [u2]},
            attrs={"epsilon": self._epsilon, "rho": self._rho})


class DpsgdOptimizer(Optimizer):
    """Differentially private SGD (CCS16), following Fluid 1.8's
    ``fluid.optimizer.DpsgdOptimizer`` (the ``dpsgd`` op, no accumulators)::

        param -= lr * (g / max(1, ||g|| / clip) + noise / batch_size),  noise ~ N(0, sigma²)

    with one scalar noise draw per parameter and step, as Paddle 1.8's kernel.

    Parameters
    ----------
    learning_rate : float or Variable
    clip : float
        The L2 norm a gradient is scaled down to, > 0.
    batch_size : float
        Divides the noise, > 0.
    sigma : float
        Standard deviation of the noise, >= 0.
    parameter_list : list of Parameter or str, optional
        The parameters ``minimize`` updates when it is given none.

    Notes
    -----
    Fluid 1.8 seeds the noise from ``time(NULL)`` (its ``_seed`` attribute, "only used for
    debugging", is passed as the op's ``seed``; 0 means unseeded). Here ``_seed`` 0 (the
    default) draws from the executor's per-op stream seeded by the program's
    ``random_seed``, so runs are reproducible; a non-zero ``_seed`` gives the same noise every
    step, as Paddle's re-seeded engine. Dense gradients only.
    """

    type = "dpsgd"

    def __init__(self, learning_rate: float | Variable = 0.001, clip: float = 0.9,
                 batch_size: float = 0.999, sigma: float = 1e-8,
                 parameter_list: Any = None) -> None:
        super().__init__(learning_rate, parameter_list)
        self._clip = _check_positive("clip", clip)
        self._batch_size = _check_positive("batch_size", batch_size)
        self._sigma = _check_positive("sigma", sigma, allow_zero=True)
        #: Fluid's debugging seed of the noise (0: unseeded; see the class notes)
        self._seed: int | None = None

    def _append_optimize_op(self, block, pg):
        p, g = pg
        return block.append_op(
            "dpsgd",
            inputs={"Param": [p], "Grad": [g], "LearningRate": [self._param_lr(block, p)]},
            outputs={"ParamOut": [p]},
            attrs={"clip": self._clip, "batch_size": self._batch_size, "sigma": self._sigma,
                   "seed": int(self._seed or 0)})


class DGCMomentumOptimizer(Optimizer):
    """Momentum with Deep Gradient Compression (https://arxiv.org/abs/1712.01887), Fluid
    1.8's ``fluid.optimizer.DGCMomentumOptimizer``, for nccl2 trainers.

    Until step ``rampup_begin_step`` it is Momentum over the trainers' summed gradients. From
    then on each trainer keeps its gradients' momentum locally and sends only the largest
    ``1 - sparsity`` of it per parameter (``sparsity`` ramps through its list over
    ``rampup_step`` steps), the rest accumulating until it is large enough; the trainers'
    exchange sums every trainer's entries and the update is plain SGD on them. Parameters
    under 16384 elements, sparse or not float32 get plain Momentum (the ops:
    :mod:`dask_fluid.ops.dgc_ops`).

    Parameters
    ----------
    learning_rate : float or Variable
    momentum : float
    rampup_begin_step : int
        The first compressed step (>= 0; steps count from 0).
    rampup_step : int
        Steps over which ``sparsity`` ramps up through its entries.
    sparsity : list of float
        The fractions of each gradient left unsent, in ramp-up order.
    parameter_list : list, optional
    use_nesterov : bool
    num_trainers : int, optional
        Required with ``grad_clip``: the compressed gradients are clipped to
        ``clip_norm / sqrt(num_trainers)`` locally.
    regularization : L1Decay or L2Decay, optional
        Applied inside the ``dgc`` op for the compressed parameters.
    grad_clip : GradientClipByNorm, optional
    name : str, optional

    Notes
    -----
    Fluid 1.8 builds this optimizer on CUDA only; here the same programs also train on CPUs,
    over the trainers' TCP ring. Run the program as a ``CompiledProgram`` of nccl2 trainers
    (``build_strategy.num_trainers > 1``, or the collective fleet in nccl2 mode): elsewhere
    the ``dgc`` op raises, as Fluid's (DGC needs several trainers).
    """

    type = "dgc_momentum"
    _u_velocity_acc_str = "_dgc_u_"
    _v_velocity_acc_str = "_dgc_v_"

    def __init__(self, learning_rate: float | Variable, momentum: float,
                 rampup_begin_step: int, rampup_step: int = 1,
                 sparsity: list[float] | tuple[float, ...] = (0.999,),
                 parameter_list: Any = None, use_nesterov: bool = False,
                 num_trainers: int | None = None, regularization: Any = None,
                 grad_clip: Any = None, name: str | None = None) -> None:
        refuse_in_dygraph("DGCMomentumOptimizer")
        if learning_rate is None or momentum is None:
            raise ValueError("DGCMomentumOptimizer needs learning_rate and momentum")
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum = _check_positive("momentum", momentum, allow_zero=True)
        self._use_nesterov = bool(use_nesterov)
        if int(rampup_begin_step) < 0:
            raise ValueError(f"rampup_begin_step must be >= 0, got {rampup_begin_step}")
        self._rampup_begin_step = int(rampup_begin_step)
        self._rampup_step = _check_positive("rampup_step", rampup_step)
        self._sparsity = [float(s) for s in sparsity]
        if not self._sparsity or not all(0.0 < s <= 1.0 for s in self._sparsity):
            raise ValueError(f"sparsity must be a non-empty list of fractions in (0, 1], got "
                             f"{sparsity!r}")
        self._dgc_clip_norm = None
        if grad_clip is not None:
            if not isinstance(grad_clip, GradientClipByNorm):
                raise TypeError("The type of grad_clip should be 'GradientClipByNorm', because "
                                "DGCMomentumOptimizer only support GradientClipByNorm")
            if not isinstance(num_trainers, int) or isinstance(num_trainers, bool) \
                    or num_trainers <= 0:
                raise ValueError("DGCMomentumOptimizer with grad_clip needs num_trainers, the "
                                 f"number of trainers (an int > 0), got {num_trainers!r}")
            self._dgc_clip_norm = grad_clip.clip_norm * num_trainers ** -0.5
        self._num_trainers = num_trainers
        self.regular_type, self.regular_coeff = self._regularization_param(regularization)
        self._counter: Variable | None = None
        self._nranks: Variable | None = None

    @staticmethod
    def _regularization_param(regularization: Any) -> tuple[int, float]:
        """The dgc op's ``(regular_type, regular_coeff)``: 0 none, 1 L1Decay, 2 L2Decay."""
        if regularization is None:
            return 0, 0.0
        if isinstance(regularization, L1DecayRegularizer):
            return 1, regularization.regularization_coeff
        if isinstance(regularization, L2DecayRegularizer):
            return 2, regularization.regularization_coeff
        raise TypeError(f"DGCMomentumOptimizer's regularization must be None, L1Decay or "
                        f"L2Decay, got {type(regularization).__name__}")

    @staticmethod
    def _is_use_dgc(param: Variable, grad: Variable) -> bool:
        """Whether ``param`` is compressed (Fluid's rule: dense float32, >= 16384 elements)."""
        numel = abs(int(np.prod(param.shape))) if param.shape else 0
        return (numel >= DGC_MIN_NUMEL and param.dtype == "float32"
                and VarType.SELECTED_ROWS not in (param.type, grad.type))

    # -- the backward side: a dgc op per compressed gradient -------------------------------
    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list=None, no_grad_set=None, callbacks=None):
        """``append_backward``, then the step counter and each compressed gradient's
        (``dgc_clip_by_norm`` and) ``dgc`` op, as Fluid 1.8's ``Optimizer.backward``."""
        params_grads = super().backward(loss, startup_program, parameter_list, no_grad_set,
                                        callbacks)
        with program_guard(loss.block.program, startup_program):
            self._append_dgc_ops(params_grads)
        return params_grads

    def _global_var(self, name: str, value: float) -> tuple[Variable, bool]:
        block = default_main_program().global_block()
        if block.has_var(name):
            return block.var(name), False
        return create_global_var([1], value, "float32", persistable=True, force_cpu=True,
                                 name=name), True

    def _append_dgc_ops(self, params_grads: list) -> None:
        main = default_main_program()
        main._enable_dgc = True
        self._counter, new = self._global_var(DGC_COUNTER, -1.0)
        if new:  # 0 at the first step
            main.global_block()._prepend_op("increment", inputs={"X": [self._counter]},
                                            outputs={"Out": [self._counter]},
                                            attrs={"step": 1.0})
        self._nranks, _ = self._global_var(DGC_NRANKS, -1.0)
        self._global_var(DGC_RAMPUP_BEGIN, float(self._rampup_begin_step))
        block = main.global_block()
        for param, grad in params_grads:
            u = self._add_accumulator(self._u_velocity_acc_str, param)
            if not self._is_use_dgc(param, grad):
                continue
            v = self._add_accumulator(self._v_velocity_acc_str, param)
            k, encoded, gather = (
                create_global_var([1], 0.0, param.dtype, persistable=True,
                                  force_cpu=suffix == DGC_K, name=param.name + suffix)
                for suffix in (DGC_K, DGC_ENCODED, DGC_GATHER))
            # the dgc op, not the backward op that made the gradient, now names the pair
            # (what the nccl2 exchange reads to find the gradients it reduces)
            for op in block.ops:
                pairs = op.attrs.get(OP_ROLE_VAR_KEY)
                if op.attrs.get(OP_ROLE_KEY) != OpRole.Backward or not pairs \
                        or param.name not in pairs:
                    continue
                pairs = list(pairs)
                pairs.remove(param.name)
                pairs.remove(grad.name)
                if len(pairs) > 1:
                    op._set_attr(OP_ROLE_VAR_KEY, pairs)
                else:
                    op.attrs.pop(OP_ROLE_VAR_KEY, None)
            role = {OP_ROLE_KEY: OpRole.Backward}
            if self._dgc_clip_norm is not None:
                block.append_op("dgc_clip_by_norm",
                                inputs={"X": [grad], "current_step": [self._counter]},
                                outputs={"Out": [grad]},
                                attrs={"max_norm": self._dgc_clip_norm,
                                       "rampup_begin_step": float(self._rampup_begin_step),
                                       **role})
            regular_type, regular_coeff = self.regular_type, self.regular_coeff
            if param.regularizer is not None:  # the parameter's own wins
                regular_type, regular_coeff = self._regularization_param(param.regularizer)
            block.append_op(
                "dgc",
                inputs={"U": [u], "V": [v], "Grad": [grad], "Param": [param],
                        "current_step": [self._counter], "nranks": [self._nranks]},
                outputs={"U_out": [u], "V_out": [v], "EncodeGrad": [encoded],
                         "k": [k], "Grad_out": [grad], "GatherBuff": [gather]},
                attrs={"m": self._momentum, "sparsity": list(self._sparsity),
                       "use_nesterov": self._use_nesterov,
                       "rampup_begin_step": float(self._rampup_begin_step),
                       "rampup_step": float(self._rampup_step),
                       "regular_coeff": float(regular_coeff),
                       "regular_type": int(regular_type),
                       **role, OP_ROLE_VAR_KEY: [param.name, grad.name]})

    # -- the optimize side ------------------------------------------------------------------
    def _clipped_and_decayed(self, program: Program, params_grads: list) -> list:
        """The uncompressed pairs clipped and decayed as by any optimizer; the compressed ones
        as they are (their ``dgc`` ops clip and decay)."""
        dense = super()._clipped_and_decayed(
            program, [pg for pg in params_grads if not self._is_use_dgc(*pg)])
        done = {p.name: (p, g) for p, g in dense}
        return sorted((done.get(p.name, (p, g)) for p, g in params_grads),
                      key=lambda pg: pg[0].name)

    def _append_optimize_op(self, block, pg):
        p, g = pg
        u = self._acc(self._u_velocity_acc_str, p)
        inputs = {"Param": [p], "Grad": [g], "Velocity": [u],
                  "LearningRate": [self._param_lr(block, p)]}
        outputs = {"ParamOut": [p], "VelocityOut": [u]}
        attrs = {"mu": self._momentum, "use_nesterov": self._use_nesterov}
        if not self._is_use_dgc(p, g):
            return block.append_op("momentum", inputs=inputs, outputs=outputs, attrs=attrs)
        return block.append_op(
            "dgc_momentum",
            inputs={**inputs, "current_step": [self._counter], "nranks": [self._nranks]},
            outputs={**outputs, "Grad_out": [g]},
            attrs={**attrs, "rampup_begin_step": float(self._rampup_begin_step)})


Adadelta = AdadeltaOptimizer
Dpsgd = DpsgdOptimizer


__all__ = ["SGD", "SGDOptimizer", "Momentum", "MomentumOptimizer", "LarsMomentum",
           "LarsMomentumOptimizer", "Adam", "AdamOptimizer", "Adamax", "AdamaxOptimizer",
           "Adagrad", "AdagradOptimizer", "DecayedAdagrad", "DecayedAdagradOptimizer", "Ftrl",
           "FtrlOptimizer", "Lamb", "LambOptimizer", "RMSProp", "RMSPropOptimizer",
           "Optimizer", "default_main_program", "Adadelta", "AdadeltaOptimizer", "Dpsgd",
           "DpsgdOptimizer", "ModelAverage", "ExponentialMovingAverage", "LookaheadOptimizer",
           "RecomputeOptimizer", "PipelineOptimizer", "DGCMomentumOptimizer"]
