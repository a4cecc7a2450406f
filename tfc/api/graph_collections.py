"""TF1's graph collections: ``tfc.get_collection``, ``tfc.add_to_collection`` and
``tfc.GraphKeys``.

A collection is a list kept by the graph under a name. The variable collections are the
graph's variables themselves (``GLOBAL_VARIABLES``: every variable in creation order,
``TRAINABLE_VARIABLES``: the trainable ones), followed by whatever was added under those
keys; ``tfc.losses`` adds each loss to ``LOSSES`` (as TF1 does), so ``tf.losses.get_total_loss``
works; ``UPDATE_OPS`` holds what user code adds and ``tfc.layers.batch_normalization``'s (TF1's
functional layer) moving-average assigns (tfc's Keras layers add nothing there: their
updates are part of their step). ``LOCAL_VARIABLES`` (``tfc.metrics``' sums) are not
global variables.
"""

from __future__ import annotations

import re
from typing import Any

from tfc.api.graph import Graph, get_default_graph


class GraphKeys:
    """The standard collection names (``tf.GraphKeys``)."""
    GLOBAL_VARIABLES = "variables"
    VARIABLES = GLOBAL_VARIABLES
    TRAINABLE_VARIABLES = "trainable_variables"
    LOCAL_VARIABLES = "local_variables"
    METRIC_VARIABLES = "metric_variables"
    MODEL_VARIABLES = "model_variables"
    UPDATE_OPS = "update_ops"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    SUMMARIES = "summaries"
    TRAIN_OP = "train_op"
    GLOBAL_STEP = "global_step"


def _items(g: Graph, key: str) -> list[Any]:
    if key == GraphKeys.GLOBAL_VARIABLES:
        base: list[Any] = [v for v in g.variables.values() if not is_local_variable(v)]
    elif key == GraphKeys.TRAINABLE_VARIABLES:
        base = [v for v in g.variables.values() if v.trainable]
    else:
        base = []
    return base + [x for x in g.collections.get(key, []) if not any(x is b for b in base)]


def is_local_variable(v: Any) -> bool:
    """Whether ``v`` is in its graph's ``LOCAL_VARIABLES`` (``tfc.metrics``' sums): not a
    global variable, so neither ``global_variables()`` nor a default Saver has it (TF1)."""
    return any(v is x for x in v.graph.collections.get(GraphKeys.LOCAL_VARIABLES, []))


def get_collection(key: str, scope: str | None = None) -> list[Any]:
    """A copy of the default graph's collection ``key``; with ``scope``, only the items
    whose name matches it from the start (``re.match``, as TF1)."""
    items = _items(get_default_graph(), key)
    if scope is None:
        return items
    return [x for x in items if isinstance(getattr(x, "name", None), str)
            and re.match(scope, x.name)]


def get_collection_ref(key: str) -> list[Any]:
    """The default graph's list for ``key`` itself (the variable collections' extra items
    only: their variables are the graph's own)."""
    return get_default_graph().collections.setdefault(key, [])


def add_to_collection(name: str, value: Any) -> None:
    get_collection_ref(name).append(value)


def add_to_collections(names: Any, value: Any) -> None:
    for name in ([names] if isinstance(names, str) else names):
        add_to_collection(name, value)


__all__ = ["GraphKeys", "get_collection", "get_collection_ref", "add_to_collection",
           "add_to_collections"]
