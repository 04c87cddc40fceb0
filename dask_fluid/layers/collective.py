"""``fluid.layers.collective``: Fluid 1.8's (private) builders of the collective ops.

``_allreduce`` and ``_broadcast`` write the older ``allreduce``/``broadcast`` ops, which run on
the nccl2 trainers' communicator (the startup's ``gen_nccl_id``) inside a ``CompiledProgram``
with ``num_trainers > 1``: a gradient an ``allreduce`` op reduces is not all-reduced again, and
the loss gradient is scaled by ``1 / trainers`` (Paddle 1.8's dist_allreduce_op.py). The
``_c_*`` builders write the ``c_*`` ops, which run on the ring ``c_comm_init`` filed under
their ``ring_id`` (:mod:`dask_fluid.transpiler.collective`). The kernels:
:mod:`dask_fluid.distributed.collective.c_ops`.
"""

from __future__ import annotations

from .. import unique_name
from ..framework import Variable
from ..layer_helper import LayerHelper

__all__: list[str] = []

#: Fluid's ``allreduce`` op's ``reduce_type`` attr
_REDUCE_TYPES = {"sum": 0, "prod": 1, "max": 2, "min": 3}


def _check(x: Variable, what: str) -> None:
    if not isinstance(x, Variable):
        raise TypeError(f"{what}: x must be a Variable, got {type(x).__name__}")


def _like(helper: LayerHelper, x: Variable, suffix: str, shape=None, **kwargs) -> Variable:
    return helper.main_program.current_block().create_var(
        name=unique_name.generate(f"{x.name}.{suffix}"),
        shape=list(x.shape) if shape is None else shape, dtype=x.dtype,
        persistable=x.persistable, **kwargs)


def _allreduce(x: Variable, out: Variable | None = None, reduce_type: str = "sum",
               sync_mode: bool = False) -> Variable:
    """``x`` reduced over the nccl2 trainers (op ``allreduce``); ``reduce_type`` is ``"sum"``,
    ``"prod"``, ``"max"`` or ``"min"``."""
    _check(x, "_allreduce")
    if reduce_type not in _REDUCE_TYPES:
        raise TypeError("reduce type can only be [sum|prod|max|min]")
    helper = LayerHelper("allreduce")
    if out is None:
        out = _like(helper, x, "tmp", stop_gradient=True)
    helper.append_op("allreduce", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"reduce_type": _REDUCE_TYPES[reduce_type],
                            "sync_mode": bool(sync_mode)})
    return out


def _broadcast(x: Variable, root: int, sync_mode: bool = False) -> Variable:
    """``x`` overwritten with trainer ``root``'s (op ``broadcast``), in place."""
    _check(x, "_broadcast")
    LayerHelper("broadcast").append_op("broadcast", inputs={"X": [x]}, outputs={"Out": [x]},
                                       attrs={"sync_mode": bool(sync_mode), "root": int(root)})
    return x


def _c_allreduce(x: Variable, out: Variable | None = None, reduce_type: str = "sum",
                 ring_id: int = 0, use_calc_stream: bool = False) -> Variable:
    """``x`` reduced over ring ``ring_id`` (op ``c_allreduce_<reduce_type>``)."""
    _check(x, "_c_allreduce")
    if reduce_type not in _REDUCE_TYPES:
        raise TypeError('reduce type can only be "sum|prod|max|min]"')
    op_type = f"c_allreduce_{reduce_type}"
    helper = LayerHelper(op_type)
    if out is None:
        out = _like(helper, x, op_type)
    helper.append_op(op_type, inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"ring_id": int(ring_id), "use_calc_stream": bool(use_calc_stream)})
    return out


def _c_broadcast(x: Variable, root: int = 0, ring_id: int = 0,
                 use_calc_stream: bool = False) -> Variable:
    """``x`` overwritten with rank ``root``'s over ring ``ring_id``, in place."""
    _check(x, "_c_broadcast")
    LayerHelper("c_broadcast").append_op(
        "c_broadcast", inputs={"X": [x]}, outputs={"Out": [x]},
        attrs={"root": int(root), "ring_id": int(ring_id),
               "use_calc_stream": bool(use_calc_stream)})
    return x


def _c_allgather(x: Variable, nranks: int, ring_id: int = 0,
                 use_calc_stream: bool = False) -> Variable:
    """Every rank's ``x`` stacked along dim 0 (``nranks`` times the rows)."""
    _check(x, "_c_allgather")
    helper = LayerHelper("c_allgather")
    shape = list(x.shape)
    if shape and shape[0] > 0:
        shape[0] *= nranks
    out = _like(helper, x, "c_allgather", shape)
    helper.append_op("c_allgather", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"nranks": int(nranks), "ring_id": int(ring_id),
                            "use_calc_stream": bool(use_calc_stream)})
    return out


def _c_reducescatter(x: Variable, nranks: int, ring_id: int = 0,
                     use_calc_stream: bool = False) -> Variable:
    """The sum over the ranks of ``x``, each rank keeping its ``1 / nranks`` of the rows."""
    _check(x, "_c_reducescatter")
    if x.shape[0] > 0 and x.shape[0] % nranks:
        raise ValueError(f"x.shape[0]({x.shape[0]}) cannot be evenly divided by "
                         f"nranks({nranks})")
    helper = LayerHelper("c_reducescatter")
    shape = list(x.shape)
    if shape[0] > 0:
        shape[0] //= nranks
    out = _like(helper, x, "c_reducescatter", shape)
    helper.append_op("c_reducescatter", inputs={"X": [x]}, outputs={"Out": [out]},
                     attrs={"nranks": int(nranks), "ring_id": int(ring_id),
                            "use_calc_stream": bool(use_calc_stream)})
    return out


def _c_sync_calc_stream(x: Variable) -> Variable:
    """Order the compute before the collectives that read ``x`` (op ``c_sync_calc_stream``)."""
    LayerHelper("c_sync_calc_stream").append_op("c_sync_calc_stream", inputs={"X": [x]},
                                                outputs={"Out": [x]})
    return x


def _c_sync_comm_stream(x: Variable, ring_id: int) -> Variable:
    """Order ring ``ring_id``'s collectives before what reads ``x`` next."""
    LayerHelper("c_sync_comm_stream").append_op("c_sync_comm_stream", inputs={"X": [x]},
                                                outputs={"Out": [x]},
                                                attrs={"ring_id": int(ring_id)})
    return x
