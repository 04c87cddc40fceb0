"""Paddle 1.8's ``paddle.dataset.mnist``: the MNIST digits as ``(image, label)`` samples.

The four gzipped IDX files are cached under ``DATA_HOME/mnist/``. Each sample is a flat
``float32`` image of ``rows * cols`` (784) pixels scaled from ``[0, 255]`` to ``[-1, 1]``
(``x / 255 * 2 - 1``) and an ``int`` label in ``[0, 9]``.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator

import numpy as np

from ...sample_readers import Reader
from . import common

__all__ = ["fetch", "reader_creator", "test", "train"]

URL_PREFIX = "https://dataset.bj.bcebos.com/mnist/"
TEST_IMAGE_URL = URL_PREFIX + "t10k-images-idx3-ubyte.gz"
TEST_IMAGE_MD5 = "9fb629c4189551a2d022fa330f9573f3"
TEST_LABEL_URL = URL_PREFIX + "t10k-labels-idx1-ubyte.gz"
TEST_LABEL_MD5 = "ec29112dd5afa0611ce80d1b7f02629c"
TRAIN_IMAGE_URL = URL_PREFIX + "train-images-idx3-ubyte.gz"
TRAIN_IMAGE_MD5 = "f68b3c2dcbeaaa9fbdd348bbdeb94873"
TRAIN_LABEL_URL = URL_PREFIX + "train-labels-idx1-ubyte.gz"
TRAIN_LABEL_MD5 = "d53e105ee54ea40749a09fcbcd1e9432"

# IDX magic numbers: unsigned bytes (0x08), 3 dimensions for images, 1 for labels.
IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049


def _read_gzip(filename: str) -> bytes:
    with gzip.open(filename, "rb") as f:
        return f.read()


def reader_creator(image_filename: str, label_filename: str, buffer_size: int) -> Reader:
    """Create a reader over one pair of gzipped IDX files.

    Parameters
    ----------
    image_filename : str
        The images, ``*-images-idx3-ubyte.gz``.
    label_filename : str
        The labels, ``*-labels-idx1-ubyte.gz``.
    buffer_size : int
        Images converted to float at a time.

    Returns
    -------
    callable
        A reader yielding ``(image, label)``: ``image`` a float32 array of shape
        ``(rows * cols,)`` in ``[-1, 1]``, ``label`` an int.

    Raises
    ------
    ValueError
        From the reader, if a file is not an IDX file of the right kind or the two files do not
        hold the same number of items.
    """

    def reader() -> Iterator[tuple[np.ndarray, int]]:
        img_buf = _read_gzip(image_filename)
        lab_buf = _read_gzip(label_filename)
        magic_img, image_num, rows, cols = struct.unpack_from(">IIII", img_buf, 0)
        magic_lab, label_num = struct.unpack_from(">II", lab_buf, 0)
        if magic_img != IMAGE_MAGIC or magic_lab != LABEL_MAGIC:
            raise ValueError(
                f"{image_filename} and {label_filename} should be IDX image and label files "
                f"(magic numbers {IMAGE_MAGIC} and {LABEL_MAGIC}), got magic numbers "
                f"{magic_img} and {magic_lab}."
            )
        pixels_per_image = rows * cols
        if image_num != label_num or len(img_buf) < 16 + image_num * pixels_per_image:
            raise ValueError(
                f"{image_filename} should hold one {rows}x{cols} image per label of "
                f"{label_filename} ({label_num} labels); its header says {image_num} images in "
                f"{len(img_buf) - 16} bytes of pixels."
            )
        labels = np.frombuffer(lab_buf, np.uint8, count=label_num, offset=8)
        pixels = np.frombuffer(img_buf, np.uint8, count=image_num * pixels_per_image, offset=16)
        for start in range(0, label_num, buffer_size):
            stop = min(start + buffer_size, label_num)
            images = pixels[start * pixels_per_image : stop * pixels_per_image]
            images = images.reshape(stop - start, pixels_per_image).astype(np.float32)
            # Three float32 steps, as Paddle does them, so every pixel rounds the same way.
            images = images / 255.0
            images = images * 2.0
            images = images - 1.0
            for i in range(stop - start):
                yield images[i, :], int(labels[start + i])

    return reader


def train() -> Reader:
    """The 60,000 training samples (downloaded now if not cached).

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(
        common.download(TRAIN_IMAGE_URL, "mnist", TRAIN_IMAGE_MD5),
        common.download(TRAIN_LABEL_URL, "mnist", TRAIN_LABEL_MD5),
        100,
    )


def test() -> Reader:
    """The 10,000 test samples (downloaded now if not cached).

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(
        common.download(TEST_IMAGE_URL, "mnist", TEST_IMAGE_MD5),
        common.download(TEST_LABEL_URL, "mnist", TEST_LABEL_MD5),
        100,
    )


def fetch() -> None:
    """Download the four MNIST files into the cache unless they are there."""
    common.download(TRAIN_IMAGE_URL, "mnist", TRAIN_IMAGE_MD5)
    common.download(TRAIN_LABEL_URL, "mnist", TRAIN_LABEL_MD5)
    common.download(TEST_IMAGE_URL, "mnist", TEST_IMAGE_MD5)
    common.download(TEST_LABEL_URL, "mnist", TEST_LABEL_MD5)
