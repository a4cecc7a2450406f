"""PyTorch (eager, CPU), JAX (jit, CPU) and TensorFlow (``tf.function``, with and without
XLA, CPU) versions of the benchmark's workloads.

All are optional: ``bench.py`` imports this module's contenders only where the framework
imports, and a missing or broken one only drops its column. Each model is the same as
tfc's and numpy's in ``bench_workloads.py`` (same inputs, initial weights, learning rate
and loss), written the way a user of that framework would write it.
"""

from __future__ import annotations

import time
from functools import partial
import warnings
from typing import Any

import numpy as np

from bench_workloads import (CNN_FILTERS, CNN_IMAGE, CNN_LR, MLP_LR, Step, tiny_chain)


class TorchContender:
    """PyTorch eager on the CPU with ``torch.set_num_threads(threads)``; ``device="cuda"``
    puts the models' tensors on the GPU (``tools/bench_cuda.py``)."""

    name = "torch"

    def __init__(self, threads: int, device: str = "cpu") -> None:
        import torch
        self.device = device
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

    def _tensor(self, a: np.ndarray) -> Any:
        """``a`` as a tensor on the contender's device (shares memory on the CPU)."""
        return self.torch.from_numpy(a).to(self.device)

    def _leaves(self, arrays: list[np.ndarray]) -> list[Any]:
        return [self._tensor(np.ascontiguousarray(a).copy()).requires_grad_()
                for a in arrays]

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        torch, F = self.torch, self.F
        ps = self._leaves(params)
        tx, ty = self._tensor(x), self._tensor(y.astype(np.int64))

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
        tx = self._tensor(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        ty = self._tensor(y.astype(np.int64))

        def loss() -> Any:
            h = F.max_pool2d(F.relu(F.conv2d(tx, ps[0], ps[1], padding=1)), 2)
            return F.cross_entropy(torch.addmm(ps[3], h.flatten(1), ps[2]), ty)
        return self._trainer(ps, CNN_LR, loss)

    def tiny(self, x: np.ndarray) -> Step:
        torch = self.torch
        t = torch.from_numpy(x)
        return lambda: tiny_chain(t, torch.tanh)


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
        f = self.jax.jit(partial(tiny_chain, tanh=self.jnp.tanh))
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


class TfContender:
    """TensorFlow on the CPU: every step is one ``tf.function`` (graph mode, TensorFlow's
    grappler and its oneDNN/Eigen kernels), or with ``jit_compile=True`` one XLA cluster
    (``TfXlaContender``). TensorFlow is the system tfc re-builds, so these are its peers
    in kind: a graph built once and run many times.

    Threads: TensorFlow's intra-op pool (its kernels' Eigen/oneDNN threads, and XLA's on
    the CPU) and inter-op pool (independent ops run side by side) are both set to the
    bench's thread count before TensorFlow starts its runtime; they cannot change later.
    Steps run synchronously on the CPU (the eager context is not async), so a call returns
    once its outputs are computed; a training step also reads its loss back, as the other
    contenders' do."""

    name = "tf"
    jit_compile = False
    kernels = "none: TensorFlow's built-in Eigen and oneDNN kernels"

    def __init__(self, threads: int) -> None:
        import tensorflow as tf
        try:
            tf.config.set_visible_devices([], "GPU")  # the CPU, as BENCHMARKS.md asks
        except (RuntimeError, ValueError):  # no GPU build, or devices already initialized
            pass
        threading = tf.config.threading
        if threading.get_intra_op_parallelism_threads() != threads:  # raises once started
            threading.set_intra_op_parallelism_threads(threads)
        if threading.get_inter_op_parallelism_threads() != threads:
            threading.set_inter_op_parallelism_threads(threads)
        tf.get_logger().setLevel("ERROR")  # retracing notes: each row traces its own function
        self.tf = tf

    def version(self) -> str:
        mode = "tf.function(jit_compile=True), XLA" if self.jit_compile else "tf.function"
        return f"{self.tf.__version__} ({mode})"

    def _function(self, fn: Any) -> Any:
        return self.tf.function(fn, jit_compile=self.jit_compile)

    def warm_up_blas(self) -> None:
        a = self.tf.ones((64, 64))
        self.tf.linalg.matmul(a, a).numpy()

    def chain(self, x: np.ndarray) -> Step:
        tf = self.tf
        f = self._function(lambda v: tf.nn.gelu(v * 1.7 + 0.3, approximate=True))
        xt = tf.constant(x)
        return lambda: f(xt)

    def matmul(self, a: np.ndarray, b: np.ndarray) -> Step:
        f = self._function(self.tf.linalg.matmul)
        at, bt = self.tf.constant(a), self.tf.constant(b)
        return lambda: f(at, bt)

    def _xent(self, logits: Any, y: Any) -> Any:
        """Mean softmax cross-entropy of integer labels ``y`` (TensorFlow's fused op)."""
        tf = self.tf
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                            logits=logits))

    def _sgd_step(self, params: list[np.ndarray], lr: float, loss_fn: Any) -> Any:
        """``(x, y) -> loss`` as one ``tf.function``: forward, ``GradientTape`` backward and
        the SGD update of the variables in place (``assign_sub``)."""
        tf = self.tf
        variables = [tf.Variable(p) for p in params]

        def step(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = loss_fn(variables, x, y)
            for v, g in zip(variables, tape.gradient(loss, variables)):
                v.assign_sub(lr * g)
            return loss
        return self._function(step)

    def _trainer(self, fn: Any, x: np.ndarray, y: np.ndarray) -> Step:
        xt, yt = self.tf.constant(x), self.tf.constant(y)
        return lambda: float(fn(xt, yt))

    def _mlp_step_fn(self, params: list[np.ndarray]) -> Any:
        tf = self.tf

        def loss_fn(ps: list[Any], x: Any, y: Any) -> Any:
            h = x
            n = len(ps) // 2
            for i in range(n):
                h = tf.linalg.matmul(h, ps[2 * i]) + ps[2 * i + 1]
                if i < n - 1:
                    h = tf.nn.relu(h)
            return self._xent(h, y)
        return self._sgd_step(params, MLP_LR, loss_fn)

    def mlp(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        return self._trainer(self._mlp_step_fn(params), x, y)

    def cnn(self, params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> Step:
        tf = self.tf

        def loss_fn(ps: list[Any], x: Any, y: Any) -> Any:
            k, kb, w, b = ps  # TensorFlow's layouts are the benchmark's: NHWC, HWIO
            h = tf.nn.relu(tf.nn.conv2d(x, k, strides=1, padding="SAME") + kb)
            h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")
            return self._xent(tf.linalg.matmul(tf.reshape(h, [tf.shape(h)[0], -1]), w) + b, y)
        return self._trainer(self._sgd_step(params, CNN_LR, loss_fn), x, y)

    def tiny(self, x: np.ndarray) -> Step:
        tf = self.tf
        f = self._function(partial(tiny_chain, tanh=tf.tanh))
        xt = tf.constant(x)
        return lambda: f(xt)

    def compile_mlp(self, params: list[np.ndarray], x: np.ndarray,
                    y: np.ndarray) -> dict[str, Any]:
        """TensorFlow's first call of the training step's ``tf.function`` in a fresh
        process: trace, optimize the graph (and compile it with XLA for ``jit_compile``),
        run once (``import tensorflow`` and making the variables not counted)."""
        step = self._trainer(self._mlp_step_fn(params), x, y)
        t0 = time.perf_counter()
        step()
        return {"cold": time.perf_counter() - t0,
                "cold_how": f"first call of tf.function(train_step"
                            f"{', jit_compile=True' if self.jit_compile else ''}), "
                            f"import and variables excluded"}


class TfXlaContender(TfContender):
    """TensorFlow with ``tf.function(jit_compile=True)``: each step one XLA executable."""

    name = "tf-xla"
    jit_compile = True
    kernels = "none: XLA's CPU code and TensorFlow's built-in Eigen kernels"
