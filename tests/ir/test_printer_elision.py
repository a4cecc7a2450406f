"""Large tensors are elided in IR printed for display (as MLIR's ``__elided__``), kept in
full wherever the text must parse back, and an elided text given to the parser is a
clear error, not a wrong module."""

from __future__ import annotations

import numpy as np
import pytest

from tfc.cli import main
from tfc.errors import ParseError
from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module
from tfc.ir.parser import parse_module
from tfc.ir.printer import ELIDE_ELEMENTS, format_tensor, print_module, print_op
from tfc.ir.types import DType, TensorType


def weight_module() -> Module:
    w = np.arange(784 * 16, dtype=np.float32).reshape(784, 16) / 7
    g = Graph("predict")
    x = g.add_arg(TensorType(DType.f32, ("B", 784)), "x")
    b = Builder(g)
    y = b.op("matmul", x, b.op("constant", value=w).results[0]).results[0]
    g.set_results([y], ["y"])
    return Module({"predict": g})


def test_elided_only_when_asked_and_large() -> None:
    big = np.arange(ELIDE_ELEMENTS + 1, dtype=np.int32)
    text = format_tensor(big, ELIDE_ELEMENTS)
    assert text.startswith("dense<i32[65]: __elided__ sha256=") and len(text) < 80
    assert format_tensor(big, ELIDE_ELEMENTS) == format_tensor(big.copy(), ELIDE_ELEMENTS)
    assert format_tensor(big + 1, ELIDE_ELEMENTS) != text  # the hash tells tensors apart
    assert format_tensor(big[:-1], ELIDE_ELEMENTS).endswith(", 63>")  # small: in full
    assert format_tensor(np.zeros(10**6, np.float32), 8) == "dense<f32[1000000]: 0.0>"
    assert "__elided__" not in format_tensor(big)  # the default is exact


def test_full_text_round_trips_and_elided_text_is_refused() -> None:
    m = weight_module()
    full = print_module(m)
    again = parse_module(full, "w.tfir")
    assert print_module(again) == full  # print, parse, print: the same module
    w = again.graphs["predict"].ops[0].attrs["value"]
    assert np.array_equal(w, m.graphs["predict"].ops[0].attrs["value"])

    shown = print_module(m, elide_above=ELIDE_ELEMENTS)
    assert len(shown) < 400 < len(full)
    with pytest.raises(ParseError, match=r"w\.tfir:2:36: the data of this "
                                         r"dense<f32\[784,16\]> was elided"):
        parse_module(shown, "w.tfir")
    # messages that quote an op never carry a whole weight
    assert "__elided__" in print_op(m.graphs["predict"].ops[0])


def test_tfc_ir_elides_on_stdout_only(tmp_path, capsys) -> None:
    src = tmp_path / "m.tfir"
    src.write_text(print_module(weight_module()))
    assert main(["ir", str(src), "--raw"]) == 0
    shown = capsys.readouterr().out
    assert "__elided__" in shown and max(map(len, shown.splitlines())) < 200
    assert main(["ir", str(src), "--raw", "--full"]) == 0
    assert capsys.readouterr().out == src.read_text()
    assert main(["ir", str(src), "--raw", "-o", str(tmp_path / "out.tfir")]) == 0
    assert (tmp_path / "out.tfir").read_text() == src.read_text()
    assert main(["opt", str(src)]) == 0  # tfc opt prints IR to be parsed again: in full
    assert capsys.readouterr().out == src.read_text()
    (tmp_path / "shown.tfir").write_text(shown)
    assert main(["opt", str(tmp_path / "shown.tfir")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "was elided" in err and "tfc ir --full" in err
