"""Fluid 1.8's ``paddle.fluid.metrics``: metrics accumulated in Python over mini-batches.

Each class follows its namesake in Paddle's ``python/paddle/fluid/metrics.py`` (release 1.8):
the same constructor arguments, ``update`` / ``eval`` / ``reset`` / ``get_config`` methods,
return values and ``ValueError`` messages. The metrics take what ``Executor.run`` fetches:
numpy arrays and numbers, and (``return_numpy=False``) :class:`~dask_fluid.lod.LoDTensor`,
which is read as a numpy array first. :class:`DetectionMAP` is the exception: it builds
``detection_map`` ops and their state variables into the current program, as Fluid's does.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import numpy as np

from . import layers, unique_name
from .framework import Program, Variable, program_guard
from .initializer import ConstantInitializer
from .layer_helper import LayerHelper
from .lod import LoDTensor

__all__ = [
    "MetricBase",
    "CompositeMetric",
    "Precision",
    "Recall",
    "Accuracy",
    "ChunkEvaluator",
    "EditDistance",
    "DetectionMAP",
    "Auc",
]


def _is_numpy_(var: Any) -> bool:
    return isinstance(var, (np.ndarray, np.generic))


def _is_number_(var: Any) -> bool:
    # Fluid 1.8's test, kept as is: np.float64 passes as a float subclass, np.float32 does not.
    return (isinstance(var, (int, np.int64, float))
            or (isinstance(var, np.ndarray) and var.shape == (1,)))


def _is_number_or_matrix_(var: Any) -> bool:
    return _is_number_(var) or isinstance(var, np.ndarray)


def _scalar(value: Any) -> Any:
    """A one-value array as a Python float; anything else through ``float``."""
    if isinstance(value, np.ndarray) and value.size == 1:
        return float(value.reshape(-1)[0])
    return float(value)


def _from_lod(var: Any) -> Any:
    """A fetched LoDTensor (``return_numpy=False``) as the numpy array Fluid's checks expect;
    anything else unchanged, so that the checks below still reject it."""
    return np.array(var) if isinstance(var, LoDTensor) else var


def _binary_counts(preds: Any, labels: Any) -> tuple[int, int, int]:
    """Precision's and Recall's counts over a batch, after their checks: ``(tp, fp, fn)`` of
    ``preds`` rounded to 0 / 1 (``np.rint``) against ``labels``, row by row as Fluid's loops
    compare them."""
    preds, labels = _from_lod(preds), _from_lod(labels)
    if not _is_numpy_(preds):
        raise ValueError("The 'preds' must be a numpy ndarray.")
    if not _is_numpy_(labels):
        raise ValueError("The 'labels' must be a numpy ndarray.")
    preds = np.rint(preds).astype("int32")
    tp = fp = fn = 0
    for i in range(labels.shape[0]):
        pred, label = preds[i], labels[i]
        if pred == 1:
            if pred == label:
                tp += 1
            else:
                fp += 1
        elif label == 1:  # pred == label would make pred 1
            fn += 1
    return tp, fp, fn


class MetricBase:
    """Base class of the metrics (Fluid 1.8's ``fluid.metrics.MetricBase``).

    A metric keeps its states in the attributes whose names do not start with ``_``;
    :meth:`update` adds a mini-batch to them and :meth:`eval` computes the metric from them.

    Parameters
    ----------
    name : str or None
        The metric's name; None gives the class name.
    """

    def __init__(self, name: str | None) -> None:
        self._name = str(name) if name is not None else self.__class__.__name__

    def __str__(self) -> str:
        return self._name

    def reset(self) -> None:
        """Reset the states (the public attributes): ints to 0, floats to 0.0, numpy values to
        zeros of the same shape, anything else to None, as Fluid 1.8 does."""
        states = {attr: value for attr, value in self.__dict__.items()
                  if not attr.startswith("_")}
        for attr, value in states.items():
            # bool is an int in Python and so becomes 0 here too, as in Fluid.
            if isinstance(value, int):
                setattr(self, attr, 0)
            elif isinstance(value, float):
                setattr(self, attr, 0.0)
            elif isinstance(value, (np.ndarray, np.generic)):
                setattr(self, attr, np.zeros_like(value))
            else:
                setattr(self, attr, None)

    def get_config(self) -> dict:
        """The metric's name and a deep copy of its states.

        Returns
        -------
        dict
            ``{"name": name, "states": {attribute: value}}``.
        """
        states = {attr: value for attr, value in self.__dict__.items()
                  if not attr.startswith("_")}
        return {"name": self._name, "states": copy.deepcopy(states)}

    def update(self, preds: Any, labels: Any) -> None:
        """Add a mini-batch to the states (subclasses implement it)."""
        raise NotImplementedError("Should not use it directly, please extend it.")

    def eval(self) -> Any:
        """The metric over the accumulated states (subclasses implement it)."""
        raise NotImplementedError("Should not use it directly, please extend it.")


class CompositeMetric(MetricBase):
    """Several metrics updated and evaluated together (Fluid 1.8's
    ``fluid.metrics.CompositeMetric``).

    Parameters
    ----------
    name : str, optional
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self._metrics: list[MetricBase] = []

    def add_metric(self, metric: MetricBase) -> None:
        """Add ``metric``; ValueError unless it is a :class:`MetricBase`."""
        if not isinstance(metric, MetricBase):
            raise ValueError("SubMetric should be inherit from MetricBase.")
        self._metrics.append(metric)

    def update(self, preds: Any, labels: Any) -> None:
        """Update every metric with ``preds`` and ``labels``, in the order added."""
        for m in self._metrics:
            m.update(preds, labels)

    def eval(self) -> list:
        """The list of every metric's :meth:`eval`, in the order added."""
        return [m.eval() for m in self._metrics]


class Precision(MetricBase):
    """Binary precision ``tp / (tp + fp)`` (Fluid 1.8's ``fluid.metrics.Precision``).

    ``update(preds, labels)`` rounds ``preds`` (``[batch, 1]`` sigmoid outputs) to 0 / 1 with
    ``np.rint``; a predicted 1 counts as a true positive when its label is 1, a false positive
    otherwise. ``eval()`` is 0.0 before any positive prediction.

    Parameters
    ----------
    name : str, optional
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.tp = 0  # true positive
        self.fp = 0  # false positive

    def update(self, preds: Any, labels: Any) -> None:
        """Add a mini-batch: ``preds`` and ``labels`` numpy arrays ``[batch, 1]``."""
        tp, fp, _ = _binary_counts(preds, labels)
        self.tp += tp
        self.fp += fp

    def eval(self) -> float:
        """The precision, 0.0 when nothing was predicted positive."""
        ap = self.tp + self.fp
        return float(self.tp) / ap if ap != 0 else 0.0


class Recall(MetricBase):
    """Binary recall ``tp / (tp + fn)`` (Fluid 1.8's ``fluid.metrics.Recall``).

    ``preds`` are rounded with ``np.rint``; a label 1 counts as a true positive when predicted
    1, a false negative otherwise. ``eval()`` is 0.0 before any positive label.

    Parameters
    ----------
    name : str, optional
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.tp = 0  # true positive
        self.fn = 0  # false negative

    def update(self, preds: Any, labels: Any) -> None:
        """Add a mini-batch: ``preds`` and ``labels`` numpy arrays ``[batch, 1]``."""
        tp, _, fn = _binary_counts(preds, labels)
        self.tp += tp
        self.fn += fn

    def eval(self) -> float:
        """The recall, 0.0 when no label was positive."""
        recall = self.tp + self.fn
        return float(self.tp) / recall if recall != 0 else 0.0


class Accuracy(MetricBase):
    """Mean of mini-batch accuracies weighted by batch size (Fluid 1.8's
    ``fluid.metrics.Accuracy``).

    Parameters
    ----------
    name : str, optional
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.value = 0.0
        self.weight = 0.0

    def update(self, value: Any, weight: Any) -> None:
        """Add a mini-batch's accuracy ``value`` (a number or numpy array, e.g. the fetched
        ``layers.accuracy``) with ``weight`` (its batch size, a non-negative number).

        Raises
        ------
        ValueError
            ``value`` or ``weight`` of the wrong type, or a negative ``weight``.
        """
        value, weight = _from_lod(value), _from_lod(weight)
        if not _is_number_or_matrix_(value):
            raise ValueError("The 'value' must be a number(int, float) or a numpy ndarray.")
        if not _is_number_(weight):
            raise ValueError("The 'weight' must be a number(int, float).")
        if weight < 0:
            raise ValueError("The 'weight' can not be negative")
        self.value += value * weight
        self.weight += weight

    def eval(self) -> Any:
        """The weighted mean accuracy (a float, or an array when the values were arrays).

        Raises
        ------
        ValueError
            Nothing was added since the last reset.
        """
        if self.weight == 0:
            raise ValueError("There is no data in Accuracy Metrics. Please check "
                             "layers.accuracy output has added to Accuracy.")
        return self.value / self.weight


class ChunkEvaluator(MetricBase):
    """Chunk precision, recall and F1 from the counters of ``layers.chunk_eval`` (Fluid 1.8's
    ``fluid.metrics.ChunkEvaluator``).

    Parameters
    ----------
    name : str, optional
    """

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.num_infer_chunks = 0
        self.num_label_chunks = 0
        self.num_correct_chunks = 0

    def update(self, num_infer_chunks: Any, num_label_chunks: Any,
               num_correct_chunks: Any) -> None:
        """Add a mini-batch's chunk counts (numbers or numpy arrays, as ``chunk_eval``'s last
        three outputs are fetched).

        Raises
        ------
        ValueError
            A count that is neither a number nor a numpy array.
        """
        num_infer_chunks = _from_lod(num_infer_chunks)
        num_label_chunks = _from_lod(num_label_chunks)
        num_correct_chunks = _from_lod(num_correct_chunks)
        if not _is_number_or_matrix_(num_infer_chunks):
            raise ValueError("The 'num_infer_chunks' must be a number(int) or a numpy ndarray.")
        if not _is_number_or_matrix_(num_label_chunks):
            raise ValueError(
                "The 'num_label_chunks' must be a number(int, float) or a numpy ndarray.")
        if not _is_number_or_matrix_(num_correct_chunks):
            raise ValueError(
                "The 'num_correct_chunks' must be a number(int, float) or a numpy ndarray.")
        self.num_infer_chunks += num_infer_chunks
        self.num_label_chunks += num_label_chunks
        self.num_correct_chunks += num_correct_chunks

    def eval(self) -> tuple[float, float, float]:
        """``(precision, recall, f1_score)`` over the accumulated counts; each is 0 when its
        denominator (or, for F1, the correct count) is 0."""
        # The counts are often the fetched [1] arrays, which newer numpy no longer converts
        # with float(); _scalar reads their one value as Fluid's float() did.
        correct = _scalar(self.num_correct_chunks)
        precision = (_scalar(correct / self.num_infer_chunks)
                     if self.num_infer_chunks else 0)
        recall = _scalar(correct / self.num_label_chunks) if self.num_label_chunks else 0
        f1_score = (float(2 * precision * recall) / (precision + recall)
                    if self.num_correct_chunks else 0)
        return precision, recall, f1_score


class EditDistance(MetricBase):
    """Average edit distance and instance error rate from ``layers.edit_distance`` outputs
    (Fluid 1.8's ``fluid.metrics.EditDistance``).

    Parameters
    ----------
    name : str or None
        Required positionally, as in Fluid 1.8 (None gives the class name).
    """

    def __init__(self, name: str | None) -> None:
        super().__init__(name)
        self.total_distance = 0.0
        self.seq_num = 0
        self.instance_error = 0

    def update(self, distances: Any, seq_num: Any) -> None:
        """Add a mini-batch: ``distances`` (numpy ``[batch, 1]``) and ``seq_num`` (the number of
        sequence pairs, a number or a numpy array ``[1]``).

        Raises
        ------
        ValueError
            ``distances`` is not a numpy array, or ``seq_num`` not a number.
        """
        distances, seq_num = _from_lod(distances), _from_lod(seq_num)
        if not _is_numpy_(distances):
            raise ValueError("The 'distances' must be a numpy ndarray.")
        if not _is_number_(seq_num):
            raise ValueError("The 'seq_num' must be a number(int, float).")
        seq_right_count = np.sum(distances == 0)
        total_distance = np.sum(distances)
        self.seq_num += seq_num
        self.instance_error += seq_num - seq_right_count
        self.total_distance += total_distance

    def eval(self) -> tuple[Any, Any]:
        """``(avg_distance, avg_instance_error)``: the mean distance and the fraction of pairs
        whose distance is not 0.

        Raises
        ------
        ValueError
            Nothing was added since the last reset.
        """
        if self.seq_num == 0:
            raise ValueError("There is no data in EditDistance Metric. Please check "
                             "layers.edit_distance output has been added to EditDistance.")
        avg_distance = self.total_distance / self.seq_num
        avg_instance_error = self.instance_error / float(self.seq_num)
        return avg_distance, avg_instance_error


class Auc(MetricBase):
    """Area under the ROC curve of a binary classifier, from predictions bucketed into
    ``num_thresholds + 1`` bins (Fluid 1.8's ``fluid.metrics.Auc``).

    ``update(preds, labels)`` takes ``preds`` ``[batch, 2]`` (column 1 is the positive
    probability) and ``labels`` ``[batch, 1]``; the sample lands in bucket
    ``int(preds[i, 1] * num_thresholds)`` of ``_stat_pos`` (label non-zero) or ``_stat_neg``.
    ``eval()`` sums the trapezoids of the ROC curve walking the buckets from the top.

    Parameters
    ----------
    name : str or None
        Required positionally, as in Fluid 1.8.
    curve : str
        ``'ROC'``. Fluid 1.8 accepts ``'PR'`` but its Python Auc computes the ROC area
        whatever ``curve`` says ("only implement the ROC curve type via Python now"); so does
        this one, with a warning, so that ported code gives the numbers it gave.
    num_thresholds : int
        The number of thresholds, 4095 as in Fluid 1.8.
    """

    def __init__(self, name: str | None, curve: str = "ROC", num_thresholds: int = 4095) -> None:
        super().__init__(name=name)
        if curve != "ROC":
            warnings.warn(f"Auc(curve={curve!r}): Fluid 1.8's Python Auc computes the area "
                          "under the ROC curve whatever the curve; so does dask_fluid. Use "
                          "layers.auc for the PR curve.", stacklevel=2)
        self._curve = curve
        self._num_thresholds = num_thresholds
        _num_pred_buckets = num_thresholds + 1
        self._stat_pos = np.zeros(_num_pred_buckets)
        self._stat_neg = np.zeros(_num_pred_buckets)

    def reset(self) -> None:
        """Empty the buckets.

        Fluid 1.8's Auc inherits ``MetricBase.reset``, which skips the ``_``-prefixed buckets,
        so there ``reset()`` leaves the statistics in place (fixed in Paddle 2.0's
        ``paddle.metric.Auc.reset``); here it clears them, which is what callers mean.
        """
        super().reset()
        self._stat_pos = np.zeros(self._num_thresholds + 1)
        self._stat_neg = np.zeros(self._num_thresholds + 1)

    def update(self, preds: Any, labels: Any) -> None:
        """Add a mini-batch to the buckets.

        Raises
        ------
        ValueError
            ``labels`` or ``preds`` is not a numpy array, ``preds`` is not ``[batch, 2+]``,
            ``labels`` has more than one value per sample or fewer rows than ``preds`` needs, or
            a probability is outside ``[0, 1]`` (Fluid asserts on > 1 and silently wraps a
            negative bucket index).
        """
        preds, labels = _from_lod(preds), _from_lod(labels)
        if not _is_numpy_(labels):
            raise ValueError("The 'labels' must be a numpy ndarray.")
        if not _is_numpy_(preds):
            raise ValueError("The 'predictions' must be a numpy ndarray.")
        labels = np.asarray(labels)
        n = labels.shape[0] if labels.ndim else 0
        if n == 0:
            return
        lbl = labels.reshape(n, -1)
        if lbl.shape[1] != 1:
            raise ValueError(f"Auc: 'labels' must hold one label per sample ([batch, 1]), got "
                             f"shape {list(labels.shape)}")
        preds = np.asarray(preds)
        if preds.ndim != 2 or preds.shape[1] < 2 or preds.shape[0] < n:
            raise ValueError(f"Auc: 'preds' must be [batch, 2] (column 1 the positive "
                             f"probability) for {n} labels, got shape {list(preds.shape)}")
        value = preds[:n, 1]
        # The product keeps preds' dtype, as Fluid's per-sample ``preds[i, 1] * n`` does, so the
        # bucket edges fall where they fall there.
        scaled = value * self._num_thresholds
        if not np.all((value >= 0) & (scaled < self._num_thresholds + 1)):
            raise ValueError("Auc: the positive probabilities preds[:, 1] must lie in [0, 1]")
        bin_idx = scaled.astype(np.int64)  # int() of a non-negative value: truncation
        pos = lbl[:, 0].astype(bool)
        size = self._num_thresholds + 1
        self._stat_pos += np.bincount(bin_idx[pos], minlength=size)
        self._stat_neg += np.bincount(bin_idx[~pos], minlength=size)

    @staticmethod
    def trapezoid_area(x1: float, x2: float, y1: float, y2: float) -> float:
        """Area of the trapezoid between ``x1`` and ``x2`` with heights ``y1`` and ``y2``."""
        return abs(x1 - x2) * (y1 + y2) / 2.0

    def eval(self) -> float:
        """The ROC AUC over the buckets; 0.0 until both classes have been seen."""
        tot_pos = 0.0
        tot_neg = 0.0
        auc = 0.0
        # Fluid's walk from the highest bucket down, kept term for term so that the float
        # sums match its results.
        for idx in range(self._num_thresholds, -1, -1):
            tot_pos_prev = tot_pos
            tot_neg_prev = tot_neg
            tot_pos += float(self._stat_pos[idx])
            tot_neg += float(self._stat_neg[idx])
            auc += self.trapezoid_area(tot_neg, tot_neg_prev, tot_pos, tot_pos_prev)
        return auc / tot_pos / tot_neg if tot_pos > 0.0 and tot_neg > 0.0 else 0.0


class DetectionMAP:
    """Mean average precision of detections, of the mini-batch and accumulated over batches
    (Fluid 1.8's ``fluid.metrics.DetectionMAP``).

    Unlike the other metrics it builds into the current program: two ``detection_map`` ops,
    one for the batch and one that carries the true/false positives of earlier batches in
    persistable state variables, gated by a ``has_state`` flag the program sets to 1 after
    each run and :meth:`reset` sets back to 0.

    Parameters
    ----------
    input : Variable
        Detections, LoD ``[M, 6]``: label, confidence, xmin, ymin, xmax, ymax.
    gt_label : Variable
        Ground-truth labels, LoD ``[N, 1]``.
    gt_box : Variable
        Ground-truth boxes, LoD ``[N, 4]``.
    gt_difficult : Variable, optional
        Difficult flags, LoD ``[N, 1]``; None: none is difficult.
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
        self.helper = LayerHelper("map_eval")

        def has_state() -> Variable:
            return self._create_state(dtype="int32", shape=[1], suffix="has_state")

        self.cur_map, self.accum_map, self.has_state = _detection_map_ops(
            self.helper, lambda dtype, suffix: self._create_state(suffix, dtype, None),
            has_state, input, gt_label, gt_box, gt_difficult, class_num, background_label,
            overlap_threshold, evaluate_difficult, ap_version)

    def _create_state(self, suffix: str, dtype: str, shape: list[int] | None) -> Variable:
        """A persistable state variable ``<unique map_eval name>_<suffix>``."""
        return self.helper.main_program.current_block().create_var(
            name="_".join([unique_name.generate(self.helper.name), suffix]),
            persistable=True, dtype=dtype, shape=shape)

    def get_map_var(self) -> tuple[Variable, Variable]:
        """``(cur_map, accum_map)``: the mAP of the mini-batch and the accumulated mAP."""
        return self.cur_map, self.accum_map

    def reset(self, executor: Any, reset_program: Program | None = None) -> None:
        """Start a new accumulation: run a program (``reset_program``, or a new one) that
        sets ``has_state`` to 0, so the next run ignores the earlier states.

        Parameters
        ----------
        executor : Executor
        reset_program : Program, optional
        """
        _reset_has_state(executor, self.has_state, reset_program)


def _detection_map_ops(helper: LayerHelper, create_state: Any, create_has_state: Any,
                       input: Variable, gt_label: Variable, gt_box: Variable,
                       gt_difficult: Variable | None, class_num: int | None,
                       background_label: int, overlap_threshold: float,
                       evaluate_difficult: bool, ap_version: str
                       ) -> tuple[Variable, Variable, Variable]:
    """The ops of Fluid 1.8's two DetectionMAP classes (``metrics``, ``evaluator``): the
    mini-batch's ``detection_map``, the states (``create_state(dtype, suffix)``), the
    ``has_state`` flag (``create_has_state()``, 0 from the startup program), the accumulating
    ``detection_map`` and the ``fill_constant`` that sets the flag to 1 after each run.
    Returns ``(cur_map, accum_map, has_state)``."""
    gt_label = layers.cast(x=gt_label, dtype=gt_box.dtype)
    if gt_difficult is not None:
        gt_difficult = layers.cast(x=gt_difficult, dtype=gt_box.dtype)
        label = layers.concat([gt_label, gt_difficult, gt_box], axis=1)
    else:
        label = layers.concat([gt_label, gt_box], axis=1)
    cur_map = layers.detection_map(
        input, label, class_num, background_label, overlap_threshold=overlap_threshold,
        evaluate_difficult=evaluate_difficult, ap_version=ap_version)
    states = [create_state("int32", "accum_pos_count"),
              create_state("float32", "accum_true_pos"),
              create_state("float32", "accum_false_pos")]
    _placeholder_states(helper, states)
    has_state = create_has_state()
    helper.set_variable_initializer(has_state, ConstantInitializer(0))
    accum_map = layers.detection_map(
        input, label, class_num, background_label, overlap_threshold=overlap_threshold,
        evaluate_difficult=evaluate_difficult, has_state=has_state, input_states=states,
        out_states=states, ap_version=ap_version)
    layers.fill_constant(shape=has_state.shape, value=1, dtype=has_state.dtype, out=has_state)
    return cur_map, accum_map, has_state


def _reset_has_state(executor: Any, has_state: Variable, reset_program: Program | None
                     ) -> None:
    """Run a program (``reset_program``, or a new one) that sets ``has_state`` to 0."""
    if reset_program is None:
        reset_program = Program()
    with program_guard(main_program=reset_program):
        var = _clone_var_(reset_program.current_block(), has_state)
        layers.fill_constant(shape=var.shape, value=0, dtype=var.dtype, out=var)
    executor.run(reset_program)


def _placeholder_states(helper: LayerHelper, states: list[Variable]) -> None:
    """Give ``detection_map``'s state variables a placeholder value (a zero ``[1]``) in the
    startup program.

    Fluid leaves them uninitialised: its executor creates every variable of the program in the
    scope, and the op reads them only once ``has_state`` is 1, after a run has written them.
    dask_fluid's executor refuses a persistable input missing from the scope, so the startup
    program declares them; the placeholder is never read while ``has_state`` is 0.
    """
    block = helper.startup_program.global_block()
    for var in states:
        if not block.has_var(var.name):
            svar = block.create_var(name=var.name, shape=[1], dtype=var.dtype, persistable=True)
            ConstantInitializer(0.0)(svar, block)


def _clone_var_(block: Any, var: Variable) -> Variable:
    """``var`` declared, persistable, in ``block`` of another program under the same name, so
    that a run of that program reads or writes the same scope variable (Fluid's evaluators'
    ``_clone_var_``)."""
    if not isinstance(var, Variable):
        raise TypeError(f"expected a Variable, got {type(var).__name__}")
    return block.create_var(name=var.name, shape=var.shape, dtype=var.dtype, type=var.type,
                            lod_level=var.lod_level, persistable=True)
