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
    #: how outputs get their LoD: ``None`` (the executor's rule: an output takes the LoD of the
    #: first input with a LoD and as many rows), ``"none"`` (outputs have no LoD) or
    #: ``"kernel"`` (the kernel reads ``attrs["_lods"]``, input slot -> LoD per name, and
    #: returns ``out[LOD_KEY]``, output slot -> LoD per name, None for none)
    lod: str | None = None
    #: the host kernel run instead of :attr:`kernel` by an op instance the transpiler marked
    #: for remote prefetch (``remote_prefetch`` with an ``epmap``: the rows of its parameter
    #: come from the pservers), and the module that sets it
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
) -> Callable[[Kernel], Kernel]:
    """Register ``type`` with its signature; use as a decorator on the kernel."""
    if lod not in (None, "none", "kernel"):
        raise ValueError(f"register({type!r}): lod must be None, 'none' or 'kernel'")

    def deco(kernel: Kernel) -> Kernel:
        _OPS[type] = OpDef(type, tuple(inputs), tuple(outputs), dict(attrs or {}), kernel, grad,
                           tuple(optional), host, lod=lod)
        return kernel

    return deco


def register_signature(type: str, inputs=(), outputs=(), attrs=None, *, optional=(),
                       host: bool = True, provider: str | None = None) -> None:
    """Register an op that has no kernel here (RPC and control ops run by a host);
    ``provider`` names the module that sets its kernel (imported on first use)."""
    _OPS[type] = OpDef(type, tuple(inputs), tuple(outputs), dict(attrs or {}), None, None,
                       tuple(optional), host, provider)


def set_kernel(type: str, kernel: Kernel) -> None:
    """Give a registered op a kernel (used by runtimes that implement host ops)."""
    get(type).kernel = kernel


def set_remote_provider(type: str, provider: str) -> None:
    """Name the module that gives ``type`` its remote-prefetch kernel."""
    get(type).remote_provider = provider


def set_remote_kernel(type: str, kernel: Callable[..., dict]) -> None:
    """Give ``type`` its remote-prefetch host kernel ``kernel(ins, attrs, outs, ctx)``."""
    get(type).remote_kernel = kernel


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
