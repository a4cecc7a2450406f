"""``tfc.keras.initializers``: Keras's ``Orthogonal`` (``tfc.layers.initializers``); the
other initializers go by name (``"glorot_uniform"``, ``"zeros"``, ``"orthogonal"`` ...)."""

from tfc.layers.initializers import Orthogonal, OrthogonalInitializer  # noqa: F401

__all__ = ["Orthogonal", "OrthogonalInitializer"]
