"""``fluid.dygraph.parallel``: data-parallel dygraph training between trainer processes.

Fluid 1.8's multi-process dygraph mode. Every trainer process (started by hand, by Paddle's
launcher or by ``dask-fluid launch``, which set ``PADDLE_TRAINER_ID``,
``PADDLE_TRAINER_ENDPOINTS``, ``PADDLE_CURRENT_ENDPOINT`` ...) runs the same script::

    with fluid.dygraph.guard(place):
        strategy = fluid.dygraph.parallel.prepare_context()
        model = fluid.dygraph.parallel.DataParallel(MyModel(), strategy)
        for batch in my_share_of_the_data():
            loss = model.scale_loss(compute_loss(model, batch))
            loss.backward()
            model.apply_collective_grads()
            opt.minimize(loss)
            model.clear_gradients()

:func:`prepare_context` connects the trainers with the communicator the static NCCL2 mode
uses (:func:`~dask_fluid.distributed.collective.trainers.connect_trainers`: NCCL through CuPy
on GPUs, a TCP ring between the trainer endpoints on CPUs); ``scale_loss`` divides the loss by
the number of trainers and ``apply_collective_grads`` sums the gradients over them, so that
every trainer applies the gradient of the mean loss over the global batch.

As in Fluid 1.8, the parameters are not broadcast: every trainer must create them equal, which
the same ``random_seed`` of the guard's programs does (Paddle's own tests rely on it too).
"""

from __future__ import annotations

import atexit
import collections
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..framework import _dygraph_tracer
from ..ops.registry import to_host
from ..ops.selected_rows import SelectedRows
from ..places import CUDAPlace
from .base import no_grad, to_variable
from .layers import Layer
from .varbase import ParamBase

__all__ = ["DataParallel", "Env", "ParallelEnv", "ParallelStrategy", "prepare_context"]

#: Fluid 1.8 coalesces gradients into groups of at most this many bytes (one all-reduce each)
GROUP_BYTES = 128 * 1024 * 1024


class ParallelEnv:
    """The trainer's place in the job, read from the environment when created (Fluid 1.8's
    ``fluid.dygraph.ParallelEnv``; the launchers set these variables).

    Attributes
    ----------
    nranks : int
        ``PADDLE_TRAINERS_NUM`` (1 when unset).
    local_rank : int
        ``PADDLE_TRAINER_ID`` (0 when unset).
    dev_id : int
        The first of ``FLAGS_selected_gpus`` (0 when unset).
    current_endpoint : str
        ``PADDLE_CURRENT_ENDPOINT`` (``""`` when unset).
    trainer_endpoints : list of str
        ``PADDLE_TRAINER_ENDPOINTS`` split at commas (``[""]`` when unset, as Fluid's).

    Raises
    ------
    ValueError
        A variable that must be an integer is not one (the message names it).
    """

    def __init__(self) -> None:
        self._nranks = _int_env("PADDLE_TRAINERS_NUM", "1")
        self._local_rank = _int_env("PADDLE_TRAINER_ID", "0")
        # one device per dygraph process: the first of the selected GPUs
        gpus = os.getenv("FLAGS_selected_gpus", "0").split(",")[0].strip() or "0"
        if not gpus.isdigit():
            raise ValueError(f"FLAGS_selected_gpus={os.getenv('FLAGS_selected_gpus')!r}: "
                             "expected GPU ids, e.g. '0' or '0,1'")
        self._dev_id = int(gpus)
        self._trainer_endpoints = os.getenv("PADDLE_TRAINER_ENDPOINTS", "").split(",")
        self._current_endpoint = os.getenv("PADDLE_CURRENT_ENDPOINT", "")

    @property
    def nranks(self) -> int:
        """The number of trainers (``PADDLE_TRAINERS_NUM``)."""
        return self._nranks

    @property
    def local_rank(self) -> int:
        """This trainer's id (``PADDLE_TRAINER_ID``)."""
        return self._local_rank

    @property
    def dev_id(self) -> int:
        """This trainer's GPU (the first of ``FLAGS_selected_gpus``)."""
        return self._dev_id

    @property
    def current_endpoint(self) -> str:
        """This trainer's ``host:port`` (``PADDLE_CURRENT_ENDPOINT``)."""
        return self._current_endpoint

    @property
    def trainer_endpoints(self) -> list[str]:
        """Every trainer's ``host:port``, in trainer-id order (``PADDLE_TRAINER_ENDPOINTS``)."""
        return list(self._trainer_endpoints)


#: Fluid 1.8's older name of :class:`ParallelEnv`
Env = ParallelEnv


def _int_env(name: str, default: str) -> int:
    value = os.getenv(name, default).strip()
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


class ParallelStrategy:
    """Who this trainer is among the trainers (Fluid 1.8's ``core.ParallelStrategy``).

    Attributes
    ----------
    nranks : int
        The number of trainers (1: no data parallelism).
    local_rank : int
        This trainer's id, ``0 <= local_rank < nranks``.
    trainer_endpoints : list of str
        ``host:port`` of every trainer, in id order.
    current_endpoint : str
        This trainer's ``host:port`` (``trainer_endpoints[local_rank]``).
    """

    def __init__(self) -> None:
        self.nranks = 1
        self.local_rank = 0
        self.trainer_endpoints: list[str] = []
        self.current_endpoint = ""

    def __repr__(self) -> str:
        return (f"ParallelStrategy(nranks={self.nranks}, local_rank={self.local_rank}, "
                f"trainer_endpoints={self.trainer_endpoints}, "
                f"current_endpoint={self.current_endpoint!r})")


def _default_strategy() -> ParallelStrategy:
    env = ParallelEnv()
    strategy = ParallelStrategy()
    strategy.nranks = env.nranks
    strategy.local_rank = env.local_rank
    strategy.trainer_endpoints = env.trainer_endpoints
    strategy.current_endpoint = env.current_endpoint
    return strategy


def _checked(strategy: ParallelStrategy) -> tuple[int, list[str]]:
    """``(rank, endpoints)`` of a strategy of 2 or more trainers; ValueError when they do not
    fit together."""
    endpoints = [str(e).strip() for e in (strategy.trainer_endpoints or [])]
    nranks, rank = int(strategy.nranks), int(strategy.local_rank)
    if len(endpoints) != nranks or not all(endpoints):
        raise ValueError(f"ParallelStrategy: nranks={nranks} but trainer_endpoints={endpoints}; "
                         "give one host:port per trainer (PADDLE_TRAINER_ENDPOINTS)")
    if not 0 <= rank < nranks:
        raise ValueError(f"ParallelStrategy: local_rank={rank} is out of range for {nranks} "
                         "trainers")
    mine = str(strategy.current_endpoint or "").strip()
    if mine and mine != endpoints[rank]:
        raise ValueError(f"ParallelStrategy: trainer {rank}'s endpoint is {endpoints[rank]} in "
                         f"trainer_endpoints, not current_endpoint={mine}")
    return rank, endpoints


#: this process's trainer communicator (Fluid's global parallel context: one per process)
_context: Any = None


def _parallel_context() -> Any:
    """The open :class:`~dask_fluid.distributed.collective.trainers.TrainerComm` of this
    process, or None before :func:`prepare_context`."""
    if _context is not None and _context.closed:
        return None
    return _context


def _close_context() -> None:
    global _context
    if _context is not None:
        _context.close()
        _context = None


atexit.register(_close_context)


def prepare_context(strategy: ParallelStrategy | None = None) -> ParallelStrategy | None:
    """Connect this trainer to the others (Fluid 1.8's ``fluid.dygraph.prepare_context``).

    Call it inside ``fluid.dygraph.guard(place)`` on every trainer. The communicator is the
    static NCCL2 mode's: NCCL through CuPy when the guard's place is a CUDAPlace and CuPy has
    NCCL (trainer 0 hands out the NCCL id at its endpoint, or through the Dask scheduler under
    ``dask-fluid launch``), else a TCP ring between the trainer endpoints (gradients of a GPU
    go through host memory). It waits for the other trainers up to ``FLAGS_rpc_deadline`` and
    authenticates them with the job secret ``DASK_FLUID_JOB_SECRET``.

    Parameters
    ----------
    strategy : ParallelStrategy, optional
        Who this trainer is; by default from the environment (:class:`ParallelEnv`).

    Returns
    -------
    ParallelStrategy or None
        ``strategy``; None when there are fewer than 2 trainers (nothing is set up, as in
        Fluid 1.8).

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``, or called again for another job in this process.
    ValueError
        The strategy's endpoints, rank and number of trainers do not fit together.
    DeadlineExceededError
        A trainer did not come up within ``FLAGS_rpc_deadline`` (the error names it).
    """
    global _context
    if strategy is None:
        strategy = _default_strategy()
    if not isinstance(strategy, ParallelStrategy):
        raise TypeError(f"prepare_context: strategy must be a ParallelStrategy, got "
                        f"{type(strategy).__name__}")
    if int(strategy.nranks) < 2:
        return None
    tracer = _dygraph_tracer()
    if tracer is None:
        raise RuntimeError("dygraph.prepare_context should be used with dygraph mode: call it "
                           "inside fluid.dygraph.guard(place)")
    rank, endpoints = _checked(strategy)
    current = _parallel_context()
    if current is not None:
        if current.rank == rank and current.endpoints == endpoints:
            return strategy  # the same job asked again: one communicator per process
        raise RuntimeError(f"this process is already {current!r}; a process takes part in one "
                           "data-parallel job (the parallel context is initialised once)")
    # the same sources as the static mode's gen_nccl_id kernel (collective.ops)
    from ..distributed.collective.trainers import connect_trainers  # noqa: PLC0415
    from ..distributed.comm.auth import env_secret  # noqa: PLC0415
    from ..distributed.comm.tls import env_contexts  # noqa: PLC0415
    from ..flags import RPCFlags  # noqa: PLC0415

    place = tracer.place
    on_gpu = isinstance(place, CUDAPlace)
    _context = connect_trainers(
        rank, endpoints, RPCFlags.current().deadline_s, secret=env_secret(),
        on_gpu=on_gpu, device=place.device_id if on_gpu else 0,
        scheduler=os.environ.get("DASK_SCHEDULER_ADDRESS") or None, tls=env_contexts())
    return strategy


class DataParallel(Layer):
    """Run a dygraph model with data parallelism (Fluid 1.8's ``fluid.dygraph.DataParallel``).

    Calling it calls the wrapped layer; its parameters and ``state_dict`` are the wrapped
    layer's (the same keys, no prefix). After ``loss.backward()``, ``apply_collective_grads``
    sums every trainable parameter's gradient over the trainers; with the loss divided by the
    number of trainers first (``scale_loss``) that is the gradient of the mean loss over
    everybody's batch.

    Parameters
    ----------
    layers : Layer
        The model.
    strategy : ParallelStrategy, optional
        What :func:`prepare_context` returned; by default from the environment.

    Raises
    ------
    TypeError
        ``layers`` is not a Layer.
    RuntimeError
        The strategy has 2 or more trainers but :func:`prepare_context` has not connected them.
    """

    def __init__(self, layers: Layer, strategy: ParallelStrategy | None = None) -> None:
        if not isinstance(layers, Layer):
            raise TypeError(f"DataParallel wraps a fluid.dygraph.Layer, got "
                            f"{type(layers).__name__}")
        if strategy is None:
            strategy = _default_strategy()
        if not isinstance(strategy, ParallelStrategy):
            raise TypeError(f"DataParallel: strategy must be a ParallelStrategy, got "
                            f"{type(strategy).__name__}")
        super().__init__(layers.full_name() + "_data_parallel")
        self._layers = layers
        self._strategy = strategy
        if self._is_data_parallel_mode():
            comm = _parallel_context()
            if comm is None:
                raise RuntimeError(
                    f"DataParallel with {strategy.nranks} trainers needs the trainers "
                    "connected first: call fluid.dygraph.parallel.prepare_context(strategy) "
                    "inside the dygraph guard before DataParallel(model, strategy)")
            rank, endpoints = _checked(strategy)
            if comm.rank != rank or comm.endpoints != endpoints:
                raise ValueError(f"DataParallel: the strategy says trainer {rank} of "
                                 f"{endpoints}, but prepare_context connected {comm!r}")

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self._layers(*inputs, **kwargs)

    def _is_data_parallel_mode(self) -> bool:
        return int(self._strategy.nranks) > 1

    def scale_loss(self, loss: Any) -> Any:
        """``loss`` divided by the number of trainers (an ``elementwise_div`` op, traced, so
        that ``backward`` scales every gradient); ``loss`` itself with one trainer."""
        if not self._is_data_parallel_mode():
            return loss
        scale = to_variable(np.array([self._strategy.nranks], dtype=loss.dtype))
        scale.stop_gradient = True
        return loss / scale

    def apply_collective_grads(self) -> None:
        """Sum every trainable parameter's gradient over the trainers, in place.

        The gradients are coalesced into groups of one dtype and at most 128 MB (Fluid 1.8's
        grouping), one fused all-reduce each. Sparse gradients (SelectedRows, from an
        ``Embedding(is_sparse=True)``) are summed dense. Every trainer must have gradients for
        the same parameters (Fluid 1.8 skips those without one, so must every trainer).

        Raises
        ------
        DistributedTrainingError
            A trainer died or did not answer within ``FLAGS_rpc_deadline`` (the error names
            it).
        """
        if not self._is_data_parallel_mode():
            return
        handle = _parallel_context()
        if handle is None:
            raise RuntimeError("apply_collective_grads: the trainers' communicator is closed "
                               "or was never set up (prepare_context)")
        params = [p for p in self._layers.parameters()
                  if p.trainable and isinstance(p, ParamBase) and p._grad is not None]
        if not params:
            return
        with no_grad():
            for group in _groups(params, GROUP_BYTES):
                self._reduce(handle, group)

    @staticmethod
    def _reduce(handle: Any, params: Sequence[ParamBase]) -> None:
        step, handle.steps = handle.steps, handle.steps + 1
        grads = [_dense(p._grad) for p in params]
        on_device = not all(isinstance(g, np.ndarray) for g in grads)
        host = handle.host_staged and on_device
        # fresh contiguous copies: a gradient array may be shared with other values of the
        # traced graph (a grad kernel may hand back its input), which must not change
        if host:
            arrays = [np.array(to_host(g), copy=True, order="C") for g in grads]
        elif on_device:
            arrays = [g.copy(order="C") for g in grads]
        else:
            arrays = [np.array(g, copy=True, order="C") for g in grads]
        handle.comm.allreduce(arrays, op="sum", step=step)
        if host:
            import cupy  # noqa: PLC0415 - the gradients live on a GPU here

            arrays = [cupy.asarray(a) for a in arrays]
        for p, a in zip(params, arrays, strict=True):
            p._grad = a

    # -- the wrapped layer's state -------------------------------------------------------------
    def state_dict(self, destination: dict | None = None, include_sublayers: bool = True,
                   structured_name_prefix: str = "") -> collections.OrderedDict:
        """The wrapped layer's ``state_dict`` (its keys, without a prefix for the wrapper)."""
        return self._layers.state_dict(destination=destination,
                                       include_sublayers=include_sublayers,
                                       structured_name_prefix=structured_name_prefix)

    def set_dict(self, stat_dict: dict, include_sublayers: bool = True,
                 use_structured_name: bool = True) -> None:
        """Set the wrapped layer's parameters (what its ``state_dict`` gave)."""
        self._layers.set_dict(stat_dict, include_sublayers=include_sublayers,
                              use_structured_name=use_structured_name)

    load_dict = set_dict


def _dense(grad: Any) -> Any:
    if isinstance(grad, SelectedRows):
        return grad.to_dense()
    return grad


def _groups(params: Sequence[ParamBase], limit: int) -> Iterator[list[ParamBase]]:
    """Fluid 1.8's grouping: consecutive parameters of one dtype until a group holds
    ``limit`` bytes or more."""
    group: list[ParamBase] = []
    size, dtype = 0, None
    for p in params:
        grad = p._grad
        value = grad.value if isinstance(grad, SelectedRows) else grad
        nbytes = int(np.prod(p.shape or ())) * np.dtype(value.dtype).itemsize
        if group and (size >= limit or value.dtype != dtype):
            yield group
            group, size = [], 0
        group.append(p)
        size += nbytes
        dtype = value.dtype
    if group:
        yield group
