"""fp16 transfers: f32 tensors cross device boundaries as f16 (``--fp16-transfers``).

The TensorFlow paper's lossy compression of transfers, with IEEE half precision and
round-to-nearest where the paper truncates the low 16 bits of the f32 mantissa: the
sender casts to f16 before ``send``, the receiver casts back to f32 right after
``recv``. Half the bytes cross the link; values keep ~3 significant digits (relative
error <= 2^-11) and magnitudes beyond f16's range (65504) become inf.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from tfc.ir.core import Op
from tfc.ir.registry import make_op
from tfc.ir.types import DType
from tfc.passes.partition import Partition

SYMBOL_SIZE = 128  # what the batch symbol counts as in the bytes reported


@dataclass
class CompressReport:
    transfers: int           # send/recv pairs
    compressed: int          # of which now travel as f16
    bytes_before: int        # per step, symbols counted as SYMBOL_SIZE
    bytes_after: int

    def summary(self) -> str:
        saved = self.bytes_before - self.bytes_after
        pct = 100.0 * saved / self.bytes_before if self.bytes_before else 0.0
        return (f"fp16 transfers: {self.compressed} of {self.transfers} transfers compressed, "
                f"{self.bytes_before} -> {self.bytes_after} bytes per step at B={SYMBOL_SIZE} "
                f"({pct:.0f}% saved)")


def compress_transfers(parts: Mapping[str, Partition]) -> CompressReport:
    """Rewrite every f32 send/recv pair of ``parts`` to carry f16 (in place)."""
    recvs: dict[str, tuple[Partition, Op]] = {op.attrs["key"]: (p, op)
                                               for p in parts.values() for op in p.recvs}
    n = compressed = before = after = 0
    for p in parts.values():
        for send in list(p.sends):
            n += 1
            v = send.inputs[0]
            nbytes = v.type.nbytes(SYMBOL_SIZE)
            before += nbytes
            if v.dtype is not DType.f32:
                after += nbytes
                continue
            compressed += 1
            after += nbytes // 2
            ops = p.graph.ops
            cast = make_op("cast", [v], {"dtype": DType.f16}, device=send.device, loc=send.loc)
            ops.insert(ops.index(send), cast)
            send.inputs = [cast.result]
            dst, recv = recvs[send.attrs["key"]]
            attrs = dict(recv.attrs, dtype=DType.f16)
            narrow = make_op("recv", [], attrs, device=recv.device, loc=recv.loc)
            widen = make_op("cast", [narrow.result], {"dtype": DType.f32}, device=recv.device,
                            loc=recv.loc, names=[recv.result.name] if recv.result.name else ())
            i = dst.graph.ops.index(recv)
            dst.graph.ops[i:i + 1] = [narrow, widen]
            for op in dst.graph.ops:
                op.inputs = [widen.result if x is recv.result else x for x in op.inputs]
            dst.graph.results = [widen.result if x is recv.result else x
                                 for x in dst.graph.results]
    return CompressReport(n, compressed, before, after)
