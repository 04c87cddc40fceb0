"""Convolution and pooling kernels (``conv2d``, ``conv2d_transpose``, ``pool2d``)."""
