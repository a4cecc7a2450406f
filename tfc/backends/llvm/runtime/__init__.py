"""The LLVM backend's native run-time glue: what runs the code it generates."""
