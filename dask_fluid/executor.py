"""Scope and Executor: run a program block on numpy (CPUPlace) or cupy (CUDAPlace).

The executor compiles a block once per (program, feed names, fetch names) into a flat list of
steps, each a kernel with its input and output names resolved, and checks it: every input is
fed, persistable in the scope, or written by an earlier op. A step then costs a dict lookup per
argument and one kernel call. Host ops (control flow, RPC) get a :class:`RunContext`.
"""

from __future__ import annotations

import collections
import contextlib
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ops as _ops  # noqa: F401  (registers every kernel)
from .fetched import fetched
from .framework import (
    EMPTY_VAR,
    OP_DEVICE_KEY,
    Block,
    Operator,
    Program,
    Variable,
    VarType,
    default_main_program,
)
from .global_flags import check_nan_inf
from .lod import LoD, LoDTensor, LoDTensorArray, check_lod
from .ops import registry
from .ops.registry import LOD_KEY, array_module
from .ops.rnn_ops import drops_between_layers
from .ops.selected_rows import SelectedRows
from .places import CPUPlace, CUDAPinnedPlace, CUDAPlace, cupy_for


class _ScopeTensor(LoDTensor):
    """The LoDTensor of one scope variable (Fluid's ``var.get_tensor()``): reads and writes go
    to the scope, so ``t.set(array, place)`` changes what the next run sees, on that place."""

    def __init__(self, scope: Scope, name: str) -> None:  # no data of its own
        self._scope, self._name = scope, name

    @property
    def _array(self) -> Any:
        return self._scope.vars.get(self._name)

    @_array.setter
    def _array(self, value: Any) -> None:
        self._scope.vars[self._name] = value

    @property
    def _lod(self) -> LoD:
        return self._scope.lods.get(self._name, ())

    @_lod.setter
    def _lod(self, lod: LoD) -> None:
        if lod:
            self._scope.lods[self._name] = tuple(lod)
        else:
            self._scope.lods.pop(self._name, None)

    @property
    def _place(self) -> Any:
        value = self._array
        return CPUPlace() if value is None or isinstance(value, np.ndarray) else \
            CUDAPlace(int(getattr(getattr(value, "device", None), "id", 0)))

    @_place.setter
    def _place(self, place: Any) -> None:  # set() stores the place with the data: derived here
        pass


class _Tensor:
    """What ``Scope.find_var(name)`` returns (Fluid's Variable holding a LoDTensor)."""

    def __init__(self, scope: Scope, name: str) -> None:
        self._scope, self._name = scope, name

    def get_tensor(self) -> LoDTensor:
        """The variable's LoDTensor: ``np.array(t)`` reads it, ``t.set(array, place)`` writes
        a copy on ``place``, ``t.lod()`` and ``t.set_lod()`` are its sequences."""
        return _ScopeTensor(self._scope, self._name)

    def set(self, value: Any, place: Any = None) -> None:
        if place is None:
            self._scope.vars[self._name] = value
        else:
            _ScopeTensor(self._scope, self._name).set(value, place)


def _check_finite(step: _Step, out: dict, block_idx: int, i: int) -> None:
    """FLAGS_check_nan_inf: raise if a floating output of the op holds a NaN or an infinity."""
    for slot, names in step.outs:
        for name, arr in zip(names, out.get(slot) or (), strict=False):
            value = arr.value if isinstance(arr, SelectedRows) else arr
            kind = getattr(getattr(value, "dtype", None), "kind", "")
            if name != EMPTY_VAR and kind in ("f", "c") and \
                    not bool(array_module(value).isfinite(value).all()):
                raise ExecutionError(
                    f"op {step.op.type!r} (#{i} in block {block_idx}) output {name!r} (slot "
                    f"{slot}) contains NaN or Inf (FLAGS_check_nan_inf is on)")


class Scope:
    """Name → array storage; persistable variables live here between runs."""

    def __init__(self) -> None:
        self.vars: dict[str, Any] = {}
        #: the LoD of each variable that has one (:mod:`dask_fluid.lod`)
        self.lods: dict[str, LoD] = {}
        self._rngs: dict[tuple, np.random.Generator] = {}

    def find_var(self, name: str) -> _Tensor | None:
        return _Tensor(self, name) if name in self.vars else None

    def var(self, name: str) -> _Tensor:
        self.vars.setdefault(name, None)
        return _Tensor(self, name)

    def get(self, name: str) -> Any:
        """The array stored under ``name``; KeyError naming it when missing."""
        try:
            return self.vars[name]
        except KeyError:
            raise KeyError(f"variable {name!r} is not in the scope; run the startup "
                           "program first or feed it") from None

    def set(self, name: str, value: Any) -> None:
        self.vars[name] = value

    def __contains__(self, name: str) -> bool:
        return name in self.vars

    def keys(self):
        return self.vars.keys()

    def _step_scope(self) -> Scope:
        """A scope for one step of a recurrent op: it reads through to this one and keeps
        what the step writes to itself (Fluid's step scopes, children of the outer scope).
        Steps share this scope's compiled blocks and random generators."""
        child = Scope.__new__(Scope)
        child.vars = collections.ChainMap({}, self.vars)
        child.lods = collections.ChainMap({}, self.lods)
        child._rngs = self._rngs
        child._compile_key = getattr(self, "_compile_key", id(self))
        return child

    def rng(self, key: tuple, seed: int) -> np.random.Generator:
        """A generator per op, kept with the scope so a fresh scope replays the same draws."""
        gen = self._rngs.get(key)
        if gen is None:
            gen = self._rngs[key] = np.random.default_rng([seed, zlib.crc32(repr(key).encode())])
        return gen


_global_scope = Scope()


def global_scope() -> Scope:
    """The scope ``Executor.run`` uses when none is given."""
    return _global_scope


@contextlib.contextmanager
def scope_guard(scope: Scope) -> Iterator[None]:
    """Use ``scope`` as the global scope inside the block."""
    global _global_scope
    saved, _global_scope = _global_scope, scope
    try:
        yield
    finally:
        _global_scope = saved


@dataclass
class RunContext:
    """What a host op (control flow, RPC) sees besides its inputs."""

    executor: Executor
    scope: Scope
    program: Program
    block: Block
    op: Any
    extra: dict = field(default_factory=dict)


@dataclass
class _Step:
    op: Any
    kernel: Any
    ins: tuple
    outs: tuple
    out_slots: tuple
    attrs: dict
    host: bool
    rng_key: tuple | None
    lod: str | None = None
    #: ``op_device="cpu"`` on a CUDAPlace executor: the kernel runs on numpy, its inputs
    #: copied to the host first
    on_host: bool = False
    #: inputs a ``device_guard("cpu")`` op of the program may have left on the host: copied
    #: to the executor's GPU before this op reads them (empty for programs without such ops)
    to_device: tuple = ()
    #: the persistable outputs of an ``on_host`` step: moved back to the GPU as soon as it
    #: wrote them, so between runs (and for the other programs of the scope, a startup
    #: program's initialisers built inside a guard) persistables stay on the executor's place
    persist_out: tuple = ()
    #: the inputs whose LoD the outputs share (Fluid's ``ShareLoD``): see :func:`_lod_sources`
    lod_from: tuple = ()


def _lod_sources(ins: tuple) -> tuple:
    """The inputs an op's outputs may take their LoD from, in order: ``X[0]`` where the op
    has an ``X`` (Fluid's ops ``ShareLoD("X", ...)`` from the first input only, so ``sum``'s
    and ``elementwise_*``'s outputs never take a LoD from a later input), else the first input
    of each slot (``Input``, ``Ids``, ``Logits`` ...). An op sharing another way gives its
    outputs' LoDs itself (``lod="kernel"``)."""
    for slot, names in ins:
        if slot == "X":
            return names[:1]
    return tuple(names[0] for _, names in ins if names)


#: ops that draw random values (see ops.random_ops for when they draw anew each run)
_DRAWS = frozenset({"uniform_random", "gaussian_random", "truncated_gaussian_random",
                    "uniform_random_batch_size_like", "gaussian_random_batch_size_like",
                    "sampling_id"})
#: ops that sample at run time without a random_seed of their own (seed 0 or no seed attr):
#: a per-op stream kept with the scope, as the _DRAWS ops
_SAMPLERS = frozenset({"sample_logits", "rpn_target_assign", "generate_proposal_labels",
                        "tdm_sampler", "dpsgd"})
# Ops whose number of outputs is decided by how many names the program binds.
_NEEDS_OUT_COUNTS = frozenset({"split", "split_ids", "split_byref", "split_selected_rows"})


@dataclass(frozen=True)
class RunInfo:
    """One finished :meth:`Executor.run`, as the run hooks see it.

    Attributes
    ----------
    program : Program
        The program that ran (a CompiledProgram's program); in dygraph mode, where a training
        step (``Optimizer.minimize``) runs no program, the tracer's (``program._tracer``).
    feed : dict or list of dict
        What it was fed (a reader's batch when the caller passed none; one dict per place for
        a CompiledProgram over several places).
    fetch_names : list of str
    fetched : list
        The fetched values, as ``run`` returns them.
    seconds : float
        Wall time of the run.
    """

    program: Program
    feed: Any
    fetch_names: list[str]
    fetched: list
    seconds: float


RunHook = Callable[[RunInfo], None]
# Process-wide, not per executor: a Fluid script builds its own Executors, and whoever watches
# it (``dask-fluid launch`` counting a trainer's steps) cannot reach them. Empty by default, so
# a run costs one list check.
_RUN_HOOKS: list[RunHook] = []


def add_run_hook(hook: RunHook) -> Callable[[], None]:
    """Call ``hook(RunInfo)`` after every successful :meth:`Executor.run` in this process.

    The hook runs on the caller's thread, inside ``run``: it must be quick and must not raise.

    Parameters
    ----------
    hook : callable
        Takes one :class:`RunInfo`.

    Returns
    -------
    callable
        Removes the hook (a no-op when it is already removed).
    """
    _RUN_HOOKS.append(hook)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            _RUN_HOOKS.remove(hook)
    return remove


def has_run_hooks() -> bool:
    """Whether any run hook listens (so a caller builds a :class:`RunInfo` only then)."""
    return bool(_RUN_HOOKS)


def notify_run_hooks(info: RunInfo) -> None:
    """Give ``info`` to every run hook: what ``Executor.run`` does after a run, and what
    dygraph mode does after a training step (``Optimizer.minimize``)."""
    for hook in list(_RUN_HOOKS):
        hook(info)


class ExecutionError(RuntimeError):
    """A kernel failed; the message names the op, its position and its arguments."""


class _Compiled:
    def __init__(self, steps: list[_Step], arrays: tuple[str, ...] = ()) -> None:
        self.steps = steps
        #: (global block) the program's temporary tensor arrays: each run starts them empty,
        #: as Fluid creates temporaries in a scope of the run
        self.arrays = arrays


class Executor:
    """Run programs (Fluid's ``Executor``).

    Parameters
    ----------
    place : CPUPlace or CUDAPlace, optional
        Where kernels run; CPU by default.
    """

    def __init__(self, place: CPUPlace | CUDAPlace | None = None) -> None:
        if isinstance(place, CUDAPinnedPlace):
            raise TypeError("Executor(CUDAPinnedPlace()): no kernel runs in pinned host memory; "
                            "run on CPUPlace() or CUDAPlace(i) (pinned memory is where tensors "
                            "are staged for a GPU: LoDTensor.set(array, CUDAPinnedPlace()))")
        self.place = place or CPUPlace()
        self._xp = cupy_for(self.place) if isinstance(self.place, CUDAPlace) else np
        self._cache: dict[tuple, _Compiled] = {}
        #: use_prune's programs, by program, its version and ops, feed names and fetch list
        self._pruned_programs: dict[tuple, Program] = {}
        #: while set (train_from_dataset's ``debug``), plans time their kernels here:
        #: (block, op index, type) -> [seconds, runs]; the untimed plans carry no timer
        self._op_times: dict[tuple[int, int, str], list] | None = None
        #: hooks the distributed runtimes install for host ops (send, recv, ...)
        self.host_context: dict[str, Any] = {}

    # -- compile ------------------------------------------------------------------------------
    def _compile(self, program: Program, block: Block, feed_names: frozenset,
                 scope: Scope) -> _Compiled:
        known = set(scope.keys()) | set(feed_names)
        steps = []
        on_gpu = isinstance(self.place, CUDAPlace)
        # every block of the program: a variable a host op of the parent block (or of an
        # earlier loop step) wrote may be a numpy array in the scope
        host_written = _host_written(program) if on_gpu else frozenset()
        for idx, op in enumerate(block.ops):
            opdef = registry.get(op.type)
            for slot, names in op.inputs.items():
                for name in names:
                    if name == EMPTY_VAR or name in known or opdef.host:
                        continue
                    var = block._find_var_recursive(name)
                    if var is not None and var.persistable:
                        raise ExecutionError(
                            f"op {op.type!r} (#{idx} in block {block.idx}) reads the persistable "
                            f"variable {name!r} (slot {slot}), which is not in the scope: run "
                            "the startup program first")
                    raise ExecutionError(
                        f"op {op.type!r} (#{idx} in block {block.idx}) reads {slot}={name!r}, "
                        "which is neither fed, in the scope, nor written by an earlier op")
            step = self._plan_step(program, block, idx, op, host_written)
            steps.append(step)
            known.update(n for _, names in step.outs for n in names)
        arrays = () if block.idx else tuple(
            v.name for b in program.blocks for v in b.vars.values()
            if v.type == VarType.LOD_TENSOR_ARRAY and not v.persistable)
        return _Compiled(steps, arrays)

    def _plan_step(self, program: Program, block: Block, idx: int, op: Operator,
                   host_written: frozenset = frozenset()) -> _Step:
        """The step of op ``idx`` of ``block``: its kernel, resolved names and run-time
        attributes (also how dygraph's tracer runs one op at a time)."""
        opdef = registry.get(op.type)
        on_gpu = isinstance(self.place, CUDAPlace)
        host = opdef.host
        kernel = opdef.resolve()
        if registry.is_remote(op.attrs):
            host, kernel = True, opdef.resolve_remote()
        if kernel is None:
            raise ExecutionError(
                f"op {op.type!r} (#{idx} in block {block.idx}) has no kernel here: it "
                "cannot be executed")
        on_host = False
        device = op.attrs.get(OP_DEVICE_KEY)
        if device and not host:  # host ops run on the host whatever their op_device
            # Fluid's OperatorWithKernel::InnerGetExpectedKernelType: "cpu" picks the CPU
            # kernel; "gpu" the executor's place (the CPU one on CPUPlace), any index
            # ignored with this warning
            on_host = on_gpu and device == "cpu"
            if ":" in device:
                warnings.warn(f"op {op.type!r} (#{idx} in block {block.idx}) has op_device="
                              f"{device!r}: Device index is only supported under pipeline "
                              "parallelism, so it will be ignored.", stacklevel=5)
        attrs = dict(op.attrs)
        if op.type in _DRAWS or op.type in ("fill_constant", "fake_init", "assign_value"):
            attrs["_out_name"] = op.output("Out")[0]
            attrs["_place"] = "gpu" if on_gpu and not on_host else "cpu"
        if op.type in _NEEDS_OUT_COUNTS:
            attrs["_out_counts"] = {slot: len(names) for slot, names in op.outputs.items()}
        rng_key = None
        if op.type == "dropout":
            rng_key = (block.idx, idx, op.output("Out")[0])
            attrs.setdefault("seed", 0)
            if not attrs.get("fix_seed"):
                attrs["seed"] = program.random_seed
        elif op.type in _DRAWS and not attrs.get("seed"):
            out = block._find_var_recursive(op.output("Out")[0])
            if not (out is not None and out.persistable):
                # Fluid's seed 0: new values each run (a stream per op, kept with the
                # scope); initialisers keep the per-name draw of ops.random_ops
                rng_key = (block.idx, idx, op.output("Out")[0])
                attrs["seed"] = program.random_seed
        elif op.type == "cudnn_lstm" and drops_between_layers(attrs):
            # its dropout masks: a stream per op, from its seed or the program's
            rng_key = (block.idx, idx, op.output("Out")[0])
            if int(attrs.get("seed", 0)) <= 0:
                attrs["seed"] = program.random_seed
        elif op.type in _SAMPLERS and not attrs.get("seed"):
            first_out = next(n for names in op.outputs.values() for n in names)
            rng_key = (block.idx, idx, first_out)
            attrs["seed"] = program.random_seed
        ins = tuple((slot, tuple(names)) for slot, names in op.inputs.items())
        outs = tuple((slot, tuple(names)) for slot, names in op.outputs.items())
        out_slots = tuple(slot for slot, names in op.outputs.items()
                          if any(n != EMPTY_VAR for n in names))
        if self._op_times is not None:  # a timed plan (train_from_dataset's debug)
            kernel = _timed(kernel, self._op_times.setdefault((block.idx, idx, op.type),
                                                               [0.0, 0]))
        to_device = () if on_host or not host_written else tuple(dict.fromkeys(
            n for _, names in ins for n in names if n in host_written))
        persist_out = () if not on_host else tuple(
            n for _, names in outs for n in names
            if (var := block._find_var_recursive(n)) is not None and var.persistable)
        return _Step(op, kernel, ins, outs, out_slots, attrs, host,
                     rng_key, opdef.lod, on_host, to_device, persist_out, _lod_sources(ins))

    def _compiled(self, program: Program, block: Block, feed_names: frozenset,
                  scope: Scope) -> _Compiled:
        key = (id(program), program._version, block.idx, tuple(map(id, block.ops)), feed_names,
               getattr(scope, "_compile_key", id(scope)), self._op_times is not None)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self._compile(program, block, feed_names, scope)
        return compiled

    # -- run ----------------------------------------------------------------------------------
    def run_block(self, program: Program, block: Block, scope: Scope,
                  feed_names: frozenset = frozenset(),
                  trace: Callable[[int], None] | None = None) -> None:
        """Run every op of ``block`` against ``scope`` (used by control-flow ops too);
        ``trace(i)`` is called after op ``i`` ran (a trained loop keeps its steps' values)."""
        self._run_steps(program, block, self._compiled(program, block, feed_names, scope).steps,
                        scope, trace)

    def _run_steps(self, program: Program, block: Block, steps: list[_Step], scope: Scope,
                   trace: Callable[[int], None] | None = None) -> None:
        """Run planned ``steps`` of ``block`` against ``scope``."""
        vals, lods = scope.vars, scope.lods
        check_finite = check_nan_inf()
        for i, step in enumerate(steps):
            try:
                attrs = step.attrs
                if step.rng_key is not None:
                    attrs = dict(attrs, _rng=scope.rng(step.rng_key, attrs["seed"]))
                if step.lod == "kernel":
                    attrs = dict(attrs, _lods={slot: [lods.get(n) for n in names]
                                               for slot, names in step.ins})
                if step.to_device:
                    # written back: the next readers find it on the GPU
                    for n in step.to_device:
                        value = vals.get(n)
                        if value is not None:
                            vals[n] = _to_device(value, self._xp)
                if step.host:
                    # a host op may name variables it does not read (listen_and_serv's
                    # gradients arrive later, control-dependency dummies): None where unset
                    ins = {slot: [vals.get(n) for n in names] for slot, names in step.ins}
                    ctx = RunContext(self, scope, program, block, step.op)
                    out = step.kernel(ins, attrs, step.out_slots, ctx)
                elif step.on_host:
                    ins = {slot: [None if n == EMPTY_VAR else _to_host(vals[n]) for n in names]
                           for slot, names in step.ins}
                    out = step.kernel(ins, attrs, step.out_slots)
                else:
                    ins = {slot: [None if n == EMPTY_VAR else vals[n] for n in names]
                           for slot, names in step.ins}
                    out = step.kernel(ins, attrs, step.out_slots)
            except ExecutionError:
                raise
            except KeyError as err:
                raise ExecutionError(
                    f"op {step.op.type!r} (#{i} in block {block.idx}) is missing input "
                    f"{err.args[0]!r}: feed it, run the startup program, or check the op order"
                ) from err
            except Exception as err:
                if getattr(err, "_dask_fluid_passthrough", False):
                    raise
                raise ExecutionError(
                    f"op {step.op.type!r} (#{i} in block {block.idx}) failed: "
                    f"{type(err).__name__}: {err}") from err
            if out:
                out_lods = out.pop(LOD_KEY, None) if step.lod == "kernel" else None
                for slot, names in step.outs:
                    arrays = out.get(slot)
                    if arrays is None:
                        continue
                    for name, arr in zip(names, arrays, strict=False):
                        if name != EMPTY_VAR:
                            vals[name] = arr
                if out_lods is not None or lods:
                    _set_output_lods(step, out, out_lods, vals, lods)
                if check_finite:
                    _check_finite(step, out, block.idx, i)
                for name in step.persist_out:
                    vals[name] = _to_device(vals[name], self._xp)
            if trace is not None:
                trace(i)

    def _check_feed(self, block: Block, feed: dict) -> tuple[dict, dict]:
        """The fed arrays by name, checked, and the LoDs of those fed as LoD tensors."""
        checked, fed_lods = {}, {}
        for key, value in feed.items():
            name = key.name if isinstance(key, Variable) else str(key)
            var = block._find_var_recursive(name)
            if var is None:
                data_layers = [v.name for v in block.vars.values() if v.is_data]
                raise ValueError(f"feed {name!r} is not a variable of the program; "
                                 f"data layers: {data_layers}")
            if isinstance(value, LoDTensor):
                if value._lod:
                    fed_lods[name] = check_lod(value._lod, int(value._require().shape[0]),
                                               f"feed {name!r}")
                value = value._require()
            arr = feed_array(value, var.dtype)
            # numpy's str(dtype) costs microseconds; comparing with the name does not
            if arr.dtype != var.dtype:
                if var.need_check_feed:  # Fluid's check_feed_shape_type, in its words
                    raise FeedDtypeError(f"The data type of fed Variable {name!r} must be "
                                         f"{var.dtype!r}, but received {str(arr.dtype)!r}")
                # unchecked (layers.data), as in Fluid: the value goes in with its own dtype
                # (a label declared float32 and fed int64 stays int64), except that a float
                # of another width takes the declared one, where Fluid's ops would refuse it
                if arr.dtype.kind == "f" and np.dtype(var.dtype).kind == "f":
                    arr = arr.astype(var.dtype)
            if var.shape is not None and var.need_check_feed:
                # Fluid's DiffTensorShapeWithVarDesc: a LoD tensor's rows are not its batch
                shape = [-1 if name in fed_lods and i == 0 else int(s)
                         for i, s in enumerate(arr.shape)]
                if len(shape) != len(var.shape) or any(
                        d >= 0 and s >= 0 and d != s
                        for d, s in zip(var.shape, shape, strict=False)):
                    raise ValueError(f"The fed Variable {name!r} should have dimensions = "
                                     f"{len(var.shape)}, shape = {tuple(var.shape)!r}, but "
                                     f"received fed shape {shape!r} on each device")
            # the feed's own module: a numpy feed is checked before it goes to the GPU
            if arr.dtype.kind == "f" and not bool(array_module(arr).isfinite(arr).all()):
                raise ValueError(f"feed {name!r} contains NaN or inf; clean the input data")
            if self._xp is not np and isinstance(arr, np.ndarray):
                arr = self._xp.asarray(arr)
            checked[name] = arr
        return checked, fed_lods

    def _fetch(self, scope: Scope, names: list[str], return_numpy: bool) -> list:
        out = []
        for name in names:
            if name not in scope.vars:
                raise ValueError(f"fetch {name!r}: the variable was not computed by this run")
            value = scope.vars[name]
            if isinstance(value, LoDTensorArray):
                out.append(self._fetch_array(name, value, return_numpy))
                continue
            if isinstance(value, SelectedRows):
                value = value.to_dense()
            lod = scope.lods.get(name)
            if lod:
                if return_numpy:
                    raise RuntimeError(
                        f"fetch {name!r} holds LoD information (lod={[list(v) for v in lod]}), "
                        "which a numpy array cannot carry: run with return_numpy=False to get "
                        "the LoDTensor itself (Fluid's rule)")
                out.append(LoDTensor._of(value, lod, self.place))
                continue
            if return_numpy:
                # a [1] loss converts to a number (float(loss)) as with numpy 1.x
                out.append(fetched(np.array(registry.to_host(value), copy=True)))
            else:
                # a LoDTensor as Fluid gives every fetch (``.lod()`` is ``[]``); np.array()
                # reads it, from the GPU too (a bare cupy array refuses np.array)
                out.append(LoDTensor._of(value, (), self.place))
        return out

    @staticmethod
    def _fetch_array(name: str, array: LoDTensorArray, return_numpy: bool) -> Any:
        """A fetched tensor array: the array itself, or (Fluid's ``as_numpy``) a list of each
        item as numpy, which refuses items that carry LoD, as for a tensor."""
        if not return_numpy:
            return array
        items = []
        for i, item in enumerate(array):
            if item._lod:
                raise RuntimeError(f"fetch {name!r}: item {i} holds LoD information, which a "
                                   "numpy array cannot carry: run with return_numpy=False to "
                                   "get the LoDTensorArray (Fluid's rule)")
            items.append(np.array(registry.to_host(item._require()), copy=True))
        return items

    def run(
        self,
        program: Program | None = None,
        feed: dict | None = None,
        fetch_list: Any = None,
        feed_var_name: str = "feed",
        fetch_var_name: str = "fetch",
        scope: Scope | None = None,
        return_numpy: bool = True,
        use_program_cache: bool = False,
        return_merged: bool = True,
        use_prune: bool = False,
    ) -> list:
        """Run the global block of ``program`` (Fluid 1.8's signature, argument for argument).

        Parameters
        ----------
        program : Program or CompiledProgram, optional
            Defaults to :func:`default_main_program`. A CompiledProgram runs its program on
            its places (see :mod:`dask_fluid.compiler`).
        feed : dict, optional
            Data-layer name (or Variable) → array; a CompiledProgram also takes one dict per
            place.
        fetch_list : list, optional
            Variables or names to fetch. Optimize ops (the first item of what
            ``Optimizer.minimize`` returns, or that whole tuple) may be listed too: they are not
            fetched, they make the run prune the program to them (``use_prune``).
        feed_var_name, fetch_var_name : str
            The names of the feed and fetch holder variables Fluid's executor adds. This
            executor feeds the scope and fetches from it directly, so there are no holders:
            the names are checked (strings) and name nothing.
        scope : Scope, optional
            Defaults to :func:`global_scope`.
        return_numpy : bool
            numpy arrays, or LoDTensors on the executor's place.
        use_program_cache : bool
            Fluid's speed hint. The plan of a program is always kept here, keyed by the program,
            its ops, the fed names and the scope, and made again when an op is added, removed
            or given a new attribute (``op._set_attr``): both settings run the current program.
        return_merged : bool
            With a CompiledProgram over several places: each fetched variable's values of
            every place concatenated (True), or a list per fetched variable of each place's
            value (False, Fluid's unmerged fetch). One list of one value per variable on one
            place; ignored for a Program, as in Fluid.
        use_prune : bool
            Run only the ops the fetched variables and the optimize ops (those listed in
            ``fetch_list``, else all of them) need, given the feed; ops that compute fed
            variables go too. Feed entries the pruned program does not use are dropped with a
            warning, as in Fluid. The pruned program is made once per program, feed names and
            fetch list.

        Returns
        -------
        list
            One array (or LoDTensor) per fetched variable; lists of them with
            ``return_merged=False``.

        Raises
        ------
        TypeError
            ``feed_var_name`` or ``fetch_var_name`` is not a string, or ``fetch_list`` holds
            an op that is not an optimize op, or something else than variables and ops.
        ValueError
            After pruning, a data layer the remaining ops read is not fed.
        NotImplementedError
            ``use_prune`` (or optimize ops in ``fetch_list``) with a CompiledProgram.
        """
        for arg, value in (("feed_var_name", feed_var_name), ("fetch_var_name", fetch_var_name)):
            if not isinstance(value, str):
                raise TypeError(f"Executor.run: {arg} must be a string, got "
                                f"{type(value).__name__}")
        fetch_list, optimize_ops = _split_fetch_list(fetch_list)
        if use_prune or optimize_ops:
            program, feed = self._pruned(program, feed, fetch_list, optimize_ops)
        t0 = time.perf_counter() if _RUN_HOOKS else 0.0
        with self._on_device():
            fetched, ran, fed, fetch_names = self._run(program, feed, fetch_list, scope,
                                                       return_numpy, return_merged)
        if _RUN_HOOKS:
            notify_run_hooks(RunInfo(ran, fed, fetch_names, fetched, time.perf_counter() - t0))
        return fetched

    def to_place(self, value: Any) -> Any:
        """``value`` where this executor keeps its variables: a host array copied to the GPU
        of a ``CUDAPlace`` executor (its runs refuse host arrays there); unchanged on
        ``CPUPlace``.

        Parameters
        ----------
        value : array-like

        Returns
        -------
        numpy.ndarray or cupy.ndarray
        """
        if self._xp is np:
            return value
        with self._on_device():
            return self._xp.asarray(value)

    def _on_device(self) -> contextlib.AbstractContextManager:
        """``CUDAPlace(i)``: device i is current while this executor runs (kernels, feeds,
        fetches and the collectives of a CompiledProgram all allocate there)."""
        if self._xp is np:
            return contextlib.nullcontext()
        return self._xp.cuda.Device(self.place.device_id)

    def _pruned(self, program: Program | None, feed: Any, fetch_list: list,
                optimize_ops: list[Operator]) -> tuple[Program, Any]:
        """``use_prune``: the pruned program (made once per program, feed names and fetch
        list) and the feed without the entries it does not use (Fluid's ``_update_feed``)."""
        program = program if program is not None else default_main_program()
        if not feed:  # a started non-iterable PyReader of the program feeds it
            feed = _reader_feed(program, self.place) or feed
        if not isinstance(program, Program):
            raise NotImplementedError("Executor.run(use_prune=True), or optimize ops in "
                                      "fetch_list, with a CompiledProgram is not implemented; "
                                      "prune the Program (run it with use_prune) instead")
        feeds = feed if isinstance(feed, (list, tuple)) else [feed or {}]
        feed_names = sorted({k.name if isinstance(k, Variable) else str(k)
                             for each in feeds for k in each})
        fetch_names = tuple(f.name if isinstance(f, Variable) else str(f) for f in fetch_list)
        key = (id(program), program._version, tuple(map(id, program.global_block().ops)),
               tuple(feed_names), fetch_names, tuple(map(id, optimize_ops)))
        pruned = self._pruned_programs.get(key)
        if pruned is None:
            targets = list(fetch_list) + (optimize_ops or [
                op for op in program.global_block().ops if op._is_optimize_op()])
            pruned = program._prune_with_input(feed_names, targets)
            block = pruned.global_block()
            read = {n for op in block.ops for n in op.input_arg_names}
            for name in sorted(read - set(feed_names)):
                var = block.vars.get(name)
                if var is not None and var.is_data and not var.persistable:
                    raise ValueError(f"Need feed data for variable {name}: the pruned program "
                                     "reads it")
            self._pruned_programs[key] = pruned
        block = pruned.global_block()
        kept = []
        for each in feeds:
            each = dict(each)
            for k in list(each):
                name = k.name if isinstance(k, Variable) else str(k)
                if not block.has_var(name):
                    del each[k]
                    warnings.warn(f"The variable {name} is not found in program. It is not "
                                  "declared or is pruned.", stacklevel=3)
            kept.append(each)
        return pruned, (kept if isinstance(feed, (list, tuple)) else kept[0])

    def _run(self, program: Program | None, feed: dict | None,
             fetch_list: Sequence[Variable | str] | None, scope: Scope | None,
             return_numpy: bool, return_merged: bool = True
             ) -> tuple[list, Program, Any, list[str]]:
        """Run; return the fetched values, the Program that ran, what it was fed and the
        fetched names."""
        program = program if program is not None else default_main_program()
        scope = scope if scope is not None else global_scope()
        if not feed:
            feed = _reader_feed(program, self.place) or feed
        if not isinstance(program, Program):
            # a CompiledProgram (known by what it does: compiler.py sits above this module)
            if not callable(getattr(program, "_program_to_run", None)):
                raise TypeError("Executor.run expects a Program or a CompiledProgram, got "
                                f"{type(program).__name__}")
            compiled = program
            program, feed = compiled._program_to_run(self.place, scope, feed)
            if not isinstance(program, Program):  # a step over several places
                fetch_names = self._fetch_names(compiled._to_run.global_block(), fetch_list)
                return (program.run(self, scope, feed, fetch_names, return_numpy,
                                    return_merged),
                        compiled._to_run, feed, fetch_names)
            if not return_merged:  # Fluid's unmerged fetch of one place
                fetched, ran, fed, names = self._run(program, feed, fetch_list, scope,
                                                     return_numpy)
                return [[value] for value in fetched], ran, fed, names
        if isinstance(feed, (list, tuple)):
            # one dict per place (an iterable PyReader's batches): Fluid runs a Program on
            # one place, and takes a list of one
            if len(feed) != 1:
                raise ValueError(f"feed is a list of {len(feed)} dicts (one per place), but a "
                                 "Program runs on one place: run a CompiledProgram "
                                 "with_data_parallel, or give the reader one place")
            feed = feed[0]
        block = program.global_block()
        fetch_names = self._fetch_names(block, fetch_list)
        fed, fed_lods = self._check_feed(block, feed or {})
        scope.vars.update(fed)
        for name in fed:
            if name in fed_lods:
                scope.lods[name] = fed_lods[name]
            else:
                scope.lods.pop(name, None)
        for name in self._compiled(program, block, frozenset(fed), scope).arrays:
            scope.vars.pop(name, None)
        self.run_block(program, block, scope, frozenset(fed))
        return (self._fetch(scope, fetch_names, return_numpy), program, feed or {},
                fetch_names)

    def train_from_dataset(self, program: Program | None = None, dataset: Any = None,
                           scope: Scope | None = None, thread: int = 0, debug: bool = False,
                           fetch_list: Sequence[Variable | str] | None = None,
                           fetch_info: Sequence[str] | None = None, print_period: int = 100,
                           fetch_handler: Any = None) -> None:
        """Train ``program`` on every batch of ``dataset`` (a ``fluid.DatasetFactory``
        dataset; :mod:`dask_fluid.queue_dataset`), printing ``fetch_info`` of ``fetch_list``
        every ``print_period`` batches.

        ``thread`` is Fluid's number of hogwild training threads (0: the dataset's
        ``thread_num``); here the batches run one after another in file order whatever it is
        (:mod:`dask_fluid.queue_dataset`): the same samples and updates, without the races.
        ``debug=True`` prints, as Fluid's debug workers do, the mean time of reading a batch
        and of each op of the program per batch, to standard error, when the data is done.
        """
        from .queue_dataset import run_from_dataset  # its module needs nothing of this one

        if fetch_handler is not None:
            raise NotImplementedError("train_from_dataset(fetch_handler=...) is not "
                                      "implemented in dask_fluid; use fetch_list and "
                                      "fetch_info")
        if dataset is None:
            raise RuntimeError("dataset is needed and should be initialized")
        program = program if program is not None else default_main_program()
        run_from_dataset(self, program, dataset, scope, fetch_list, fetch_info, print_period,
                         debug)

    def infer_from_dataset(self, program: Program | None = None, dataset: Any = None,
                           scope: Scope | None = None, thread: int = 0, debug: bool = False,
                           fetch_list: Sequence[Variable | str] | None = None,
                           fetch_info: Sequence[str] | None = None, print_period: int = 100,
                           fetch_handler: Any = None) -> None:
        """As :meth:`train_from_dataset` with the program's test clone: nothing is updated."""
        program = program if program is not None else default_main_program()
        self.train_from_dataset(program.clone(for_test=True), dataset, scope, thread, debug,
                                fetch_list, fetch_info, print_period, fetch_handler)

    @staticmethod
    def _fetch_names(block: Block, fetch_list: Sequence[Variable | str] | None) -> list[str]:
        names = [f.name if isinstance(f, Variable) else str(f) for f in fetch_list or ()]
        for name in names:
            if block._find_var_recursive(name) is None:
                raise ValueError(f"fetch {name!r} is not a variable of the program")
        return names

    def close(self) -> None:
        """Release the executor (Fluid's ``Executor.close``): drop compiled blocks, and tell
        the runtimes of the host ops it ran, e.g. a trainer's pservers that it is done."""
        self._cache.clear()
        self._pruned_programs.clear()
        hooks, self.host_context = self.host_context, {}
        for hook in hooks.values():
            on_close = getattr(hook, "on_executor_close", None)
            if on_close is not None:
                on_close()


def as_numpy(tensor: Any) -> Any:
    """What ``Executor.run(..., return_numpy=False)`` fetched, as numpy arrays (Fluid 1.8's
    ``executor.as_numpy``): a LoDTensor, or a list or LoDTensorArray of them (a list back).

    Raises
    ------
    RuntimeError
        A tensor holds LoD, which a numpy array cannot carry (as in Fluid).
    """
    if isinstance(tensor, (list, LoDTensorArray)):
        return [as_numpy(t) for t in tensor]
    if isinstance(tensor, np.ndarray):
        return tensor
    if not isinstance(tensor, LoDTensor):
        raise TypeError(f"as_numpy takes fetched LoDTensors, got {type(tensor).__name__}")
    if tensor.lod():
        raise RuntimeError("Some of your fetched tensors hold LoD information. They can not be "
                           "completely cast to Python ndarray. Please set the parameter "
                           "'return_numpy' as 'False' to return LoDTensor itself directly.")
    return None if tensor._array is None else np.array(tensor)


def feed_array(value: Any, dtype: str) -> Any:
    """A fed value as an array (Fluid's ``_as_lodtensor``): a numpy or CuPy array as it is, a
    number a ``[1]`` tensor of ``dtype``, anything else (nested lists) ``np.asarray`` in
    ``dtype``."""
    if np.isscalar(value):
        return np.array([value]).astype(dtype)
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return value
    return np.asarray(value, dtype=dtype)


class FeedDtypeError(TypeError, ValueError):
    """A fed value's dtype is not its variable's: Fluid 1.8 raises a ValueError there, and it
    is a TypeError too, so that either ``except`` catches it."""


class EOFException(Exception):
    """Raised by ``Executor.run`` when a started non-iterable reader has no batch left
    (Fluid's ``fluid.core.EOFException``; the readers live in :mod:`dask_fluid.py_reader`)."""


def _reader_feed(program: Any, place: Any) -> dict | list[dict] | None:
    """The next batch of the started non-iterable PyReaders of ``program`` (a CompiledProgram's
    program), or None: what a run without a feed is fed (:mod:`dask_fluid.py_reader`; their
    ``_next_feed`` raises EOFException after the last batch). A CompiledProgram over several
    places gives each place a batch of its own, as Fluid's read op runs once per device: one
    feed dict per place."""
    target = getattr(program, "_program", program)
    readers = target.__dict__.get("_py_readers") if hasattr(target, "__dict__") else None
    if not readers:
        return None
    count = program._place_count(place) if hasattr(program, "_place_count") else 1
    feeds: list[dict] = []
    for i in range(count):
        feed: dict = {}
        try:
            for reader in readers:
                feed.update(reader._next_feed())
        except EOFException:
            if i and not all(r._drop_last for r in readers):
                raise NotImplementedError(
                    f"the pass ended with {i} batch(es) for {count} places: a reader with "
                    "drop_last=False, which would run them on fewer places, is not "
                    "implemented; keep drop_last=True (the last batches are dropped)") from None
            raise
        feeds.append(feed)
    return feeds[0] if count == 1 else feeds


def _set_output_lods(step: _Step, out: dict, kernel_lods: dict | None, vals: dict,
                     lods: dict) -> None:
    """Give each output of ``step`` its LoD: the kernel's (``lod="kernel"`` ops), none
    (``lod="none"``), or Fluid's common ``ShareLoD`` rule: the LoD of the first of
    ``step.lod_from`` that has one and as many rows as the output. An output without one loses
    any LoD it had."""
    for slot, names in step.outs:
        if slot not in out:
            continue
        given = kernel_lods.get(slot) if kernel_lods is not None else None
        for j, name in enumerate(names):
            if name == EMPTY_VAR:
                continue
            lod = None
            if kernel_lods is not None:
                lod = given[j] if given is not None and j < len(given) else None
            elif step.lod is None and lods:
                rows = _rows(vals.get(name))
                if rows is not None:
                    lod = next((lods[n] for n in step.lod_from
                                if n in lods and _rows(vals.get(n)) == rows), None)
            if lod:
                lods[name] = lod
            else:
                lods.pop(name, None)


def _rows(value: Any) -> int | None:
    shape = getattr(value, "shape", None)
    if not shape or isinstance(value, SelectedRows):
        return None
    return int(shape[0])




def _host_written(program: Program) -> frozenset[str]:
    """The variables the ``op_device="cpu"`` ops (kernel ops) of ``program`` write, but for
    persistables (moved back to the GPU as soon as written: ``_Step.persist_out``)."""
    names = set()
    for block in program.blocks:
        for op in block.ops:
            if op.attrs.get(OP_DEVICE_KEY) != "cpu" or registry.get(op.type).host:
                continue
            for n in op.output_arg_names:
                var = block._find_var_recursive(n)
                if n != EMPTY_VAR and not (var is not None and var.persistable):
                    names.add(n)
    return frozenset(names)


def _to_host(value: Any) -> Any:
    """``value`` with its arrays on the host (numpy): what an ``op_device="cpu"`` kernel
    reads on a CUDAPlace executor. Values other than arrays, SelectedRows and tensor arrays
    (rank tables, readers) pass unchanged."""
    if isinstance(value, SelectedRows):
        return SelectedRows(registry.to_host(value.rows), registry.to_host(value.value),
                            value.height)
    if isinstance(value, LoDTensorArray):
        return LoDTensorArray(LoDTensor._of(_to_host(t._array), t._lod, CPUPlace())
                              for t in value)
    if type(value).__module__.startswith("cupy"):
        return value.get()
    return value


def _to_device(value: Any, xp: Any) -> Any:
    """``value`` with its host arrays moved to the GPU (``xp`` is cupy): what the GPU ops
    that read an ``op_device="cpu"`` op's outputs get."""
    if isinstance(value, np.ndarray):
        return xp.asarray(value)
    if isinstance(value, SelectedRows) and isinstance(value.value, np.ndarray):
        return SelectedRows(xp.asarray(value.rows), xp.asarray(value.value), value.height)
    if isinstance(value, LoDTensorArray) and any(isinstance(t._array, np.ndarray)
                                                 for t in value):
        return LoDTensorArray(LoDTensor._of(_to_device(t._array, xp), t._lod, t._where)
                              for t in value)
    return value


def _timed(kernel: Any, spent: list) -> Any:
    """``kernel``, adding its wall time and one run to ``spent`` at each call."""
    def run(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return kernel(*args)
        finally:
            spent[0] += time.perf_counter() - t0
            spent[1] += 1
    return run


def _split_fetch_list(fetch_list: Any) -> tuple[list, list[Operator]]:
    """Fluid's fetch list, flattened: ``(variables and names, optimize ops)``. Items may be a
    variable or name, a list of them or of optimize ops, or ``Optimizer.minimize``'s
    ``(optimize_ops, params_grads)`` tuple.

    Raises
    ------
    TypeError
        An op that is not an optimize op, a tuple whose first item is not a list of ops, or
        anything else than variables, names and ops.
    """
    if fetch_list is None:
        return [], []
    if isinstance(fetch_list, (Variable, str)):
        return [fetch_list], []
    if not isinstance(fetch_list, (list, tuple)):
        raise TypeError(f"fetch_list must be a list or tuple, got {type(fetch_list).__name__}")
    fetches: list = []
    optimize_ops: list[Operator] = []

    def take(item: Any) -> None:
        if isinstance(item, Operator):
            if not item._is_optimize_op():
                raise TypeError(f"fetch_list holds op {item.type!r}, which is not an optimize "
                                "op: only optimize ops (to prune the program to) may be listed")
            optimize_ops.append(item)
        elif isinstance(item, (Variable, str)):
            fetches.append(item)
        else:
            raise TypeError(f"fetch_list items must be variables, names or optimize ops, got "
                            f"{type(item).__name__}")

    for i, item in enumerate(fetch_list):
        if isinstance(item, list):
            for each in item:
                take(each)
        elif isinstance(item, tuple):
            if not item or not isinstance(item[0], (list, tuple)):
                raise TypeError(f"fetch_list[{i}] is a tuple: its first item must be the list "
                                "of optimize ops (what Optimizer.minimize returns)")
            for each in item[0]:
                take(each)
        else:
            take(item)
    return fetches, optimize_ops
