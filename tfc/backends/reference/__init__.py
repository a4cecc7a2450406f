"""The numpy interpreter as a backend: the oracle every other backend is tested against.

The interpreter itself (``run_graph``, ``ExecContext``) is ``tfc.ir.interpret``."""

from tfc.backends.reference.backend import ReferenceBackend, ReferenceExecutable

__all__ = ["ReferenceBackend", "ReferenceExecutable"]
