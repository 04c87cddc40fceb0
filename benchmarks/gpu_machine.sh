#!/bin/bash
# The GPU checks on a bare GPU machine that has CUDA, CuPy, numpy, pandas and scikit-learn but
# no Dask and no network (how GPU machines are lent to this project's sessions).
#
#   bash benchmarks/gpu_machine.sh wheels   # here, with network: Dask's wheels into .whl/
#   bash benchmarks/gpu_machine.sh run      # there, carrying .whl/: install them, run the checks
#
# `run` writes pytest_gpu.log, gpu_check.log and gpu_check.json to $OUT (default /tmp/gpu_out)
# and takes about 2.5 minutes on one H100; every step is capped in time.
set -u
cd "$(dirname "$0")/.." || exit 3
case "${1:-}" in
wheels)
    # the versions installed here, which this tree is tested with (one version of each: two
    # stop the install there); Python 3.12 is what the GPU image runs
    rm -f .whl/*.whl
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $(python3 -c "
from importlib.metadata import version
names = 'dask distributed tornado zict tblib locket partd bokeh xyzservices'.split()
print(' '.join(f'{n}=={version(n)}' for n in names))") || exit 3
    grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
    du -sh .whl ;;
run)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl 2>&1 | grep -v "^WARNING: Running pip as" | tail -3
    export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
    out=${OUT:-/tmp/gpu_out}
    mkdir -p "$out"
    nvidia-smi -L
    python3 -c "import sys, numpy, cupy, dask; from cupy.cuda import nccl; print('python',
        sys.version.split()[0], 'numpy', numpy.__version__, 'cupy', cupy.__version__, 'nccl',
        nccl.get_version(), 'dask', dask.__version__)" || exit 4
    timeout 240 python3 -m pytest -q -rs --durations=12 -p no:cacheprovider -o timeout=120 \
        -m gpu tests 2>&1 | tee "$out/pytest_gpu.log" | tail -30
    timeout 200 python3 benchmarks/gpu_check.py --no-tests --json "$out/gpu_check.json" 2>&1 \
        | tee "$out/gpu_check.log" | grep -v " - distributed\." | tail -30 ;;
*)
    echo "usage: bash benchmarks/gpu_machine.sh wheels|run" >&2
    exit 2 ;;
esac
