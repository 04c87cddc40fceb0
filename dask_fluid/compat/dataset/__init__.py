"""Paddle 1.8's ``paddle.dataset``: the datasets its model files read, cached as Paddle caches them.

``common`` holds the cache (``DATA_HOME``) and the downloader; ``mnist``, ``uci_housing``,
``imikolov``, ``imdb``, ``flowers``, ``wmt14``, ``wmt16``, ``movielens`` and ``conll05`` each turn
their published files into reader creators.
"""

from . import (
    common,
    conll05,
    flowers,
    imdb,
    imikolov,
    mnist,
    movielens,
    uci_housing,
    wmt14,
    wmt16,
)

__all__ = [
    "common", "conll05", "flowers", "imdb", "imikolov", "mnist", "movielens", "uci_housing",
    "wmt14", "wmt16",
]
