"""The IR: types, values, ops, graphs, modules; the op registry; printer, parser, verifier."""
