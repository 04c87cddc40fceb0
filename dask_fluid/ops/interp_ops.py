"""Image resizing kernels: Fluid 1.8's bilinear_interp and nearest_interp (and their
gradients)."""

from __future__ import annotations
