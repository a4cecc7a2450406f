"""A seeded corruption fuzzer of ``.tfc`` artifacts: every mutant loads and runs to the
right answer (object code compiled again from the IR, with a warning), or is refused
with one ``ArtifactError`` sentence naming the file; never a signal, never another
exception. Mutants run in a child process, so a crash fails the test instead of
killing pytest. ``TFC_CORRUPTION_FUZZ=N`` runs N mutants of each kind (default 6)."""

import json
import os
import random
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tfc
from tfc.runtime import Program

ROOT = Path(__file__).resolve().parents[2]
N = int(os.environ.get("TFC_CORRUPTION_FUZZ", "6"))


def model() -> Program:
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, 4], name="x")
        w = tfc.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), name="w")
        c = tfc.constant(np.linspace(0, 1, 300, dtype=np.float32).reshape(3, 100))
        y = tfc.reduce_sum(tfc.tanh((x @ w) @ c), 1, name="y")
        tfc.entry("predict", feeds={"x": x}, fetches={"y": y})
        step = w.assign_sub(0.01 * tfc.gradients(tfc.reduce_sum(y), w)[0])
        tfc.entry("train", feeds={"x": x}, fetches={"y": y}, targets=[step])
        return Program(g.as_module(), backend="llvm")


def mutants(path: Path, out: Path) -> list[Path]:
    """Seeded mutants of the artifact ``path``: members rewritten with valid zip CRCs
    (bytes flipped, truncated, emptied, dropped; the manifest too) and the raw file
    (bytes flipped, truncated)."""
    rng = random.Random(14)
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    raw = path.read_bytes()
    made = []

    def emit(data: bytes) -> None:
        p = out / f"m{len(made):04d}.tfc"
        p.write_bytes(data)
        made.append(p)

    def with_member(name: str, data: bytes | None) -> None:
        p = out / f"m{len(made):04d}.tfc"
        with zipfile.ZipFile(p, "w") as zf:
            for n, d in members.items():
                d = data if n == name else d
                if d is not None:
                    zf.writestr(n, d)
        made.append(p)

    for name, data in members.items():
        with_member(name, None)
        with_member(name, b"")
        for _ in range(N):
            cut = rng.randrange(len(data)) if data else 0
            with_member(name, data[:cut])
            flipped = bytearray(data)
            for _ in range(rng.choice([1, 1, 4])):
                if flipped:
                    flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            with_member(name, bytes(flipped))
    for _ in range(N * 3):
        flipped = bytearray(raw)
        flipped[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
        emit(bytes(flipped))
        emit(raw[:rng.randrange(len(raw))])
    return made


CHILD = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    from tfc.errors import ArtifactError
    from tfc.runtime import load

    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    for path in sys.stdin.read().splitlines():  # (argv would overflow at large N)
        for backend in ("llvm", "reference"):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    program = load(path, backend=backend, native=sys.argv[1])
                    y = program.run("predict", x=x)["y"]
                    program.run("train", x=x)
                    out = {"y": y.tolist(), "w": program.variables["w"].tolist()}
                except ArtifactError as e:
                    out = {"error": str(e)}
                except Exception as e:
                    out = {"crash": f"{type(e).__name__}: {e}"}
            out["warnings"] = [str(w.message) for w in caught]
            print(json.dumps({"path": path, "backend": backend, **out}), flush=True)
""")


@pytest.mark.parametrize("native", ["use", "strict"])
def test_corrupt_artifacts_load_right_or_fail_clearly(tmp_path, native):
    program = model()
    x = np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)
    program.run("predict", x=x)  # the artifact carries a binding for this batch size
    good = tmp_path / "good.tfc"
    program.save(good)
    want_y = program.run("predict", x=x)["y"]
    program.run("train", x=x)
    want_w = program.variables["w"]
    paths = mutants(good, tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.run([sys.executable, "-c", CHILD, native], input="\n".join(map(str, paths)),
                           capture_output=True, text=True, env=env,
                           timeout=max(600, 2 * len(paths)))
    results = [json.loads(line) for line in child.stdout.splitlines()]
    done = {r["path"] for r in results}
    first_missing = next((p for p in map(str, paths) if p not in done), None)
    assert child.returncode == 0, (f"the child died with {child.returncode} at "
                                   f"{first_missing}:\n{child.stderr[-2000:]}")
    loaded = refused = recompiled = 0
    for r in results:
        where = f"{r['path']} ({r['backend']})"
        assert "crash" not in r, f"{where}: {r['crash']}"
        if "error" in r:
            assert r["error"].startswith(r["path"]) and "\n" not in r["error"], where
            refused += 1
            continue
        np.testing.assert_allclose(r["y"], want_y, rtol=1e-5, atol=1e-6, err_msg=where)
        np.testing.assert_allclose(r["w"], want_w, rtol=1e-5, atol=1e-6, err_msg=where)
        for w in r["warnings"]:
            assert w.startswith(r["path"]) and "again from the IR" in w, (where, w)
        recompiled += bool(r["warnings"])
        loaded += 1
    assert refused and loaded
    assert (recompiled > 0) == (native == "use")
