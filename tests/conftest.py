"""Test-only ops for the IR and pass tests (printer/parser, bytecode, passes over regions):
one owning any number of regions, one with an attr of every kind. They are registered
only while a module or test that asks for them runs (``pytestmark =
pytest.mark.usefixtures("ir_test_ops")``), so registry walks elsewhere never see them."""

from __future__ import annotations

import os
from typing import Any, Iterator, Mapping, Sequence

import pytest

from tfc.ir import registry
from tfc.ir.registry import PURE, AttrSpec, OpDef
from tfc.ir.types import TensorType

def cuda_mode_skip_reason() -> str | None:
    """Why the suite cannot run in its CUDA mode (``TFC_BACKEND=cuda``: the cuda backend
    is every test's default) on this machine, or None when it can: a CUDA device is
    there (or ``TFC_CUDA_DEVICE=emulated`` asks for the CPU emulator). None as well
    outside the CUDA mode."""
    if os.environ.get("TFC_BACKEND", "").strip() != "cuda":
        return None
    if os.environ.get("TFC_CUDA_DEVICE", "").strip() == "emulated":
        return None
    try:
        from tfc.backends.cuda.device import cuda_device
    except ImportError as e:
        return f"TFC_BACKEND=cuda: this tfc has no CUDA backend ({e})"
    from tfc.errors import TfcError
    try:
        cuda_device()
    except TfcError as e:  # "no CUDA device: <what is missing>"
        return f"TFC_BACKEND=cuda: {e}"
    return None


_CUDA_SKIP = cuda_mode_skip_reason()


class _SkippedModule(pytest.Module):
    """A test module the CUDA mode cannot run here: one skip line for the whole module."""

    def collect(self) -> list:
        assert _CUDA_SKIP is not None
        pytest.skip(_CUDA_SKIP, allow_module_level=True)


def pytest_pycollect_makemodule(module_path: Any, parent: Any) -> Any:
    """In the CUDA mode without a device, every module is skipped with one clear line
    (``TFC_BACKEND=cuda: no CUDA device (...)``) instead of failing test by test; on a
    GPU machine the same tests run with the cuda backend as their default."""
    if _CUDA_SKIP is not None:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every module skipped in the CUDA mode is a run that said why, not "no tests
    collected" (exit status 5): it exits 0."""
    if _CUDA_SKIP is not None and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK


@pytest.fixture(autouse=True, scope="session")
def isolated_caches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite never reads what this user's tfc left behind: compile caches in a fresh
    directory (a cached native build would outlive a test's patch of the lowering table),
    and no calibrated device profile (placement would follow this machine's rates).
    Subprocesses (the CLI tests) inherit both. Tests that need their own set them."""
    saved = {k: os.environ.get(k) for k in ("TFC_CACHE_DIR", "TFC_DEVICE_PROFILE")}
    root = tmp_path_factory.mktemp("tfc-home")
    os.environ["TFC_CACHE_DIR"] = str(root / "cache")
    os.environ["TFC_DEVICE_PROFILE"] = str(root / "no-devices.json")  # never written
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


ATTR_KINDS = ["int", "float", "bool", "str", "ints", "floats", "dtype", "shape", "tensor",
              "any", "var"]


class _RegionOp(OpDef):
    """``test.region``: owns graphs; its result types are declared (infer returns None)."""

    name = "test.region"
    traits = frozenset({PURE})
    region_names = None  # any number
    attrs = {"note": AttrSpec("any", None)}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> None:
        return None


class _AttrsOp(OpDef):
    """``test.attrs``: one optional attr per attr kind (``a_<kind>``), no results."""

    name = "test.attrs"
    traits = frozenset({PURE})
    attrs = {f"a_{k}": AttrSpec(k, None) for k in ATTR_KINDS}

    def infer(self, inputs: Sequence[TensorType], attrs: Mapping[str, Any]) -> list:
        return []


@pytest.fixture(scope="module")
def ir_test_ops() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        for op in (_RegionOp(), _AttrsOp()):
            mp.setitem(registry._REGISTRY, op.name, op)
        yield


class TensorBoardEvents:
    """Reads TensorBoard event files back with tensorboard's own reader (``event_accumulator``).

    TensorBoard's readers use TensorFlow where it is installed (imported on first use:
    seconds per process); the tests make them use TensorBoard's own stand-in, as they do
    where TensorFlow is missing, by making ``tensorboard.compat.notf`` importable (the
    switch of TensorBoard's no-TensorFlow build). The files read are the same."""

    # the same switch for a TensorBoard server started by a test (``python -c``)
    NO_TF_PRELUDE = ("import sys, types; sys.modules.setdefault('tensorboard.compat.notf', "
                     "types.ModuleType('tensorboard.compat.notf')); ")

    def __init__(self) -> None:
        import sys
        import types
        sys.modules.setdefault("tensorboard.compat.notf",
                               types.ModuleType("tensorboard.compat.notf"))

    def accumulator(self, logdir: Any) -> Any:
        from tensorboard.backend.event_processing import event_accumulator as ea
        acc = ea.EventAccumulator(str(logdir), size_guidance={
            ea.TENSORS: 0, ea.IMAGES: 0, ea.HISTOGRAMS: 0, ea.SCALARS: 0})
        acc.Reload()
        return acc

    def tensors(self, logdir: Any, tag: str) -> list[tuple[int, Any]]:
        """``(step, value)`` of each event of ``tag`` (scalars, histograms and text are
        in TensorBoard's tensor form)."""
        from tensorboard.util.tensor_util import make_ndarray
        return [(e.step, make_ndarray(e.tensor_proto))
                for e in self.accumulator(logdir).Tensors(tag)]

    def scalars(self, logdir: Any, tag: str) -> list[tuple[int, float]]:
        return [(s, float(v)) for s, v in self.tensors(logdir, tag)]


@pytest.fixture
def tb_events() -> TensorBoardEvents:
    """TensorBoard's event reader (the test is skipped without the tensorboard package)."""
    pytest.importorskip("tensorboard", reason="needs the tensorboard package (the "
                                              "tensorboard extra)")
    return TensorBoardEvents()
