"""The op table: importing this package registers every kernel and host-op signature.

Conventions the executor follows when it runs a kernel ``kernel(ins, attrs, outs)``:

- ``ins[slot]`` is the list of arrays (numpy or cupy, or :class:`SelectedRows`) bound to the
  slot; an entry is ``None`` for a gradient the backward pass never produced (zeros).
- Private attrs the executor adds: ``_out_name`` (the first output variable's name: the key of
  the random ops' seeding), ``_rng`` (a ``numpy.random.Generator`` for ``dropout`` and
  for seed-0 random draws into temporaries), ``_place``
  (``"gpu"`` puts input-less ops such as ``fill_constant`` on cupy) and ``_out_counts``
  (``{slot: number of bound variables}``, needed by ``split_ids`` and by ``split`` without
  sections or num).
- Kernels never write into their inputs, except the optimizer kernels, which update the
  parameter and state arrays in place and return them. A kernel may return an input array as
  an output (no copy), so the executor must not mutate arrays it got from a kernel.
"""

from . import (  # noqa: F401  (imported for their registrations)
    amp_ops,
    beam_search_ops,
    box_ops,
    contrib_ops,
    conv3d_ops,
    conv_ops,
    creation_ops,
    crf_ops,
    ctc_ops,
    ctr_ops,
    decode_ops,
    deformable_ops,
    dense_ops,
    detection_assign_ops,
    detection_target_ops,
    dgc_ops,
    host_ops,
    image_channel_ops,
    index_ops,
    interp_ops,
    lod_array_ops,
    loss_ops,
    mask_ops,
    math_ops,
    metric_ops,
    nms_ops,
    nn_ops,
    norm_ops,
    optimizer_ops,
    print_ops,
    py_func_ops,
    random_ops,
    rcnn_target_ops,
    reader_ops,
    registry,
    rnn_ops,
    roi_ops,
    schedule_ops,
    sequence_ops,
    shape_ops,
    similarity_ops,
    spatial_ops,
    split_ops,
    ssd_ops,
    tensor_ops,
    tree_conv_ops,
    vocab_ops,
)
from .selected_rows import SelectedRows

__all__ = ["registry", "SelectedRows"]
