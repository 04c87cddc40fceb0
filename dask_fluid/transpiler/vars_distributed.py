"""Where each parameter's blocks live, in Fluid 1.8's ``VarsDistributed`` form.

Fluid's transpiler hands every pserver program a ``_parameters_on_pservers`` overview: one
``VarDistributed`` per parameter block, with the original variable (``origin``), the block's
own description (``slice``), whether the parameter was cut (``is_slice``), the block's index
and element offset, and its endpoint. Scripts and Paddle's tests read it to find out what each
pserver holds (``get_distributed_vars_by_ep``); it is built here from the transpile plan.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VarDistributed", "VarStruct", "VarsDistributed", "from_plan"]


@dataclass(frozen=True)
class VarStruct:
    """A variable's description: name, shape, dtype (as Fluid's ``VarStruct``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    type: str = "lod_tensor"
    lod_level: int = 0
    persistable: bool = True


@dataclass(frozen=True)
class VarDistributed:
    """One block of a parameter on one pserver."""

    origin: VarStruct
    slice: VarStruct
    is_slice: bool
    block_id: int
    offset: int
    vtype: str
    endpoint: str


class VarsDistributed:
    """Every parameter block of a transpile, queried by endpoint, name or type."""

    def __init__(self) -> None:
        self.distributed_vars: list[VarDistributed] = []

    def add_distributed_var(self, var: VarDistributed) -> None:
        self.distributed_vars.append(var)

    def get_distributed_var_by_slice(self, var_name: str) -> VarDistributed | None:
        return next((v for v in self.distributed_vars if v.slice.name == var_name), None)

    def get_distributed_var_by_origin_and_ep(self, origin_var_name: str, endpoint: str
                                             ) -> VarDistributed | None:
        return next((v for v in self.distributed_vars if v.origin.name == origin_var_name
                     and v.endpoint == endpoint), None)

    def get_distributed_vars_by_vtypes(self, vtypes: list[str],
                                       groupby: bool = False) -> list[VarDistributed] | dict:
        found = [v for v in self.distributed_vars if v.vtype in vtypes]
        if not groupby:
            return found
        grouped: dict[str, list[VarDistributed]] = {}
        for v in found:
            grouped.setdefault(v.origin.name, []).append(v)
        return grouped

    def get_distributed_vars_by_ep(self, endpoint: str) -> list[VarDistributed]:
        return [v for v in self.distributed_vars if v.endpoint == endpoint]

    def overview(self) -> str:
        return "\n".join(f"{v.origin.name} {list(v.origin.shape)} -> {v.slice.name} "
                         f"{list(v.slice.shape)} @ {v.endpoint}" for v in self.distributed_vars)

    def __repr__(self) -> str:
        return f"VarsDistributed({len(self.distributed_vars)} blocks)"


def from_plan(plan) -> VarsDistributed:
    """The overview of a :class:`~.plan.TranspilePlan`'s parameter blocks ("Param") and of the
    optimizer state each pserver keeps for them ("Optimizer": Adam's moments, a momentum's
    velocity, the beta powers), named as the pserver programs name them."""
    from .plan import SLICED_ACCUMULATORS, is_optimizer_op  # noqa: PLC0415

    out = VarsDistributed()
    block = plan.origin.global_block()
    for pp in plan.params:
        var = block.var(pp.param)
        origin = VarStruct(pp.param, tuple(var.shape), var.dtype)
        for name, b, ep in zip(pp.param_block_names, pp.blocks, pp.endpoints, strict=True):
            out.add_distributed_var(VarDistributed(
                origin, VarStruct(name, tuple(b.shape), var.dtype), pp.split, b.index,
                b.offset, "Param", ep))
    for ep in plan.endpoints:
        on_ep = plan.blocks_on(ep)
        for pp, k in on_ep:
            shared = sum(1 for q, _ in on_ep if q is pp) > 1
            b = pp.blocks[k]
            for op in plan.ops_of_param(pp.param):
                if not is_optimizer_op(op):
                    continue
                for slot, names in op.inputs.items():
                    if slot in _NOT_STATE:
                        continue
                    for name in names:
                        acc = block.var(name)
                        sliced = (slot in SLICED_ACCUMULATORS.get(op.type, ()) or (
                            acc.shape is not None and tuple(acc.shape) == b.full_shape)) \
                            and not b.is_whole
                        shape = tuple(b.shape) if sliced else tuple(acc.shape)
                        on_pserver = name + (f".block{k}" if shared else "")
                        out.add_distributed_var(VarDistributed(
                            VarStruct(name, tuple(acc.shape), acc.dtype),
                            VarStruct(on_pserver, shape, acc.dtype), sliced,
                            b.index if sliced else 0, b.offset if sliced else 0, "Optimizer",
                            ep))
    return out


#: optimizer inputs that are not state the pservers keep
_NOT_STATE = frozenset({"Param", "Grad", "LearningRate", "Beta1Tensor", "Beta2Tensor"})
