"""The numpy interpreter: the oracle every other backend is tested against."""

from tfc.backends.reference.interpreter import ExecContext, ReferenceBackend, run_graph

__all__ = ["ExecContext", "ReferenceBackend", "run_graph"]
