"""The methods of fluid.DatasetFactory's datasets beyond plain reading: download and HDFS
commands, preloading, global_shuffle on one trainer, ins_id/content parsing, merge_by_lineid,
slots_shuffle, the sizes, and what raises NotImplementedError (and why)."""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.dataset_lines import read_command


class _Fleet:
    """What the datasets ask of a fleet: its number of trainers."""

    def __init__(self, workers):
        self.workers = workers

    def worker_num(self):
        return self.workers


def _vars(*specs):
    """Data variables named by ``specs`` ("name:int64:1" = dtype and lod_level)."""
    out = []
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        for spec in specs:
            name, dtype, lod = spec.split(":")
            out.append(fluid.layers.data(name=name, shape=[1], dtype=dtype,
                                         lod_level=int(lod)))
    return out


def _dataset(kind, use_vars, files, **settings):
    dataset = fluid.DatasetFactory().create_dataset(kind)
    dataset.set_use_var(use_vars)
    dataset.set_filelist([str(f) for f in files])
    dataset.set_batch_size(settings.pop("batch_size", 4))
    for name, value in settings.items():
        getattr(dataset, f"set_{name}")(value)
    return dataset


def _fed(dataset):
    """Every batch's feed, as train_from_dataset gives them to the executor."""
    return list(dataset._feeds())


def _column(feeds, name):
    """Per sample, the values of slot ``name`` over all batches."""
    out = []
    for feed in feeds:
        value = feed[name]
        arr = np.array(value).reshape(-1)
        if hasattr(value, "lod") and value.lod():
            offsets = value.lod()[0]
            out += [arr[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        else:
            out += [[v] for v in arr.tolist()]
    return out


# -- where the bytes come from ----------------------------------------------------------------
def test_download_cmd_reads_afs_paths_before_the_pipe_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Fluid's own test reads a local file named afs:...
    (tmp_path / "afs:part").write_text("1 7\n2 7 3\n")
    (tmp_path / "local").write_text("1 7\n")
    ids = _vars("ids:int64:1")
    dataset = _dataset("QueueDataset", ids, ["afs:part", "local"], pipe_command="sed s/8/9/")
    dataset.set_download_cmd("sed s/7/8/")
    # afs: download (7 -> 8) then pipe (8 -> 9); the local file only through the pipe
    assert _column(_fed(dataset), "ids") == [[9], [9, 3], [7]]
    dataset.set_download_cmd("false")
    with pytest.raises(RuntimeError, match=r"failed on afs:part .*command 'false afs:part \| sed"):
        _fed(dataset)


def test_hdfs_paths_use_the_hadoop_command_and_gz_files_zcat(tmp_path):
    assert read_command("hdfs:/d/a", "cat") == "hadoop fs -cat hdfs:/d/a | cat"
    assert read_command("hdfs:/d/a.gz", "cat", "hadoop fs -D u", "get") == (
        "hadoop fs -D u -text hdfs:/d/a.gz | cat")  # .gz ignores the download command
    with gzip.open(tmp_path / "p.gz", "wt") as f:
        f.write("1 5\n1 6\n")
    ids = _vars("ids:int64:1")
    dataset = _dataset("QueueDataset", ids, [tmp_path / "p.gz"])
    assert _column(_fed(dataset), "ids") == [[5], [6]]
    dataset.set_hdfs_config("my_fs", "me,pw")
    dataset.set_filelist(["hdfs:/no/such"])
    dataset.set_download_cmd("")
    with pytest.raises(RuntimeError, match="-D hadoop.job.ugi=me,pw -cat hdfs:/no/such"):
        _fed(dataset)


def test_empty_filelist_gives_no_batches_as_in_fluid():
    dataset = _dataset("QueueDataset", _vars("ids:int64:1"), [])
    assert _fed(dataset) == []


# -- preloading -------------------------------------------------------------------------------
def _net():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        y = fluid.layers.data(name="y", shape=[1])
        emb = fluid.layers.embedding(ids, size=[20, 3], param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.1)))
        pooled = fluid.layers.sequence_pool(emb, "sum")
        pred = fluid.layers.fc(pooled, 1, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(0.2)))
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, [ids, y]


def _train(main, startup, dataset):
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.train_from_dataset(main, dataset, scope=scope)
    return {name: np.array(scope.vars[name]).copy() for name in ("fc_0.w_0", "embedding_0.w_0")}


def _ctr_file(tmp_path, n=12):
    path = tmp_path / "part"
    path.write_text("".join(f"{i % 3 + 1} {' '.join(str(j + i % 5) for j in range(i % 3 + 1))}"
                            f" 1 {i % 2}\n" for i in range(n)))
    return path


def test_preload_then_wait_trains_as_load_into_memory(tmp_path):
    main, startup, use_vars = _net()
    path = _ctr_file(tmp_path)
    loaded = _dataset("InMemoryDataset", use_vars, [path, path])
    loaded.load_into_memory()
    preloaded = _dataset("InMemoryDataset", use_vars, [path, path], pipe_command="sleep 0.3; cat")
    preloaded.preload_into_memory(thread_num=2)
    with pytest.raises(RuntimeError, match="call wait_preload_done"):
        _fed(preloaded)
    preloaded.wait_preload_done()
    assert preloaded.get_memory_data_size() == loaded.get_memory_data_size() == 24
    expected, got = _train(main, startup, loaded), _train(main, startup, preloaded)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    assert not np.allclose(expected["fc_0.w_0"], 0.2)  # it trained


def test_wait_preload_done_raises_the_loaders_error(tmp_path):
    dataset = _dataset("InMemoryDataset", _vars("ids:int64:1"), [_ctr_file(tmp_path)],
                       pipe_command="exit 3")
    dataset.preload_into_memory()
    with pytest.raises(RuntimeError, match="pipe_command 'exit 3' failed"):
        dataset.wait_preload_done()
    with pytest.raises(RuntimeError, match="call preload_into_memory"):
        dataset.wait_preload_done()
    with pytest.raises(ValueError, match="thread_num must be a positive integer"):
        dataset.preload_into_memory(0)


def test_load_into_memory_adds_to_the_samples_held_until_release(tmp_path):
    dataset = _dataset("InMemoryDataset", _vars("ids:int64:1"), [tmp_path / "p"])
    (tmp_path / "p").write_text("1 1\n1 2\n")
    dataset.load_into_memory()
    dataset.load_into_memory()  # Fluid's input channel keeps what it had
    assert dataset.get_memory_data_size() == 4
    dataset.release_memory()
    dataset.load_into_memory()
    assert dataset.get_memory_data_size() == 2


# -- shuffling and sizes ----------------------------------------------------------------------
def _numbered(tmp_path, n):
    path = tmp_path / "numbered"
    path.write_text("".join(f"1 {i + 1}\n" for i in range(n)))
    return path


def test_global_shuffle_on_one_trainer_permutes_every_sample(tmp_path):
    random.seed(0)
    ids = _vars("ids:int64:1")
    dataset = _dataset("InMemoryDataset", ids, [_numbered(tmp_path, 50)])
    dataset.load_into_memory()
    assert (dataset.get_memory_data_size(), dataset.get_shuffle_data_size()) == (50, 0)
    dataset.global_shuffle()
    order = [v[0] for v in _column(_fed(dataset), "ids")]
    assert sorted(order) == list(range(1, 51)) and order != sorted(order)
    # Fluid deals the samples out of the input channel to the readers' channels
    assert (dataset.get_memory_data_size(), dataset.get_shuffle_data_size()) == (0, 50)
    dataset.global_shuffle(_Fleet(1), thread_num=-1)
    assert dataset.get_shuffle_data_size(_Fleet(1)) == 50
    dataset.postprocess_instance()  # back to the input channel, shuffled
    assert (dataset.get_memory_data_size(), dataset.get_shuffle_data_size()) == (50, 0)
    again = [v[0] for v in _column(_fed(dataset), "ids")]
    assert sorted(again) == sorted(order) and again != order


def test_several_trainers_raise_naming_the_exchange(tmp_path):
    dataset = _dataset("InMemoryDataset", _vars("ids:int64:1"), [_numbered(tmp_path, 3)])
    dataset.load_into_memory()
    for call in (lambda: dataset.global_shuffle(_Fleet(2)),
                 lambda: dataset.get_memory_data_size(_Fleet(2)),
                 lambda: dataset.get_shuffle_data_size(_Fleet(3))):
        with pytest.raises(NotImplementedError, match="with [23] trainers: exchanging samples "
                           "between trainers .*set_queue_num, set_fleet_send_batch_size and "
                           "set_fleet_send_sleep_seconds"):
            call()


def test_exchange_settings_are_validated():
    dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    dataset.set_queue_num(4)
    dataset.set_fleet_send_batch_size(800)
    dataset.set_fleet_send_sleep_seconds(2)
    assert (dataset.queue_num, dataset.fleet_send_batch_size,
            dataset.fleet_send_sleep_seconds) == (4, 800, 2)
    with pytest.raises(ValueError, match="queue_num must be a positive integer"):
        dataset.set_queue_num(0)
    with pytest.raises(ValueError, match="fleet_send_batch_size must be a positive"):
        dataset.set_fleet_send_batch_size(-1)
    with pytest.raises(ValueError, match="fleet_send_sleep_seconds must be a non-negative"):
        dataset.set_fleet_send_sleep_seconds(-1)


# -- ins_id, content, merge_by_lineid ---------------------------------------------------------
def test_parse_ins_id_and_content_read_the_leading_tokens(tmp_path):
    (tmp_path / "p").write_text("1 a 1 ctx-a 1 5 1 0.5\n1 b 1 ctx-b 2 6 7 1 1.5\n")
    use_vars = _vars("ids:int64:1", "y:float32:0")
    dataset = _dataset("InMemoryDataset", use_vars, [tmp_path / "p"], parse_ins_id=True,
                       parse_content=True)
    dataset.load_into_memory()
    assert [(r.ins_id, r.content) for r in dataset._memory] == [("a", "ctx-a"), ("b", "ctx-b")]
    assert _column(_fed(dataset), "ids") == [[5], [6, 7]]
    assert _column(_fed(dataset), "y") == [[0.5], [1.5]]
    dataset.release_memory()
    dataset.set_parse_content(False)
    with pytest.raises(ValueError, match="line 1 of .*: slot 'ids' has 'ctx-a', not a number"):
        dataset.load_into_memory()  # the content token is read as the slot's values
    (tmp_path / "p").write_text("2 a b 1 5 1 0.5\n")
    with pytest.raises(ValueError, match=r"should start with '1 <ins_id>' \(set_parse_ins_id\)"):
        dataset.load_into_memory()


MASTERPATCH = ("1 id1 1 1 2 3 3 4 5 5 5 5 1 1\n1 id1 1 2 2 3 4 4 6 6 6 6 1 2\n"
               "1 id2 1 1 1 1 1 0 1 0\n1 id3 1 0 1 0 1 1 1 1\n1 id3 1 1 1 1 1 0 1 0\n"
               "1 id4 1 0 1 0 1 1 1 1\n1 id4 1 0 1 0 1 1 1 1\n1 id5 1 1 1 1 1 0 1 0\n"
               "1 id5 1 1 1 1 1 0 1 0\n1 id6 1 4 2 3 3 4 5 5 5 5 1 4\n"
               "1 id6 1 1 2 3 4 4 6 6 6 6 1 5\n1 id6 1 6 2 3 5 4 7 7 7 7 1 6\n"
               "1 id6 1 7 2 3 6 4 8 8 8 8 1 7\n")


def test_merge_by_lineid_merges_complementary_instances(tmp_path):
    """Fluid's test data: only id3's two halves merge; id1/id4/id5 have a sequence slot in
    both instances, id2 and id6 are not pairs."""
    (tmp_path / "p").write_text(MASTERPATCH)
    use_vars = _vars("s1:int64:1", "s2:int64:1", "s3:float32:1", "s4:float32:1")
    dataset = _dataset("InMemoryDataset", use_vars, [tmp_path / "p"])
    dataset.set_merge_by_lineid(2)
    assert dataset.parse_ins_id
    dataset.load_into_memory()
    with pytest.warns(UserWarning, match="dropped 11 instances"):
        dataset.global_shuffle()
    feeds = _fed(dataset)
    assert [r.ins_id for r in dataset._memory] == ["id3"]
    assert [_column(feeds, s) for s in ("s1", "s2", "s3", "s4")] == [[[1]], [[1]], [[1.0]],
                                                                     [[1.0]]]
    assert dataset.get_shuffle_data_size() == 1
    dataset.release_memory()
    dataset.set_merge_by_lineid(0)  # any group size: id2 alone survives too
    dataset.load_into_memory()
    with pytest.warns(UserWarning, match="dropped 10 instances"):
        dataset.global_shuffle()
    assert sorted(r.ins_id for r in dataset._memory) == ["id2", "id3"]


def test_merge_keeps_the_last_nonzero_dense_value(tmp_path):
    (tmp_path / "p").write_text("1 k 1 0 1 4\n1 k 1 7 1 0\n1 z 1 0 1 3\n1 z 1 0 1 0\n")
    use_vars = _vars("d:int64:0", "s:int64:1")
    dataset = _dataset("InMemoryDataset", use_vars, [tmp_path / "p"], merge_by_lineid=2)
    dataset.load_into_memory()
    dataset.global_shuffle()
    merged = {r.ins_id: [f.tolist() for f in r.fields] for r in dataset._memory}
    assert merged == {"k": [[7], [4]], "z": [[0], [3]]}


def test_in_memory_sequences_drop_zeros_and_feed_an_empty_one_as_0(tmp_path):
    (tmp_path / "p").write_text("3 0 5 0 1 0\n1 0 2 0 0\n")
    use_vars = _vars("s:int64:1", "d:int64:0")
    memory = _dataset("InMemoryDataset", use_vars, [tmp_path / "p"])
    memory.load_into_memory()
    (tmp_path / "q").write_text("3 0 5 0 1 0\n")
    queue = _dataset("QueueDataset", use_vars, [tmp_path / "q"])
    assert _column(_fed(memory), "s") == [[5], [0]]  # MultiSlotInMemoryDataFeed
    assert _column(_fed(queue), "s") == [[0, 5, 0]]  # MultiSlotDataFeed keeps them


def test_dense_slots_take_the_variables_shape(tmp_path):
    (tmp_path / "p").write_text("6 1 2 3 4 5 6\n6 7 8 9 10 11 12\n")
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[2, 3])
    [feed] = _fed(_dataset("QueueDataset", [x], [tmp_path / "p"]))
    np.testing.assert_array_equal(feed["x"], np.arange(1, 13, dtype=np.float32).reshape(2, 2, 3))
    (tmp_path / "p").write_text("6 1 2 3 4 5 6\n5 1 2 3 4 5\n")
    with pytest.raises(ValueError, match="'x' .* 11 values in a batch, which do not fill its "
                       r"shape \(-1, 2, 3\)"):
        _fed(_dataset("QueueDataset", [x], [tmp_path / "p"]))


# -- slots_shuffle ----------------------------------------------------------------------------
def test_slots_shuffle_redraws_one_slot_from_earlier_samples(tmp_path):
    random.seed(1)
    n = 40
    (tmp_path / "p").write_text("".join(f"1 {i + 1} 1 {100 + i} 1 {i}.5\n" for i in range(n)))
    use_vars = _vars("a:int64:1", "b:int64:1", "f:float32:1")
    dataset = _dataset("InMemoryDataset", use_vars, [tmp_path / "p"], batch_size=n)
    dataset.load_into_memory()
    with pytest.raises(RuntimeError, match=r"call set_fea_eval\(record_candidate_size, True\)"):
        dataset.slots_shuffle(["a"])
    dataset.set_fea_eval(1000, True)
    with pytest.raises(ValueError, match=r"\['nope'\] are not slots"):
        dataset.slots_shuffle(["nope"])
    for _ in range(2):  # each call starts from the samples as loaded
        dataset.slots_shuffle(["a", "f"])
        feeds = _fed(dataset)
        a = [v[0] for v in _column(feeds, "a")]
        # the reservoir holds every sample so far: each draws from those up to itself
        assert all(1 <= v <= i + 1 for i, v in enumerate(a)) and a[0] == 1
        assert a != list(range(1, n + 1))
        assert _column(feeds, "b") == [[100 + i] for i in range(n)]
        assert _column(feeds, "f") == [[i + 0.5] for i in range(n)]  # float slots stay
    dataset.set_fea_eval(1, True)  # one candidate: kept, or the newest sample (1/seen)
    dataset.slots_shuffle(["a"])
    a = [v[0] for v in _column(_fed(dataset), "a")]
    assert a[0] == 1 and all(v in (a[i - 1], i + 1) for i, v in enumerate(a) if i)


# -- what raises, and why ---------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda d: d.set_parse_logkey(True), "set_parse_logkey.* PV merging"),
    (lambda d: d.set_enable_pv_merge(True), "set_enable_pv_merge.* BoxPS"),
    (lambda d: d.set_merge_by_sid(True), "set_merge_by_sid.* PV merging"),
    (lambda d: d.set_current_phase(1), "set_current_phase.* BoxPS"),
    (lambda d: d.set_pv_batch_size(128), "set_pv_batch_size.* BoxPS"),
    (lambda d: d.set_rank_offset("rank_offset"), "set_rank_offset.* BoxPS"),
    (lambda d: d.set_generate_unique_feasigns(True, 15), "set_generate_unique_feasigns.* PSLib"),
    (lambda d: d.generate_local_tables_unlock(0, 11, 1, 25, 15),
     "generate_local_tables_unlock.*PullSparseToLocal"),
    (lambda d: d.set_feed_type("PaddleBoxDataFeed"), "only 'MultiSlotInMemoryDataFeed'"),
])
def test_baidu_ctr_pipeline_features_raise_saying_why(call, match):
    dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    with pytest.raises(NotImplementedError, match=match):
        call(dataset)


def test_defaults_of_the_pv_features_are_accepted_and_pv_size_is_0(tmp_path):
    dataset = _dataset("InMemoryDataset", _vars("ids:int64:1"), [_numbered(tmp_path, 5)])
    dataset.set_parse_logkey(False)
    dataset.set_enable_pv_merge(False)
    dataset.set_feed_type("MultiSlotInMemoryDataFeed")
    dataset.load_into_memory()
    dataset.preprocess_instance()  # without PV merging: Fluid's local shuffle
    assert sorted(v[0] for v in _column(_fed(dataset), "ids")) == [1, 2, 3, 4, 5]
    assert dataset.get_pv_data_size() == 0


def test_file_instant_and_boxps_datasets(tmp_path):
    dataset = _dataset("FileInstantDataset", _vars("ids:int64:1"), [_numbered(tmp_path, 2)])
    with pytest.raises(NotImplementedError, match="FileInstantDataset does not support local"):
        dataset.local_shuffle()
    with pytest.raises(NotImplementedError, match="MultiSlotFileInstantDataFeed"):
        _fed(dataset)
    with pytest.raises(NotImplementedError, match="BoxPSDataset is not implemented.*BoxPS GPU"):
        fluid.DatasetFactory().create_dataset("BoxPSDataset")
    with pytest.raises(NotImplementedError, match="QueueDataset does not hold its samples"):
        fluid.DatasetFactory().create_dataset().slots_shuffle(["ids"])


# -- DataLoader.from_dataset ------------------------------------------------------------------
def test_data_loader_from_dataset_deals_batches_to_the_places(tmp_path, caplog):
    files = []
    for k in range(2):
        path = tmp_path / f"part{k}"
        path.write_text("".join(f"1 {10 * k + i} 1 {i % 2}\n" for i in range(6)))
        files.append(path)
    ids, label = _vars("ids:int64:1", "label:int64:0")
    dataset = _dataset("InMemoryDataset", [ids, label], files, batch_size=4)
    dataset.load_into_memory()
    dataset.set_thread(3)
    with caplog.at_level("WARNING", "dask_fluid.py_reader"):
        fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places(2))
    assert "thread_num 3 which is set in Dataset is ignored" in caplog.text
    loader = fluid.io.DataLoader.from_dataset(dataset, fluid.cpu_places(2), drop_last=False)
    items = list(loader())
    # a reader per place, each with 6 of the 12 samples in memory: batches of 4 and 2 each,
    # a step takes one batch of each reader
    assert [[len(d["ids"].lod()[0]) - 1 for d in item] for item in items] == [[4, 4], [2, 2]]
    assert all(isinstance(t, fluid.LoDTensor) for item in items for d in item
               for t in d.values())
    seen = _column([d for item in items for d in item], "ids")
    assert sorted(v for s in seen for v in s) == sorted([*range(6), *range(10, 16)])
    assert [[len(d["ids"].lod()[0]) - 1 for d in item] for item in fluid.io.DataLoader.
            from_dataset(dataset, fluid.cpu_places(2))] == [[4, 4]]  # drop_last: no 2s
    # a queue dataset's readers take the files in turn: three places for two files
    queue = _dataset("QueueDataset", [ids, label], files * 2, batch_size=4)
    steps = list(fluid.io.DataLoader.from_dataset(queue, fluid.cpu_places(3), drop_last=False))
    assert [len(item) for item in steps] == [3, 3]  # 24 samples: 4 + 2 per file, 6 batches
    with pytest.raises(ValueError, match="1 file\\(s\\), fewer than the 2 places"):
        fluid.io.DataLoader.from_dataset(
            _dataset("QueueDataset", [ids, label], files[:1]), fluid.cpu_places(2))
    with pytest.raises(TypeError, match="must be a dataset of fluid.DatasetFactory"):
        fluid.io.DataLoader.from_dataset([1, 2], fluid.cpu_places(1))
    assert fluid.InMemoryDataset is type(dataset)
