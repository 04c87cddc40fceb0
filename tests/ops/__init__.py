"""Kernel tests; :func:`run_op` calls a registered kernel the way the executor does."""

from __future__ import annotations

from typing import Any

import numpy as np

from dask_fluid.ops import registry


def run_op(type: str, ins: dict[str, list[Any]], attrs: dict | None = None,
           outs: tuple[str, ...] | None = None) -> dict[str, list[Any]]:
    """Run ``type``'s kernel on ``ins`` with its registered attr defaults updated by ``attrs``,
    binding ``outs`` (default: every output slot)."""
    opdef = registry.get(type)
    full = dict(opdef.attrs)
    full.update(attrs or {})
    return opdef.kernel(ins, full, tuple(outs if outs is not None else opdef.outputs))


def central_differences(f: Any, a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """The gradient of the scalar ``f()`` with respect to every element of ``a`` (changed in
    place and restored), by central differences."""
    g = np.zeros_like(a)
    for j in range(a.size):
        orig = a.flat[j]
        a.flat[j] = orig + eps
        fp = f()
        a.flat[j] = orig - eps
        fm = f()
        a.flat[j] = orig
        g.flat[j] = (fp - fm) / (2 * eps)
    return g


def conv2d_by_loops(x, w, stride, pads, dilation, groups, dout=None):
    """A grouped, strided, dilated correlation (conv2d, NCHW, ``pads`` = top, bottom, left,
    right) element by element: ``(Output, dInput, dFilter)``, the gradients for ``dout`` (None
    without one). The reference of the conv2d forward and route tests."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    top, bottom, left, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    oh = (h + top + bottom - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + left + right - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, m, oh, ow))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    mg = m // groups
    for b in range(n):
        for f in range(m):
            g = f // mg
            for i in range(oh):
                for j in range(ow):
                    for ci in range(cg):
                        for a in range(kh):
                            for e in range(kw):
                                ch = g * cg + ci
                                r = i * stride[0] + a * dilation[0]
                                s = j * stride[1] + e * dilation[1]
                                out[b, f, i, j] += w[f, ci, a, e] * xp[b, ch, r, s]
                                if dout is not None:
                                    dxp[b, ch, r, s] += w[f, ci, a, e] * dout[b, f, i, j]
                                    dw[f, ci, a, e] += xp[b, ch, r, s] * dout[b, f, i, j]
    if dout is None:
        return out, None, None
    return out, dxp[:, :, top:top + h, left:left + wd], dw
