"""The ops are registered by importing tfc.ops, which the package does first: the registry
(tfc.ir) never imports the ops (a layer above it), yet any entry point into tfc sees them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tfc.errors import UnknownOp
from tfc.ir import registry


@pytest.mark.parametrize("code", [
    # the parser alone, in a fresh process
    """
    from tfc.ir.parser import parse_module
    m = parse_module("graph @f(%x: f32[2]) -> (f32[2]) {\\n"
                     "  %y = add %x, %x : f32[2]\\n  return %y\\n}\\n")
    assert m.graphs["f"].ops[0].kind == "add"
    """,
    # the registry alone
    """
    import tfc.ir.registry as r
    assert r.lookup("add").name == "add" and "conv2d" in r.all_ops()
    """,
])
def test_a_fresh_process_sees_every_op_through_any_module(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_an_empty_registry_says_the_ops_are_not_registered(monkeypatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", {})
    with pytest.raises(UnknownOp, match="no op is registered yet"):
        registry.lookup("add")
