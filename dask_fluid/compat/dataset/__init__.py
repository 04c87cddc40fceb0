"""Paddle 1.8's ``paddle.dataset``: the datasets its model files read, cached as Paddle caches them.

``common`` holds the cache (``DATA_HOME``) and the downloader; ``mnist``, ``uci_housing``,
``imikolov``, ``imdb`` and ``flowers`` each turn their published files into reader creators.
"""

from . import common, flowers, imdb, imikolov, mnist, uci_housing

__all__ = ["common", "flowers", "imdb", "imikolov", "mnist", "uci_housing"]
