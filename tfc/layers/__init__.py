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
# keraslayers25: activations, pooling, reshaping, merges, noise, SimpleRNN, wrappers
from tfc.layers.activations import ELU, Activation, LeakyReLU, ReLU, Softmax  # noqa: E402
from tfc.layers.core import Lambda  # noqa: E402
from tfc.layers.merge import Average, Maximum, Minimum, Multiply, Subtract  # noqa: E402
from tfc.layers.noise import GaussianNoise, SpatialDropout2D  # noqa: E402
from tfc.layers.pooling import (AveragePooling1D, AvgPool1D, GlobalAveragePooling1D,  # noqa: E402
                                GlobalAveragePooling2D, GlobalAvgPool1D, GlobalAvgPool2D,
                                GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPooling1D,
                                GlobalMaxPooling2D, MaxPool1D, MaxPooling1D)
from tfc.layers.recurrent import SimpleRNN  # noqa: E402
from tfc.layers.reshaping import (Cropping1D, Cropping2D, Permute, RepeatVector,  # noqa: E402
                                  UpSampling1D, UpSampling2D, ZeroPadding1D, ZeroPadding2D)
from tfc.layers.wrappers import Bidirectional, TimeDistributed  # noqa: E402
from tfc.api.tf1_layers import *  # noqa: F401,F403,E402  (TF1's functions: tf.layers.dense ...)

__all__ = ["Layer", "Dense", "Dropout", "Embedding", "Flatten", "Conv2D", "MaxPool2D",
           "MaxPooling2D", "AveragePooling2D", "AvgPool2D", "LSTM", "Sequential", "History",
           "Loss", "SparseCategoricalCrossentropy", "CategoricalCrossentropy",
           "BinaryCrossentropy", "Input", "Model", "Functional", "Concatenate", "Add",
           "Reshape", "BatchNormalization", "LayerNormalization", "GRU"]
__all__ += ["Activation", "ReLU", "LeakyReLU", "ELU", "Softmax", "Lambda", "Subtract",
            "Multiply", "Average", "Maximum", "Minimum", "GaussianNoise", "SpatialDropout2D",
            "GlobalAveragePooling2D", "GlobalMaxPooling2D", "GlobalAveragePooling1D",
            "GlobalMaxPooling1D", "GlobalAvgPool2D", "GlobalMaxPool2D", "GlobalAvgPool1D",
            "GlobalMaxPool1D", "MaxPooling1D", "AveragePooling1D", "MaxPool1D", "AvgPool1D",
            "SimpleRNN", "ZeroPadding2D", "ZeroPadding1D", "Cropping2D", "Cropping1D",
            "UpSampling2D", "UpSampling1D", "Permute", "RepeatVector", "Bidirectional",
            "TimeDistributed"]

# conv25: the other convolution layers (Keras's names and weights)
from tfc.layers.conv import (Conv1D, Conv2DTranspose, Convolution1D,  # noqa: E402
                             Convolution2DTranspose, DepthwiseConv2D, SeparableConv2D,
                             SeparableConvolution2D)

__all__ += ["Conv1D", "Conv2DTranspose", "DepthwiseConv2D", "SeparableConv2D",
            "Convolution1D", "Convolution2DTranspose", "SeparableConvolution2D"]
