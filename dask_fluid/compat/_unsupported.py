"""Stand-ins for Fluid names that dask_fluid does not implement: importable, raising when used.

Fluid scripts import some names at module level that they only use on code paths dask_fluid does
not offer (the MPI role makers, ``fluid.profiler``). The stand-ins let the import succeed;
calling a function or creating an instance raises NotImplementedError with the Fluid name, why,
and what to use instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn


def not_implemented(name: str, why: str) -> NotImplementedError:
    """The error raised when a script uses ``name``."""
    return NotImplementedError(f"{name} is not implemented in dask_fluid: {why}")


def function(name: str, why: str, module: str) -> Callable[..., NoReturn]:
    """A function that raises :func:`not_implemented` when called."""
    short = name.rsplit(".", 1)[-1]

    def stand_in(*args: Any, **kwargs: Any) -> NoReturn:
        raise not_implemented(name, why)

    stand_in.__name__ = stand_in.__qualname__ = short
    stand_in.__module__ = module
    stand_in.__doc__ = f"Fluid's ``{name}``; not implemented: {why}."
    return stand_in


def cls(name: str, why: str, module: str) -> type:
    """A class that can be subclassed (at import time) but raises when instantiated."""
    short = name.rsplit(".", 1)[-1]

    # __new__ rather than __init__: a subclass that never calls super().__init__() still raises
    def __new__(klass: type, *args: Any, **kwargs: Any) -> NoReturn:
        raise not_implemented(name, why)

    return type(short, (), {"__new__": __new__, "__module__": module,
                            "__doc__": f"Fluid's ``{name}``; not implemented: {why}."})
