"""Passes over the IR and the manager that runs them (``tfc.pipeline`` drives it).

Importing this package registers the built-in passes: canonicalize, cse, dce, fusion, memory,
placement, partition, compress, replicate.
"""

from tfc.passes.manager import (DEFAULT_PIPELINE, PassManager, PassSpec, available_passes, get_pass,
                                parse_bytes, parse_pipeline, register_pass, replace_all_uses,
                                run_passes)
from tfc.passes import canonicalize, cse, dce  # noqa: F401,E402  (register the passes)
from tfc.passes import compress, fusion, memory, partition, placement  # noqa: F401,E402
from tfc.passes import replicate  # noqa: F401,E402

__all__ = ["DEFAULT_PIPELINE", "PassManager", "PassSpec", "available_passes", "get_pass",
           "parse_bytes", "parse_pipeline",
           "register_pass", "replace_all_uses", "run_passes"]
