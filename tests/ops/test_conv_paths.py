"""Each of the conv kernel's internal routes against plain loops, forward and both gradients.

The kernel picks a route from the shapes (``conv_ops``: column matrices of whole padded rows
or of output-width runs, the input gradient as a convolution or as a scatter, images taken in
batches of a byte budget); the limits are forced here so that every route runs on small
inputs, and each must give what the loops give, on numpy and on the device modules
(the real CuPy with a GPU, the strict CPU CuPy everywhere).
``batch_norm_grad``'s centred form is checked
where the mean is large against the spread (float32 against a float64 reference)."""

from __future__ import annotations

import numpy as np
import pytest

from dask_fluid.ops import conv_ops

from .. import strict_cupy
from . import conv2d_by_loops, run_op

rng = np.random.default_rng(7)


CASES = [  # x shape, filters, kernel, stride, pads, dilation, groups
    ((3, 4, 7, 6), 6, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    ((2, 3, 6, 8), 4, (3, 2), (1, 1), (2, 0, 1, 0), (1, 2), 1),
    ((2, 2, 5, 5), 3, (3, 3), (1, 1), (3, 3, 3, 3), (1, 1), 1),  # padding past the kernel
    ((2, 4, 7, 6), 4, (3, 2), (2, 1), (1, 0, 2, 1), (1, 2), 2),  # strided
]


@pytest.fixture(params=["numpy", *strict_cupy.DEVICE_PARAMS])
def xp(request):
    """numpy, and the device modules (the real CuPy on a GPU, the strict CPU CuPy)."""
    return np if request.param == "numpy" else strict_cupy.device_module(request.param, request)


@pytest.mark.parametrize("route", ["rows_as_conv", "runs_scatter", "one_image_batches"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_every_route_matches_loops(monkeypatch, route, case, xp):
    xshape, m, (kh, kw), stride, pads, dilation, groups = case
    if route == "rows_as_conv":  # whole padded rows and the gradient as a conv wherever valid
        monkeypatch.setattr(conv_ops, "_ROW_RATIO", 100.0)
        monkeypatch.setattr(conv_ops, "_AS_CONV_AREA", 100.0)
    elif route == "runs_scatter":
        monkeypatch.setattr(conv_ops, "_ROW_RATIO", 0.0)
        monkeypatch.setattr(conv_ops, "_AS_CONV_AREA", 0.0)
    else:
        monkeypatch.setattr(conv_ops, "_COLUMN_BYTES", 1)
    x = rng.standard_normal(xshape)
    w = rng.standard_normal((m, xshape[1] // groups, kh, kw))
    attrs = {"strides": list(stride), "paddings": list(pads), "dilations": list(dilation),
             "groups": groups}
    host = (lambda a: a) if xp is np else xp.asnumpy
    out = host(run_op("conv2d", {"Input": [xp.asarray(x)], "Filter": [xp.asarray(w)]},
                      attrs)["Output"][0])
    dout = rng.standard_normal(out.shape)
    ref_out, ref_dx, ref_dw = conv2d_by_loops(x, w, stride, pads, dilation, groups, dout)
    np.testing.assert_allclose(out, ref_out, rtol=1e-10, atol=1e-10)
    grads = run_op("conv2d_grad", {"Input": [xp.asarray(x)], "Filter": [xp.asarray(w)],
                                   "Output@GRAD": [xp.asarray(dout)]}, attrs,
                   ("Input@GRAD", "Filter@GRAD"))
    np.testing.assert_allclose(host(grads["Input@GRAD"][0]), ref_dx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(host(grads["Filter@GRAD"][0]), ref_dw, rtol=1e-10, atol=1e-10)


def test_routes_are_chosen_by_shape():
    """A 3x3 conv of a 32x32 map uses whole rows (34 of 32 columns) and the conv-shaped input
    gradient; dist_mnist's 5x5 conv of a 12x12 map (8x8 out) uses neither."""
    wide = conv_ops._ConvGeometry((2, 16, 32, 32), (16, 16, 3, 3), {"paddings": [1, 1]})
    assert wide.row == 34
    small = conv_ops._ConvGeometry((2, 20, 12, 12), (50, 20, 5, 5), {})
    assert small.row == small.ow == 8
    dout = np.zeros((2, 50, 8, 8), dtype=np.float32)
    assert conv_ops._input_grad_as_conv(np, dout, np.zeros((50, 20, 5, 5), np.float32),
                                        small) is None


def test_batch_norm_grad_keeps_precision_when_the_mean_dwarfs_the_spread():
    x64 = 1000.0 + rng.standard_normal((8, 3, 4, 4))
    dy64 = rng.standard_normal(x64.shape)
    scale, bias = rng.uniform(0.5, 2, 3), rng.standard_normal(3)
    stats = {"Mean": [np.zeros(3)], "Variance": [np.ones(3)]}

    def grads(dtype):
        x, dy = x64.astype(dtype), dy64.astype(dtype)
        ins = {"X": [x], "Scale": [scale.astype(dtype)], "Bias": [bias.astype(dtype)],
               **{k: [v[0].astype(dtype)] for k, v in stats.items()}}
        fwd = run_op("batch_norm", ins, {})
        return run_op("batch_norm_grad", {**ins, "SavedMean": fwd["SavedMean"],
                                          "SavedVariance": fwd["SavedVariance"],
                                          "Y@GRAD": [dy]}, {},
                      ("X@GRAD", "Scale@GRAD", "Bias@GRAD"))

    ref, got = grads(np.float64), grads(np.float32)
    for slot in ("X@GRAD", "Scale@GRAD", "Bias@GRAD"):
        assert got[slot][0].dtype == np.float32
        np.testing.assert_allclose(got[slot][0], ref[slot][0], rtol=2e-3, atol=2e-3)
