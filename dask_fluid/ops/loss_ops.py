"""Ranking and pairwise loss kernels of Fluid 1.8 (and their gradients)."""

from __future__ import annotations
