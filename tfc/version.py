"""tfc's version. A base module, so that the artifacts (``created_by``) and the cli
(``tfc --version``) name it without importing the public API (``tfc/__init__.py``)."""

__version__ = "0.1.0"
