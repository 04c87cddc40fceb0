"""Data parallelism over several places of one process (CompiledProgram and ParallelExecutor):
one step over N places is one step of one place fed the whole batch, under each gradient scale
strategy; fetches come back per place; what would change results raises."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.compiler import BuildStrategy, CompiledProgram
from dask_fluid.multi_place import MultiPlaceStep, split_feed

Scale = BuildStrategy.GradientScaleStrategy


def _net(optimizer=lambda: fluid.optimizer.Adam(0.05), sparse=False, bn=False):
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4])
        ids = fluid.layers.data(name="ids", shape=[1], dtype="int64")
        y = fluid.layers.data(name="y", shape=[1])
        emb = fluid.layers.embedding(ids, size=[10, 3], is_sparse=sparse)
        h = fluid.layers.fc([x, emb], 8, act="relu")
        if bn:
            h = fluid.layers.batch_norm(h)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        optimizer().minimize(loss)
    return main, startup, loss


def _feed(step, batch=8):
    rng = np.random.default_rng(step)
    return {"x": rng.random((batch, 4), dtype=np.float32),
            "ids": rng.integers(0, 10, (batch, 1)).astype(np.int64),
            "y": rng.random((batch, 1), dtype=np.float32)}


def _train(places, steps=4, scale=Scale.CoeffNumDevice, feed=_feed, fetch_more=(), **net):
    main, startup, loss = _net(**net)
    scope, exe = fluid.Scope(), fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    build = BuildStrategy()
    build.gradient_scale_strategy = scale
    compiled = CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=build, places=[fluid.CPUPlace()] * places)
    fetched = [exe.run(compiled, feed=feed(i), fetch_list=[loss.name, *fetch_more],
                       scope=scope) for i in range(steps)]
    params = {p.name: np.array(scope.vars[p.name]) for p in main.all_parameters()}
    compiled._close()
    return fetched, params


def _assert_same_params(a, b, rtol=1e-5, atol=1e-6):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("places", [2, 4])
@pytest.mark.parametrize("sparse", [False, True])
def test_places_equal_one_place_with_the_whole_batch(places, sparse):
    one, p1 = _train(1, sparse=sparse)
    many, pn = _train(places, sparse=sparse)
    _assert_same_params(p1, pn)
    for (l1,), (ln,) in zip(one, many, strict=True):
        assert l1.shape == (1,) and ln.shape == (places,)  # one loss a place, as Fluid fetches
        np.testing.assert_allclose(ln.mean(), l1[0], rtol=1e-5)  # equal slices: mean of means
    assert not np.allclose(p1["fc_0.w_0"], _train(1, steps=1, sparse=sparse)[1]["fc_0.w_0"])


def test_scale_one_sums_the_places_gradients():
    # SGD: with One, 2 places step by the sum of two half-batch mean gradients = 2x the mean
    _, summed = _train(2, scale=Scale.One, optimizer=lambda: fluid.optimizer.SGD(0.05))
    _, doubled = _train(1, optimizer=lambda: fluid.optimizer.SGD(0.1))
    _assert_same_params(summed, doubled)


def test_customized_scale_is_the_fed_loss_grad():
    def fed(scale_value, per_place=None):
        def feed(i):
            f = _feed(i)
            if per_place is None:
                return {**f, "mean_0.tmp_0@GRAD": scale_value}
            halves = split_feed(f, per_place)
            return [{**h, "mean_0.tmp_0@GRAD": np.float32(scale_value)} for h in halves]
        return feed

    sgd = {"optimizer": lambda: fluid.optimizer.SGD(0.1)}
    _, quarter = _train(1, scale=Scale.Customized, feed=fed(0.25), **sgd)
    _, plain = _train(1, optimizer=lambda: fluid.optimizer.SGD(0.025))
    _assert_same_params(quarter, plain)
    # two places fed 0.5 each (a list, one dict a place) = the whole batch's mean
    _, halves = _train(2, scale=Scale.Customized, feed=fed(0.5, per_place=2), **sgd)
    _, whole = _train(1, **sgd)
    _assert_same_params(halves, whole)


def test_customized_scale_needs_the_loss_grad_and_the_loss_name():
    main, startup, loss = _net()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    build = BuildStrategy()
    build.gradient_scale_strategy = Scale.Customized
    compiled = CompiledProgram(main, build).with_data_parallel(loss_name=loss.name,
                                                               places=fluid.CPUPlace())
    with pytest.raises(ValueError, match=r"feed 'mean_0.tmp_0@GRAD' \(the scale"):
        exe.run(compiled, feed=_feed(0), fetch_list=[loss], scope=scope)
    nameless = CompiledProgram(main, build).with_data_parallel(places=fluid.CPUPlace())
    with pytest.raises(ValueError, match="Customized needs the loss_name"):
        exe.run(nameless, feed=_feed(0), fetch_list=[loss], scope=scope)


def test_batch_norm_keeps_place_zeros_moving_statistics():
    # BN normalises each place's slice with that slice's statistics (Fluid without
    # sync_batch_norm); the moving mean kept is place 0's, which place 0 alone on its slice
    # would have written
    def first_half(i):
        return {k: v[:4] for k, v in _feed(i).items()}

    def moving_mean(places, feed):
        _, params = _train(places, steps=1, bn=True, feed=feed, fetch_more=())
        return params

    two = moving_mean(2, _feed)
    alone = moving_mean(1, first_half)
    name = "batch_norm_0.w_1"  # its moving mean
    np.testing.assert_allclose(two[name], alone[name], rtol=1e-6)
    assert not np.allclose(two[name], moving_mean(1, _feed)[name])  # not the whole batch's


def _sync_bn_train(places, steps=3, feed=_feed):
    main, startup, loss = _net(bn=True)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    build = BuildStrategy()
    build.sync_batch_norm = True
    compiled = CompiledProgram(main, build).with_data_parallel(
        loss_name=loss.name, build_strategy=build, places=[fluid.CPUPlace()] * places)
    losses = [exe.run(compiled, feed=feed(i), fetch_list=[loss], scope=scope)[0]
              for i in range(steps)]
    persist = {v.name: np.array(scope.vars[v.name]) for v in main.list_vars()
               if v.persistable and v.name in scope.vars and "NCCLID" not in v.name}
    assert "NCCLID" not in scope.vars  # the places' communicators are gone after each step
    assert all(op.type != "sync_batch_norm" for op in main.global_block().ops)  # a copy ran
    compiled._close()
    return losses, persist


@pytest.mark.parametrize("places", [2, 4])
def test_sync_batch_norm_over_places_is_batch_norm_over_the_whole_batch(places):
    # each place normalises with the whole batch's mean and variance, and its input gradient
    # is the whole batch's: N places of equal parts train as one place fed everything,
    # parameters, Adam's state and the moving statistics alike
    losses, got = _sync_bn_train(places)
    one_losses, one = _sync_bn_train(1)
    assert got.keys() == one.keys() and "batch_norm_0.w_1" in got
    for name, value in one.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(np.concatenate(losses).reshape(3, places).mean(axis=1),
                               np.concatenate(one_losses), rtol=1e-5)
    # without it each place's statistics are its own part's: the parameters differ
    _, apart = _train(places, steps=3, bn=True)
    assert not np.allclose(apart["batch_norm_0.w_1"], one["batch_norm_0.w_1"])


def test_a_failing_place_stops_the_places_waiting_for_its_statistics():
    # place 1 fails before its batch norm; place 0, already waiting for place 1's statistics,
    # is woken, and the error raised is place 1's own
    def feeds(step):
        whole = _feed(step)
        parts = [{k: v[:4] for k, v in whole.items()}, {k: v[4:] for k, v in whole.items()}]
        parts[1]["x"] = parts[1]["x"][:, :3]  # the wrong width for fc
        return parts

    # (layers.data is not checked at the feed, as in Fluid: fc's mul refuses the width)
    with pytest.raises(fluid.ExecutionError, match=r"op 'mul' .* failed.*size 4 is different "
                                                   r"from 3"):
        _sync_bn_train(2, steps=1, feed=feeds)


def test_bad_feeds_over_places_say_what_is_wrong():
    main, startup, loss = _net()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                        places=[fluid.CPUPlace()] * 4)
    with pytest.raises(ValueError, match="'x' has 3 samples, fewer than the 4 places"):
        exe.run(compiled, feed=_feed(0, batch=3), fetch_list=[loss], scope=scope)
    with pytest.raises(ValueError, match="same size as places: got 2 dicts for 4"):
        exe.run(compiled, feed=[_feed(0), _feed(1)], fetch_list=[loss], scope=scope)
    with pytest.raises(fluid.ExecutionError, match=r"op 'mul' .* failed.*size 4 is different "
                                                   r"from 5"):  # not checked at the feed
        exe.run(compiled, feed={**_feed(0), "x": np.zeros((8, 5), np.float32)},
                fetch_list=[loss], scope=scope)
    nameless = CompiledProgram(main).with_data_parallel(places=[fluid.CPUPlace()] * 2)
    with pytest.raises(ValueError, match="training over 2 places needs the loss"):
        exe.run(nameless, feed=_feed(0), fetch_list=[loss], scope=scope)
    # the scope is untouched by the refused runs: a good run still trains
    assert exe.run(compiled, feed=_feed(0), fetch_list=[loss], scope=scope)[0].shape == (4,)


def _transpiled_trainer(**config):
    main, startup, loss = _net(optimizer=lambda: fluid.optimizer.SGD(0.1))
    cfg = fluid.DistributeTranspilerConfig()
    for key, value in config.items():
        setattr(cfg, key, value)
    t = fluid.DistributeTranspiler(config=cfg)
    t.transpile(0, program=main, pservers="127.0.0.1:6170", trainers=1,
                startup_program=startup)
    return t, t.get_trainer_program(wait_port=False), loss


def test_a_transpiled_trainer_sends_the_places_summed_gradients_once():
    # the RPC and Dist ops run after every place's backward, once, on the summed gradients
    t, trainer, loss = _transpiled_trainer()
    step = MultiPlaceStep(trainer, [fluid.CPUPlace()] * 2, loss.name, "mean")
    compute = [op.type for op in step.compute.global_block().ops]
    comm = [op.type for op in step.optimize.global_block().ops]
    assert not {"send", "recv", "send_barrier", "fetch_barrier"} & set(compute)
    original = [op.type for op in trainer.global_block().ops
                if op.type in ("send", "send_barrier", "recv", "fetch_barrier")]
    assert [c for c in comm if c in original] == original  # same order
    assert set(step.grads) >= {"fc_0.w_0@GRAD", "fc_1.w_0@GRAD"}
    seed = next(op for op in step.compute.global_block().ops
                if op.type == "fill_constant" and op.output_arg_names == [loss.name + "@GRAD"])
    assert seed.attrs["value"] == 0.5  # CoeffNumDevice: the places' mean
    step.close()


def test_programs_tied_to_one_place_are_refused_over_places():
    t, _, loss = _transpiled_trainer()
    pserver = t.get_pserver_program("127.0.0.1:6170")
    with pytest.raises(NotImplementedError, match="listen_and_serv ops over 2 places"):
        MultiPlaceStep(pserver, [fluid.CPUPlace()] * 2, None, "mean")
    _, geo, loss = _transpiled_trainer(sync_mode=False, runtime_split_send_recv=True,
                                       geo_sgd_mode=True,
                                       geo_sgd_need_push_nums=2)
    with pytest.raises(NotImplementedError, match="GEO-SGD.*over 2 places"):
        MultiPlaceStep(geo, [fluid.CPUPlace()] * 2, loss.name, "mean")


def test_lod_feeds_split_by_whole_sequences():
    words = fluid.create_lod_tensor([[1, 2, 3], [4], [5, 6], [7, 8, 9, 10], [11]],
                                    [[3, 1, 2, 4, 1]], fluid.CPUPlace())
    parts = split_feed({"w": words, "y": np.arange(5).reshape(5, 1)}, 2)
    assert [p["w"].lod() for p in parts] == [[[0, 3, 4, 6]], [[0, 4, 5]]]
    assert np.array(parts[1]["w"]).ravel().tolist() == [7, 8, 9, 10, 11]
    assert [p["y"].ravel().tolist() for p in parts] == [[0, 1, 2], [3, 4]]
    two = fluid.LoDTensor()
    two.set(np.arange(7).reshape(7, 1), fluid.CPUPlace())
    two.set_recursive_sequence_lengths([[1, 2], [3, 1, 3]])
    halves = split_feed({"p": two}, 2)
    assert [h["p"].recursive_sequence_lengths() for h in halves] == [[[1], [3]], [[2], [1, 3]]]
    assert np.array(halves[1]["p"]).ravel().tolist() == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="has 5 sequences, fewer than the 6 places"):
        split_feed({"w": words}, 6)


def test_split_feed_follows_fluids_rule():
    parts = split_feed({"x": np.arange(10).reshape(10, 1), "s": np.float32(2)}, 4)
    assert [len(p["x"]) for p in parts] == [3, 3, 3, 1]  # ceil(10 / 4) rows a place
    assert all(p["s"] == 2 for p in parts)
    with pytest.raises(ValueError, match="4 samples, fewer than the 3 places"):
        split_feed({"x": np.zeros((4, 1))}, 3)  # 2 rows a place leaves the third empty


# -- ParallelExecutor ---------------------------------------------------------------------------


def test_parallel_executor_equals_compiled_program_and_shares_vars(monkeypatch):
    monkeypatch.setenv("CPU_NUM", "2")
    main, startup, loss = _net()
    test_program = main.clone(for_test=True)
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=scope)
    train = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main,
                                   scope=scope)
    test = fluid.ParallelExecutor(use_cuda=False, main_program=test_program,
                                  share_vars_from=train, scope=scope)
    assert train.device_count == 2
    losses = [train.run(fetch_list=[loss.name], feed=_feed(i))[0] for i in range(4)]
    _, compiled_params = _train(2)
    _assert_same_params({p.name: np.array(scope.vars[p.name]) for p in main.all_parameters()},
                        compiled_params)
    assert losses[0].shape == (2,)
    evaluated, = test.run(fetch_list=[loss.name], feed_dict=_feed(9))  # Fluid's old name
    assert evaluated.shape == (2,)
    # evaluation reads the trained parameters and changes nothing
    again, = test.run(fetch_list=[loss.name], feed=_feed(9))
    np.testing.assert_array_equal(evaluated, again)
    with pytest.raises(TypeError, match="share_vars_from should be ParallelExecutor"):
        fluid.ParallelExecutor(use_cuda=False, main_program=test_program,
                               share_vars_from=object())
    train.drop_local_exe_scopes()
    assert train.run(fetch_list=[loss.name], feed=_feed(5))[0].shape == (2,)
    train.close()
    test.close()


def test_parallel_executor_on_gpus_equals_cpu(device_xp):
    main, startup, loss = _net()
    scope = fluid.Scope()
    fluid.Executor(fluid.CUDAPlace(0)).run(startup, scope=scope)
    pe = fluid.ParallelExecutor(use_cuda=True, loss_name=loss.name, main_program=main,
                                scope=scope)
    for i in range(4):
        pe.run(fetch_list=[loss.name], feed=_feed(i))
    gpu = {p.name: np.asarray(scope.vars[p.name].get()) for p in main.all_parameters()}
    batch_places = pe.device_count
    pe.close()
    # the CPU reference over as many places: the same slices, the same sums
    _, cpu = _train(batch_places)
    _assert_same_params(gpu, cpu, rtol=1e-4, atol=1e-5)


def test_a_backward_pass_without_optimizer_is_scaled_over_places_too():
    # Fluid 1.8 scales the seeded loss gradient by 1/places (CoeffNumDevice) whether or not
    # an optimizer follows: after append_backward alone, loss@GRAD is 0.5 a place on 2 places
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data(name="x", shape=[-1, 3], dtype="float32")
        x.stop_gradient = False
        y = fluid.layers.fc(x, size=1, param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.Constant(1.0)))
        loss = fluid.layers.mean(y)
        fluid.backward.append_backward(loss)
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(startup, scope=scope)
    compiled = CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                        places=fluid.cpu_places(2))
    xg, lg = exe.run(compiled, feed={"x": np.ones((2, 3), np.float32)},
                     fetch_list=[x.name + "@GRAD", loss.name + "@GRAD"], scope=scope)
    np.testing.assert_array_equal(lg.ravel(), [0.5, 0.5])
    np.testing.assert_array_equal(xg, np.full((2, 3), 0.5, np.float32))
    # the program itself keeps its seed of 1
    seed = next(op for op in main.global_block().ops
                if op.output_arg_names == [loss.name + "@GRAD"])
    assert seed.attr("value") == 1.0
