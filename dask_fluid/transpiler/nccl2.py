"""NCCL2 mode (§7): the main program is not rewritten, only annotated; the startup program
gets the NCCL unique-id variables and a final ``gen_nccl_id`` op.

Fluid's trainer 0 waits inside ``transpile()`` until every peer's port accepts TCP
(``wait_port``). ``transpile()`` never blocks here: ``config.wait_port`` is recorded as the
``wait_port`` attr of ``gen_nccl_id``, for the runtime that exchanges the id (under Dask the
id is created on the scheduler and handed to the ranks, and no port is opened for it).
"""

from __future__ import annotations

from collections.abc import Callable

from ..framework import OP_ROLE_KEY, OpRole, Program, VarType
from .config import DistributeTranspilerConfig, parse_endpoints


def nccl_id_names(comm_num: int) -> list[str]:
    """``NCCLID``, ``NCCLID_1``, ..., one per communicator."""
    return ["NCCLID"] + [f"NCCLID_{i}" for i in range(1, comm_num)]


def transpile_nccl2(program: Program, startup: Program, trainer_id: int, trainers: object,
                    current_endpoint: str, config: DistributeTranspilerConfig,
                    log: Callable[..., None]) -> list[str]:
    """Annotate ``program`` and extend ``startup`` for NCCL2 data parallelism; returns the
    trainer endpoints."""
    if not isinstance(trainers, str):
        raise TypeError("in nccl2 mode, trainers must be a comma-separated str of trainer "
                        f"endpoints ('ip:port,ip:port'), got {type(trainers).__name__}")
    endpoints = parse_endpoints(trainers, "trainers")
    if current_endpoint not in endpoints:
        raise ValueError(f"current_endpoint {current_endpoint!r} is not one of the trainer "
                         f"endpoints {endpoints}")
    n = len(endpoints)
    if not 0 <= trainer_id < n:
        raise ValueError(f"trainer_id {trainer_id} is out of range: {n} trainers, so it must be "
                         f"in [0, {n - 1}]")
    inter = config.hierarchical_allreduce_inter_nranks
    if config.use_hierarchical_allreduce:
        if inter <= 1 or n <= inter or n % inter:
            raise ValueError(
                "use_hierarchical_allreduce needs hierarchical_allreduce_inter_nranks > 1 "
                f"dividing the number of trainers and smaller than it; got inter_nranks={inter} "
                f"for {n} trainers")
    program._trainers_endpoints = list(endpoints)
    program._nccl_comm_num = config.nccl_comm_num
    program._use_hierarchical_allreduce = config.use_hierarchical_allreduce
    program._hierarchical_allreduce_inter_nranks = inter
    program._trainer_id = trainer_id
    program._num_trainers = n
    block = startup.global_block()
    ids = nccl_id_names(config.nccl_comm_num)
    if config.use_hierarchical_allreduce:
        for i in range(config.nccl_comm_num):
            ids += [f"Hierarchical_inter_NCCLID_{i}", f"Hierarchical_exter_NCCLID_{i}"]
    for name in ids:
        block.create_var(name=name, type=VarType.RAW, persistable=True)
    block.append_op("gen_nccl_id", outputs={"NCCLID": ids},
                    attrs={"trainers": list(endpoints), "trainer_id": trainer_id,
                           "nccl_comm_num": config.nccl_comm_num,
                           "endpoint": current_endpoint,
                           "endpoint_list": [e for e in endpoints if e != current_endpoint],
                           "use_hierarchical_allreduce": config.use_hierarchical_allreduce,
                           "hierarchical_allreduce_inter_nranks": inter,
                           "wait_port": config.wait_port, OP_ROLE_KEY: OpRole.Forward})
    log("nccl2: trainer %d of %s, ids %s", trainer_id, endpoints, ids)
    return endpoints
