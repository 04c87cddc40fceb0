"""Paddle 1.8's ``paddle.dataset``: the datasets its model files read, cached as Paddle caches them.

``common`` holds the cache (``DATA_HOME``) and the downloader; ``mnist``, ``cifar``,
``uci_housing``, ``imikolov``, ``imdb``, ``flowers``, ``wmt14``, ``wmt16``, ``movielens`` and
``conll05`` each turn their published files into reader creators; ``image`` holds the image
helpers (decode, resize, crop, flip) of users' image scripts.
"""

from . import (
    cifar,
    common,
    conll05,
    flowers,
    image,
    imdb,
    imikolov,
    mnist,
    movielens,
    uci_housing,
    wmt14,
    wmt16,
)

__all__ = [
    "cifar", "common", "conll05", "flowers", "image", "imdb", "imikolov", "mnist", "movielens",
    "uci_housing", "wmt14", "wmt16",
]
