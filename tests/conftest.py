"""Fixtures shared by the test folders."""

from __future__ import annotations

import pytest

from . import strict_cupy


@pytest.fixture(params=strict_cupy.DEVICE_PARAMS)
def device_xp(request):
    """The device array module, twice: the real CuPy on a CUDA GPU (``gpu``, skipped without
    one), and ``strict_cupy`` installed as ``cupy`` (``strict``, everywhere), which refuses
    what CuPy refuses, so device code that only works on numpy fails without a GPU too."""
    return strict_cupy.device_module(request.param, request)
