"""Signatures of the ops a host runs: RPC (send, recv, barriers, prefetch, listen_and_serv),
NCCL id exchange and gradient all-reduce, control flow, checkpointing and the pserver's sparse
table lookup.

They have no kernel here; the executor or the distributed runtime supplies one with
:func:`dask_fluid.ops.registry.set_kernel`, the RPC and collective ops' from the module named
as their ``provider`` (imported when a program first needs it). Attr defaults follow Fluid
1.x (v1.6+).
"""

from __future__ import annotations

from .norm_ops import BN_ATTRS, BN_GRAD_IN, BN_GRAD_OUT, bn_grad_maker
from .registry import register_signature, set_grad

#: the module of the pserver-mode kernels (RPC ops, remote-prefetch lookups)
PSERVER_OPS = "dask_fluid.distributed.pserver.ops"
_COLLECTIVE_OPS = "dask_fluid.distributed.collective.ops"

register_signature("send", ("X",), ("Out",),
                   {"epmap": [], "sections": [], "send_varnames": [], "sync_mode": True,
                    "trainer_id": 0},
                   optional=("X",), provider=PSERVER_OPS)
register_signature("recv", ("X",), ("Out",),
                   {"epmap": [], "trainer_id": 0, "with_barrier": True, "recv_varnames": [],
                    "sync_mode": True},
                   optional=("X",), provider=PSERVER_OPS)
register_signature("send_barrier", ("X",), ("Out",),
                   {"endpoints": [], "trainer_id": 0, "half_async": False, "sync_mode": True},
                   optional=("X",), provider=PSERVER_OPS)
register_signature("fetch_barrier", ("X",), ("Out",),
                   {"endpoints": [], "trainer_id": 0},
                   optional=("X",), provider=PSERVER_OPS)
register_signature("listen_and_serv", ("X",), (),
                   {"endpoint": "", "Fanin": 1, "optimize_blocks": [], "grad_to_block_id": [],
                    "sparse_grad_to_param": [], "sync_mode": True, "dc_asgd": False,
                    "lr_decay_block_id": -1, "prefetch_var_name_to_block_id": [],
                    "rpc_send_thread_num": 12, "rpc_get_thread_num": 12,
                    "rpc_prefetch_thread_num": 12, "pserver_id": 0, "distributed_mode": 0,
                    "checkpint_block_id": -1},
                   optional=("X",), provider=PSERVER_OPS)
register_signature("prefetch", ("X",), ("Out",),
                   {"epmap": [], "table_names": [], "trainer_id": 0}, provider=PSERVER_OPS)
register_signature("gen_nccl_id", (), ("NCCLID",),
                   {"trainers": [], "trainer_id": 0, "nccl_comm_num": 1, "endpoint": "",
                    "endpoint_list": [], "use_hierarchical_allreduce": False},
                   provider=_COLLECTIVE_OPS)
# Fluid 1.8's c_* collective ops (the collective transpilers, fluid.layers.collective)
_C_OPS = "dask_fluid.distributed.collective.c_ops"
register_signature("c_gen_nccl_id", (), ("Out",),
                   {"endpoint": "", "other_endpoints": [], "rank": 0}, provider=_C_OPS)
register_signature("c_comm_init", ("X",), (), {"nranks": 0, "rank": 0, "device_id": -1,
                                               "ring_id": 0}, provider=_C_OPS)
for _op in ("c_allreduce_sum", "c_allreduce_max", "c_allreduce_min", "c_allreduce_prod"):
    register_signature(_op, ("X",), ("Out",), {"ring_id": 0, "use_calc_stream": False},
                       provider=_C_OPS)
register_signature("c_broadcast", ("X",), ("Out",),
                   {"ring_id": 0, "root": 0, "use_calc_stream": False}, provider=_C_OPS)
for _op in ("c_allgather", "c_reducescatter"):
    register_signature(_op, ("X",), ("Out",),
                       {"ring_id": 0, "nranks": 1, "use_calc_stream": False}, provider=_C_OPS)
register_signature("c_sync_calc_stream", ("X",), ("Out",), {}, provider=_C_OPS)
# the older allreduce/broadcast (fluid.layers.collective._allreduce, _broadcast): on the nccl2
# trainers' communicator (the NCCLID variable); reduce_type 0 sum, 1 prod, 2 max, 3 min
register_signature("allreduce", ("X",), ("Out",), {"reduce_type": 0, "sync_mode": False},
                   provider=_C_OPS)
register_signature("broadcast", ("X",), ("Out",), {"sync_mode": False, "root": 0},
                   provider=_C_OPS)
register_signature("c_sync_comm_stream", ("X",), ("Out",), {"ring_id": 0}, provider=_C_OPS)
# BuildStrategy.sync_batch_norm over nccl2 trainers: batch_norm's slots, the global statistics
_SYNC_BN = "dask_fluid.distributed.collective.sync_batch_norm"
register_signature("sync_batch_norm", ("X", "Scale", "Bias", "Mean", "Variance"),
                   ("Y", "MeanOut", "VarianceOut", "SavedMean", "SavedVariance"), BN_ATTRS,
                   provider=_SYNC_BN)
register_signature("sync_batch_norm_grad", BN_GRAD_IN, BN_GRAD_OUT, BN_ATTRS, provider=_SYNC_BN)
set_grad("sync_batch_norm", lambda op: [{**desc, "type": "sync_batch_norm_grad"}
                                        for desc in bn_grad_maker(op)])
# what a CompiledProgram with num_trainers > 1 runs between backward and optimize: every
# gradient X all-reduced (mean, or sum without ``average``) through the communicator in Comm
register_signature("fused_allreduce", ("X", "Comm"), ("Out",), {"average": True},
                   provider=_COLLECTIVE_OPS)
# ... and the gradients DGCMomentumOptimizer's dgc ops compress: summed densely before the
# ramp-up's first step, every trainer's top-k entries (EncodeGrad) summed after
register_signature("dgc_allreduce",
                   ("Grad", "EncodeGrad", "current_step", "rampup_begin_step", "Comm"),
                   ("Out", "GatherBuff"), {}, provider=_COLLECTIVE_OPS)
# ConditionalBlock/Switch, layers.While and the tensor arrays (dask_fluid.control_flow_ops)
_LOOP = "dask_fluid.control_flow_ops"
register_signature("select_input", ("X", "Mask"), ("Out",), {}, provider=_LOOP, lod="kernel")
# select_input's gradient: the incoming gradient to the input the mask chose, none to the others
register_signature("select_output", ("X", "Mask"), ("Out",), {}, provider=_LOOP)
register_signature("conditional_block_grad", ("Cond", "Input", "Out", "Out@GRAD", "Scope"),
                   ("Input@GRAD",), {"sub_block": -1, "is_scalar_condition": True},
                   optional=("Input", "Out", "Out@GRAD", "Scope"), provider=_LOOP)
register_signature("conditional_block", ("Cond", "Input"), ("Out", "Scope"),
                   {"sub_block": -1, "is_scalar_condition": True},
                   optional=("Input",), provider=_LOOP)
register_signature("while", ("X", "Condition"), ("Out", "StepScopes"),
                   {"sub_block": -1, "is_test": False}, optional=("X",), provider=_LOOP)
register_signature("write_to_array", ("X", "I"), ("Out",), {}, provider=_LOOP, lod="kernel")
register_signature("read_from_array", ("X", "I"), ("Out",), {}, provider=_LOOP, lod="kernel")
register_signature("lod_array_length", ("X",), ("Out",), {}, provider=_LOOP, lod="none")
# training through a While loop: the body's grad block run over the kept steps, last first;
# inside it, the values each forward op left put back before that op's grad ops
register_signature("while_grad", ("X", "Out", "Out@GRAD", "StepScopes"), ("X@GRAD",),
                   {"sub_block": -1}, optional=("X", "Out", "Out@GRAD"), provider=_LOOP)
register_signature("while_step_state", ("StepScopes",), (), {"forward_op": -1},
                   provider=_LOOP)
# the tensor arrays' gradients: added into the gradient array at I, and taken from it
register_signature("read_from_array_grad", ("I", "Out@GRAD"), ("X@GRAD",), {},
                   optional=("Out@GRAD",), provider=_LOOP, lod="kernel")
register_signature("write_to_array_grad", ("X", "I", "Out@GRAD"), ("X@GRAD",), {},
                   optional=("Out@GRAD",), provider=_LOOP)
# StaticRNN: the step block run over the time steps of its inputs (dask_fluid.recurrent_op)
_RECURRENT = "dask_fluid.recurrent_op"
_RECURRENT_ATTRS = {"ex_states": [], "states": [], "sub_block": -1, "reverse": False,
                    "is_train": True, "has_states": False}
register_signature("recurrent", ("inputs", "initial_states", "parameters"),
                   ("outputs", "step_scopes"), _RECURRENT_ATTRS,
                   optional=("inputs", "initial_states", "parameters"), provider=_RECURRENT)
register_signature("recurrent_grad",
                   ("inputs", "initial_states", "parameters", "outputs", "outputs@GRAD",
                    "step_scopes"),
                   ("inputs@GRAD", "initial_states@GRAD", "parameters@GRAD"), _RECURRENT_ATTRS,
                   optional=("inputs", "initial_states", "parameters", "outputs",
                             "outputs@GRAD"), provider=_RECURRENT)
# DynamicRNN: the step block run over the sequences of LoD inputs, longest first
_DYNAMIC_ATTRS = {"ex_states": [], "states": [], "need_reorder": [], "sub_block": -1}
register_signature("dynamic_recurrent",
                   ("inputs", "static_inputs", "initial_states", "parameters"),
                   ("outputs", "step_scopes"), _DYNAMIC_ATTRS,
                   optional=("static_inputs", "initial_states", "parameters"),
                   provider=_RECURRENT, lod="kernel")
register_signature("dynamic_recurrent_grad",
                   ("inputs", "static_inputs", "initial_states", "parameters", "outputs",
                    "outputs@GRAD", "step_scopes"),
                   ("inputs@GRAD", "static_inputs@GRAD", "initial_states@GRAD",
                    "parameters@GRAD"), _DYNAMIC_ATTRS,
                   optional=("static_inputs", "initial_states", "parameters", "outputs",
                             "outputs@GRAD"), provider=_RECURRENT, lod="kernel")
register_signature("lookup_sparse_table", ("W", "Ids"), ("Out",),
                   {"is_test": False, "padding_idx": -1, "auto_grown_table": True})
register_signature("save", ("X",), (),
                   {"file_path": "", "overwrite": True, "save_as_fp16": False})
register_signature("checkpoint_notify", (), (),
                   {"epmap": [], "dir": "", "lookup_table": "", "trainer_id": 0})
