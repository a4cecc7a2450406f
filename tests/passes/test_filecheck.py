"""FileCheck tests: textual IR in, passes run, printed IR checked, as in LLVM and MLIR.

Each ``tests/ir_files/*.tfir`` (except ``roundtrip_*.tfir``, which the printer/parser
tests own) is one test case:

    // RUN: canonicalize,cse,dce
    // REQUIRES: random.uniform
    graph @main(%x: f32[3]) -> (out: f32[3]) { ... }
    // CHECK-LABEL: graph @main
    // CHECK: %[[V:.*]] = exp %x
    // CHECK-NOT: add

- ``// RUN: PIPELINE`` (the first line) is the pass pipeline, as ``run_passes`` takes it
  (empty: parse and print only). The module is parsed with ``tfc.ir.parser.parse_module``,
  the passes run with ``verify=True``, and ``tfc.ir.printer.print_module``'s output,
  followed by the partition tables and the memory plans as ``tfc ir`` prints them
  (``print_partitions``: ``//`` lines ``partition @main on /cpu:0, /cpu:1``, then per
  device and stage ``/cpu:1 stage 1: recv "KEY" from /cpu:0``, ``... run @main.cpu1.s1(
  recv "KEY", feed 0)``, ``... send "KEY" s1.out0 to /cpu:0 [f16]``, and ``fetch y:
  /cpu:0 s2.out0``, when the pipeline ran ``partition``; ``print_memory_plans``: ``//``
  lines ``memory plan @main``, a row per buffer ``#0  OFFSET  BYTES  SIZE  VALUES``, the
  totals, ``in place: %r <- %x``, when it ran ``memory``), is matched against
  the file's ``CHECK``, ``CHECK-NEXT``, ``CHECK-NOT``, ``CHECK-LABEL`` (any directive of
  the ``filecheck`` package) lines.
- ``// DEVICES: cpu:0,cpu:1`` sets the devices the module is compiled for
  (``Module.devices``; the IR's own ``target {devices=[...]}`` says the same), for
  ``placement`` and ``partition``. The
  placement cost model reads the default device rates, never a calibrated profile of
  the machine running the tests (``$TFC_DEVICE_PROFILE`` points at no file), so the
  placement a test checks is the same on every host.
- ``// REQUIRES: KIND, ...`` skips the file, saying why, unless those op kinds are in
  the registry.
- ``// ERROR: TEXT`` expects parsing, verifying or the passes to fail with a ``TfcError``
  whose message contains TEXT (then CHECK lines are optional).

Checks run in-process through the ``filecheck`` package's matcher (its CLI, ``filecheck
FILE < input``, does the same), so the whole directory takes well under a second.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from tfc.errors import TfcError
from tfc.ir.registry import all_ops

IR_FILES = Path(__file__).resolve().parent.parent / "ir_files"
CASES = sorted(p for p in IR_FILES.glob("*.tfir") if not p.name.startswith("roundtrip_"))
DIRECTIVE = re.compile(r"^\s*//\s*(RUN|REQUIRES|ERROR|DEVICES):(.*)$")


def directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        m = DIRECTIVE.match(line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2).strip())
    return out


def filecheck(check_file: Path, output: str) -> tuple[int, str]:
    """Run the ``filecheck`` package's matcher on ``output``; (exit code, its messages)."""
    from filecheck.finput import FInput
    from filecheck.matcher import Matcher
    from filecheck.options import Options
    from filecheck.parser import Parser

    opts = Options(match_filename=str(check_file))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        matcher = Matcher(opts, FInput("<printed IR>", output), Parser.from_opts(opts))
        code = matcher.run()
    return code, err.getvalue()


def run_case(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("filecheck", reason="the filecheck package is not installed")
    parser = pytest.importorskip("tfc.ir.parser", reason="tfc.ir.parser is not written yet")
    printer = pytest.importorskip("tfc.ir.printer", reason="tfc.ir.printer is not written yet")
    from tfc.devices import PROFILE_ENV, parse_devices
    from tfc.passes import run_passes

    # No calibrated profile: placement's cost model uses the default rates on every host.
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "no-device-profile.json"))

    text = path.read_text()
    d = directives(text)
    if not text.lstrip().startswith("// RUN:") or len(d.get("RUN", [])) != 1:
        pytest.fail(f"{path.name}: the first line must be '// RUN: PIPELINE' (and only it)")
    ops = all_ops()
    missing = [k.strip() for req in d.get("REQUIRES", []) for k in req.split(",")
               if k.strip() and k.strip() not in ops]
    if missing:
        pytest.skip(f"{path.name} needs op(s) not in the registry yet: {', '.join(missing)}")

    errors = d.get("ERROR", [])
    try:
        module = parser.parse_module(text, filename=path.name)
        if "DEVICES" in d:
            module.devices = parse_devices(",".join(d["DEVICES"]))
        module = run_passes(module, d["RUN"][0], verify=True)
    except TfcError as e:
        if not errors:
            raise
        for want in errors:
            assert want in str(e), f"{path.name}: expected an error containing {want!r}, got {e}"
        return
    if errors:
        pytest.fail(f"{path.name}: expected an error containing {errors[0]!r}; none was raised")
    output = (printer.print_module(module) + printer.print_partitions(module)
              + printer.print_memory_plans(module))
    code, messages = filecheck(path, output)
    assert code == 0, f"{path.name}: FileCheck failed:\n{messages}\n--- printed IR ---\n{output}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_ir_file(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_case(path, monkeypatch, tmp_path)


def test_there_are_ir_files() -> None:
    assert len(CASES) >= 8, [p.name for p in CASES]
