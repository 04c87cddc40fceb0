"""A scikit-learn estimator trained in pserver mode on a dask array.

    python examples/estimator.py [--samples 40000] [--epochs 3] [--workers 2] [--mode pserver]

``MLPClassifier(mode="pserver")`` builds the Fluid program, transpiles it and trains it on the
workers that hold the chunks of X and y; ``predict`` returns a lazy dask array, ``score`` the
accuracy. The fitted estimator holds no reference to the cluster: it pickles, and predicts on
numpy without Dask.
"""

from __future__ import annotations

import argparse
import pickle
import time

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster

from dask_fluid import MLPClassifier
from dask_fluid.datasets import reference_blobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", default="pserver",
                        choices=("pserver", "collective", "local"))
    args = parser.parse_args(argv)

    X, y = reference_blobs(args.samples)
    # String labels work: classes_ keeps them, predict returns them.
    y_named = np.array([f"class-{k}" for k in range(10)])[y]
    n_train = int(0.8 * len(X))
    chunk = -(-n_train // 8)
    X_train = da.from_array(X[:n_train], chunks=(chunk, X.shape[1]))   # 8 chunks
    y_train = da.from_array(y_named[:n_train], chunks=chunk)
    X_test = da.from_array(X[n_train:], chunks=(chunk, X.shape[1]))
    y_test = da.from_array(y_named[n_train:], chunks=chunk)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster):
        # The current client is picked up; pass client=... to use another one.
        clf = MLPClassifier(hidden_layer_sizes=(128,), solver="adam", learning_rate_init=1e-3,
                            batch_size=128, max_iter=args.epochs, random_state=0,
                            mode=args.mode, n_pservers=2)
        t0 = time.perf_counter()
        clf.fit(X_train, y_train)
        print(f"fit: {clf.n_iter_} epochs in {time.perf_counter() - t0:.1f} s, "
              f"loss curve {[round(v, 4) for v in clf.loss_curve_]}")
        print(f"classes_: {clf.classes_[:3].tolist()} ... ({len(clf.classes_)} classes)")

        pred = clf.predict(X_test)                # lazy: nothing computed yet
        print(f"predict returned {type(pred).__module__}.{type(pred).__name__} "
              f"with {pred.numblocks[0]} chunks, dtype {pred.dtype}")
        print(f"first predictions: {pred[:5].compute().tolist()}")
        print(f"test accuracy (score): {clf.score(X_test, y_test):.4f}")

    # Outside the cluster: the estimator pickles and predicts on numpy without Dask.
    local = pickle.loads(pickle.dumps(clf))
    acc = float((local.predict(X[n_train:]) == y_named[n_train:]).mean())
    print(f"unpickled estimator, numpy input, no cluster: accuracy {acc:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
