"""Indexing kernels of Fluid 1.8: n-d scatter, unique, strided slices, crops and multiplex
(and their gradients)."""

from __future__ import annotations
