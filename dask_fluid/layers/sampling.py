"""Random layers of ``fluid.layers`` drawn in the main program: ``uniform_random``,
``gaussian_random``, their ``_batch_size_like`` forms, ``sampling_id`` and ``random_crop``
(Fluid 1.8's signatures; the kernels are in :mod:`dask_fluid.ops.random_ops`)."""

from __future__ import annotations

__all__: list[str] = []
