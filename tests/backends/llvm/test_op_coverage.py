"""Every registered op, in every dtype it accepts, runs natively on the LLVM backend.

For each op of the registry, one graph holds one instance of the op per dtype it accepts
(``cast``: per pair of dtypes); it is compiled with warnings as errors (a fallback to the
reference interpreter warns, so it fails here and ``fallback_ops`` must be empty) and run
on both backends. The instances and their inputs come from ``tfc.op_examples`` (an op
that none builds fails here, so a new op must come with an example). Region ops and the
device-transfer ops are skipped (``SKIP``).

Tolerances against the reference, by result dtype: integers and bools exact; f64
rtol = atol = 1e-12 and f32 1e-5 (the vectorized transcendental functions are within a
few ulps, sums are reassociated); f16 rtol = atol = 2^-10, one f16 ulp: the kernels
compute f16 in f32 and round, as the reference does, so they differ only where an f32
result a few ulps off straddles an f16 rounding boundary.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace
import numpy as np
import pytest

from tfc.backends.llvm import LLVMBackend
from tfc.ir.core import Graph, Module, VariableDecl
from tfc.ir.registry import all_ops, lookup, make_op
from tfc.ir.types import DType, TensorType
from tfc.op_examples import DTYPES, VAR_SHAPE, feeds, value, var_name, variants
from tfc.ops.control import RegionOp
from tfc.testing import compile_lowered

TOL = {DType.f16: 2.0 ** -10, DType.f32: 1e-5, DType.f64: 1e-12}

SKIP = {
    "send": "a device transfer: needs a placed multi-device program (tests/runtime)",
    "recv": "a device transfer: needs a placed multi-device program (tests/runtime)",
    "all_reduce": "a collective over devices: needs a placed multi-device program",
}
# scan, cond, while and fusion own regions: built with their bodies in
# test_control_kernels.py (and fusion by the fusion pass of every compiled graph here).


def _build(name: str) -> tuple[Module, list, list[tuple[str, DType | None, list[int]]],
                               dict]:
    """The module (every variant of ``name``), its feeds, per variant (label, dtype of its
    results, their fetch indices), and the variables' values."""
    rng = np.random.default_rng(0)
    g = Graph("f")
    inputs: list[np.ndarray] = []
    groups, results = [], []
    for label, ins, attrs, outs in variants(name):
        args = [g.add_arg(t, f"a{len(inputs) + i}") for i, t in enumerate(ins)]
        inputs.extend(feeds(name, ins, rng))
        op = g.append(make_op(name, args, attrs, result_types=outs))
        first = len(results)
        results.extend(op.results)
        # (var writes have no results: their updates are compared)
        groups.append((label, outs[0].dtype if outs else None, list(range(first, len(results)))))
    g.set_results(results)
    decls = {var_name(dt): VariableDecl(var_name(dt), TensorType(dt, VAR_SHAPE))
             for dt in DTYPES}
    variables = {k: value(d.type, rng) for k, d in decls.items()}
    return Module({"f": g}, decls), inputs, groups, variables


OPS = sorted(n for n in all_ops() if not n.startswith("test."))


def _params() -> list:
    out = []
    for name in OPS:
        if name in SKIP:
            out.append(pytest.param(name, marks=pytest.mark.skip(reason=SKIP[name])))
        elif isinstance(lookup(name), RegionOp):
            out.append(pytest.param(name, marks=pytest.mark.skip(
                reason="owns regions: tested with bodies in test_control_kernels.py")))
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("name", _params())
def test_op_is_native_and_matches_the_reference(h, name: str) -> None:
    module, feeds, groups, variables = _build(name)
    assert groups, f"no example builds {name}: add one to tfc.op_examples.EXAMPLES"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback warns
        exe = compile_lowered(LLVMBackend(), module, "f")
    assert not exe.fallback_ops, exe.fallback_ops
    got, want = h.run_both(module, feeds, variables, exe=exe)
    for label, dt, idx in groups:
        tol = TOL.get(dt, 0.0)
        part = [SimpleNamespace(fetches=[r.fetches[i] for i in idx], updates={})
                for r in (got, want)]
        try:
            h.assert_same(*part, rtol=tol, atol=tol)
        except AssertionError as e:
            raise AssertionError(f"{name} {label}: {e}") from None
    for k in want.updates:  # variable writes, each in its variable's dtype
        tol = TOL.get(DType.from_numpy(want.updates[k].dtype), 0.0)
        np.testing.assert_allclose(got.updates[k], want.updates[k], rtol=tol, atol=tol,
                                   err_msg=f"{name} @{k}")
    assert set(got.updates) == set(want.updates)
