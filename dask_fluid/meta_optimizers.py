"""Optimizers of Fluid 1.8's ``fluid.optimizer`` that wrap another one: LookaheadOptimizer,
RecomputeOptimizer (and what they leave unimplemented: PipelineOptimizer).

The inner optimizer is duck-typed (anything with ``minimize``, ``backward``,
``apply_gradients``), so this module does not import :mod:`dask_fluid.optimizer`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .backward import (
    _addup_repetitive_outputs,
    _array_grads,
    _grad_descs,
    append_grad_ops,
    loss_op_path,
)
from .framework import (
    OP_ROLE_KEY,
    OP_ROLE_VAR_KEY,
    Block,
    OpRole,
    Parameter,
    Program,
    Variable,
    default_startup_program,
    grad_var_name,
    program_guard,
    refuse_in_dygraph,
)
from .layers import control_flow, nn, tensor

__all__ = ["LookaheadOptimizer", "RecomputeOptimizer", "PipelineOptimizer"]


# ---------------------------------------------------------------------------------------------
# Lookahead


class LookaheadOptimizer:
    """Lookahead (https://arxiv.org/abs/1907.08610), following Fluid 1.8's
    ``fluid.optimizer.LookaheadOptimizer``.

    The inner optimizer updates the parameters (the fast ones) every step; every ``k`` steps
    ``slow = alpha * fast + (1 - alpha) * slow`` and ``fast = slow``. The slow parameters
    ``<param>@SLOW`` start as copies of the fast ones (an ``assign`` in the startup program).

    Parameters
    ----------
    inner_optimizer : Optimizer
        Updates the fast parameters each step (any object with ``minimize``).
    alpha : float
        The slow parameters' step size, in [0, 1].
    k : int
        The slow parameters are updated every ``k`` steps (> 0).

    Raises
    ------
    ValueError
        ``inner_optimizer`` is None, or ``alpha`` or ``k`` is out of range.
    TypeError
        ``k`` is not an int.
    """

    def __init__(self, inner_optimizer: Any, alpha: float = 0.5, k: int = 5) -> None:
        refuse_in_dygraph("LookaheadOptimizer")
        if inner_optimizer is None:
            raise ValueError("LookaheadOptimizer: inner optimizer can not be None")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError(f"LookaheadOptimizer: alpha must be in [0, 1], got {alpha!r}")
        if not isinstance(k, int) or isinstance(k, bool):
            raise TypeError(f"LookaheadOptimizer: k must be an int, got {type(k).__name__}")
        if k <= 0:
            raise ValueError(f"LookaheadOptimizer: k must be a positive integer, got {k}")
        self.inner_optimizer = inner_optimizer
        self.alpha = float(alpha)
        self.k = k
        self.type = "lookahead"

    def minimize(self, loss: Variable, startup_program: Program | None = None) -> Any:
        """The inner optimizer's ``minimize``, then the Lookahead ops (Fluid 1.8's layout):
        ``<param>@SLOW`` for every parameter of the loss's block, persistable variables
        ``lookahead_k``, ``lookahead_alpha`` and ``lookahead_step`` (``increment`` each
        run), and a ``Switch`` whose case ``step % k == 0`` interpolates and copies back.

        Returns
        -------
        What the inner optimizer's ``minimize`` returned.
        """
        if not isinstance(loss, Variable):
            raise TypeError(f"LookaheadOptimizer.minimize: loss must be a Variable, got "
                            f"{type(loss).__name__}")
        mini_out = self.inner_optimizer.minimize(loss, startup_program=startup_program)
        if startup_program is None:
            startup_program = default_startup_program()
        main_block = loss.block
        params = [p.name for p in main_block.all_parameters()]
        param_to_slow = {}
        for name in params:
            fast = main_block.var(name)
            param_to_slow[name] = main_block.create_var(
                name=name + "@SLOW", shape=fast.shape, dtype=fast.dtype, persistable=True)
        startup_block = startup_program.global_block()
        for name in params:
            if not startup_block.has_var(name):
                raise ValueError(f"LookaheadOptimizer: the startup program does not create the "
                                 f"parameter {name!r}; pass the program that initialises it")
            fast = startup_block.var(name)
            slow = startup_block.create_var(name=name + "@SLOW", shape=fast.shape,
                                            dtype=fast.dtype, persistable=True)
            startup_block.append_op("assign", inputs={"X": [fast]}, outputs={"Out": [slow]})

        # Fluid 1.8.0 creates these without program_guard, so their initialisers land in the
        # default startup program even when another one is passed (fixed after 1.8, Paddle
        # PR 25688): here they go to ``startup_program``, the one the slow params use
        with program_guard(main_block.program, startup_program):
            k = tensor.create_global_var(name="lookahead_k", shape=[1], value=int(self.k),
                                         dtype="int32", persistable=True)
            alpha = tensor.create_global_var(name="lookahead_alpha", shape=[1],
                                             value=float(self.alpha), dtype="float32",
                                             persistable=True)
            step = tensor.create_global_var(name="lookahead_step", shape=[1], value=0,
                                            dtype="int32", persistable=True)
            tensor.increment(x=step, value=1.0, in_place=True)
            zero_var = tensor.fill_constant(shape=[1], dtype="float32", value=0.0)
            one_var = tensor.fill_constant(shape=[1], dtype="float32", value=1.0)
            mod = nn.elementwise_mod(step, k)
            with control_flow.Switch() as switch:
                # Fluid's ``mod == zero_var``: an ``equal`` op
                with switch.case(tensor.equal(mod, zero_var)):
                    for name in params:
                        fast = main_block.var(name)
                        slow = param_to_slow[name]
                        tmp = nn.elementwise_add(
                            nn.elementwise_mul(fast, alpha),
                            nn.elementwise_mul(slow, nn.elementwise_sub(one_var, alpha)))
                        tensor.assign(input=tmp, output=slow)
                        tensor.assign(input=tmp, output=fast)
                with switch.default():
                    pass
        return mini_out


# ---------------------------------------------------------------------------------------------
# Recompute


class _ProgramStats:
    """Fluid 1.8's ``backward.ProgramStats``: which ops of the op path read and write each
    variable, for finding the segments between checkpoints."""

    def __init__(self, block: Block, ops: list) -> None:
        self.block = block
        self.ops = ops
        self.readers: dict[str, list[int]] = {}
        self.writers: dict[str, list[int]] = {}
        for i, op in enumerate(ops):
            for name in op.input_arg_names:
                self.readers.setdefault(name, []).append(i)
                self.writers.setdefault(name, [])
            for name in op.output_arg_names:
                self.writers.setdefault(name, []).append(i)
                self.readers.setdefault(name, [])

    def _persistable(self, name: str) -> bool:
        var = self.block._find_var_recursive(name)
        return var is not None and var.persistable

    def input_nodes(self) -> list[str]:
        names = [n for n in self.writers
                 if not self.writers[n] and self.readers[n] and not self._persistable(n)]
        # a reader's batch is an input too: running ``read`` again would take the next one
        return names + [n for op in self.ops if op.type == "read" for n in op.output_arg_names]

    def reserved_vars(self) -> list[str]:
        # Fluid 1.6's rule: dropout's outputs stay in memory, so it is not run again and its
        # grad op reads the forward pass's mask (Fluid 1.8 holds a seed op's output instead
        # and reruns dropout with it; dask_fluid's dropout has no Seed input)
        return [n for op in self.ops if op.type == "dropout" for n in op.output_arg_names]

    def out_of_subgraph_vars(self, begin: int, end: int) -> list[str]:
        names = []
        for i in range(begin, end):
            op = self.ops[i]
            names += [n for n in op.output_arg_names if any(j >= end for j in self.readers[n])]
            names += [n for n in op.input_arg_names if any(j < begin for j in self.writers[n])]
        return names

    def is_subgraph(self, first: str, second: str) -> tuple[bool, int, int]:
        lo, hi = len(self.ops), -1
        if first not in self.readers or second not in self.writers:
            return False, lo, hi
        lo = min(self.readers[first], default=lo)
        hi = max(self.writers[second], default=hi)
        return lo < hi, lo, hi

    def sort_checkpoints(self, names: Iterable[str]) -> list[str]:
        # by the last op writing each (-1 for inputs); unused names are dropped, as in Fluid
        keyed = [(n, max(self.writers[n], default=-1)) for n in names if n in self.writers]
        return [n for n, _ in sorted(keyed, key=lambda t: t[1])]


def _segments(stats: _ProgramStats, checkpoints: list[str]) -> list[list[int]]:
    """Fluid 1.8's recompute segments: op ranges ``[start, end)`` from the first reader of
    each checkpoint to the last writer of the next; with one checkpoint, from op 0 to its
    writer. The ops before the first segment make a segment of their own."""
    segments = []
    if len(checkpoints) == 1:
        last = max(stats.writers.get(checkpoints[0], []), default=-1)
        if last > 0:
            segments.append([0, last + 1])
    else:
        for first, second in zip(checkpoints, checkpoints[1:], strict=False):
            ok, lo, hi = stats.is_subgraph(first, second)
            if ok:
                segments.append([lo, hi + 1])
    if segments and segments[0][0] != 0:
        segments.insert(0, [0, segments[0][0]])
    return segments


def _renamed(slots: dict, names: dict[str, str]) -> dict:
    return {slot: [names.get(n, n) for n in args] for slot, args in slots.items()}


def append_backward_with_checkpoints(
        loss: Variable, parameter_list: Iterable | None, no_grad_set: Iterable | None,
        checkpoints: Sequence[Variable]) -> tuple[list[tuple[Parameter, Variable]], list[str]]:
    """``append_backward`` with forward recomputation (Fluid 1.8's ``append_backward(...,
    checkpoints=...)``, ``_append_backward_ops_with_checkpoints_``).

    The grad ops are those ``append_backward`` appends, in the same order; before the grad
    ops of each segment come the segment's forward ops that write a variable not kept in
    memory (checkpoints, variables used across segments, the program's inputs, dropout's
    outputs and persistable variables are kept), as ``op_role = Backward`` ops writing
    ``<name>.subprog_<i>`` (``i`` counts segments from the last), which the segment's grad
    ops read instead.

    Returns
    -------
    (params_grads, sorted checkpoint names)
    """
    _, block, ops, no_grad = loss_op_path(loss, no_grad_set)
    for op in ops:
        if "sub_block" in op.attrs:
            # as Fluid 1.8: "Recompute don't support ops with sub_block"
            raise NotImplementedError(
                f"RecomputeOptimizer: the op {op.type!r} has a sub-block; recomputing ops "
                "with sub-blocks is not implemented in dask_fluid (nor in Fluid 1.8)")
    ops[-1]._set_attr(OP_ROLE_KEY, OpRole.Forward | OpRole.Loss)

    stats = _ProgramStats(block, ops)
    names = stats.sort_checkpoints(dict.fromkeys(c.name for c in checkpoints))
    segments = _segments(stats, names)
    held = []
    for begin, end in segments:
        held += stats.out_of_subgraph_vars(begin, end)
    held += stats.reserved_vars() + stats.input_nodes()
    held_set = set(held)
    in_memory = held_set | set(names)

    loss_grad = grad_var_name(loss.name)
    # the grad ops as append_backward builds them (same pruning, same order), un-summed
    descs = _grad_descs(ops, no_grad, {loss_grad})
    # Fluid's order: per segment, last first, the grad ops of the ops after it (up to the
    # previous segment), then its recomputed forward ops, then its own grad ops, which read
    # the recomputed variables
    rename: dict[str, str] = {}
    grads: list[dict] = []
    recompute: list[tuple[int, list[dict]]] = []  # (position in grads, forward descs)
    pos = 0
    for i, (begin, end) in enumerate(reversed(segments)):
        while pos < len(descs) and descs[pos]["forward_op"] >= end:
            grads.append(descs[pos])
            pos += 1
        fwd = _recompute_descs(block, ops[begin:end], i, rename, held_set, set(names),
                               in_memory)
        recompute.append((len(grads), fwd))
        while pos < len(descs) and descs[pos]["forward_op"] >= begin:
            desc = descs[pos]
            grads.append(dict(desc, inputs=_renamed(desc["inputs"], rename),
                              outputs=_renamed(desc["outputs"], rename)))
            pos += 1
    grads.extend(descs[pos:])
    # the sums of repeated gradient writes, then the recomputed ops put in
    anchors = {id(grads[at]): fwd for at, fwd in recompute if at < len(grads)}
    tail = [d for at, fwd in recompute if at >= len(grads) for d in fwd]
    originals = {id(d) for d in grads}
    summed = _addup_repetitive_outputs(grads, [loss_grad], _array_grads(ops, grads))
    final: list[dict] = []
    for desc in summed:
        fwd = anchors.get(id(desc))
        if fwd is not None:
            # Fluid sums a gradient right before its first reader, which comes after the
            # recomputation: the sums placed just before this desc go behind the recompute
            pending = []
            while final and final[-1]["type"] == "sum" and id(final[-1]) not in originals:
                pending.insert(0, final.pop())
            final += fwd + pending
        final.append(desc)
    final += tail

    return append_grad_ops(loss, final, parameter_list), names


def _recompute_descs(block: Block, seg_ops: list, index: int, rename: dict[str, str],
                     held: set[str], checkpoints: set[str], in_memory: set[str]) -> list[dict]:
    """The forward ops of one segment to run again (Fluid's ``_add_needed_descs_to_block``):
    those writing a non-persistable variable not in memory. Adds the segment's variables
    that are neither persistable, checkpoints nor held to ``rename`` (``.subprog_<index>``)
    and declares them."""
    suffix = f".subprog_{index}"
    for op in seg_ops:
        for name in (*op.input_arg_names, *op.output_arg_names):
            var = block._find_var_recursive(name)
            if (var is None or var.persistable or name in checkpoints or name in held
                    or name in rename):
                continue
            rename[name] = name + suffix
            block.create_var(name=rename[name], shape=var.shape, dtype=var.dtype,
                             type=var.type, persistable=var.persistable,
                             stop_gradient=var.stop_gradient)
    descs = []
    for op in seg_ops:
        needed = False
        for name in op.output_arg_names:
            var = block._find_var_recursive(name)
            if var is not None and var.persistable:
                continue
            if name not in in_memory:
                needed = True
        if needed:
            attrs = {k: v for k, v in op.attrs.items()
                     if k not in (OP_ROLE_KEY, OP_ROLE_VAR_KEY)}
            descs.append({"type": op.type, "inputs": _renamed(op.inputs, rename),
                          "outputs": _renamed(op.outputs, rename), "attrs": attrs})
    return descs


class RecomputeOptimizer:
    """Forward recomputation (gradient checkpointing), following Fluid 1.8's
    ``fluid.optimizer.RecomputeOptimizer``.

    The backward pass keeps only the checkpoints (and the variables used across segments) of
    the forward pass; the forward ops between two checkpoints run again, inside the backward
    pass, right before their grad ops (see :func:`append_backward_with_checkpoints`). The
    gradients are those of ``append_backward``.

    Dropout inside a segment is not run again: its outputs (``Out`` and ``Mask``) stay in
    memory, so its grad op uses the forward pass's mask, as Fluid 1.6 did. Fluid 1.7 and 1.8
    (Paddle PR 21590) instead insert a ``seed`` op before each dropout of the forward pass,
    feed it to the dropout's ``Seed`` input and run the dropout again in the segment; the mask
    is the same either way, but dask_fluid has no ``seed`` op nor a ``Seed`` input on dropout,
    so its program keeps the dropout's outputs instead (one ``dropout`` op fewer in the
    backward pass, no ``seed`` op in the forward pass).

    Parameters
    ----------
    optimizer : Optimizer
        Applies the gradients (any object with ``apply_gradients``; its ``apply_optimize``
        when it has one).

    Examples
    --------
    >>> opt = RecomputeOptimizer(fluid.optimizer.SGD(0.1))  # doctest: +SKIP
    >>> opt._set_checkpoints([fc_1, pred])  # doctest: +SKIP
    >>> opt.minimize(cost)  # doctest: +SKIP
    """

    def __init__(self, optimizer: Any) -> None:
        refuse_in_dygraph("RecomputeOptimizer")
        if optimizer is None:
            raise ValueError("RecomputeOptimizer: optimizer can not be None")
        self._optimizer = optimizer
        self._checkpoints: list | None = None
        self._learning_rate = getattr(optimizer, "_learning_rate", None)

    def _set_checkpoints(self, checkpoints: list[Variable | str]) -> None:
        """The checkpoints: a list of Variables (or their names, resolved in the loss's
        block); an empty list turns recomputation off."""
        if not isinstance(checkpoints, list):
            raise TypeError(f"_checkpoints should be a list of Variable or a list of String, "
                            f"got {type(checkpoints).__name__}")
        for ckpt in checkpoints:
            if not isinstance(ckpt, (str, Variable)):
                raise TypeError(f"_checkpoints should be a list of Variable or a list of "
                                f"String, got an element of type {type(ckpt).__name__}")
        self._checkpoints = checkpoints

    def load(self, stat_dict: Any) -> None:
        """Not supported, as in Fluid 1.8."""
        raise NotImplementedError(
            "load function is not supported by Recompute Optimizer for now")

    def apply_gradients(self, params_grads: list[tuple[Parameter, Variable]]) -> list:
        """The inner optimizer's ``apply_gradients``."""
        return self._optimizer.apply_gradients(params_grads)

    def backward(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Iterable | None = None, no_grad_set: Iterable | None = None,
                 callbacks: Any = None,
                 checkpoints: list | None = None) -> list[tuple[Parameter, Variable]]:
        """``append_backward`` with the checkpoints (``checkpoints``, Fluid 1.7's argument,
        else those of ``_set_checkpoints``); without checkpoints, plain ``append_backward``.

        Raises
        ------
        ValueError
            No checkpoints were set.
        NotImplementedError
            ``callbacks`` is given, or an op of the loss's path has a sub-block.
        """
        if callbacks is not None:
            raise NotImplementedError(
                "RecomputeOptimizer.backward(callbacks=...) is not implemented in dask_fluid")
        if checkpoints is not None:
            self._set_checkpoints(checkpoints)
        if self._checkpoints is None:
            raise ValueError("RecomputeOptimizer: you should call _set_checkpoints first")
        if not isinstance(loss, Variable):
            raise TypeError(f"The loss should be a Variable, got {type(loss).__name__}")
        ckpts = [c if isinstance(c, Variable) else loss.block.var(c) for c in self._checkpoints]
        if not ckpts:  # Fluid: no checkpoints, no recomputation
            return self._optimizer.backward(loss, startup_program, parameter_list,
                                            no_grad_set)
        params_grads, _ = append_backward_with_checkpoints(loss, parameter_list, no_grad_set,
                                                           ckpts)
        if hasattr(self._optimizer, "_append_dgc_ops"):  # DGC's ops close the backward pass
            with program_guard(loss.block.program, startup_program):
                self._optimizer._append_dgc_ops(params_grads)
        return params_grads

    def apply_optimize(self, loss: Variable, startup_program: Program | None,
                       params_grads: list[tuple[Parameter, Variable]]) -> list:
        """The inner optimizer's ``apply_optimize`` (its ``apply_gradients`` when it has
        none, which is what Fluid 1.8's ``apply_optimize`` does in a static program)."""
        apply = getattr(self._optimizer, "apply_optimize", None)
        if apply is not None:
            return apply(loss, startup_program=startup_program, params_grads=params_grads)
        program = loss.block.program
        with program_guard(program, startup_program or default_startup_program()):
            return self._optimizer.apply_gradients(params_grads)

    def minimize(self, loss: Variable, startup_program: Program | None = None,
                 parameter_list: Iterable | None = None, no_grad_set: Iterable | None = None,
                 grad_clip: Any = None) -> tuple[list, list[tuple[Parameter, Variable]]]:
        """``backward`` with recomputation, then ``apply_optimize``.

        Returns
        -------
        (optimize_ops, params_grads)
        """
        if grad_clip is not None:
            # Fluid 1.7 accepted and ignored it ("TODO: should add grad_clip"); give it to
            # the inner optimizer's constructor
            raise NotImplementedError(
                "RecomputeOptimizer.minimize(grad_clip=...) is not implemented in dask_fluid: "
                "pass grad_clip to the inner optimizer")
        if not isinstance(loss, Variable):
            raise TypeError(f"The loss should be a Variable, got {type(loss).__name__}")
        if self._checkpoints is None:
            raise ValueError("RecomputeOptimizer: you should call _set_checkpoints first")
        params_grads = self.backward(loss, startup_program=startup_program,
                                     parameter_list=parameter_list, no_grad_set=no_grad_set)
        optimize_ops = self.apply_optimize(loss, startup_program=startup_program,
                                           params_grads=params_grads)
        return optimize_ops, params_grads


# ---------------------------------------------------------------------------------------------
# Not implemented


class PipelineOptimizer:
    """Fluid 1.8's ``fluid.optimizer.PipelineOptimizer``: not implemented in dask_fluid.

    It splits the program into section programs by ``device_guard`` and runs them on several
    devices of one process, passing micro-batches through queues (the ``PipelineTrainer``
    and ``SectionWorker`` of Fluid's C++ core); dask_fluid's executor runs one program on one
    place.
    """

    def __init__(self, optimizer: Any, num_microbatches: int = 1, start_cpu_core_id: int = 0
                 ) -> None:
        raise NotImplementedError(
            "PipelineOptimizer is not implemented in dask_fluid: it needs section programs "
            "run on several devices of one process (Fluid's PipelineTrainer/SectionWorker)")

