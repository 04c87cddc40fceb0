"""A small in-process reference runner for transpiled programs: no Dask, no RPC.

It executes exactly what a pserver-mode runtime must execute, with the RPC ops replaced by
copies between scopes, so it pins down the semantics a real runtime has to reproduce:

- every pserver runs its startup program in its own scope;
- each trainer runs its transpiled startup and main programs; ``send`` copies each input into
  the scope of ``epmap[i]`` under ``send_varnames[i]``; ``recv`` copies ``recv_varnames[i]``
  from ``epmap[i]`` into the output;
- sync mode: when every trainer has reached ``send_barrier``, each pserver runs the blocks of
  ``listen_and_serv.optimize_blocks`` in order; then the trainers continue (recv, concat);
- async mode: trainers run one after the other; each gradient received runs its block from
  ``grad_to_block_id`` at once (DC-ASGD: with ``@TRAINER_ID@`` set, and each recv refreshes the
  trainer's backup of the parameter).

With ``runtime_split_send_recv`` a ``send`` of one whole gradient is cut into its blocks by
``sections`` and a ``recv`` into one parameter joins its blocks. A ``lookup_table`` marked for
remote prefetch reads its rows from the table's blocks in the pserver scopes. Distributed
lookup tables
(``prefetch``), the pipelined async mode (its staleness depends on the runtime's timing) and
GEO-SGD are not simulated.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..executor import Executor, Scope
from ..framework import Program
from ..ops import registry
from ..ops.selected_rows import SelectedRows
from ..ops.split_ops import split_byref, split_selected_rows
from .config import DistributeTranspilerConfig, parse_endpoints
from .distribute_transpiler import DistributeTranspiler
from .plan import RPC_OP_TYPES, TRAINER_ID_VAR


def _copy(value: Any) -> Any:
    if isinstance(value, SelectedRows):
        return SelectedRows(value.rows.copy(), value.value.copy(), value.height)
    return np.array(value, copy=True)


def _split_rows(value: Any, sections: list[int]) -> list[Any]:
    """What the runtime does with a runtime-split ``send``: the blocks of a whole gradient."""
    if isinstance(value, SelectedRows):
        return split_selected_rows({"X": [value]}, {"height_sections": sections}, ())["Out"]
    return split_byref({"X": [value]}, {"sections": sections}, ())["Out"]


def _talks(op: Any) -> bool:
    """Whether the runtime would talk to the pservers to run ``op``."""
    return op.type in RPC_OP_TYPES or registry.is_remote(op.attrs)


def _segments(program: Program) -> list[Any]:
    """The global block cut at RPC ops (and remote lookups): a list of Programs (kernel runs)
    and those ops."""
    ops = program.global_block().ops
    out: list[Any] = []
    start = 0
    for i, op in enumerate(ops + [None]):
        if op is not None and not _talks(op):
            continue
        if i > start:
            seg = program.clone()
            seg.global_block().ops = seg.global_block().ops[start:i]
            out.append(seg)
        if op is not None:
            out.append(op)
        start = i + 1
    return out


class InProcessCluster:
    """Train a program the pserver way, in one process.

    Parameters
    ----------
    program, startup_program : Program
        The single-process programs (after ``minimize``); they are cloned, never modified.
    pservers : str or list of str
    trainers : int
    config : DistributeTranspilerConfig, optional
    sync_mode : bool
    """

    def __init__(self, program: Program, startup_program: Program, pservers: str | list[str],
                 trainers: int, config: DistributeTranspilerConfig | None = None,
                 sync_mode: bool = True) -> None:
        self.endpoints = parse_endpoints(pservers, "pservers")
        self.exe = Executor()
        self.transpilers: list[DistributeTranspiler] = []
        self.trainer_programs: list[list[Any]] = []
        trainer_startups = []
        for t in range(trainers):
            main, startup = program.clone(), startup_program.clone()
            tr = DistributeTranspiler(copy.copy(config) if config else None)
            tr.transpile(t, program=main, pservers=",".join(self.endpoints), trainers=trainers,
                         sync_mode=sync_mode, startup_program=startup)
            self.trainer_programs.append(_segments(tr.get_trainer_program()))
            trainer_startups.append(_segments(startup))
            self.transpilers.append(tr)
        mode = self.transpilers[0].training_mode
        if mode.pipelined or mode.geo:
            raise NotImplementedError(f"the in-process runner does not simulate {mode.name} "
                                      "training: run it with train_pserver or as processes")
        self.sync_mode = self.transpilers[0].sync_mode
        self.pserver_programs: dict[str, Program] = {}
        self.ps_scopes = {ep: Scope() for ep in self.endpoints}
        for ep in self.endpoints:
            main, startup = self.transpilers[0].get_pserver_programs(ep)
            self.pserver_programs[ep] = main
            self.exe.run(startup, scope=self.ps_scopes[ep])
        self.trainer_scopes = [Scope() for _ in range(trainers)]
        self._run_all([self._trainer(t, trainer_startups[t], {}) for t in range(trainers)])

    # -- pservers -----------------------------------------------------------------------------
    def _serv_attrs(self, ep: str) -> dict:
        return self.pserver_programs[ep].global_block().ops[-1].attrs

    def _run_block(self, ep: str, idx: int) -> None:
        prog = self.pserver_programs[ep]
        self.exe.run_block(prog, prog.block(idx), self.ps_scopes[ep])

    def _optimize_all(self) -> None:
        for ep in self.endpoints:
            for idx in self._serv_attrs(ep)["optimize_blocks"]:
                self._run_block(ep, idx)

    def _on_async_grad(self, ep: str, name: str, trainer_id: int) -> None:
        attrs = self._serv_attrs(ep)
        for entry in attrs["grad_to_block_id"]:
            grad, idx = entry.rsplit(":", 1)
            if grad == name:
                if attrs["dc_asgd"]:
                    self.ps_scopes[ep].set(TRAINER_ID_VAR, np.array([trainer_id], np.int64))
                self._run_block(ep, int(idx))

    # -- trainers -----------------------------------------------------------------------------
    def _trainer(self, t: int, segments: list[Any], feed: dict) -> Iterator[str]:
        """Run one trainer's program; yields at each barrier."""
        scope = self.trainer_scopes[t]
        fed = dict(feed)
        for seg in segments:
            if isinstance(seg, Program):
                self.exe.run(seg, feed=feed, scope=scope)
                feed = {}
                continue
            op = seg
            if op.type == "send":
                names = op.attrs["send_varnames"]
                values = [scope.get(x) for x in op.input("X")]
                if len(values) == 1 and len(names) > 1:  # runtime split
                    values = _split_rows(values[0], op.attrs["sections"])
                for value, ep, name in zip(values, op.attrs["epmap"], names, strict=True):
                    self.ps_scopes[ep].set(name, _copy(value))
                    if not self.sync_mode:
                        self._on_async_grad(ep, name, t)
            elif op.type == "recv":
                blocks = []
                for ep, name in zip(op.attrs["epmap"], op.attrs["recv_varnames"], strict=True):
                    ps = self.ps_scopes[ep]
                    blocks.append(_copy(ps.get(name)))
                    bak = f"{name}.trainer_{t}_bak"
                    if self._serv_attrs(ep)["dc_asgd"] and bak in ps:
                        ps.set(bak, _copy(ps.get(name)))
                outs = op.output("Out")
                if len(outs) == 1 and len(blocks) > 1:  # runtime split: join the blocks
                    blocks = [np.concatenate(blocks, axis=0)]
                for out, value in zip(outs, blocks, strict=True):
                    scope.set(out, value)
            elif op.type in ("send_barrier", "fetch_barrier"):
                yield op.type
            elif registry.is_remote(op.attrs):
                self._remote_lookup(op, scope, fed)
            else:
                raise NotImplementedError(f"the in-process runner cannot simulate {op.type!r}")

    def _remote_lookup(self, op: Any, scope: Scope, fed: dict) -> None:
        """An op reading a table left on the pservers: the rows come from their blocks there
        (the trainer's own copy of the table, stale since startup, is not read)."""
        table = np.concatenate([np.asarray(self.ps_scopes[ep].get(name)) for ep, name in
                                zip(op.attrs["epmap"], op.attrs["table_names"], strict=True)])
        local = Program()
        block = local.global_block()
        for name in op.input_arg_names + op.output_arg_names:
            block.create_var(name=name, shape=op.block.var(name).shape,
                             dtype=op.block.var(name).dtype)
        block.append_op(op.type, inputs=op.inputs, outputs=op.outputs,
                        attrs={k: v for k, v in op.attrs.items() if k != "epmap"})
        w = op.input(registry.get(op.type).table_slot)[0]
        own = scope.get(w)
        scope.set(w, table)
        try:
            self.exe.run(local, scope=scope,
                         feed={n: fed[n] for n in op.input_arg_names if n in fed})
        finally:
            scope.set(w, own)

    def _run_all(self, gens: list[Iterator[str]]) -> None:
        """Advance trainers in lock step; after every trainer passed send_barrier, the
        pservers optimize (sync). Async trainers run one after the other."""
        if not self.sync_mode:
            for g in gens:
                for _ in g:
                    pass
            return
        active = list(gens)
        while active:
            events = []
            for g in list(active):
                try:
                    events.append(next(g))
                except StopIteration:
                    active.remove(g)
            if "send_barrier" in events:
                if len(events) != len(gens) or set(events) != {"send_barrier"}:
                    raise RuntimeError(f"trainers out of step at a barrier: {events}")
                self._optimize_all()

    def step(self, feeds: Sequence[dict], fetch_list: Sequence[str] = ()) -> list[list]:
        """One training step: ``feeds[t]`` is trainer ``t``'s batch. Returns each trainer's
        fetched values (taken from its scope after the step)."""
        if len(feeds) != len(self.trainer_scopes):
            raise ValueError(f"need one feed per trainer ({len(self.trainer_scopes)}), got "
                             f"{len(feeds)}")
        self._run_all([self._trainer(t, self.trainer_programs[t], dict(feeds[t]))
                       for t in range(len(feeds))])
        return [[np.array(s.get(n)) for n in fetch_list] for s in self.trainer_scopes]

    def parameters(self) -> dict[str, np.ndarray]:
        """Every parameter, concatenated from its blocks on the pservers."""
        plan = self.transpilers[0].plan
        out = {}
        for pp in plan.params:
            parts = [np.asarray(self.ps_scopes[ep].get(name))
                     for name, ep in zip(pp.param_block_names, pp.endpoints, strict=True)]
            out[pp.param] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
        return out
