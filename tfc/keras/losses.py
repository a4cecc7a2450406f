"""``tfc.keras.losses``: the losses of ``tfc.layers.losses`` under Keras's module name."""

from tfc.layers.losses import (BinaryCrossentropy, CategoricalCrossentropy, Loss,  # noqa: F401
                               MeanAbsoluteError, MeanSquaredError,
                               SparseCategoricalCrossentropy)
from tfc.layers.losses import (BinaryFocalCrossentropy, CosineSimilarity, Huber,  # noqa: F401
                               KLDivergence)
