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
