"""Weight updates folded into the GEMM that computes their gradient: the pattern is
``tfc.passes.gemm_update`` (a fact about the graph, which the memory pass reads too);
``kernels.lower_gemm_update`` lowers each as one GEMM into the update buffer."""

from tfc.passes.gemm_update import UPDATE_KINDS, GemmUpdate, absorbed_values, find

__all__ = ["UPDATE_KINDS", "GemmUpdate", "absorbed_values", "find"]
