"""``fluid.dygraph.StaticModelRunner``: a saved inference model run (and fine-tuned) as a Layer.

Fluid 1.8 loads a model ``fluid.io.save_inference_model`` wrote into dygraph mode: its
parameters become the layer's parameters and calling the layer runs the program on the inputs.
It is the layer ``jit.load`` gives (:class:`.dygraph_to_static.saving.TranslatedLayer`): the
program runs as one op, so the outputs are dygraph variables, ``loss.backward()`` reaches the
loaded parameters and an optimizer fine-tunes them, and ``train()``/``eval()`` run it with
``is_test`` off or on, as 1.8 does.
"""

from __future__ import annotations

from ..inference_model import MODEL_FILENAME
from .dygraph_to_static.saving import TranslatedLayer

__all__ = ["StaticModelRunner"]


class StaticModelRunner(TranslatedLayer):
    """A saved inference model as a dygraph layer (Fluid 1.8's ``StaticModelRunner``).

    Parameters
    ----------
    model_dir : str
        What ``fluid.io.save_inference_model`` wrote.
    model_filename, params_filename : str, optional
        As for ``fluid.io.load_inference_model``.

    Raises
    ------
    RuntimeError
        Outside ``fluid.dygraph.guard``.
    ValueError
        ``model_dir`` is not such a directory.
    """

    _what = "StaticModelRunner"

    def __init__(self, model_dir: str, model_filename: str | None = None,
                 params_filename: str | None = None) -> None:
        super().__init__(model_dir, model_filename or MODEL_FILENAME, params_filename)
