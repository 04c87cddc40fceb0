"""Data parallelism over several places of one process (Fluid's multi-device ParallelExecutor).

Fluid 1.8 runs a data-parallel program on ``CPU_NUM`` CPU places or on every selected GPU:
each place gets a slice of the batch and a local scope, runs forward and backward, the
parameter gradients are all-reduced, and the optimizer updates one set of parameters. Place 0
runs in the caller's scope (Fluid's ``local_scopes_[0]`` is the global scope); the other
places run in scopes of their own that read the parameters of place 0 at every step.

One step here:

1. split the feed along dim 0 (``ceil(batch / places)`` rows a place, as Fluid's
   ``SplitLoDTensor``), or take one feed dict per place;
2. run the forward and backward ops on every place, in a thread per place (numpy and CuPy
   release the GIL in their kernels), with ``loss@GRAD`` seeded as the gradient scale strategy
   says: ``1/places`` (``CoeffNumDevice``, so the sum is the gradient of the whole batch's
   mean), ``1`` (``One``) or the value fed (``Customized``);
3. sum every parameter gradient into place 0's scope and run the optimize ops there once;
4. fetch every fetched variable from every place and concatenate along dim 0, as Fluid's
   fetch op merges them (a loss of shape ``[1]`` comes back as ``[places]``).

Persistable variables that forward ops write (batch-norm moving statistics, learning-rate
counters) keep place 0's values, which is what Fluid saves and what its place 0 reads.

A transpiled pserver trainer program runs the same way: its RPC and split/concat ops (roles
RPC and Dist) take the place of the optimize ops, so the places' summed gradients are sent
once and the received parameters serve every place, as Fluid's ParallelExecutor does before
its send ops. Programs with collective ops (NCCL2) or a ``listen_and_serv`` run on one place a
process.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .executor import CUDAPlace, Executor, Scope
from .framework import OP_ROLE_KEY, OpRole, Program, VarType
from .lod import LoDTensor
from .ops.registry import to_host
from .ops.selected_rows import SelectedRows
from .program_phases import gradient_names, optimize_start

__all__ = ["MultiPlaceStep", "split_feed"]

#: ops that tie a program to one place a process (collectives, serving, remote lookups)
_ONE_PLACE_OPS = frozenset({"listen_and_serv", "fused_allreduce", "dgc_allreduce", "allreduce",
                            "broadcast",
                            "c_allreduce_sum", "c_broadcast", "gen_nccl_id",
                            "c_gen_nccl_id", "c_comm_init", "distributed_lookup_table",
                            "prefetch"})
#: a trainer's communication with its pservers: run once, after the places' gradients are
#: summed
_RPC_ROLES = OpRole.RPC | OpRole.Dist


def split_feed(feed: dict, count: int, replicated: frozenset = frozenset()) -> list[dict]:
    """``feed`` split along dim 0 into ``count`` per-place dicts (Fluid's rule: ``ceil(batch
    / count)`` rows a place); names in ``replicated`` and 0-d values go to every place.

    Raises
    ------
    ValueError
        When a batch has fewer samples than places, or two feeds split differently.
    """
    parts: list[dict] = [{} for _ in range(count)]
    for name, value in feed.items():
        key = getattr(value, "name", None) if not isinstance(name, str) else name
        key = str(name if key is None else key)
        if isinstance(value, LoDTensor) and value._lod:
            for part, piece in zip(parts, _split_lod(key, value, count), strict=True):
                part[key] = piece
            continue
        arr = value if hasattr(value, "ndim") and not hasattr(value, "lod") else \
            np.asarray(value)
        if key in replicated or arr.ndim == 0:
            for part in parts:
                part[key] = arr
            continue
        batch = int(arr.shape[0])
        step = max(1, math.ceil(batch / count))
        if math.ceil(batch / step) < count:
            raise ValueError(
                f"feed {key!r} has {batch} samples, fewer than the {count} places it is split "
                f"over (CPU_NUM or the selected GPUs): feed at least {count} samples, or one "
                "feed dict per place")
        for i, part in enumerate(parts):
            part[key] = arr[i * step:(i + 1) * step]
    return parts


def _split_lod(key: str, value: LoDTensor, count: int) -> list[LoDTensor]:
    """``value`` cut into ``count`` LoD tensors of whole top-level sequences (Fluid's
    ``SplitLoDTensor``: ``ceil(sequences / count)`` a place), each LoD rebased to 0."""
    lod = [np.asarray(level, dtype=np.int64) for level in value._lod]
    seqs = len(lod[0]) - 1
    step = max(1, math.ceil(seqs / count))
    if math.ceil(seqs / step) < count:
        raise ValueError(f"feed {key!r} has {seqs} sequences, fewer than the {count} places it "
                         "is split over: feed at least one sequence a place")
    arr = value._require()
    pieces = []
    for i in range(count):
        lo, hi = i * step, min((i + 1) * step, seqs)
        levels = []
        for level in lod:
            part = level[lo:hi + 1]
            levels.append(tuple(int(v) for v in part - part[0]))
            lo, hi = int(part[0]), int(part[-1])  # the next level's (or the rows') span
        pieces.append(LoDTensor._of(arr[lo:hi], tuple(levels), value._where))
    return pieces


class MultiPlaceStep:
    """One data-parallel step of ``program`` over ``places`` (see the module docstring).

    Parameters
    ----------
    program : Program
        The program as the CompiledProgram runs it (passes applied; without the
        ``loss@GRAD`` seed when ``scale`` is ``"fed"``).
    places : list of places
        Two or more places of one kind; place 0 is the Executor's.
    loss_name : str or None
        Needed when the program trains.
    scale : {"mean", "one", "fed"}
        The gradient scale strategy (``CoeffNumDevice``, ``One``, ``Customized``).
    place_group : callable, optional
        Called with the places' scopes (place 0's first) at every step: puts a communicator
        among the places into each scope and returns the group, with ``abort(reason,
        place=i)``, ``failed_place`` (the first place to abort it) and ``detach()``
        (``BuildStrategy.sync_batch_norm``:
        :class:`dask_fluid.distributed.collective.places.PlaceGroup`).
    """

    def __init__(self, program: Program, places: Sequence[Any], loss_name: str | None,
                 scale: str, place_group: Callable[[list[Scope]], Any] | None = None) -> None:
        talking = sorted({op.type for block in program.blocks for op in block.ops}
                         & _ONE_PLACE_OPS)
        if talking:
            raise NotImplementedError(
                f"a program with {', '.join(talking)} ops over {len(places)} places is not "
                "implemented in dask_fluid: distributed programs run one place per process; "
                "set CPU_NUM=1 (or FLAGS_selected_gpus to one GPU) and start one trainer per "
                "device")
        self.places = list(places)
        self.loss_name = loss_name
        rpc = [i for i, op in enumerate(program.global_block().ops)
               if op.attrs.get(OP_ROLE_KEY, 0) & _RPC_ROLES]
        if rpc:
            if any(op.attrs.get(OP_ROLE_KEY, 0) & OpRole.Optimize
                   for op in program.global_block().ops):
                raise NotImplementedError(
                    f"a trainer program that optimizes locally and talks to pservers (GEO-SGD) "
                    f"over {len(places)} places is not implemented in dask_fluid; set "
                    "CPU_NUM=1 and start one trainer per device")
            program = _rpc_last(program, rpc)
        first = optimize_start(program) if not rpc else \
            len(program.global_block().ops) - len(rpc)
        self.grads = gradient_names(program, first) if first is not None else []
        if self.grads and not loss_name:
            raise ValueError(
                f"training over {len(self.places)} places needs the loss: pass loss_name= to "
                "with_data_parallel (or ParallelExecutor), so that each place's gradient is "
                "scaled by the gradient scale strategy")
        compute = program
        self.optimize: Program | None = None
        if self.grads:
            compute, self.optimize = program.clone(), program.clone()
            compute.global_block().ops = compute.global_block().ops[:first]
            self.optimize.global_block().ops = self.optimize.global_block().ops[first:]
        # Fluid scales the loss gradient the backward pass seeds whether or not an optimizer
        # follows (an append_backward alone: the gradients fetched are the places' mean's)
        if scale != "fed" and (self.grads or _loss_grad_seed(program, loss_name) is not None):
            if compute is program:  # (the caller's program stays as it is)
                compute = program.clone()
            _seed_loss_grad(compute, loss_name, 1.0 / len(self.places)
                            if scale == "mean" else 1.0)
        self.compute = compute
        self.persistables = sorted(v.name for v in program.list_vars()
                                   if v.persistable and v.type != VarType.RAW)
        self.loss_grad = (loss_name + "@GRAD") if loss_name else None
        self._executors: list[Executor] = [Executor(p) for p in self.places[1:]]
        self._scopes = [Scope() for _ in self.places[1:]]
        self._main_scope: Scope | None = None
        self._place_group = place_group
        self._pool = ThreadPoolExecutor(max_workers=len(self.places),
                                        thread_name_prefix="dask-fluid-place")

    def run(self, executor: Executor, scope: Scope, feed: Any, fetch_names: list[str],
            return_numpy: bool, return_merged: bool = True) -> list:
        """One step: ``executor`` (place 0's) and ``scope`` are the caller's. Each fetched
        variable comes back merged over the places, or (``return_merged=False``) as the list
        of each place's value."""
        count = len(self.places)
        self._main_scope = scope
        if isinstance(feed, list | tuple):
            feeds = [dict(each) for each in feed]
        else:
            replicated = frozenset({self.loss_grad}) if self.loss_grad else frozenset()
            feeds = split_feed(dict(feed or {}), count, replicated)
        group = None if self._place_group is None else self._place_group(
            [scope, *self._scopes])
        try:
            runs = [self._pool.submit(self._run_place, group, i, executor, scope, feeds[i])
                    for i in range(count)]
            errors = [f.exception() for f in runs]
        finally:
            if group is not None:
                group.detach()
        # the place that failed first raises its own error, not the places it stopped
        first = getattr(group, "failed_place", None)
        if first is not None:
            raise errors[first]
        for error in errors:
            if error is not None:
                raise error
        if self.optimize is not None:
            for grad in self.grads:
                scope.vars[grad] = self._summed(scope, grad)
            executor.run(self.optimize, scope=scope, return_numpy=False)
        if not return_merged:
            return [self._place_values(scope, name, return_numpy) for name in fetch_names]
        return [self._merged_fetch(executor, scope, name, return_numpy) for name in fetch_names]

    def drop_local_scopes(self) -> None:
        """Forget the temporaries of the places other than place 0."""
        self._scopes = [Scope() for _ in self._scopes]

    def close(self) -> None:
        """Stop the place threads and drop the other places' scopes."""
        self._pool.shutdown(wait=True)
        for ex in self._executors:
            ex.close()
        self.drop_local_scopes()

    # -- steps ----------------------------------------------------------------------------------
    def _run_place(self, group: Any, i: int, executor: Executor, scope: Scope,
                   feed: dict) -> None:
        try:
            if i == 0:
                executor.run(self.compute, feed=feed, scope=scope, return_numpy=False)
            else:
                self._run_other(i, feed)
        except BaseException as exc:
            if group is not None:  # the other places may wait for this one in a collective
                group.abort(f"place {i} failed: {type(exc).__name__}: {exc}", place=i)
            raise

    def _run_other(self, i: int, feed: dict) -> None:
        ex, local = self._executors[i - 1], self._scopes[i - 1]
        with ex._on_device():
            self._share_persistables(self._main_scope, local)
            ex.run(self.compute, feed=feed, scope=local, return_numpy=False)

    def _share_persistables(self, main: Scope, local: Scope) -> None:
        # numpy arrays are shared, not copied: the compute ops only read them (optimize ops,
        # the only in-place writers, run in place 0's scope); a GPU place gets its own copy
        on_gpu = isinstance(self.places[0], CUDAPlace)
        for name in self.persistables:
            if name in main.vars:
                value = main.vars[name]
                local.vars[name] = value if not on_gpu else _to_current_device(value)

    def _summed(self, scope: Scope, grad: str) -> Any:
        parts = [scope.vars[grad]] + [local.vars[grad] for local in self._scopes]
        if any(isinstance(p, SelectedRows) for p in parts):
            if not all(isinstance(p, SelectedRows) for p in parts):
                parts = [p.to_dense() if isinstance(p, SelectedRows) else p for p in parts]
                return _sum_dense(parts)
            xp = parts[0].xp
            return SelectedRows(xp.concatenate([xp.asarray(p.rows) for p in parts]),
                                xp.concatenate([_on_first(p.value, parts[0].value)
                                                for p in parts]),
                                parts[0].height)
        return _sum_dense(parts)

    def _values(self, scope: Scope, name: str) -> list:
        """``name``'s value on each place (dense)."""
        if name in self.persistables:
            # one value for all places after the update; Fluid returns it once per place
            values = [scope.vars.get(name)] * len(self.places)
        else:
            values = [scope.vars.get(name)] + [local.vars.get(name) for local in self._scopes]
        if any(v is None for v in values):
            raise ValueError(f"fetch {name!r}: the variable was not computed on every place "
                             "by this run")
        return [v.to_dense() if isinstance(v, SelectedRows) else v for v in values]

    def _place_values(self, scope: Scope, name: str, return_numpy: bool) -> list:
        values = self._values(scope, name)
        if return_numpy:
            return [np.array(to_host(v), copy=True) for v in values]
        return [LoDTensor._of(v, (), place) for v, place in zip(values, self.places,
                                                                  strict=True)]

    def _merged_fetch(self, executor: Executor, scope: Scope, name: str,
                      return_numpy: bool) -> Any:
        values = self._values(scope, name)
        xp = executor._xp
        merged = xp.concatenate([xp.reshape(_on_first(v, values[0]), (1,))
                                 if getattr(v, "ndim", 1) == 0 else _on_first(v, values[0])
                                 for v in values])
        if return_numpy:
            return np.array(to_host(merged), copy=True)
        return LoDTensor._of(merged, (), executor.place)  # as Fluid: every fetch a LoDTensor


def _rpc_last(program: Program, rpc: list[int]) -> Program:
    """``program`` with its RPC and Dist ops moved after every other op, in their order: they
    read only gradients (which the other ops finish) and write only parameters (which no op
    of the same step reads again)."""
    prog = program.clone()
    block = prog.global_block()
    moved = set(rpc)
    block.ops = [op for i, op in enumerate(block.ops) if i not in moved] + \
        [block.ops[i] for i in rpc]
    return prog


def _loss_grad_seed(program: Program, loss_name: str | None) -> Any:
    """The op of ``program``'s backward pass that seeds ``loss_name``'s gradient, or None (also
    for no loss_name)."""
    grad = f"{loss_name}@GRAD"
    return next((op for op in program.global_block().ops
                 if op.type == "fill_constant" and op.output_arg_names == [grad]), None)


def _seed_loss_grad(program: Program, loss_name: str, value: float) -> None:
    seed = _loss_grad_seed(program, loss_name)
    if seed is None:
        raise ValueError(f"the program has no {loss_name + '@GRAD'!r} seeded by the backward "
                         f"pass: is loss_name {loss_name!r} the loss that minimize() used?")
    seed._set_attr("value", float(value))


def _sum_dense(parts: list) -> Any:
    total = parts[0]
    for part in parts[1:]:
        total = total + _on_first(part, parts[0])
    return total


def _on_first(value: Any, first: Any) -> Any:
    """``value`` on the device of ``first`` (a no-op on numpy)."""
    device = getattr(first, "device", None)
    if device is None or isinstance(first, np.ndarray) or \
            getattr(value, "device", None) == device:
        return value
    import cupy  # only GPU arrays have a device

    with device:
        return cupy.asarray(value)


def _to_current_device(value: Any) -> Any:
    if isinstance(value, SelectedRows):
        return SelectedRows(_to_current_device(value.rows), _to_current_device(value.value),
                            value.height)
    if isinstance(value, np.ndarray) or not hasattr(value, "device"):
        return value
    import cupy

    return cupy.asarray(value)  # copies to the current device when it differs
