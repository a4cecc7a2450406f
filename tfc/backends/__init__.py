"""Backends turn an entry graph into something that runs: see ``tfc.backends.base``."""
