"""Where a collective job starts, on a real cluster (2 ring ranks on worker processes):
resuming from a checkpoint reaches exactly the parameters of the uninterrupted run (Adam's
state included), a step's files are what ``fluid.io.load_persistables`` reads, damaged or
foreign checkpoints are refused or skipped with a reason; ``initial_values`` (and the
estimators' ``warm_start``) continue a job as one longer job."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.distributed import train_collective
from dask_fluid.distributed.checkpoint_files import CheckpointWarning
from dask_fluid.distributed.collective.checkpoint import find_step_checkpoint, read_step

from ..transpiler.models import reference_mlp

RNG = np.random.default_rng(0)
# 56 rows per rank, batch 16: 4 steps per epoch, the last one ragged
DATA = {"x": RNG.normal(size=(112, 64)).astype(np.float32), "y": RNG.integers(0, 10, (112, 1))}


def _fit(client, data=DATA, program=None, **kw):
    main, startup, loss = program or reference_mlp(
        optimizer=lambda: fluid.optimizer.Adam(0.01))
    kw = {"trainers": 2, "backend": "ring", "epochs": 2, "batch_size": 16, **kw}
    return train_collective(client, main, startup, data, fetch_list=[loss], seed=5, **kw)


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(dist_client, tmp_path):
    full = _fit(dist_client, checkpoint_dir=tmp_path, checkpoint_every=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000002", "step-00000005"]
    info = find_step_checkpoint(tmp_path / "step-00000002")
    assert (info.step, info.epoch, info.meta["steps_per_epoch"]) == (2, 0, 4)
    assert info.meta["global_batch"] == 32 and len(info.meta["ranks"]) == 2
    # Adam's moments, its beta powers and the learning rate are saved with the parameters
    assert {"fc_0.w_0", "learning_rate_0"} <= set(info.names)
    assert any("moment1" in n for n in info.names) and any("beta1_pow" in n for n in info.names)
    resumed = _fit(dist_client, resume_from=tmp_path / "step-00000002")
    assert resumed.steps == 5  # steps 3 to 7
    assert [e["step"] for e in resumed.history if e["rank"] == 0] == list(range(3, 8))
    for name, value in full.params.items():
        np.testing.assert_array_equal(resumed.params[name], value, err_msg=name)
    latest = _fit(dist_client, resume_from=tmp_path)  # its latest step: 5
    assert latest.steps == 2
    for name, value in full.params.items():
        np.testing.assert_array_equal(latest.params[name], value, err_msg=name)


def test_a_step_is_fluid_files_that_load_persistables_reads(dist_client, tmp_path):
    main, startup, loss = reference_mlp(optimizer=lambda: fluid.optimizer.Adam(0.01))
    full = _fit(dist_client, program=(main, startup, loss), checkpoint_dir=tmp_path,
                checkpoint_every="epoch")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000003", "step-00000007"]
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        fluid.io.load_persistables(exe, str(tmp_path / "step-00000007"), main)
    for name, value in full.params.items():  # the last epoch's end is the job's end
        np.testing.assert_array_equal(np.asarray(scope.find_var(name).get_tensor()), value,
                                      err_msg=name)


def test_damaged_and_foreign_checkpoints_are_refused_or_skipped(dist_client, tmp_path):
    _fit(dist_client, checkpoint_dir=tmp_path, checkpoint_every=3)
    weight = tmp_path / "step-00000005" / "fc_0.w_0"
    weight.write_bytes(weight.read_bytes()[: weight.stat().st_size // 2])  # a copy cut short
    with pytest.warns(CheckpointWarning, match=r"resuming from step-00000002: skipped the "
                      r"damaged step\(s\) step-00000005 \(fc_0.w_0 has \d+ bytes"):
        info = find_step_checkpoint(tmp_path)
    assert info.step == 2 and [d.name for d, _ in info.skipped] == ["step-00000005"]
    with pytest.raises(ValueError, match="step-00000005.* is damaged: fc_0.w_0 has"):
        find_step_checkpoint(tmp_path / "step-00000005")
    data = bytearray((tmp_path / "step-00000002" / "fc_0.b_0").read_bytes())
    data[-1] ^= 0xFF  # same size, another value: the checksum
    (tmp_path / "step-00000002" / "fc_0.b_0").write_bytes(bytes(data))
    with pytest.raises(FileNotFoundError, match="step-00000002 is damaged: fc_0.b_0 does not "
                       "match the checksum"):
        _fit(dist_client, resume_from=tmp_path)
    with pytest.raises(FileNotFoundError, match="no intact collective checkpoint"):
        _fit(dist_client, resume_from=tmp_path / "nothing")


def test_resume_with_other_steps_or_another_program_is_refused(dist_client, tmp_path):
    _fit(dist_client, epochs=1, checkpoint_dir=tmp_path, checkpoint_every=2)
    with pytest.raises(ValueError, match="taken at 4 steps per epoch; this job takes 2"):
        _fit(dist_client, resume_from=tmp_path, batch_size=32)

    def other():  # another hidden layer: other parameter names
        main, startup = fluid.Program(), fluid.Program()
        with fluid.unique_name.guard(), fluid.program_guard(main, startup):
            x = fluid.layers.data("x", [64])
            y = fluid.layers.data("y", [1], dtype="int64")
            h = fluid.layers.fc(x, 32, act="relu", name="other")
            loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
                fluid.layers.fc(h, 10, name="head"), y))
            fluid.optimizer.SGD(0.1).minimize(loss)
        return main, startup, loss

    with pytest.raises(ValueError, match="lacks the program's parameter"):
        _fit(dist_client, program=other(), resume_from=tmp_path)
    # the arrays match the JSON it recorded
    info = find_step_checkpoint(tmp_path)
    meta = json.loads((info.path / "checkpoint.json").read_text())
    assert {n: list(v.shape) for n, v in read_step(info).items()} == \
        {n: rec["shape"] for n, rec in meta["files"].items()}


@pytest.mark.parametrize("kw, message", [
    ({"checkpoint_every": 3}, "checkpoint_every needs checkpoint_dir"),
    ({"checkpoint_dir": "/tmp/x"}, "checkpoint_dir needs checkpoint_every"),
    ({"checkpoint_dir": "/tmp/x", "checkpoint_every": 0}, "checkpoint_every = 0 is not allowed"),
    ({"checkpoint_dir": "/tmp/x", "checkpoint_every": "step"},
     "checkpoint_every = 'step' is not allowed"),
])
def test_bad_checkpoint_arguments_are_refused_before_any_work(dist_client, kw, message):
    with pytest.raises(ValueError, match=message):
        _fit(dist_client, **kw)


def test_a_collective_estimator_writes_checkpoints(dist_client, tmp_path):
    from dask_fluid.estimators import MLPClassifier

    clf = MLPClassifier((16,), mode="collective", backend="ring", max_iter=2, batch_size=16,
                        random_state=0,
                        checkpoint_dir=str(tmp_path), checkpoint_every="epoch",
                        client=dist_client).fit(DATA["x"], DATA["y"].ravel())
    steps = sorted(p.name for p in tmp_path.iterdir())
    assert len(steps) == 2 and all(s.startswith("step-") for s in steps)
    final = read_step(find_step_checkpoint(tmp_path))
    np.testing.assert_array_equal(final["fc_0.w_0"], clf.coefs_[0])


def test_initial_values_continue_a_job_as_one_longer_job(dist_client):
    # without shuffling, epoch e visits the same batches in every job: 1 + 1 epochs from the
    # first job's parameters and Adam state equal 2 epochs
    two = _fit(dist_client, shuffle=False)
    first = _fit(dist_client, shuffle=False, epochs=1)
    second = _fit(dist_client, shuffle=False, epochs=1, initial_values=first.params)
    for name, value in two.params.items():
        np.testing.assert_allclose(second.params[name], value, rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    with pytest.raises(ValueError, match=r"not persistable variables of the program"):
        _fit(dist_client, initial_values={"nothing": np.zeros(3)})
    with pytest.raises(ValueError, match=r"initial_values\['fc_0.w_0'\] has shape \[3\]"):
        _fit(dist_client, initial_values={"fc_0.w_0": np.zeros(3)})


def test_a_collective_estimator_warm_starts(dist_client):
    from dask_fluid.estimators import MLPClassifier

    kw = {"mode": "collective", "backend": "ring", "batch_size": 16, "random_state": 0,
          "shuffle": False, "client": dist_client}
    x, y = DATA["x"], DATA["y"].ravel()
    two = MLPClassifier((16,), max_iter=2, **kw).fit(x, y)
    warm = MLPClassifier((16,), max_iter=1, warm_start=True, **kw).fit(x, y)
    warm.fit(x, y)  # the second epoch, from the first one's parameters and Adam state
    for a, b in zip(warm.coefs_ + warm.intercepts_, two.coefs_ + two.intercepts_, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
