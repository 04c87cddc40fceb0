"""Fluid-style layer builders (``dask_fluid.layers``).

Each submodule lists what it exports in its ``__all__``; this package is their union, as
Fluid's ``fluid.layers`` is the union of ``layers.nn``, ``layers.tensor`` and the others.
"""

from . import (
    activations,
    boxes,
    collective,  # noqa: F401 - fluid.layers.collective: private builders only
    compare,
    control_flow,
    crf,
    ctc,
    ctr,
    debug,
    detection_assign,
    detection_targets,
    device,  # noqa: F401 - fluid.layers.device: get_places only, exports nothing
    distributions,
    image,
    image3d,
    indexing,
    io,
    learning_rate_scheduler,
    lod_array,
    loops,
    loss,
    nms,
    nn,
    norm,
    python_ops,
    rcnn_targets,
    resize,
    rnn_cells,
    roi,
    sampling,
    sequence_lod,
    spatial,
    ssd,
    tensor,
)
from . import rnn as _rnn_layers  # Fluid's layers.rnn is rnn_cells' function, not this module
from .activations import *  # noqa: F403
from .boxes import *  # noqa: F403
from .compare import *  # noqa: F403
from .control_flow import *  # noqa: F403
from .crf import *  # noqa: F403
from .ctc import *  # noqa: F403
from .ctr import *  # noqa: F403
from .debug import *  # noqa: F403
from .detection_assign import *  # noqa: F403
from .detection_targets import *  # noqa: F403
from .distributions import *  # noqa: F403
from .image import *  # noqa: F403
from .image3d import *  # noqa: F403
from .indexing import *  # noqa: F403
from .io import *  # noqa: F403
from .learning_rate_scheduler import *  # noqa: F403
from .lod_array import *  # noqa: F403
from .loops import *  # noqa: F403
from .loss import *  # noqa: F403
from .nms import *  # noqa: F403
from .nn import *  # noqa: F403
from .norm import *  # noqa: F403
from .python_ops import *  # noqa: F403
from .rcnn_targets import *  # noqa: F403
from .resize import *  # noqa: F403
from .rnn import *  # noqa: F403
from .rnn_cells import *  # noqa: F403
from .roi import *  # noqa: F403
from .sampling import *  # noqa: F403
from .sequence_lod import *  # noqa: F403
from .spatial import *  # noqa: F403
from .ssd import *  # noqa: F403
from .tensor import *  # noqa: F403

__all__ = [*activations.__all__, *boxes.__all__, *compare.__all__,
           *control_flow.__all__, *crf.__all__, *ctc.__all__, *ctr.__all__,
           *debug.__all__, *detection_assign.__all__, *detection_targets.__all__,
           *distributions.__all__, *image.__all__, *image3d.__all__, *indexing.__all__, *io.__all__,
           *learning_rate_scheduler.__all__, *lod_array.__all__, *loops.__all__, *loss.__all__,
           *nms.__all__, *nn.__all__, *norm.__all__, *python_ops.__all__, *rcnn_targets.__all__,
           *resize.__all__, *_rnn_layers.__all__, *rnn_cells.__all__, *roi.__all__,
           *sampling.__all__, *sequence_lod.__all__, *spatial.__all__, *ssd.__all__,
           *tensor.__all__]
