"""``tfc.keras.layers``: the layers of ``tfc.layers`` under Keras's module name."""

from tfc.layers import *  # noqa: F401,F403
from tfc.layers import __all__  # noqa: F401
