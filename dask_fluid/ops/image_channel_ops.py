"""Per-channel image kernels: Fluid 1.8's lrn, instance_norm, affine_channel, shuffle_channel
and space_to_depth (and their gradients)."""

from __future__ import annotations
