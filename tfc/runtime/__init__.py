"""Running compiled modules: artifacts (``.tfc`` files), ``Program`` and feed checking.

``tfc.runtime.load("model.tfc")`` returns a ``Program``; ``program.run("predict", x=...)``
returns the fetches by name, and variables persist across runs.
"""

from __future__ import annotations

import os

from tfc.runtime.artifact import load_artifact, save_artifact
from tfc.runtime.feeds import check_feeds
from tfc.runtime.program import EntrySignature, Program, TensorSpec


def load(path: str | os.PathLike[str], backend: str | None = None, *,
         native: str = "use", cluster: str | None = None,
         cluster_timeout_s: float | None = None) -> Program:
    """The program stored in the artifact ``path``, ready to run (``native``: what to do
    with stored object code, see ``load_artifact``; ``cluster``: where a module compiled
    for a cluster runs, see ``Program``)."""
    return load_artifact(path, backend=backend, native=native, cluster=cluster,
                         cluster_timeout_s=cluster_timeout_s)


__all__ = ["EntrySignature", "Program", "TensorSpec", "check_feeds", "load", "load_artifact",
           "save_artifact"]
