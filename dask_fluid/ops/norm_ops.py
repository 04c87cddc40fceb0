"""Normalisation kernels (``batch_norm``, ``layer_norm``)."""
