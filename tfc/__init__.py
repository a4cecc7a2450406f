"""tfc: a compiler for TensorFlow-style dataflow graphs.

The public API is TensorFlow 1's: build a graph with placeholders, variables and ops,
then run pieces of it with ``Session.run``; or trace Python functions with
``@tfc.function``. Model files declare entry points with ``tfc.entry`` (or a traced
function with an input signature) so that ``tfc compile`` can turn them into artifacts.
"""

from __future__ import annotations

from typing import Any, ContextManager, Sequence

from tfc import ops  # noqa: F401  (registers every op: first, so any import of tfc has them)
from tfc.api.control import cond, scan, while_loop
from tfc.api.function import Function, TensorSpec, function
from tfc.api.gradients import IndexedSlices, gradients, stop_gradient
from tfc.api.graph import (Graph, Operation, Tensor, Variable, get_default_graph,
                           reset_default_graph, user_location)
from tfc.api.ops import *  # noqa: F401,F403  (the op functions)
from tfc.api.array_ops import *  # noqa: F401,F403  (cumsum, reverse, gather_nd, einsum ...)
from tfc.api.segment_ops import *  # noqa: F401,F403  (unsorted_segment_sum, scatter_nd ...)
from tfc.api.partitioned import (PartitionedVariable, fixed_size_partitioner,  # noqa: F401
                                 min_max_variable_partitioner, variable_partitioner)
from tfc.api.saver import Saver  # also tfc.train.Saver
from tfc.api.session import (Session, global_variables_initializer, group,
                             variables_initializer)
from tfc.api.tensor import constant, convert_to_tensor
from tfc.api.interactive import InteractiveSession  # noqa: F401
from tfc.api.variable_scope import *  # noqa: F401,F403  (variable_scope, get_variable ...)
from tfc.api.graph_collections import *  # noqa: F401,F403  (get_collection, GraphKeys ...)
from tfc.api import nn, random  # noqa: F401  (tfc.nn, tfc.random)
from tfc.api.random import normal as random_normal  # noqa: F401  (TF1's top-level names)
from tfc.api.random import shuffle as random_shuffle  # noqa: F401
from tfc.api.random import truncated_normal  # noqa: F401
from tfc.api.random import uniform as random_uniform  # noqa: F401
from tfc.api import losses  # noqa: F401  (tfc.losses: TF1's tf.losses)
from tfc.api import metrics  # noqa: F401  (tfc.metrics: TF1's tf.metrics)
from tfc.api import math_ns as math  # noqa: F401  (tfc.math, not Python's: see math_ns)
from tfc import train  # noqa: F401  (tfc.train)
from tfc.train import clip_by_global_norm, global_norm, trainable_variables  # noqa: F401
from tfc import layers  # noqa: F401  (tfc.layers)
from tfc import data  # noqa: F401  (tfc.data)
from tfc import queue  # noqa: F401  (tfc.queue)
from tfc import errors  # noqa: F401  (tfc.errors.OutOfRangeError)
from tfc.layers import Model, Sequential  # noqa: F401
from tfc import keras  # noqa: F401  (tfc.keras: Input, Model, Sequential, layers)
from tfc import summary  # noqa: F401  (tfc.summary)
from tfc import callbacks  # noqa: F401  (tfc.callbacks)
from tfc import distribute  # noqa: F401  (tfc.distribute)
from tfc.api import linalg_ns as linalg  # noqa: F401  (tfc.linalg; linalg25)
from tfc.api.linalg_ns import clip_by_norm, norm  # noqa: F401  (tf.norm, tf.clip_by_norm)
import sys as _sys  # (linalg25: ``from tfc.nn import relu`` works, as from tensorflow.nn)
for _name, _mod in (("nn", nn), ("linalg", linalg), ("math", math)):
    _sys.modules.setdefault(f"{__name__}.{_name}", _mod)
del _name, _mod
from tfc.errors import TfcError
from tfc.ir.types import DType

from tfc.version import __version__  # noqa: F401

initialize_all_variables = global_variables_initializer  # (TF1's older name)

float16 = DType.f16
float32 = DType.f32
float64 = DType.f64
int32 = DType.i32
int64 = DType.i64
bool = DType.bool  # noqa: A001  (TensorFlow's name)


def placeholder(dtype: Any, shape: Sequence[int | str | None] | None = None,
                name: str | None = None) -> Tensor:
    """A value fed at run time. ``None`` dims are symbolic: the first is the batch dim
    ``B`` (shared by every placeholder), others fresh symbols; strings name symbols."""
    return get_default_graph().placeholder(dtype, shape, name)


def name_scope(name: str) -> ContextManager[str]:
    return get_default_graph().name_scope(name)


def device(spec: str | None) -> ContextManager[None]:
    """Ops (and variables) made inside run on ``spec`` (``"/cpu:0"``, ``"/gpu:0"``)."""
    return get_default_graph().device(spec)


def set_random_seed(seed: int) -> None:
    """The graph-level seed: ops without their own seed derive one from it."""
    get_default_graph().seed = int(seed)


def entry(name: str, feeds: dict[str, Any] | None = None, fetches: Any = None,
          targets: Sequence[Operation] = ()) -> None:
    """Declare an entry point of the model: ``tfc.entry("predict", feeds={"x": x},
    fetches={"probs": probs})``. ``targets`` are operations it runs for their effect
    (a training step's assigns); fetched operations count as targets too; a fetched
    ``tfc.summary`` (``merge_all()``) becomes one fetch per summary, named
    ``summary/<kind>/<tag>`` (what ``tfc run --logdir`` writes as that kind). Feeds default
    to the placeholders the fetches need, named by the placeholders' names."""
    get_default_graph().entry(name, feeds, {} if fetches is None else fetches, targets,
                              user_location())
