"""fluid.ParallelExecutor (Fluid 1.8): the older face of ``CompiledProgram.with_data_parallel``.

Fluid 1.8 itself builds a ParallelExecutor from a CompiledProgram and an Executor; so does
this module, so both spellings run one code path (:mod:`dask_fluid.compiler` and
:mod:`dask_fluid.multi_place`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from .compiler import BuildStrategy, CompiledProgram, ExecutionStrategy, cpu_places, cuda_places
from .executor import CPUPlace, CUDAPlace, Executor, Scope, global_scope
from .framework import Program, Variable, default_main_program

__all__ = ["ParallelExecutor"]


class ParallelExecutor:
    """Run ``main_program`` data-parallel over every CPU place (``CPU_NUM``) or every selected
    GPU of this process.

    Parameters
    ----------
    use_cuda : bool
        GPUs (CuPy; ``FLAGS_selected_gpus`` or every visible one) or ``CPU_NUM`` CPU places.
    loss_name : str, optional
        The loss, needed to train over several places.
    main_program : Program, optional
        Defaults to :func:`default_main_program`.
    share_vars_from : ParallelExecutor, optional
        A ParallelExecutor, run before this one first runs, whose variables this one uses
        (an evaluation program next to its training program).
    exec_strategy : ExecutionStrategy, optional
    build_strategy : BuildStrategy, optional
    num_trainers, trainer_id : int
        NCCL2 trainers (set on ``build_strategy`` as Fluid does).
    scope : Scope, optional
        Defaults to :func:`global_scope`.

    Examples
    --------
    >>> pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name)
    >>> loss_per_place, = pe.run(fetch_list=[loss.name], feed={"x": x, "y": y})
    """

    def __init__(self, use_cuda: bool, loss_name: str | None = None,
                 main_program: Program | None = None,
                 share_vars_from: ParallelExecutor | None = None,
                 exec_strategy: ExecutionStrategy | None = None,
                 build_strategy: BuildStrategy | None = None, num_trainers: int = 1,
                 trainer_id: int = 0, scope: Scope | None = None) -> None:
        build_strategy = build_strategy if build_strategy is not None else BuildStrategy()
        if num_trainers != 1:
            if build_strategy.num_trainers not in (1, num_trainers):
                sys.stderr.write(f"dask_fluid: ParallelExecutor(num_trainers={num_trainers}) "
                                 f"overrides build_strategy.num_trainers="
                                 f"{build_strategy.num_trainers}, as Fluid does\n")
            build_strategy.num_trainers = num_trainers
        if trainer_id != 0:
            build_strategy.trainer_id = trainer_id
        if share_vars_from is not None and not isinstance(share_vars_from, ParallelExecutor):
            raise TypeError("The share_vars_from should be ParallelExecutor, got "
                            f"{type(share_vars_from).__name__}")
        self._places: list[CPUPlace] | list[CUDAPlace] = cuda_places() if use_cuda \
            else cpu_places()
        self._scope = scope if scope is not None else global_scope()
        program = main_program if main_program is not None else default_main_program()
        self._compiled_program = CompiledProgram(program).with_data_parallel(
            loss_name=loss_name, build_strategy=build_strategy, exec_strategy=exec_strategy,
            share_vars_from=share_vars_from._compiled_program if share_vars_from else None,
            places=self._places)
        self._place = self._places[0]
        self._exe = Executor(self._place)

    def run(self, fetch_list: Sequence[Variable | str], feed: dict | list | None = None,
            feed_dict: dict | None = None, return_numpy: bool = True) -> list:
        """One step on every place.

        Parameters
        ----------
        fetch_list : list of Variable or str
        feed : dict or list of dict, optional
            A dict is split along dim 0 between the places; a list has one dict per place.
        feed_dict : dict, optional
            Fluid's deprecated name for ``feed``.
        return_numpy : bool

        Returns
        -------
        list
            Each fetched variable, the places' values concatenated along dim 0.
        """
        if feed is None and feed_dict is not None:
            feed = feed_dict
            sys.stderr.write("dask_fluid: ParallelExecutor.run(feed_dict=) is deprecated; "
                             "use feed=\n")
        return self._exe.run(program=self._compiled_program, scope=self._scope, feed=feed,
                             fetch_list=fetch_list, return_numpy=return_numpy)

    @property
    def device_count(self) -> int:
        """How many places each run uses."""
        return len(self._places)

    def drop_local_exe_scopes(self) -> None:
        """Drop the temporaries the places other than place 0 keep between runs."""
        self._compiled_program._drop_local_scopes()

    def _need_create_local_exe_scopes(self) -> bool:
        return False  # the places' scopes are made at the first run and kept

    def close(self) -> Any:
        """Release the places' threads and the executor."""
        self._compiled_program._close()
        self._exe.close()
