"""scikit-learn estimators whose networks are Fluid programs, trained locally or on Dask.

``MLPClassifier(mode="pserver").fit(dask_array, dask_labels)`` builds the program, transpiles
it, and trains it with parameter servers on the Dask workers that hold the data;
``mode="local"`` runs the same program in this process.
"""

# Licence: Apache-2.0 (see pyproject.toml)

from ._models import LinearClassifier, LinearRegressor, MLPClassifier, MLPRegressor
from ._progress import ProgressBar, plot_loss_curve

__all__ = [
    "LinearClassifier", "LinearRegressor", "MLPClassifier", "MLPRegressor", "ProgressBar",
    "plot_loss_curve",
]
