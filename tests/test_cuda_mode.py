"""``TFC_BACKEND=cuda`` is a mode of the whole suite (tests/conftest.py): without a CUDA
device every test module is skipped with one line that says why; on a GPU machine the
same tests run with cuda as their default backend."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tfc.devices import gpu_count

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(gpu_count() > 0, reason="a GPU is here: the CUDA mode runs the tests")
def test_without_a_cuda_device_each_module_is_one_clear_skip():
    env = {**os.environ, "TFC_BACKEND": "cuda", "PYTHONPATH": str(ROOT)}
    env.pop("TFC_CUDA_DEVICE", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider",
                          "tests/test_atomic.py", "tests/test_devices.py"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "2 skipped" in out and "passed" not in out and "failed" not in out, out
    assert "SKIPPED [2]" in out and "TFC_BACKEND=cuda: no CUDA" in out, out
