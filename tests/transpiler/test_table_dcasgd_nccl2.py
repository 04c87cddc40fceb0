"""Lookup tables (§6, §9.11), DC-ASGD (§5), NCCL2 (§7) and the summary."""

from __future__ import annotations

import pytest

import dask_fluid as fluid
from dask_fluid import layers
from dask_fluid.transpiler import DistributeTranspiler, summarize

from .models import A, B, config, fluid_test_net, op_types, table_net, transpile

PREFETCH = ["split_ids", "prefetch", "merge_ids"]


def test_local_sparse_table():
    # Fluid 1.8 (TestLocalLookupTable): the table is sliced and optimized on the pservers like
    # any parameter, but the step does not receive it: each lookup prefetches its rows
    main, startup = table_net(is_distributed=False)
    t = transpile(main, startup)
    trainer = t.get_trainer_program().global_block()
    ops = op_types(trainer)
    assert ops[-9:] == ["lookup_table_grad", "lookup_table_grad", "sum", "split_selected_rows",
                        "send", "send_barrier", "recv", "recv", "fetch_barrier"]
    assert "shared_w" not in [n for op in trainer.ops if op.type in ("recv", "concat")
                              for n in op.output("Out")]
    lookups = [op for op in trainer.ops if op.type == "lookup_table"]
    assert len(lookups) == 2
    for op in lookups:
        assert op.attrs["remote_prefetch"] is True
        assert op.attrs["epmap"] == [A, B]
        assert op.attrs["table_names"] == ["shared_w.block0", "shared_w.block1"]
        assert op.attrs["height_sections"] == [500, 500]
        assert op.attrs["trainer_id"] == 0
    # nor does the startup (Fluid 1.8's _get_trainer_startup_program skips sparse tables):
    # the table's init becomes a fake_init, and Adam's state and the learning rate are
    # the pservers' alone
    t.get_trainer_program()
    assert op_types(startup.global_block()) == ["fill_constant", "uniform_random", "recv",
                                                "recv", "fetch_barrier", "fake_init"]
    assert [op.output("Out") for op in startup.global_block().ops
            if op.type in ("recv", "fake_init")] == [["fc_b"], ["fc_w"], ["shared_w"]]
    split = next(op for op in main.global_block().ops if op.type == "split_selected_rows")
    assert split.attrs["height_sections"] == [500, 500]
    prog_a, _ = t.get_pserver_programs(A)
    assert len(prog_a.blocks) == 3
    for blk in prog_a.blocks[1:]:
        assert op_types(blk) == ["sum", "scale", "adam"]
    assert prog_a.block(0).ops[0].attrs["sparse_grad_to_param"] == [
        "shared_w@GRAD.block0:shared_w.block0"]


def _tied_net() -> tuple:
    """A sparse table that a matmul also reads whole (tied input and output embeddings)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [1000, 8], is_sparse=True,
                               param_attr=fluid.ParamAttr(name="tied_w"))
        logits = layers.matmul(emb, main.global_block().var("tied_w"), transpose_y=True)
        loss = layers.mean(layers.softmax_with_cross_entropy(
            logits, layers.data("y", [1], dtype="int64")))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup


def test_a_table_another_forward_op_reads_stays_received_whole():
    main, startup = _tied_net()
    t = transpile(main, startup)
    trainer = t.get_trainer_program().global_block()
    assert not any(op.attrs.get("epmap") for op in trainer.ops if op.type == "lookup_table")
    assert "tied_w" in [n for op in trainer.ops if op.type in ("recv", "concat")
                        for n in op.output("Out")]
    assert not any(pp.remote for pp in t.plan.params)
    # the first step's matmul reads the whole table before any step receives it: the startup
    # receives it too, and keeps its real init (Fluid 1.8 would fake_init it and read zeros)
    sops = startup.global_block().ops
    assert "fake_init" not in op_types(startup.global_block())
    assert "tied_w" in [n for op in sops if op.type in ("recv", "concat")
                        for n in op.output("Out")]


def test_geo_trainers_keep_their_tables():
    main, startup = table_net(is_distributed=False, optimizer=lambda: fluid.optimizer.SGD(0.1))
    t = transpile(main, startup, sync_mode=False, config=config(
        sync_mode=False, runtime_split_send_recv=True, geo_sgd_mode=True,
        geo_sgd_need_push_nums=2))
    lookups = [op for op in t.get_trainer_program().global_block().ops
               if op.type == "lookup_table"]
    assert lookups and not any(op.attrs.get("epmap") for op in lookups)


def test_a_dense_embedding_is_not_prefetched():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        emb = layers.embedding(layers.data("ids", [1], dtype="int64"), [100, 4])
        fluid.optimizer.SGD(0.1).minimize(layers.mean(emb))
    lookup = next(op for op in main.global_block().ops if op.type == "lookup_table")
    assert lookup.attrs["remote_prefetch"] is False
    t = transpile(main, startup)
    assert not any(pp.remote for pp in t.plan.params)


@pytest.mark.parametrize("sync", [True, False])
def test_distributed_table(sync):
    main, startup = table_net()
    t = transpile(main, startup, sync_mode=sync)
    trainer = t.get_trainer_program()
    ops = op_types(trainer.global_block())
    # one prefetch for both lookups, at the first one's place (Fluid's TestDistLookupTable)
    assert ops[:3] == PREFETCH and ops.count("prefetch") == 1
    merge = trainer.global_block().ops[2]
    assert merge.input("Ids") == [ids for ids, _ in t.plan.table.lookups]
    assert merge.output("Out") == [out for _, out in t.plan.table.lookups]
    tail = (["sum", "split_ids", "send", "send_barrier", "recv", "recv", "fetch_barrier"]
            if sync else ["sum", "split_ids", "send", "recv", "recv"])
    assert ops[-len(tail):] == tail
    assert "shared_w" not in [n for op in trainer.global_block().ops if op.type == "recv"
                              for n in op.output("Out")]
    prefetch = trainer.global_block().ops[1]
    assert prefetch.attrs["epmap"] == [A, B]
    assert prefetch.output("Out") == ["prefetch_compress_out_tmp_0",
                                      "prefetch_compress_out_tmp_1"]
    send = next(op for op in trainer.global_block().ops
                if op.type == "send" and op.input("X")[0].startswith("shared_w@GRAD"))
    suffix = ".trainer_0" if sync else ""
    assert send.input("X") == [f"shared_w@GRAD{suffix}.pserver_0",
                               f"shared_w@GRAD{suffix}.pserver_1"]
    assert op_types(startup.global_block()).count("fake_init") == 1
    # the optimizer gave the table its own sgd (Fluid's _process_distribute_lookuptable): no
    # Adam state for it anywhere, the trainer's startup included
    assert not [n for n in startup.global_block().vars if n.startswith("shared_w_")]
    prog_a, start_a = t.get_pserver_programs(A)
    assert len(prog_a.blocks) == 5
    assert op_types(prog_a.block(1)) == (["sum", "scale"] if sync else []) + ["adam"]
    assert op_types(prog_a.block(2)) == (["sum", "sgd"] if sync else ["sgd"])
    assert [op_types(prog_a.block(i)) for i in (3, 4)] == [["lookup_sparse_table"], ["save"]]
    table = prog_a.global_block().var("shared_w")
    assert table.shape == (500, 64) and table.type == "selected_rows"
    assert start_a.global_block().var("shared_w").shape == (500, 64)
    serv = prog_a.block(0).ops[0].attrs
    assert serv["prefetch_var_name_to_block_id"] == ["prefetch_compress_in_tmp_0:3"]
    assert serv["checkpint_block_id"] == 4
    assert serv["optimize_blocks"] == [1, 2]


def test_two_distributed_tables_are_rejected():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        embs = [layers.embedding(layers.data(f"ids{i}", [1], dtype="int64"), [100, 8],
                                 is_sparse=True, is_distributed=True) for i in range(2)]
        loss = layers.mean(layers.fc(layers.elementwise_add(*embs), 1))
        # as Fluid, minimize refuses it (the table gets its own sgd there)
        with pytest.raises(RuntimeError, match="only one distributed lookup table"):
            fluid.optimizer.SGD(0.1).minimize(loss)
    # a program built without the optimizer's check is refused by the transpiler
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        embs = [layers.embedding(layers.data(f"ids{i}", [1], dtype="int64"), [100, 8],
                                 is_sparse=True, is_distributed=i == 0) for i in range(2)]
        fluid.optimizer.SGD(0.1).minimize(layers.mean(layers.fc(layers.elementwise_add(*embs),
                                                                 1)))
    for op in main.global_block().ops:
        if op.type == "lookup_table":
            op.attrs["is_distributed"] = True
    with pytest.raises(RuntimeError, match="only one distributed lookup table"):
        transpile(main, startup)


def test_lookup_without_is_distributed_is_rejected():
    main, startup = table_net()
    main.global_block().ops[1].attrs["is_distributed"] = False
    with pytest.raises(RuntimeError, match="must set is_distributed=True"):
        transpile(main, startup)


def test_dc_asgd_program():
    main, startup = fluid_test_net()
    t = transpile(main, startup, config(enable_dc_asgd=True), sync_mode=False)
    prog_a, start_a = t.get_pserver_programs(A)
    assert op_types(prog_a.block(1)) == ["ref_by_trainer_id", "elementwise_sub",
                                         "elementwise_mul", "elementwise_mul",
                                         "elementwise_add", "sgd"]
    ref = prog_a.block(1).ops[0]
    assert ref.input("X") == ["fc_b.trainer_0_bak", "fc_b.trainer_1_bak"]
    assert ref.input("TrainerId") == ["@TRAINER_ID@"]
    assert prog_a.block(1).ops[-1].input("Grad") == prog_a.block(1).ops[-2].output("Out")
    assert prog_a.block(0).ops[0].attrs["dc_asgd"] is True
    assigns = [(op.input("X"), op.output("Out")) for op in start_a.global_block().ops
               if op.type == "assign"]
    assert assigns == [(["fc_b"], ["fc_b.trainer_0_bak"]), (["fc_b"], ["fc_b.trainer_1_bak"]),
                       (["fc_w.block1"], ["fc_w.block1.trainer_0_bak"]),
                       (["fc_w.block1"], ["fc_w.block1.trainer_1_bak"])]
    assert start_a.global_block().var("fc_w.block1.trainer_1_bak").shape == (500, 1000)


def _nccl2(trainer_id=0, trainers="127.0.0.1:6174,127.0.0.1:6175", current="127.0.0.1:6174",
           **fields):
    main, startup = fluid_test_net()
    before = op_types(main.global_block())
    t = DistributeTranspiler(config(mode="nccl2", **fields))
    t.transpile(trainer_id, program=main, trainers=trainers, startup_program=startup,
                current_endpoint=current)
    assert op_types(main.global_block()) == before
    return t, main, startup


def test_nccl2():
    t, main, startup = _nccl2(trainer_id=1, current="127.0.0.1:6175", nccl_comm_num=2)
    assert t.get_trainer_program() is main
    assert main._trainers_endpoints == ["127.0.0.1:6174", "127.0.0.1:6175"]
    assert (main._trainer_id, main._num_trainers, main._nccl_comm_num) == (1, 2, 2)
    gen = startup.global_block().ops[-1]
    assert gen.type == "gen_nccl_id"
    assert gen.output("NCCLID") == ["NCCLID", "NCCLID_1"]
    assert startup.global_block().var("NCCLID").type == "raw"
    assert gen.attrs["endpoint_list"] == ["127.0.0.1:6174"]
    with pytest.raises(RuntimeError, match="nccl2 mode: there are no pserver programs"):
        t.get_pserver_program("127.0.0.1:6174")


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"current": "127.0.0.1:9"}, ValueError, "current_endpoint '127.0.0.1:9' is not one of"),
    ({"trainer_id": 2}, ValueError, "trainer_id 2 is out of range"),
    ({"trainer_id": -1}, ValueError, "trainer_id -1 is out of range"),
    ({"trainers": 2}, TypeError, "in nccl2 mode, trainers must be a comma-separated str"),
    ({"trainers": "127.0.0.1:6174,127.0.0.1:6174"}, ValueError, "listed twice"),
    ({"trainers": "127.0.0.1:6174,localhost"}, ValueError, "'localhost' is not a valid"),
    ({"use_hierarchical_allreduce": True, "hierarchical_allreduce_inter_nranks": 2},
     ValueError, "inter_nranks=2 for 2 trainers"),
])
def test_nccl2_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        _nccl2(**kwargs)


def test_summary():
    main, startup = fluid_test_net()
    text = summarize(transpile(main, startup))
    assert text.splitlines() == [
        "2 pserver(s), 2 trainer(s), sync",
        f"{A}: fc_b [1000], fc_w.block1 [500, 1000]",
        "  block 1: sum, scale, sgd",
        "  block 2: sum, scale, sgd",
        f"{B}: fc_w.block0 [500, 1000]",
        "  block 1: sum, scale, sgd",
    ]


def test_programs_roundtrip_through_json():
    main, startup = table_net()
    t = transpile(main, startup)
    for prog in (t.get_trainer_program(), *t.get_pserver_programs(A)):
        assert fluid.Program.from_json(prog.to_json()) == prog


def test_ids_computed_after_the_first_lookup_are_rejected():
    # the one prefetch of all the table's lookups runs where the first lookup was: ids written
    # later would be prefetched before they exist
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        first = layers.embedding(ids, [100, 8], is_sparse=True, is_distributed=True,
                                 param_attr="table")
        later = layers.scale(ids, scale=2.0)
        second = layers.embedding(later, [100, 8], is_sparse=True, is_distributed=True,
                                  param_attr="table")
        fluid.optimizer.SGD(0.1).minimize(layers.mean(layers.elementwise_add(first, second)))
    with pytest.raises(ValueError, match="written by a scale op after the table's first lookup"):
        transpile(main, startup)


def test_a_model_whose_only_parameter_is_the_distributed_table():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        emb = layers.embedding(layers.data("ids", [1], dtype="int64"), [100, 8],
                               is_sparse=True, is_distributed=True, param_attr="table")
        ops = fluid.optimizer.Adam(0.1).minimize(layers.mean(emb))[0]
    assert [op.type for op in ops] == ["sgd"]
    t = transpile(main, startup)
    prog_a, _ = t.get_pserver_programs(A)
    assert op_types(prog_a.block(1)) == ["sum", "sgd"]
