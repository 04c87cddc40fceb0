"""``fluid.transpiler.geo_sgd_transpiler.GeoSgdTranspiler`` (Fluid 1.8): the GEO-SGD programs.

Fluid 1.8's fleet used a transpiler of its own for GEO-SGD; here the
:class:`~dask_fluid.transpiler.DistributeTranspiler` builds the GEO programs when its config
says ``geo_sgd_mode`` (docs/configuration.md), so this class is that transpiler with the
config GEO-SGD needs: asynchronous, the runtime cutting and joining the blocks, and
``geo_sgd_need_push_nums`` steps between exchanges.
"""

from __future__ import annotations

import copy

from ..framework import Program
from .config import DistributeTranspilerConfig
from .distribute_transpiler import DistributeTranspiler

__all__ = ["GeoSgdTranspiler"]


class GeoSgdTranspiler(DistributeTranspiler):
    """Transpile for GEO-SGD (Fluid 1.8's ``GeoSgdTranspiler``): each trainer keeps its
    optimizer and trains locally, and every ``config.geo_sgd_need_push_nums`` steps sends the
    change of each parameter block since the last exchange, divided by the trainers, which
    the pservers add.

    Parameters
    ----------
    config : DistributeTranspilerConfig, optional
        Used as a copy with ``sync_mode = False``, ``runtime_split_send_recv = True`` and
        ``geo_sgd_mode = True`` (the caller's object is left as it is).
    """

    def __init__(self, config: DistributeTranspilerConfig | None = None) -> None:
        config = DistributeTranspilerConfig() if config is None else copy.copy(config)
        if not isinstance(config, DistributeTranspilerConfig):
            raise TypeError("config must be a DistributeTranspilerConfig, got "
                            f"{type(config).__name__}")
        config.sync_mode = False
        config.runtime_split_send_recv = True
        config.geo_sgd_mode = True
        super().__init__(config)

    def transpile(self, trainer_id: int, program: Program | None = None,
                  pservers: str = "127.0.0.1:6174", trainers: int | str = 1,
                  sync_mode: bool = False, startup_program: Program | None = None,
                  current_endpoint: str = "127.0.0.1:6174") -> None:
        """As :meth:`DistributeTranspiler.transpile`, asynchronous.

        Raises
        ------
        ValueError
            ``sync_mode`` is True: GEO-SGD is asynchronous (Fluid 1.8's GeoSgdTranspiler
            sets it False whatever it is given).
        """
        if sync_mode:
            raise ValueError("GeoSgdTranspiler.transpile(sync_mode=True): GEO-SGD is "
                             "asynchronous; leave sync_mode False")
        super().transpile(trainer_id, program=program, pservers=pservers, trainers=trainers,
                          sync_mode=False, startup_program=startup_program,
                          current_endpoint=current_endpoint)
