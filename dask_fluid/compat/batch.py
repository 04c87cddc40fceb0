"""Paddle 1.8's ``paddle.batch``: turn a sample reader into a mini-batch reader
(:func:`dask_fluid.sample_readers.batch`)."""

from ..sample_readers import batch

__all__ = ["batch"]
