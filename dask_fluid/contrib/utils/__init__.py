"""``fluid.contrib.utils`` (Fluid 1.8): ``lookup_table_utils``."""

from . import lookup_table_utils
from .lookup_table_utils import *  # noqa: F403

__all__ = [*lookup_table_utils.__all__]
