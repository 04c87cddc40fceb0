"""``paddle.fluid.log_helper``: Fluid 1.8's ``get_logger``."""

from __future__ import annotations

import logging

__all__ = ["get_logger"]


def get_logger(name: str, level: int, fmt: str | None = None) -> logging.Logger:
    """A logger named ``name`` at ``level`` with a stream handler (Fluid's ``get_logger``).

    Parameters
    ----------
    name : str
    level : int
        A :mod:`logging` level.
    fmt : str, optional
        Format of the handler's records.

    Returns
    -------
    logging.Logger
    """
    logger = logging.getLogger(name)
    logger.setLevel(level)
    handler = logging.StreamHandler()
    if fmt:
        handler.setFormatter(logging.Formatter(fmt=fmt))
    logger.addHandler(handler)
    return logger
