"""Where a pserver job starts, on a real cluster: resuming from a checkpoint reaches exactly
the parameters of the uninterrupted run (Adam: the optimizer state is restored too);
``initial_values`` (and the estimators' ``warm_start``) continue a job as one longer job."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

import dask_fluid as fluid
from dask_fluid.distributed import train_pserver
from dask_fluid.distributed.pserver.checkpoint import CheckpointWarning, find_checkpoint

from ..transpiler.models import reference_mlp


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as c:
        yield c


def _train(client, parts, **kw):
    main, startup, loss = reference_mlp(optimizer=lambda: fluid.optimizer.Adam(0.01))
    kw = {"pservers": 2, "batch_size": 16, "epochs": 2, **kw}
    return train_pserver(client, main, startup, parts, fetch_list=[loss], seed=5, **kw)


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(client, tmp_path):
    rng = np.random.default_rng(0)
    # uneven: 4 and 3 steps per epoch, so the resume point is inside the ragged tail
    parts = [{"x": rng.normal(size=(n, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (n, 1))} for n in (64, 48)]
    full = _train(client, parts, checkpoint_dir=str(tmp_path), checkpoint_every=3)
    rounds = sorted(p.name for p in tmp_path.iterdir())
    assert rounds == ["round-00000002", "round-00000005"]
    assert not list(tmp_path.rglob(".*tmp*"))
    info = find_checkpoint(tmp_path / "round-00000002")
    assert (info.epoch, info.step, info.n_pservers) == (0, 2, 2)
    resumed = _train(client, parts, resume_from=str(tmp_path / "round-00000002"))
    assert resumed.steps == 1 + 4  # trainer 0: step 3 of epoch 0, then all of epoch 1
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    latest = _train(client, parts, resume_from=str(tmp_path))  # the latest round: 5
    for name, value in full.params.items():
        np.testing.assert_array_equal(latest.params[name], value, err_msg=name)


def test_resume_with_other_data_is_refused(client, tmp_path):
    rng = np.random.default_rng(1)
    parts = [{"x": rng.normal(size=(32, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (32, 1))} for _ in range(2)]
    _train(client, parts, checkpoint_dir=str(tmp_path), checkpoint_every="epoch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round-00000001", "round-00000003"]
    with pytest.raises(ValueError, match="resume with the same data"):
        _train(client, [parts[0], parts[1]], resume_from=str(tmp_path), batch_size=8)
    with pytest.raises(FileNotFoundError, match="no intact pserver checkpoint"):
        _train(client, parts, resume_from=str(tmp_path / "nothing"))


def test_a_truncated_latest_round_falls_back_to_the_previous_intact_one(client, tmp_path):
    rng = np.random.default_rng(2)
    parts = [{"x": rng.normal(size=(n, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (n, 1))} for n in (64, 48)]
    full = _train(client, parts, checkpoint_dir=str(tmp_path), checkpoint_every=3)
    npz = tmp_path / "round-00000005" / "pserver-1.npz"
    npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])  # a copy cut short
    with pytest.warns(CheckpointWarning, match=r"resuming from round-00000002: skipped the "
                      r"damaged round\(s\) round-00000005 \(pserver-1.npz has \d+ bytes"):
        info = find_checkpoint(tmp_path)
    assert info.round == 2 and [d.name for d, _ in info.skipped] == ["round-00000005"]
    with pytest.warns(CheckpointWarning):
        resumed = _train(client, parts, resume_from=str(tmp_path))
    for name, value in full.params.items():  # from round 2, to the same end
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    # naming the damaged round itself is an error that says why, not a late BadZipFile
    with pytest.raises(ValueError, match="round-00000005.* is damaged: pserver-1.npz has"):
        find_checkpoint(tmp_path / "round-00000005")
    # a flipped byte of the same size is caught by the checksum
    data = bytearray((tmp_path / "round-00000002" / "pserver-0.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "round-00000002" / "pserver-0.npz").write_bytes(bytes(data))
    with pytest.raises(FileNotFoundError, match="round-00000002 is damaged: pserver-0.npz does "
                       "not match the checksum"):
        find_checkpoint(tmp_path)


def _bn_net():
    """reference_mlp's input and loss around fc(32) -> batch_norm -> relu -> fc(10), Adam:
    batch norm's moving statistics stay on the trainers, everything else on the pservers."""
    layers = fluid.layers
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = 1
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [64])
        y = layers.data("y", [1], dtype="int64")
        h = layers.batch_norm(layers.fc(x, 32), act="relu")
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, 10), y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("net", ["reference_mlp", "batch_norm"])
def test_initial_values_continue_a_job_as_one_longer_job(client, net):
    rng = np.random.default_rng(3)
    parts = [{"x": rng.normal(size=(n, 64)).astype(np.float32),
              "y": rng.integers(0, 10, (n, 1))} for n in (64, 48)]
    program = _bn_net if net == "batch_norm" else None

    def train(**kw):
        if program is None:
            return _train(client, parts, shuffle=False, **kw)
        main, startup, loss = program()
        kw = {"pservers": 2, "batch_size": 16, "epochs": 2, "shuffle": False, **kw}
        return train_pserver(client, main, startup, parts, fetch_list=[loss], seed=5, **kw)

    # without shuffling, epoch e visits the same batches in every job: 1 + 1 epochs from the
    # first job's parameters, Adam state and batch norm statistics equal 2 epochs
    two = train()
    first = train(epochs=1)
    # the result is the whole state, put together from the pservers' blocks
    moment = "fc_0.w_0_moment1_0"
    assert first.params[moment].shape == first.params["fc_0.w_0"].shape
    assert np.abs(first.params[moment]).max() > 0
    second = train(epochs=1, initial_values=first.params)
    assert sorted(second.params) == sorted(two.params)
    for name, value in two.params.items():
        np.testing.assert_allclose(second.params[name], value, rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    if net == "batch_norm":
        stats = [n for n in two.params if "batch_norm" in n and ".w_1" in n]
        assert stats and not np.allclose(first.params[stats[0]], two.params[stats[0]])
    with pytest.raises(ValueError, match=r"not persistable variables of the program"):
        train(initial_values={"nothing": np.zeros(3)})
    with pytest.raises(ValueError, match=r"initial_values\['fc_0.w_0'\] has shape \[3\]"):
        train(initial_values={"fc_0.w_0": np.zeros(3)})
    with pytest.raises(ValueError, match="initial_values and resume_from both"):
        train(initial_values=first.params, resume_from="somewhere")


def test_a_pserver_estimator_warm_starts(client):
    from dask_fluid.estimators import MLPClassifier

    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(112, 64)).astype(np.float32), rng.integers(0, 10, 112)
    kw = {"mode": "pserver", "n_pservers": 2, "batch_size": 16, "random_state": 0,
          "shuffle": False, "client": client}
    two = MLPClassifier((300,), max_iter=2, **kw).fit(x, y)
    warm = MLPClassifier((300,), max_iter=1, warm_start=True, **kw).fit(x, y)
    warm.fit(x, y)  # the second epoch, from the first one's parameters and Adam state
    for a, b in zip(warm.coefs_ + warm.intercepts_, two.coefs_ + two.intercepts_, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert "block" in warm.fit_summary_  # the first layer was sliced over the pservers
