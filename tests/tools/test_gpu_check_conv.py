"""tools/gpu_check_conv.py (the GPU check of the cuda backend's convolutions) without a
GPU: it says there is none and exits 0; what it prints of a step's actions names them
without printing (or copying back) their arrays."""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from tfc.devices import gpu_count

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import gpu_check_conv  # noqa: E402


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is here: the check would run")
def test_without_a_gpu_it_says_so() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TFC_CUDA_DEVICE", None)
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check_conv.py")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("no CUDA device"), run.stdout


def test_actions_are_described_by_their_calls_and_shapes() -> None:
    from tfc.backends.cuda.conv import _sequence
    a = np.zeros((3, 4), np.float32)
    act = partial(np.matmul, a, a.T, out=np.zeros((3, 3), np.float32))
    assert gpu_check_conv.describe(act) == "matmul(float32[3, 4], float32[4, 3])"
    seq = _sequence([act, act])
    assert gpu_check_conv.describe(seq) == "a sequence of 2:"
    assert gpu_check_conv.describe(lambda: None) == \
        "test_actions_are_described_by_their_calls_and_shapes.<locals>.<lambda>"
