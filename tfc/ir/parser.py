"""The parser of the textual IR (docs/ir.md): text -> ``Module``, type-checked as it goes.

lark (LALR, contextual lexer, grammar in ``tfir.lark``) turns text into a tree; this module
walks it, resolving ``%names`` in scope and rebuilding each op through the registry, so
that parsed IR obeys the same rules as built IR: the printed result types must be the
inferred ones. Every problem is a ``ParseError`` located at ``file:line:column`` with the
offending line and a caret; lark's exceptions never escape.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
import json
import math
import re
from typing import Any, Mapping, Sequence

import numpy as np
from lark import Lark, Token, Tree
from lark.exceptions import (LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken)

from tfc.errors import Location, ParseError, TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl
from tfc.ir.printer import ELIDED
from tfc.ir.registry import AttrSpec, OpDef, infer_types, lookup
from tfc.ir.types import DType, TensorType

_DIGITS = re.compile(r"^[0-9]+$")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TYPE = re.compile(r"^([a-z0-9]+)\[([^\]]*)\]$")
_DENSE = re.compile(r"^dense<(\s*)([a-z0-9]+\[[^\]]*\])\s*(?::(.*))?>$", re.DOTALL)
_LOC = re.compile(r"^#[ \t]*(.+?):([0-9]+)(?::([0-9]+))?\s*$")
_DEFS_NAME = re.compile(r'%(?:[A-Za-z0-9_./\-]+|"(?:[^"\\\n]|\\.)*")')
_KEYWORDS: dict[str, Any] = {"true": True, "false": False, "none": None,
                             "inf": float("inf"), "nan": float("nan")}
_KEYWORDS.update({d.value: d for d in DType})

# How terminals read in "expected ..." messages.
_TERMINAL_NAMES = {
    "VALUE": "%value", "DEFS": "'%result ='", "SYMREF": "@name", "KIND": "op kind",
    "TYPE": "type (f32[B,784])", "DENSE": "dense<...>", "STRING": "string",
    "NAME": "name", "WORD": "name", "INT": "integer", "FLOAT": "float", "NEG_INF": "'-inf'",
    "LOC": "'# file:line'", "QMARK": "'?'", "$END": "end of input",
}


@functools.cache
def _lark() -> Lark:
    """The parser, built once per process. Building it (LALR tables) costs ~80 ms, most
    of loading an artifact, so the tables are kept in the user's tfc cache directory
    (``$TFC_CACHE_DIR``, default ``~/.cache/tfc``, the compile cache's), named by a hash
    of the grammar and lark's version, written atomically; any problem with the cache
    only means building the parser again."""
    grammar = importlib.resources.files("tfc.ir").joinpath("tfir.lark").read_text()
    options = dict(parser="lalr", lexer="contextual", maybe_placeholders=True)
    path = _lark_cache_path(grammar)
    if path is not None:
        try:
            with open(path, "rb") as f:
                return Lark.load(f)
        except Exception:  # missing, torn or stale: build it
            pass
    parser = Lark(grammar, **options)
    if path is not None:
        _save_lark(parser, path)
    return parser


def _lark_cache_path(grammar: str) -> str | None:
    import hashlib
    import os
    import lark
    base = os.environ.get("TFC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "tfc")
    key = hashlib.sha256(f"{lark.__version__}\0{grammar}".encode()).hexdigest()[:24]
    return os.path.join(base, "lark", f"tfir-{key}.lalr")


def _save_lark(parser: Lark, path: str) -> None:
    import os
    import tempfile
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                parser.save(f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:  # a read-only home or a full disk only costs the next build
        pass


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse a whole module. Raises ``ParseError`` (never a lark exception)."""
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as e:
        raise syntax_error(e, text, filename, _lark(), _TERMINAL_NAMES) from None
    except LarkError as e:  # defensive: other lark failures still read as parse errors
        raise ParseError(f"cannot parse: {e}", Location(filename, 1, 1)) from None
    try:
        return _ModuleBuilder(text, filename).module(tree)
    except RecursionError:
        raise ParseError("nesting too deep", Location(filename, 1, 1)) from None


# ---- syntax errors ------------------------------------------------------------------------

def source_excerpt(text: str, line: int, column: int) -> str:
    lines = text.split("\n")
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    src = src.rstrip("\r")
    return f"\n  {src}\n  {' ' * max(column - 1, 0)}^"


def _describe_terminal(parser: Lark, names: Mapping[str, str], name: str) -> str:
    if name in names:
        return names[name]
    try:
        pattern = parser.get_terminal(name).pattern
    except (KeyError, LarkError):
        return name.lower()
    if pattern.type == "str":
        return repr(pattern.value)
    return name.lower()


def expected_phrase(parser: Lark, names: Mapping[str, str],
                    terminals: Sequence[str] | set[str] | frozenset[str]) -> str:
    """``"; expected one of ..."`` for lark terminal names (empty when there are none),
    each shown by ``names`` or, for a literal, as the literal."""
    shown = sorted({_describe_terminal(parser, names, n) for n in terminals})
    if not shown:
        return ""
    if len(shown) == 1:
        return f"; expected {shown[0]}"
    return "; expected one of " + ", ".join(shown)


def syntax_error(e: UnexpectedInput, text: str, filename: str, parser: Lark,
                 names: Mapping[str, str]) -> ParseError:
    """A lark syntax error as a ``ParseError`` at ``file:line:column`` with the line and a
    caret: what the textual IR and the ``.tfm`` language both raise."""
    lines = text.split("\n")
    end = (len(lines), len(lines[-1]) + 1)
    line, column = e.line, e.column
    if isinstance(e, UnexpectedToken):
        tok = e.token
        if tok.type == "$END":
            what = "end of input"
            line = getattr(tok, "end_line", None) or end[0]
            column = getattr(tok, "end_column", None) or end[1]
        else:
            what = repr(str(tok))
        msg = f"unexpected {what}{expected_phrase(parser, names, e.accepts or e.expected)}"
    elif isinstance(e, UnexpectedCharacters):
        msg = f"unexpected character {e.char!r}{expected_phrase(parser, names, e.allowed or ())}"
    elif isinstance(e, UnexpectedEOF):
        line, column = end
        msg = f"unexpected end of input{expected_phrase(parser, names, e.expected)}"
    else:
        msg = "syntax error"
    if not isinstance(line, int) or line < 1:
        line, column = 1, 1
    column = column if isinstance(column, int) and column > 0 else 1
    return ParseError(msg + source_excerpt(text, line, column), Location(filename, line, column))


# ---- building the module -----------------------------------------------------------------

class _ModuleBuilder:
    """Walks the parse tree of one text; holds the text for error excerpts."""

    def __init__(self, text: str, filename: str) -> None:
        self.text, self.filename = text, filename

    # errors

    def error(self, message: str, line: int, column: int) -> ParseError:
        return ParseError(message + source_excerpt(self.text, line, column),
                          Location(self.filename, line, column))

    def error_at(self, message: str, tok: Token, offset: int = 0) -> ParseError:
        """An error at ``tok``, or ``offset`` characters into it (newlines counted)."""
        at = _sub_token(tok, offset, "")
        return self.error(message, at.line or 1, at.column or 1)

    # module level

    def module(self, tree: Tree) -> Module:
        module = Module()
        where: dict[str, Token] = {}
        for item in tree.children:
            if item.data == "target":
                tok = self.target(item, module)
                if tok is not None and "target" in where:
                    raise self.error_at(f"the target is given twice (first at line "
                                        f"{where['target'].line})", tok)
                if tok is not None:
                    where["target"] = tok
            elif item.data == "var_decl":
                var, tok = self.var_decl(item)
                if var.name in module.variables:
                    raise self.error_at(f"variable @{var.name} is declared twice "
                                        f"(first at line {where['var ' + var.name].line})", tok)
                where["var " + var.name] = tok
                module.variables[var.name] = var
            else:
                graph, tok = self.graph(item)
                if graph.name in module.graphs:
                    raise self.error_at(f"graph @{graph.name} is defined twice "
                                        f"(first at line {where['graph ' + graph.name].line})",
                                        tok)
                where["graph " + graph.name] = tok
                module.graphs[graph.name] = graph
        return module

    def target(self, tree: Tree, module: Module) -> Token | None:
        """``target {devices=[...], fp16_transfers=bool}`` sets ``module``'s devices and
        fp16 transfers; returns its first attr's token (``None`` for ``target {}``, the
        default target), to locate a repeated target."""
        from tfc.devices import parse_devices
        items = self.attr_items(tree.children[0], {})
        first: Token | None = None
        for key, value, tok in items:
            first = first or tok
            if key == "devices" and isinstance(value, tuple) and value \
                    and all(isinstance(d, str) for d in value):
                try:
                    module.devices = parse_devices(value)
                except TfcError as e:
                    raise self.error_at(f"target: {e.message}", tok) from None
            elif key == "fp16_transfers" and isinstance(value, bool):
                module.fp16_transfers = value
            else:
                raise self.error_at(f"target: unknown or ill-typed attr {key}={value!r} "
                                    f"(known: devices=[\"/cpu:0\", ...], "
                                    f"fp16_transfers=bool)", tok)
        return first

    def var_decl(self, tree: Tree) -> tuple[VariableDecl, Token]:
        ref, type_tok, attr_tree, loc_tok = tree_children(tree)
        var = VariableDecl(self.symbol(ref), self.type(type_tok))
        if attr_tree is not None:
            for key, value, tok in self.attr_items(attr_tree, {}):
                if key == "device" and (value is None or isinstance(value, str)):
                    var.device = value
                elif key == "trainable" and isinstance(value, bool):
                    var.trainable = value
                else:
                    raise self.error_at(f"var @{var.name}: unknown or ill-typed attr {key}="
                                        f"{value!r} (known: device=\"...\", trainable=bool)",
                                        tok)
        var.loc = self.loc(loc_tok)
        return var, ref

    # graphs

    def graph(self, tree: Tree) -> tuple[Graph, Token]:
        head = tree_children(tree)[0]
        ref = head.children[0]
        graph = Graph(self.symbol(ref))
        scope: dict[str, Value] = {}
        for arg in head.children[1:]:
            if arg is None or arg.data != "arg":
                continue
            tok, type_tok = arg.children
            name = self.define_name(tok, scope)
            scope[name] = graph.add_arg(self.type(type_tok), _user_name(name))
        declared: list[tuple[str | None, TensorType, Token]] = []
        for res in head.children[1:]:
            if res is None or res.data != "result":
                continue
            toks = [t for t in res.children if t is not None]
            rname = self.result_name(toks[0]) if len(toks) == 2 else None
            declared.append((rname, self.type(toks[-1]), toks[-1]))
        returned: list[Token] = []
        for child in tree.children[1:]:
            if isinstance(child, Tree):
                graph.ops.append(self.op(child, scope))
            elif isinstance(child, Token):
                returned.append(child)
        values = [self.use(t, scope) for t in returned]
        if len(values) != len(declared):
            at = returned[0] if returned else ref
            raise self.error_at(f"graph @{graph.name} declares {len(declared)} results but "
                                f"returns {len(values)}", at)
        for v, (_, t, tok), use in zip(values, declared, returned):
            if v.type != t:
                raise self.error_at(f"graph @{graph.name}: result {use} has type {v.type}, "
                                    f"but the signature says {t}", use)
        graph.set_results(values, [n if n is not None else f"out{i}"
                                   for i, (n, _, _) in enumerate(declared)])
        return graph, ref

    def define_name(self, tok: Token, scope: Mapping[str, Value]) -> str:
        name = self.value_name(tok)
        if name in scope:
            raise self.error_at(f"value %{name} is defined twice", tok)
        return name

    def use(self, tok: Token, scope: Mapping[str, Value]) -> Value:
        name = self.value_name(tok)
        try:
            return scope[name]
        except KeyError:
            raise self.error_at(f"undefined value {tok}", tok) from None

    # ops

    def op(self, tree: Tree, scope: dict[str, Value]) -> Op:
        defs, kind_tok, args, attr_tree, types_tree, regions_tree, device_tok, loc_tok = \
            tree_children(tree)
        start = defs if defs is not None else kind_tok
        kind = str(kind_tok)
        try:
            opdef = lookup(kind)
        except TfcError as e:
            raise self.error_at(e.message, kind_tok) from None
        attrs: dict[str, Any] = {}
        inputs: list[Value] = []
        for tok in (args.children if args is not None else ()):
            if tok.type == "VALUE":
                inputs.append(self.use(tok, scope))
            elif tok.type == "SYMREF":
                attrs["var"] = self.symbol(tok)
            else:
                attrs["value"] = self.dense(tok)
        if attr_tree is not None:
            for key, value, tok in self.attr_items(attr_tree, opdef.attrs):
                if key in attrs:
                    raise self.error_at(f"{kind}: attr '{key}' is given twice", tok)
                self.check_attr(opdef, key, value, tok)
                attrs[key] = value
        printed = [self.type(t) for t in types_tree.children] if types_tree is not None else []
        regions = [self.graph(g)[0] for g in regions_tree.children] \
            if regions_tree is not None else []
        try:
            _, full, inferred = infer_types(kind, [v.type for v in inputs], attrs)
        except TfcError as e:
            raise self.error_at(e.message, start) from None
        if inferred is not None and inferred != printed:
            shown = ", ".join(map(str, printed)) or "none"
            want = ", ".join(map(str, inferred)) or "none"
            raise self.error_at(f"{kind}: result types are printed as {shown} but inferred as "
                                f"{want}", start)
        names: list[str] = []
        if defs is not None:
            for m in _DEFS_NAME.finditer(str(defs)):
                name = self.define_name(_sub_token(defs, m.start(), m.group()), scope)
                if name in names:
                    raise self.error_at(f"value %{name} is defined twice", defs, m.start())
                names.append(name)
        if len(names) != len(printed):
            raise self.error_at(f"{kind}: {len(names)} result names but {len(printed)} result "
                                f"types", start)
        device = self.string(device_tok.children[0]) if device_tok is not None else None
        op = Op(kind, inputs, full, printed, device=device, loc=self.loc(loc_tok),
                regions=regions, names=[_user_name(n) for n in names])
        for name, value in zip(names, op.results):
            scope[name] = value
        return op

    # attrs

    def check_attr(self, opdef: OpDef, key: str, value: Any, tok: Token) -> None:
        """Unknown or ill-kinded attrs are errors at the attr (the registry checks again)."""
        spec = opdef.attrs.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, list(opdef.attrs), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            known = ", ".join(opdef.attrs) or "none"
            raise self.error_at(f"{opdef.name}: unknown attr '{key}'{hint} (known: {known})",
                                tok)
        try:
            spec.check(opdef.name, key, value)
        except TfcError as e:
            raise self.error_at(e.message, tok) from None

    def attr_items(self, tree: Tree, specs: Mapping[str, AttrSpec]
                   ) -> list[tuple[str, Any, Token]]:
        out: list[tuple[str, Any, Token]] = []
        seen: set[str] = set()
        for attr in tree_children(tree):
            if attr is None:
                continue
            key_tok, value_tree = attr.children
            key = self.string(key_tok) if key_tok.type == "STRING" else str(key_tok)
            if key in seen:
                raise self.error_at(f"attr '{key}' is given twice", key_tok)
            seen.add(key)
            spec = specs.get(key)
            out.append((key, self.attr_value(value_tree, spec.kind if spec else None, key_tok),
                        key_tok))
        return out

    def attr_value(self, tree: Tree, kind: str | None, key: Token) -> Any:
        """The value of an attr (``key`` locates errors in values without tokens)."""
        data = tree.data
        if data == "list":
            items = [c for c in tree.children if c is not None]
            if kind == "shape":
                return tuple(self.dim(c, key) for c in items)
            return tuple(self.attr_value(c, None, key) for c in items)
        tok: Token = tree_children(tree)[0]
        if data == "int":
            return int(tok)
        if data == "float":
            value = float(tok)
            if math.isinf(value):  # a FLOAT token spells a finite number (inf is a word)
                raise self.error_at(f"literal {tok} is out of range (larger than any f64)",
                                    tok)
            return value
        if data == "neg_inf":
            return float("-inf")
        if data == "string":
            return self.string(tok)
        if data == "dense":
            return self.dense(tok)
        if data == "word":
            if str(tok) in _KEYWORDS:
                return _KEYWORDS[str(tok)]
            raise self.error_at(f"unknown word '{tok}' (strings are quoted: \"{tok}\"; "
                                f"symbolic dims only appear in shape attrs)", tok)
        raise self.error_at("'?' is a dimension and only appears in shape attrs", tok)

    def dim(self, tree: Tree, key: Token) -> int | str:
        if tree.data in ("word", "string", "unknown_dim"):
            tok: Token = tree_children(tree)[0]
            return self.string(tok) if tree.data == "string" else str(tok)
        if tree.data == "int":
            return int(tree_children(tree)[0])
        what = "a list" if tree.data == "list" else _first_token(tree, key)
        raise self.error_at(f"a shape's dims are sizes, symbols or '?', not {what}",
                            _first_token(tree, key))

    # tokens

    def string(self, tok: Token, offset: int = 0) -> str:
        """A JSON string literal (``tok`` from ``offset`` on)."""
        try:
            value = json.loads(str(tok)[offset:])
        except ValueError as e:
            raise self.error_at(f"bad string literal: {getattr(e, 'msg', e)}", tok,
                                offset + getattr(e, "pos", 0)) from None
        assert isinstance(value, str)
        return value

    def symbol(self, tok: Token) -> str:
        """The name of ``@name`` or ``@"quoted name"``."""
        return self.string(tok, 1) if str(tok).startswith('@"') else str(tok)[1:]

    def value_name(self, tok: Token) -> str:
        """The name of ``%name`` or ``%"quoted name"``."""
        return self.string(tok, 1) if str(tok).startswith('%"') else str(tok)[1:]

    def result_name(self, tok: Token) -> str:
        return self.string(tok) if tok.type == "STRING" else str(tok)

    def type(self, tok: Token) -> TensorType:
        try:
            return _type_of(str(tok))
        except _BadDim as e:
            raise self.error_at(f"bad dimension {e.dim!r} in type {tok}: expected a size, "
                                "a symbol or '?'", tok, e.offset) from None

    def dense(self, tok: Token) -> np.ndarray:
        text = str(tok)
        m = _DENSE.match(text)
        if not m:
            raise self.error_at("bad tensor literal: expected dense<TYPE: v, ...> "
                                "(is a '>' missing?)", tok)
        type_at = len("dense<") + len(m.group(1))
        type_text = m.group(2)
        tm = _TYPE.match(type_text)
        if not tm or tm.group(1) not in _KEYWORDS or not isinstance(_KEYWORDS[tm.group(1)],
                                                                    DType):
            raise self.error_at(f"bad tensor type {type_text!r}", tok, type_at)
        t = self.type(_sub_token(tok, type_at, type_text))
        if not t.is_static:
            raise self.error_at(f"a tensor literal needs a static shape, not {t}", tok, type_at)
        size = t.num_elements() or 0
        body = m.group(3)
        if body is None or not body.strip():
            if size:
                raise self.error_at(f"dense<{t}> needs {size} elements (or 1 for a splat)", tok)
            return np.zeros(t.static_shape, t.dtype.np)
        body_at = m.start(3)
        if body.strip().startswith(ELIDED):
            raise self.error_at(f"the data of this dense<{t}> was elided when the IR was "
                                f"printed for display; print it in full with 'tfc ir --full' "
                                f"or 'tfc ir -o FILE'", tok, body_at + body.index(ELIDED))
        elems = [e.strip() for e in body.split(",")]
        if len(elems) != size and len(elems) != 1:
            raise self.error_at(f"dense<{t}> has {len(elems)} elements, expected {size} "
                                "(or 1 for a splat)", tok, body_at)
        flat = self.elements(elems, t.dtype, tok, body_at)
        if len(elems) == 1:
            try:
                return np.full(t.static_shape, flat[0], dtype=t.dtype.np)
            except (MemoryError, ValueError):
                raise self.error_at(f"dense<{t}> is too large", tok) from None
        return flat.reshape(t.static_shape)

    def elements(self, elems: list[str], dtype: DType, tok: Token, body_at: int) -> np.ndarray:
        """Element texts to an array of ``dtype``; floats go through float64 as the printer
        assumes (it checks that its text parses back this way)."""
        try:
            if dtype == DType.bool:
                if not all(e in ("true", "false") for e in elems):
                    raise ValueError
                return np.array([e == "true" for e in elems], dtype=np.bool_)
            if dtype.is_int:
                wide = np.array(elems, dtype=np.int64)
                info = np.iinfo(dtype.np)
                if (wide < info.min).any() or (wide > info.max).any():
                    raise OverflowError
                return wide.astype(dtype.np)
            wide = np.array(elems, dtype=np.float64)
            with np.errstate(over="ignore"):
                out = wide.astype(dtype.np)
            if np.isinf(out).any() and not all(_spells_inf(e) for e, x in zip(elems, out)
                                               if np.isinf(x)):
                raise OverflowError
            return out
        except (ValueError, OverflowError):
            pass
        offset = body_at
        for part in tok[body_at:-1].split(","):
            e = part.strip()
            if not _element_ok(e, dtype):
                at = offset + (len(part) - len(part.lstrip()))
                why = f" (out of range for {dtype.value})" if _is_number(e) else ""
                raise self.error_at(f"bad {dtype.value} element {e!r}{why}", tok, at)
            offset += len(part) + 1
        raise self.error_at(f"bad {dtype.value} elements", tok, body_at)

    def loc(self, tok: Token | None) -> Location | None:
        if tok is None:
            return None
        m = _LOC.match(str(tok))
        if not m:
            raise self.error_at("a '#' after an op or var is its source location: expected "
                                "'# FILE:LINE' or '# FILE:LINE:COL' (comments start with //)",
                                tok)
        file, line, col = m.groups()
        return Location(file, int(line), int(col) if col is not None else None)


class _BadDim(Exception):
    def __init__(self, dim: str, offset: int) -> None:
        self.dim, self.offset = dim, offset


@functools.lru_cache(maxsize=4096)
def _type_of(text: str) -> TensorType:
    """A TYPE token's type (cached: a graph repeats a few types many times)."""
    m = _TYPE.match(text)
    assert m, text  # the lexer only makes TYPE tokens of this form
    dtype, body = m.groups()
    dims: list[int | str] = []
    if body.strip():
        offset = len(dtype) + 1
        for part in body.split(","):
            d = part.strip()
            if _DIGITS.match(d):
                dims.append(int(d))
            elif d == "?" or _SYMBOL.match(d):
                dims.append(d)
            else:
                raise _BadDim(d, offset + len(part) - len(part.lstrip()))
            offset += len(part) + 1
    return TensorType(DType(dtype), tuple(dims))


def _element_ok(e: str, dtype: DType) -> bool:
    if dtype == DType.bool:
        return e in ("true", "false")
    try:
        if dtype.is_int:
            v = int(e)
            info = np.iinfo(dtype.np)
            return info.min <= v <= info.max
        x = float(e)
        with np.errstate(over="ignore"):
            return not np.isinf(dtype.np.type(x)) or _spells_inf(e)
    except ValueError:
        return False


def _spells_inf(e: str) -> bool:
    """Whether an element's text is an infinity (``inf``, ``-inf``), not a finite number
    too large for its dtype (``1e999``, ``70000.0`` in f16: out of range)."""
    return e.lstrip("+-").lower() in ("inf", "infinity")


def _is_number(e: str) -> bool:
    try:
        float(e)
    except ValueError:
        return False
    return True


def tree_children(tree: Tree) -> list[Any]:
    """``tree``'s children, typed as the grammar makes them (which one is a token, a
    subtree or, with ``maybe_placeholders``, None), which lark's ``Token | Tree`` cannot
    say: for walkers of lark trees (this parser, the ``.tfm`` front end)."""
    return tree.children


def _first_token(tree: Tree | Token, default: Token) -> Token:
    """The first token of a subtree (where an error about it points), or ``default`` for a
    subtree without tokens (an empty list)."""
    if isinstance(tree, Token):
        return tree
    for tok in tree.scan_values(lambda v: isinstance(v, Token)):
        return tok
    return default


def _sub_token(tok: Token, offset: int, text: str) -> Token:
    """A token for ``text`` found ``offset`` characters into ``tok`` (for positions)."""
    before = str(tok)[:offset]
    line, column = tok.line or 1, tok.column or 1
    if "\n" in before:
        line += before.count("\n")
        column = len(before) - before.rfind("\n")
    else:
        column += offset
    return Token("SUB", text, line=line, column=column)


def _user_name(name: str) -> str | None:
    """A name made only of digits is a number the printer assigns, not a user's name."""
    return None if not name or _DIGITS.match(name) else name

