"""``paddle.compat``: Paddle 1.8's Python 2/3 helpers, as they behave on Python 3."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["floor_division", "get_exception_message", "int_type", "long_type", "round",
           "to_bytes", "to_text"]

int_type = int
long_type = int


def _convert(obj: Any, one: Any, inplace: bool) -> Any:
    # Paddle converts the items of lists, sets and dicts (keys and values), one level deep.
    if obj is None:
        return obj
    if isinstance(obj, list):
        if inplace:
            obj[:] = [one(item) for item in obj]
            return obj
        return [one(item) for item in obj]
    if isinstance(obj, set):
        converted = {one(item) for item in obj}
        if inplace:
            obj.clear()
            obj.update(converted)
            return obj
        return converted
    if isinstance(obj, dict):
        converted = {one(key): one(value) for key, value in obj.items()}
        if inplace:
            obj.clear()
            obj.update(converted)
            return obj
        return converted
    return one(obj)


def to_text(obj: Any, encoding: str = "utf-8", inplace: bool = False) -> Any:
    """Decode bytes to str; lists, sets and dicts have their items decoded.

    Parameters
    ----------
    obj : bytes, str, list, set, dict or other
        Anything that is neither bytes nor a container is returned unchanged.
    encoding : str
    inplace : bool
        Change the list/set/dict itself instead of returning a new one.

    Returns
    -------
    Any
    """
    def one(item: Any) -> Any:
        return item.decode(encoding) if isinstance(item, bytes) else item

    return _convert(obj, one, inplace)


def to_bytes(obj: Any, encoding: str = "utf-8", inplace: bool = False) -> Any:
    """Encode str to bytes; lists, sets and dicts have their items encoded.

    Parameters
    ----------
    obj : str, bytes, list, set, dict or other
        Anything that is neither str nor a container is returned unchanged.
    encoding : str
    inplace : bool
        Change the list/set/dict itself instead of returning a new one.

    Returns
    -------
    Any
    """
    def one(item: Any) -> Any:
        return item.encode(encoding) if isinstance(item, str) else item

    return _convert(obj, one, inplace)


def round(x: float, d: int = 0) -> float:
    """Round half away from zero, as Python 2 did (``round(2.5) == 3.0``, ``round(-0.5) ==
    -1.0``), returning a float.

    Parameters
    ----------
    x : float
    d : int
        Decimal digits.

    Returns
    -------
    float
    """
    if x > 0.0:
        p = 10 ** d
        return float(math.floor((x * p) + math.copysign(0.5, x))) / p
    if x < 0.0:
        p = 10 ** d
        return float(math.ceil((x * p) + math.copysign(0.5, x))) / p
    return math.copysign(0.0, x)


def floor_division(x: Any, y: Any) -> Any:
    """``x // y``."""
    return x // y


def get_exception_message(exc: BaseException) -> str:
    """The message of ``exc`` (``str(exc)``)."""
    if exc is None:
        raise ValueError("get_exception_message: exc must be an exception, got None")
    return str(exc)
