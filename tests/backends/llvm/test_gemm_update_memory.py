"""The arena of a training step whose weight updates fold into their GEMMs
(``gemm_update``): every buffer the memory plan reserves is written by the step (the
gradient products the folded updates absorb get none: ``memory{gemm_updates=true}``,
the llvm pipeline), the updates are still made in the weights' own arrays, and the
numbers are the reference backend's (rtol 1e-5, atol 1e-6, as ``test_kernel_units``)."""

from __future__ import annotations

import numpy as np

from tfc.backends.llvm import LLVMBackend
from tfc.backends.llvm.runtime.executable import ALIGN
from tfc.backends.reference import ReferenceBackend
from tfc.pipeline import lower_entry

from tests.backends.llvm.test_kernel_units import feeds, mlp

# A weight's gradient (32x32 f32: 4 KB) is larger than any activation (4x32 f32: 512 B),
# so a buffer planned for a gradient the step never writes is mostly never written.
WIDTH, LAYERS, PATTERN = 32, 3, 0xA5


def _compiled():
    module, values = mlp(LAYERS, width=WIDTH)
    lowered = lower_entry(module, "train_step", "llvm")
    return lowered, values, LLVMBackend(use_cache=False).compile(lowered, "train_step")


def test_a_step_writes_every_buffer_the_plan_reserves():
    """The arena filled with a pattern before a step: every planned buffer's last element
    (its largest value's) is written by the step."""
    _, values, exe = _compiled()
    x = feeds(WIDTH)
    exe(x, dict(values), 0)  # (binds: the arena exists from the first step)
    (bound,) = exe._bindings.values()
    arena = bound.arena[(-bound.arena.ctypes.data) % ALIGN:]
    plan, offsets = exe._lowered().plan, bound.binding.offsets
    arena[:] = PATTERN
    exe(x, dict(values), 1)
    written = arena != PATTERN
    never = []
    for buf in plan.buffers:
        end = offsets[buf.id] + buf.size.bytes({})
        if not written[end - 4:end].any():  # (a written f32's 4 bytes are never all 0xA5)
            never.append((buf.id, str(buf.size), [str(v.type) for v in buf.values]))
    assert not never, f"buffers sized for values the step never writes: {never}"
    assert len(plan.unplanned) == 2 * LAYERS  # each weight's gradient and its scale


def test_folded_updates_are_made_in_place_and_match_the_reference():
    lowered, values, exe = _compiled()
    gc = exe._lowered()
    in_place = {gc.updates[j] for j in gc.in_place_updates()}
    assert {f"W{i}" for i in range(LAYERS)} <= in_place
    want = ReferenceBackend().compile(lowered, "train_step")
    got_vars, want_vars = dict(values), dict(values)
    for step in range(3):
        got = exe(feeds(WIDTH), got_vars, step)
        ref = want(feeds(WIDTH), want_vars, step)
        np.testing.assert_allclose(got.fetches[0], ref.fetches[0], rtol=1e-5, atol=1e-6)
        assert set(got.updates) == set(ref.updates) == set(values)
        for name, arr in ref.updates.items():
            np.testing.assert_allclose(got.updates[name], arr, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}, step {step}")
        got_vars.update(got.updates)
        want_vars.update(ref.updates)


def test_the_lowering_reuses_the_plans_gemm_updates_and_only_for_its_schedule(monkeypatch):
    """``gemm_update.find`` runs once per compile: the memory pass's answer (kept on its
    plan) is the lowering's, as long as the graph has the ops it planned, in its order;
    a graph whose schedule has changed since is asked again. Same updates either way."""
    from tfc.passes import gemm_update
    calls = []
    real = gemm_update.find
    monkeypatch.setattr(gemm_update, "find", lambda g: calls.append(g) or real(g))
    from tfc.pipeline import Target, lower
    module, _ = mlp(LAYERS, width=WIDTH)
    lowered = lower(module, Target("llvm"))  # (a module of its own: changed below)
    graph = lowered.graphs["train_step"]
    mine = lambda: [g for g in calls if g is graph]  # noqa: E731
    assert len(mine()) == 1
    exe = LLVMBackend(use_cache=False).compile(lowered, "train_step")
    assert len(mine()) == 1
    assert exe._lowered().gemm_updates is lowered.memory_plans["train_step"].gemm_updates
    moved = graph.ops[:]  # the same ops, two independent ones swapped
    i = next(i for i in range(len(moved) - 1)
             if moved[i].results and not set(moved[i].results) & set(moved[i + 1].inputs))
    moved[i], moved[i + 1] = moved[i + 1], moved[i]
    graph.ops = moved
    again = LLVMBackend(use_cache=False).compile(lowered, "train_step")
    assert len(mine()) == 2
    assert again._lowered().gemm_updates == exe._lowered().gemm_updates
