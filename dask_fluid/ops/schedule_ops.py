"""Kernels the learning-rate schedules of ``fluid.layers`` need (their elementary math ops)."""
