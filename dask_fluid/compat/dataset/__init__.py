"""Paddle 1.8's ``paddle.dataset``: the datasets its model files read, cached as Paddle caches them.

``common`` holds the cache (``DATA_HOME``) and the downloader; ``mnist``, ``uci_housing``,
``imikolov`` and ``imdb`` each turn their published files into reader creators.
"""

from . import common, imdb, imikolov, mnist, uci_housing

__all__ = ["common", "imdb", "imikolov", "mnist", "uci_housing"]
