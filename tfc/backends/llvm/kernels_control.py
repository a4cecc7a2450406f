"""Control-flow region ops (``scan``, ``cond``, ``while``) compiled natively.

A control op becomes one *whole* kernel (never split across threads) whose body runs
its regions as code: each region graph is lowered op by op with the ordinary lowering
table into kernels of the same LLVM module, but those kernels are not called by the
entry: the control kernel calls them, in the region's schedule, from inside its own
loops / branches (``_Region``).

**Storage of region values.** One buffer per computed region value (no reuse: region
graphs are small; the memory plan of the entry does not see them), laid out in the
*scratch* area of the arena, which the control kernel receives as its ``scratch``
pointer. The control kernel's scratch layout, per binding:
``[region buffers][carry buffers A][carry buffers B][inner scratch]``; kernels inside
the region get ``scratch + area`` as *their* scratch, so nesting (a ``cond`` inside a
``scan``) composes: the inner scratch needs are collected while the region is lowered
and the control op asks for ``area + max(inner)``. Region arguments are not buffers: a
carry is a pointer to the current carry buffer, an ``xs`` slice a pointer offset into
the stacked input (a view), a constant operand the outer pointer itself. Constants
inside a region are constants of the entry (passed through the control kernel).

**Carries** are double-buffered: iteration ``t`` reads carry set ``cur`` and the body's
new carries are copied into the other set, then the roles swap; so a body returning its
carries permuted never reads a half-written carry. ``scan`` writes each ``ys`` result
into slice ``t`` of the stacked output. Symbolic lengths are run-time params (the
leading dim of the first ``xs``, like any dim), and every region value's concrete shape
comes from the binding (``tfc.backends.binding.infer_control``).
"""

from __future__ import annotations

from typing import Any, Callable

import llvmlite.ir as ir

from tfc.backends.llvm import irutil
from tfc.backends.llvm.context import Kernel, Storage
from tfc.backends.llvm.entry import INT64_MAX, Copy, GraphCompiler
from tfc.backends.llvm.kernels_expr import is_view
from tfc.backends.llvm.kernels_scalar import Unsupported
from tfc.backends.binding import Binding
from tfc.ir.core import Graph, Op, Value

ALIGN = 64
SCRATCH = Storage("scratch", 0)


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _nbytes(binding: Binding, v: Value) -> int:
    return binding.size(v) * v.dtype.itemsize


def _slice_bytes(v: Value) -> Callable[[Binding], int]:
    """The bytes of one slice of ``v`` along its first axis (a scan's step), per binding."""
    return lambda binding: _nbytes(binding, v) // max(1, binding.shape(v)[0])


# ---- regions as sub-schedules ----------------------------------------------------------------

class _Region:
    """One region graph lowered into kernels (not called by the entry): its schedule,
    the storage of its values and the scratch layout of its buffers."""

    def __init__(self, graph_compiler: GraphCompiler, op: Op, region: Graph, uid: str) -> None:
        from tfc.backends.llvm.kernels import lower
        self.graph, self.uid = region, uid
        sub = GraphCompiler(graph_compiler.module, region, None)
        sub.comp = graph_compiler.comp
        sub.constants, sub._const_index = graph_compiler.constants, graph_compiler._const_index
        st = graph_compiler.comp.storage
        self.buffers: list[Value] = []
        for i, a in enumerate(region.args):
            st[a] = Storage("rarg", (uid, i))
        for rop in region.ops:
            if rop.kind.startswith("var."):
                raise Unsupported(f"{op.kind}: {rop.kind} in a region")
            if rop.kind == "constant":
                st[rop.result] = graph_compiler.const_storage(rop.attrs["value"])
            elif is_view(rop.kind):
                st[rop.result] = st[rop.inputs[0]]
            else:
                for r in rop.results:
                    st[r] = Storage("region", (uid, len(self.buffers)))
                    self.buffers.append(r)
        for rop in region.ops:
            lower(sub, rop)
        self.steps = sub.steps
        self.sub = sub

    def outer_storages(self) -> list[Storage]:
        """Storages of the entry the region's kernels read (constants)."""
        out: list[Storage] = []
        for s in self.steps:
            for x in (s.storages if isinstance(s, Kernel) else [s.src, s.dst]):
                if x.kind not in ("rarg", "region", "scratch") and x not in out:
                    out.append(x)
        for v in self.graph.results:  # a result may be an entry constant itself
            x = self.sub.comp.storage[v]
            if x.kind not in ("rarg", "region", "scratch") and x not in out:
                out.append(x)
        return out


class _Control:
    """The control kernel of one op: its regions, scratch layout and code helpers."""

    def __init__(self, graph_compiler: GraphCompiler, op: Op, carries: list[Value]) -> None:
        self.graph_compiler, self.op = graph_compiler, op
        comp = graph_compiler.comp
        self.uid = comp.unique(op.kind)
        saved, comp.scratch = comp.scratch, []
        try:
            self.regions = [_Region(graph_compiler, op, r, f"{self.uid}.{k}")
                            for k, r in enumerate(op.regions)]
        finally:
            inner, comp.scratch = comp.scratch, saved
        self.carries = carries
        # the items of the area, in order: region buffers, carry set A, carry set B
        self.items: list[Value] = [v for r in self.regions for v in r.buffers]
        self.items += carries + carries
        items = self.items

        def layout(binding: Binding) -> list[int]:
            offs, total = [], 0
            for v in items:
                offs.append(total)
                total += _aligned(_nbytes(binding, v))
            return offs + [total]

        self.layout = layout
        comp.scratch.append(lambda binding: layout(binding)[-1] + max((f(binding) for f in inner),
                                                                      default=0))
        extra = [SCRATCH]
        for r in self.regions:
            extra += [s for s in r.outer_storages() if s not in extra]
        self.kernel = kernel = graph_compiler.kernel(op.kind, [*op.inputs, *op.results], extra)
        kernel.whole()
        b = kernel.b
        scr = kernel.storage_ptr(SCRATCH)
        self.params = kernel.fn.args[len(kernel.storages)]

        def at(k: int) -> ir.Value:
            off = kernel.param(("ctl", self.uid, k), lambda binding: layout(binding)[k])
            return b.gep(scr, [off], inbounds=True, source_etype=irutil.I8)

        nb = sum(len(r.buffers) for r in self.regions)
        self.buf_ptr: dict[Storage, ir.Value] = {}
        k = 0
        for r in self.regions:
            for j, _ in enumerate(r.buffers):
                self.buf_ptr[Storage("region", (r.uid, j))] = at(k)
                k += 1
        nc = len(carries)
        self.set_a = [at(nb + j) for j in range(nc)]
        self.set_b = [at(nb + nc + j) for j in range(nc)]
        self.inner_scratch = at(len(items))
        self.memcpy = irutil.intrinsic(graph_compiler.comp.module, "llvm.memcpy.p0.p0.i64",
                                       irutil.VOID,
                                       [irutil.PTR, irutil.PTR, irutil.I64, irutil.I1])
        self.exit = kernel.fn.append_basic_block("ctl.exit")

    def bytes(self, v: Value) -> ir.Value:
        return self.kernel.param(("bytes", id(v)),
                                 lambda binding: binding.size(v) * v.dtype.itemsize)

    def copy(self, dst: ir.Value, src: ir.Value, nbytes: ir.Value) -> None:
        self.kernel.b.call(self.memcpy, [dst, src, nbytes, ir.Constant(irutil.I1, 0)])

    def run(self, region: _Region, args: list[ir.Value]) -> Callable[[Value], ir.Value]:
        """Emit the region's schedule on ``args`` (one pointer per region argument);
        returns the pointer of a region value. A failing kernel ends the control
        kernel with its error code."""
        kernel, b = self.kernel, self.kernel.b

        def ptr(s: Storage) -> ir.Value:
            if s.kind == "rarg":
                assert s.index[0] == region.uid
                return args[s.index[1]]
            if s.kind == "region":
                return self.buf_ptr[s]
            if s == SCRATCH:
                return self.inner_scratch
            return kernel.storage_ptr(s)

        for step in region.steps:
            if isinstance(step, Copy):
                nb = b.load(b.gep(self.params, [irutil.i64(step.nbytes_slot)],
                                  source_etype=irutil.I64), typ=irutil.I64)
                self.copy(ptr(step.dst), ptr(step.src), nb)
                continue
            rc = b.call(step.fn, [*(ptr(s) for s in step.storages), self.params,
                                  irutil.i64(0), irutil.i64(INT64_MAX)])
            ok = kernel.fn.append_basic_block("ctl.ok")
            bad = kernel.fn.append_basic_block("ctl.fail")
            b.cbranch(b.icmp_signed("!=", rc, ir.Constant(irutil.I32, 0)), bad, ok)
            b.position_at_end(bad)
            b.store(rc, kernel.err)
            kernel.can_fail |= step.can_fail
            b.branch(self.exit)
            b.position_at_end(ok)
        st = self.graph_compiler.comp.storage
        return lambda v: ptr(st[v])

    def finish(self) -> None:
        b = self.kernel.b
        b.branch(self.exit)
        b.position_at_end(self.exit)
        self.kernel.finish()


def _counter(kernel: Kernel, name: str) -> ir.Value:
    """An i64 slot in the kernel's entry block, 0 at the start (mem2reg makes it a phi)."""
    slot = kernel.eb.alloca(irutil.I64, name=name)
    kernel.eb.store(irutil.i64(0), slot)
    return slot


# ---- scan ------------------------------------------------------------------------------------

def lower_scan(graph_compiler: GraphCompiler, op: Op) -> None:
    """``for t in range(n)`` (or reversed) over the body, carries double-buffered."""
    nc, nx = op.attrs["num_carry"], op.attrs["num_xs"]
    carry, xs, consts = (list(op.inputs[:nc]), list(op.inputs[nc:nc + nx]),
                         list(op.inputs[nc + nx:]))
    ctl = _Control(graph_compiler, op, carry)
    kernel, b = ctl.kernel, ctl.kernel.b
    body = ctl.regions[0]
    if xs:
        n = kernel.dim(xs[0], 0)
    elif op.attrs["length"] is not None:
        n = irutil.i64(op.attrs["length"])
    else:
        raise Unsupported("scan without xs or length")
    ys = list(op.results[nc:])
    x_step = [kernel.param(("slice_bytes", id(x)), _slice_bytes(x)) for x in xs]
    y_step = [kernel.param(("slice_bytes", id(y)), _slice_bytes(y)) for y in ys]
    for j, c in enumerate(carry):
        ctl.copy(ctl.set_a[j], kernel.ptr(c), ctl.bytes(c))
    i_slot = _counter(kernel, "t")
    head = kernel.fn.append_basic_block("scan.head")
    loop = kernel.fn.append_basic_block("scan.body")
    done = kernel.fn.append_basic_block("scan.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.load(i_slot, typ=irutil.I64)
    b.cbranch(b.icmp_signed("<", i, n), loop, done)
    b.position_at_end(loop)
    odd = b.trunc(i, irutil.I1)
    cur = [b.select(odd, bb, a) for a, bb in zip(ctl.set_a, ctl.set_b)]
    nxt = [b.select(odd, a, bb) for a, bb in zip(ctl.set_a, ctl.set_b)]
    t = b.sub(b.sub(n, irutil.i64(1)), i) if op.attrs["reverse"] else i
    xp = [b.gep(kernel.ptr(x), [b.mul(t, s)], inbounds=True, source_etype=irutil.I8)
          for x, s in zip(xs, x_step)]
    ptr_of = ctl.run(body, [*cur, *xp, *(kernel.ptr(c) for c in consts)])
    res = body.graph.results
    for j in range(nc):
        ctl.copy(nxt[j], ptr_of(res[j]), ctl.bytes(carry[j]))
    for k, (y, s) in enumerate(zip(ys, y_step)):
        dst = b.gep(kernel.ptr(y), [b.mul(t, s)], inbounds=True, source_etype=irutil.I8)
        ctl.copy(dst, ptr_of(res[nc + k]), s)
    b.store(b.add(i, irutil.i64(1)), i_slot)
    b.branch(head)
    b.position_at_end(done)
    odd = b.trunc(n, irutil.I1)  # after n steps the carry is in set B when n is odd
    for j, c in enumerate(carry):
        src = b.select(odd, ctl.set_b[j], ctl.set_a[j])
        ctl.copy(kernel.ptr(op.results[j]), src, ctl.bytes(c))
    ctl.finish()


# ---- cond ------------------------------------------------------------------------------------

def lower_cond(graph_compiler: GraphCompiler, op: Op) -> None:
    """Run the ``then`` or the ``else`` region and copy its results out."""
    pred, args = op.inputs[0], list(op.inputs[1:])
    ctl = _Control(graph_compiler, op, [])
    kernel, b = ctl.kernel, ctl.kernel.b
    p = b.load(kernel.ptr(pred), typ=ir.IntType(8))
    arg_ptrs = [kernel.ptr(a) for a in args]
    join = kernel.fn.append_basic_block("cond.join")
    blocks = [kernel.fn.append_basic_block(n) for n in ("cond.then", "cond.else")]
    b.cbranch(b.icmp_unsigned("!=", p, ir.Constant(ir.IntType(8), 0)), *blocks)
    for region, blk in zip(ctl.regions, blocks):
        b.position_at_end(blk)
        ptr_of = ctl.run(region, arg_ptrs)
        for r, v in zip(op.results, region.graph.results):
            ctl.copy(kernel.ptr(r), ptr_of(v), ctl.bytes(r))
        b.branch(join)
    b.position_at_end(join)
    ctl.finish()


# ---- while -----------------------------------------------------------------------------------

def lower_while(graph_compiler: GraphCompiler, op: Op) -> None:
    """``while cond(v): v = body(v)``, the loop vars double-buffered; more than
    ``max_iterations`` iterations is an error code."""
    vs = list(op.inputs)
    ctl = _Control(graph_compiler, op, vs)
    kernel, b = ctl.kernel, ctl.kernel.b
    creg, breg = ctl.regions
    limit = op.attrs.get("max_iterations")
    code = kernel.comp.error(f"while: the loop ran more than max_iterations={limit} iterations")
    for j, v in enumerate(vs):
        ctl.copy(ctl.set_a[j], kernel.ptr(v), ctl.bytes(v))
    i_slot = _counter(kernel, "it")
    head = kernel.fn.append_basic_block("while.head")
    loop = kernel.fn.append_basic_block("while.body")
    done = kernel.fn.append_basic_block("while.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.load(i_slot, typ=irutil.I64)
    odd = b.trunc(i, irutil.I1)
    cur = [b.select(odd, bb, a) for a, bb in zip(ctl.set_a, ctl.set_b)]
    nxt = [b.select(odd, a, bb) for a, bb in zip(ctl.set_a, ctl.set_b)]
    ptr_of = ctl.run(creg, cur)
    p = b.load(ptr_of(creg.graph.results[0]), typ=ir.IntType(8))
    go = b.icmp_unsigned("!=", p, ir.Constant(ir.IntType(8), 0))
    check = kernel.fn.append_basic_block("while.check")
    b.cbranch(go, check, done)
    b.position_at_end(check)
    if limit is not None:
        over = kernel.fn.append_basic_block("while.over")
        b.cbranch(b.icmp_signed(">=", i, irutil.i64(int(limit))), over, loop)
        b.position_at_end(over)
        b.store(ir.Constant(irutil.I32, code), kernel.err)
        kernel.can_fail = True
        b.branch(ctl.exit)
    else:
        b.branch(loop)
    b.position_at_end(loop)
    ptr_of = ctl.run(breg, cur)
    for j, v in enumerate(vs):
        ctl.copy(nxt[j], ptr_of(breg.graph.results[j]), ctl.bytes(v))
    b.store(b.add(i, irutil.i64(1)), i_slot)
    b.branch(head)
    b.position_at_end(done)
    for j, v in enumerate(vs):
        ctl.copy(kernel.ptr(op.results[j]), cur[j], ctl.bytes(v))
    ctl.finish()


LOWERINGS: dict[str, Any] = {"scan": lower_scan, "cond": lower_cond, "while": lower_while}
