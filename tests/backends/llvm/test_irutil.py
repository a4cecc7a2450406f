"""irutil.loop: heavy straight-line bodies are marked for interleaving, others are not."""

from __future__ import annotations

import re

import llvmlite.ir as ir
import pytest

from tfc.backends.llvm import irutil as U
from tfc.backends.llvm import jit, vmath
from tfc.backends.llvm.runtime import native


def _module(math: str | None, carried: bool = False, hi: int | None = None,
            trip: int | None = None) -> ir.Module:
    """``k(ptr x, ptr y, i64 n)``: y[i] = math(x[i]) (or x[i] + 1), or a sum when carried;
    the loop runs to ``n`` unless ``hi`` is a constant, ``trip`` its whole range's length."""
    mod = ir.Module("m")
    mod.triple, mod.data_layout = native.triple_and_layout()
    f = ir.Function(mod, ir.FunctionType(U.VOID, [U.PTR, U.PTR, U.I64]), "k")
    b = ir.IRBuilder(f.append_basic_block("entry"))
    x, y, n = f.args

    def body(i: ir.Value, acc: list) -> list:
        v = b.load(b.gep(x, [i], source_etype=U.F32), typ=U.F32)
        v = vmath.emit_math(b, math, [v]) if math else b.fadd(v, ir.Constant(U.F32, 1.0))
        if carried:
            return [b.fadd(acc[0], v)]
        b.store(v, b.gep(y, [i], source_etype=U.F32))
        return []

    out = U.loop(b, U.i64(0), n if hi is None else U.i64(hi), body,
                 [ir.Constant(U.F32, 0.0)] if carried else [],
                 trip=None if trip is None else U.i64(trip))
    if carried:
        b.store(out[0], y)
    b.ret_void()
    return mod


def test_heavy_body_is_interleaved() -> None:
    mod = _module("tanh")
    text = str(mod)
    assert re.search(r'!"llvm\.loop\.interleave\.count", i32 4', text)
    (loop_id,) = re.findall(r"!llvm\.loop (![0-9]+)", text)
    assert re.search(rf"^{loop_id} = !{{ {loop_id}, ", text, re.M)  # self-referential ID
    opt = str(jit.optimize(text))  # parses, verifies and vectorizes
    assert "<8 x float>" in opt or "<16 x float>" in opt


@pytest.mark.parametrize("math,carried", [(None, False), ("tanh", True)])
def test_light_or_carried_body_is_left_to_the_cost_model(math: str | None,
                                                         carried: bool) -> None:
    assert "llvm.loop" not in str(_module(math, carried))


@pytest.mark.parametrize("hi,trip,count", [
    (16, None, 2), (None, 16, 2), (64, None, 4), (40, None, 1), (8, None, 1),
    (U.INTERLEAVE_MIN_TRIP - 1, None, 1), (U.INTERLEAVE_MIN_TRIP, None, 4),
    (U.INTERLEAVE_MIN_TRIP + 3, None, 4), (None, 1 << 24, 4)])
def test_short_loops_leave_no_scalar_remainder(hi: int | None, trip: int | None,
                                              count: int) -> None:
    """A short constant loop gets the interleave count whose vector iterations cover it
    (the 16-float chain had run wholly in the scalar remainder of a 4x8 loop)."""
    text = str(_module("tanh", hi=hi, trip=trip))
    if count == 1:
        assert "llvm.loop" not in text
    else:
        assert re.search(rf'!"llvm\.loop\.interleave\.count", i32 {count}', text)


def test_body_size_counts_inlined_functions() -> None:
    mod = _module("tanh")
    k = mod.get_global("k")
    body = next(blk for blk in k.blocks if blk.name.endswith(".body"))
    assert U.body_size(body) >= U.HEAVY_BODY
    assert U.body_size(next(iter(_module(None).get_global("k").blocks))) < U.HEAVY_BODY


def test_each_loop_gets_its_own_id() -> None:
    mod = _module("tanh")
    f = ir.Function(mod, ir.FunctionType(U.VOID, [U.PTR, U.I64]), "k2")
    b = ir.IRBuilder(f.append_basic_block("entry"))

    def body(i: ir.Value, _c: list) -> None:
        p = b.gep(f.args[0], [i], source_etype=U.F32)
        b.store(vmath.emit_math(b, "sigmoid", [b.load(p, typ=U.F32)]), p)

    U.loop(b, U.i64(0), f.args[1], body)
    b.ret_void()
    ids = re.findall(r"!llvm\.loop (![0-9]+)", str(mod))
    assert len(ids) == 2 and ids[0] != ids[1]
    jit.optimize(str(mod))
