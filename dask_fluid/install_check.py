"""``fluid.install_check.run_check`` (Fluid 1.8): train a tiny network to show the install
works, on the CPU and, where CuPy sees GPUs, on them."""

from __future__ import annotations

import numpy as np

from . import layers, optimizer, unique_name
from .compiler import CompiledProgram, _cuda_device_count
from .executor import CPUPlace, CUDAPlace, Executor, Scope
from .framework import Program, program_guard

__all__ = ["run_check"]


def _train_once(place: CPUPlace | CUDAPlace, places: int = 1) -> float:
    """One SGD step of a 2 → 1 linear layer on ``place`` (``places`` CPU places through a
    CompiledProgram when more than one); the loss, which must be finite."""
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = 1
    with unique_name.guard(), program_guard(main, startup):
        x = layers.data(name="inp", shape=[2], dtype="float32")
        loss = layers.mean(layers.fc(x, size=1))
        optimizer.SGD(learning_rate=0.01).minimize(loss)
    exe, scope = Executor(place), Scope()
    exe.run(startup, scope=scope)
    program = main
    if places > 1:
        program = CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=[CPUPlace()] * places)
    feed = {"inp": np.ones((2 * places, 2), np.float32)}
    (value,) = exe.run(program, feed=feed, fetch_list=[loss], scope=scope)
    value = float(np.mean(value))
    if not np.isfinite(value):
        raise RuntimeError(f"run_check: training on {place!r} gave a loss of {value}")
    return value


def run_check() -> None:
    """Train a tiny network on the CPU, on two CPU places, and on every GPU CuPy sees, and
    print Fluid's message once it works (Fluid 1.8's ``fluid.install_check.run_check``).

    Raises
    ------
    RuntimeError
        A run gave a non-finite loss; the error of a run that failed is raised as it is.
    """
    print("Running Verify Fluid Program ... ")
    _train_once(CPUPlace())
    _train_once(CPUPlace(), places=2)
    for device in range(_cuda_device_count()):
        _train_once(CUDAPlace(device))
    print("Your Paddle Fluid works well on SINGLE GPU or CPU.")
    print("Your Paddle Fluid works well on MUTIPLE GPU or CPU.")
    print("Your Paddle Fluid is installed successfully! Let's start deep Learning with "
          "Paddle Fluid now")
