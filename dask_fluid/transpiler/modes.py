"""Which kind of pserver training a config asks for: Fluid 1.8's ``DistributedMode``.

Fluid 1.8 spreads the decision over several places: ``DistributeTranspiler.__init__`` picks the
pserver's ``distributed_mode`` from the config (``SYNC`` if ``sync_mode`` or
``completely_not_async``, else ``ASYNC`` if ``runtime_split_send_recv``, else ``HALF_ASYNC``),
``transpile()`` shapes the trainer's ops from its own ``sync_mode`` argument, fleet picks the
Communicator (``SyncStrategy``, ``HalfAsyncStrategy``, ``AsyncStrategy``, ``GeoStrategy``) and
GEO-SGD is a separate transpiler. :func:`resolve_mode` makes that one decision, from the config
and the ``transpile()`` argument, and refuses the combinations Fluid 1.8 silently turns into a
job that does not train.

The modes, as the trainer and the pservers run them (per step, for one trainer):

========================  ===========================================================  ====
mode                      trainer / pserver                                             attr
========================  ===========================================================  ====
sync                      send all blocks, barrier; the pservers sum the N trainers'    0
                          gradients, scale by 1/N, optimize; recv the new blocks
sync, runtime split       the same; the runtime cuts the gradients and joins the        0
(completely_not_async)    parameters (fleet's SyncStrategy)
half-async                send each block, recv each block: the trainer waits for its   2
                          own exchange only; each gradient is applied at once, unscaled
half-async, runtime       the same with whole gradients and parameters in the program   1
split (half_async)        and ``send_barrier(half_async=True)`` ending the sends
async, runtime split      whole gradients sent without waiting: the step goes on with   1
                          the parameters of the previous step's exchange
GEO-SGD                   the trainer optimizes locally; every k steps it sends          3
                          ``(param - last synced) / N`` per block, the pservers add it,
                          the trainer adds the pservers' change to its own
========================  ===========================================================  ====
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .config import DistributeTranspilerConfig


class DistributedMode(IntEnum):
    """Fluid 1.8's ``distributed_mode`` attr of ``listen_and_serv``."""

    SYNC = 0
    ASYNC = 1
    HALF_ASYNC = 2
    GEO = 3


@dataclass(frozen=True)
class TrainingMode:
    """What a transpile does, decided once (:func:`resolve_mode`).

    Attributes
    ----------
    distributed_mode : DistributedMode
        The pserver's mode, as Fluid 1.8 records it.
    sync : bool
        Rounds: every trainer's gradients of a step are summed and averaged before one
        optimize step (per-trainer gradient names when there are several trainers).
    runtime_split : bool
        The trainer program sends whole gradients and receives whole parameters; the runtime
        cuts and joins the blocks (``send.sections``, ``recv.recv_varnames``).
    half_async : bool
        A ``send_barrier(half_async=True)`` ends the runtime-split sends of a step.
    geo_push_nums : int
        GEO-SGD: steps between two exchanges (0 in every other mode).
    """

    distributed_mode: DistributedMode
    sync: bool
    runtime_split: bool = False
    half_async: bool = False
    geo_push_nums: int = 0

    @property
    def geo(self) -> bool:
        return self.distributed_mode == DistributedMode.GEO

    @property
    def barriers(self) -> bool:
        """Fluid's sync program: ``send_barrier`` after the sends, ``fetch_barrier`` after the
        recvs, blocks split and concatenated by the program."""
        return self.sync and not self.runtime_split

    @property
    def pipelined(self) -> bool:
        """The trainer does not wait for its step's exchange (the async Communicator)."""
        return self.runtime_split and not self.sync and not self.half_async and not self.geo

    @property
    def name(self) -> str:
        """``sync`` or ``async``, then the variant (summaries and logs)."""
        if self.geo:
            return f"async (GEO-SGD, every {self.geo_push_nums} steps)"
        if self.sync:
            return "sync (runtime split)" if self.runtime_split else "sync"
        if self.pipelined:
            return "async (runtime split)"
        return "async (half-async, runtime split)" if self.runtime_split else "async (half-async)"


def resolve_mode(config: DistributeTranspilerConfig, sync_mode: object) -> TrainingMode:
    """The training mode of a pserver-mode transpile.

    Parameters
    ----------
    config : DistributeTranspilerConfig
    sync_mode : bool
        The ``transpile(sync_mode=)`` argument; ``config.sync_mode`` wins once it has been
        assigned.

    Raises
    ------
    ValueError
        A combination of fields that Fluid 1.8 turns into programs that do not train
        together, or that is asynchronous and synchronous at once; the message names the
        fields and what to set instead.
    """
    sync = config.sync_mode if config.is_set("sync_mode") else sync_mode
    if not isinstance(sync, bool):
        raise ValueError(f"sync_mode = {sync!r} is not allowed: it must be a bool")
    if config.geo_sgd_mode:
        return _geo_mode(config, sync)
    if config.completely_not_async and not sync:
        missing = [f for f in ("runtime_split_send_recv", "half_async") if not getattr(config, f)]
        if missing:
            raise ValueError(
                f"completely_not_async with sync_mode=False needs {' and '.join(missing)} = "
                "True: it is synchronous training through the runtime's split sends and "
                "barriers (Fluid 1.8 fleet's SyncStrategy sets sync_mode=False, "
                "runtime_split_send_recv=True, half_async=True, completely_not_async=True); "
                "for plain synchronous training set sync_mode=True instead")
        sync_conflicts = ["enable_dc_asgd"] if config.enable_dc_asgd else []
        _refuse_with_sync(sync_conflicts, "completely_not_async")
        return TrainingMode(DistributedMode.SYNC, sync=True, runtime_split=True,
                            half_async=True)
    if sync:
        conflicts = [f for f in ("runtime_split_send_recv", "half_async", "enable_dc_asgd")
                     if getattr(config, f)]
        _refuse_with_sync(conflicts, "sync_mode=True")
        return TrainingMode(DistributedMode.SYNC, sync=True)
    if config.runtime_split_send_recv:
        return TrainingMode(DistributedMode.ASYNC, sync=False, runtime_split=True,
                            half_async=config.half_async)
    # Without the runtime split, Fluid's async mode is HALF_ASYNC whatever half_async says:
    # every send and recv waits for its own RPC, never for the other trainers.
    return TrainingMode(DistributedMode.HALF_ASYNC, sync=False)


def _refuse_with_sync(fields: list[str], sync_source: str) -> None:
    if not fields:
        return
    first = fields[0]
    why = {
        "runtime_split_send_recv": "the runtime split is Fluid's async Communicator",
        "half_async": "half-async training does not wait for the other trainers",
        "enable_dc_asgd": "DC-ASGD compensates for stale parameters, which sync mode does not "
                          "have",
    }[first]
    raise ValueError(f"{first} needs asynchronous training, but {sync_source} makes it "
                     f"synchronous ({why}): call transpile(..., sync_mode=False) or set "
                     f"config.sync_mode = False, or unset {', '.join(fields)}")


def _geo_mode(config: DistributeTranspilerConfig, sync: bool) -> TrainingMode:
    if sync:
        raise ValueError("geo_sgd_mode is asynchronous (each trainer optimizes locally and "
                         "merges with the pservers every geo_sgd_need_push_nums steps): set "
                         "config.sync_mode = False and config.runtime_split_send_recv = True")
    if not config.runtime_split_send_recv:
        raise ValueError("geo_sgd_mode needs runtime_split_send_recv = True: the runtime cuts "
                         "the parameter deltas into the pserver blocks (Fluid 1.8's "
                         "GeoStrategy sets sync_mode=False, runtime_split_send_recv=True, "
                         "geo_sgd_mode=True)")
    for field, why in (("half_async", "GEO-SGD exchanges every geo_sgd_need_push_nums "
                                      "steps, not every step"),
                       ("completely_not_async", "GEO-SGD is asynchronous"),
                       ("enable_dc_asgd", "GEO-SGD sends parameter deltas, not gradients to "
                                          "compensate")):
        if getattr(config, field):
            raise ValueError(f"geo_sgd_mode cannot be combined with {field} ({why}): unset "
                             f"one of them")
    return TrainingMode(DistributedMode.GEO, sync=False, runtime_split=True,
                        geo_push_nums=config.geo_sgd_need_push_nums)
