"""In-graph data parallelism: N replicas of a training step in one graph (TF1's towers).

    loss, train_op = tfc.train.data_parallel(
        lambda x, y: model_loss(x, y), [x, y], tfc.train.GradientDescentOptimizer(0.1),
        devices=["/cpu:0", "/cpu:1"], mode="allreduce")

The batch of every input is split into one equal shard per replica (a batch that does
not divide is a run-time error naming the split). ``loss_fn`` runs once per replica
under that replica's ``device`` scope; the variables it uses (created before, or by
its first call, as Keras layers do) are the model's.

- ``mode="allreduce"``: each replica gets a mirrored copy of every variable (same
  initial value, on its device, named ``NAME/replica_I``); each computes gradients on
  its shard; an ``all_reduce`` op averages them so every replica holds the same mean
  gradient (bitwise: the ring lowering sums each chunk once and copies it); each applies
  it to its copy, so the copies stay equal. Replica 0's copies are the original variables.
- ``mode="ps"``: the variables live on ``ps_device`` (the parameter server); replicas
  read them there, send their gradients back, and the server averages and applies them.

Both are synchronous: the mean of the shard gradients is the full batch's gradient, so
training matches a single device to float rounding. The returned loss is the mean of the
replicas' losses (the full batch's mean loss).
"""

from __future__ import annotations

from typing import Callable, Sequence

from tfc.api.gradients import IndexedSlices, gradients
from tfc.api.graph import Operation, Tensor, Variable, get_default_graph, user_location
from tfc.api.ops import add_n, split
from tfc.api.session import group
from tfc.api.tensor import TensorLike, apply, convert_to_tensor
from tfc.devices import parse_devices
from tfc.errors import TfcError
from tfc.train.optimizers import Optimizer

MODES = ("allreduce", "ps")


def _dense(g: Tensor | IndexedSlices | None) -> Tensor | None:
    return g.to_dense() if isinstance(g, IndexedSlices) else g


def data_parallel(loss_fn: Callable[..., TensorLike], inputs: Sequence[TensorLike],
                  optimizer: Optimizer, devices: Sequence[str], mode: str = "allreduce",
                  ps_device: str | None = None, global_step: Variable | None = None
                  ) -> tuple[Tensor, Operation]:
    """Replicate ``loss_fn`` over ``devices`` (see the module docstring); returns the mean
    loss and the one operation that trains every replica for a step."""
    loc = user_location()
    if mode not in MODES:
        raise TfcError(f"data_parallel: mode must be one of {', '.join(MODES)}, got {mode!r}",
                       loc)
    devices = parse_devices(devices)
    g = get_default_graph()
    n = len(devices)
    tensors = [convert_to_tensor(x) for x in inputs]
    shards = [split(x, n, axis=0) if n > 1 else [x] for x in tensors]
    model_vars: list[Variable] = []

    losses: list[Tensor] = []
    replica_vars: list[list[Variable]] = []
    grads: list[list[Tensor | None]] = []
    for i, device in enumerate(devices):
        mirrors = ([_mirror(g, v, device, i) for v in model_vars]
                   if i > 0 and mode == "allreduce" else None)
        start = len(g.ir.ops)  # what loss_fn adds from here is replica i's
        with g.device(device), g.name_scope(f"replica_{i}"):
            loss = convert_to_tensor(loss_fn(*[s[i] for s in shards]))
        if i == 0:
            model_vars = [v for v in g.variables.values()  # in creation order
                          if v.trainable and _reads(g, v, start)]
            if not model_vars:
                raise TfcError("data_parallel: loss_fn uses no trainable variable", loc)
            if mode == "ps":
                ps = parse_devices([ps_device or devices[0]])[0]
                for v in model_vars:  # the variable and its read live on the server
                    v.decl.device = ps
                    read = v._read.value.op
                    assert read is not None  # a variable's read is an op (not a feed)
                    read.device = ps
            variables = model_vars
        elif mirrors is not None:  # replica i reads its own copies
            subst = {v._read.value: c._read.value for v, c in zip(model_vars, mirrors)}
            for op in g.ir.ops[start:]:
                op.inputs = [subst.get(x, x) for x in op.inputs]
            variables = mirrors
        else:
            variables = model_vars
        with g.device(device), g.name_scope(f"replica_{i}/gradients"):
            grads.append([_dense(x) for x in gradients(loss, variables)])
        losses.append(loss)
        replica_vars.append(variables)

    with g.device(devices[0]):
        mean_loss = add_n(losses) * (1.0 / n) if n > 1 else losses[0]
    pairs: list[tuple[Tensor | None, Variable]] = []
    for j, v in enumerate(model_vars):
        per_replica = [grads[i][j] for i in range(n)]
        if any(x is None for x in per_replica):
            continue  # the loss does not depend on v
        if mode == "allreduce":
            reduced = (list(apply("all_reduce", *per_replica, reduction="mean")) if n > 1
                       else per_replica)
            pairs += [(r, replica_vars[i][j]) for i, r in enumerate(reduced)]
        else:
            with g.device(v.decl.device):
                pairs.append((add_n(per_replica) * (1.0 / n) if n > 1 else per_replica[0], v))
    train = optimizer.apply_gradients(pairs, global_step=global_step)
    return mean_loss, group(train)


def _reads(g, v: Variable, start: int) -> bool:
    """Whether an op made since op ``start`` uses ``v``'s value."""
    read = v._read.value
    return any(read in op.inputs for op in g.ir.ops[start:])


def _mirror(g, v: Variable, device: str, i: int) -> Variable:
    """Replica ``i``'s copy of ``v``: the same initial value, on ``device``."""
    with g.device(device), g.name_scope("/"):
        return Variable(v.initial_value, trainable=True, name=f"{v.name}/replica_{i}")
