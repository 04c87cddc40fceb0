"""Image resizing layers of ``fluid.layers``: ``image_resize`` and its short forms (Fluid
1.8's signatures and defaults; the kernels are in :mod:`dask_fluid.ops.interp_ops`)."""

from __future__ import annotations

__all__: list[str] = []
