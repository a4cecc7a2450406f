"""Summaries in the graph: tagged tensors whose values a step returns beside its fetches.

In TensorFlow 1 a summary op turns a tensor into a serialized ``Summary`` protocol buffer
(a string tensor), ``merge_all`` concatenates them, and the step fetches that string. tfc's
IR has no string tensors and its graphs are pure dataflow of numbers, so here a summary is
not an op: ``tfc.summary.scalar("loss", loss)`` records ``(tag, kind, tensor)`` with the
graph and returns a ``Summary``, a fetch made of its tensors. ``sess.run(merged)`` (or any
fetch structure holding it) computes those tensors in the same compiled step as the other
fetches and returns a ``SummaryValues``: the tagged numbers, which a ``FileWriter`` turns
into TensorBoard's protos. Nothing is serialized inside the step, and a step that fetches
no summary pays nothing for the summaries in its graph.

A model file's entry carries summaries as ordinary named fetches, ``summary/<kind>/<tag>``
(``tfc.entry("train_step", fetches={"loss": loss, "summaries": merge_all()}, ...)``), so
an artifact keeps them with no new IR or manifest field; ``tfc run --logdir`` writes the
fetches so named as their kind (``split_fetches``; an image summary's ``max_outputs`` is
not kept there: such entries write the first 3 images).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tfc.api.graph import Graph, Tensor, get_default_graph, user_location
from tfc.api.session import CompositeFetch
from tfc.api.tensor import TensorLike, convert_to_tensor
from tfc.errors import TfcError, TypeMismatch

KINDS = ("scalar", "histogram", "image", "text")
FETCH_PREFIX = "summary/"

# Summaries made in each graph, in creation order (``merge_all``); weak, so a graph that
# is dropped takes its summaries with it.
_BY_GRAPH: "weakref.WeakKeyDictionary[Graph, list[SummarySpec]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True, eq=False)
class SummarySpec:
    """One summary: its tag, kind, and the tensor whose value it records (``text``
    summaries of a Python string hold the string and no tensor)."""

    tag: str
    kind: str
    tensor: Tensor | None
    text: str | None = None
    max_outputs: int = 3  # images: at most this many of the batch


@dataclass(frozen=True)
class SummaryValue:
    """One summary's value in one step."""

    tag: str
    kind: str
    value: Any  # np.ndarray, or str for text
    max_outputs: int = 3


@dataclass(frozen=True)
class SummaryValues:
    """What fetching a ``Summary`` returns: the tagged values of one step."""

    values: tuple[SummaryValue, ...] = ()

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, tag: str) -> Any:
        for v in self.values:
            if v.tag == tag:
                return v.value
        raise KeyError(tag)

    @property
    def tags(self) -> list[str]:
        return [v.tag for v in self.values]


@dataclass(frozen=True, eq=False)
class Summary(CompositeFetch):
    """A fetch of one or more summaries (``scalar``, ``merge``, ``merge_all`` return one):
    ``sess.run`` returns their ``SummaryValues``."""

    specs: tuple[SummarySpec, ...] = field(default_factory=tuple)

    def fetch_tensors(self) -> list[Tensor]:
        return [s.tensor for s in self.specs if s.tensor is not None]

    def from_values(self, values: list[Any]) -> SummaryValues:
        it = iter(values)
        return SummaryValues(tuple(
            SummaryValue(s.tag, s.kind,
                         s.text if s.tensor is None else np.asarray(next(it)), s.max_outputs)
            for s in self.specs))

    def entry_fetches(self) -> dict[str, Tensor]:
        """The summaries as an entry's named fetches (``summary/<kind>/<tag>``); a text
        summary of a constant string is not a tensor and has no place in an entry."""
        out: dict[str, Tensor] = {}
        for s in self.specs:
            if s.tensor is None:
                raise TfcError(f"text summary '{s.tag}' of a Python string cannot be an "
                               f"entry's fetch; write it with FileWriter.add_text")
            out[fetch_name(s.kind, s.tag)] = s.tensor
        return out


def fetch_name(kind: str, tag: str) -> str:
    """``summary/scalar/loss``: the name of a summary as an entry's fetch."""
    return f"{FETCH_PREFIX}{kind}/{tag}"


def split_fetches(fetches: Mapping[str, Any]) -> tuple[dict[str, Any], SummaryValues]:
    """An entry's fetches split into the plain ones and the summaries among them (by their
    names: ``fetch_name``)."""
    plain: dict[str, Any] = {}
    values: list[SummaryValue] = []
    for name, value in fetches.items():
        kind, _, tag = name[len(FETCH_PREFIX):].partition("/")
        if name.startswith(FETCH_PREFIX) and kind in KINDS and tag:
            values.append(SummaryValue(tag, kind, np.asarray(value)))
        else:
            plain[name] = value
    return plain, SummaryValues(tuple(values))


def _tag(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith("/"):
        raise TfcError(f"a summary needs a non-empty name, not {name!r}", user_location())
    return name


def _record(spec: SummarySpec, graph: Graph) -> Summary:
    _BY_GRAPH.setdefault(graph, []).append(spec)
    return Summary((spec,))


def _numeric(name: str, kind: str, data: TensorLike) -> Tensor:
    t = convert_to_tensor(data)
    if t.dtype.np.kind not in "biuf":
        raise TypeMismatch(f"{kind} summary '{name}' needs a numeric tensor, got {t.type}",
                           user_location())
    return t


def scalar(name: str, tensor: TensorLike) -> Summary:
    """A scalar summary (``tf.summary.scalar``): a rank-0 numeric tensor, one point of a
    curve in TensorBoard's Scalars dashboard per written step."""
    t = _numeric(_tag(name), "scalar", tensor)
    if t.type.rank != 0:
        raise TypeMismatch(f"scalar summary '{name}' needs a scalar (rank 0) tensor, got "
                           f"{t.type}", user_location())
    return _record(SummarySpec(name, "scalar", t), t.graph)


def histogram(name: str, values: TensorLike) -> Summary:
    """A histogram summary of a numeric tensor of any shape (``tf.summary.histogram``):
    its values' distribution, bucketed when written."""
    t = _numeric(_tag(name), "histogram", values)
    return _record(SummarySpec(name, "histogram", t), t.graph)


def image(name: str, tensor: TensorLike, max_outputs: int = 3) -> Summary:
    """An image summary (``tf.summary.image``): a ``[N, H, W, C]`` tensor, C in 1 (grey),
    3 (RGB) or 4 (RGBA); floats in [0, 1] or uint8-range integers. The first
    ``max_outputs`` images are written as PNG."""
    t = _numeric(_tag(name), "image", tensor)
    shape = t.type.shape
    if t.type.rank != 4 or shape[3] not in (1, 3, 4):
        raise TypeMismatch(f"image summary '{name}' needs a [N, H, W, C] tensor with C in "
                           f"1, 3 or 4, got {t.type}", user_location())
    if max_outputs < 1:
        raise TfcError(f"image summary '{name}': max_outputs must be at least 1, not "
                       f"{max_outputs}", user_location())
    return _record(SummarySpec(name, "image", t, max_outputs=max_outputs), t.graph)


def text(name: str, data: str | TensorLike) -> Summary:
    """A text summary (``tf.summary.text``). tfc has no string tensors: ``data`` is a
    Python string (the same text each step) or a numeric tensor, written as its printed
    value (numpy's formatting)."""
    _tag(name)
    if isinstance(data, str):
        return _record(SummarySpec(name, "text", None, text=data), get_default_graph())
    t = _numeric(name, "text", data)
    return _record(SummarySpec(name, "text", t), t.graph)


def merge(summaries: Sequence[Summary]) -> Summary:
    """One fetch of several summaries (``tf.summary.merge``)."""
    specs: list[SummarySpec] = []
    for s in summaries:
        if not isinstance(s, Summary):
            raise TfcError(f"merge: {s!r} is not a summary (tfc.summary.scalar ...)",
                           user_location())
        specs.extend(x for x in s.specs if x not in specs)
    return Summary(tuple(specs))


def merge_all(graph: Graph | None = None) -> Summary | None:
    """Every summary made in ``graph`` (default: the default graph) as one fetch; None
    when there is none, as in TensorFlow."""
    specs = _BY_GRAPH.get(graph or get_default_graph(), [])
    return Summary(tuple(specs)) if specs else None


def text_of(value: Any) -> str:
    """The text a text summary's value is written as."""
    return value if isinstance(value, str) else np.array2string(np.asarray(value))
