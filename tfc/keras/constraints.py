"""``tfc.keras.constraints``: Keras 3's weight constraints (``tfc.layers.constraints``)."""

from tfc.layers.constraints import (Constraint, MaxNorm, MinMaxNorm, NonNeg,  # noqa: F401
                                    UnitNorm, get, max_norm, min_max_norm, non_neg,
                                    unit_norm)

__all__ = ["Constraint", "MaxNorm", "NonNeg", "UnitNorm", "MinMaxNorm", "get", "max_norm",
           "non_neg", "unit_norm", "min_max_norm"]
