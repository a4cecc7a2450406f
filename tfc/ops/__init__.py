"""Every op tfc knows, one registry entry each (see ``tfc.ir.registry``)."""

from tfc.ops import math, reduce, state  # noqa: F401
