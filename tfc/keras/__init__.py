"""``tfc.keras``: Keras's names for tfc's layers and models, so that code written against
``tf.keras`` reads the same: ``tfc.keras.Input``, ``tfc.keras.Model``,
``tfc.keras.Sequential``, ``tfc.keras.layers.Dense`` ... (the same objects as
``tfc.layers``; ``tfc.Sequential`` and ``tfc.layers.*`` keep working), and
``tfc.keras.optimizers``: Keras 3's optimizers, which compute differently from TF1's;
``regularizers``, ``constraints`` and ``initializers`` (``Orthogonal``): Keras 3's."""

from tfc import callbacks
from tfc.keras import constraints, initializers, layers, losses, optimizers, regularizers
from tfc.layers import Input, Model, Sequential

__all__ = ["Input", "Model", "Sequential", "layers", "losses", "optimizers", "callbacks",
           "regularizers", "constraints", "initializers"]
