"""``tfc.math``: the ``tf.math`` names of ops defined in ``tfc.api.ops`` (each op is
defined once, there; this module only names them the way TF1.13+ code spells them,
``tf.math.log(x)``). Without it ``tfc.math`` was Python's ``math`` module, leaked from
``tfc.api.ops`` by the star import, and ``tf.math.log(tensor)`` failed with a TypeError."""

from tfc.api.nn import log_softmax, sigmoid, softmax, softplus, tanh
from tfc.api.ops import (abs, add, add_n, argmax, argmin, cos, count_nonzero, divide,
                         equal, exp, expm1, floor, greater, greater_equal, less, less_equal,
                         log, log1p, logical_and, logical_not, logical_or, maximum, minimum,
                         multiply, negative, not_equal, pow, reduce_all, reduce_any, reduce_max,
                         reduce_mean, reduce_min, reduce_prod, reduce_sum, rsqrt, sign, sin,
                         sqrt, square, subtract, truediv)

from tfc.api.array_ops import (argsort, cumprod, cumsum, reduce_logsumexp,  # array24
                                top_k)

__all__ = ["abs", "add", "add_n", "argmax", "argmin", "cos", "count_nonzero", "divide",
           "equal", "exp", "expm1", "floor", "greater", "greater_equal", "less", "less_equal",
           "log", "log1p", "log_softmax", "logical_and", "logical_not", "logical_or",
           "maximum", "minimum", "multiply", "negative", "not_equal", "pow", "reduce_all",
           "reduce_any", "reduce_max", "reduce_mean", "reduce_min", "reduce_prod", "reduce_sum",
           "rsqrt", "sigmoid", "sign", "sin", "softmax", "softplus", "sqrt", "square",
           "subtract", "tanh", "truediv"]
__all__ += ["argsort", "cumprod", "cumsum", "reduce_logsumexp", "top_k"]  # array24

# tan, atan, asin, acos, atan2, erf, erfc (registry: tfc/ops/math_special.py)
from tfc.api.ops import acos, asin, atan, atan2, erf, erfc, tan  # noqa: E402

__all__ += ["acos", "asin", "atan", "atan2", "erf", "erfc", "tan"]

# ceil, round, reciprocal, the predicates, floordiv/floormod, ... and the hyperbolic ones
from tfc.api.ops import (acosh, asinh, atanh, ceil, cosh, divide_no_nan,  # noqa: E402
                         floordiv, floormod, is_finite, is_inf, is_nan, logical_xor, mod,
                         reciprocal, reciprocal_no_nan, rint, round, sinh,
                         squared_difference)

__all__ += ["acosh", "asinh", "atanh", "ceil", "cosh", "divide_no_nan", "floordiv",
            "floormod", "is_finite", "is_inf", "is_nan", "logical_xor", "mod", "reciprocal",
            "reciprocal_no_nan", "rint", "round", "sinh", "squared_difference"]

# segment reductions, bincount, confusion_matrix (segment25: tfc/api/segment_ops.py)
from tfc.api.segment_ops import (segment_max, segment_mean, segment_min,  # noqa: E402
                                 segment_prod, segment_sum, unsorted_segment_max,
                                 unsorted_segment_mean, unsorted_segment_min,
                                 unsorted_segment_prod, unsorted_segment_sqrt_n,
                                 unsorted_segment_sum)

__all__ += ["segment_max", "segment_mean", "segment_min", "segment_prod", "segment_sum",
            "unsorted_segment_max", "unsorted_segment_mean", "unsorted_segment_min",
            "unsorted_segment_prod", "unsorted_segment_sqrt_n", "unsorted_segment_sum"]
from tfc.api.segment_ops import bincount, confusion_matrix  # noqa: E402

__all__ += ["bincount", "confusion_matrix"]
# the moments and the Euclidean norm, in_top_k, l2_normalize (linalg25)
from tfc.api.linalg_ns import (reduce_euclidean_norm, reduce_std,  # noqa: E402
                               reduce_variance)
from tfc.api.nn import in_top_k, l2_normalize  # noqa: E402

__all__ += ["in_top_k", "l2_normalize", "reduce_euclidean_norm", "reduce_std",
            "reduce_variance"]
