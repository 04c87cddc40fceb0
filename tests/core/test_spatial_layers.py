"""``layers.affine_grid``, ``grid_sampler``, ``temporal_shift``, ``unfold``,
``pad_constant_like``, ``fsp_matrix`` and ``similarity_focus`` as Fluid 1.8 builds them: op
types, slots, attributes and static shapes, values against numpy through the executor, the
errors Fluid gives, and a spatial transformer's parameter gradients against central
differences."""

from __future__ import annotations

import numpy as np
import pytest

import dask_fluid as fluid
from dask_fluid import layers

from .numeric_grad import program_grads_and_numeric


def _run(main, startup, feed, fetch):
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def _ops(main, op_type):
    return [o for o in main.global_block().ops if o.type == op_type]


def _base_grid(h, w):
    xs, ys = np.linspace(-1, 1, w), np.linspace(-1, 1, h)
    return np.stack([np.broadcast_to(xs, (h, w)), np.broadcast_to(ys[:, None], (h, w)),
                     np.ones((h, w))], axis=-1)


def _bilinear(img, grid):
    """Explicit loops: 1.8's grid_sampler (corners at ±1, zero outside)."""
    n, c, h, w = img.shape
    out = np.zeros_like(img)
    for b in range(n):
        for i in range(h):
            for j in range(w):
                px = (grid[b, i, j, 0] + 1) * (w - 1) / 2
                py = (grid[b, i, j, 1] + 1) * (h - 1) / 2
                for yy in (int(np.floor(py)), int(np.floor(py)) + 1):
                    for xx in (int(np.floor(px)), int(np.floor(px)) + 1):
                        if 0 <= xx < w and 0 <= yy < h:
                            out[b, :, i, j] += (img[b, :, yy, xx] * (1 - abs(px - xx))
                                                * (1 - abs(py - yy)))
    return out


def test_affine_grid_and_grid_sampler_structure_and_values():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        theta = layers.data("theta", [2, 3])
        img = layers.data("img", [2, 4, 5])
        shape_t = layers.data("shape", [4], dtype="int32", append_batch_size=False)
        grid = layers.affine_grid(theta, [3, 2, 4, 5])
        dyn = layers.affine_grid(theta, shape_t)
        out = layers.grid_sampler(img, grid)
    ag = _ops(main, "affine_grid")
    assert ag[0].input("Theta") == [theta.name] and ag[0].attr("output_shape") == [3, 2, 4, 5]
    assert "OutputShape" not in ag[0].inputs or not ag[0].input("OutputShape")
    assert ag[1].input("OutputShape") == [shape_t.name]
    assert tuple(grid.shape) == (-1, 4, 5, 2) and tuple(dyn.shape) == (-1, -1, -1, 2)
    gs = _ops(main, "grid_sampler")[0]
    assert gs.input("X") == [img.name] and gs.input("Grid") == [grid.name]
    assert gs.output("Output") == [out.name] and tuple(out.shape) == (-1, 2, 4, 5)
    rng = np.random.default_rng(3)
    tv = (np.array([[1.0, 0, 0], [0, 1.0, 0]]) + 0.3 * rng.standard_normal((3, 2, 3)))
    tv = tv.astype(np.float32)
    iv = rng.standard_normal((3, 2, 4, 5)).astype(np.float32)
    g, d, o = _run(main, startup, {"theta": tv, "img": iv,
                                   "shape": np.array([3, 2, 4, 5], np.int32)}, [grid, dyn, out])
    want = np.einsum("hwk,njk->nhwj", _base_grid(4, 5), tv.astype(np.float64))
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(d, g)
    np.testing.assert_allclose(o, _bilinear(iv.astype(np.float64), g.astype(np.float64)),
                               rtol=1e-4, atol=1e-5)


def test_affine_grid_and_grid_sampler_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        theta = layers.data("theta", [2, 3])
        img = layers.data("img", [2, 4, 5])
        with pytest.raises(ValueError, match="out_shape must be a list of 4 ints"):
            layers.affine_grid(theta, [4, 5])
        with pytest.raises(ValueError, match="out_shape must be a list, tuple or Variable"):
            layers.affine_grid(theta, "4x5")
        with pytest.raises(TypeError, match="out_shape .* must have dtype in \\['int32'\\]"):
            layers.affine_grid(theta, layers.data("s64", [4], dtype="int64"))
        with pytest.raises(ValueError, match="must have shape \\[N, 2, 3\\]"):
            layers.affine_grid(layers.data("t33", [3, 3]), [1, 1, 4, 5])
        with pytest.raises(TypeError, match="theta must be a Variable"):
            layers.affine_grid(np.zeros((1, 2, 3)), [1, 1, 4, 5])
        grid = layers.affine_grid(theta, [1, 1, 5, 5])
        with pytest.raises(ValueError, match="must have x's H \\(4\\): the output has x's shape"):
            layers.grid_sampler(img, grid)
        with pytest.raises(ValueError, match="must be 4-D NCHW"):
            layers.grid_sampler(layers.data("flat", [4, 5]), grid)
        with pytest.raises(TypeError, match="x 'i32' must have dtype in"):
            layers.grid_sampler(layers.data("i32", [2, 5, 5], dtype="int32"), grid)


def test_temporal_shift_structure_values_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [4, 2, 2])
        out = layers.temporal_shift(x, seg_num=2, shift_ratio=0.25, name="ts")
        with pytest.raises(TypeError, match="seg_num must be an int"):
            layers.temporal_shift(x, 2.0)
        with pytest.raises(TypeError, match="shift_ratio must be a float"):
            layers.temporal_shift(x, 2, shift_ratio=1)
        with pytest.raises(ValueError, match="shift_ratio must be in \\(0, 0.5\\)"):
            layers.temporal_shift(x, 2, shift_ratio=0.6)
        with pytest.raises(ValueError, match="must be 4-D"):
            layers.temporal_shift(layers.data("y", [4, 2]), 2)
    op = _ops(main, "temporal_shift")[0]
    assert op.attr("seg_num") == 2 and op.attr("shift_ratio") == 0.25
    assert op.input("X") == [x.name] and tuple(out.shape) == (-1, 4, 2, 2)
    xv = np.arange(4 * 4 * 2 * 2, dtype=np.float32).reshape(4, 4, 2, 2)
    (got,) = _run(main, startup, {"x": xv}, [out])
    want = np.zeros_like(xv).reshape(2, 2, 4, 2, 2)
    x5 = xv.reshape(2, 2, 4, 2, 2)
    for n in range(2):
        for t in range(2):
            want[n, t, 0] = x5[n, t - 1, 0] if t - 1 >= 0 else 0  # channel 0: from t - 1
            want[n, t, 1] = x5[n, t + 1, 1] if t + 1 < 2 else 0  # channel 1: from t + 1
            want[n, t, 2:] = x5[n, t, 2:]
    np.testing.assert_array_equal(got, want.reshape(xv.shape))


@pytest.mark.parametrize("paddings, attr", [(1, [1, 1, 1, 1]), ([1, 2], [1, 2, 1, 2]),
                                            ([0, 1, 2, 0], [0, 1, 2, 0])])
def test_unfold_expands_fluids_arguments(paddings, attr):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = layers.data("x", [2, 5, 4])
        y = layers.unfold(x, [2, 3], strides=[1, 2], paddings=paddings, dilations=1)
    op = _ops(main, "unfold")[0]
    assert op.attr("kernel_sizes") == [2, 3] and op.attr("strides") == [1, 2]
    assert op.attr("paddings") == attr and op.attr("dilations") == [1, 1]
    oh = (5 + attr[0] + attr[2] - 2) // 1 + 1
    ow = (4 + attr[1] + attr[3] - 3) // 2 + 1
    assert tuple(y.shape) == (-1, 2 * 6, oh * ow)
    xv = np.random.default_rng(1).standard_normal((2, 2, 5, 4)).astype(np.float32)
    (got,) = _run(main, startup, {"x": xv}, [y])
    padded = np.pad(xv, ((0, 0), (0, 0), (attr[0], attr[2]), (attr[1], attr[3])))
    want = np.zeros((2, 2, 2, 3, oh, ow), np.float32)
    for i in range(2):
        for j in range(3):
            want[:, :, i, j] = padded[:, :, i:i + oh, j:j + 2 * (ow - 1) + 1:2]
    np.testing.assert_array_equal(got, want.reshape(2, 12, oh * ow))


def test_unfold_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = layers.data("x", [2, 5, 4])
        with pytest.raises(ValueError, match="paddings must be an int or a list of 2 or 4"):
            layers.unfold(x, 2, paddings=[1, 1, 1])
        with pytest.raises(ValueError, match="kernel_sizes must be an int or a list of two"):
            layers.unfold(x, [2, 2, 2])
        with pytest.raises(ValueError, match="strides must be greater than zero"):
            layers.unfold(x, 2, strides=0)
        with pytest.raises(ValueError, match="which must be positive"):
            layers.unfold(x, 6)
        with pytest.raises(ValueError, match="must be 4-D"):
            layers.unfold(layers.data("z", [5, 4]), 2)


def test_pad_constant_like_fsp_matrix_similarity_focus():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        big = layers.data("big", [3, 4])
        small = layers.data("small", [2, 3])
        padded = layers.pad_constant_like(big, small, pad_value=-2.0)
        a = layers.data("a", [3, 2, 3])
        b = layers.data("b", [4, 2, 3])
        fsp = layers.fsp_matrix(a, b)
        mask = layers.similarity_focus(a, axis=1, indexes=[0, 2])
        with pytest.raises(ValueError, match="dim 2 of x \\(3\\) must be >= that of y \\(5\\)"):
            layers.pad_constant_like(small, layers.data("wide", [2, 5]))
        with pytest.raises(ValueError, match="same height and width"):
            layers.fsp_matrix(a, layers.data("c", [4, 3, 2]))
        with pytest.raises(ValueError, match="axis must be 1, 2 or 3"):
            layers.similarity_focus(a, axis=0, indexes=[0])
        with pytest.raises(ValueError, match="indexes can not be empty"):
            layers.similarity_focus(a, axis=1, indexes=[])
        with pytest.raises(ValueError, match="each of indexes must be in \\[0, dim 1"):
            layers.similarity_focus(a, axis=1, indexes=[3])
        with pytest.raises(TypeError, match="indexes must be a list of ints"):
            layers.similarity_focus(a, axis=1, indexes=(0,))
    pcl = _ops(main, "pad_constant_like")[0]
    assert pcl.input("X") == [big.name] and pcl.input("Y") == [small.name]
    assert pcl.attr("pad_value") == -2.0 and tuple(padded.shape) == (-1, 3, 4)
    op = _ops(main, "fsp")[0]
    assert op.input("X") == [a.name] and op.input("Y") == [b.name]
    assert tuple(fsp.shape) == (-1, 3, 4)
    sf = _ops(main, "similarity_focus")[0]
    assert sf.attr("axis") == 1 and sf.attr("indexes") == [0, 2]
    assert tuple(mask.shape) == (-1, 3, 2, 3)
    rng = np.random.default_rng(2)
    feed = {"big": np.zeros((2, 3, 4), np.float32),
            "small": rng.standard_normal((1, 2, 3)).astype(np.float32),
            "a": rng.permutation(36).reshape(2, 3, 2, 3).astype(np.float32),
            "b": rng.standard_normal((2, 4, 2, 3)).astype(np.float32)}
    p, f, m = _run(main, startup, feed, [padded, fsp, mask])
    want = np.full((2, 3, 4), -2.0, np.float32)
    want[:1, :2, :3] = feed["small"]
    np.testing.assert_array_equal(p, want)
    np.testing.assert_allclose(f, np.einsum("nihw,njhw->nij", feed["a"], feed["b"]) / 6,
                               rtol=1e-5)
    want_m = np.zeros((2, 3, 2, 3), np.float32)
    for n in range(2):
        for idx in (0, 2):
            plane = feed["a"][n, idx].copy()
            for _ in range(2):  # min(2, 3) picks, each the largest with a free row and column
                r, c = np.unravel_index(np.argmax(plane), plane.shape)
                want_m[n, :, r, c] = 1
                plane[r, :] = plane[:, c] = -np.inf
    np.testing.assert_array_equal(m, want_m)


def test_gradients_through_a_spatial_transformer():
    """fc → affine_grid → grid_sampler → unfold → fc, plus fsp_matrix, temporal_shift and
    pad_constant_like on the side: the parameters' gradients equal central differences."""
    rng = np.random.default_rng(11)
    feat = rng.standard_normal((2, 3))
    img = rng.standard_normal((2, 2, 4, 4))
    small = rng.standard_normal((2, 2, 3, 3))

    def build():
        fv = layers.data("feat", [3], dtype="float64")
        iv = layers.data("img", [2, 4, 4], dtype="float64")
        sv = layers.data("small", [2, 3, 3], dtype="float64")
        theta = layers.reshape(layers.fc(fv, 6, param_attr="loc_w", bias_attr="loc_b"),
                               [-1, 2, 3])
        grid = layers.affine_grid(theta, [2, 2, 4, 4])
        warped = layers.grid_sampler(iv, grid)  # [N, 2, 4, 4]
        shifted = layers.temporal_shift(warped, seg_num=2, shift_ratio=0.25)
        cols = layers.unfold(shifted, [2, 2], strides=2, paddings=[0, 1])  # [N, 8, 6]
        head = layers.fc(cols, 1, num_flatten_dims=2, param_attr="head_w", bias_attr=False)
        mixed = layers.pad_constant_like(warped, layers.scale(sv, 1.0), pad_value=0.5)
        fsp = layers.fsp_matrix(warped, layers.elementwise_mul(mixed, warped))
        return layers.elementwise_add(layers.reduce_sum(head), layers.reduce_sum(fsp))

    got = program_grads_and_numeric(build, {"feat": feat, "img": img, "small": small},
                                    ["loc_w", "loc_b", "head_w"])
    for name, (analytic, numeric) in got.items():
        np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
        assert np.abs(analytic).sum() > 0, name  # every parameter reaches the loss
