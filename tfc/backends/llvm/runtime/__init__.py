"""The LLVM backend's native runtime: what runs when a compiled entry is called.

Code generation (``tfc.backends.llvm``: lowering, kernels, vmath, the entry) writes LLVM
IR; this package holds what that code meets at run time: the bindings of feed shapes to
run-time params, the thread pool that runs split kernels, the native fast-call path, the
symbols native code calls, loading object code into this process, and the caches of
object code and entries. The pool and the fast-call path are native code themselves,
written as LLVM IR once per process, so they compile it through ``jit`` too.
"""
