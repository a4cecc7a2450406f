"""The scan and sort ops in the .tfm language: registry ops by name, ``sort``'s two
results bound to two names, on the LLVM backend and the reference (exact)."""

import numpy as np
import pytest

from tfc.compiler.tfm import parse_tfm
from tfc.errors import TypeMismatch
from tfc.runtime.program import Program

SRC = """\
input x: f32[B, 5]

entry f(x) {
  top, at = sort(x, axis=1, descending=true, k=2)
  return c = cumsum(x, axis=1, reverse=true), top, at
}
"""


@pytest.mark.parametrize("backend", ["llvm", "reference"])
def test_cumsum_and_top_k_in_tfm(backend: str) -> None:
    x = np.array([[1, 3, 2, 3, 0], [4, 4, 4, -1, 5]], np.float32)
    out = Program(parse_tfm(SRC, "m.tfm"), backend=backend).run("f", x=x)
    np.testing.assert_array_equal(out["c"], np.flip(np.cumsum(np.flip(x, 1), 1), 1))
    np.testing.assert_array_equal(out["at"], [[1, 3], [4, 0]])
    np.testing.assert_array_equal(out["top"], [[3, 3], [5, 4]])


def test_k_too_large_is_located_in_the_tfm_source() -> None:
    src = "input x: f32[B, 5]\nentry f(x) {\n  t, i = sort(x, k=6)\n  return t\n}\n"
    with pytest.raises(TypeMismatch, match="k=6 is larger") as e:
        parse_tfm(src, "m.tfm")
    assert "m.tfm:3" in str(e.value)
