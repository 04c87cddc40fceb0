"""The rest of Fluid 1.8's ``fluid.io``: parameter values, inference programs, saving to
memory, every argument of save/load_inference_model, and the distributed lookup table's
incremental and inference loading (``lookup_table_utils``) from Paddle's SelectedRows files."""

from __future__ import annotations

import io
import struct
import warnings

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import io as fio
from dask_fluid import layers, lookup_table_io

EPS = "127.0.0.1:6170,127.0.0.1:6171"


def _net(seed: int = 3):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = seed
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[4])
        y = layers.data(name="y", shape=[1])
        h = layers.fc(x, 3, param_attr=fluid.ParamAttr(name="w1"), act="relu")
        out = layers.fc(h, 1, param_attr=fluid.ParamAttr(name="w2"))
        loss = layers.mean(layers.square_error_cost(out, y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup, out, loss


def _ready(scope):
    main, startup, out, loss = _net()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(scope):
        exe.run(startup)
    return main, startup, out, loss, exe


X = np.arange(8, dtype=np.float32).reshape(2, 4) / 8


def test_is_belong_to_optimizer_is_the_persistable_non_parameters():
    main, _, _, _ = _net()
    block = main.global_block()
    assert not fio.is_belong_to_optimizer(block.var("w1"))
    assert not fio.is_belong_to_optimizer(block.var("x"))
    opt = [v.name for v in main.list_vars() if fio.is_belong_to_optimizer(v)]
    assert opt and all("moment" in n or "beta" in n or "learning_rate" in n for n in opt)
    assert sorted(opt) == sorted(v.name for v in main.list_vars()
                                 if v.persistable and not fio.is_parameter(v))


def test_get_parameter_value_and_by_name():
    scope = fluid.Scope()
    main, _, _, _, exe = _ready(scope)
    with fluid.scope_guard(scope):
        value = fio.get_parameter_value(main.global_block().var("w1"), exe)
        np.testing.assert_array_equal(value, np.array(scope.vars["w1"]))
        assert isinstance(value, np.ndarray) and value.shape == (4, 3)
        np.testing.assert_array_equal(fio.get_parameter_value_by_name("w2", exe, main),
                                      np.array(scope.vars["w2"]))
        with fluid.program_guard(main):
            np.testing.assert_array_equal(fio.get_parameter_value_by_name("w2", exe),
                                          np.array(scope.vars["w2"]))
        with pytest.raises(TypeError, match="needs a Parameter"):
            fio.get_parameter_value(main.global_block().var("x"), exe)
        with pytest.raises(TypeError, match="needs a Parameter"):
            fio.get_parameter_value_by_name("x", exe, main)
        with pytest.raises(ValueError, match="not in this block"):
            fio.get_parameter_value_by_name("nope", exe, main)
        with pytest.raises(TypeError, match="needs a name"):
            fio.get_parameter_value_by_name(3, exe, main)
    with fluid.scope_guard(fluid.Scope()), pytest.raises(KeyError, match="startup"):
        fio.get_parameter_value(main.global_block().var("w1"), exe)


def test_get_inference_program_runs_the_forward_only():
    scope = fluid.Scope()
    main, _, out, _, exe = _ready(scope)
    infer = fio.get_inference_program(out, main)
    types = [op.type for op in infer.global_block().ops]
    assert "adam" not in types and not any(t.endswith("_grad") for t in types)
    assert "square_error_cost" not in types and "mean" not in types
    with fluid.scope_guard(scope):
        before = np.array(scope.vars["w1"])
        got, = exe.run(infer, feed={"x": X}, fetch_list=[out.name])
        want, = exe.run(main.clone(for_test=True), feed={"x": X, "y": X[:, :1]},
                        fetch_list=[out.name])
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_array_equal(np.array(scope.vars["w1"]), before)  # nothing trained
    assert [op.type for op in fio.get_inference_program([out], main).global_block().ops] \
        == types


def test_feed_and_fetch_ops_are_refused():
    main, _, out, _ = _net()
    fio.prepend_feed_ops(main, [])  # Fluid adds nothing for no names
    with pytest.raises(NotImplementedError, match="prepend_feed_ops .*no 'feed' op"):
        fio.prepend_feed_ops(main, ["x"])
    with pytest.raises(NotImplementedError, match="append_fetch_ops .*no 'fetch' op"):
        fio.append_fetch_ops(main, [out.name])


def test_save_to_memory_and_load_from_memory():
    scope = fluid.Scope()
    main, startup, _, _, exe = _ready(scope)
    with fluid.scope_guard(scope):
        blob = fio.save_params(exe, None, main)
        assert isinstance(blob, bytes)
        both = fio.save_persistables(exe, None, main)
        assert len(both) > len(blob)
        with pytest.raises(ValueError, match="takes no filename"):
            fio.save_vars(exe, None, main, predicate=fio.is_parameter, filename="f")
    other = fluid.Scope()
    with fluid.scope_guard(other):
        exe.run(startup.clone())
        other.set("w1", np.zeros((4, 3), np.float32))
        fio.load_params(exe, None, main, filename=blob)
        np.testing.assert_array_equal(np.array(other.vars["w1"]), np.array(scope.vars["w1"]))
        with pytest.raises(ValueError, match="cannot be None at the same time"):
            fio.load_params(exe, None, main)
        with pytest.raises(TypeError, match="must be the bytes"):
            fio.load_params(exe, None, main, filename="params")
        with pytest.raises(ValueError, match="more tensors"):
            fio.load_params(exe, None, main, filename=both)


def test_inference_model_file_names_are_base_names_and_memory_loads(tmp_path):
    scope = fluid.Scope()
    main, _, out, _, exe = _ready(scope)
    with fluid.scope_guard(scope):
        want, = exe.run(main.clone(for_test=True), feed={"x": X, "y": X[:, :1]},
                        fetch_list=[out.name])
        names = fio.save_inference_model(str(tmp_path), ["x"], [out], exe, main,
                                         model_filename="sub/dir/model",
                                         params_filename="/elsewhere/params")
    assert names == [out.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "params"]
    with fluid.scope_guard(fluid.Scope()):
        prog, feeds, fetches = fio.load_inference_model(str(tmp_path), exe, "x/model",
                                                        "y/params")
        got, = exe.run(prog, feed={feeds[0]: X}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    model, params = (tmp_path / "model").read_bytes(), (tmp_path / "params").read_bytes()
    with fluid.scope_guard(fluid.Scope()):
        prog, feeds, fetches = fio.load_inference_model(None, exe, model, params)
        got, = exe.run(prog, feed={feeds[0]: X}, fetch_list=fetches)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="cannot be None when the directory path is None"):
        fio.load_inference_model(None, exe, model)
    with pytest.raises(ValueError, match="no directory named"):
        fio.load_inference_model(str(tmp_path / "missing"), exe)
    with pytest.raises(ValueError, match="not a dask_fluid inference model"):
        fio.load_inference_model(None, exe, b"\x0a\x02pb", params)


def test_inference_model_checks_and_warnings(tmp_path):
    scope = fluid.Scope()
    main, _, out, _, exe = _ready(scope)
    with fluid.scope_guard(scope):
        with pytest.raises(ValueError, match="'feed_var_names' should be a list of str"):
            fio.save_inference_model(str(tmp_path), [3], [out], exe, main)
        with pytest.raises(ValueError, match="'target_vars' should be a list of Variable"):
            fio.save_inference_model(str(tmp_path), ["x"], [out.name], exe, main)
        with pytest.raises(ValueError, match="'target_vars' should be a list of Variable"):
            fio.save_inference_model(str(tmp_path), ["x"], [], exe, main)
        with pytest.raises(TypeError, match="Program type or None"):
            fio.save_inference_model(str(tmp_path), ["x"], [out], exe, "main")
        with pytest.warns(UserWarning, match="program_only"):
            fio.save_inference_model(str(tmp_path / "p"), ["x"], [out], exe, main,
                                     program_only=True)
        assert [p.name for p in (tmp_path / "p").iterdir()] == ["__model__"]
        compiled = fluid.CompiledProgram(main)
        with pytest.warns(UserWarning, match="CompiledProgram"):
            fio.save_inference_model(str(tmp_path / "c"), ["x"], [out], exe, compiled)
        assert (tmp_path / "c" / "w1").exists()


def test_auc_programs_warn(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[2])
        label = layers.data(name="label", shape=[1], dtype="int64")
        pred = layers.softmax(layers.fc(x, 2))
        layers.auc(pred, label)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        with pytest.warns(UserWarning, match="auc states to zeros"):
            fio.save_inference_model(str(tmp_path), ["x"], [pred], exe, main)


def test_pserver_endpoints_replace_every_epmap(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [10, 4], is_sparse=True, is_distributed=True,
                               param_attr="table")
        out = layers.fc(emb, 2, param_attr=fluid.ParamAttr(name="fw"))
        fluid.optimizer.SGD(0.1).minimize(layers.mean(out))
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=EPS, trainers=1, startup_program=startup)
    trainer = t.get_trainer_program(wait_port=False)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        scope.set("fw", np.ones((4, 2), np.float32))
        scope.set("fc_0.b_0", np.zeros(2, np.float32))
        fio.save_inference_model(str(tmp_path), ["ids"], [out], exe, trainer)
    new = ["10.0.0.1:1", "10.0.0.2:2"]
    with fluid.scope_guard(fluid.Scope()):
        prog, _, _ = fio.load_inference_model(str(tmp_path), exe, pserver_endpoints=new)
        plain, _, _ = fio.load_inference_model(str(tmp_path), exe)
    epmaps = [op.attr("epmap") for op in prog.global_block().ops if op.has_attr("epmap")]
    assert epmaps and all(e == new for e in epmaps)
    assert all(op.attr("epmap") == EPS.split(",")
               for op in plain.global_block().ops if op.has_attr("epmap"))


# -- the distributed lookup table ----------------------------------------------------------------

def _paddle_selected_rows(rows, value: np.ndarray) -> bytes:
    """Paddle 1.8's selected_rows.cc SerializeToStream, by hand: uint32 version, uint64 row
    count, int64 rows, int64 height, then TensorToStream (uint32 version, int32 desc size,
    the TensorDesc protobuf, the data); float32 is data_type 5."""
    desc = b"\x08\x05" + b"".join(b"\x10" + bytes([d]) for d in value.shape)
    return (struct.pack("<IQ", 0, len(rows)) + struct.pack(f"<{len(rows)}q", *rows)
            + struct.pack("<q", 1000) + struct.pack("<Ii", 0, len(desc)) + desc
            + value.astype("<f4").tobytes())


def test_selected_rows_files_are_paddles(tmp_path):
    value = np.arange(6, dtype=np.float32).reshape(3, 2)
    raw = _paddle_selected_rows([5, 1, 9], value)
    buf = io.BytesIO()
    fio.write_selected_rows(buf, [5, 1, 9], value, 1000)
    assert buf.getvalue() == raw
    (tmp_path / "t").write_bytes(raw)
    rows, back, height = lookup_table_io._read_selected_rows(str(tmp_path / "t"))
    assert rows.tolist() == [5, 1, 9] and height == 1000
    np.testing.assert_array_equal(back, value)
    (tmp_path / "bad").write_bytes(raw[:30])
    with pytest.raises(ValueError, match="SelectedRows"):
        lookup_table_io._read_selected_rows(str(tmp_path / "bad"))


def _table_job():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [10, 4], is_sparse=True, is_distributed=True,
                               param_attr="table")
        out = layers.fc(emb, 2, param_attr=fluid.ParamAttr(name="fw"))
        fluid.optimizer.SGD(0.1).minimize(layers.mean(out))
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=EPS, trainers=1, startup_program=startup)
    return t, main


def test_load_persistables_for_increment_places_the_shard(tmp_path):
    t, _ = _table_job()
    trainer = t.get_trainer_program(wait_port=False)
    saved = fluid.Scope()
    rng = np.random.default_rng(0)
    with fluid.scope_guard(saved):
        for p in trainer.all_parameters():
            if p.name != "table":
                saved.set(p.name, rng.standard_normal(p.shape).astype(np.float32))
        fluid.io.save_persistables(None, str(tmp_path), trainer)
    ep = EPS.split(",")[1]  # pserver 1 of 2: ids 1, 3, 5, 7, 9 at rows 0..4
    pserver = t.get_pserver_program(ep)
    value = rng.standard_normal((3, 4)).astype(np.float32)
    (tmp_path / "table_part").write_bytes(_paddle_selected_rows([7, 1, 3], value))
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        fio.load_persistables_for_increment(str(tmp_path), None, pserver, "table",
                                            str(tmp_path / "table_part"))
    shard = np.array(scope.vars["table"])
    assert shard.shape == (5, 4)
    np.testing.assert_array_equal(shard[[3, 0, 1]], value)
    np.testing.assert_array_equal(shard[[2, 4]], 0)
    dense = [v for v in pserver._parameters_on_pservers.get_distributed_vars_by_ep(ep)]
    for part in dense:  # the dense blocks came from the trainer's files too
        assert part.slice.name in scope.vars
    (tmp_path / "foreign").write_bytes(_paddle_selected_rows([2], value[:1]))
    with pytest.raises(ValueError, match="does not serve"):
        fio.load_persistables_for_increment(str(tmp_path), None, pserver, "table",
                                            str(tmp_path / "foreign"))
    with pytest.raises(ValueError, match="serving the distributed lookup table 'other'"):
        fio.load_persistables_for_increment(str(tmp_path), None, pserver, "other",
                                            str(tmp_path / "table_part"))
    with pytest.raises(ValueError, match="no file named"):
        fio.load_persistables_for_increment(str(tmp_path), None, pserver, "table",
                                            str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="no directory named"):
        fio.load_persistables_for_increment(str(tmp_path / "no"), None, pserver, "table",
                                            str(tmp_path / "table_part"))
    with pytest.raises(ValueError, match="needs a pserver program"):
        fio.load_persistables_for_increment(str(tmp_path), None, fluid.Program(), "table",
                                            str(tmp_path / "table_part"))


def _untranspiled():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = layers.data("ids", [1], dtype="int64")
        emb = layers.embedding(ids, [10, 4], is_sparse=True, is_distributed=True,
                               param_attr="table")
        out = layers.fc(emb, 2, param_attr=fluid.ParamAttr(name="fw"))
        fluid.optimizer.SGD(0.1).minimize(layers.mean(out))
    return main, startup


def test_load_persistables_for_inference_merges_the_parts(tmp_path):
    main, startup = _untranspiled()
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.default_rng(1)
    fw = rng.standard_normal((4, 2)).astype(np.float32)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        scope.set("fw", fw)
        fio.save_persistables(exe, str(tmp_path), main)
    (tmp_path / "table").unlink()  # the table lives on the pservers, in __lookup_table__
    part0 = rng.standard_normal((2, 4)).astype(np.float32)
    part1 = rng.standard_normal((3, 4)).astype(np.float32)
    (tmp_path / "__lookup_table__").mkdir()
    (tmp_path / "__lookup_table__" / "table_0").write_bytes(_paddle_selected_rows([0, 4], part0))
    (tmp_path / "__lookup_table__" / "table_1").write_bytes(
        _paddle_selected_rows([1, 9, 3], part1))
    out = fluid.Scope()
    with fluid.scope_guard(out):
        prog = fio.load_persistables_for_inference(str(tmp_path), exe, main, "table")
        assert prog is main
        table = np.array(out.vars["table"])
        assert table.shape == (10, 4)
        np.testing.assert_array_equal(table[[0, 4, 1, 9, 3]], np.concatenate([part0, part1]))
        np.testing.assert_array_equal(table[[2, 5, 6, 7, 8]], 0)
        np.testing.assert_array_equal(np.array(out.vars["fw"]), fw)
        # the local program looks the merged table up
        got, = exe.run(main.clone(for_test=True), feed={"ids": np.array([[9], [0]], np.int64)},
                       fetch_list=[main.global_block().ops[1].output_arg_names[0]])
        np.testing.assert_allclose(got, table[[9, 0]] @ fw, rtol=1e-5)
    rows, merged, _ = lookup_table_io._read_selected_rows(
        str(tmp_path / "__lookup_table__" / "table"))
    assert rows.tolist() == [0, 4, 1, 9, 3]
    np.testing.assert_array_equal(merged, np.concatenate([part0, part1]))
    # a second run skips the merged file (Fluid would count it as a part)
    with fluid.scope_guard(fluid.Scope()):
        fio.load_persistables_for_inference(str(tmp_path), exe, main, "table")
    (tmp_path / "__lookup_table__" / "table_2").write_bytes(_paddle_selected_rows([4], part0[:1]))
    with fluid.scope_guard(fluid.Scope()), pytest.raises(ValueError, match="an id twice"):
        fio.load_persistables_for_inference(str(tmp_path), exe, main, "table")
    for i in range(3):
        (tmp_path / "__lookup_table__" / f"table_{i}").unlink()
    with fluid.scope_guard(fluid.Scope()), pytest.raises(ValueError,
                                                         match="holds no part of table"):
        fio.load_persistables_for_inference(str(tmp_path), exe, main, "table")
    with pytest.raises(ValueError, match="instance of fluid.Program"):
        fio.load_persistables_for_inference(str(tmp_path), exe, "main", "table")


def test_load_persistables_for_inference_reads_the_model_file(tmp_path):
    main, startup = _untranspiled()
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    out = main.global_block().ops[1].output_arg_names[0]
    with fluid.scope_guard(scope):
        exe.run(startup)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fio.save_inference_model(str(tmp_path), ["ids"], [main.global_block().var(out)],
                                     exe, main, program_only=True)
        fio.save_persistables(exe, str(tmp_path), main)
    (tmp_path / "__lookup_table__").mkdir()
    (tmp_path / "__lookup_table__" / "table_0").write_bytes(
        _paddle_selected_rows([2], np.ones((1, 4), np.float32)))
    out_scope = fluid.Scope()
    with fluid.scope_guard(out_scope):
        prog = fio.load_persistables_for_inference(str(tmp_path), exe, None, "table")
    assert isinstance(prog, fluid.Program)
    np.testing.assert_array_equal(np.array(out_scope.vars["table"])[2], 1)
    np.testing.assert_array_equal(np.array(out_scope.vars["fw"]), np.array(scope.vars["fw"]))
    assert any(op.type == "lookup_table" for op in prog.global_block().ops)


def test_saving_a_model_without_parameters_and_feeds_it_does_not_need(tmp_path):
    # Fluid 1.8: save_vars of nothing warns and writes nothing; a feed the targets do not
    # need is refused (its feed op cannot find the pruned variable); the wrong kind of
    # main_program is a TypeError
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data(name="x", shape=[-1, 1], dtype="float32", append_batch_size=False)
        layers.data(name="y", shape=[-1, 1], dtype="float32", append_batch_size=False)
        out = x + 1
    exe = fluid.Executor()
    exe.run(startup, scope=fluid.Scope())
    with pytest.raises(ValueError, match=r"the feeds \['y'\] are not needed"):
        fio.save_inference_model(str(tmp_path / "m0"), ["x", "y"], [out], exe,
                                 main_program=main)
    with pytest.warns(UserWarning, match="no variable in your model"):
        fio.save_inference_model(str(tmp_path / "m"), ["x"], [out], exe, main_program=main,
                                 model_filename="model", params_filename="params")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["model"]
    program, feeds, fetches = fio.load_inference_model(str(tmp_path / "m"), exe,
                                                       model_filename="model",
                                                       params_filename="params")
    got, = exe.run(program, feed={"x": np.ones((2, 1), "float32")}, fetch_list=fetches)
    np.testing.assert_array_equal(got, np.full((2, 1), 2.0, "float32"))
    for call in (fio.save_vars, fio.load_vars):
        with pytest.raises(TypeError, match="Program type or None"):
            call(exe, str(tmp_path / "v"), main_program="program")


def test_fluid_load_takes_a_suffix_and_the_older_apis_files(tmp_path):
    # Fluid 1.8's fluid.load: model_path may end in .pdparams/.pdopt/.pdmodel; without a
    # .pdparams it reads what save_persistables / save_vars wrote (a directory, or one file
    # with var_list)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[None, 3], dtype="float32")
        layers.fc(x, 2, param_attr="w", bias_attr="b")
    with fluid.scope_guard(fluid.Scope()):
        _load_each_way(main, startup, tmp_path)


def _load_each_way(main, startup, tmp_path):
    exe = fluid.Executor()
    exe.run(startup)
    scope = fluid.global_scope()
    saved = {n: np.array(scope.get(n)) for n in ("w", "b")}
    fluid.save(main, str(tmp_path / "m"))
    fio.save_persistables(exe, str(tmp_path / "dir"), main)
    fio.save_persistables(exe, str(tmp_path / "one"), main, filename="single")
    persistables = fio.get_program_persistable_vars(main)
    loads = [lambda: fluid.load(main, str(tmp_path / "m.pdparams"), exe),
             lambda: fluid.load(main, str(tmp_path / "m.pdopt"), exe),
             lambda: fluid.load(main, str(tmp_path / "dir"), exe),
             lambda: fluid.load(main, str(tmp_path / "one" / "single"), exe, persistables)]
    for load in loads:
        for n in saved:
            scope.set(n, np.zeros_like(saved[n]))
        load()
        for n, value in saved.items():
            np.testing.assert_array_equal(scope.get(n), value)
    with pytest.raises(ValueError, match="var_list is required"):
        fluid.load(main, str(tmp_path / "one" / "single"), exe)
    with pytest.raises(ValueError, match="executor is required"):
        fluid.load(main, str(tmp_path / "dir"))
    with pytest.raises(FileNotFoundError, match="nothing|no .*pdparams"):
        fluid.load(main, str(tmp_path / "absent"), exe)
