"""Start-up hook of ``dask-fluid run``: child Python processes resolve ``paddle`` to dask_fluid.

``dask-fluid run`` puts this directory first on PYTHONPATH, so :mod:`site` imports this module
in every Python process the script starts (Paddle's test_dist_base.py starts pservers and
trainers with ``sys.executable`` and an environment that keeps PYTHONPATH). It only puts a small
finder on ``sys.meta_path``: dask_fluid is imported, and ``dask_fluid.compat.install()`` called,
the first time the process imports ``paddle``, so processes that never do pay nothing. Then it
runs the ``sitecustomize`` this one hides, if there is one further down ``sys.path``.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# .../dask_fluid/compat/_autoinstall -> the directory that holds dask_fluid/
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_HERE)))


class _Bootstrap:
    """Installs dask_fluid.compat when ``paddle`` is first imported, then gets out of the way."""

    _dask_fluid_paddle_bootstrap = True

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "paddle" and not fullname.startswith("paddle."):
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        if importlib.util.find_spec("dask_fluid") is None:
            # dask_fluid ran from a source tree that this interpreter does not know
            sys.path.append(_ROOT)
        from dask_fluid.compat import install

        return install().find_spec(fullname, path, target)

    def invalidate_caches(self):
        pass


def _run_hidden_sitecustomize():
    others = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


sys.meta_path.insert(0, _Bootstrap())
_run_hidden_sitecustomize()
