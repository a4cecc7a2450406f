"""TF1 optimizers built from graph ops: ``minimize`` = ``tfc.gradients`` + assigns.

An optimizer adds no new kernels: each update (``ApplyAdam``, ``ApplyMomentum`` ...) is
written with ordinary ops on the variables' start-of-step values and ends in exactly one
assign per variable (and per slot), because tfc's variables take one assign per step that
lands at the step's end. The formulas are those of TensorFlow 1's training kernels
(``tensorflow/core/kernels/training_ops.cc``), written in the same algebraic form so
float64 results agree to rounding.

Slots (``W/Momentum``, ``W/Adam``, ``W/Adam_1`` ...) are non-trainable variables created
in the primary variable's device scope the first time gradients are applied to it.

Sparse gradients (``tfc.IndexedSlices``, from ``tfc.gather`` of a variable) follow
TF1's sparse kernels: gradient descent, Momentum, AdaGrad and RMSProp update only the
rows the gradient names, and those rows' slots (``var.scatter_add``/``scatter_sub`` of
the touched rows: the rest of the table is neither read nor written); Adam densifies,
because TF1's ``AdamOptimizer._apply_sparse`` decays m and v in every row. Repeated
indices are summed first, as TF1's ``_deduplicate_indexed_slices`` (``unique_rows``).

``apply_gradients`` passes each gradient through an ``optimizer.grad {var}`` marker (an
identity, ``tfc.ops.optimizer``) so that the ``replicate`` pass can tell the gradients
from the rest of the step; lowering removes the markers, so they cost nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tfc.api import ops
from tfc.api.gradients import IndexedSlices, gradients
from tfc.api.graph import Graph, Operation, Tensor, Variable, get_default_graph, user_location
from tfc.api.partitioned import expand_partitioned, variable_partitioner
from tfc.api.session import group
from tfc.api.tensor import TensorLike, apply, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch
from tfc.ir.types import TensorType, shapes_compatible
from tfc.ops.optimizer import GRAD_MARKER

Grad = Tensor | IndexedSlices


def scatter_update(var: Variable, kind: str, indices: TensorLike, updates: TensorLike
                   ) -> Operation:
    """``var.scatter_add`` / ``var.scatter_sub`` of ``updates`` at rows ``indices`` of
    ``var`` (TF1's ``tf.scatter_add(ref, indices, updates)``), on the variable's device."""
    g, loc = var.graph, user_location()
    with g.as_default():
        idx = convert_to_tensor(indices)
        upd = convert_to_tensor(updates, None if isinstance(updates, (Tensor, Variable))
                                else var.dtype)
    want = (*idx.type.shape, *var.type.shape[1:])
    if var.type.rank == 0 or upd.dtype != var.dtype or not shapes_compatible(
            upd.type.shape, want):
        raise TypeMismatch(f"{kind}: updates {upd.type} are not rows of variable "
                           f"'{var.name}' {var.type} at indices {idx.type} (expected "
                           f"{TensorType(var.dtype, want)})", loc)
    op = g.create_op(kind, [idx, upd], {"var": var.name}, loc=loc, device=var.device)
    return Operation(g, op, name=f"{var.name}/{kind.split('.')[1]}")


@dataclass
class UniqueRows:
    """A sparse gradient with its repeated indices summed, as TF1 does before every
    sparse update (``Optimizer._apply_sparse_duplicate_indices``: ``unique`` +
    ``unsorted_segment_sum``), kept in place because tfc's shapes are static: position
    ``i`` keeps ``indices[i]``; ``grad[i]`` is the sum of the values of every owned
    position naming that row; ``share[i]`` is ``owned[i] / (owned positions naming that
    row)``, so a scatter of ``share * x`` adds ``x`` once to each touched row (and
    nothing for padding), up to the rounding of that division.

    Each position finds its row's first owned position with ``first_occurrence`` (a
    hash table on llvm, a sort on the reference): O(n) or O(n log n) per step for the
    step's n indices, plus O(n * row) for the sums, independent of the variable's size.
    (The n x n comparison it replaces cost 320 ms a step at n = 4,096.)"""

    indices: Tensor  # [n]
    grad: Tensor     # [n, *row]
    share: Tensor    # [n, 1, ...]: broadcasts over a row


def unique_rows(grad: IndexedSlices, var: Variable) -> UniqueRows:
    """``grad``'s rows summed per index (see ``UniqueRows``), for ``var``'s rows.

    Each position finds the first owned position naming the same row
    (``first_occurrence``; 0 where none is owned); the values and owned counts are
    added up at those first positions in an n-row buffer (``scatter_add``) and read back
    by every position of the row (``gather``)."""
    row = list(var.shape[1:])
    idx = ops.reshape(grad.indices, [-1])
    values = ops.reshape(grad.values, [-1, *row])
    owned = ops.ones_like(ops.cast(idx, var.dtype)) if grad.owned is None else ops.reshape(
        grad.owned, [-1])
    first = apply("first_occurrence", idx, owned)  # the row's first owned position
    summed = ops.gather(apply("scatter_add", ops.zeros_like(values), first, values), first)
    count = ops.gather(apply("scatter_add", ops.zeros_like(owned), first, owned), first)
    share = owned / ops.maximum(count, 1.0)
    return UniqueRows(idx, summed, ops.reshape(share, [-1, *([1] * len(row))]))


def mark_gradient(grad: Grad, var: Variable) -> Grad:
    """``grad`` through an ``optimizer.grad {var}`` marker (``tfc.ops.optimizer``): the
    identity that tells the ``replicate`` pass which value is the gradient applied to
    ``var`` (a sparse gradient's indices and values pass through one marker together)."""
    if isinstance(grad, IndexedSlices):
        if grad.owned is not None:
            indices, values, owned = apply(GRAD_MARKER, grad.indices, grad.values, grad.owned,
                                           var=var.name)
            return IndexedSlices(indices, values, grad.dense, owned)
        indices, values = apply(GRAD_MARKER, grad.indices, grad.values, var=var.name)
        return IndexedSlices(indices, values, grad.dense)
    return apply(GRAD_MARKER, convert_to_tensor(grad), var=var.name)


def python_float_as_tf(value: object) -> object:
    """A Python float as TF1's ``convert_to_tensor`` makes it: a float32 (its
    hyperparameters are float32 tensors, cast to each variable's dtype where used); any
    other value unchanged."""
    return np.float32(value) if isinstance(value, float) and not isinstance(
        value, np.floating) else value


def trainable_variables(graph: Graph | None = None) -> list[Variable]:
    """The graph's trainable variables, in creation order (``tf.trainable_variables``)."""
    g = graph or get_default_graph()
    return [v for v in g.variables.values() if v.trainable]


class Optimizer:
    """Base class of the optimizers (``tf.train.Optimizer``).

    Subclasses define ``_create_slots(var_list)`` and ``_apply_dense(grad, var)`` (and
    ``_apply_sparse`` to handle ``IndexedSlices`` without densifying, ``_finish`` for
    state shared by all variables). Hyperparameters may be Python floats or scalar
    tensors (a schedule); they are cast to each variable's dtype.
    """

    def __init__(self, learning_rate: TensorLike, name: str) -> None:
        self._learning_rate = learning_rate
        self._name = name
        self._slots: dict[str, dict[Variable, Variable]] = {}
        self._non_slots: dict[tuple[Graph, str], Variable] = {}
        # while ``apply_gradients`` runs: the constant of each Python-number hyperparameter
        # by (number, dtype, graph, device), made once for all the variables as TF1's
        # ``_prepare`` makes its tensors once (``_hyper``)
        self._hyper_constants: dict[tuple[object, ...], Tensor] | None = None

    def get_name(self) -> str:
        return self._name

    # ---- the public TF1 API -------------------------------------------------------------

    def compute_gradients(self, loss: TensorLike, var_list: Sequence[Variable] | None = None,
                          grad_loss: TensorLike | None = None,
                          colocate_gradients_with_ops: bool = False
                          ) -> list[tuple[Grad | None, Variable]]:
        """``(gradient, variable)`` for each variable (default: the graph's trainable
        ones); the gradient is None where ``loss`` does not depend on the variable."""
        loss_t = convert_to_tensor(loss)
        if var_list is None:
            var_list = trainable_variables(loss_t.graph)
        var_list = expand_partitioned(var_list)  # a partitioned variable trains its shards
        for v in var_list:
            if not isinstance(v, Variable):
                raise TfcError(f"{self._name}: var_list holds {v!r}, not a tfc.Variable",
                               user_location())
        if not var_list:
            raise TfcError(f"{self._name}: no variables to optimize", user_location())
        grads = gradients(loss_t, var_list, None if grad_loss is None else [grad_loss],
                          colocate_gradients_with_ops=colocate_gradients_with_ops)
        return list(zip(grads, var_list))

    def apply_gradients(self, grads_and_vars: Sequence[tuple[Grad | None, Variable]],
                        global_step: Variable | None = None, name: str | None = None
                        ) -> Operation:
        """One operation that updates every variable with a gradient (and increments
        ``global_step`` when given). Pairs whose gradient is None are skipped."""
        pairs = [(g, v) for g, v in grads_and_vars]
        for _, v in pairs:
            if not isinstance(v, Variable):
                raise TfcError(f"{self._name}: apply_gradients needs tfc.Variables, got {v!r}",
                               user_location())
        live = [(g, v) for g, v in pairs if g is not None]
        if not live:
            names = ", ".join(v.name for _, v in pairs) or "none"
            raise TfcError(f"{self._name}: no gradients provided for any variable ({names}); "
                           "does the loss depend on them?", user_location())
        if global_step is not None and not isinstance(global_step, Variable):
            raise TfcError(f"global_step must be a tfc.Variable, got {global_step!r}",
                           user_location())
        graph = live[0][1].graph
        updates: list[Operation] = []
        self._hyper_constants = {}
        try:
            with graph.as_default():
                self._create_slots([v for _, v in live])
                for g, v in live:
                    if v.device is None and graph.current_device is None:
                        # (the scope would change nothing)
                        updates.append(self._apply_one(g, v))
                        continue
                    with graph.device(v.device):
                        updates.append(self._apply_one(g, v))
                updates.extend(self._finish([v for _, v in live]))
                if global_step is not None:
                    with graph.device(global_step.device):
                        updates.append(global_step.assign_add(1))
        finally:
            self._hyper_constants = None
        return group(*updates, name=name or self._name)

    def _apply_one(self, g: Grad, v: Variable) -> Operation:
        """The update of ``v`` by its gradient ``g``, marked (``mark_gradient``)."""
        g = mark_gradient(g, v)
        if isinstance(g, IndexedSlices):
            return self._apply_sparse(g, v)
        return self._apply_dense(convert_to_tensor(g), v)

    def minimize(self, loss: TensorLike, global_step: Variable | None = None,
                 var_list: Sequence[Variable] | None = None, name: str | None = None,
                 grad_loss: TensorLike | None = None,
                 colocate_gradients_with_ops: bool = False) -> Operation:
        """``apply_gradients(compute_gradients(loss, var_list), global_step)``."""
        grads_and_vars = self.compute_gradients(loss, var_list, grad_loss,
                                                colocate_gradients_with_ops)
        if all(g is None for g, _ in grads_and_vars):
            names = ", ".join(v.name for _, v in grads_and_vars)
            raise TfcError(f"{self._name}: no gradients provided for any variable ({names}); "
                           "does the loss depend on them?", user_location())
        return self.apply_gradients(grads_and_vars, global_step, name)

    def get_slot_names(self) -> list[str]:
        return sorted(self._slots)

    def get_slot(self, var: Variable, name: str) -> Variable | None:
        """The slot ``name`` (``"m"``, ``"momentum"`` ...) of ``var``, or None."""
        return self._slots.get(name, {}).get(var)

    def variables(self) -> list[Variable]:
        """Every variable this optimizer created (slots and shared state such as Adam's
        beta powers), for checkpointing or initialization."""
        out = list(self._non_slots.values())
        for slots in self._slots.values():
            out.extend(slots.values())
        return out

    # ---- helpers for subclasses ---------------------------------------------------------

    def _hyper(self, value: TensorLike | Callable[[], TensorLike], var: Variable) -> Tensor:
        """A hyperparameter as a scalar tensor of ``var``'s dtype. A Python float is
        rounded to float32 first, as TF1's optimizers make it (``convert_to_tensor(0.1)``
        is a float32 tensor, cast to each variable's dtype): float64 training with
        ``learning_rate=0.1`` steps by ``float32(0.1)``, as in TensorFlow."""
        if callable(value) and not isinstance(value, (Tensor, Variable)):
            value = value()
        if isinstance(value, (Tensor, Variable)):
            t = convert_to_tensor(value)
            if t.type.rank != 0:
                raise TypeMismatch(f"{self._name}: a hyperparameter must be a scalar, got "
                                   f"{t.type}", user_location())
            return t if t.dtype == var.dtype else ops.cast(t, var.dtype)
        number = np.asarray(python_float_as_tf(value), dtype=var.dtype.np)
        memo = self._hyper_constants
        if memo is None:
            return convert_to_tensor(number)
        graph = get_default_graph()
        key = (number.dtype.str, number.tobytes(), graph, graph.current_device)
        out = memo.get(key)
        if out is None:
            out = memo[key] = convert_to_tensor(number)
        return out

    def _lr(self, var: Variable) -> Tensor:
        return self._hyper(self._learning_rate, var)

    def _slot(self, var: Variable, slot_name: str, fill: float) -> Variable:
        """The slot ``slot_name`` of ``var``, created filled with ``fill`` on first use:
        named ``<var>/<optimizer name>`` (``_1``, ``_2`` ... for a var's further slots, as
        TensorFlow names them), non-trainable, on ``var``'s device."""
        slots = self._slots.setdefault(slot_name, {})
        if var in slots:
            return slots[var]
        g = var.graph
        shape, dtype = var.shape, var.dtype
        with g.as_default(), g.name_scope(var.name + "/"), g.device(var.device), \
                variable_partitioner(None):  # a slot is shaped like its (shard) variable
            slot = Variable(lambda: ops.fill(shape, fill, dtype), trainable=False,
                            name=self._name)
        slots[var] = slot
        return slot

    def _non_slot(self, name: str, initial_value: float, colocate_with: Variable) -> Variable:
        """A variable shared by all the variables one optimizer trains (Adam's
        ``beta1_power``), at the graph's top level, on ``colocate_with``'s device."""
        g = colocate_with.graph
        key = (g, name)
        if key not in self._non_slots:
            dtype = colocate_with.dtype
            with g.as_default(), g.name_scope("/"), g.device(colocate_with.device), \
                    variable_partitioner(None):
                self._non_slots[key] = Variable(np.asarray(python_float_as_tf(initial_value),
                                                           dtype=dtype.np),
                                                trainable=False, name=name)
        return self._non_slots[key]

    @staticmethod
    def _as_float(var: Variable) -> None:
        if not var.dtype.is_float:
            raise TypeMismatch(f"cannot train variable '{var.name}' of type {var.type}: "
                               "only float variables have gradients", user_location())

    # ---- what subclasses define ---------------------------------------------------------

    def _create_slots(self, var_list: list[Variable]) -> None:
        """Create the slots of each variable (on first use)."""

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        raise NotImplementedError

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """By default a sparse gradient is made dense: every row's slots update as if the
        untouched rows had a zero gradient."""
        return self._apply_dense(grad.to_dense(), var)

    def _finish(self, var_list: list[Variable]) -> list[Operation]:
        """Updates of state shared by all variables, once per ``apply_gradients``."""
        return []


class GradientDescentOptimizer(Optimizer):
    """``var -= lr * grad``. A sparse gradient updates only its rows
    (``var.scatter_sub``; repeated rows add up), as TF's ``ScatterSub``."""

    def __init__(self, learning_rate: TensorLike, use_locking: bool = False,
                 name: str = "GradientDescent") -> None:
        super().__init__(learning_rate, name)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        self._as_float(var)
        return var.assign_sub(self._lr(var) * grad)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        self._as_float(var)
        return scatter_update(var, "var.scatter_sub", grad.indices, self._lr(var) * grad.values)


class MomentumOptimizer(Optimizer):
    """``accum = momentum * accum + grad; var -= lr * accum`` (TF's ``ApplyMomentum``);
    with ``use_nesterov``: ``var -= lr * grad + lr * momentum * accum`` (the new accum).

    Slot ``momentum`` (``W/Momentum``), zeros. A sparse gradient updates only the rows
    it names, their accum and their values (TF1's ``SparseApplyMomentum``, after
    summing repeated indices): the other rows keep their accum and do not move.
    """

    def __init__(self, learning_rate: TensorLike, momentum: TensorLike,
                 use_locking: bool = False, name: str = "Momentum",
                 use_nesterov: bool = False) -> None:
        super().__init__(learning_rate, name)
        self._momentum = momentum
        self._use_nesterov = use_nesterov

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot(v, "momentum", 0.0)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        self._as_float(var)
        accum = self._slot(var, "momentum", 0.0)
        lr, mu = self._lr(var), self._hyper(self._momentum, var)
        accum_t = accum * mu + grad
        if self._use_nesterov:
            step = grad * lr + accum_t * mu * lr
        else:
            step = accum_t * lr
        return group(accum.assign(accum_t), var.assign_sub(step))

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        self._as_float(var)
        accum = self._slot(var, "momentum", 0.0)
        lr, mu = self._lr(var), self._hyper(self._momentum, var)
        u = unique_rows(grad, var)
        accum_r = ops.gather(accum, u.indices)
        accum_t = accum_r * mu + u.grad
        if self._use_nesterov:
            step = u.grad * lr + accum_t * mu * lr
        else:
            step = accum_t * lr
        return group(scatter_update(accum, "var.scatter_add", u.indices,
                                    (accum_t - accum_r) * u.share),
                     scatter_update(var, "var.scatter_sub", u.indices, step * u.share))


class AdagradOptimizer(Optimizer):
    """``accum += grad**2; var -= lr * grad / sqrt(accum)`` (TF's ``ApplyAdagrad``).

    Slot ``accumulator`` (``W/Adagrad``), filled with ``initial_accumulator_value``. A
    sparse gradient updates only the rows it names and their accumulators (TF1's
    ``SparseApplyAdagrad``, after summing repeated indices): the same numbers as the
    dense update of the zero-filled gradient, without touching the other rows.
    """

    def __init__(self, learning_rate: TensorLike, initial_accumulator_value: float = 0.1,
                 use_locking: bool = False, name: str = "Adagrad") -> None:
        if initial_accumulator_value <= 0.0:
            raise ValueError(f"initial_accumulator_value must be positive: "
                             f"{initial_accumulator_value}")
        super().__init__(learning_rate, name)
        self._initial_accumulator_value = float(initial_accumulator_value)

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot(v, "accumulator", self._initial_accumulator_value)

    def _inv_root(self, acc_t: Tensor, var: Variable) -> Tensor:
        """``1 / sqrt(accumulator)``: what scales the step (Keras's adds an epsilon)."""
        return ops.rsqrt(acc_t)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        self._as_float(var)
        acc = self._slot(var, "accumulator", self._initial_accumulator_value)
        acc_t = acc + ops.square(grad)
        return group(acc.assign(acc_t),
                     var.assign_sub(grad * self._lr(var) * self._inv_root(acc_t, var)))

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        """Only the rows the gradient names (the others' update is zero, as dense)."""
        self._as_float(var)
        acc = self._slot(var, "accumulator", self._initial_accumulator_value)
        u = unique_rows(grad, var)
        added = ops.square(u.grad)
        acc_t = ops.gather(acc, u.indices) + added
        step = u.grad * self._lr(var) * self._inv_root(acc_t, var)
        return group(scatter_update(acc, "var.scatter_add", u.indices, added * u.share),
                     scatter_update(var, "var.scatter_sub", u.indices, step * u.share))


class RMSPropOptimizer(Optimizer):
    """TF's ``ApplyRMSProp``::

        ms  = ms + (grad**2 - ms) * (1 - decay)
        mom = momentum * mom + lr * grad / sqrt(ms + epsilon)
        var -= mom

    and with ``centered`` (``ApplyCenteredRMSProp``) a mean gradient ``mg`` updated like
    ``ms`` and the denominator ``sqrt(ms - mg**2 + epsilon)``. Slots, in TF's order:
    ``rms`` (ones; ``W/RMSProp``), ``mg`` (zeros, centered only) and ``momentum``
    (zeros). A sparse gradient updates only the rows it names and their slots (TF1's
    ``SparseApplyRMSProp`` / ``SparseApplyCenteredRMSProp``, after summing repeated
    indices): the other rows' ``ms`` does not decay and their momentum does not move them.
    """

    def __init__(self, learning_rate: TensorLike, decay: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-10, use_locking: bool = False, centered: bool = False,
                 name: str = "RMSProp") -> None:
        super().__init__(learning_rate, name)
        self._decay, self._momentum, self._epsilon = decay, momentum, epsilon
        self._centered = centered

    def _create_slots(self, var_list: list[Variable]) -> None:
        for v in var_list:
            self._slot(v, "rms", 1.0)
            if self._centered:
                self._slot(v, "mg", 0.0)
            self._slot(v, "momentum", 0.0)

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        self._as_float(var)
        ms, mom = self._slot(var, "rms", 1.0), self._slot(var, "momentum", 0.0)
        lr, rho = self._lr(var), self._hyper(self._decay, var)
        mu, eps = self._hyper(self._momentum, var), self._hyper(self._epsilon, var)
        ms_t = ms + (ops.square(grad) - ms) * (1.0 - rho)
        assigns = [ms.assign(ms_t)]
        denom = ms_t
        if self._centered:
            mg = self._slot(var, "mg", 0.0)
            mg_t = mg + (grad - mg) * (1.0 - rho)
            assigns.append(mg.assign(mg_t))
            denom = ms_t - ops.square(mg_t)
        mom_t = mom * mu + grad * lr / ops.sqrt(denom + eps)
        assigns += [mom.assign(mom_t), var.assign_sub(mom_t)]
        return group(*assigns)

    def _apply_sparse(self, grad: IndexedSlices, var: Variable) -> Operation:
        self._as_float(var)
        ms, mom = self._slot(var, "rms", 1.0), self._slot(var, "momentum", 0.0)
        lr, rho = self._lr(var), self._hyper(self._decay, var)
        mu, eps = self._hyper(self._momentum, var), self._hyper(self._epsilon, var)
        u = unique_rows(grad, var)

        def add_rows(slot: Variable, old: Tensor, new: Tensor) -> Operation:
            return scatter_update(slot, "var.scatter_add", u.indices, (new - old) * u.share)

        ms_r = ops.gather(ms, u.indices)
        ms_t = ms_r + (ops.square(u.grad) - ms_r) * (1.0 - rho)
        updates = [add_rows(ms, ms_r, ms_t)]
        denom = ms_t
        if self._centered:
            mg = self._slot(var, "mg", 0.0)
            mg_r = ops.gather(mg, u.indices)
            mg_t = mg_r + (u.grad - mg_r) * (1.0 - rho)
            updates.append(add_rows(mg, mg_r, mg_t))
            denom = ms_t - ops.square(mg_t)
        mom_r = ops.gather(mom, u.indices)
        mom_t = mom_r * mu + u.grad * lr / ops.sqrt(denom + eps)
        updates += [add_rows(mom, mom_r, mom_t),
                    scatter_update(var, "var.scatter_sub", u.indices, mom_t * u.share)]
        return group(*updates)


class AdamOptimizer(Optimizer):
    """Adam as TF1 computes it (``ApplyAdam``), with ``t`` the step count from 1::

        lr_t = lr * sqrt(1 - beta2**t) / (1 - beta1**t)
        m    = m + (grad - m) * (1 - beta1)
        v    = v + (grad**2 - v) * (1 - beta2)
        var -= lr_t * m / (sqrt(v) + epsilon)

    Slots ``m`` (``W/Adam``) and ``v`` (``W/Adam_1``), zeros; ``beta1**t`` and
    ``beta2**t`` are the non-trainable variables ``beta1_power`` and ``beta2_power``,
    colocated with the first variable (by name) and multiplied by the betas once per
    ``apply_gradients``. Unlike TF1 (always float32), the powers take that variable's
    dtype, so float64 training stays float64 (they start from the float32-rounded betas,
    TF1's values, but their products are not rounded to float32 each step: float64 Adam
    agrees with TF1 to ~1e-7, not to rounding). A sparse gradient is densified, which is
    what TF1's ``AdamOptimizer._apply_sparse`` computes too (its documented behaviour:
    m and v of every row decay and every row moves); TF's ``LazyAdamOptimizer``
    behaviour (touched rows only) is not provided.
    """

    def __init__(self, learning_rate: TensorLike = 0.001, beta1: float = 0.9,
                 beta2: float = 0.999, epsilon: float = 1e-8, use_locking: bool = False,
                 name: str = "Adam") -> None:
        super().__init__(learning_rate, name)
        self._beta1, self._beta2, self._epsilon = beta1, beta2, epsilon
        self._first: Variable | None = None

    def _create_slots(self, var_list: list[Variable]) -> None:
        first = min(var_list, key=lambda v: v.name)
        self._beta_powers(first)
        for v in var_list:
            self._slot(v, "m", 0.0)
            self._slot(v, "v", 0.0)

    def _beta_powers(self, colocate_with: Variable) -> tuple[Variable, Variable]:
        b1, b2 = self._beta1, self._beta2
        if isinstance(b1, (Tensor, Variable)) or isinstance(b2, (Tensor, Variable)):
            raise TypeMismatch("AdamOptimizer: beta1 and beta2 must be Python floats here "
                               "(they initialize the beta power variables)", user_location())
        return (self._non_slot("beta1_power", b1, colocate_with),
                self._non_slot("beta2_power", b2, colocate_with))

    def _apply_dense(self, grad: Tensor, var: Variable) -> Operation:
        self._as_float(var)
        m, v = self._slot(var, "m", 0.0), self._slot(var, "v", 0.0)
        p1, p2 = (self._hyper(p, var) for p in self._powers(var.graph))
        b1, b2 = self._hyper(self._beta1, var), self._hyper(self._beta2, var)
        eps = self._hyper(self._epsilon, var)
        lr_t = self._lr(var) * ops.sqrt(1.0 - p2) / (1.0 - p1)
        m_t = m + (grad - m) * (1.0 - b1)
        v_t = v + (ops.square(grad) - v) * (1.0 - b2)
        step = m_t * lr_t / (ops.sqrt(v_t) + eps)
        return group(m.assign(m_t), v.assign(v_t), var.assign_sub(step))

    def _powers(self, graph: Graph) -> tuple[Variable, Variable]:
        return self._non_slots[(graph, "beta1_power")], self._non_slots[(graph, "beta2_power")]

    def _finish(self, var_list: list[Variable]) -> list[Operation]:
        p1, p2 = self._powers(var_list[0].graph)
        out = []
        for p, beta in ((p1, self._beta1), (p2, self._beta2)):
            with p.graph.device(p.device):
                out.append(p.assign(p * self._hyper(beta, p)))
        return out


__all__ = ["Optimizer", "GradientDescentOptimizer", "MomentumOptimizer", "AdagradOptimizer",
           "RMSPropOptimizer", "AdamOptimizer", "scatter_update", "trainable_variables",
           "unique_rows", "UniqueRows"]
