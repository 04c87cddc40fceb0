"""Paddle 1.8's dist model files trained locally by Paddle's own runner (test_dist_base.py's
``run_trainer``, ``update_method="local"``) on ``CPUPlace`` and on ``CUDAPlace(0)``, in one
process; one JSON line of losses per model on stdout.

    python tests/compat/paddle_models_on_device.py {strict|gpu} UNITTESTS_DIR MODEL...

``strict``: ``tests/strict_cupy.py`` stands in for CuPy; ``gpu``: the real CuPy. A child process
of ``test_paddle_models_on_device.py``: the runner installs ``paddle`` and reads its data from
Paddle's cache, which this script fills with synthetic files first.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import sys
import tempfile
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


class _Stream:
    """A stdout/stderr that keeps what the runner pickles into its ``buffer`` and what it
    prints (dist_transformer.py prints its validation costs as ``[cost]`` lines)."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        self.text = io.StringIO()

    def write(self, text: str) -> int:
        return self.text.write(text)

    def flush(self) -> None:
        return None


def _args(use_cuda: bool) -> types.SimpleNamespace:
    """What runtime_main's parser gives a local run (its defaults)."""
    return types.SimpleNamespace(
        update_method="local", use_cuda=use_cuda, batch_size=2, use_dgc=False,
        nccl2_reduce_layer_local_run=False, dc_asgd=False, hogwild=False,
        enable_backward_deps=False, use_reduce=False, batch_merge_repeat=1,
        use_reader_alloc=False, trainer_id=0, endpoints="", current_endpoint="", trainers=1,
        sync_mode=True, mem_opt=False, use_local_sgd=False, lr=0.001, role="trainer",
        is_dist=False)


def _losses(fluid, runner_base, module, use_cuda: bool) -> list[float]:
    cls = next(v for v in vars(module).values() if isinstance(v, type)
               and issubclass(v, runner_base) and v is not runner_base)
    out, err = _Stream(), _Stream()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard(), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        main.random_seed = startup.random_seed = 1
        cls().run_trainer(_args(use_cuda))
    if out.buffer.getvalue():
        return [float(v) for v in pickle.loads(out.buffer.getvalue())]
    return [float(line.strip()[1:-1]) for line in out.text.getvalue().splitlines()
            if line.startswith("[") and line.strip().endswith("]")]


def main(argv: list[str]) -> int:
    kind, unittests, models = argv[0], argv[1], argv[2:]
    data_home = tempfile.mkdtemp(prefix="paddle-data-")
    # dist_transformer.py reads its files from ~/.cache/paddle/dataset: a HOME of this run's own
    home = tempfile.mkdtemp(prefix="paddle-home-")
    try:
        return _run(kind, unittests, models, data_home, home)
    finally:  # the synthetic data and the HOME are this run's alone
        shutil.rmtree(data_home, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def _run(kind: str, unittests: str, models: list[str], data_home: str, home: str) -> int:
    os.environ["DASK_FLUID_DATA_HOME"] = data_home
    os.environ["HOME"] = home
    # the model files read these at import or in get_model (Paddle's runner sets them)
    os.environ.update(IS_DISTRIBUTED="0", IS_SPARSE="0", IS_SELF_CONTAINED_LR="0",
                      FLAGS_selected_gpus="0", CPU_NUM="1")
    sys.path[:0] = [str(ROOT), unittests]
    from tests.compat import synthetic_data

    for write in (synthetic_data.write_mnist, synthetic_data.write_imikolov,
                  synthetic_data.write_simnet, synthetic_data.write_text_classification,
                  synthetic_data.write_avazu_ctr):
        write(data_home)
    synthetic_data.write_transformer(Path(os.environ["HOME"]) / ".cache/paddle/dataset")
    if kind == "strict":
        from tests import strict_cupy

        sys.modules.update(strict_cupy.modules())
    from dask_fluid import compat

    compat.install()
    import paddle.fluid as fluid
    import test_dist_base

    test_dist_base.RUN_STEP = STEPS
    for name in models:
        try:
            module = __import__(name)
            if name == "dist_transformer":  # its structure at a size CI trains in seconds
                for key, value in synthetic_data.TRANSFORMER_TEST_SIZES.items():
                    setattr(module.ModelHyperParams, key, value)
            report = {"model": name, "cpu": _losses(fluid, test_dist_base.TestDistRunnerBase,
                                                     module, False),
                      "gpu": _losses(fluid, test_dist_base.TestDistRunnerBase, module, True)}
        except Exception as exc:  # reported, the next model still runs
            report = {"model": name, "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()[-3000:]}
        print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
