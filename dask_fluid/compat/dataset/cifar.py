"""Paddle 1.8's ``paddle.dataset.cifar``: CIFAR-10 and CIFAR-100 as ``(image, label)`` samples.

The two archives are cached under ``DATA_HOME/cifar/``: ``cifar-10-python.tar.gz`` (members
``cifar-10-batches-py/data_batch_1`` ... ``data_batch_5`` and ``test_batch``) and
``cifar-100-python.tar.gz`` (members ``cifar-100-python/train`` and ``test``). Each member is a
Python 2 pickle of a dict: ``b"data"``, a ``uint8`` array of shape ``(N, 3072)`` (one row per
32 x 32 image, the 1024 red, then green, then blue values, each row by row), and the labels,
``b"labels"`` (CIFAR-10, ``[0, 9]``) or ``b"fine_labels"`` (CIFAR-100, ``[0, 99]``).

A reader reads, in archive order, every member whose name contains its ``sub_name``
(``"data_batch"`` or ``"test_batch"`` for CIFAR-10, ``"train"`` or ``"test"`` for CIFAR-100)
and yields, image by image, ``(data / 255.0 as a float32 array of shape (3072,), int label)``.

Unlike Paddle, which calls :func:`pickle.load`, the members are unpickled by
:class:`RestrictedUnpickler`: a pickle can name any function for the unpickler to call, so only
the few numpy names a CIFAR batch needs are allowed, and any other pickle is refused with a
:class:`pickle.UnpicklingError` naming the file, before anything it names is called.
Paddle 1.8's ``train100`` and ``test100`` take no argument; their ``cycle`` here is an addition.
"""

from __future__ import annotations

import pickle
import tarfile
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from ...sample_readers import Reader
from . import common

__all__ = [
    "RestrictedUnpickler", "fetch", "reader_creator", "test10", "test100", "train10", "train100",
]

URL_PREFIX = "https://dataset.bj.bcebos.com/cifar/"
CIFAR10_URL = URL_PREFIX + "cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR100_URL = URL_PREFIX + "cifar-100-python.tar.gz"
CIFAR100_MD5 = "eb9058c3a382ffc7106e4002c42a8d85"

# Images scaled to float at a time (one row per image).
_CHUNK = 256


def _numpy_reconstruct() -> Any:
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


# The globals a CIFAR pickle refers to: numpy's array reconstruction (``numpy.core`` in the
# published files, written by numpy 1; ``numpy._core`` when numpy 2 pickles an array).
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct,
    ("numpy", "ndarray"): lambda: np.ndarray,
    ("numpy", "dtype"): lambda: np.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals a CIFAR batch needs.

    Dicts, lists, tuples, strings, bytes and numbers need no global; a numpy array needs
    ``numpy.core.multiarray._reconstruct``, ``numpy.ndarray`` and ``numpy.dtype``. Any other
    global (``os.system``, ``builtins.eval``, a class of any module) raises
    :class:`pickle.UnpicklingError` naming ``source``, without being imported or called.

    Parameters
    ----------
    file : binary file
        The pickle.
    source : str
        Where the pickle comes from, for the error message.
    encoding : str, default "bytes"
        How Python 2 ``str`` objects are decoded (``"bytes"`` keeps them as bytes, as Paddle
        reads the CIFAR batches).
    """

    def __init__(self, file: IO[bytes], source: str, encoding: str = "bytes") -> None:
        super().__init__(file, encoding=encoding)
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        resolve = _ALLOWED_GLOBALS.get((module, name))
        if resolve is None:
            raise pickle.UnpicklingError(
                f"{self.source} is not a CIFAR batch: its pickle refers to {module}.{name}, "
                f"while a CIFAR batch holds only dicts, lists, bytes, numbers and numpy arrays. "
                f"It was not unpickled (unpickling it could run arbitrary code); replace the "
                f"file with the published one."
            )
        return resolve()

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError(
            f"{self.source} is not a CIFAR batch: its pickle refers to a persistent id."
        )


def _load_batch(file: IO[bytes], source: str) -> tuple[np.ndarray, list]:
    """Unpickle one batch member safely; return its data array and its labels."""
    batch = RestrictedUnpickler(file, source).load()
    data = batch.get(b"data") if isinstance(batch, dict) else None
    labels = batch.get(b"labels", batch.get(b"fine_labels")) if isinstance(batch, dict) else None
    if not isinstance(data, np.ndarray) or data.ndim != 2 or labels is None:
        raise ValueError(
            f"{source} should hold a dict with b'data' (an array of one image per row) and "
            f"b'labels' or b'fine_labels'; got {type(batch).__name__}"
            + (f" with keys {sorted(batch)}" if isinstance(batch, dict) else "")
            + "."
        )
    return data, list(labels)


def reader_creator(filename: str, sub_name: str, cycle: bool = False) -> Reader:
    """Create a reader over the batches of a CIFAR archive whose names contain ``sub_name``.

    Parameters
    ----------
    filename : str
        ``cifar-10-python.tar.gz`` or ``cifar-100-python.tar.gz``.
    sub_name : str
        Members (regular files) whose name contains it are read, in archive order.
    cycle : bool, default False
        Start over at the end (reopening the archive) instead of stopping.

    Returns
    -------
    callable
        A reader yielding ``(image, label)``: ``image`` a float32 array of shape ``(3072,)``,
        ``data / 255.0``, in ``[0, 1]``; ``label`` an int.

    Raises
    ------
    pickle.UnpicklingError
        From the reader, if a member's pickle refers to anything but numpy's array
        reconstruction (see :class:`RestrictedUnpickler`).
    ValueError
        From the reader, if a member is not a dict with ``b"data"`` and its labels.
    """

    def read_batch(data: np.ndarray, labels: list) -> Iterator[tuple[np.ndarray, int]]:
        # Paddle zips the rows with the labels: the shorter of the two ends the batch.
        n = min(len(data), len(labels))
        for start in range(0, n, _CHUNK):
            stop = min(start + _CHUNK, n)
            images = (data[start:stop] / 255.0).astype(np.float32)
            for i in range(stop - start):
                yield images[i], int(labels[start + i])

    def reader() -> Iterator[tuple[np.ndarray, int]]:
        while True:
            with tarfile.open(filename, mode="r") as f:
                for member in f:
                    if sub_name in member.name and member.isfile():
                        source = f"{filename}:{member.name}"
                        yield from read_batch(*_load_batch(f.extractfile(member), source))
            if not cycle:
                break

    return reader


def train100(cycle: bool = False) -> Reader:
    """The 50,000 CIFAR-100 training samples, labels in ``[0, 99]`` (downloaded now if needed).

    Parameters
    ----------
    cycle : bool, default False
        Start over at the end instead of stopping (an addition to Paddle 1.8).

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(common.download(CIFAR100_URL, "cifar", CIFAR100_MD5), "train", cycle)


def test100(cycle: bool = False) -> Reader:
    """The 10,000 CIFAR-100 test samples, labels in ``[0, 99]`` (downloaded now if needed).

    Parameters
    ----------
    cycle : bool, default False
        Start over at the end instead of stopping (an addition to Paddle 1.8).

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(common.download(CIFAR100_URL, "cifar", CIFAR100_MD5), "test", cycle)


def train10(cycle: bool = False) -> Reader:
    """The 50,000 CIFAR-10 training samples, labels in ``[0, 9]`` (downloaded now if needed).

    Parameters
    ----------
    cycle : bool, default False
        Start over at the end instead of stopping.

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(
        common.download(CIFAR10_URL, "cifar", CIFAR10_MD5), "data_batch", cycle=cycle
    )


def test10(cycle: bool = False) -> Reader:
    """The 10,000 CIFAR-10 test samples, labels in ``[0, 9]`` (downloaded now if needed).

    Parameters
    ----------
    cycle : bool, default False
        Start over at the end instead of stopping.

    Returns
    -------
    callable
        A reader yielding ``(image, label)``, see :func:`reader_creator`.
    """
    return reader_creator(
        common.download(CIFAR10_URL, "cifar", CIFAR10_MD5), "test_batch", cycle=cycle
    )


def fetch() -> None:
    """Download the two CIFAR archives into the cache unless they are there."""
    common.download(CIFAR10_URL, "cifar", CIFAR10_MD5)
    common.download(CIFAR100_URL, "cifar", CIFAR100_MD5)
