"""Paddle 1.8's ``paddle.dataset.uci_housing``: Boston house prices as ``(features, price)``.

``housing.data`` (cached under ``DATA_HOME/uci_housing/``) holds 506 rows of 13 features and the
price, separated by whitespace. Every feature column is normalised over the whole file,
``(x - mean) / (max - min)``; the price is left as it is. The first 80% of the rows are the
training set, the rest the test set. Both are loaded once per process, into the module attributes
:data:`UCI_TRAIN_DATA` and :data:`UCI_TEST_DATA`, as Paddle does; set both back to None to load
another file.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ...sample_readers import Reader
from . import common

__all__ = [
    "UCI_TEST_DATA",
    "UCI_TRAIN_DATA",
    "feature_names",
    "fetch",
    "load_data",
    "predict_reader",
    "test",
    "train",
]

URL = "http://paddlemodels.bj.bcebos.com/uci_housing/housing.data"
MD5 = "d4accdce7a25600298819f8e28e8d593"
feature_names = [
    "CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX", "PTRATIO", "B", "LSTAT",
]

# Rows of 14 float64 values: 13 normalised features and the price. Filled by load_data().
UCI_TRAIN_DATA: np.ndarray | None = None
UCI_TEST_DATA: np.ndarray | None = None


def load_data(filename: str, feature_num: int = 14, ratio: float = 0.8) -> None:
    """Load, normalise and split ``filename`` into UCI_TRAIN_DATA and UCI_TEST_DATA.

    Does nothing if both are already loaded.

    Parameters
    ----------
    filename : str
        A ``housing.data`` file: whitespace-separated numbers, ``feature_num`` per row.
    feature_num : int, default 14
        Values per row, the price last.
    ratio : float, default 0.8
        Fraction of the rows, from the top, that form the training set.

    Raises
    ------
    ValueError
        If the file's count of numbers is not a multiple of ``feature_num``.
    """
    global UCI_TRAIN_DATA, UCI_TEST_DATA
    if UCI_TRAIN_DATA is not None and UCI_TEST_DATA is not None:
        return
    with open(filename) as f:
        data = np.array(f.read().split(), dtype=np.float64)
    if data.size % feature_num:
        raise ValueError(
            f"{filename} should hold rows of {feature_num} numbers, but it holds {data.size} "
            f"numbers, which is not a multiple of {feature_num}."
        )
    data = data.reshape(data.shape[0] // feature_num, feature_num)
    maximums, minimums = data.max(axis=0), data.min(axis=0)
    avgs = data.sum(axis=0) / data.shape[0]
    for i in range(feature_num - 1):
        data[:, i] = (data[:, i] - avgs[i]) / (maximums[i] - minimums[i])
    offset = int(data.shape[0] * ratio)
    UCI_TRAIN_DATA = data[:offset]
    UCI_TEST_DATA = data[offset:]


def _rows_reader(which: str) -> Reader:
    def reader() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # Looked up at call time, so a reload (both attributes reset) is seen.
        for d in globals()[which]:
            yield d[:-1], d[-1:]

    return reader


def train() -> Reader:
    """The training rows (the first 80%), loading the file now if needed.

    Returns
    -------
    callable
        A reader yielding ``(features, price)``: float64 arrays of shape ``(13,)`` and ``(1,)``.
    """
    load_data(common.download(URL, "uci_housing", MD5))
    return _rows_reader("UCI_TRAIN_DATA")


def test() -> Reader:
    """The test rows (the last 20%), loading the file now if needed.

    Returns
    -------
    callable
        A reader yielding ``(features, price)``: float64 arrays of shape ``(13,)`` and ``(1,)``.
    """
    load_data(common.download(URL, "uci_housing", MD5))
    return _rows_reader("UCI_TEST_DATA")


def predict_reader() -> tuple[np.ndarray]:
    """The features of the first test row, as a one-element tuple, for an inference demo."""
    load_data(common.download(URL, "uci_housing", MD5))
    return (UCI_TEST_DATA[0][:-1],)


def fetch() -> None:
    """Download ``housing.data`` into the cache unless it is there."""
    common.download(URL, "uci_housing", MD5)
