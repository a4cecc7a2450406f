#!/usr/bin/env python3
"""Where an f32 backend's MLP gradients part from the exact ones: every intermediate of one
training step's backward pass, per backend, as a normwise distance from f64.

    python tools/gpu_grad_check.py [--batch 1024] [--backends cuda,llvm]

The momentum MLP of ``tools/gpu_state_check.py`` (784-512-512-10, He-initialised, zero
biases, standard-normal inputs) as a TF1 graph. One ``Session.run`` fetches the layers'
pre-activations, the loss's gradient with respect to each of them (the deltas) and the
gradients of the weights and biases, on each backend in f32 and on the reference backend in
f64 (the exact values, to within f64's rounding). For every tensor it prints
``max |got - exact| / max |exact|`` and, for the pre-activations, how many elements have
the other sign than the exact value (a ReLU mask that flips). A tensor many times farther
from exact on one backend than on another, where its inputs are as close, is the first
place the two compute differently. It also prints what could make cuBLAS round f32
products to TF32 (``NVIDIA_TF32_OVERRIDE``, ``CUPY_TF32``, the handle's math mode) and
cupy's own ``matmul`` of the first delta product against f64.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_workloads import MLP_DIMS, Data  # noqa: E402


def run(backend: str, params: list[np.ndarray], x: np.ndarray, y: np.ndarray,
        dtype: Any) -> dict[str, np.ndarray]:
    import tfc
    dt = tfc.float64 if dtype == np.float64 else tfc.float32
    with tfc.Graph().as_default() as g:
        xp = tfc.placeholder(dt, [None, params[0].shape[0]], name="x")
        yp = tfc.placeholder(tfc.int32, [None], name="y")
        h, pre, weights = xp, [], []
        layers = len(params) // 2
        for i in range(layers):
            w = tfc.Variable(params[2 * i].astype(dtype), name=f"W{i}")
            b = tfc.Variable(params[2 * i + 1].astype(dtype), name=f"b{i}")
            weights += [w, b]
            z = tfc.matmul(h, w) + b
            pre.append(z)
            h = tfc.nn.relu(z) if i < layers - 1 else z
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=yp, logits=h))
        grads = tfc.gradients(loss, pre + weights)
        fetches = {f"z{i}": z for i, z in enumerate(pre)}
        fetches.update({f"dz{i}": d for i, d in enumerate(grads[:len(pre)])})
        fetches.update({f"d{v.name.split(':')[0]}": d
                        for v, d in zip(weights, grads[len(pre):])})
        # the product that makes the first delta, alone: dz1 @ W1^T
        fetches["dz1@W1T"] = tfc.matmul(grads[1], weights[2], transpose_b=True)
        fetches["loss"] = loss
    sess = tfc.Session(g, backend=backend)
    out = sess.run(fetches, {xp: x.astype(dtype), yp: y})
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def tf32_probes(exact: dict[str, np.ndarray], params: list[np.ndarray]) -> list[str]:
    lines = [f"NVIDIA_TF32_OVERRIDE={os.environ.get('NVIDIA_TF32_OVERRIDE')!r} "
             f"CUPY_TF32={os.environ.get('CUPY_TF32')!r}"]
    try:
        import cupy as cp
        from cupy_backends.cuda.libs import cublas
        handle = cp.cuda.device.get_cublas_handle()
        lines.append(f"cupy's cuBLAS handle math mode: {cublas.getMathMode(handle)} "
                     "(0 default, 1 tensor op, 2 pedantic, 3 TF32 tensor op)")
        a = exact["dz1"].astype(np.float32)
        b = params[2].astype(np.float32)
        want = exact["dz1"] @ params[2].astype(np.float64).T
        got = cp.asnumpy(cp.matmul(cp.asarray(a), cp.asarray(b).T)).astype(np.float64)
        f32 = (a.astype(np.float64) @ b.astype(np.float64).T)
        lines.append(f"cupy matmul(dz1, W1^T) on f32 inputs: {err(got, f32):.2e} from the "
                     f"f64 product of the same f32 inputs; inputs' own rounding "
                     f"{err(f32, want):.2e}")
    except Exception as e:  # noqa: BLE001
        lines.append(f"cupy probes: {type(e).__name__}: {e}")
    return lines


def err(got: np.ndarray, want: np.ndarray) -> float:
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got - want))) / scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--backends", default="cuda,llvm")
    args = ap.parse_args()
    data = Data()
    params = data.mlp_params(MLP_DIMS)
    x, y = data.mlp_batch(args.batch, MLP_DIMS)
    exact = run("reference", params, x, y, np.float64)
    got = {}
    for backend in args.backends.split(","):
        try:
            got[backend] = run(backend, params, x, y, np.float32)
        except Exception as e:  # noqa: BLE001
            print(f"{backend}: {type(e).__name__}: {e}")
    names = list(exact)
    print(f"{'tensor':10}" + "".join(f"{b:>12}" for b in got) + "   (max|got-exact|/max|exact|)")
    for name in names:
        row = f"{name:10}" + "".join(f"{err(v[name], exact[name]):12.2e}" for v in got.values())
        if name.startswith("z") and name[1:].isdigit():
            row += "   sign flips: " + ", ".join(
                f"{b} {int(np.sum(np.sign(v[name]) != np.sign(exact[name])))}"
                for b, v in got.items())
        print(row)
    for line in tf32_probes(exact, params):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
