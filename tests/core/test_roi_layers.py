"""``layers.roi_pool``, ``roi_align``, ``psroi_pool`` and ``prroi_pool`` as Fluid 1.8 builds
them: op types, slots, attributes and static shapes; values through the executor with the ROIs
fed as LoD tensors, against the kernel-loop references of tests/ops/test_roi_ops.py; Fluid's
errors; and a whole program's gradients (conv2d → roi_align → fc) against central
differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from ..ops.test_roi_ops import ref_prroi_pool, ref_psroi_pool, ref_roi_align, ref_roi_pool
from .numeric_grad import program_grads_and_numeric

ROIS = np.array([[0.3, 0.6, 3.4, 4.2], [1.2, 0.2, 4.3, 5.6], [0.1, 1.3, 2.2, 2.9]], np.float32)


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_layers_build_fluids_ops_and_shapes():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [12, 6, 5])
        rois = layers.data("rois", [4], lod_level=1)
        nums = layers.data("nums", [2], dtype="int64", append_batch_size=False)
        pooled = layers.roi_pool(x, rois, 2, 3, 0.5)
        aligned = layers.roi_align(x, rois, pooled_height=3, pooled_width=2,
                                   spatial_scale=0.25, sampling_ratio=2)
        ps = layers.psroi_pool(x, rois, 2, 1.0, 2, 3)
        pr = layers.prroi_pool(x, rois, 0.5, 2, 2, batch_roi_nums=nums)
    ops = {o.type: o for o in main.global_block().ops}
    assert list(ops) == ["roi_pool", "roi_align", "psroi_pool", "prroi_pool"]
    rp = ops["roi_pool"]
    assert rp.input("X") == [x.name] and rp.input("ROIs") == [rois.name]
    assert rp.output("Out") == [pooled.name]
    argmax = main.global_block().var(rp.output("Argmax")[0])
    assert argmax.dtype == "int64" and argmax.stop_gradient
    assert (rp.attr("pooled_height"), rp.attr("pooled_width")) == (2, 3)
    assert rp.attr("spatial_scale") == 0.5
    ra = ops["roi_align"]
    assert ra.attr("sampling_ratio") == 2 and ra.attr("spatial_scale") == 0.25
    assert ra.output("Out") == [aligned.name]
    assert ops["psroi_pool"].attr("output_channels") == 2
    assert ops["prroi_pool"].input("BatchRoINums") == [nums.name]
    assert pooled.shape == (-1, 12, 2, 3) and aligned.shape == (-1, 12, 3, 2)
    assert ps.shape == (-1, 2, 2, 3) and pr.shape == (-1, 12, 2, 2)
    assert not main.global_block().all_parameters()
    assert roi_align_default_attrs() == {"pooled_height": 1, "pooled_width": 1,
                                         "spatial_scale": 1.0, "sampling_ratio": -1}


def roi_align_default_attrs():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        layers.roi_align(layers.data("x", [2, 4, 4]), layers.data("r", [4], lod_level=1))
    op = main.global_block().ops[0]
    return {k: op.attr(k) for k in ("pooled_height", "pooled_width", "spatial_scale",
                                    "sampling_ratio")}


def test_values_through_the_executor():
    rng = np.random.default_rng(0)
    xv = rng.random((2, 12, 6, 5)).astype(np.float32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = layers.data("x", [12, 6, 5])
        rois = layers.data("rois", [4], lod_level=1)
        flat = layers.data("flat", [4])
        nums = layers.data("nums", [2], dtype="int64", append_batch_size=False)
        outs = [layers.roi_pool(x, rois, 2, 3, 1.0),
                layers.roi_align(x, rois, 2, 2, 1.0, sampling_ratio=-1),
                layers.psroi_pool(x, rois, 2, 1.0, 2, 3),
                layers.prroi_pool(x, rois, 1.0, 2, 3),
                layers.prroi_pool(x, flat, 1.0, 2, 3, batch_roi_nums=nums)]
    place = fluid.CPUPlace()
    feed = {"x": xv, "rois": fluid.create_lod_tensor(ROIS, [[2, 1]], place), "flat": ROIS,
            "nums": np.array([2, 1], np.int64)}
    got = _run(main, startup, feed, outs)
    x64, r64, offsets = xv.astype(np.float64), ROIS.astype(np.float64), (0, 2, 3)
    want_pool, _ = ref_roi_pool(x64, ROIS, offsets, 2, 3, 1.0)
    np.testing.assert_allclose(got[0], want_pool, rtol=1e-6)
    np.testing.assert_allclose(got[1], ref_roi_align(x64, r64, offsets, 2, 2, 1.0, -1)[0],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[2], ref_psroi_pool(x64, r64, offsets, 2, 2, 3, 1.0)[0],
                               rtol=1e-5, atol=1e-6)
    want_pr = ref_prroi_pool(x64, r64, offsets, 2, 3, 1.0)[0]
    np.testing.assert_allclose(got[3], want_pr, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[4], want_pr, rtol=1e-5, atol=1e-6)
    assert all(g.dtype == np.float32 for g in got)


def test_rois_without_lod_fail_at_run_time():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        out = layers.roi_align(layers.data("x", [2, 4, 4]), layers.data("r", [4]))
    with pytest.raises(Exception, match="Input\\(ROIs\\) has no LoD"):
        _run(main, startup, {"x": np.zeros((1, 2, 4, 4), np.float32), "r": ROIS[:1]}, [out])


def test_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [245, 30, 30])
        rois = layers.data("rois", [4], lod_level=1)
        # test_prroi_pool_op.py's error cases: a non-float scale, non-int sizes
        with pytest.raises(TypeError, match="spatial_scale must be a float, got 2"):
            layers.prroi_pool(x, rois, 2, 7, 7)
        with pytest.raises(TypeError, match="pooled_height must be an int, got 0.7"):
            layers.prroi_pool(x, rois, 0.25, 0.7, 7)
        with pytest.raises(TypeError, match="pooled_width must be an int, got 0.7"):
            layers.prroi_pool(x, rois, 0.25, 7, 0.7)
        with pytest.raises(TypeError, match="rois must be a Variable, got list"):
            layers.prroi_pool(x, [[1, 2, 3, 4]], 0.25, 2, 2)
        bad = layers.data("bad", [2, 3, 16, 16], dtype="int64", append_batch_size=False)
        with pytest.raises(TypeError, match="prroi_pool: input 'bad' must be float32"):
            layers.prroi_pool(bad, rois, 0.25, 2, 2)
        with pytest.raises(TypeError, match="roi_pool: input 'bad' must be float32"):
            layers.roi_pool(bad, rois)
        with pytest.raises(TypeError, match="roi_align: rois 'bad' must be float32 or float64"):
            layers.roi_align(x, bad)
        # test_psroi_pool_op.py's: the same type checks
        with pytest.raises(TypeError, match="output_channels must be an int, got 0.5"):
            layers.psroi_pool(x, rois, 0.5, 1.0, 7, 7)
        with pytest.raises(TypeError, match="psroi_pool: spatial_scale must be a float, got 1"):
            layers.psroi_pool(x, rois, 5, 1, 7, 7)
        with pytest.raises(ValueError, match="has 245 channels; it must have output_channels "
                                             "× pooled_height × pooled_width = 98"):
            layers.psroi_pool(x, rois, 2, 1.0, 7, 7)
        with pytest.raises(ValueError, match="pooled_height must be greater than 0, got 0"):
            layers.roi_align(x, rois, pooled_height=0)
        with pytest.raises(ValueError, match="spatial_scale must be greater than 0, got -1"):
            layers.roi_pool(x, rois, spatial_scale=-1.0)
        with pytest.raises(ValueError, match="input 'flat' must be 4-D NCHW"):
            layers.roi_align(layers.data("flat", [4]), rois)
        with pytest.raises(ValueError, match="rois 'r5' must be 2-D \\[num_rois, 4\\]"):
            layers.roi_align(x, layers.data("r5", [5]))
        with pytest.raises(TypeError, match="sampling_ratio must be an int"):
            layers.roi_align(x, rois, sampling_ratio=2.0)
        with pytest.raises(TypeError, match="batch_roi_nums 'n32' must be int64"):
            layers.prroi_pool(x, rois, 1.0, batch_roi_nums=layers.data("n32", [1],
                                                                        dtype="int32"))


def test_gradients_through_conv2d_roi_align_fc():
    """conv2d → roi_align (two images, three ROIs, one reaching outside) → fc → a weighted
    sum: the parameters' gradients equal central differences of the loss."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 7, 6))
    weights = rng.standard_normal((3, 4))
    rois = fluid.create_lod_tensor(
        np.array([[0.3, 0.6, 3.4, 4.2], [1.2, 0.2, 4.3, 5.6], [-1.3, 2.7, 5.6, 7.4]]),
        [[2, 1]], fluid.CPUPlace())

    def build():
        xv = layers.data("x", [2, 7, 6], dtype="float64")
        rv = layers.data("rois", [4], dtype="float64", lod_level=1)
        wv = layers.data("wt", [3, 4], dtype="float64", append_batch_size=False)
        h = layers.conv2d(xv, 3, 2, param_attr="filt", bias_attr="cb")  # [N, 3, 6, 5]
        h = layers.roi_align(h, rv, pooled_height=2, pooled_width=2, spatial_scale=1.0,
                             sampling_ratio=2)  # [3, 3, 2, 2]
        h = layers.fc(h, 4, param_attr="fcw", bias_attr="fcb")  # [3, 4]
        return layers.reduce_sum(layers.elementwise_mul(h, wv))

    got = program_grads_and_numeric(build, {"x": x, "rois": rois, "wt": weights},
                                    ["filt", "cb", "fcw", "fcb"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
    assert np.abs(got["filt"][0]).sum() > 0  # the conv filter reaches the loss via roi_align
