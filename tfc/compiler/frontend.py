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
from typing import Any

from tfc.errors import Location, TfcError
from tfc.ir.core import Module


def load_model(path: str | os.PathLike[str], partitioner: Any = None) -> Module:
    """The module a model file defines (``.py``, ``.tfm`` or ``.tfir``). ``partitioner``
    (``tfc compile --cluster``'s automatic split): its large variables split by rows after
    the module is built, the same for every frontend (``tfc.api.split_variables``)."""
    p = Path(path)
    if not p.exists():
        raise TfcError(f"no such model file: {p}")
    if p.is_dir():
        raise TfcError(f"{p} is a directory, not a model file")
    if p.suffix not in (".py", ".tfm", ".tfir"):
        raise TfcError(f"{p}: unknown model format '{p.suffix}' (expected .py, .tfm or .tfir)")
    if p.suffix == ".py":  # Python reads it itself (a PEP 263 coding line may say how)
        if not p.read_bytes().strip():
            raise TfcError(f"{p}: empty input (the file is empty)")
        module = _load_python(p)
    else:
        module = _load_text(p)
    if partitioner is not None:
        from tfc.api.split_variables import split_variables
        split_variables(module, partitioner)
    return module


def _load_text(p: Path) -> Module:
    text = read_source(p)
    if not text.strip():
        raise TfcError(f"{p}: empty input (the file is empty)")
    if p.suffix == ".tfm":
        from tfc.compiler.tfm import parse_tfm
        return parse_tfm(text, str(p))
    from tfc.ir.parser import parse_module
    module = parse_module(text, str(p))
    if not module.entries:
        raise TfcError(f"{p}: the IR defines no graphs to run (only comments"
                       f"{' and variables' if module.variables else ''}"
                       f"{' and @__init__' if module.graphs else ''})")
    return module


def read_source(path: str | os.PathLike[str]) -> str:
    """The text of a source file (model or IR), which must be UTF-8."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TfcError(f"{p}: not a UTF-8 text file ({e.reason} at byte {e.start})") from None


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


