"""PyTorch (eager, CPU) and JAX (jit, CPU) versions of the benchmark's workloads.

Both are optional: ``bench.py`` imports this module's contenders only where the framework
imports, and a missing or broken one only drops its column. Each model is the same as
tfc's and numpy's in ``bench_workloads.py`` (same inputs, initial weights, learning rate
and loss), written the way a user of that framework would write it.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from bench_workloads import (CNN_FILTERS, CNN_IMAGE, CNN_LR, MLP_LR, Step, tiny_ops)


class TorchContender:
    """PyTorch eager on the CPU with ``torch.set_num_threads(threads)``."""

    name = "torch"

    def __init__(self, threads: int) -> None:
        import torch
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # only allowed before any parallel work; harmless to skip
            pass
        self.torch = torch
        self.F = torch.nn.functional

    def version(self) -> str:
        return str(self.torch.__version__)

    def warm_up_blas(self) -> None:
        a = self.torch.ones(64, 64)
        self.torch.mm(a, a)

    def chain(self, x: np.ndarray) -> Step:
        t, F = self.torch.from_numpy(x), self.F
        return lambda: F.gelu(t * 1.7 + 0.3, approximate="tanh")

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Step:
        ta, tb = self.torch.from_numpy(a), self.torch.from_numpy(b)
        return lambda: self.torch.mm(ta, tb)

    def _trainer(self, params: list[Any], lr: float, loss_fn: Any) -> Step:
        opt = self.torch.optim.SGD(params, lr=lr)

        def step() -> float:
            loss = loss_fn()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return float(loss.detach())
        return step

    def _leaves(self, arrays: list[np.ndarray]) -> list[Any]:
        return [self.torch.from_numpy(np.ascontiguousarray(a).copy()).requires_grad_()
                for a in arrays]

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        torch, F = self.torch, self.F
        ps = self._leaves(params)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))

        def loss() -> Any:
            h = tx
            n = len(ps) // 2
            for i in range(n):
                h = torch.addmm(ps[2 * i + 1], h, ps[2 * i])
                if i < n - 1:
                    h = torch.relu(h)
            return F.cross_entropy(h, ty)
        return self._trainer(ps, MLP_LR, loss)

    def cnn(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        torch, F = self.torch, self.F
        k, kb, w, b = params
        half = CNN_IMAGE // 2
        # PyTorch's layouts: NCHW images, OIHW filters, and a dense layer that reads the
        # pooled map flattened as (C, H, W): permute W's rows so the model is the same.
        w_chw = w.reshape(half, half, CNN_FILTERS, -1).transpose(2, 0, 1, 3).reshape(w.shape)
        ps = self._leaves([k.transpose(3, 2, 0, 1), kb, w_chw, b])
        tx = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        ty = torch.from_numpy(y.astype(np.int64))

        def loss() -> Any:
            h = F.max_pool2d(F.relu(F.conv2d(tx, ps[0], ps[1], padding=1)), 2)
            return F.cross_entropy(torch.addmm(ps[3], h.flatten(1), ps[2]), ty)
        return self._trainer(ps, CNN_LR, loss)

    def tiny(self, x: np.ndarray) -> Step:
        torch = self.torch
        t = torch.from_numpy(x)
        ops = tiny_ops()

        def step() -> Any:
            h = t
            for kind, c in ops:
                h = (torch.tanh(h) if kind == "tanh" else h * c if kind == "mul"
                     else h + c if kind == "add" else h - c)
            return h
        return step


class JaxContender:
    """JAX ``jit`` on the CPU; every step blocks until its results are ready."""

    name = "jax"

    def __init__(self, threads: int) -> None:
        import jax
        import jax.numpy as jnp
        try:
            jax.config.update("jax_platforms", "cpu")
        except Exception:  # older or newer config names: JAX_PLATFORMS=cpu is set anyway
            pass
        warnings.filterwarnings("ignore", message=".*donated buffers.*")
        self.jax, self.jnp = jax, jnp

    def version(self) -> str:
        try:
            import jaxlib
            return f"{self.jax.__version__} (jaxlib {jaxlib.__version__})"
        except ImportError:
            return str(self.jax.__version__)

    def warm_up_blas(self) -> None:
        a = self.jnp.ones((64, 64), self.jnp.float32)
        (a @ a).block_until_ready()

    def _ready(self, tree: Any) -> Any:
        block = getattr(self.jax, "block_until_ready", None)
        if block is not None:
            return block(tree)
        for leaf in self.jax.tree_util.tree_leaves(tree):
            leaf.block_until_ready()
        return tree

    def chain(self, x: np.ndarray) -> Step:
        jax = self.jax
        f = jax.jit(lambda v: jax.nn.gelu(v * 1.7 + 0.3, approximate=True))
        xd = jax.device_put(x)
        return lambda: f(xd).block_until_ready()

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Step:
        f = self.jax.jit(self.jnp.matmul)
        ad, bd = self.jax.device_put(a), self.jax.device_put(b)
        return lambda: f(ad, bd).block_until_ready()

    def _mlp_step_fn(self) -> Any:
        jax = self.jax

        def loss_fn(params: Any, x: Any, y: Any) -> Any:
            h = x
            n = len(params) // 2
            for i in range(n):
                h = h @ params[2 * i] + params[2 * i + 1]
                if i < n - 1:
                    h = jax.nn.relu(h)
            return self._xent(h, y)

        return self._sgd_step(loss_fn, MLP_LR)

    def _cnn_step_fn(self) -> Any:
        jax, jnp = self.jax, self.jnp

        def loss_fn(params: Any, x: Any, y: Any) -> Any:
            k, kb, w, b = params
            h = jax.lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h + kb)
            h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                      "VALID")
            return self._xent(h.reshape(h.shape[0], -1) @ w + b, y)

        return self._sgd_step(loss_fn, CNN_LR)

    def _xent(self, logits: Any, y: Any) -> Any:
        """Mean softmax cross-entropy of integer labels ``y``."""
        logp = self.jax.nn.log_softmax(logits)
        return -self.jnp.mean(self.jnp.take_along_axis(logp, y[:, None], axis=1))

    def _sgd_step(self, loss_fn: Any, lr: float) -> Any:
        """``(params, x, y) -> (updated params, loss)``, jitted; the old params' buffers
        are donated, so the update is in place as the other contenders' is."""
        jax = self.jax

        def sgd(params: Any, x: Any, y: Any) -> Any:
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            return tuple(p - lr * g for p, g in zip(params, grads)), loss
        return jax.jit(sgd, donate_argnums=0)

    def _trainer(self, fn: Any, params: list[np.ndarray], x: np.ndarray,
                 y: np.ndarray) -> Step:
        jax = self.jax
        state = {"params": tuple(jax.device_put(p) for p in params)}
        xd, yd = jax.device_put(x), jax.device_put(y)

        def step() -> Any:
            state["params"], loss = fn(state["params"], xd, yd)
            return self._ready((state["params"], loss))
        return step

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        return self._trainer(self._mlp_step_fn(), params, x, y)

    def cnn(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        return self._trainer(self._cnn_step_fn(), params, x, y)

    def tiny(self, x: np.ndarray) -> Step:
        jnp = self.jnp
        ops = tiny_ops()

        def chain(h: Any) -> Any:
            for kind, c in ops:
                h = (jnp.tanh(h) if kind == "tanh" else h * c if kind == "mul"
                     else h + c if kind == "add" else h - c)
            return h
        f = self.jax.jit(chain)
        xd = self.jax.device_put(x)
        return lambda: f(xd).block_until_ready()

    def compile_mlp(self, params: list[np.ndarray], x: np.ndarray,
                    y: np.ndarray) -> dict[str, Any]:
        """JAX's first call of the jitted training step in a fresh process: trace,
        compile with XLA and run once (``import jax`` itself not counted)."""
        t0 = time.perf_counter()
        self._trainer(self._mlp_step_fn(), params, x, y)()
        return {"cold": time.perf_counter() - t0,
                "cold_how": "first call of jax.jit(train_step), import excluded"}
