"""Loading a model file into an IR module: Python (traced), the model language or textual IR.

A ``model.tfm`` is parsed and built by ``tfc.compiler.tfm`` (no user code runs). A
``model.py`` is run in a fresh default graph; what it declares with ``tfc.entry(...)``
and its ``@tfc.function``s with an input signature become the module's entries. Errors
raised while the file runs are reported at the line of the model file that caused them.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from tfc.errors import Location, TfcError
from tfc.ir.core import Module


def load_model(path: str | os.PathLike[str]) -> Module:
    """The module a model file defines (``.py``, ``.tfm`` or ``.tfir``)."""
    p = Path(path)
    if not p.is_file():
        raise TfcError(f"no such model file: {p}")
    if p.suffix == ".py":
        return _load_python(p)
    if p.suffix == ".tfm":
        from tfc.compiler.tfm import load_tfm
        return load_tfm(p)
    if p.suffix == ".tfir":
        from tfc.ir.parser import parse_module
        return parse_module(p.read_text(), str(p))
    raise TfcError(f"{p}: unknown model format '{p.suffix}' (expected .py, .tfm or .tfir)")


def _load_python(path: Path) -> Module:
    from tfc.api.graph import Graph
    graph = Graph()
    sys.path.insert(0, str(path.parent))
    try:
        with graph.as_default():
            runpy.run_path(str(path), run_name="__tfc_model__")
            module = graph.as_module()
    except TfcError:
        raise
    except SystemExit as e:
        raise TfcError(f"{path}: the model file called exit({e.code})") from None
    except Exception as e:
        raise TfcError(f"{type(e).__name__}: {e}", _user_frame(e, path)) from e
    finally:
        sys.path.remove(str(path.parent))
    if not module.entries:
        raise TfcError(f"{path}: the model declares no entry points (use tfc.entry(...) or "
                       "@tfc.function(input_signature=...))")
    return module


def _user_frame(e: BaseException, path: Path) -> Location | None:
    """The innermost frame of the traceback in the model file."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    if not frames:
        return None
    f = frames[-1]
    return Location(f.filename, f.lineno or 0)


