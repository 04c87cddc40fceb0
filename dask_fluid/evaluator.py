"""Fluid 1.8's ``paddle.fluid.evaluator``: the deprecated program-side evaluators.

Follows ``python/paddle/fluid/evaluator.py`` of Paddle 1.8. An evaluator adds persistable
state variables and the ops that accumulate a mini-batch into them to the current (main)
program; ``reset(executor)`` runs a small program that zeroes the states and
``eval(executor)`` one that reads them back. As in Fluid, the states get no startup
initializer: call ``reset`` before the first run of the main program. Fluid warns that these
are deprecated in favour of :mod:`dask_fluid.metrics`, and so does this module.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from . import layers, unique_name
from .framework import Program, Variable, program_guard
from .layer_helper import LayerHelper
from .metrics import _clone_var_, _detection_map_ops, _reset_has_state

__all__ = [
    "ChunkEvaluator",
    "EditDistance",
    "DetectionMAP",
]


class Evaluator:
    """Base class of the program-side evaluators (Fluid 1.8's ``fluid.evaluator.Evaluator``).

    Parameters
    ----------
    name : str
        The layer type that names the state variables (``chunk_eval``, ...).
    **kwargs
        ``name`` names the helper as in Fluid's ``LayerHelper``; the others (Fluid takes
        ``main_program`` / ``startup_program`` and ignores them too) are ignored.

    Attributes
    ----------
    states : list of Variable
        The state variables, zeroed by :meth:`reset`.
    metrics : list of Variable
        The per-mini-batch metric variables.
    """

    def __init__(self, name: str, **kwargs: Any) -> None:
        warnings.warn(
            f"The {self.__class__.__name__} is deprecated, because maintain a modified program "
            f"inside evaluator cause bug easily, please use fluid.metrics."
            f"{self.__class__.__name__} instead.", Warning, stacklevel=3)
        self.states: list[Variable] = []
        self.metrics: list[Variable] = []
        self.helper = LayerHelper(name, kwargs.get("name"))

    def reset(self, executor: Any, reset_program: Program | None = None) -> None:
        """Zero every state: run ``reset_program`` (a new Program when None) holding a
        ``fill_constant`` per state.

        Parameters
        ----------
        executor : Executor
        reset_program : Program, optional
        """
        if reset_program is None:
            reset_program = Program()
        with program_guard(main_program=reset_program):
            for var in self.states:
                g_var = _clone_var_(reset_program.current_block(), var)
                layers.fill_constant(shape=g_var.shape, value=0.0, dtype=g_var.dtype,
                                     out=g_var)
        executor.run(reset_program)

    def eval(self, executor: Any, eval_program: Program | None = None) -> Any:
        """The metrics over the accumulated states (subclasses implement it)."""
        raise NotImplementedError()

    def _create_state(self, suffix: str, dtype: str, shape: list[int] | None) -> Variable:
        """A persistable state variable ``<unique helper name>_<suffix>``, listed in
        :attr:`states`."""
        state = self.helper.main_program.current_block().create_var(
            name="_".join([unique_name.generate(self.helper.name), suffix]),
            persistable=True, dtype=dtype, shape=shape)
        self.states.append(state)
        return state

    def _check_root_block(self) -> None:
        if self.helper.main_program.current_block().idx != 0:
            raise ValueError("You can only invoke Evaluator in root block")


class ChunkEvaluator(Evaluator):
    """Chunk precision, recall and F1 accumulated in the program (Fluid 1.8's
    ``fluid.evaluator.ChunkEvaluator``; deprecated for ``fluid.metrics.ChunkEvaluator``).

    Adds ``layers.chunk_eval`` and ``sum`` ops that add its three counts to int64 states.

    Parameters
    ----------
    input, label : Variable
        Predicted and true tag ids (see ``layers.chunk_eval``).
    chunk_scheme : str
        ``"IOB"``, ``"IOE"``, ``"IOBES"`` or ``"plain"``.
    num_chunk_types : int
    excluded_chunk_types : list of int, optional
    """

    def __init__(self, input: Variable, label: Variable, chunk_scheme: str,
                 num_chunk_types: int, excluded_chunk_types: list[int] | None = None) -> None:
        super().__init__("chunk_eval")
        self._check_root_block()
        self.num_infer_chunks = self._create_state(
            dtype="int64", shape=[1], suffix="num_infer_chunks")
        self.num_label_chunks = self._create_state(
            dtype="int64", shape=[1], suffix="num_label_chunks")
        self.num_correct_chunks = self._create_state(
            dtype="int64", shape=[1], suffix="num_correct_chunks")
        (precision, recall, f1_score, num_infer_chunks, num_label_chunks,
         num_correct_chunks) = layers.chunk_eval(
            input=input, label=label, chunk_scheme=chunk_scheme,
            num_chunk_types=num_chunk_types, excluded_chunk_types=excluded_chunk_types)
        layers.sums(input=[self.num_infer_chunks, num_infer_chunks], out=self.num_infer_chunks)
        layers.sums(input=[self.num_label_chunks, num_label_chunks], out=self.num_label_chunks)
        layers.sums(input=[self.num_correct_chunks, num_correct_chunks],
                    out=self.num_correct_chunks)
        self.metrics.extend([precision, recall, f1_score])

    def eval(self, executor: Any, eval_program: Program | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(precision, recall, f1_score)`` over the accumulated counts, each a float32
        array ``[1]`` (0 where its denominator, or for F1 the correct count, is 0).

        Parameters
        ----------
        executor : Executor
        eval_program : Program, optional
            The program that fetches the states; a new one when None.
        """
        if eval_program is None:
            eval_program = Program()
        block = eval_program.current_block()
        num_infer_chunks, num_label_chunks, num_correct_chunks = executor.run(
            eval_program, fetch_list=[_clone_var_(block, state) for state in self.states])
        num_infer_chunks = num_infer_chunks[0]
        num_label_chunks = num_label_chunks[0]
        num_correct_chunks = num_correct_chunks[0]
        precision = float(num_correct_chunks) / num_infer_chunks if num_infer_chunks else 0
        recall = float(num_correct_chunks) / num_label_chunks if num_label_chunks else 0
        f1_score = (float(2 * precision * recall) / (precision + recall)
                    if num_correct_chunks else 0)
        return (np.array([precision], dtype="float32"), np.array([recall], dtype="float32"),
                np.array([f1_score], dtype="float32"))


class EditDistance(Evaluator):
    """Average edit distance and instance error accumulated in the program (Fluid 1.8's
    ``fluid.evaluator.EditDistance``; deprecated for ``fluid.metrics.EditDistance``).

    Adds ``layers.edit_distance`` (normalized, its default) and the ops that add the batch's
    total distance, pair count and count of pairs with a non-zero distance to the states.

    Parameters
    ----------
    input, label : Variable
        int64 LoD id sequences, hypotheses and references.
    ignored_tokens : list of int, optional
        Ids removed from both before measuring.
    **kwargs
        As :class:`Evaluator`.
    """

    def __init__(self, input: Variable, label: Variable,
                 ignored_tokens: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__("edit_distance", **kwargs)
        self._check_root_block()
        self.total_distance = self._create_state(
            dtype="float32", shape=[1], suffix="total_distance")
        self.seq_num = self._create_state(dtype="int64", shape=[1], suffix="seq_num")
        self.instance_error = self._create_state(
            dtype="int64", shape=[1], suffix="instance_error")
        distances, seq_num = layers.edit_distance(
            input=input, label=label, ignored_tokens=ignored_tokens)

        zero = layers.fill_constant(shape=[1], value=0.0, dtype="float32")
        compare_result = layers.equal(distances, zero)
        compare_result_int = layers.cast(x=compare_result, dtype="int64")
        seq_right_count = layers.reduce_sum(compare_result_int)
        instance_error_count = layers.elementwise_sub(x=seq_num, y=seq_right_count)
        total_distance = layers.reduce_sum(distances)
        layers.sums(input=[self.total_distance, total_distance], out=self.total_distance)
        layers.sums(input=[self.seq_num, seq_num], out=self.seq_num)
        layers.sums(input=[self.instance_error, instance_error_count],
                    out=self.instance_error)
        self.metrics.append(total_distance)
        self.metrics.append(instance_error_count)

    def eval(self, executor: Any, eval_program: Program | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """``(avg_distance, avg_instance_error)`` over the accumulated states, computed by
        ops in ``eval_program`` (a new Program when None), as float32 arrays ``[1]``.

        Parameters
        ----------
        executor : Executor
        eval_program : Program, optional
        """
        if eval_program is None:
            eval_program = Program()
        block = eval_program.current_block()
        with program_guard(main_program=eval_program):
            total_distance = _clone_var_(block, self.total_distance)
            seq_num = _clone_var_(block, self.seq_num)
            instance_error = _clone_var_(block, self.instance_error)
            seq_num = layers.cast(x=seq_num, dtype="float32")
            instance_error = layers.cast(x=instance_error, dtype="float32")
            avg_distance = layers.elementwise_div(x=total_distance, y=seq_num)
            avg_instance_error = layers.elementwise_div(x=instance_error, y=seq_num)
            result = executor.run(eval_program, fetch_list=[avg_distance, avg_instance_error])
        return np.array(result[0]), np.array(result[1])


class DetectionMAP(Evaluator):
    """Detection mAP of the mini-batch and accumulated over batches (Fluid 1.8's
    ``fluid.evaluator.DetectionMAP``; deprecated for ``fluid.metrics.DetectionMAP``).

    Adds two ``detection_map`` ops: one for the batch, one that carries the earlier batches
    in the states, gated by ``has_state`` (0 from the startup program and :meth:`reset`, set
    to 1 by the main program after each run).

    Parameters
    ----------
    input : Variable
        Detections, LoD ``[M, 6]``: label, confidence, xmin, ymin, xmax, ymax.
    gt_label, gt_box : Variable
        Ground truth, LoD ``[N, 1]`` and ``[N, 4]``.
    gt_difficult : Variable, optional
    class_num : int
    background_label : int
        Only 0 (see ``layers.detection_map``).
    overlap_threshold : float
    evaluate_difficult : bool
    ap_version : str
        ``'integral'`` or ``'11point'``.
    """

    def __init__(self, input: Variable, gt_label: Variable, gt_box: Variable,
                 gt_difficult: Variable | None = None, class_num: int | None = None,
                 background_label: int = 0, overlap_threshold: float = 0.5,
                 evaluate_difficult: bool = True, ap_version: str = "integral") -> None:
        super().__init__("map_eval")

        def has_state() -> Variable:
            # As in Fluid, has_state is not a state: reset() sets it to 0 rather than zeroing
            # it with the others
            return self.helper.main_program.current_block().create_var(
                name=unique_name.generate(f"{self.helper.name}.tmp"), persistable=True,
                dtype="int32", shape=[1])

        self.cur_map, self.accum_map, self.has_state = _detection_map_ops(
            self.helper, lambda dtype, suffix: self._create_state(
                dtype=dtype, shape=None, suffix=suffix),
            has_state, input, gt_label, gt_box, gt_difficult, class_num, background_label,
            overlap_threshold, evaluate_difficult, ap_version)

    def get_map_var(self) -> tuple[Variable, Variable]:
        """``(cur_map, accum_map)``: the mAP of the mini-batch and the accumulated mAP."""
        return self.cur_map, self.accum_map

    def reset(self, executor: Any, reset_program: Program | None = None) -> None:
        """Start a new accumulation: set ``has_state`` to 0 in ``reset_program`` (a new
        Program when None) and run it."""
        _reset_has_state(executor, self.has_state, reset_program)

    def reset_test(self, executor: Any, reset_program: Program | None = None) -> None:
        """The same as :meth:`reset` (Fluid 1.8 has both)."""
        self.reset(executor, reset_program)
