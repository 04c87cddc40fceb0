"""``fluid.wrapped_decorator``: decorators whose wrappers keep the wrapped function's
signature, as Fluid 1.8's (which builds them with the ``decorator`` package). Fluid's own
modules and its unit tests' helpers decorate with them (``signature_safe_contextmanager``)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

__all__ = ["signature_safe_contextmanager", "wrap_decorator"]


def wrap_decorator(decorator_func: Callable[[Callable], Callable]) -> Callable[[Callable],
                                                                               Callable]:
    """A decorator that applies ``decorator_func`` to the function it decorates, at each call,
    and whose wrapper has the function's name, docstring and signature
    (``inspect.signature`` follows ``__wrapped__``).

    Parameters
    ----------
    decorator_func : callable
        Takes a function and returns the function to call instead.
    """
    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return decorator_func(func)(*args, **kwargs)

        return wrapper

    return decorate


#: ``contextlib.contextmanager`` keeping the generator function's signature
signature_safe_contextmanager = wrap_decorator(contextlib.contextmanager)
