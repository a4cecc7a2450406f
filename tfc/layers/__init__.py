"""``tfc.layers``: Keras-style layers, ``Sequential`` and ``Model`` on the TF1 graph API.

Layers append graph ops when called on a tensor and make their variables on the first
call (``Dense(64, activation="relu")(x)``). ``Model`` (``tfc.layers.engine``) is Keras's
engine: ``compile`` / ``fit`` / ``evaluate`` / ``predict`` and ``export`` (the entries of a
model file); ``Sequential``, the Functional model (``Model(Input(...), outputs)``:
``tfc.layers.functional``) and subclasses with ``call`` are models.
"""

from tfc.layers.base import Layer
from tfc.layers.conv import (AveragePooling2D, AvgPool2D, Conv2D, MaxPool2D,
                             MaxPooling2D)
from tfc.layers.core import Dense, Dropout, Embedding, Flatten, Reshape
from tfc.layers.engine import History, Model
from tfc.layers.functional import Functional, Input
from tfc.layers.losses import (BinaryCrossentropy, CategoricalCrossentropy, Loss,
                               SparseCategoricalCrossentropy)
from tfc.layers.merge import Add, Concatenate
from tfc.layers.normalization import BatchNormalization, LayerNormalization
from tfc.layers.model import Sequential
from tfc.layers.recurrent import GRU, LSTM
from tfc.api.tf1_layers import *  # noqa: F401,F403,E402  (TF1's functions: tf.layers.dense ...)

__all__ = ["Layer", "Dense", "Dropout", "Embedding", "Flatten", "Conv2D", "MaxPool2D",
           "MaxPooling2D", "AveragePooling2D", "AvgPool2D", "LSTM", "Sequential", "History",
           "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "Input", "Model", "Functional", "Concatenate", "Add",
           "Reshape", "BatchNormalization", "LayerNormalization", "GRU"]

# conv25: the other convolution layers (Keras's names and weights)
from tfc.layers.conv import (Conv1D, Conv2DTranspose, Convolution1D,  # noqa: E402
                             Convolution2DTranspose, DepthwiseConv2D, SeparableConv2D,
                             SeparableConvolution2D)

__all__ += ["Conv1D", "Conv2DTranspose", "DepthwiseConv2D", "SeparableConv2D",
            "Convolution1D", "Convolution2DTranspose", "SeparableConvolution2D"]
