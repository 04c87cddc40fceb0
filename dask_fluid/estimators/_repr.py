"""The HTML that heads a fitted estimator's display in Jupyter: network, mode, topology, loss."""

# Licence: Apache-2.0 (see pyproject.toml)

from __future__ import annotations

import html
from typing import Any


def _network(est: Any) -> str:
    sizes = [int(est.coefs_[0].shape[0])] + [int(c.shape[1]) for c in est.coefs_]
    hidden = [f"{n} {est.activation}" for n in sizes[1:-1]]
    return " → ".join([str(sizes[0]), *hidden, f"{sizes[-1]} {est.out_activation_}"])


def _topology(est: Any) -> str:
    mode = est.mode
    if mode == "local":
        return "one process"
    first = (getattr(est, "fit_summary_", "") or "").splitlines()[:1]
    return first[0] if first else mode


def fitted_html(est: Any) -> str:
    """A small table of what the fit did (the estimator must be fitted)."""
    curve = list(getattr(est, "loss_curve_", []) or [])
    rows = [("network", _network(est)), ("mode", est.mode), ("topology", _topology(est)),
            ("epochs", str(getattr(est, "n_iter_", len(curve))))]
    if curve:
        rows.append(("last loss", f"{curve[-1]:.4f}"))
    rate = getattr(est, "samples_per_s_", None)
    if rate:
        rows.append(("samples/s", f"{rate:,.0f} in the training loop"))
    body = "".join(f"<tr><th style='text-align:left'>{k}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in rows)
    return (f"<div class='dask-fluid-fitted'><b>{type(est).__name__}</b>, fitted"
            f"<table>{body}</table></div>")
