"""``tfc.data``: input pipelines (``tf.data``): ``Dataset.from_tensor_slices(...)``,
``.shuffle``, ``.batch``, ``.repeat``, ``.map`` (a traced, compiled fn), ``.shard``,
``.prefetch`` (a background thread), ``.take``; iterators whose position can be saved in a
checkpoint (``Iterator.state``) and restored (``Iterator.restore``)."""

from tfc.data.dataset import Dataset, Iterator

__all__ = ["Dataset", "Iterator"]
