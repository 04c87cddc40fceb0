"""The 3-D kernels (conv3d, conv3d_transpose, pool3d, max_pool3d_with_index) against
independent references: explicit loops over every output element on tiny shapes, conv2d
(depth-1 kernels), and ports of the reference functions of Paddle's ``test_conv3d_op.py``,
``test_conv3d_transpose_op.py`` and ``test_pool3d_op.py``; and their errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from . import conv2d_by_loops, run_op

RNG = np.random.default_rng(11)


# -- references ----------------------------------------------------------------------------------

def conv3d_by_loops(x, w, stride, pads, dilation, groups, dout):
    """Grouped, strided, dilated 3-D correlation (NCDHW, ``pads`` = 3 (before, after)
    pairs) element by element: ``(Output, dInput, dFilter)`` for the output gradient
    ``dout``."""
    n, c, *sizes = x.shape
    m, cg, *ks = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), *pads))
    outs = [(i + b + a - d * (k - 1) - 1) // s + 1
            for i, (b, a), d, k, s in zip(sizes, pads, dilation, ks, stride, strict=True)]
    out = np.zeros((n, m, *outs))
    dxp, dw = np.zeros_like(xp), np.zeros_like(w)
    mg = m // groups
    for b, f in itertools.product(range(n), range(m)):
        g = f // mg
        for o in itertools.product(*(range(v) for v in outs)):
            for ci in range(cg):
                for k in itertools.product(*(range(v) for v in ks)):
                    at = tuple(o[i] * stride[i] + k[i] * dilation[i] for i in range(3))
                    ch = g * cg + ci
                    out[(b, f, *o)] += w[(f, ci, *k)] * xp[(b, ch, *at)]
                    dxp[(b, ch, *at)] += w[(f, ci, *k)] * dout[(b, f, *o)]
                    dw[(f, ci, *k)] += xp[(b, ch, *at)] * dout[(b, f, *o)]
    crop = tuple(slice(b, b + s) for (b, _), s in zip(pads, sizes, strict=True))
    return out, dxp[(slice(None), slice(None), *crop)], dw


def conv3d_paddle_naive(x, w, groups, stride, pad, dilation, algorithm="EXPLICIT"):
    """A port of ``conv3d_forward_naive`` (Paddle's test_conv3d_op.py): SAME padding from
    the undilated kernel with the dilations reset to 1, the filter dilated with zeros, one
    ``np.sum`` per output position and filter."""
    n, c, *sizes = x.shape
    m, cg, *ks = w.shape
    if algorithm == "VALID":
        pad = [0] * 6
    elif algorithm == "SAME":
        dilation = [1, 1, 1]
        pad = []
        for size, k, s in zip(sizes, ks, stride, strict=True):
            total = max((math.ceil(size / s) - 1) * s + k - size, 0)
            pad += [total // 2, total - total // 2]
    if len(pad) == 3:
        pad = [pad[0], pad[0], pad[1], pad[1], pad[2], pad[2]]
    blocks = [d * (k - 1) + 1 for d, k in zip(dilation, ks, strict=True)]
    outs = [1 + (i + pad[2 * j] + pad[2 * j + 1] - blocks[j]) // stride[j]
            for j, i in enumerate(sizes)]
    xpad = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3]), (pad[4], pad[5])))
    wd = np.zeros((m, cg, *blocks))
    wd[:, :, ::dilation[0], ::dilation[1], ::dilation[2]] = w
    out = np.zeros((n, m, *outs))
    mg = m // groups
    for d, i, j in itertools.product(*(range(o) for o in outs)):
        for g in range(groups):
            patch = xpad[:, g * cg:(g + 1) * cg, d * stride[0]:d * stride[0] + blocks[0],
                         i * stride[1]:i * stride[1] + blocks[1],
                         j * stride[2]:j * stride[2] + blocks[2]]
            for k in range(mg):
                out[:, g * mg + k, d, i, j] = np.sum(patch * wd[g * mg + k], axis=(1, 2, 3, 4))
    return out


def conv3d_transpose_paddle_naive(x, w, groups, stride, pad, dilation, output_size=None):
    """A port of ``conv3dtranspose_forward_naive`` (Paddle's test_conv3d_transpose_op.py):
    each input element's filter-weighted block added into the (dilated) output, the padding
    cropped at the end."""
    n, c, *sizes = x.shape
    _, fo, *ks = w.shape
    cg = c // groups
    blocks = [d * (k - 1) + 1 for d, k in zip(dilation, ks, strict=True)]
    full = [(i - 1) * s + b for i, s, b in zip(sizes, stride, blocks, strict=True)]
    out = np.zeros((n, fo * groups, *full))
    for b, d, i, j in itertools.product(range(n), *(range(v) for v in sizes)):
        for g in range(groups):
            vec = x[b, g * cg:(g + 1) * cg, d, i, j]
            for k in range(fo):
                block = np.sum(vec[:, None, None, None] * w[g * cg:(g + 1) * cg, k], axis=0)
                out[b, g * fo + k, d * stride[0]:d * stride[0] + blocks[0]:dilation[0],
                    i * stride[1]:i * stride[1] + blocks[1]:dilation[1],
                    j * stride[2]:j * stride[2] + blocks[2]:dilation[2]] += block
    ends = [f - a for f, a in zip(full, pad[1::2], strict=True)]
    if output_size is not None:
        ends = [p + o for p, o in zip(pad[0::2], output_size, strict=True)]
        extra = [max(e - f, 0) for e, f in zip(ends, full, strict=True)]
        out = np.pad(out, ((0, 0), (0, 0), *((0, e) for e in extra)))
    return out[:, :, pad[0]:ends[0], pad[2]:ends[1], pad[4]:ends[2]]


def pool3d_paddle_naive(x, ksize, strides, paddings, global_pool=False, ceil_mode=False,
                        exclusive=True, adaptive=False, pool_type="max"):
    """A port of ``pool3D_forward_naive`` (Paddle's test_pool3d_op.py): ``paddings`` is 6
    values; a window starts at ``o*s - pad_before``, ends ``k`` later, and is clipped; the
    non-exclusive field is the unclipped window."""
    n, c, *sizes = x.shape
    if global_pool:
        ksize, paddings = list(sizes), [0] * 6
    if adaptive:
        outs = list(ksize)
    else:
        outs = [(i - k + paddings[2 * j] + paddings[2 * j + 1] + (s - 1 if ceil_mode else 0))
                // s + 1 for j, (i, k, s) in enumerate(zip(sizes, ksize, strides, strict=True))]
    out = np.zeros((n, c, *outs))
    for o in itertools.product(*(range(v) for v in outs)):
        lo, hi = [], []
        for j in range(3):
            if adaptive:
                lo.append(o[j] * sizes[j] // outs[j])
                hi.append(math.ceil((o[j] + 1) * sizes[j] / outs[j]))
            else:
                lo.append(o[j] * strides[j] - paddings[2 * j])
                hi.append(lo[-1] + ksize[j])
        field = math.prod(h - l for l, h in zip(lo, hi, strict=True))
        lo = [max(v, 0) for v in lo]
        hi = [min(v, s) for v, s in zip(hi, sizes, strict=True)]
        win = x[:, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
        if pool_type == "avg":
            if exclusive or adaptive:
                field = math.prod(h - l for l, h in zip(lo, hi, strict=True))
            out[(slice(None), slice(None), *o)] = win.sum(axis=(2, 3, 4)) / field
        else:
            out[(slice(None), slice(None), *o)] = win.max(axis=(2, 3, 4))
    return out


def max_pool3d_by_loops(x, ksize, strides, pads_before, outs, dout):
    """``(Out, first-max position, dX)``: each window's first maximum in (d, h, w) order,
    written as plain loops, and the output gradient routed to it."""
    n, c, *sizes = x.shape
    out = np.zeros((n, c, *outs))
    pos = np.zeros((n, c, *outs), dtype=np.int64)
    dx = np.zeros_like(x)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(v) for v in outs)):
            best, at = -np.inf, None
            lo = [max(o[j] * strides[j] - pads_before[j], 0) for j in range(3)]
            hi = [min(o[j] * strides[j] - pads_before[j] + ksize[j], sizes[j])
                  for j in range(3)]
            for d in range(lo[0], hi[0]):
                for h in range(lo[1], hi[1]):
                    for w in range(lo[2], hi[2]):
                        if x[b, ch, d, h, w] > best:
                            best, at = x[b, ch, d, h, w], (d, h, w)
            out[(b, ch, *o)] = best
            pos[(b, ch, *o)] = (at[0] * sizes[1] + at[1]) * sizes[2] + at[2]
            dx[(b, ch, *at)] += dout[(b, ch, *o)]
    return out, pos, dx


# -- conv3d --------------------------------------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, strides, paddings attr, pads pairs, dilations, groups
    ((1, 2, 3, 4, 3), (3, 2, 2, 2, 2), [1, 1, 1], [0, 0, 0], [(0, 0)] * 3, [1, 1, 1], 1),
    ((2, 4, 4, 5, 4), (4, 2, 2, 3, 2), [2, 1, 2], [1, 0, 1],
     [(1, 1), (0, 0), (1, 1)], [1, 1, 1], 2),
    ((1, 2, 5, 4, 6), (2, 2, 2, 2, 3), [1, 2, 1], [1, 0, 0, 1, 2, 1],
     [(1, 0), (0, 1), (2, 1)], [2, 1, 2], 1),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv3d_and_its_grads_match_loops(case):
    xs, ws, strides, paddings, pads, dil, groups = CONV_CASES[case]
    x, w = RNG.standard_normal(xs), RNG.standard_normal(ws)
    attrs = {"strides": strides, "paddings": paddings, "dilations": dil, "groups": groups}
    out = run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    dout = RNG.standard_normal(out.shape)
    want, dx, dw = conv3d_by_loops(x, w, strides, pads, dil, groups, dout)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    g = run_op("conv3d_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]}, attrs,
               outs=("Input@GRAD", "Filter@GRAD"))
    np.testing.assert_allclose(g["Input@GRAD"][0], dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g["Filter@GRAD"][0], dw, rtol=1e-10, atol=1e-12)
    only = run_op("conv3d_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]}, attrs,
                  outs=("Filter@GRAD",))
    assert set(only) == {"Filter@GRAD"}


def test_conv3d_with_depth_one_kernels_is_conv2d_per_slice():
    x, w = RNG.standard_normal((2, 4, 3, 6, 5)), RNG.standard_normal((6, 2, 1, 3, 2))
    attrs = {"strides": [1, 2, 1], "paddings": [0, 1, 1], "dilations": [1, 1, 2], "groups": 2}
    out = run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    for d in range(3):
        want = run_op("conv2d", {"Input": [x[:, :, d]], "Filter": [w[:, :, 0]]},
                      {"strides": [2, 1], "paddings": [1, 1], "dilations": [1, 2],
                       "groups": 2})["Output"][0]
        np.testing.assert_allclose(out[:, :, d], want, rtol=1e-12, atol=1e-12)
        # and the 2-D loops agree with that (the shared reference of the conv2d tests)
        ref = conv2d_by_loops(x[:, :, d], w[:, :, 0], (2, 1), (1, 1, 1, 1), (1, 2), 2)[0]
        np.testing.assert_allclose(out[:, :, d], ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("algorithm,strides,dilations", [
    ("EXPLICIT", [1, 1, 1], [1, 1, 1]), ("EXPLICIT", [2, 1, 2], [1, 2, 1]),
    ("SAME", [2, 2, 1], [2, 2, 2]), ("VALID", [1, 2, 2], [1, 1, 1])])
def test_conv3d_matches_paddles_reference(algorithm, strides, dilations):
    """Paddle's TestCase1-like shapes ([2, 3, 5, 5, 5], filter [6, 1, 3, 3, 3], groups 3);
    SAME with dilations 2 checks that SAME resets them to 1, as UpdatePaddingAndDilation."""
    x, w = RNG.standard_normal((2, 3, 5, 5, 5)), RNG.standard_normal((6, 1, 3, 3, 3))
    pad = [1, 0, 1]
    attrs = {"strides": strides, "paddings": pad, "dilations": dilations, "groups": 3,
             "padding_algorithm": algorithm}
    out = run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    want = conv3d_paddle_naive(x, w, 3, strides, pad, dilations, algorithm)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    if algorithm == "SAME":
        assert out.shape[2:] == tuple(math.ceil(5 / s) for s in strides)


def test_conv3d_ndhwc_is_the_transposed_ncdhw():
    x, w = RNG.standard_normal((2, 3, 4, 5, 4)), RNG.standard_normal((4, 3, 2, 2, 2))
    attrs = {"strides": [1, 2, 1], "paddings": [1, 0, 1]}
    ref = run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    out = run_op("conv3d", {"Input": [xl], "Filter": [w]},
                 {**attrs, "data_format": "NDHWC"})["Output"][0]
    np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 4, 1), rtol=1e-12)
    dout = RNG.standard_normal(ref.shape)
    g = run_op("conv3d_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]}, attrs)
    gl = run_op("conv3d_grad", {"Input": [xl], "Filter": [w],
                                "Output@GRAD": [dout.transpose(0, 2, 3, 4, 1)]},
                {**attrs, "data_format": "NDHWC"})
    np.testing.assert_allclose(gl["Input@GRAD"][0], g["Input@GRAD"][0].transpose(0, 2, 3, 4, 1),
                               rtol=1e-12)
    np.testing.assert_allclose(gl["Filter@GRAD"][0], g["Filter@GRAD"][0], rtol=1e-12)


def test_conv3d_errors():
    x = np.zeros((1, 4, 3, 3, 3))
    with pytest.raises(ValueError, match="groups=3"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((3, 1, 1, 1, 1))]}, {"groups": 3})
    with pytest.raises(ValueError, match="filter's channels"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 3, 1, 1, 1))]})
    with pytest.raises(ValueError, match="paddings must have 3 or 6 entries"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 4, 1, 1, 1))]},
               {"paddings": [1, 1]})
    with pytest.raises(ValueError, match="padding_algorithm must be"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 4, 1, 1, 1))]},
               {"padding_algorithm": "FULL"})
    with pytest.raises(ValueError, match="data_format must be"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 4, 1, 1, 1))]},
               {"data_format": "NCHWD"})
    with pytest.raises(ValueError, match="leaves an output of"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 4, 4, 1, 1))]})
    with pytest.raises(ValueError, match="5-D input and filter"):
        run_op("conv3d", {"Input": [np.zeros((1, 4, 3, 3))], "Filter": [np.zeros((2, 4, 1, 1))]})
    with pytest.raises(ValueError, match="strides must have 3 entries"):
        run_op("conv3d", {"Input": [x], "Filter": [np.zeros((2, 4, 1, 1, 1))]},
               {"strides": [1, 1]})


# -- conv3d_transpose ------------------------------------------------------------------------------

@pytest.mark.parametrize("strides,pad,dilations,groups,output_size", [
    ([1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1], 1, None),
    ([2, 1, 2], [1, 1, 0, 0, 1, 1], [1, 1, 1], 2, None),
    ([2, 2, 1], [1, 0, 0, 1, 0, 0], [1, 2, 1], 1, None),
    ([2, 2, 2], [1, 1, 1, 1, 0, 0], [1, 1, 1], 2, [5, 6, 9]),
])
def test_conv3d_transpose_matches_paddles_reference(strides, pad, dilations, groups,
                                                    output_size):
    x, w = RNG.standard_normal((2, 4, 3, 3, 4)), RNG.standard_normal((4, 3, 2, 3, 2))
    attrs = {"strides": strides, "paddings": pad, "dilations": dilations, "groups": groups,
             "output_size": output_size or []}
    out = run_op("conv3d_transpose", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    want = conv3d_transpose_paddle_naive(x, w, groups, strides, pad, dilations, output_size)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)


def test_conv3d_transpose_grads_are_conv3d():
    """dInput = conv3d(dOutput, Filter) and dFilter = that conv3d's filter gradient with
    Input as its output gradient (the adjoint of the forward, checked with loops)."""
    x, w = RNG.standard_normal((1, 2, 2, 3, 2)), RNG.standard_normal((2, 2, 2, 2, 2))
    attrs = {"strides": [2, 1, 2], "paddings": [1, 0, 0]}
    out = run_op("conv3d_transpose", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    dout = RNG.standard_normal(out.shape)
    g = run_op("conv3d_transpose_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]},
               attrs)
    conv, _, dw = conv3d_by_loops(dout, w, [2, 1, 2], [(1, 1), (0, 0), (0, 0)], [1, 1, 1], 1,
                                  x)
    np.testing.assert_allclose(g["Input@GRAD"][0], conv, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g["Filter@GRAD"][0], dw, rtol=1e-10, atol=1e-12)


def test_conv3d_transpose_same_and_errors():
    x, w = RNG.standard_normal((1, 2, 3, 4, 3)), RNG.standard_normal((2, 3, 3, 3, 3))
    out = run_op("conv3d_transpose", {"Input": [x], "Filter": [w]},
                 {"strides": [2, 2, 1], "padding_algorithm": "SAME",
                  "dilations": [2, 2, 2]})["Output"][0]
    # SAME pads (from the input, undilated kernel) (1, 1), (0, 1), (1, 1); dilations reset
    want = conv3d_transpose_paddle_naive(x, w, 1, [2, 2, 1], [1, 1, 0, 1, 1, 1], [1, 1, 1])
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="output_size"):
        run_op("conv3d_transpose", {"Input": [x], "Filter": [w]},
               {"strides": [2, 2, 1], "output_size": [9, 9, 5]})
    with pytest.raises(ValueError, match="filter's first dim"):
        run_op("conv3d_transpose", {"Input": [x], "Filter": [np.zeros((3, 1, 1, 1, 1))]})


# -- pool3d --------------------------------------------------------------------------------------

POOL_CASES = [
    # ksize, strides, paddings (6), ceil, exclusive, global, adaptive
    ([2, 2, 2], [2, 2, 2], [0] * 6, False, True, False, False),
    ([3, 2, 3], [1, 2, 2], [1, 1, 0, 0, 1, 1], False, True, False, False),
    ([3, 2, 3], [2, 1, 2], [1, 0, 1, 1, 0, 1], False, False, False, False),
    ([2, 3, 2], [2, 2, 2], [1, 0, 1, 1, 0, 0], True, True, False, False),
    ([2, 3, 2], [2, 2, 3], [0] * 6, True, False, False, False),
    ([1, 1, 1], [1, 1, 1], [0] * 6, False, True, True, False),
    ([2, 3, 2], [1, 1, 1], [0] * 6, False, True, False, True),
    ([3, 2, 4], [1, 1, 1], [0] * 6, False, False, False, True),
]


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pool3d_matches_paddles_reference(case, pool_type):
    ksize, strides, pads, ceil, excl, glob, adapt = POOL_CASES[case]
    x = RNG.standard_normal((2, 3, 5, 6, 7))
    attrs = {"pooling_type": pool_type, "ksize": ksize, "strides": strides, "paddings": pads,
             "ceil_mode": ceil, "exclusive": excl, "global_pooling": glob, "adaptive": adapt}
    out = run_op("pool3d", {"X": [x]}, attrs)["Out"][0]
    want = pool3d_paddle_naive(x, ksize, strides, pads, glob, ceil, excl, adapt, pool_type)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-14)


def test_pool3d_paddings_forms_and_algorithms():
    x = RNG.standard_normal((1, 2, 5, 6, 7))
    three = run_op("pool3d", {"X": [x]}, {"ksize": [3, 3, 3], "strides": [2, 2, 2],
                                          "paddings": [1, 0, 1]})["Out"][0]
    six = run_op("pool3d", {"X": [x]}, {"ksize": [3, 3, 3], "strides": [2, 2, 2],
                                        "paddings": [1, 1, 0, 0, 1, 1]})["Out"][0]
    np.testing.assert_array_equal(three, six)
    same = run_op("pool3d", {"X": [x]}, {"ksize": [3, 2, 3], "strides": [2, 2, 2],
                                         "padding_algorithm": "SAME",
                                         "paddings": [9, 9, 9]})["Out"][0]
    # SAME: O = ceil(I / s); pads (front, back) = (1, 1), (0, 0), (1, 1)
    want = pool3d_paddle_naive(x, [3, 2, 3], [2, 2, 2], [1, 1, 0, 0, 1, 1])
    assert same.shape[2:] == (3, 3, 4)
    np.testing.assert_array_equal(same, want)
    valid = run_op("pool3d", {"X": [x]}, {"ksize": [2, 2, 2], "strides": [2, 2, 2],
                                          "padding_algorithm": "VALID",
                                          "paddings": [1, 1, 1]})["Out"][0]
    np.testing.assert_array_equal(valid, pool3d_paddle_naive(x, [2] * 3, [2] * 3, [0] * 6))
    # global and adaptive pooling ignore the paddings
    glob = run_op("pool3d", {"X": [x]}, {"pooling_type": "avg", "global_pooling": True,
                                         "paddings": [1, 1, 1]})["Out"][0]
    np.testing.assert_allclose(glob, x.mean(axis=(2, 3, 4), keepdims=True), rtol=1e-12)


def test_pool3d_empty_ceil_window_is_paddles():
    """ceil_mode can leave a window wholly in the trailing padding: Paddle's loops give
    -FLT_MAX for a max, 0/0 for an exclusive average, and route no gradient."""
    x = RNG.standard_normal((1, 1, 2, 5, 2))
    attrs = {"ksize": [1, 2, 1], "strides": [1, 2, 1], "paddings": [0, 1, 0],
             "ceil_mode": True}
    out = run_op("pool3d", {"X": [x]}, attrs)["Out"][0]
    assert out.shape == (1, 1, 2, 4, 2)
    assert np.all(out[:, :, :, 3] == -np.finfo(np.float32).max)
    avg = run_op("pool3d", {"X": [x]}, {**attrs, "pooling_type": "avg"})["Out"][0]
    assert np.all(np.isnan(avg[:, :, :, 3])) and not np.isnan(avg[:, :, :, :3]).any()
    for pool_type in ("max", "avg"):
        a = {**attrs, "pooling_type": pool_type}
        o = run_op("pool3d", {"X": [x]}, a)["Out"][0]
        d = np.ones_like(o)
        dx = run_op("pool3d_grad", {"X": [x], "Out": [o], "Out@GRAD": [d]}, a)["X@GRAD"][0]
        assert np.isfinite(dx).all()


@pytest.mark.parametrize("ksize,strides,pads", [
    ([2, 2, 2], [1, 1, 1], [0, 0, 0]), ([3, 2, 3], [2, 1, 2], [1, 1, 1])])
def test_pool3d_max_grad_goes_to_the_first_maximum(ksize, strides, pads):
    # integer values make ties: the first maximum in (d, h, w) order takes the gradient
    x = RNG.integers(0, 3, (2, 2, 4, 5, 4)).astype(np.float64)
    attrs = {"ksize": ksize, "strides": strides, "paddings": pads}
    out = run_op("pool3d", {"X": [x]}, attrs)["Out"][0]
    dout = RNG.standard_normal(out.shape)
    want, _, dx = max_pool3d_by_loops(x, ksize, strides, pads, out.shape[2:], dout)
    np.testing.assert_array_equal(out, want)
    got = run_op("pool3d_grad", {"X": [x], "Out": [out], "Out@GRAD": [dout]}, attrs)
    np.testing.assert_allclose(got["X@GRAD"][0], dx, rtol=1e-12, atol=1e-14)


def test_pool3d_avg_grad_spreads_over_the_window():
    """The average's gradient by loops: each output's gradient over its clipped window,
    divided by what the forward divided by."""
    x = RNG.standard_normal((1, 2, 4, 5, 3))
    for exclusive in (True, False):
        attrs = {"pooling_type": "avg", "ksize": [2, 3, 2], "strides": [2, 2, 1],
                 "paddings": [1, 1, 0], "exclusive": exclusive}
        out = run_op("pool3d", {"X": [x]}, attrs)["Out"][0]
        dout = RNG.standard_normal(out.shape)
        got = run_op("pool3d_grad", {"X": [x], "Out": [out], "Out@GRAD": [dout]},
                     attrs)["X@GRAD"][0]
        want = np.zeros_like(x)
        for o in itertools.product(*(range(v) for v in out.shape[2:])):
            lo = [o[j] * s - p for j, (s, p) in enumerate(zip([2, 2, 1], [1, 1, 0], strict=True))]
            hi = [v + k for v, k in zip(lo, [2, 3, 2], strict=True)]
            lo = [max(v, 0) for v in lo]
            hi = [min(v, s) for v, s in zip(hi, x.shape[2:], strict=True)]
            size = math.prod(h - l for l, h in zip(lo, hi, strict=True)) if exclusive else 12
            want[:, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] += \
                dout[(slice(None), slice(None), *o)][:, :, None, None, None] / size
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_pool3d_ndhwc_is_the_transposed_ncdhw():
    x = RNG.standard_normal((2, 3, 4, 5, 4))
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    for pool_type in ("max", "avg"):
        attrs = {"pooling_type": pool_type, "ksize": [2, 3, 2], "strides": [1, 2, 2],
                 "paddings": [1, 1, 0]}
        ref = run_op("pool3d", {"X": [x]}, attrs)["Out"][0]
        out = run_op("pool3d", {"X": [xl]}, {**attrs, "data_format": "NDHWC"})["Out"][0]
        np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 4, 1), rtol=1e-12)
        d = RNG.standard_normal(ref.shape)
        g = run_op("pool3d_grad", {"X": [x], "Out": [ref], "Out@GRAD": [d]}, attrs)["X@GRAD"][0]
        gl = run_op("pool3d_grad", {"X": [xl], "Out": [out],
                                    "Out@GRAD": [d.transpose(0, 2, 3, 4, 1)]},
                    {**attrs, "data_format": "NDHWC"})["X@GRAD"][0]
        np.testing.assert_allclose(gl, g.transpose(0, 2, 3, 4, 1), rtol=1e-12)


def test_pool3d_errors():
    x = np.zeros((1, 2, 3, 3, 3))
    with pytest.raises(ValueError, match="pooling_type must be"):
        run_op("pool3d", {"X": [x]}, {"pooling_type": "min"})
    with pytest.raises(ValueError, match="5-D input"):
        run_op("pool3d", {"X": [np.zeros((1, 2, 3, 3))]})
    with pytest.raises(ValueError, match="ksize must have 3 entries"):
        run_op("pool3d", {"X": [x]}, {"ksize": [2, 2]})
    with pytest.raises(ValueError, match="positive output size"):
        run_op("pool3d", {"X": [x]}, {"ksize": [0, 1, 1], "adaptive": True})
    with pytest.raises(ValueError, match="leaves an output of"):
        run_op("pool3d", {"X": [x]}, {"ksize": [4, 1, 1]})
    with pytest.raises(ValueError, match="data_format must be"):
        run_op("pool3d", {"X": [x]}, {"data_format": "NHWCD"})


# -- max_pool3d_with_index -------------------------------------------------------------------------

def test_max_pool3d_with_index_strided_matches_loops():
    x = RNG.integers(0, 4, (2, 2, 5, 4, 6)).astype(np.float64)  # with ties
    attrs = {"ksize": [3, 2, 3], "strides": [2, 1, 2], "paddings": [1, 0, 1]}
    res = run_op("max_pool3d_with_index", {"X": [x]}, attrs)
    outs = [(5 - 3 + 2) // 2 + 1, 3, (6 - 3 + 2) // 2 + 1]
    dout = RNG.standard_normal((2, 2, *outs))
    want, pos, dx = max_pool3d_by_loops(x, [3, 2, 3], [2, 1, 2], [1, 0, 1], outs, dout)
    np.testing.assert_array_equal(res["Out"][0], want)
    assert res["Mask"][0].dtype == np.int32
    np.testing.assert_array_equal(res["Mask"][0], pos)
    got = run_op("max_pool3d_with_index_grad",
                 {"X": [x], "Mask": [res["Mask"][0]], "Out@GRAD": [dout]}, attrs)
    np.testing.assert_allclose(got["X@GRAD"][0], dx, rtol=1e-12)


def test_max_pool3d_with_index_adaptive_and_global():
    x = RNG.standard_normal((1, 3, 5, 7, 4))
    res = run_op("max_pool3d_with_index", {"X": [x]}, {"ksize": [2, 3, 3], "adaptive": True})
    want = pool3d_paddle_naive(x, [2, 3, 3], None, None, adaptive=True)
    np.testing.assert_array_equal(res["Out"][0], want)
    flat = x.reshape(1, 3, -1)
    np.testing.assert_array_equal(
        np.take_along_axis(flat, res["Mask"][0].reshape(1, 3, -1).astype(np.int64), axis=2),
        want.reshape(1, 3, -1))
    glob = run_op("max_pool3d_with_index", {"X": [x]}, {"global_pooling": True,
                                                        "paddings": [1, 1, 1]})
    np.testing.assert_array_equal(glob["Out"][0][..., 0, 0, 0], x.max(axis=(2, 3, 4)))
    np.testing.assert_array_equal(glob["Mask"][0][..., 0, 0, 0], flat.argmax(axis=2))
    with pytest.raises(ValueError, match="paddings must have 3 entries"):
        run_op("max_pool3d_with_index", {"X": [x]}, {"paddings": [0, 0]})
    with pytest.raises(ValueError, match="leaves an output of"):
        run_op("max_pool3d_with_index", {"X": [x]}, {"ksize": [6, 1, 1]})


def test_conv3d_cpu_batches_give_the_whole_batch_result(monkeypatch):
    """With a tiny column budget every image goes alone: the same forward and gradients."""
    from dask_fluid.ops import conv3d_ops

    x, w = RNG.standard_normal((3, 2, 3, 4, 3)), RNG.standard_normal((4, 2, 2, 2, 2))
    attrs = {"strides": [1, 2, 1], "paddings": [1, 0, 1]}
    out = run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0]
    dout = RNG.standard_normal(out.shape)
    grads = run_op("conv3d_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]}, attrs)
    monkeypatch.setattr(conv3d_ops, "_COLUMN_BYTES", 1)
    geo = conv3d_ops._Geometry.from_attrs(x.shape, w.shape, attrs, "conv3d")
    assert len(geo.batches(np, 8)) == 3
    np.testing.assert_allclose(
        run_op("conv3d", {"Input": [x], "Filter": [w]}, attrs)["Output"][0], out, rtol=1e-12)
    small = run_op("conv3d_grad", {"Input": [x], "Filter": [w], "Output@GRAD": [dout]}, attrs)
    for slot in ("Input@GRAD", "Filter@GRAD"):
        np.testing.assert_allclose(small[slot][0], grads[slot][0], rtol=1e-12, atol=1e-14)
