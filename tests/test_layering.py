"""Layers point one way: no module of tfc imports a module of a higher layer.

Every module under ``tfc/`` is parsed with ``ast`` and each of its imports is checked:
top-level ones and those inside functions (a lazy import is still a dependency), ``import
x`` and ``from x import y`` (``y`` counted as the submodule ``x.y`` where there is one),
relative imports resolved, type-only imports (``if TYPE_CHECKING:``) included, and
``importlib.import_module``/``__import__`` with a literal name (or an f-string's literal
head). A module's layer is that of the longest prefix of its name in ``LAYERS``; a
module that no prefix covers fails the test, so a new top-level module gets a layer when
it is added. ``tfc/__init__.py``, the public API facade, may import anything. An upward
import is fixed by moving code to the layer it belongs to; the few that may stay are
listed by exact (importer, imported) name in ``EXCEPTIONS``, each with its reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import tfc

ROOT = Path(tfc.__file__).resolve().parent  # the tfc package directory

# Lowest first (the order of issue #15). A module may import its own layer and the
# layers below it. "facade" is the package itself (below).
LAYER_ORDER = ("base", "ir", "ops", "passes", "backends", "pipeline", "runtime", "api",
               "train", "layers", "compiler", "cli", "facade")

LAYERS: dict[str, str] = {
    "tfc.errors": "base",
    "tfc.devices": "base",
    "tfc.atomic": "base",  # atomic file writes: the runtime, the device profile, the cli
    # cache writes on a worker thread: the llvm entry cache, the lowered cache, Session
    "tfc.background": "base",
    "tfc.version": "base",
    "tfc.units": "base",  # how reports print times: placement, cli, benchmarks
    "tfc.ir": "ir",
    "tfc.ops": "ops",
    # A valid instance of every registered op, and its inputs: data about the ops, read by
    # the registry walks in the tests; it needs the registry only.
    "tfc.op_examples": "ops",
    # Seeded random graphs of registered ops for differential tests: built with the IR
    # builder alone, so a test of any layer (passes, backends) can use them.
    "tfc.testing_graphs": "ops",
    "tfc.passes": "passes",
    "tfc.backends": "backends",
    "tfc.pipeline": "pipeline",
    "tfc.runtime": "runtime",
    # Running a program's tasks on a Ray cluster: beside the runtime, which calls it.
    "tfc.distributed": "runtime",
    # the Horovod-style API: it wraps tfc.train's optimizers and steps a Session
    "tfc.distributed.horovod": "train",
    "tfc.api": "api",
    "tfc.train": "train",
    # Input pipelines: a Dataset's map fn is a traced graph run by a Session (api); fit
    # (layers) and `tfc run --batch` (cli) consume them.
    "tfc.data": "train",
    # Distribution strategies for fit: a model's step replicated (passes) and run as a
    # program (runtime) beside its Session (api); fit (layers) calls it.
    "tfc.distribute": "train",
    # Queues: host-side state fed into and out of Session steps (tfc.api.host's hooks).
    "tfc.queue": "api",
    "tfc.layers": "layers",
    # Summaries in the graph and TensorBoard event files: tagged fetches of a Session's
    # graph (api), written with the tensorboard package; used by the callbacks and the cli.
    "tfc.summary": "api",
    # Keras callbacks of Sequential.fit: checkpoints, early stopping, TensorBoard, CSV.
    "tfc.callbacks": "layers",
    # Keras's names (tfc.keras.Input, Model, layers): aliases of tfc.layers and callbacks.
    "tfc.keras": "layers",
    "tfc.compiler": "compiler",
    "tfc.cli": "cli",
    "tfc.cli_devices": "cli",  # the device commands of the cli (calibrate, bench, viz)
    "tfc.cli_ps": "cli",  # the cli of parameter-server trainers (ps-async, backup workers)
    # The HTML picture of `tfc viz`: presentation for that one command, which may draw
    # whatever the lower layers compute; nothing but the cli uses it.
    "tfc.viz": "cli",
    # Helpers for tests only (no tfc module imports it): run an op or a graph, check
    # gradients, and build test models with the public API (``import tfc``), so it sits
    # at the top, beside the facade.
    "tfc.testing": "facade",
}

# The public API facade: ``tfc/__init__.py`` re-exports names from every layer, so it may
# import anything; importing it (``import tfc``, ``from tfc import placeholder``) is an
# import of the top layer, "facade".
FACADE = "tfc"

# (importer, imported) module names allowed to point upward, each with its reason. Keep it
# short: the fix for an upward import is to move code to the layer it belongs to.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("tfc.distributed", "tfc.distributed.horovod"):
        "the package offers the Horovod-style API as its own names (tfc.distributed.init, "
        "rank, DistributedOptimizer ...), as the tfc facade offers the layers; loaded on "
        "first use (module __getattr__), so the runtime's imports of the package never load "
        "the train layer",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    file: Path
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of tfc."""
    path = ROOT.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _literal_name(node: ast.expr) -> str | None:
    """The module named by the first argument of ``import_module``/``__import__``: a string
    literal, or the literal head of an f-string up to its last dot."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (isinstance(node, ast.JoinedStr) and node.values
            and isinstance(node.values[0], ast.Constant)):
        head = str(node.values[0].value)
        return head.rsplit(".", 1)[0] if "." in head else None
    return None


def imports_of(path: Path, name: str | None = None) -> list[Import]:
    """Every import of a tfc module in the file (module ``name``, by default the one at
    ``path``), wherever it is in the file."""
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((sub if is_module(sub) else target, node.lineno))
        elif isinstance(node, ast.Call) and node.args:
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if called in ("import_module", "__import__"):
                target = _literal_name(node.args[0])
                if target:
                    found.append((target, node.lineno))
    return [Import(name, target, path, line)
            for target, line in sorted(set(found), key=lambda f: (f[1], f[0]))
            if target == "tfc" or target.startswith("tfc.")]


def layer_of(module: str) -> str | None:
    if module == FACADE:
        return "facade"
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")),
               key=len, default=None)
    return LAYERS[best] if best else None


def all_modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def upward_imports() -> list[Import]:
    rank = {layer: i for i, layer in enumerate(LAYER_ORDER)}
    bad: list[Import] = []
    for path in all_modules():
        for imp in imports_of(path):
            if imp.importer == FACADE:
                continue
            low, high = layer_of(imp.importer), layer_of(imp.imported)
            assert low and high, f"{imp.file}:{imp.line}: no layer for {imp.importer} or " \
                                 f"{imp.imported} (add it to LAYERS)"
            if rank[high] > rank[low]:
                bad.append(imp)
    return bad


def describe(imp: Import) -> str:
    return (f"{imp.file.relative_to(ROOT.parent)}:{imp.line}: {imp.importer} imports "
            f"{imp.imported} (layer {layer_of(imp.imported)} above {layer_of(imp.importer)})")


def test_every_module_has_a_layer() -> None:
    missing = [module_name(p) for p in all_modules()
               if module_name(p) != FACADE and layer_of(module_name(p)) is None]
    assert not missing, f"modules without a layer (add them to LAYERS): {missing}"


def test_layer_table_names_existing_layers() -> None:
    assert set(LAYERS.values()) <= set(LAYER_ORDER)


def test_no_module_imports_a_higher_layer() -> None:
    bad = [imp for imp in upward_imports() if (imp.importer, imp.imported) not in EXCEPTIONS]
    assert not bad, "imports that point upward:\n" + "\n".join(map(describe, bad))


def test_every_exception_is_still_needed() -> None:
    used = {(imp.importer, imp.imported) for imp in upward_imports()}
    stale = [pair for pair in EXCEPTIONS if pair not in used]
    assert not stale, f"exceptions no import needs any more (remove them): {stale}"


def test_the_scanner_sees_lazy_relative_and_type_only_imports(tmp_path: Path) -> None:
    """The checks above are only as good as ``imports_of``: an import inside a function, a
    relative one, a type-only one and a dynamic one are each found and named by their full
    module; ``from tfc import x`` is the submodule ``tfc.x`` or else the facade."""
    src = tmp_path / "probe.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n"
                   "    from tfc.api.graph import Graph\n"
                   "def f():\n"
                   "    from ..backends import reference\n"
                   "    import tfc.passes.cse\n"
                   "    importlib.import_module('tfc.runtime.program')\n"
                   "from . import math\n"
                   "from tfc import atomic, placeholder\n")
    found = {(imp.imported, imp.line) for imp in imports_of(src, "tfc.ops.probe")}
    assert found == {("tfc.api.graph", 3), ("tfc.backends.reference", 5),
                     ("tfc.passes.cse", 6), ("tfc.runtime.program", 7), ("tfc.ops.math", 8),
                     ("tfc.atomic", 9), ("tfc", 9)}
