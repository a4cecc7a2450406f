"""The benchmark's workloads, their inputs, and the tfc and numpy versions of each.

Every contender gets the same inputs (made here with numpy from fixed seeds) and the same
model: BENCHMARKS.md's fused element-wise chain ``gelu_tanh(x*1.7+0.3)``, square f32
matrix products, the 784-512-512-10 ReLU MLP and the small CNN trained by SGD on softmax
cross-entropy, and a chain of 100 element-wise ops on 16 floats. A contender method
returns a zero-argument callable that runs one step to completion (``measure`` times it).
PyTorch and JAX live in ``bench_frameworks.py``.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np

Step = Callable[[], Any]

MLP_DIMS = (784, 512, 512, 10)
MLP_LR = 0.01
CNN_IMAGE = 28
CNN_FILTERS = 32
CNN_CLASSES = 10
CNN_LR = 0.001  # conv gradients sum over 784 positions: a larger rate diverges on noise
GELU_C = math.sqrt(2.0 / math.pi)
TINY_OPS = 100
TINY_N = 16


@dataclass(frozen=True)
class Sizes:
    """Workload sizes: BENCHMARKS.md's, or tiny ones for a smoke run (``--quick``)."""

    chain_n: int = 16 * 2**20
    matmul: tuple[int, ...] = (512, 1024, 2048)
    mlp_batches: tuple[int, ...] = (128, 1024)
    cnn_batch: int = 64
    memory_batch: int = 1024
    gemm_ref: int = 1024  # numpy sgemm size that gives the GEMM rate when matmul is not run
    mlp_dims: tuple[int, ...] = MLP_DIMS

    @staticmethod
    def quick() -> "Sizes":
        return Sizes(chain_n=2**16, matmul=(64, 128), mlp_batches=(16, 32), cnn_batch=4,
                     memory_batch=32, gemm_ref=128, mlp_dims=(64, 32, 32, 10))


def mlp_gemm_flops(batch: int, dims: tuple[int, ...] = MLP_DIMS) -> float:
    """Matrix-product flops of one MLP training step: each layer's forward product and its
    weight gradient, plus the input gradient of every layer but the first (the batch is
    fed, not trained)."""
    d = dims
    layers = [(d[i], d[i + 1]) for i in range(len(d) - 1)]
    flops = 0.0
    for i, (a, b) in enumerate(layers):
        flops += 2.0 * batch * a * b * (2 if i == 0 else 3)
    return flops


# ---- inputs ---------------------------------------------------------------------------

class Data:
    """The inputs every contender is given (float32, fixed seeds)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def _rng(self, salt: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, salt])

    def chain_x(self, n: int) -> np.ndarray:
        return self._rng(1).standard_normal(n, dtype=np.float32)

    def matmul_ab(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        rng = self._rng(2 + n)
        return (rng.standard_normal((n, n), dtype=np.float32),
                rng.standard_normal((n, n), dtype=np.float32))

    def mlp_params(self, dims: tuple[int, ...] = MLP_DIMS) -> list[np.ndarray]:
        """[W1, b1, W2, b2, W3, b3], He-initialised."""
        rng = self._rng(3)
        out = []
        for a, b in zip(dims[:-1], dims[1:]):
            out.append((rng.standard_normal((a, b)) * math.sqrt(2.0 / a)).astype(np.float32))
            out.append(np.zeros(b, np.float32))
        return out

    def mlp_batch(self, batch: int, dims: tuple[int, ...] = MLP_DIMS
                  ) -> tuple[np.ndarray, np.ndarray]:
        rng = self._rng(4 + batch)
        return (rng.standard_normal((batch, dims[0]), dtype=np.float32),
                rng.integers(0, dims[-1], batch).astype(np.int32))

    def cnn_params(self) -> list[np.ndarray]:
        """[K (3,3,1,32) HWIO, kb (32), W (14*14*32, 10), b (10)]."""
        rng = self._rng(5)
        flat = (CNN_IMAGE // 2) ** 2 * CNN_FILTERS
        return [(rng.standard_normal((3, 3, 1, CNN_FILTERS)) / 3.0).astype(np.float32),
                np.zeros(CNN_FILTERS, np.float32),
                (rng.standard_normal((flat, CNN_CLASSES)) * math.sqrt(1.0 / flat)
                 ).astype(np.float32),
                np.zeros(CNN_CLASSES, np.float32)]

    def cnn_batch(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """NHWC images and int32 labels."""
        rng = self._rng(6 + batch)
        return (rng.standard_normal((batch, CNN_IMAGE, CNN_IMAGE, 1), dtype=np.float32),
                rng.integers(0, CNN_CLASSES, batch).astype(np.int32))

    def tiny_x(self) -> np.ndarray:
        return self._rng(7).uniform(-1, 1, TINY_N).astype(np.float32)


def input_digest(arrays: Any) -> str:
    """A digest of a row's inputs (arrays, nested in lists and tuples): dtype, shape and
    bytes of each. Every contender times in a process of its own and makes its inputs
    there, so ``bench.py`` compares these digests to make sure they all got the same."""
    h = hashlib.blake2b(digest_size=16)
    stack = [arrays]
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            h.update(f"[{len(a)}".encode())
            stack.extend(reversed(a))
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def tiny_ops() -> list[tuple[str, float]]:
    """The 100-op chain as (op, constant): a cycle that no algebraic rewrite collapses."""
    cycle = [("mul", 0.999), ("add", 0.001), ("tanh", 0.0), ("sub", 0.002)]
    return [cycle[i % len(cycle)] for i in range(TINY_OPS)]


_TINY_OPS = tuple(tiny_ops())


def tiny_chain(h: Any, tanh: Callable[[Any], Any]) -> Any:
    """The 100-op chain applied to ``h`` with Python operators and a framework's ``tanh``:
    the same trace for tfc, PyTorch, JAX and TensorFlow (PyTorch eager runs it each step,
    so the list of ops is built once)."""
    for kind, c in _TINY_OPS:
        h = (tanh(h) if kind == "tanh" else h * c if kind == "mul"
             else h + c if kind == "add" else h - c)
    return h


# ---- numpy ----------------------------------------------------------------------------

class NumpyContender:
    """Hand-written numpy: the baseline every ratio starts from."""

    name = "numpy"

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def version(self) -> str:
        return np.__version__

    def copy(self, x: np.ndarray) -> Step:
        dst = np.empty_like(x)
        return lambda: np.copyto(dst, x)

    def chain(self, x: np.ndarray) -> Step:
        def step() -> np.ndarray:
            z = x * np.float32(1.7)
            z += np.float32(0.3)
            u = z * z  # gelu_tanh(z) = 0.5 z (1 + tanh(c (z + 0.044715 z^3)))
            u *= np.float32(0.044715)
            u += np.float32(1.0)
            u *= z
            u *= np.float32(GELU_C)
            np.tanh(u, out=u)
            u += np.float32(1.0)
            u *= z
            u *= np.float32(0.5)
            return u
        return step

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Step:
        return lambda: a @ b

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        W1, b1, W2, b2, W3, b3 = [p.copy() for p in params]
        rows = np.arange(x.shape[0])
        lr = np.float32(MLP_LR)
        inv_b = np.float32(1.0 / x.shape[0])

        def step() -> float:
            h1 = x @ W1
            h1 += b1
            np.maximum(h1, 0, out=h1)
            h2 = h1 @ W2
            h2 += b2
            np.maximum(h2, 0, out=h2)
            logits = h2 @ W3
            logits += b3
            g3, loss = _softmax_xent_grad(logits, y, rows, inv_b)
            dh2 = g3 @ W3.T
            dh2 *= h2 > 0
            dh1 = dh2 @ W2.T
            dh1 *= h1 > 0
            for p, g in ((W3, h2.T @ g3), (b3, g3.sum(0)), (W2, h1.T @ dh2),
                         (b2, dh2.sum(0)), (W1, x.T @ dh1), (b1, dh1.sum(0))):
                g *= lr
                p -= g
            return loss
        return step

    def cnn(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        K, kb, W, b = [p.copy() for p in params]
        batch, size = x.shape[0], x.shape[1]
        half = size // 2
        rows = np.arange(batch)
        lr = np.float32(CNN_LR)
        inv_b = np.float32(1.0 / batch)

        def step() -> float:
            xp = np.pad(x[..., 0], ((0, 0), (1, 1), (1, 1)))  # SAME padding, then im2col
            windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(1, 2))
            patches = windows.reshape(batch * size * size, 9)
            h = patches @ K.reshape(9, CNN_FILTERS)
            h += kb
            np.maximum(h, 0, out=h)
            win = h.reshape(batch, half, 2, half, 2, CNN_FILTERS)
            pooled = win.max(axis=(2, 4))
            logits = pooled.reshape(batch, -1) @ W
            logits += b
            g, loss = _softmax_xent_grad(logits, y, rows, inv_b)
            dpool = (g @ W.T).reshape(batch, half, 1, half, 1, CNN_FILTERS)
            dh = (win == pooled[:, :, None, :, None, :]) * dpool
            dh *= win > 0
            dh = dh.reshape(-1, CNN_FILTERS)
            for p, grad in ((W, pooled.reshape(batch, -1).T @ g), (b, g.sum(0)),
                            (K, (patches.T @ dh).reshape(K.shape)), (kb, dh.sum(0))):
                grad *= lr
                p -= grad
            return loss
        return step

    def tiny(self, x: np.ndarray) -> Step:
        ops = tiny_ops()
        consts = [np.float32(c) for _, c in ops]
        table = {"mul": np.multiply, "add": np.add, "sub": np.subtract}

        def step() -> np.ndarray:
            h = x
            for (kind, _), c in zip(ops, consts):
                h = np.tanh(h) if kind == "tanh" else table[kind](h, c)
            return h
        return step


def _softmax_xent_grad(logits: np.ndarray, y: np.ndarray, rows: np.ndarray,
                       inv_b: np.float32) -> tuple[np.ndarray, float]:
    """Mean sparse softmax cross-entropy and its gradient with respect to the logits."""
    m = logits.max(axis=1, keepdims=True)
    logits -= m
    e = np.exp(logits)
    s = e.sum(axis=1, keepdims=True)
    loss = float(np.mean(np.log(s[:, 0]) - logits[rows, y]))
    e /= s
    e[rows, y] -= 1.0
    e *= inv_b
    return e, loss


# ---- tfc ------------------------------------------------------------------------------

def default_backend() -> str:
    """``llvm`` when that backend exists and loads, else ``reference``."""
    from tfc.backends.base import get_backend
    try:
        get_backend("llvm")
    except Exception:  # not written yet, or llvmlite missing: the reference backend runs
        return "reference"
    return "llvm"


def build_mlp_module(params: list[np.ndarray], batch: int | None = None,
                     passes: str = "canonicalize,cse,dce") -> Any:
    """The MLP's training step (``train_step(x, y) -> loss``) as an optimized module.
    ``batch=None`` leaves the batch dim symbolic; the layer sizes are the params'."""
    import tfc
    from tfc.pipeline import run_pipeline

    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [batch, params[0].shape[0]], name="x")
        y = tfc.placeholder(tfc.int32, [batch], name="y")
        h = x
        layers = len(params) // 2
        for i in range(layers):
            w = tfc.Variable(params[2 * i], name=f"W{i + 1}")
            b = tfc.Variable(params[2 * i + 1], name=f"b{i + 1}")
            h = tfc.matmul(h, w) + b
            if i < layers - 1:
                h = tfc.nn.relu(h)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                               logits=h))
        train = tfc.train.GradientDescentOptimizer(MLP_LR).minimize(loss)
        tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return run_pipeline(g.as_module(), passes, verify=False)


def build_cnn_module(params: list[np.ndarray]) -> Any:
    import tfc
    from tfc.pipeline import run_pipeline

    half = CNN_IMAGE // 2
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, CNN_IMAGE, CNN_IMAGE, 1], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        k = tfc.Variable(params[0], name="K")
        kb = tfc.Variable(params[1], name="kb")
        w = tfc.Variable(params[2], name="W")
        b = tfc.Variable(params[3], name="b")
        h = tfc.nn.relu(tfc.nn.conv2d(x, k, padding="SAME") + kb)
        h = tfc.reshape(tfc.nn.max_pool2d(h, 2), [-1, half * half * CNN_FILTERS])
        logits = tfc.matmul(h, w) + b
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                               logits=logits))
        train = tfc.train.GradientDescentOptimizer(CNN_LR).minimize(loss)
        tfc.entry("train_step", feeds={"x": x, "y": y}, fetches={"loss": loss},
                  targets=[train])
    return run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)


def _gelu_tanh(z: Any) -> Any:
    import tfc
    return 0.5 * z * (1.0 + tfc.tanh(GELU_C * (z + 0.044715 * z * z * z)))


class TfcContender:
    """tfc: graphs built with the Python API, compiled to a ``Program`` on ``backend``.

    Timed steps go through ``Program.callable`` (TensorFlow's ``Session.make_callable``),
    what a TensorFlow user calls in a hot loop; ``Program.run`` does the same step with
    name lookups around it."""

    name = "tfc"

    def __init__(self, threads: int, backend: str) -> None:
        import importlib
        importlib.import_module("tfc")  # fails here, not in the first row, if tfc is broken
        self.threads = threads
        self.backend = backend
        self.ops: dict[str, int] = {}  # ops per entry graph, for the report

    def version(self) -> str:
        import tfc
        return f"{tfc.__version__} ({self.backend} backend)"

    def warm_up_blas(self) -> None:
        """Run a small product so the backend loads its BLAS before libraries are listed."""
        a = np.ones((64, 64), np.float32)
        self.matmul(a, a)()
        self.ops.pop("matmul", None)  # not a row of this run (the report lists the rows')

    def fma_peak(self) -> Step:
        """The cores' FMA peak (``bench_peak``): a machine limit measured with tfc's LLVM
        plumbing, which only this contender's process loads. Its step returns its own
        time (the CPU time of its threads), which ``bench.py`` times it by."""
        from bench_peak import FmaPeak
        return FmaPeak(self.threads).step

    def _program(self, build: Callable[[Any], None], key: str) -> Any:
        import tfc
        from tfc.pipeline import run_pipeline
        from tfc.runtime import Program

        with tfc.Graph().as_default() as g:
            build(tfc)
        module = run_pipeline(g.as_module(), "canonicalize,cse,dce", verify=False)
        self.ops[key] = len(module.graphs[key].ops)
        return Program(module, backend=self.backend)

    def chain(self, x: np.ndarray) -> Step:
        def build(tfc: Any) -> None:
            p = tfc.placeholder(tfc.float32, [x.shape[0]], name="x")
            tfc.entry("chain", feeds={"x": p}, fetches={"y": _gelu_tanh(p * 1.7 + 0.3)})
        prog = self._program(build, "chain")
        return partial(prog.callable("chain", ["x"], "y"), x)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Step:
        def build(tfc: Any) -> None:
            pa = tfc.placeholder(tfc.float32, list(a.shape), name="a")
            pb = tfc.placeholder(tfc.float32, list(b.shape), name="b")
            tfc.entry("matmul", feeds={"a": pa, "b": pb}, fetches={"c": tfc.matmul(pa, pb)})
        prog = self._program(build, "matmul")
        return partial(prog.callable("matmul", ["a", "b"], "c"), a, b)

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        from tfc.runtime import Program
        module = build_mlp_module(params)
        self.ops["train_step"] = len(module.graphs["train_step"].ops)
        prog = Program(module, backend=self.backend)
        return partial(prog.callable("train_step", ["x", "y"], "loss"), x, y)

    def cnn(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        from tfc.runtime import Program
        prog = Program(build_cnn_module(params), backend=self.backend)
        return partial(prog.callable("train_step", ["x", "y"], "loss"), x, y)

    def tiny(self, x: np.ndarray) -> Step:
        def build(tfc: Any) -> None:
            p = tfc.placeholder(tfc.float32, [x.shape[0]], name="x")
            tfc.entry("tiny", feeds={"x": p}, fetches={"y": tiny_chain(p, tfc.tanh)})
        prog = self._program(build, "tiny")
        return partial(prog.callable("tiny", ["x"], "y"), x)

    def compile_mlp(self, params: list[np.ndarray], x: np.ndarray,
                    y: np.ndarray) -> dict[str, Any]:
        """Cold: build the graph, optimize, compile and run the first step in this fresh
        process, with an empty compile cache (as JAX's first call has none). Cached: load
        the artifact saved after that and run its first step. Recompiled: build and
        compile the same graph again, now from the warm compile cache, and run a step."""
        import tfc.runtime
        from tfc.runtime import Program

        with tempfile.TemporaryDirectory() as tmp:
            os.environ["TFC_CACHE_DIR"] = os.path.join(tmp, "cache")  # read per compile
            t0 = time.perf_counter()
            module = build_mlp_module(params)
            t1 = time.perf_counter()
            prog = Program(module, backend=self.backend)
            prog.run("train_step", x=x, y=y)
            t2 = time.perf_counter()
            path = os.path.join(tmp, "mlp.tfc")
            prog.save(path)
            t3 = time.perf_counter()
            loaded = tfc.runtime.load(path, backend=self.backend)
            loaded.run("train_step", x=x, y=y)
            t4 = time.perf_counter()
            Program(build_mlp_module(params), backend=self.backend).run("train_step", x=x, y=y)
            t5 = time.perf_counter()
        return {"cold": t2 - t0, "cold_build_and_passes": t1 - t0,
                "cold_compile_and_first_step": t2 - t1, "cached": t4 - t3,
                "cached_how": "load the saved .tfc artifact + first step",
                "recompiled": t5 - t4,
                "recompiled_how": "build + compile again from the warm cache + first step"}

    def memory_plan(self, params: list[np.ndarray], batch: int) -> dict[str, Any]:
        """Arena bytes against the no-reuse sum (and the peak of live bytes) from the memory
        pass's plan of the MLP step, at batch ``batch``, when the memory pass exists."""
        from tfc.passes import available_passes

        names = available_passes()
        if "memory" not in names:
            return {"note": "no memory pass yet (tfc.passes.available_passes())"}
        pipeline = "canonicalize,cse,dce" + (",fusion" if "fusion" in names else "") + ",memory"
        module = build_mlp_module(params, passes=pipeline)
        plan = module.memory_plans.get("train_step")
        if plan is None:
            return {"note": "the memory pass left no plan for train_step"}
        at = {"B": batch}
        return {"arena_bytes": int(plan.arena_bytes(at)),
                "no_reuse_bytes": int(plan.no_reuse_bytes(at)),
                "peak_live_bytes": int(plan.peak_live_bytes(at)),
                "plan_pipeline": pipeline}
