"""Every op tfc knows, one registry entry each (see ``tfc.ir.registry``)."""

from tfc.ops import linalg, math, nn, reduce, state  # noqa: F401
from tfc.ops import array  # noqa: F401
from tfc.ops import random  # noqa: F401
from tfc.ops import like  # noqa: F401
from tfc.ops import scatter  # noqa: F401
from tfc.ops import nn_grad  # noqa: F401
from tfc.ops import state_sparse  # noqa: F401
from tfc.ops import random_like  # noqa: F401
from tfc.ops import control  # noqa: F401
from tfc.ops import fusion  # noqa: F401
from tfc.ops import transfer  # noqa: F401
from tfc.ops import optimizer  # noqa: F401
from tfc.ops import scan_sort  # noqa: F401  (cumsum, cumprod, sort)
from tfc.ops import math_special  # noqa: F401  (tan, atan, asin, acos, atan2, erf, erfc)
from tfc.ops import segment  # noqa: F401  (segment_reduce: segment25)
