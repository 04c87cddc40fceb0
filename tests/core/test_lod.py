"""LoD through the executor: LoD tensors fed, kept by the ops that keep it (Fluid's ShareLoD),
changed by the sequence ops, dropped where a value has none; fetched as LoDTensors; the
LoDTensor API as Fluid scripts use it."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid


def _bag_of_words(pool="sum"):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        y = fluid.layers.data(name="y", shape=[1])
        emb = fluid.layers.embedding(ids, size=[20, 4], is_sparse=True)
        hidden = fluid.layers.fc(emb, 5, act="tanh")  # per word: keeps the LoD
        pooled = fluid.layers.sequence_pool(hidden, pool)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(pooled, 1), y))
        fluid.optimizer.SGD(0.1).minimize(loss)
    return main, startup, emb, hidden, pooled, loss


def _words(seqs):
    return fluid.create_lod_tensor(seqs, [[len(s) for s in seqs]], fluid.CPUPlace())


def test_lod_flows_through_the_ops_and_the_fetch():
    main, startup, emb, hidden, pooled, loss = _bag_of_words()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"ids": _words([[1, 2, 3], [4], [5, 6]]), "y": np.ones((3, 1), np.float32)}
    e, h, p = exe.run(main, feed=feed, fetch_list=[emb, hidden, pooled], scope=scope,
                      return_numpy=False)
    assert e.lod() == h.lod() == [[0, 3, 4, 6]] and e.shape() == [6, 4] and h.shape() == [6, 5]
    assert p.lod() == [] and np.array(p).shape == (3, 5)  # pooled: a LoDTensor without LoD
    # the gradient of the word vectors carries the LoD too (its rows are the words)
    assert scope.lods[hidden.name + "@GRAD"] == ((0, 3, 4, 6),)
    np.testing.assert_allclose(np.array(p), [np.array(h)[0:3].sum(0), np.array(h)[3],
                                             np.array(h)[4:6].sum(0)], rtol=1e-6)
    with pytest.raises(RuntimeError, match="holds LoD information.*return_numpy=False"):
        exe.run(main, feed=feed, fetch_list=[emb], scope=scope)


def test_bag_of_words_learns_and_updates_only_the_words_it_saw():
    seqs = [[1, 2, 3], [4], [5, 6]]
    main, startup, _, _, _, loss = _bag_of_words()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    y = np.array([[1.0], [-1.0], [0.5]], np.float32)
    losses = [exe.run(main, feed={"ids": _words(seqs), "y": y}, fetch_list=[loss],
                      scope=scope)[0][0] for _ in range(20)]
    assert losses[-1] < 0.1 * losses[0]
    emb_table = np.array(scope.vars["embedding_0.w_0"])
    assert emb_table.shape == (20, 4)
    untouched = [i for i in range(20) if i not in (1, 2, 3, 4, 5, 6)]
    fresh = fluid.Scope()
    exe.run(startup, scope=fresh)
    np.testing.assert_array_equal(emb_table[untouched],
                                  np.array(fresh.vars["embedding_0.w_0"])[untouched])


def test_two_level_lod_pools_to_its_top_level():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[2], lod_level=2)
        sentences = fluid.layers.sequence_pool(x, "sum")   # words -> sentences
        paragraphs = fluid.layers.sequence_pool(sentences, "max")  # sentences -> paragraphs
    exe = fluid.Executor()
    t = fluid.LoDTensor()
    t.set(np.arange(14, dtype=np.float32).reshape(7, 2), fluid.CPUPlace())
    t.set_recursive_sequence_lengths([[1, 2], [3, 1, 3]])
    s, p = exe.run(main, feed={"x": t}, fetch_list=[sentences, paragraphs], return_numpy=False)
    assert s.lod() == [[0, 1, 3]]
    np.testing.assert_array_equal(np.array(s), [[6, 9], [6, 7], [30, 33]])
    np.testing.assert_array_equal(np.array(p), [[6, 9], [30, 33]])


def test_feeding_a_plain_array_after_a_lod_tensor_drops_the_old_lod():
    main, startup, emb, *_ = _bag_of_words()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"ids": _words([[1, 2], [3]]), "y": np.ones((2, 1), np.float32)},
            scope=scope, fetch_list=[])
    assert scope.lods["ids"] == ((0, 2, 3),)
    with pytest.raises(Exception, match=r"sequence_pool: Input\(X\) has no LoD"):
        exe.run(main, feed={"ids": np.array([[1], [2], [3]], np.int64),
                            "y": np.ones((3, 1), np.float32)}, scope=scope)
    assert "ids" not in scope.lods and emb.name not in scope.lods


@pytest.mark.parametrize("lengths, match", [
    ([[2, 2]], r"level 0 ends at 4, but must end at the first dimension \(3 rows\)"),
    ([[1, 2], [1, 2]], r"level 0 ends at 3, but must end at the 2 sequences of level 1"),
])
def test_a_lod_that_does_not_fit_is_refused(lengths, match):
    t = fluid.LoDTensor()
    t.set(np.zeros((3, 1), np.int64), fluid.CPUPlace())
    with pytest.raises(ValueError, match=match):
        t.set_recursive_sequence_lengths(lengths)
        main, _ = fluid.Program(), fluid.Program()
        with fluid.program_guard(main):
            fluid.layers.data(name="ids", shape=[1], dtype="int64", lod_level=1)
        fluid.Executor().run(main, feed={"ids": t})


def test_lod_tensor_api_as_fluid_scripts_use_it():
    t = fluid.create_lod_tensor(np.arange(5).reshape(5, 1), [[2, 3]], fluid.CPUPlace())
    assert t.lod() == [[0, 2, 5]] and t.recursive_sequence_lengths() == [[2, 3]]
    assert t.has_valid_recursive_sequence_lengths() and t.shape() == [5, 1]
    t.set_lod([[0, 1, 5]])
    assert t.recursive_sequence_lengths() == [[1, 4]]
    words = fluid.create_lod_tensor([[1, 2], [3]], [[2, 1]], fluid.CPUPlace())
    assert np.array(words).tolist() == [[1], [2], [3]] and np.array(words).dtype == np.int64
    with pytest.raises(ValueError, match=r"lengths \[2, 1\], but recursive_seq_lens ends with "
                                         r"\[1, 2\]"):
        fluid.create_lod_tensor([[1, 2], [3]], [[1, 2]], fluid.CPUPlace())
    r = fluid.create_random_int_lodtensor([[2, 3]], [4], fluid.CPUPlace(), low=0, high=9)
    assert r.shape() == [5, 4] and r.lod() == [[0, 2, 5]]
    assert 0 <= np.array(r).min() and np.array(r).max() <= 9
    assert "lod=[[0, 2, 5]]" in repr(r)
    empty = fluid.LoDTensor()
    with pytest.raises(ValueError, match="holds no data yet"):
        empty.shape()


def test_sequence_conv_pool_classifies_sequences_by_their_words():
    # class 1 iff the sequence holds the word 7: a conv window plus max pooling finds it
    rng = np.random.default_rng(0)
    seqs = [list(rng.integers(0, 7, int(rng.integers(2, 6)))) for _ in range(24)]
    labels = np.array([[i % 2] for i in range(24)], np.int64)
    for seq, label in zip(seqs, labels[:, 0], strict=True):
        if label:
            seq.insert(int(rng.integers(0, len(seq))), 7)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 1
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[8, 8])
        conv = fluid.layers.sequence_conv(emb, num_filters=6, filter_size=3, act="tanh")
        pooled = fluid.layers.sequence_pool(conv, "max")
        assert fluid.nets.sequence_conv_pool(emb, 4, 3).shape == (-1, 4)
        predict = fluid.layers.fc(pooled, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        acc = fluid.layers.accuracy(predict, label)
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feeder = fluid.DataFeeder([words, label], fluid.CPUPlace(), program=main)
    feed = feeder.feed(list(zip(seqs, labels[:, 0], strict=True)))
    for _ in range(60):
        c, a = exe.run(main, feed=feed, fetch_list=[conv, acc], scope=scope,
                       return_numpy=False)
    assert c.lod() == feed["words"].lod() and c.shape()[1] == 6
    assert float(np.array(a)[0]) == 1.0


def _sequence_net():
    # pad -> per-position fc -> unpad -> expand by a 2-level LoD -> pool: gradients reach the
    # embedding through every sequence op
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 2
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        y = fluid.layers.data(name="y", shape=[1])
        emb = fluid.layers.embedding(words, size=[10, 4])
        pad = fluid.layers.fill_constant([1], "float32", 0.0)
        padded, length = fluid.layers.sequence_pad(emb, pad)
        per_pos = fluid.layers.fc(padded, 4, num_flatten_dims=2, act="tanh")
        unpadded = fluid.layers.sequence_unpad(per_pos, length)
        rev = fluid.layers.sequence_reverse(unpadded)
        soft = fluid.layers.sequence_softmax(fluid.layers.fc(rev, 1))
        weighted = fluid.layers.elementwise_mul(rev, soft, axis=0)
        pooled = fluid.layers.sequence_pool(weighted, "sum")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(pooled, 1), y))
        fluid.optimizer.Adam(0.05).minimize(loss)
    feed = {"words": _words([[1, 2, 3], [4], [5, 6]]),
            "y": np.array([[1.0], [-1.0], [0.5]], np.float32)}
    return main, startup, feed, loss, unpadded, soft


def test_sequence_layers_compose_and_train_end_to_end():
    main, startup, feed, loss, unpadded, soft = _sequence_net()
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]
              for _ in range(40)]
    assert losses[-1] < 0.05 * losses[0]
    u, s = exe.run(main, feed=feed, fetch_list=[unpadded, soft], scope=scope,
                   return_numpy=False)
    assert u.lod() == s.lod() == [[0, 3, 4, 6]]
    np.testing.assert_allclose([np.array(s)[0:3].sum(), np.array(s)[3:4].sum()], [1, 1],
                               rtol=1e-5)


def test_sequence_network_on_the_device_trains_like_cpu(device_xp):
    # LoD feeds, sequence kernels and LoD fetches with the tensors on the device
    losses, fetched = {}, {}
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        with fluid.unique_name.guard():  # the same names, so the same initial values
            main, startup, feed, loss, unpadded, soft = _sequence_net()
        exe, scope = fluid.Executor(place), fluid.Scope()
        exe.run(startup, scope=scope)
        key = type(place).__name__
        losses[key] = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0])
                       for _ in range(10)]
        fetched[key] = exe.run(main, feed=feed, fetch_list=[soft], scope=scope,
                               return_numpy=False)[0]
    np.testing.assert_allclose(losses["CUDAPlace"], losses["CPUPlace"], rtol=1e-5)
    assert fetched["CUDAPlace"].lod() == fetched["CPUPlace"].lod() == [[0, 3, 4, 6]]
    np.testing.assert_allclose(np.array(fetched["CUDAPlace"]), np.array(fetched["CPUPlace"]),
                               rtol=1e-5)


def test_dynamic_gru_classifies_by_word_order():
    # class 1 iff word 1 comes before word 2: only a recurrence (here both directions) can
    # tell, bag-of-words cannot
    rng = np.random.default_rng(3)
    seqs, labels = [], []
    for i in range(32):
        body = list(rng.integers(3, 8, int(rng.integers(1, 4))))
        first, second = (1, 2) if i % 2 else (2, 1)
        seqs.append([*body[:1], first, *body[1:], second])
        labels.append(i % 2)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 4
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[8, 8])
        fwd = fluid.layers.dynamic_gru(fluid.layers.fc(emb, 3 * 8), size=8)
        bwd = fluid.layers.dynamic_gru(fluid.layers.fc(emb, 3 * 8), size=8, is_reverse=True)
        last = fluid.layers.concat([fluid.layers.sequence_last_step(fwd),
                                    fluid.layers.sequence_first_step(bwd)], axis=1)
        predict = fluid.layers.fc(last, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        acc = fluid.layers.accuracy(predict, label)
        fluid.optimizer.Adam(0.03).minimize(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"words": _words(seqs), "label": np.array(labels, np.int64).reshape(-1, 1)}
    for _ in range(120):
        a, = exe.run(main, feed=feed, fetch_list=[acc], scope=scope)
    assert float(a[0]) == 1.0
    with pytest.raises(ValueError, match=r"input must be \[T, 3 \* size\]"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            x = fluid.layers.data(name="x", shape=[5], lod_level=1)
            fluid.layers.dynamic_gru(x, size=4)


def test_dynamic_lstm_classifies_by_word_order():
    rng = np.random.default_rng(5)
    seqs, labels = [], []
    for i in range(32):
        body = list(rng.integers(3, 8, int(rng.integers(1, 4))))
        first, second = (1, 2) if i % 2 else (2, 1)
        seqs.append([*body[:1], first, *body[1:], second])
        labels.append(i % 2)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 6
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        emb = fluid.layers.embedding(words, size=[8, 8])
        hidden, cell = fluid.layers.dynamic_lstm(fluid.layers.fc(emb, 4 * 8), size=4 * 8)
        assert hidden.shape[-1] == cell.shape[-1] == 8
        predict = fluid.layers.fc(fluid.layers.sequence_last_step(hidden), 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        acc = fluid.layers.accuracy(predict, label)
        fluid.optimizer.Adam(0.03).minimize(loss)
    params = {p.name: p.shape for p in main.global_block().all_parameters()}
    assert sorted(v for k, v in params.items() if k.startswith("lstm")) == [(1, 56), (8, 32)]
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"words": _words(seqs), "label": np.array(labels, np.int64).reshape(-1, 1)}
    for _ in range(120):
        a, h = exe.run(main, feed=feed, fetch_list=[acc, hidden], scope=scope,
                       return_numpy=False)
    assert float(np.array(a)[0]) == 1.0
    assert h.lod() == [list(np.cumsum([0] + [len(s) for s in seqs]))]
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data(name="x", shape=[8], lod_level=1)
        with pytest.raises(ValueError, match="use_peepholes needs the bias"):
            fluid.layers.dynamic_lstm(x, size=8, bias_attr=False)
        with pytest.raises(ValueError, match="h_0 needs c_0"):
            fluid.layers.dynamic_lstm(x, size=8, h_0=x)
        with pytest.raises(ValueError, match=r"input must be \[T, size\]"):
            fluid.layers.dynamic_lstm(x, size=16)


def test_gru_unit_unrolled_equals_dynamic_gru_with_the_same_weights():
    rng = np.random.default_rng(8)
    steps, batch, d = 3, 4, 5
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        seq = fluid.layers.data(name="seq", shape=[3 * d], lod_level=1)
        xs = [fluid.layers.data(name=f"x{t}", shape=[3 * d]) for t in range(steps)]
        w, b = fluid.ParamAttr(name="gw"), fluid.ParamAttr(name="gb")
        whole = fluid.layers.dynamic_gru(seq, size=d, param_attr=w, bias_attr=b)
        h = fluid.layers.fill_constant_batch_size_like(xs[0], [-1, d], "float32", 0.0)
        for x in xs:
            h, _, _ = fluid.layers.gru_unit(x, h, 3 * d, param_attr=w, bias_attr=b)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    scope.set("gb", rng.standard_normal((1, 3 * d)).astype(np.float32))
    x = rng.standard_normal((batch, steps, 3 * d)).astype(np.float32)
    lod_x = fluid.create_lod_tensor(x.reshape(-1, 3 * d), [[steps] * batch], fluid.CPUPlace())
    feed = {"seq": lod_x, **{f"x{t}": x[:, t] for t in range(steps)}}
    got_whole, got_last = exe.run(main, feed=feed, fetch_list=[whole, h], scope=scope,
                                  return_numpy=False)
    last_rows = np.array(got_whole)[steps - 1::steps]
    np.testing.assert_allclose(np.array(got_last), last_rows, rtol=1e-5)


def test_an_unrolled_lstm_unit_learns_word_order():
    rng = np.random.default_rng(9)
    n, steps = 32, 3
    ids = rng.integers(3, 8, (n, steps))
    labels = np.arange(n) % 2
    for i in range(n):  # class 1 iff word 1 comes before word 2
        a, b = sorted(rng.choice(steps, 2, replace=False))
        ids[i, a], ids[i, b] = (1, 2) if labels[i] else (2, 1)
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 2
    with fluid.program_guard(main, startup):
        words = [fluid.layers.data(name=f"w{t}", shape=[1], dtype="int64") for t in range(steps)]
        label = fluid.layers.data(name="label", shape=[1], dtype="int64")
        h = c = fluid.layers.fill_constant_batch_size_like(words[0], [-1, 8], "float32", 0.0)
        for w in words:
            emb = fluid.layers.embedding(w, size=[8, 8], param_attr=fluid.ParamAttr(name="emb"))
            h, c = fluid.layers.lstm_unit(emb, h, c, forget_bias=1.0,
                                          param_attr=fluid.ParamAttr(name="cell_w"),
                                          bias_attr=fluid.ParamAttr(name="cell_b"))
        predict = fluid.layers.fc(h, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        acc = fluid.layers.accuracy(predict, label)
        fluid.optimizer.Adam(0.03).minimize(loss)
    assert [op.type for op in main.global_block().ops].count("lstm_unit") == steps
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {f"w{t}": ids[:, t:t + 1] for t in range(steps)}
    feed["label"] = labels.reshape(-1, 1).astype(np.int64)
    for _ in range(150):
        a, = exe.run(main, feed=feed, fetch_list=[acc], scope=scope)
    assert float(a[0]) == 1.0


def test_a_crf_tagger_learns_tags_that_depend_on_the_previous_word():
    # the tag of a word is 1 after word 0, else 0 or 2 by its parity: trained through the
    # CRF's likelihood, read back by Viterbi decoding with the trained transitions
    rng = np.random.default_rng(10)
    seqs = [list(rng.integers(0, 6, int(rng.integers(2, 6)))) for _ in range(24)]
    tags = [[1 if k and s[k - 1] == 0 else int(s[k] % 2) * 2 for k in range(len(s))]
            for s in seqs]
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 3
    with fluid.program_guard(main, startup):
        words = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
        target = fluid.layers.data(name="target", shape=[1], dtype="int64", lod_level=1)
        emb = fluid.layers.embedding(words, size=[6, 8])
        feature = fluid.layers.fc(fluid.layers.sequence_conv(emb, 8, filter_size=3), 3)
        cost = fluid.layers.linear_chain_crf(feature, target,
                                             param_attr=fluid.ParamAttr(name="crfw"))
        loss = fluid.layers.mean(cost)
        fluid.optimizer.Adam(0.05).minimize(loss)
        decoded = fluid.layers.crf_decoding(feature, param_attr=fluid.ParamAttr(name="crfw"))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"words": _words(seqs), "target": _words(tags)}
    for _ in range(150):
        path, = exe.run(main, feed=feed, fetch_list=[decoded], scope=scope, return_numpy=False)
    np.testing.assert_array_equal(np.array(path)[:, 0], np.concatenate(tags))
    assert path.lod() == [list(np.cumsum([0] + [len(s) for s in seqs]))]
    with pytest.raises(ValueError, match="must name the transition parameter"):
        with fluid.program_guard(main, fluid.Program()):
            fluid.layers.crf_decoding(feature, param_attr=fluid.ParamAttr(name="nope"))


def test_a_lod_set_before_the_data_is_checked_for_its_structure():
    # Fluid 1.8's set_recursive_sequence_lengths runs CheckLoD without data too (only the
    # rows are not checked): a level that does not end at the next level's sequences fails
    t = fluid.LoDTensor()
    for lengths in ([[], [1], [3]], [[0], [2], [3]]):
        with pytest.raises(ValueError, match="level 0 ends at 0"):
            t.set_recursive_sequence_lengths(lengths)
    t.set_recursive_sequence_lengths([[2, 1], [1, 2, 3]])
    assert t.lod() == [[0, 2, 3], [0, 1, 3, 6]]
    t.set(np.zeros((6, 1), "float32"), fluid.CPUPlace())
    assert t.has_valid_recursive_sequence_lengths()


def test_lod_tensor_made_from_sequence_lengths_as_fluid_18():
    # core.LoDTensor(recursive_sequence_lengths): a LoD before any data, its structure checked
    t = fluid.LoDTensor([[2, 3]])
    assert t.lod() == [[0, 2, 5]] and t.recursive_sequence_lengths() == [[2, 3]]
    t.set(np.ones((5, 1), "float32"), fluid.CPUPlace())
    assert t.has_valid_recursive_sequence_lengths()
    with pytest.raises(ValueError, match="level 0 ends at 2, but must end at the 3 sequences"):
        fluid.LoDTensor([[2], [1, 1, 1]])
    assert fluid.LoDTensor().lod() == []


def test_a_tensor_names_its_place_as_fluid_18():
    # LoDTensor._place(), Place._type() / _equals() and core.Place (Paddle's reader tests
    # compare a batch's place with the loader's places so)
    from dask_fluid.compat import core

    t = fluid.LoDTensor()
    with pytest.raises(ValueError, match="holds no data yet"):
        t._place()
    t.set(np.ones((2, 1), "float32"), fluid.CPUPlace())
    assert t._place()._equals(fluid.CPUPlace()) and not t._place()._equals(fluid.CUDAPlace(0))
    assert fluid.CUDAPlace(1)._equals(fluid.CUDAPlace(1))
    assert not fluid.CUDAPlace(1)._equals(fluid.CUDAPlace(0))
    assert [p()._type() for p in (fluid.CUDAPlace, fluid.CPUPlace, fluid.CUDAPinnedPlace)] == [
        0, 1, 2]  # the kinds' order in Fluid's Place variant
    held = core.Place()
    held.set_place(t._place())
    assert held.is_cpu_place() and not held.is_gpu_place() and held._equals(fluid.CPUPlace())
    assert fluid.CPUPlace()._equals(held) and held._type() == fluid.CPUPlace()._type()
    held.set_place(fluid.CUDAPlace(3))
    assert held.gpu_device_id() == 3
    with pytest.raises(TypeError, match="set_place takes"):
        held.set_place("cpu")
