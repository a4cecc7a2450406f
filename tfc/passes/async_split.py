"""A training step cut in two for asynchronous parameter servers (``--strategy ps-async``).

Downpour SGD (DistBelief; TensorFlow's between-graph training without a barrier) needs
the step's two halves to run at different times on different tasks: a worker reads the
variables, computes its gradients and sends them; a PS applies each worker's gradients
when they arrive, to the variables as they are *then* (other workers' updates may have
landed since that worker read them). The ``replicate`` pass's ``ps-sync`` step cannot do
this: its PS reads each variable once per step and applies the mean to that value.

``split_async`` cuts a single-device training entry at its ``optimizer.grad`` markers
(``tfc.passes.replicate``'s worker part and update, the same cut):

- the **gradient module** (one entry, the training entry's name): the worker part, where
  each variable read is an argument instead (``AsyncSplit.read_args``: the values the
  worker read from the PS tasks), its results the batch-dependent fetches and then every
  marker's inputs (a sparse marker's indices and values too);
- one **apply module** per PS task (same entry name): the update ops of the variables
  that PS holds, each marker's value an argument (the worker's gradient). Its variables
  are read when the entry runs, i.e. at apply time. A variable of another PS that an
  update reads (Adam's beta powers on PS 0, read by the updates on PS 1) is an argument
  too: the worker's copy, read at the step's start.

Fetches of the entry that do not depend on the batch are refused (a PS update has no
fetch to give back); variables are placed on the PS tasks as ``ps-sync`` places them
(``place_variables``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from tfc.errors import TfcError
from tfc.ir.core import Graph, Module, Op, Value
from tfc.ir.registry import writes_variable
from tfc.ops.optimizer import GRAD_MARKER
from tfc.passes.replicate import (ClusterSpec, _batch_dependent, _Builder,
                                  _check_updates, _closure, place_variables,
                                  training_entries)


@dataclass
class ApplyPart:
    """What one PS task runs per worker update: its module, the variables it holds, and
    where its arguments come from: ``grad_results`` (indices into the gradient module's
    results, in argument order) then ``foreign_reads`` (variables of other PS tasks)."""

    ps: str
    module: Module
    variables: list[str]
    grad_results: list[int] = field(default_factory=list)
    foreign_reads: list[str] = field(default_factory=list)


@dataclass
class AsyncSplit:
    """``split_async``'s result (see the module docstring)."""

    entry: str
    gradient: Module
    read_args: list[str]            # variable of each extra argument of the gradient entry
    fetch_names: list[str]          # the gradient entry's first results: the entry's fetches
    apply: dict[str, ApplyPart]     # PS device -> its part
    var_device: dict[str, str]      # variable -> its PS device


def _arg_name(prefix: str, k: int, name: str) -> str:
    return f"{prefix}{k}_{re.sub(r'[^A-Za-z0-9_]', '_', name)}"


def split_async(module: Module, spec: ClusterSpec, entry: str | None = None) -> AsyncSplit:
    """Cut training entry ``entry`` (the only one when None) of the single-device,
    un-lowered ``module`` for ``spec``'s PS tasks (see the module docstring)."""
    training = training_entries(module)
    if not training:
        raise TfcError("--strategy ps-async trains asynchronously, but no entry applies an "
                       "optimizer (tfc.train ...Optimizer.minimize or apply_gradients)")
    if entry is None:
        if len(training) > 1:
            raise TfcError(f"--strategy ps-async: the module has several training entries "
                           f"({', '.join(training)}); name the one to train")
        entry = training[0]
    elif entry not in training:
        raise TfcError(f"--strategy ps-async: entry '{entry}' applies no optimizer (training "
                       f"entries: {', '.join(training)})")
    if module.partitions or any(task for task in module.devices if task.startswith("/job:")):
        raise TfcError("--strategy ps-async splits a single-device module; this one is "
                       "already placed on a cluster's tasks")
    graph = module.graphs[entry]
    var_device = place_variables(module.variables, spec)
    markers = [op for op in graph.ops if op.kind == GRAD_MARKER]
    dep = _batch_dependent(graph)
    _check_updates(graph, dep)
    for v, name in zip(graph.results, graph.result_names):
        if v not in dep:
            raise TfcError(f"--strategy ps-async: fetch '{name}' of @{entry} does not depend "
                           f"on the batch; an asynchronous step returns only what the "
                           f"worker computes from its batch")
    gradient, read_args, grad_index = _gradient_module(module, graph, markers, entry)
    apply = {ps: _apply_part(module, graph, ps, var_device, grad_index)
             for ps in spec.ps_devices}
    return AsyncSplit(entry, gradient, read_args, list(graph.result_names), apply, var_device)


def _gradient_module(module: Module, graph: Graph, markers: list[Op], entry: str
                     ) -> tuple[Module, list[str], dict[Value, int]]:
    """The worker's module, the variable of each appended argument, and each marker
    input's index among its results."""
    roots = [v for m in markers for v in m.inputs] + list(graph.results)
    ops = _closure(roots)
    for op in ops:
        if op.kind == GRAD_MARKER:
            raise TfcError(f"cannot train @{entry} asynchronously: a gradient or a fetch is "
                           f"computed from the gradient applied to '{op.attrs['var']}'", op.loc)
        if writes_variable(op):
            raise TfcError(f"cannot train @{entry} asynchronously: the worker's part writes "
                           f"variable '{op.attrs['var']}' (only the optimizer's update may)",
                           op.loc)
    b = _Builder(graph)
    local: dict[Value, Value] = dict(b.args)
    read_args: list[str] = []
    read_value: dict[str, Value] = {}
    for op in graph.ops:
        if op not in ops:
            continue
        if op.kind == "var.read":
            var = op.attrs["var"]
            if var not in read_value:
                read_value[var] = b.graph.add_arg(op.result.type,
                                                  _arg_name("read", len(read_args), var))
                read_args.append(var)
            local[op.result] = read_value[var]
            continue
        new = b.copy(op, [local[x] for x in op.inputs], op.device or "")
        new.device = None
        local.update(zip(op.results, new.results))
    results = [local[v] for v in graph.results]
    names = list(graph.result_names)
    grad_index: dict[Value, int] = {}
    for m in markers:
        for x in m.inputs:
            if x not in grad_index:
                grad_index[x] = len(results)
                results.append(local[x])
                names.append(f"grad{len(grad_index) - 1}")
    b.graph.set_results(results, names)
    return Module(graphs={entry: b.graph}), read_args, grad_index


def _apply_part(module: Module, graph: Graph, ps: str, var_device: dict[str, str],
                grad_index: dict[Value, int]) -> ApplyPart:
    """PS ``ps``'s update module (see the module docstring)."""
    markers = {op for op in graph.ops if op.kind == GRAD_MARKER}
    writes = [op for op in graph.ops
              if writes_variable(op) and var_device[op.attrs["var"]] == ps]
    ops = _closure([v for op in writes for v in op.inputs],
                   stop=lambda op: op in markers) | set(writes)
    part = ApplyPart(ps, Module(), [n for n, d in var_device.items() if d == ps])
    for op in graph.ops:  # the arguments: the gradients, then the other PS's variables
        if op not in ops:
            continue
        var = op.attrs.get("var") if op.kind.startswith("var.") else None
        if op.kind == GRAD_MARKER:
            part.grad_results += [grad_index[x] for x, _ in zip(op.inputs, op.results)]
        elif var is not None and var_device[var] != ps:
            if op.kind != "var.read":
                raise TfcError(f"cannot train @{graph.name} asynchronously: the update of "
                               f"a variable on {ps} writes '{var}' on {var_device[var]}",
                               op.loc)
            if var not in part.foreign_reads:
                part.foreign_reads.append(var)
        elif any(x.op is None for x in op.inputs):
            raise TfcError(f"cannot train @{graph.name} asynchronously: its update uses an "
                           f"argument of the step directly", op.loc)
    b = _Builder(graph)
    b.graph.args.clear()  # the batch is not an input of an update (_check_updates)
    local: dict[Value, Value] = {}
    for op in graph.ops:
        if op in ops and op.kind == GRAD_MARKER:
            for x, res in zip(op.inputs, op.results):
                local[res] = b.graph.add_arg(x.type, f"grad{grad_index[x]}")
    foreign = {var: b.graph.add_arg(module.variables[var].type, _arg_name("remote", k, var))
               for k, var in enumerate(part.foreign_reads)}
    for op in graph.ops:
        if op not in ops or op.kind == GRAD_MARKER:
            continue
        var = op.attrs.get("var") if op.kind.startswith("var.") else None
        if var is not None and var_device[var] != ps:
            local[op.result] = foreign[var]
            continue
        new = b.copy(op, [local[x] for x in op.inputs], "")
        new.device = None
        local.update(zip(op.results, new.results))
    b.graph.set_results([], [])
    part.module = Module(graphs={graph.name: b.graph},
                         variables={n: replace(module.variables[n], device=None)
                                    for n in part.variables})
    return part
