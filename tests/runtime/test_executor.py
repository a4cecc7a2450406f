"""The local multi-device executor: partitions run concurrently and match one device."""

import numpy as np
import pytest

from tfc.errors import ExecutionError
from tfc.ir.types import DType
from tfc.passes.partition import device_graphs
from tfc.runtime import Program
from tfc.testing import split_mlp_module

RNG = np.random.default_rng(0)
X = RNG.normal(size=(16, 6)).astype(np.float32)
Y = RNG.integers(0, 3, 16).astype(np.int32)
BACKENDS = ["reference", "llvm"]


def train(module, backend, steps=5):
    p = Program(module, backend=backend)
    losses = [float(p.run("train", x=X, y=Y)["loss"]) for _ in range(steps)]
    return p, losses


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dropout", [False, True])
def test_model_parallel_training_matches_one_device(backend, dropout):
    one, want = train(split_mlp_module([None], dropout=dropout), backend)
    m = split_mlp_module(["/cpu:0", "/cpu:1"], dropout=dropout)
    m.devices = ["/cpu:0", "/cpu:1"]
    two, got = train(m, backend)
    # the same ops in the same order on each value: equal up to the summation order of
    # BLAS calls made on different threads (bitwise on the reference backend)
    tol = 0 if backend == "reference" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=0)
    for name, v in one.variables.items():
        np.testing.assert_allclose(two.variables[name], v, rtol=tol, atol=tol)
    assert two.step == 5
    logits = two.run("predict", x=X)["logits"]
    np.testing.assert_allclose(logits, one.run("predict", x=X)["logits"], rtol=tol, atol=tol)


def test_three_devices_and_fp16_transfers_stay_close():
    one, want = train(split_mlp_module([None], sizes=(6, 8, 8, 8, 3)), "llvm")
    m = split_mlp_module(["/cpu:0", "/cpu:1", "/cpu:2"], sizes=(6, 8, 8, 8, 3))
    m.devices = ["/cpu:0", "/cpu:1", "/cpu:2"]
    m.fp16_transfers = True
    p, got = train(m, "llvm")
    exe = p._executable("train")
    sent = [s.inputs[0] for part in device_graphs(p.module, "train").values()
            for s in part.sends]
    weights = [v for v in sent if v.op.kind == "var.read"]  # for backprop: state, kept f32
    assert weights and all(v.dtype is DType.f32 for v in weights)
    assert exe.compression.compressed == exe.compression.transfers - len(weights) > 0
    np.testing.assert_allclose(got, want, rtol=2e-3)


def test_a_failing_device_fails_the_step_without_hanging_or_updating():
    m = split_mlp_module(["/cpu:0", "/cpu:1"])
    m.devices = ["/cpu:0", "/cpu:1"]
    p = Program(m, backend="reference")
    before = {k: v.copy() for k, v in p.variables.items()}
    bad_labels = np.full(16, 7, np.int32)  # out of range for 3 classes: cpu:1 raises
    with pytest.raises(ExecutionError):
        p.run("train", x=X, y=bad_labels)
    assert p.step == 0
    for k, v in before.items():
        np.testing.assert_array_equal(p.variables[k], v)
    p.run("train", x=X, y=Y)  # and the executor still works
    assert p.step == 1
