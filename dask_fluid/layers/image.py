"""Image layers of ``fluid.layers``: convolution, pooling and normalisation."""

from __future__ import annotations

__all__: list[str] = []
