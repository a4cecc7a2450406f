"""``tfc.gradients``: symbolic derivatives in the graph being built (TF1's tf.gradients)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from tfc.api.graph import Tensor, get_default_graph, user_location
from tfc.api.tensor import TensorLike, apply, convert_to_tensor
from tfc.errors import TfcError
from tfc.ir.autodiff import SparseGrad
from tfc.ir.autodiff import gradients as _gradients


@dataclass
class IndexedSlices:
    """A sparse gradient: ``values[i]`` is the gradient of row ``indices[i]`` of a tensor
    of shape ``dense_shape`` (rows not named are zero; repeated rows add up).

    ``owned`` (a 0/1 float per index, or None: all 1) marks the indices that name a row
    the step touched. It is 0 for the padding a static-shape sharded gather sends to a
    shard for an id another shard owns (``tfc.api.partitioned``): such an index points at
    some valid row with a zero value, and an optimizer whose sparse update changes only
    the touched rows (Momentum, RMSProp) must not count it as touching that row."""

    indices: Tensor
    values: Tensor
    dense: Tensor  # the tensor this is the gradient of
    owned: Tensor | None = None

    @property
    def dense_shape(self) -> tuple[int | None, ...]:
        return self.dense.shape

    def to_dense(self) -> Tensor:
        return apply("scatter_add", apply("zeros_like", self.dense), self.indices, self.values)


def _as_list(x: Any) -> list[Any]:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def gradients(ys: TensorLike | Sequence[TensorLike], xs: TensorLike | Sequence[TensorLike],
              grad_ys: TensorLike | Sequence[TensorLike | None] | None = None,
              colocate_gradients_with_ops: bool = False
              ) -> list[Tensor | IndexedSlices | None]:
    """d(sum(ys))/d(xs) (weighted by ``grad_ys``); None for an x the ys do not depend on.

    A variable's gradient is its value's (its read in the step). The gradient ops carry
    the location of the forward op they come from, and with
    ``colocate_gradients_with_ops`` its device too."""
    y_list = [convert_to_tensor(y) for y in _as_list(ys)]
    x_list = [convert_to_tensor(x) for x in _as_list(xs)]
    graph = y_list[0].graph if y_list else get_default_graph()
    if any(t.graph is not graph for t in (*y_list, *x_list)):
        raise TfcError("gradients: ys and xs must come from one graph", user_location())
    gy = None
    if grad_ys is not None:
        gy = [None if g is None else convert_to_tensor(g).value for g in _as_list(grad_ys)]
    try:
        grads = _gradients(graph.ir, [y.value for y in y_list], [x.value for x in x_list], gy,
                           colocate=colocate_gradients_with_ops, device=graph.current_device)
    except TfcError as e:
        raise e.at(user_location())
    out: list[Tensor | IndexedSlices | None] = []
    for g in grads:
        if g is None:
            out.append(None)
        elif isinstance(g, SparseGrad):
            from tfc.api.partitioned import owned_weights
            with graph.as_default():
                owned = (owned_weights(graph, g.indices, g.values.type.dtype)
                         if graph.owned_weights else None)
            out.append(IndexedSlices(Tensor(graph, g.indices), Tensor(graph, g.values),
                                     Tensor(graph, g.dense), owned))
        else:
            out.append(Tensor(graph, g))
    return out


def stop_gradient(x: TensorLike, name: str | None = None) -> Tensor:
    """``x``, through which no gradient flows."""
    return apply("stop_gradient", x, name=name)


