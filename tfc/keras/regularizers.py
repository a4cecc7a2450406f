"""``tfc.keras.regularizers``: Keras 3's weight and activity regularizers
(``tfc.layers.regularizers``)."""

from tfc.layers.regularizers import (L1, L1L2, L2, Regularizer, get, l1, l1_l2,  # noqa: F401
                                     l2)

__all__ = ["Regularizer", "L1", "L2", "L1L2", "l1", "l2", "l1_l2", "get"]
