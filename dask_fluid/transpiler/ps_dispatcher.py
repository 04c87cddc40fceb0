"""Which pserver endpoint gets each variable block (Fluid's ``ps_dispatcher``)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any


def _name_of(var: Any) -> str:
    return var if isinstance(var, str) else getattr(var, "name", None) or var.varname


class PSDispatcher:
    """Base class: ``dispatch(varlist)`` returns one endpoint per variable.

    Subclass it and pass the **class** as ``DistributeTranspilerConfig.split_method``.

    Parameters
    ----------
    pserver_endpoints : sequence of str
    """

    def __init__(self, pserver_endpoints: Sequence[str]) -> None:
        self._eps = list(pserver_endpoints)
        self._step = 0

    @property
    def eps(self) -> list[str]:
        return self._eps

    def reset(self) -> None:
        """Start again from the first endpoint."""
        self._step = 0

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        """One endpoint per variable (a name, a Variable or a VarBlock)."""
        raise NotImplementedError(f"{type(self).__name__} must implement dispatch(varlist)")


class RoundRobin(PSDispatcher):
    """Endpoints in turn. The position carries over between calls, so dispatching each
    variable's block list in order is one global round robin over all blocks."""

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        eplist = []
        for _ in varlist:
            eplist.append(self._eps[self._step])
            self._step = (self._step + 1) % len(self._eps)
        return eplist


class HashName(PSDispatcher):
    """``eps[crc32(name) % len(eps)]``.

    Fluid uses Python's ``hash()``, which is salted per process for str (PYTHONHASHSEED), so two
    nodes would place the same block on different pservers; it also calls ``var.name()`` on a
    str property. CRC-32 of the UTF-8 name is stable across processes, machines and Python
    versions.
    """

    def dispatch(self, varlist: Sequence[Any]) -> list[str]:
        return [self._eps[zlib.crc32(_name_of(v).encode()) % len(self._eps)] for v in varlist]
