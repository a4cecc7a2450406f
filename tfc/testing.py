"""Helpers for tests: run one op, or a small graph, through the reference backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tfc.ir.builder import Builder
from tfc.ir.core import Graph, Module, Op
from tfc.ir.interpret import ExecContext, run_graph
from tfc.ir.registry import infer_types
from tfc.ir.types import DType, TensorType

if TYPE_CHECKING:
    from tfc.devices import DeviceProfile


def type_of(x: np.ndarray) -> TensorType:
    return TensorType(DType.from_numpy(x.dtype), x.shape)


def infer_op(kind: str, *types: TensorType, **attrs: Any) -> list[TensorType]:
    """Result types of op ``kind`` on inputs of ``types`` (symbolic dims allowed), through
    the same checks as building it; ops whose types are declared (``var.read``) have none."""
    _, _, out = infer_types(kind, types, attrs)
    if out is None:
        raise TypeError(f"{kind}: result types are declared by the builder, not inferred")
    return out


def infer_op1(kind: str, *types: TensorType, **attrs: Any) -> TensorType:
    (out,) = infer_op(kind, *types, **attrs)
    return out


def build_op(kind: str, *arrays: np.ndarray, **attrs: Any) -> tuple[Graph, Op]:
    """A graph whose arguments are typed like ``arrays`` and that applies one op."""
    g = Graph("test")
    args = [g.add_arg(type_of(np.asarray(a)), f"a{i}") for i, a in enumerate(arrays)]
    op = Builder(g).op(kind, *args, **attrs)
    g.set_results(op.results)
    return g, op


def run_op(kind: str, *arrays: np.ndarray, step: int = 0, **attrs: Any) -> list[np.ndarray]:
    """Results of one op on ``arrays`` through the reference interpreter (types checked)."""
    g, _ = build_op(kind, *arrays, **attrs)
    return run_graph(g, [np.asarray(a) for a in arrays], ExecContext({}, step))


def run_op1(kind: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    (out,) = run_op(kind, *arrays, **attrs)
    return out


def _scalar_loss(b: Builder, values: list, rng: np.random.Generator) -> Any:
    """sum_i sum(values_i * c_i) with fixed random cotangents c_i: a scalar whose gradient
    exercises every element of every result."""
    loss = None
    for v in values:
        c = rng.uniform(0.5, 1.5, size=[int(d) for d in v.type.shape]).astype(v.dtype.np)
        term = b("sum", b("mul", v, b("constant", value=c)))
        loss = term if loss is None else b("add", loss, term)
    return loss


Loss = Callable[[Builder, list], Any]


def check_graph_gradients(build: Callable[..., Any], *arrays: np.ndarray,
                          types: Sequence[TensorType] | None = None, order: int = 1,
                          loss: Loss | None = None, eps: float = 1e-6, rtol: float = 1e-6,
                          atol: float = 1e-8, seed: int = 0, what: str = "graph") -> None:
    """Assert that the gradients (of order 1 or 2) of a graph built by
    ``build(b, *args) -> Value | list[Value]`` match central finite differences at
    ``arrays``, w.r.t. every float argument (float64 inputs for tight tolerances); the
    gradient graph must also pass the verifier.

    The float results are reduced to a scalar by ``loss(b, values)`` (default: a sum
    weighted with fixed random cotangents); order 2 differentiates ``loss`` of the first
    gradients once more. ``types`` are the graph's argument types (symbolic dims
    allowed; default: those of ``arrays``).
    """
    from tfc.ir.autodiff import GradBuilder, gradients
    from tfc.ir.verifier import verify_graph
    arrays = tuple(np.asarray(a) for a in arrays)
    rng = np.random.default_rng(seed)
    reduce = loss or (lambda b, values: _scalar_loss(b, values, rng))
    g = Graph("check")
    types = list(types) if types is not None else [type_of(a) for a in arrays]
    args = [g.add_arg(t, f"a{i}") for i, t in enumerate(types)]
    b = Builder(g)
    out = build(b, *args)
    out = out if isinstance(out, (list, tuple)) else [out]
    scalar = reduce(b, [v for v in out if v.dtype.is_float])
    wrt = [a for a in args if a.dtype.is_float]
    for _ in range(order - 1):
        grads = [gr for gr in gradients(g, [scalar], wrt) if gr is not None]
        scalar = reduce(b, [GradBuilder(g, None).dense(gr) for gr in grads])
    dense = [None if gr is None else GradBuilder(g, None).dense(gr)
             for gr in gradients(g, [scalar], wrt)]
    g.set_results([scalar] + [d for d in dense if d is not None])
    verify_graph(g)

    def f(vals: list[np.ndarray]) -> list[np.ndarray]:
        return run_graph(g, vals, ExecContext({}, 0))

    base = list(arrays)
    it = iter(f(base)[1:])
    for arg, d in zip(wrt, dense):
        i = arg.index
        got = np.zeros(arrays[i].shape) if d is None else next(it)
        want = np.zeros(arrays[i].shape, dtype=np.float64)
        for idx in np.ndindex(*arrays[i].shape):
            vals = [a.copy() for a in base]
            vals[i][idx] += eps
            up = float(f(vals)[0])
            vals[i][idx] -= 2 * eps
            want[idx] = (up - float(f(vals)[0])) / (2 * eps)
        np.testing.assert_allclose(
            got, want, rtol=rtol, atol=atol,
            err_msg=f"order-{order} gradient of {what} w.r.t. input {i} {arg.type}")


def check_gradients(kind: str, *arrays: np.ndarray, order: int = 1, eps: float = 1e-6,
                    rtol: float = 1e-6, atol: float = 1e-8, seed: int = 0,
                    **attrs: Any) -> None:
    """Assert that op ``kind``'s gradients (of order 1 or 2) match central finite
    differences at ``arrays`` (float inputs should be float64 for tight tolerances).

    The op's float results are reduced to a scalar with random cotangents; order 2
    differentiates the (cotangent-weighted) gradient once more.
    """
    check_graph_gradients(lambda b, *args: b.op(kind, *args, **attrs).results, *arrays,
                          order=order, eps=eps, rtol=rtol, atol=atol, seed=seed, what=kind)


def split_mlp_module(devices: Sequence[str | None], sizes: Sequence[int] = (6, 8, 8, 3),
                     seed: int = 0, lr: float = 0.05, dropout: bool = False,
                     stddev: float | None = 0.5) -> Any:
    """An MLP training module whose layer ``i`` (its variables and ops) is pinned to
    ``devices[i % len(devices)]`` (None: unpinned): the model-parallel test model, and with
    ``sizes=(256,) * 65`` the 64-layer chain of issue #16. Weights are normal with
    ``stddev`` (None: He's ``sqrt(2 / fan_in)``, which keeps a deep chain finite).

    Entries: ``train`` (feeds ``x: f32[B, sizes[0]]``, ``y: i32[B]``; fetch ``loss``; SGD
    step) and ``predict`` (fetch ``logits``)."""
    import tfc
    rng = np.random.default_rng(seed)
    with tfc.Graph().as_default() as g:
        x = tfc.placeholder(tfc.float32, [None, sizes[0]], name="x")
        y = tfc.placeholder(tfc.int32, [None], name="y")
        h = x
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            with g.device(devices[i % len(devices)]):
                std = np.sqrt(2.0 / a) if stddev is None else stddev
                w = tfc.Variable(rng.normal(0, std, (a, b)).astype(np.float32), name=f"w{i}")
                bias = tfc.Variable(np.zeros(b, np.float32), name=f"b{i}")
                h = tfc.matmul(h, w) + bias
                if i < len(sizes) - 2:
                    h = tfc.nn.relu(h)
                    if dropout:
                        h = tfc.nn.dropout(h, rate=0.25, seed=i)
        loss = tfc.reduce_mean(tfc.nn.sparse_softmax_cross_entropy_with_logits(
            labels=y, logits=h))
        train = tfc.train.GradientDescentOptimizer(lr).minimize(loss)
        tfc.entry("train", feeds={"x": x, "y": y}, fetches={"loss": loss}, targets=[train])
        tfc.entry("predict", feeds={"x": x}, fetches={"logits": h})
    return g.as_module()


# ---- ulp errors against exact values --------------------------------------------------------

EXACT_MATH: dict[str, Callable[..., np.ndarray]] = {
    "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1, "tanh": np.tanh,
    "sin": np.sin, "cos": np.cos, "pow": np.power,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "softplus": lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
}


# erf and erfc in x87 extended precision (numpy has none; tfc's tests use no mpmath).
_2_SQRTPI = np.longdouble("1.1283791670955125738961589031215452")
_1_SQRTPI = np.longdouble("0.56418958354775628694807945156077259")


def _exp_minus_square(a: np.ndarray) -> np.ndarray:
    """e^(-a^2) for float64 a >= 0, a^2 split exactly: a = h + l with a 26-bit h (h^2,
    2hl and l^2 are exact in a 64-bit significand)."""
    h = (a.view(np.uint64) & np.uint64(0xFFFFFFFFF8000000)).view(np.float64)
    hl, ll = h.astype(np.longdouble), (a - h).astype(np.longdouble)
    return np.exp(-hl * hl) * np.exp(-(2 * hl * ll + ll * ll))


def _erf_series(a: np.ndarray) -> np.ndarray:
    """erf(a) = 2/sqrt(pi) e^(-a^2) sum 2^n a^(2n+1) / (2n+1)!!: positive terms (no
    cancellation); 120 terms reach 2^-62 relative for a < 2."""
    al: np.ndarray = a.astype(np.longdouble)
    t, s, a2 = al.copy(), al.copy(), 2 * al * al
    for n in range(1, 120):
        t = t * a2 / (2 * n + 1)
        s = s + t
    return s * _exp_minus_square(a) * _2_SQRTPI


def _erfc_fraction(a: np.ndarray) -> np.ndarray:
    """erfc(a) for a >= 0.8: Laplace's continued fraction e^(-a^2)/sqrt(pi) / (a + (1/2) /
    (a + 1 / (a + (3/2) / ...))), 400 terms evaluated backwards (2^-62 relative at 0.8)."""
    al = a.astype(np.longdouble)
    f = np.zeros_like(al)
    for k in range(400, 0, -1):
        f = (k / np.longdouble(2)) / (al + f)
    return _exp_minus_square(a) * _1_SQRTPI / (al + f)


def exact_erf(x: np.ndarray, complement: bool = False) -> np.ndarray:
    """erf(x) or erfc(x) to about 2^-61 relative (checked against mpmath at 100 bits while
    writing it): the series below 2 (erfc: below 0.8, as 1 - erf), the continued fraction
    above (erf: 1 - erfc), odd symmetry; +-inf, NaN and |x| >= 40 exact."""
    x = np.asarray(x).astype(np.float64)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        fin = np.isfinite(a) & (a < 40)
        low = fin & (a < (0.8 if complement else 2.0))
        high = fin & ~low
        erf_a = np.ones(a.shape, np.longdouble)  # erf(|x|)
        erfc_a = np.zeros(a.shape, np.longdouble)
        erf_a[low] = _erf_series(a[low])
        erfc_a[low] = 1 - erf_a[low]
        erfc_a[high] = _erfc_fraction(a[high])
        erf_a[high] = 1 - erfc_a[high]
        if complement:
            out = np.where(x < 0, 1 + erf_a, erfc_a)
        else:
            out = np.where(x < 0, -erf_a, erf_a)
            out = np.where(x == 0, x.astype(np.longdouble), out)  # erf(-0.0) = -0.0
    return np.where(np.isnan(x), np.longdouble(np.nan), out)


EXACT_MATH.update({
    "tan": np.tan, "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos,
    "atan2": np.arctan2, "erf": exact_erf, "erfc": lambda x: exact_erf(x, complement=True),
})


def edge_values(dt: DType, seed: int, n: int) -> np.ndarray:
    """``n`` values of ``dt`` for differential tests of element-wise kernels: the edge
    cases first (signed zeros, inf, NaN, extremes, subnormals, integer limits), then
    random ones over the whole range (raw bit patterns) and at common magnitudes."""
    rng = np.random.default_rng(seed)
    if dt is DType.bool:
        return rng.integers(0, 2, n).astype(bool)
    if dt.is_int:
        info = np.iinfo(dt.np)
        edge = [0, 1, -1, 2, -2, 7, -7, info.min, info.max, info.min + 1, info.max - 1]
        rest = np.concatenate([rng.integers(info.min, info.max, n // 2, endpoint=True),
                               rng.integers(-100, 100, n)])
        return np.concatenate([edge, rest])[:n].astype(dt.np)
    fi = np.finfo(dt.np)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0,
                fi.max, -fi.max, fi.tiny, fi.smallest_subnormal, -fi.smallest_subnormal]
    it: Any = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
    bits = rng.integers(0, np.iinfo(it).max, n // 4, dtype=it, endpoint=True).view(dt.np)
    parts = [np.array(specials, dt.np), bits]
    for a in (rng.normal(0, 3, n // 2), rng.uniform(-40, 40, n // 4),
              rng.integers(-20, 20, n // 8), rng.exponential(1e-3, n // 8)):
        parts.append(a.astype(dt.np))
    return np.concatenate(parts)[:n]


def same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit-exact up to NaN payloads: equal values, NaN where NaN, same zero signs."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if got.dtype.kind != "f":
        return bool(np.array_equal(got, want))
    zero = want == 0
    return bool(np.array_equal(got, want, equal_nan=True)
                and np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])))


def exact_math(fn: str, *xs: np.ndarray) -> np.ndarray:
    """``fn(*xs)`` in x87 extended precision (``np.longdouble``, a 64-bit significand):
    glibc's scalar ``expl``/``logl``/``sinl`` ..., a few units of 2^-64 from the true value
    and the same on every x86-64 host. numpy's float32/float64 loops are no oracle for ulp
    tests: they dispatch to SIMD code (AVX2, AVX-512) whose results differ between hosts by
    an ulp or more (and their float16 loops, which compute in float32, then round to
    different halves)."""
    if np.finfo(np.longdouble).nmant < 63:
        raise RuntimeError("exact_math needs an 80-bit long double (x86-64)")
    with np.errstate(all="ignore"):
        return EXACT_MATH[fn](*(np.asarray(x).astype(np.longdouble) for x in xs))


def ulp_errors(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """``|got - exact|`` in ulps of ``got``'s dtype (the spacing at ``exact`` rounded to
    it), element by element, as float64: at most 0.5 where ``got`` is correctly rounded,
    0.5 + a little where it is ``exact`` rounded twice (to float32, then to float16).
    0 where both are NaN or the same infinity (an overflow); inf where they are of
    different classes (NaN or inf against a finite value)."""
    d = got.dtype
    with np.errstate(all="ignore"):
        # (numpy casts long double to half through float: round through double instead)
        want = exact.astype(np.float64).astype(d)
        same = (np.isinf(want) & (got == want)) | (np.isnan(got) & np.isnan(want))
        err = np.abs(got.astype(np.longdouble) - exact) / \
            np.spacing(np.abs(want)).astype(np.longdouble)
    err = np.where(same, 0.0, err.astype(np.float64))
    mismatch = (np.isnan(got) != np.isnan(want)) | (np.isinf(got) != np.isinf(want))
    return np.where(mismatch | np.isnan(err), np.inf, err)


def compile_lowered(backend: Any, module: Module, entry: str) -> Any:
    """``backend.compile`` of ``entry`` of a module that was not lowered: a copy of the
    entry lowered for the backend first (``tfc.pipeline.lower_entry``, as a ``Program``
    does on first use); ``module`` is unchanged. Backends run no passes themselves."""
    from tfc.pipeline import lower_entry
    return backend.compile(lower_entry(module, entry, backend.name), entry)


def splitting_profile() -> DeviceProfile:
    """A device profile under which placement splits a model over ``/cpu:0`` and
    ``/cpu:1``: two unlike devices, ``/cpu:1`` 100x faster at GEMM-like ops and ``/cpu:0``
    100x faster at the rest, with hand-offs and an executor that cost nothing, so the
    matmuls go to one and the element-wise work to the other. For tests of what a split
    runs (transfers, compression, partition tables), now that the calibrated or default
    model keeps small models on one device."""
    from tfc.devices import DeviceProfile, DeviceRates
    return DeviceProfile({"/cpu:0": DeviceRates.flat(1e9, 1e11, 1e-9),
                          "/cpu:1": DeviceRates.flat(1e11, 1e9, 1e-9)},
                         source="test: splitting", cores=2, step_s=0.0, executor_step_s=0.0,
                         stage_s=0.0, handoff_s=1e-9, transfer_s=0.0)


class StandInCudaBackend:
    """The reference interpreter under the name ``cuda``, with the CUDA backend's
    lowering passes: what the executor, ``Program``, the pipeline and the CLI do with a
    GPU (which backend each device's part compiles on, how a cpu/gpu edge is handed over)
    tested on any machine. ``compiled`` lists the graphs it compiled, in order.
    ``use_stand_in_cuda`` installs it."""

    name = "cuda"
    pipeline = "fusion,memory"
    compiled: list[str] = []

    def __init__(self) -> None:
        from tfc.backends.reference import ReferenceBackend
        self._inner = ReferenceBackend()

    def compile(self, module: Module, entry: Any) -> Any:
        StandInCudaBackend.compiled.append(entry if isinstance(entry, str) else entry.name)
        exe = self._inner.compile(module, entry)
        exe.ran_on = "cuda"  # type: ignore[attr-defined]  # a mark for the tests
        return exe

    def export(self, executable: Any) -> dict[str, bytes]:
        return {}

    def load(self, module: Module, entry: str, members: Any) -> Any:
        return self.compile(module, entry)


def use_stand_in_cuda(monkeypatch: Any) -> type[StandInCudaBackend]:
    """Make ``cuda`` the stand-in backend, with a CUDA compiler said to be there, for the
    rest of the test (``monkeypatch``: pytest's fixture)."""
    from tfc.backends import base
    monkeypatch.setitem(base.BACKENDS, "cuda", "tfc.testing:StandInCudaBackend")
    monkeypatch.setattr("tfc.pipeline.cuda_compile_unavailable", lambda: None)
    StandInCudaBackend.compiled = []
    return StandInCudaBackend
