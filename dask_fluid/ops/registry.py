"""The op table: each op type's signature, kernel and gradient rule in one place.

A kernel is ``kernel(ins, attrs, outs) -> dict`` where ``ins`` maps an input slot to the list
of arrays bound to it, ``attrs`` is the op's attribute dict and ``outs`` is the tuple of output
slots the op actually binds (grad kernels skip gradients nobody asked for). It returns a dict
from output slot to a list of arrays. Kernels take their array module from their inputs
(:func:`array_module`), so the same code runs on numpy and cupy.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Kernel = Callable[[dict, dict, tuple], dict]
#: A grad maker receives the forward op description and returns grad op descriptions:
#: dicts with ``type``, ``inputs``, ``outputs`` and ``attrs`` (names, not arrays).
GradMaker = Callable[[Any], list]


@dataclass
class OpDef:
    """Signature and behaviour of one op type."""

    type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    kernel: Kernel | None = None
    grad: GradMaker | None = None
    #: input slots that may be left unbound
    optional: tuple[str, ...] = ()
    #: run by the executor's host (control flow, RPC) rather than as a pure kernel
    host: bool = False
    #: the module that gives this op its kernel, imported the first time the kernel is needed
    #: (the RPC ops' kernels live with the distributed runtime, above the op table)
    provider: str | None = None
    #: how outputs get their LoD: ``None`` (the executor's rule, Fluid's ``ShareLoD("X", ...)``:
    #: an output takes the LoD of ``X[0]`` when it has as many rows; ops without ``X``, of the
    #: first input of each slot), ``"none"`` (outputs have no LoD) or
    #: ``"kernel"`` (the kernel reads ``attrs["_lods"]``, input slot -> LoD per name, and
    #: returns ``out[LOD_KEY]``, output slot -> LoD per name, None for none)
    lod: str | None = None
    #: output slots that are SelectedRows (only some rows) when the op's ``is_sparse`` is set
    sparse_outputs: tuple[str, ...] = ()
    #: the input slot of a table the kernel reads only row by row, through
    #: :func:`table_rows`; an op instance the transpiler marked for remote prefetch
    #: (``remote_prefetch`` with an ``epmap``) gets those rows from the pservers instead
    table_slot: str | None = None
    #: the host kernel run instead of :attr:`kernel` by such a marked op instance, and the
    #: module that sets it
    remote_kernel: Callable[..., dict] | None = None
    remote_provider: str | None = None

    def resolve(self) -> Kernel | None:
        """The kernel, importing :attr:`provider` first if it has not set it yet."""
        if self.kernel is None and self.provider is not None:
            importlib.import_module(self.provider)
        return self.kernel

    def resolve_remote(self) -> Callable[..., dict] | None:
        """The remote-prefetch host kernel, importing :attr:`remote_provider` first."""
        if self.remote_kernel is None and self.remote_provider is not None:
            importlib.import_module(self.remote_provider)
        return self.remote_kernel


def is_remote(attrs: dict) -> bool:
    """Whether an op instance runs its remote-prefetch kernel (set by the transpiler)."""
    return bool(attrs.get("remote_prefetch")) and bool(attrs.get("epmap"))


_OPS: dict[str, OpDef] = {}


def register(
    type: str,
    inputs: tuple[str, ...] = (),
    outputs: tuple[str, ...] = (),
    attrs: dict[str, Any] | None = None,
    *,
    optional: tuple[str, ...] = (),
    grad: GradMaker | None = None,
    host: bool = False,
    lod: str | None = None,
    sparse_outputs: tuple[str, ...] = (),
    table_slot: str | None = None,
) -> Callable[[Kernel], Kernel]:
    """Register ``type`` with its signature; use as a decorator on the kernel."""
    if lod not in (None, "none", "kernel"):
        raise ValueError(f"register({type!r}): lod must be None, 'none' or 'kernel'")
    if table_slot is not None and table_slot not in inputs:
        raise ValueError(f"register({type!r}): table_slot {table_slot!r} is not an input")

    def deco(kernel: Kernel) -> Kernel:
        _OPS[type] = OpDef(type, tuple(inputs), tuple(outputs), dict(attrs or {}), kernel, grad,
                           tuple(optional), host, lod=lod, sparse_outputs=tuple(sparse_outputs),
                           table_slot=table_slot)
        return kernel

    return deco


def register_signature(type: str, inputs=(), outputs=(), attrs=None, *, optional=(),
                       host: bool = True, provider: str | None = None,
                       lod: str | None = None) -> None:
    """Register an op that has no kernel here (RPC and control ops run by a host);
    ``provider`` names the module that sets its kernel (imported on first use), ``lod`` as
    for :func:`register`."""
    if lod not in (None, "none", "kernel"):
        raise ValueError(f"register_signature({type!r}): lod must be None, 'none' or 'kernel'")
    _OPS[type] = OpDef(type, tuple(inputs), tuple(outputs), dict(attrs or {}), None, None,
                       tuple(optional), host, provider, lod=lod)


def set_kernel(type: str, kernel: Kernel) -> None:
    """Give a registered op a kernel (used by runtimes that implement host ops)."""
    get(type).kernel = kernel


def set_remote_provider(type: str, provider: str) -> None:
    """Name the module that gives ``type`` its remote-prefetch kernel."""
    get(type).remote_provider = provider


def set_remote_kernel(type: str, kernel: Callable[..., dict]) -> None:
    """Give ``type`` its remote-prefetch host kernel ``kernel(ins, attrs, outs, ctx)``."""
    get(type).remote_kernel = kernel


def remote_table_ops() -> dict[str, str]:
    """Op type -> table slot, for every op that can read its table's rows remotely."""
    return {t: d.table_slot for t, d in _OPS.items() if d.table_slot is not None}


def table_rows(ins: dict, attrs: dict, slot: str, ids: Any) -> Any:
    """Rows ``ids`` (int64, 1-D) of the table bound to ``slot``, shape ``[len(ids), ...]``.

    They come from the table itself, or, for an op instance whose table stays on the
    pservers, from the fetcher its remote kernel passes as ``attrs["_table_rows"]``.
    """
    fetch = attrs.get("_table_rows")
    if fetch is not None:
        return fetch(ids)
    table = ins[slot][0]
    return array_module(table).take(table, ids, axis=0)


def set_grad(type: str, grad: GradMaker) -> None:
    """Attach the gradient rule of an already registered op."""
    get(type).grad = grad


def get(type: str) -> OpDef:
    """Return the :class:`OpDef` for ``type``; KeyError naming the op when unknown."""
    try:
        return _OPS[type]
    except KeyError:
        raise KeyError(
            f"op type {type!r} is not registered; known ops: {', '.join(sorted(_OPS))}"
        ) from None


def has(type: str) -> bool:
    return type in _OPS


def registered() -> list[str]:
    """All registered op types, sorted."""
    return sorted(_OPS)


def to_host(a: Any) -> np.ndarray:
    """A numpy array of ``a``, copied from the GPU when it is a cupy array (which refuses
    implicit conversion)."""
    return a.get() if type(a).__module__.startswith("cupy") else np.asarray(a)


def array_module(*arrays: Any):
    """numpy or cupy, from the first array that is a cupy array (numpy otherwise)."""
    for a in arrays:
        mod = type(a).__module__
        if mod.startswith("cupy"):
            import cupy

            return cupy
    import numpy

    return numpy


GRAD = "@GRAD"
#: the key of a ``lod="kernel"`` kernel's result that holds its outputs' LoDs
LOD_KEY = "@LOD"


def default_grad(op: Any) -> list[dict]:
    """Fluid's default grad op: ``<type>_grad`` reading every forward input, output and output
    gradient (slot ``Out@GRAD``) and writing every input gradient (slot ``X@GRAD``).

    The backward pass then drops gradients nobody needs (stop_gradient, no_grad_set) and
    unbinds output gradients that were never produced; a grad kernel sees ``None`` for those
    and treats them as zeros.
    """
    inputs = {slot: list(names) for slot, names in op.inputs.items()}
    inputs.update({slot: list(names) for slot, names in op.outputs.items()})
    inputs.update({slot + GRAD: [n + GRAD for n in names] for slot, names in op.outputs.items()})
    outputs = {slot + GRAD: [n + GRAD for n in names] for slot, names in op.inputs.items()}
    attrs = {k: v for k, v in op.attrs.items() if k not in ("op_role", "op_role_var")}
    return [{"type": op.type + "_grad", "inputs": inputs, "outputs": outputs, "attrs": attrs}]
