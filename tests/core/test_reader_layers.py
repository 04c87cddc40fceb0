"""Fluid 1.8's reader layers: py_reader, create_py_reader_by_data, read_file, double_buffer,
load — the batches a program sees, the end of a pass, the errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dask_fluid as fluid
import dask_fluid.ops.reader_ops  # noqa: F401  (until dask_fluid.ops imports it)
from dask_fluid.io import write_tensor
from dask_fluid.py_reader import DEFAULT_CAPACITY, DOUBLE_BUFFER, EOFException

RNG = np.random.default_rng(0)
BATCHES = [(RNG.standard_normal((4, 3)).astype("float32"),
            RNG.standard_normal((4, 1)).astype("float32")) for _ in range(3)]


def _net(use_double_buffer=True, name=None):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=4, shapes=[(-1, 3), (-1, 1)],
                                        dtypes=["float32", "float32"], name=name,
                                        use_double_buffer=use_double_buffer)
        x, y = fluid.layers.read_file(reader)
        pred = fluid.layers.fc(x, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, reader, x, y, loss


def _pass(exe, prog, scope, reader, fetch):
    reader.start()
    out = []
    with pytest.raises(EOFException):
        while True:
            out.append(exe.run(prog, fetch_list=fetch, scope=scope))
    reader.reset()
    return out


def test_program_structure_and_names():
    main, _, reader, x, y, _ = _net(name="train")
    assert reader.name == "train_double_buffer"
    read = [op for op in main.global_block().ops if op.type == "read"]
    assert len(read) == 1 and read[0].input("Reader") == ["train_double_buffer"]
    assert read[0].output("Out") == [x.name, y.name]
    assert x.shape == (-1, 3) and x.is_data and x.stop_gradient
    _, _, unnamed, *_ = _net(use_double_buffer=False)
    assert unnamed.name.startswith("create_py_reader_")


def test_training_loop_until_eof_matches_feeding_by_hand():
    main, startup, reader, x, y, loss = _net()
    reader.decorate_tensor_provider(lambda: iter(BATCHES))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = _pass(exe, main, scope, reader, [loss, x])
    assert len(got) == 3
    for (_, xv), (bx, _) in zip(got, BATCHES, strict=True):
        np.testing.assert_array_equal(xv, bx)
    # the same program, fresh parameters, fed by hand: the same losses
    scope2 = fluid.Scope()
    exe.run(startup, scope=scope2)
    by_hand = [exe.run(main, feed={x.name: bx, y.name: by}, fetch_list=[loss], scope=scope2)
               for bx, by in BATCHES]
    for (lv, _), (hv,) in zip(got, by_hand, strict=True):
        np.testing.assert_allclose(lv, hv, rtol=1e-6)
    # a second pass gives the same batches, in order
    again = _pass(exe, main, scope, reader, [x, y])
    for (xv, yv), (bx, by) in zip(again, BATCHES, strict=True):
        np.testing.assert_array_equal(xv, bx)
        np.testing.assert_array_equal(yv, by)


def test_compiled_program_is_fed_by_the_reader():
    main, startup, reader, x, _, loss = _net()
    reader.decorate_batch_generator(lambda: iter(BATCHES))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    got = _pass(exe, compiled, scope, reader, [x])
    assert len(got) == 3
    np.testing.assert_array_equal(np.asarray(got[2][0]), BATCHES[2][0])


@pytest.mark.parametrize("batches, drop_last", [(6, True), (5, True), (5, False)])
def test_each_place_reads_its_own_batch_as_fluids_read_op(batches, drop_last):
    # Fluid 1.8: over N places a step takes N batches (the read op runs on every device);
    # the last ones, fewer than N, are dropped (drop_last=True)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(shape=[None, 5], dtype="float32", name="input")
        loader = fluid.io.DataLoader.from_generator(capacity=8, feed_list=[x], iterable=False,
                                                    drop_last=drop_last)
        loss = fluid.layers.reduce_mean(fluid.layers.fc(x, size=3))
    loader.set_batch_generator(
        lambda: ((np.full([4, 5], i, "float32"),) for i in range(batches)))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, places=fluid.cpu_places(2))
    loader.start()
    got = []
    try:
        with pytest.raises(NotImplementedError if not drop_last else EOFException):
            while True:
                (v,) = exe.run(compiled, fetch_list=[x], scope=scope)
                got.append((v.shape, sorted(set(v[:, 0].tolist()))))
    finally:
        loader.reset()
    assert got == [((8, 5), [0.0, 1.0]), ((8, 5), [2.0, 3.0]),
                   ((8, 5), [4.0, 5.0])][:batches // 2]


def test_clone_for_test_is_fed_by_hand_not_by_the_reader():
    main, startup, reader, x, y, loss = _net()
    test = main.clone(for_test=True)
    assert [op.type for op in test.global_block().ops][0] == "read"
    assert "_py_readers" not in test.__dict__  # Fluid: Program.clone() cannot clone py_reader
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    bx, by = BATCHES[0]
    (lv,) = exe.run(test, feed={x.name: bx, y.name: by}, fetch_list=[loss], scope=scope)
    (again,) = exe.run(test, feed={x.name: bx, y.name: by}, fetch_list=[loss], scope=scope)
    np.testing.assert_array_equal(lv, again)  # no optimizer step in the test clone


def test_lod_levels_with_decorate_paddle_reader_give_lod_tensors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=2, shapes=[(-1, 1), (-1, 1)],
                                        dtypes=["int64", "float32"], lod_levels=[1, 0])
        ids, label = fluid.layers.read_file(reader)
        pooled = fluid.layers.sequence_pool(fluid.layers.embedding(ids, size=[10, 2]), "sum")
    samples = [([1, 2, 3], [0.5]), ([4], [1.5]), ([5, 6], [2.5]), ([7, 8], [3.5])]
    reader.decorate_paddle_reader(lambda: (samples[i:i + 2] for i in (0, 2)))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    reader.start()
    out, lab = exe.run(main, fetch_list=[pooled, label], scope=scope, return_numpy=False)
    assert [list(lv) for lv in scope.lods[ids.name]] == [[0, 3, 4]]
    assert np.asarray(out).shape == (2, 2)
    np.testing.assert_array_equal(np.asarray(lab), [[0.5], [1.5]])
    exe.run(main, fetch_list=[pooled], scope=scope)
    assert [list(lv) for lv in scope.lods[ids.name]] == [[0, 2, 4]]
    with pytest.raises(EOFException):
        exe.run(main, fetch_list=[pooled], scope=scope)
    reader.reset()


def test_create_py_reader_by_data_copies_the_feed_vars():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        img = fluid.layers.data(name="img", shape=[3], dtype="float32")
        lab = fluid.layers.data(name="lab", shape=[1], dtype="float32")
        reader = fluid.layers.create_py_reader_by_data(capacity=2, feed_list=[img, lab])
        x, y = fluid.layers.read_file(reader)
        total = fluid.layers.reduce_sum(x)
    assert (x.dtype, y.shape) == ("float32", lab.shape)
    assert x.name != img.name
    reader.decorate_batch_generator(lambda: iter(BATCHES[:2]))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = _pass(exe, main, scope, reader, [total])
    np.testing.assert_allclose([float(np.asarray(g[0]).sum()) for g in got],
                               [b[0].sum() for b in BATCHES[:2]], rtol=1e-5)
    with pytest.raises(TypeError, match="feed_list"):
        fluid.layers.create_py_reader_by_data(capacity=2, feed_list=img)


def test_single_slot_read_file_returns_a_variable():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=1, shapes=[[-1, 2]], dtypes=["float32"])
        x = fluid.layers.read_file(reader)
        assert isinstance(x, fluid.framework.Variable)
        with pytest.raises(NotImplementedError, match="second time"):
            fluid.layers.read_file(reader)


def test_errors():
    main, startup, reader, x, _, loss = _net()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    with pytest.raises(RuntimeError, match="not started"):
        exe.run(main, fetch_list=[loss], scope=scope)
    with pytest.raises(RuntimeError, match="no data source"):
        reader.start()
    with pytest.raises(ValueError, match="dtypes"):
        fluid.layers.py_reader(capacity=2, shapes=[(-1, 3), (-1, 1)], dtypes=["float32"])
    with pytest.raises(ValueError, match="lod_levels"):
        fluid.layers.py_reader(capacity=2, shapes=[(-1, 3)], dtypes=["float32"],
                               lod_levels=[0, 1])
    with pytest.raises(ValueError, match="shapes"):
        fluid.layers.py_reader(capacity=2, shapes=[], dtypes=[])
    with pytest.raises(ValueError, match="capacity"):
        fluid.layers.py_reader(capacity=0, shapes=[(-1, 3)], dtypes=["float32"])
    with pytest.raises(TypeError, match="reader"):
        fluid.layers.read_file(x)
    with pytest.raises(ValueError, match="program"):
        fluid.layers.read_file(reader)  # default main program is not the reader's
    reader.decorate_batch_generator(lambda: iter([(BATCHES[0][0],)]))
    reader.start()
    with pytest.raises(ValueError, match="fields"):
        exe.run(main, fetch_list=[loss], scope=scope)
    reader.reset()


def test_double_buffer_reads_one_more_batch_ahead():
    _, _, plain, *_ = _net(use_double_buffer=False)
    assert plain._ahead == 4
    assert fluid.layers.double_buffer(plain) is plain
    assert plain._ahead == 4 + DOUBLE_BUFFER and plain.name.startswith("double_buffer_")
    _, _, buffered, *_ = _net()
    assert buffered._ahead == 4 + DOUBLE_BUFFER
    with pytest.raises(NotImplementedError, match="place"):
        fluid.layers.double_buffer(plain, place=fluid.CUDAPlace(0))
    with pytest.raises(TypeError, match="reader"):
        fluid.layers.double_buffer(object())
    assert DEFAULT_CAPACITY > 0


def test_double_buffer_reader_runs_a_pass():
    main, startup, reader, x, *_ = _net(use_double_buffer=False)
    fluid.layers.double_buffer(reader, place=fluid.CPUPlace())
    reader.decorate_tensor_provider(lambda: iter(BATCHES))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    got = _pass(exe, main, scope, reader, [x])
    for (xv,), (bx, _) in zip(got, BATCHES, strict=True):
        np.testing.assert_array_equal(xv, bx)


def test_load_reads_a_file_of_save_vars(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        w = fluid.layers.create_parameter(shape=[2, 3], dtype="float32", name="w")
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    value = np.arange(6, dtype="float32").reshape(2, 3)
    scope.vars["w"] = value
    with fluid.scope_guard(scope):
        fluid.io.save_vars(exe, str(tmp_path), main, vars=[w])
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = prog.global_block().create_var(name="w_loaded", shape=[2, 3], dtype="float32",
                                             persistable=True)
        fluid.layers.load(out, os.path.join(str(tmp_path), "w"))
        half = prog.global_block().create_var(name="w_half", shape=[2, 3], dtype="float16",
                                              persistable=True)
        fluid.layers.load(half, os.path.join(str(tmp_path), "w"), load_as_fp16=True)
    op = prog.global_block().ops[0]
    assert op.type == "load" and op.attrs["file_path"].endswith("w")
    s2 = fluid.Scope()
    got, got_half = exe.run(prog, fetch_list=[out, half], scope=s2)
    np.testing.assert_array_equal(got, value)
    assert got_half.dtype == np.float16
    np.testing.assert_array_equal(got_half, value.astype("float16"))


def test_load_keeps_the_lod_and_reports_a_missing_file(tmp_path):
    path = str(tmp_path / "t")
    with open(path, "wb") as f:
        write_tensor(f, np.arange(5, dtype="int64").reshape(5, 1), [[0, 2, 5]])
    prog = fluid.Program()
    with fluid.program_guard(prog, fluid.Program()):
        out = prog.global_block().create_var(name="t", shape=[-1, 1], dtype="int64",
                                             lod_level=1)
        fluid.layers.load(out, path)
        missing = prog.global_block().create_var(name="m", shape=[1], dtype="float32")
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(prog, fetch_list=[out], scope=scope, return_numpy=False)
    assert [list(lv) for lv in scope.lods["t"]] == [[0, 2, 5]]
    bad = fluid.Program()
    with fluid.program_guard(bad, fluid.Program()):
        m = bad.global_block().create_var(name="m", shape=[1], dtype="float32")
        fluid.layers.load(m, str(tmp_path / "nope"))
    with pytest.raises(Exception, match="Cannot open"):
        exe.run(bad, scope=scope)
    with pytest.raises(TypeError, match="load_as_fp16"):
        fluid.layers.load(missing, path, load_as_fp16=1)


def test_save_inference_model_prunes_the_read_op(tmp_path):
    main, startup, reader, x, _, loss = _net()
    # fc's mul, after the read op (a Variable: Fluid 1.8 refuses names with export_for_deployment)
    pred = main.global_block().var(main.global_block().ops[1].output("Out")[0])
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    with fluid.scope_guard(scope):
        fluid.io.save_inference_model(str(tmp_path), [x.name], [pred], exe, main_program=main)
        prog, feeds, fetches = fluid.io.load_inference_model(str(tmp_path), exe)
    assert "read" not in [op.type for op in prog.global_block().ops]  # Fluid's prune_read_op
    bx = BATCHES[0][0]
    with fluid.scope_guard(scope):
        (out,) = exe.run(prog, feed={feeds[0]: bx}, fetch_list=fetches)
    assert np.asarray(out).shape[0] == 4


def _push_net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        reader = fluid.layers.py_reader(capacity=3, shapes=[(-1, 3, 2, 1), (-1, 1)],
                                        dtypes=["float64", "int64"], lod_levels=[0, 0])
        out = fluid.layers.read_file(reader)
    return main, reader, out


def _push_inputs(n=6):
    rng = np.random.default_rng(1)
    inputs = []
    for _ in range(n):
        size = int(rng.integers(2, 5))
        label = fluid.LoDTensor()
        label.set(rng.integers(0, 9, (size, 1)), fluid.CPUPlace())
        inputs.append([rng.uniform(0, 1000, (size, 3, 2, 1)), label])
    return inputs


def test_queue_push_pop_as_fluids_test():
    """test_py_reader_push_pop.py: push a batch, run; from a thread too; close → EOF."""
    main, reader, out = _push_net()
    try:
        _push_pop(main, reader, out)
    finally:
        reader.reset()  # no reader thread left for the next tests


def _push_pop(main, reader, out):
    import threading

    exe, scope = fluid.Executor(), fluid.Scope()
    feed_queue = reader.queue
    assert feed_queue.capacity() == 3 and not feed_queue.is_closed()
    inputs = _push_inputs()
    got = []
    for batch in inputs[:3]:
        assert feed_queue.push(batch)
        got.append(exe.run(main, fetch_list=list(out), scope=scope))
    thread = threading.Thread(target=lambda: [feed_queue.push(b) for b in inputs[3:]])
    thread.start()
    for _ in inputs[3:]:
        got.append(exe.run(main, fetch_list=list(out), scope=scope))
    thread.join()
    feed_queue.close()
    assert not feed_queue.push(inputs[0])  # Fluid: False once closed
    with pytest.raises(EOFException):
        exe.run(main, fetch_list=list(out), scope=scope)
    for batch, values in zip(inputs, got, strict=True):
        np.testing.assert_array_equal(values[0], batch[0])
        np.testing.assert_array_equal(values[1], np.asarray(batch[1]))
    # reset() reopens the queue for the next pass
    reader.reset()
    assert not feed_queue.is_closed()
    feed_queue.push(inputs[1])
    feed_queue.close()
    (x, _) = exe.run(main, fetch_list=list(out), scope=scope)
    np.testing.assert_array_equal(x, inputs[1][0])
    with pytest.raises(EOFException):
        exe.run(main, fetch_list=list(out), scope=scope)
    reader.reset()
    with pytest.raises(RuntimeError, match="do not start"):
        reader.start()
    reader.reset()


def test_taking_the_queue_leaves_a_decorated_reader_started_by_start():
    # Fluid 1.8: reader.queue is a plain attribute; start() runs the decorated provider
    # (its thread pushes into that queue), so taking the queue changes nothing
    main, reader, out = _push_net()
    reader.queue  # noqa: B018
    batches = _push_inputs(3)
    reader.decorate_tensor_provider(lambda: iter(batches))
    exe, scope = fluid.Executor(), fluid.Scope()
    reader.start()
    got = [exe.run(main, fetch_list=[out[0]], scope=scope)[0] for _ in range(3)]
    with pytest.raises(EOFException):
        exe.run(main, fetch_list=[out[0]], scope=scope)
    reader.reset()
    for g, (x, _) in zip(got, batches, strict=True):
        np.testing.assert_array_equal(g, x)
