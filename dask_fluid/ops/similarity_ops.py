"""Similarity kernels: ``cos_sim`` (Fluid's op, with the row norms it keeps for its gradient)."""

from __future__ import annotations

from typing import Any

from .registry import GRAD, array_module, register
from .selected_rows import grad_maker, grad_slots


def _rows(a: Any) -> Any:
    return a.reshape(a.shape[0], -1)


@register("cos_sim", ("X", "Y"), ("Out", "XNorm", "YNorm"),
          grad=grad_maker(("X", "Y", "Out", "XNorm", "YNorm"), ("Out",), ("X", "Y")))
def cos_sim(ins: dict, attrs: dict, outs: tuple) -> dict:
    """Out[i] = X[i]·Y[i] / (|X[i]| |Y[i]|), ``[N, 1]``; Y may be one row for every X row.
    XNorm and YNorm are the row norms (``[N, 1]``, ``[N or 1, 1]``)."""
    x, y = _rows(ins["X"][0]), _rows(ins["Y"][0])
    if y.shape[0] not in (1, x.shape[0]) or y.shape[1] != x.shape[1]:
        raise ValueError(f"cos_sim: Y must have the shape of X or one row of it: X "
                         f"{list(ins['X'][0].shape)}, Y {list(ins['Y'][0].shape)}")
    xp = array_module(x, y)
    xn = xp.sqrt((x * x).sum(axis=1, keepdims=True))
    yn = xp.sqrt((y * y).sum(axis=1, keepdims=True))
    out = (x * y).sum(axis=1, keepdims=True) / (xn * yn)
    return {"Out": [out], "XNorm": [xn], "YNorm": [yn]}


@register("cos_sim_grad", *grad_slots(("X", "Y", "Out", "XNorm", "YNorm"), ("Out",), ("X", "Y")))
def cos_sim_grad(ins: dict, attrs: dict, outs: tuple) -> dict:
    """dX = dOut (Y / (|X||Y|) − Out X / |X|²), dY likewise (summed over the rows of X when
    Y is one row)."""
    x0, y0 = ins["X"][0], ins["Y"][0]
    x, y = _rows(x0), _rows(y0)
    out, xn, yn = ins["Out"][0], ins["XNorm"][0], ins["YNorm"][0]
    d = ins["Out" + GRAD][0]
    xp = array_module(x, y)
    res = {}
    if d is None:
        d = xp.zeros_like(out)
    if "X" + GRAD in outs:
        dx = d * (y / (xn * yn) - out * x / (xn * xn))
        res["X" + GRAD] = [dx.reshape(x0.shape)]
    if "Y" + GRAD in outs:
        dy = d * (x / (xn * yn) - out * y / (yn * yn))
        if y.shape[0] == 1 and x.shape[0] != 1:
            dy = dy.sum(axis=0, keepdims=True)
        res["Y" + GRAD] = [dy.reshape(y0.shape)]
    return res
