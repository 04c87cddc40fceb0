"""fluid.compiler: CompiledProgram, BuildStrategy and ExecutionStrategy (Fluid 1.8).

Fluid compiles a program into an SSA graph that a ParallelExecutor runs on several places (CPU
threads or GPUs) at once, splitting each fed batch between them and all-reducing gradients.
Here:

* ``CompiledProgram(program)`` and ``.with_data_parallel(...)`` over **one** place (``CPU_NUM=1``,
  or one CUDA place) run the program as it is, as Fluid does for one place: the same ops, and a
  fetch returns what :meth:`Executor.run` returns;
* over **several** places of the process (``CPU_NUM=4``, several GPUs) every run splits the batch
  between the places, runs forward and backward on each, sums the gradients and runs the
  optimize ops once (:mod:`dask_fluid.multi_place`): with the default ``CoeffNumDevice`` scaling,
  the same update as one place fed the whole batch; fetches come back concatenated per place;
* with ``build_strategy.num_trainers > 1`` (NCCL2 mode: one trainer process per device, the
  startup program transpiled with ``config.mode = "nccl2"`` and run) every run is forward and
  backward, one all-reduce of every gradient (the mean over trainers, fused per dtype) through
  the communicator the startup's ``gen_nccl_id`` left in the scope, then the optimize ops
  (:mod:`dask_fluid.distributed.collective.data_parallel`, imported only then); the first run
  replaces every trainer's persistables by trainer 0's, as Fluid's ParallelExecutor does;
* ``GradientScaleStrategy.Customized`` removes the backward pass's ``loss@GRAD`` seed: every run
  feeds it (a scalar or the loss's shape; per place when the feed is a list);
* strategy fields that only tune Fluid's graph executor (fusions, inplace, memory_optimize,
  num_threads) are kept and have no effect; ``sync_batch_norm`` over several places makes the
  places' batch norms use the whole batch's statistics
  (:mod:`dask_fluid.distributed.collective.places`); fields that would change results here
  (``num_iteration_per_run > 1``) raise.

Places are chosen as in Fluid 1.8: the ``places`` argument, else ``CPU_NUM`` CPU places (set to 1,
with a note on stderr, when unset) or one CUDA place per id in ``FLAGS_selected_gpus`` (else every
visible GPU).
"""

from __future__ import annotations

import enum
import functools
import multiprocessing
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .executor import CPUPlace, CUDAPlace, Scope
from .framework import Program
from .ir_passes import PassBuilder
from .multi_place import MultiPlaceStep
from .places import CUDAPinnedPlace

__all__ = ["BuildStrategy", "CompiledProgram", "ExecutionStrategy", "cpu_places",
           "cuda_pinned_places", "cuda_places"]

Place = CPUPlace | CUDAPlace


# ----------------------------------------------------------------------------------------------
# places
# ----------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _cuda_device_count() -> int:
    """CUDA devices that CuPy can use (0 without CuPy or a driver); asked once per process."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # ImportError, CUDARuntimeError: both mean no usable GPU
        return 0


def _cpu_num() -> int:
    # Fluid 1.8 reads CPU_NUM and, when it is unset, sets it to 1 (so child processes agree).
    if "CPU_NUM" not in os.environ:
        if multiprocessing.cpu_count() > 1:
            sys.stderr.write("dask_fluid: CPU_NUM is not set; using CPU_NUM=1 (one CPUPlace), "
                             "as Fluid 1.8 does\n")
        os.environ["CPU_NUM"] = "1"
    text = os.environ["CPU_NUM"]
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"CPU_NUM={text!r} is not an integer; set it to the number of CPU "
                         "places (1 in dask_fluid)") from None
    if value < 1:
        raise ValueError(f"CPU_NUM={value} must be >= 1")
    return value


def cpu_places(device_count: int | None = None) -> list[CPUPlace]:
    """``device_count`` CPU places (Fluid's ``fluid.cpu_places``); default ``CPU_NUM``.

    Parameters
    ----------
    device_count : int, optional
        Defaults to the ``CPU_NUM`` environment variable, set to 1 when missing.

    Returns
    -------
    list of CPUPlace
    """
    count = _cpu_num() if device_count is None else int(device_count)
    return [CPUPlace() for _ in range(count)]


def cuda_places(device_ids: int | Sequence[int] | None = None) -> list[CUDAPlace]:
    """One CUDA place per device id (Fluid's ``fluid.cuda_places``).

    Parameters
    ----------
    device_ids : int or sequence of int, optional
        Defaults to ``FLAGS_selected_gpus`` (comma-separated ids), else every visible GPU.

    Returns
    -------
    list of CUDAPlace

    Raises
    ------
    RuntimeError
        When CuPy finds no GPU.
    """
    if _cuda_device_count() == 0:
        raise RuntimeError("cuda_places: CuPy finds no CUDA GPU; install the 'gpu' extra "
                           "(pip install 'dask-fluid[gpu]') on a machine with a GPU")
    if device_ids is None:
        selected = os.environ.get("FLAGS_selected_gpus", "")
        if selected:
            device_ids = [int(s) for s in selected.split(",")]
        else:
            device_ids = range(_cuda_device_count())
    elif isinstance(device_ids, int):
        device_ids = [device_ids]
    return [CUDAPlace(i) for i in device_ids]


def cuda_pinned_places(device_count: int | None = None) -> list[CUDAPinnedPlace]:
    """``device_count`` pinned-memory places (Fluid's ``fluid.cuda_pinned_places``).

    Parameters
    ----------
    device_count : int, optional
        Defaults to the number of GPUs ``cuda_places()`` would give (``FLAGS_selected_gpus``,
        else every visible one).

    Returns
    -------
    list of CUDAPinnedPlace

    Raises
    ------
    RuntimeError
        When CuPy finds no GPU (Fluid asserts it is compiled with CUDA).
    """
    if _cuda_device_count() == 0:
        raise RuntimeError("cuda_pinned_places: CuPy finds no CUDA GPU; install the 'gpu' "
                           "extra (pip install 'dask-fluid[gpu]') on a machine with a GPU")
    if device_count is None:
        device_count = len(cuda_places())
    return [CUDAPinnedPlace() for _ in range(int(device_count))]


# ----------------------------------------------------------------------------------------------
# strategies
# ----------------------------------------------------------------------------------------------


class ExecutionStrategy:
    """How Fluid's ParallelExecutor runs a compiled program (Fluid 1.8's fields and defaults).

    Attributes
    ----------
    num_threads : int
        Thread pool size; 0 (default) becomes ``2 * places`` on CPU, ``4 * places`` on GPU at
        the first run. No effect here: ops run in program order.
    use_cuda : bool
        Set from the executor's place at the first run.
    allow_op_delay : bool
        Ignored by Fluid 1.8 too.
    num_iteration_per_drop_scope : int
        Default 100. No effect here (temporaries live in the scope).
    num_iteration_per_run : int
        Default 1; anything else raises at run time (it drives Fluid's reader-fed loop).
    use_thread_barrier, use_experimental_executor : bool
        Executor choices of Fluid's graph engine; no effect here.
    """

    # Fluid's pybind class refuses unknown attributes; slots keep that (a typo is an error).
    __slots__ = ("num_threads", "use_cuda", "allow_op_delay", "num_iteration_per_drop_scope",
                 "num_iteration_per_run", "use_thread_barrier", "use_experimental_executor",
                 "_dry_run")

    def __init__(self) -> None:
        self.num_threads = 0
        self.use_cuda = True
        self.allow_op_delay = False
        self.num_iteration_per_drop_scope = 100
        self.num_iteration_per_run = 1
        self.use_thread_barrier = False
        self.use_experimental_executor = True
        self._dry_run = False

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"ExecutionStrategy({fields})"


class _ReduceStrategy(enum.IntEnum):
    AllReduce = 0
    Reduce = 1


class _GradientScaleStrategy(enum.IntEnum):
    CoeffNumDevice = 0
    One = 1
    Customized = 2


class BuildStrategy:
    """How Fluid builds the data-parallel graph (Fluid 1.8's fields and defaults).

    Attributes
    ----------
    reduce_strategy : BuildStrategy.ReduceStrategy
        ``AllReduce`` (default) or ``Reduce``: the same result on one place.
    gradient_scale_strategy : BuildStrategy.GradientScaleStrategy
        ``CoeffNumDevice`` (default) seeds ``loss@GRAD`` with ``1 / places`` and averages over
        ``num_trainers > 1`` trainers; ``One`` seeds 1 and sums; ``Customized``: every run feeds
        ``loss@GRAD`` (needs ``loss_name``).
    num_trainers, trainer_id, trainers_endpoints
        NCCL2 multi-trainer all-reduce: with ``num_trainers > 1`` gradients are all-reduced
        across the trainer processes (they must agree with the transpiled trainers);
        ``trainers_endpoints`` is not needed (the transpiled startup program has them).
    debug_graphviz_path : str
        Raises at run time when set: dask_fluid builds no SSA graph (print the program).
    enable_inplace, memory_optimize, fuse_*, enable_sequential_execution,
    remove_unnecessary_lock, cache_runtime_context, mkldnn_enabled_op_types,
    enable_backward_optimizer_op_deps, nccl_comm_num, use_hierarchical_allreduce,
    hierarchical_allreduce_inter_nranks, async_mode, is_distribution
        Graph-engine tuning: stored, no effect on the result.
    sync_batch_norm : bool
        Batch-norm statistics over all places: the training batch norms use the statistics
        of the whole batch, over ``num_trainers > 1`` trainers and over the places of one
        process (Fluid's sync_batch_norm ops,
        :mod:`dask_fluid.distributed.collective.sync_batch_norm`; with equal parts of the
        batch, as Fluid's kernel assumes).
    """

    ReduceStrategy = _ReduceStrategy
    GradientScaleStrategy = _GradientScaleStrategy

    _FIELDS = frozenset({
        "reduce_strategy", "gradient_scale_strategy", "debug_graphviz_path",
        "enable_sequential_execution", "remove_unnecessary_lock", "num_trainers",
        "trainers_endpoints", "trainer_id", "nccl_comm_num", "use_hierarchical_allreduce",
        "hierarchical_allreduce_inter_nranks", "fuse_elewise_add_act_ops", "fuse_bn_act_ops",
        "enable_auto_fusion", "fuse_relu_depthwise_conv", "fuse_broadcast_ops",
        "fuse_all_optimizer_ops", "fuse_all_reduce_ops", "sync_batch_norm", "memory_optimize",
        "is_distribution", "async_mode", "enable_inplace", "enable_backward_optimizer_op_deps",
        "cache_runtime_context", "mkldnn_enabled_op_types",
    })

    def __init__(self) -> None:
        self.reduce_strategy = _ReduceStrategy.AllReduce
        self.gradient_scale_strategy = _GradientScaleStrategy.CoeffNumDevice
        self.debug_graphviz_path = ""
        self.enable_sequential_execution = False
        self.remove_unnecessary_lock = True
        self.num_trainers = 1
        self.trainers_endpoints: list[str] = []
        self.trainer_id = 0
        self.nccl_comm_num = 1
        self.use_hierarchical_allreduce = False
        self.hierarchical_allreduce_inter_nranks = 0
        self.fuse_elewise_add_act_ops = False
        self.fuse_bn_act_ops = False
        self.enable_auto_fusion = False
        self.fuse_relu_depthwise_conv = False
        self.fuse_broadcast_ops = False
        self.fuse_all_optimizer_ops = False
        self.fuse_all_reduce_ops = True
        self.sync_batch_norm = False
        self.memory_optimize: bool | None = None
        self.is_distribution = False
        self.async_mode = False
        self.enable_inplace = True
        self.enable_backward_optimizer_op_deps = False
        self.cache_runtime_context = False
        self.mkldnn_enabled_op_types: set[str] = set()

    def __setattr__(self, name: str, value: Any) -> None:
        # Fluid's pybind class refuses unknown attributes (a typo is an error); Python
        # subclasses such as fleet's DistributedStrategy add their own fields.
        if type(self) is BuildStrategy and name not in BuildStrategy._FIELDS:
            raise AttributeError(f"'BuildStrategy' object has no attribute {name!r}")
        object.__setattr__(self, name, value)

    def _finalize_strategy_and_create_passes(self) -> PassBuilder:
        """The passes this strategy applies when its CompiledProgram first runs
        (:mod:`dask_fluid.ir_passes`: ``multi_batch_merge_pass``; other names raise)."""
        builder = self.__dict__.get("_pass_builder")
        if builder is None:
            builder = PassBuilder()
            object.__setattr__(self, "_pass_builder", builder)
        return builder


# ----------------------------------------------------------------------------------------------
# CompiledProgram
# ----------------------------------------------------------------------------------------------


class CompiledProgram:
    """A program prepared for :meth:`Executor.run` (Fluid 1.8's ``CompiledProgram``).

    Parameters
    ----------
    program_or_graph : Program
        dask_fluid has no IR graph, so only a Program is accepted.
    build_strategy : BuildStrategy, optional

    Examples
    --------
    >>> compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    >>> loss_value, = exe.run(compiled, feed=feed, fetch_list=[loss.name])
    """

    def __init__(self, program_or_graph: Program,
                 build_strategy: BuildStrategy | None = None) -> None:
        if not isinstance(program_or_graph, Program):
            raise TypeError("CompiledProgram expects a Program (dask_fluid has no IR Graph), "
                            f"got {type(program_or_graph).__name__}")
        self._program = program_or_graph
        self._build_strategy = build_strategy
        self._exec_strategy: ExecutionStrategy | None = None
        self._is_data_parallel = False
        self._is_inference = False
        self._loss_name: str | None = None
        self._share_vars_from: CompiledProgram | None = None
        self._places: list[Place] | None = None
        self._compiled = False
        self._scope: Scope | None = None
        self._place: Place | None = None
        self._to_run: Program = program_or_graph
        self._step: MultiPlaceStep | None = None

    def with_data_parallel(self, loss_name: str | None = None,
                           build_strategy: BuildStrategy | None = None,
                           exec_strategy: ExecutionStrategy | None = None,
                           share_vars_from: CompiledProgram | None = None,
                           places: Place | Sequence[Place] | None = None) -> CompiledProgram:
        """Run the program data-parallel over ``places`` (see the module docstring).

        Parameters
        ----------
        loss_name : str, optional
            The loss variable's name (Fluid scales its gradient by the number of places).
        build_strategy : BuildStrategy, optional
            Replaces the one given to the constructor.
        exec_strategy : ExecutionStrategy, optional
        share_vars_from : CompiledProgram, optional
            A data-parallel program already run, whose variables this one uses: both read the
            scope passed to ``Executor.run`` (place 0's; other places read it every run).
        places : place or list of places, optional
            Default: ``CPU_NUM`` CPU places or the selected GPUs, chosen at the first run.

        Returns
        -------
        CompiledProgram
            ``self``.
        """
        if self._is_data_parallel:
            raise ValueError("Already compiled with parallel, cannot be recompiled.")
        if self._is_inference:
            raise ValueError("Cannot compile with both data parallel and inference.")
        self._is_data_parallel = True
        if build_strategy is not None:
            self._build_strategy = build_strategy
        self._exec_strategy = exec_strategy
        self._loss_name = loss_name
        self._share_vars_from = share_vars_from
        if places is not None:
            self._places = list(places) if isinstance(places, list | tuple) else [places]
        return self

    def _with_inference_optimize(self, config: Any) -> CompiledProgram:
        raise NotImplementedError(
            "CompiledProgram._with_inference_optimize (Paddle's inference predictor) is not "
            "implemented in dask_fluid; run the inference program with Executor.run")

    # -- what Executor.run calls --------------------------------------------------------------
    def _compile(self, scope: Scope, place: Place) -> CompiledProgram:
        """Fix the scope, place and places at the first run, as Fluid does."""
        if self._compiled:
            if scope is not self._scope:
                raise ValueError("Cannot compile program with different scope.")
            if place != self._place:
                raise ValueError("Cannot compile program with different place.")
            return self
        if self._share_vars_from is not None:
            if not self._share_vars_from._is_data_parallel:
                raise ValueError("The shared Program is not data parallel, cannot share "
                                 "variables from it.")
            if not self._share_vars_from._compiled:
                raise ValueError("The shared Program is not compiled and executed, so there "
                                 "is no variables to share.")
        places = self._get_places(place) if self._is_data_parallel else [place]
        self._check_supported(places, place)
        self._resolve_strategies(places, place)
        build = self._build_strategy
        passes = build.__dict__.get("_pass_builder")
        if passes is not None:
            self._to_run = passes.apply(self._program)
        scale = build.gradient_scale_strategy
        if scale == _GradientScaleStrategy.Customized:
            self._to_run = _fed_loss_grad(self._to_run, self._loss_name)
        if len(places) > 1:
            group = None
            if build.sync_batch_norm and any(op.type == "batch_norm" for block
                                             in self._to_run.blocks for op in block.ops):
                # imported here: the places exchange batch statistics through the collective
                # layer's sync_batch_norm kernels
                from .distributed.collective.data_parallel import with_sync_batch_norm
                from .distributed.collective.places import PlaceGroup

                if self._to_run is self._program:  # renamed in a copy: the user's stays
                    self._to_run = self._program.clone()
                with_sync_batch_norm(self._to_run)
                group = PlaceGroup
            self._step = MultiPlaceStep(
                self._to_run, places, self._loss_name,
                {_GradientScaleStrategy.CoeffNumDevice: "mean", _GradientScaleStrategy.One: "one",
                 _GradientScaleStrategy.Customized: "fed"}[scale], place_group=group)
        if self._is_data_parallel and build.num_trainers > 1:
            # imported here: only multi-trainer programs need the distributed layer
            from .distributed.collective.ops import compile_for_trainers

            self._to_run = compile_for_trainers(
                self._to_run, scope, place, num_trainers=build.num_trainers,
                trainer_id=build.trainer_id,
                average=build.gradient_scale_strategy == _GradientScaleStrategy.CoeffNumDevice,
                sync_batch_norm=bool(build.sync_batch_norm))
        self._places, self._scope, self._place = places, scope, place
        self._compiled = True
        return self

    def _place_count(self, place: Place) -> int:
        """How many places a run on ``place`` runs (each reads its own batch of a started
        non-iterable reader)."""
        return len(self._get_places(place)) if self._is_data_parallel else 1

    def _get_places(self, place: Place) -> list[Place]:
        if self._places is not None:
            for p in self._places:
                if type(p) is not type(place):
                    raise ValueError(f"Place type not match: places has {p!r} but the "
                                     f"Executor runs on {place!r}")
            places = self._places
        else:
            places = cuda_places() if isinstance(place, CUDAPlace) else cpu_places()
        if not places:
            raise ValueError("No places for execution.")
        return places

    def _check_supported(self, places: list[Place], place: Place) -> None:
        # The one place where the not-yet-implemented paths (several places per process) and
        # the strategies that would change results here are refused.
        build = self._build_strategy or BuildStrategy()
        execs = self._exec_strategy or ExecutionStrategy()
        if len(places) > 1:
            how = ("CPU_NUM=" + os.environ.get("CPU_NUM", "?") if self._places is None
                   and isinstance(place, CPUPlace) else f"places={places!r}")
            if build.num_trainers > 1:
                raise NotImplementedError(
                    f"num_trainers={build.num_trainers} trainers with {len(places)} places each "
                    f"({how}) is not implemented in dask_fluid: start one trainer per device "
                    "with CPU_NUM=1 (or FLAGS_selected_gpus to one GPU)")
        if not 0 <= build.trainer_id < max(build.num_trainers, 1):
            raise ValueError(f"build_strategy.trainer_id={build.trainer_id} is out of range for "
                             f"num_trainers={build.num_trainers}")
        if build.gradient_scale_strategy == _GradientScaleStrategy.Customized and \
                not self._loss_name:
            raise ValueError("BuildStrategy.GradientScaleStrategy.Customized needs the "
                             "loss_name of with_data_parallel: its gradient is what you feed")
        if build.debug_graphviz_path:
            raise NotImplementedError(
                "BuildStrategy.debug_graphviz_path is not implemented in dask_fluid: it builds "
                "no SSA graph; print(program) shows the ops that run")
        if execs.num_iteration_per_run != 1:
            raise NotImplementedError(
                f"ExecutionStrategy.num_iteration_per_run={execs.num_iteration_per_run} is not "
                "implemented in dask_fluid: one Executor.run runs the program once")
        if places[0] != place:
            raise NotImplementedError(
                f"CompiledProgram on {places[0]!r} from an Executor on {place!r} is not "
                f"implemented in dask_fluid: it runs on the Executor's place; create "
                f"fluid.Executor({places[0]!r})")

    def _resolve_strategies(self, places: list[Place], place: Place) -> None:
        # what Fluid's _compile_data_parallel fills in, so scripts that read them back agree
        if self._build_strategy is None:
            self._build_strategy = BuildStrategy()
        if self._exec_strategy is None:
            self._exec_strategy = ExecutionStrategy()
        on_gpu = isinstance(place, CUDAPlace)
        self._exec_strategy.use_cuda = on_gpu
        if self._exec_strategy.num_threads == 0:
            self._exec_strategy.num_threads = len(places) * (4 if on_gpu else 2)
        self._build_strategy.is_distribution = any(
            op.type in ("send", "recv") for op in self._program.global_block().ops)

    def _program_to_run(self, place: Place, scope: Scope, feed: Any
                        ) -> tuple[Program | MultiPlaceStep, Any]:
        """What :meth:`Executor.run` runs for this compiled program (a Program, or the step
        over several places), and its feed (a dict, or one dict per place)."""
        self._compile(scope, place)
        if isinstance(feed, list | tuple):
            # Fluid accepts one feed dict per place
            if len(feed) != len(self._places or ()):
                short = len(feed) < len(self._places or ())
                raise ValueError(
                    f"Feed a list of tensor, the list should be the same size as places: got "
                    f"{len(feed)} dicts for {len(self._places or ())} place(s)" + (
                        ". If a DataLoader feeds it, this may be because you set "
                        "drop_last=False: running the last batches on fewer places is not "
                        "implemented (nor, for training, in Fluid 1.8); set drop_last=True"
                        if short else ""))
            if not all(isinstance(each, dict) for each in feed):
                raise TypeError("Each element of feed list should be a dict")
            feed = [self._checked_feed(each) for each in feed]
            if self._step is None:
                feed = feed[0]
        else:
            feed = self._checked_feed(feed or {})
        return (self._step or self._to_run), feed

    def _checked_feed(self, feed: dict) -> dict:
        if self._build_strategy is None or self._build_strategy.gradient_scale_strategy != \
                _GradientScaleStrategy.Customized:
            return feed
        grad = self._loss_name + "@GRAD"
        if grad not in feed:
            raise ValueError(f"GradientScaleStrategy.Customized: feed {grad!r} (the scale of "
                             "the loss's gradient) with every run")
        # Fluid takes a scalar for a one-element loss; give it the loss's shape
        loss = self._to_run.global_block()._find_var_recursive(self._loss_name)
        value = feed[grad]
        if not hasattr(value, "dtype"):
            value = np.asarray(value, dtype=loss.dtype)
        if loss.shape is not None and all(d >= 0 for d in loss.shape) and \
                int(np.prod(value.shape)) == int(np.prod(loss.shape)):
            value = value.reshape(tuple(loss.shape))
        return {**feed, grad: value}

    def _drop_local_scopes(self) -> None:
        if self._step is not None:
            self._step.drop_local_scopes()

    def _close(self) -> None:
        if self._step is not None:
            self._step.close()

    def __repr__(self) -> str:
        mode = "data parallel" if self._is_data_parallel else "single place"
        return f"CompiledProgram({mode}, loss_name={self._loss_name!r})"


def _fed_loss_grad(program: Program, loss_name: str) -> Program:
    """``program`` without the ``fill_constant`` that seeds ``loss@GRAD``: with
    ``GradientScaleStrategy.Customized`` the caller feeds it (a scalar, broadcast to the loss's
    shape as Fluid does)."""
    grad = loss_name + "@GRAD"
    prog = program.clone()
    block = prog.global_block()
    seeds = [i for i, op in enumerate(block.ops)
             if op.type == "fill_constant" and op.output_arg_names == [grad]]
    if not seeds:
        raise ValueError(f"GradientScaleStrategy.Customized: the program has no {grad!r} seeded "
                         "by the backward pass; is loss_name the loss that minimize() used?")
    del block.ops[seeds[0]]
    return prog
