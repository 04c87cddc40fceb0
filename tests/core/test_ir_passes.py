"""``multi_batch_merge_pass`` as Paddle's multi_batch_merge_pass.cc builds it: the forward and
backward ops repeated with per-repeat gradients, merged by ``sum`` and ``scale(1/n)``, the
optimizer run once; unknown passes are refused by name."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid.models import mlp


def _step(build_strategy=None, steps=2):
    spec = mlp(hidden=(8,), n_features=5, n_classes=3, opt=fluid.optimizer.Momentum(0.1, 0.9))
    exe, scope = fluid.Executor(), fluid.Scope()
    exe.run(spec.startup, scope=scope)
    prog = spec.main
    if build_strategy is not None:
        prog = fluid.CompiledProgram(spec.main).with_data_parallel(
            loss_name=spec.loss.name, build_strategy=build_strategy)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        feed = {"x": rng.standard_normal((4, 5)).astype(np.float32),
                "y": rng.integers(0, 3, (4, 1))}
        exe.run(prog, feed=feed, fetch_list=[spec.loss], scope=scope)
    return spec, prog, {n: np.array(scope.get(n)) for n in ("fc_0.w_0", "fc_1.b_0")}


def test_batch_merge_repeats_compute_and_merges_the_gradients():
    build = fluid.BuildStrategy()
    p = build._finalize_strategy_and_create_passes().insert_pass(0, "multi_batch_merge_pass")
    p.set("num_repeats", 3)
    spec, compiled, merged = _step(build)
    _, _, plain = _step()
    # every repeat reads the same feed, so the merged gradient is the plain one
    for name in plain:
        np.testing.assert_allclose(merged[name], plain[name], rtol=1e-5, atol=1e-6)
    ran = compiled._to_run.global_block().ops
    merged_ops = [op for op in ran if op.attrs.get("op_role") == 1
                  and op.type in ("sum", "scale") and (
                      op.output_arg_names[0] in [f"{q.name}@GRAD" for q in
                                                 spec.main.global_block().all_parameters()])]
    n_compute = sum(1 for op in spec.main.global_block().ops
                    if op.attrs["op_role"] in (0, 1, 256, 257))
    assert sum(1 for op in ran if op.attrs["op_role"] in (0, 1, 256, 257)) == \
        3 * n_compute + len(merged_ops)
    types = [op.type for op in ran]
    grads = [op for op in ran if op.type == "scale" and op.attrs.get("op_role_var")]
    assert {op.attrs["op_role_var"][1] for op in grads} == {
        f"{p.name}@GRAD" for p in spec.main.global_block().all_parameters()}
    assert all(op.attrs["scale"] == pytest.approx(1 / 3) for op in grads)
    assert types.count("momentum") == len(grads)  # the optimizer runs once per parameter
    assert "fc_0.w_0@GRAD.repeat.2" in compiled._to_run.global_block().vars
    assert spec.main.global_block().ops[0].type == ran[0].type  # the original is untouched


def test_an_unknown_pass_is_refused_by_name():
    builder = fluid.BuildStrategy()._finalize_strategy_and_create_passes()
    with pytest.raises(NotImplementedError, match="IR pass 'fuse_relu_depthwise_conv_pass'"):
        builder.insert_pass(0, "fuse_relu_depthwise_conv_pass")
