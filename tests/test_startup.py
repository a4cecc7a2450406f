"""What a fresh process imports: ``import tfc`` and loading an artifact stay light.

``tfc run model.tfc`` starts a new Python each time, so every module on its import path
costs every run. These tests run a subprocess and look at ``sys.modules``: ``rich`` (the
progress bars), ``importlib.metadata`` (pulled in by ``import scipy_openblas32``) and ``ray``
(seconds to import; only a cluster needs it) must not be imported by ``import tfc`` or by
loading and running an artifact, while every public name still resolves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path


# Imported on purpose only when they are used.
LAZY = ("rich", "importlib.metadata", "scipy_openblas32", "ray")


def _modules_after(code: str, tmp_path: Path) -> set[str]:
    """The modules a fresh interpreter has imported after running ``code``."""
    script = textwrap.dedent(code) + textwrap.dedent("""
        import json, sys
        print("MODULES=" + json.dumps(sorted(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("MODULES=")][-1]
    return set(json.loads(line[len("MODULES="):]))


def _imported(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if n in modules or any(m.startswith(n + ".") for m in modules)]


def test_import_tfc_is_light(tmp_path: Path) -> None:
    modules = _modules_after("import tfc", tmp_path)
    assert not _imported(modules, LAZY)


def test_load_and_run_an_artifact_is_light(tmp_path: Path) -> None:
    """Compile in one process, then load and run in a fresh one (the default backend)."""
    script = tmp_path / "model.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        import tfc
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.ones((4, 3), np.float32), name="w")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": tfc.nn.relu(tfc.matmul(x, w))})
    """))
    art = tmp_path / "model.tfc"
    out = subprocess.run([sys.executable, "-c",
                          "import sys; from tfc.cli import main; sys.exit(main())",
                          "compile", str(script), "-o", str(art)],
                         capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    modules = _modules_after(f"""
        import numpy as np
        import tfc.runtime
        p = tfc.runtime.load({str(art)!r})
        y = p.run("predict", x=np.full((2, 4), -1.0, np.float32))["y"]
        assert y.shape == (2, 3) and (y == 0).all(), y
        y = p.run("predict", x=np.ones((2, 4), np.float32))["y"]
        assert (y == 4).all(), y
    """, tmp_path)
    assert not set(_imported(modules, LAZY)) - _brought_by_the_gpu_runtime(modules, tmp_path)


def _brought_by_the_gpu_runtime(modules: set[str], tmp_path: Path) -> set[str]:
    """The lazy modules that cupy's own import brings (``cupy._environment`` imports
    ``importlib.metadata``), when the run imported cupy: the cuda backend on a GPU
    (``TFC_BACKEND=cuda``) needs cupy to run at all, so those are the GPU's price, not
    tfc's import path; on the CPU backends, and the emulated device, cupy stays out."""
    if "cupy" not in modules:
        return set()
    from tfc.backends.base import default_backend_name
    assert default_backend_name() == "cuda", "a CPU backend's run imported cupy"
    return set(_imported(_modules_after("import cupy", tmp_path), LAZY))
