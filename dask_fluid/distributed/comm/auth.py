"""The job secret that direct connections prove they know (pserver endpoints, rings).

Under ``dask-fluid launch`` and the Dask launchers every job gets 32 random bytes of its own.
Processes started by hand (Fluid's launch style) read it from :data:`SECRET_ENV`; without one
they run as Fluid 1.8 did, unauthenticated: anyone who can reach an endpoint can train against
it. That is said once per process, at start-up.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys

__all__ = ["SECRET_ENV", "env_secret", "new_secret"]

logger = logging.getLogger(__name__)

#: environment variable holding the job secret (any string; ``dask-fluid launch`` sets 64 hex
#: digits)
SECRET_ENV = "DASK_FLUID_JOB_SECRET"

_warned = False


def new_secret() -> str:
    """A fresh job secret (32 random bytes as hex), as ``dask-fluid launch`` hands it out."""
    return secrets.token_hex(32)


def env_secret() -> bytes:
    """The job secret of this process (:data:`SECRET_ENV`), or ``b""`` (unauthenticated, said
    once on stderr)."""
    global _warned
    value = os.environ.get(SECRET_ENV, "")
    if not value and not _warned:
        _warned = True
        print(f"dask_fluid: {SECRET_ENV} is not set: pserver endpoints accept any process that "
              "can reach them, as in Fluid 1.8; set it to the same random string in every "
              "process of the job (dask-fluid launch does) to authenticate them",
              file=sys.stderr)
    return value.encode()
