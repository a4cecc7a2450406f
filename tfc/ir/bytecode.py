"""The IR bytecode: a ``Module`` as compact JSON, for tools (artifacts) rather than people.

As in MLIR, the textual IR (``printer``/``parser``) is the form people read and write,
and this is the form machines exchange: loading an artifact used to spend most of its
time importing lark and lexing the text. Decoding this needs only ``json`` and the
registry (it never imports lark or ``tfc.ir.parser``), yet checks as much as the parser
does: every op is rebuilt through the registry, its attrs checked against the op's
schema and its stored result types compared with the inferred ones, so a corrupt or
hand-edited bytecode raises a ``BytecodeError`` (a ``TfcError``) naming the file and the
op, never a Python exception.

Encoding (version 1; docs/ir.md, "Bytecode"), one UTF-8 JSON object::

    {"format": "tfc-ir-bytecode", "version": 1,
     "types": [[DTYPE, [DIM, ...]], ...],          # every distinct TensorType, by index
     "files": [FILE, ...],                         # every distinct location file, by index
     "target"?: {"devices"?: [DEVICE, ...], "fp16_transfers"?: true},
     "variables": [{"name", "type", "device"?, "trainable"?, "loc"?}, ...],
     "graphs": [GRAPH, ...]}
    GRAPH = {"name", "args": [[TYPE, NAME|null], ...], "ops": [OP, ...],
             "results": [ID, ...], "result_names": [STR, ...]}
    OP = {"op": KIND, "in"?: [ID, ...], "attrs"?: {NAME: ATTR}, "types"?: [TYPE, ...],
          "names"?: [NAME|null, ...], "device"?: STR, "loc"?: [FILE, LINE, COL|null],
          "regions"?: [GRAPH, ...]}

``TYPE`` indexes ``types`` and ``FILE`` indexes ``files``. Values are numbered per graph:
the arguments ``0..n-1``, then each op's results in order; a region numbers afresh (it
is isolated from above). An ``ATTR`` is JSON ``null``/``true``/``false``/integer/string,
a finite float as a JSON number (always with a point or exponent, ``-0.0`` included), a
list for a tuple, or an object with one tag: ``{"float": "inf"|"-inf"|"nan"}``,
``{"dtype": "f32"}``, ``{"tensor": DTYPE, "shape": [...], "data": BASE64}`` (the
little-endian bytes, row-major) or ``{"tensor": ..., "shape": ..., "splat": BASE64}``
(one element repeated). Keys marked ``?`` are left out when empty or at their default.

Version 2 (written only where it is used, else version 1): a region with the content of
one written in full before it (all but its name and its arguments' names) may be written
as ``{"name", "like": K, "arg_names"?: [NAME|null, ...]}``, a copy of the ``K``-th region
written in full, counted from 0 in the order they end (nested regions first). Fusion
regions repeat one body per layer: this halves a lowered MLP's bytecode, and the decoder
reads each body once and copies it (as ``Graph.clone`` would: the copies share attrs and
types, which is what lets the verifier check each distinct op once); told which regions
are copies (``module_from_bytes(copies=)``), ``verify_module`` checks each body once.

The encoder writes the JSON text itself, each piece that repeats (a kind, a type, a
location, a name, an attrs view) encoded once: the same bytes as ``json.dumps`` of the
tree the document is (compact, ASCII), in about two thirds of the time that building the
tree and dumping it took.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import operator
from typing import Any, Mapping, NoReturn, Sequence, TypeGuard

import numpy as np

from tfc.errors import Location, TfcError
from tfc.ir.core import Graph, Module, Op, Value, VariableDecl, frozen_attrs
from tfc.ir.registry import infer_types, lookup
from tfc.ir.types import DType, TensorType

FORMAT = "tfc-ir-bytecode"
VERSION = 2  # the newest version this module reads (it writes 1 where it can)

_SPECIAL_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_DTYPES = {d.value: d for d in DType}


class BytecodeError(TfcError):
    """IR bytecode that cannot be decoded (corrupt, hand-edited or from a newer tfc), or
    a module that cannot be encoded."""


# ---- encoding ---------------------------------------------------------------------------

def module_to_bytes(module: Module) -> bytes:
    """The bytecode of ``module``'s variables and graphs (what ``print_module`` prints;
    memory plans and placement reports are derived and not stored)."""
    enc = _Encoder()
    try:
        variables = ",".join([enc.var(v) for v in module.variables.values()])
        graphs = ",".join([enc.graph(g) for g in module.graphs.values()])
        target: dict[str, Any] = {}
        if module.devices:
            target["devices"] = list(module.devices)
        if module.fp16_transfers:
            target["fp16_transfers"] = True
        # version 1 unless a region refers to another (what version 1 readers cannot read)
        text = (f'{{"format":{_FORMAT_TEXT},"version":{2 if enc.refs else 1},'
                f'"types":{_dumps(enc.types)},"files":{_dumps(enc.files)},'
                f'"variables":[{variables}],"graphs":[{graphs}]'
                + (f',"target":{_dumps(target)}}}' if target else "}"))
        return text.encode("ascii")
    except (TypeError, ValueError, UnicodeEncodeError) as e:
        # defensive: names and devices are strings, attrs are what _encode_attr emits
        raise BytecodeError(f"cannot encode the module as bytecode: {e}") from None


# JSON text as ``json.dumps(v, separators=(",", ":"), allow_nan=False)`` writes it (the
# encoder writes the document as text: what json.dumps would write of the tree, built
# from pieces each encoded once, which halved the cost of building the tree then dumping it)
_dumps = functools.partial(json.dumps, separators=(",", ":"), allow_nan=False,
                           check_circular=False)
_json_str = json.encoder.encode_basestring_ascii  # a str, as json.dumps writes one
_FORMAT_TEXT = _json_str(FORMAT)
_NAME = operator.attrgetter("name")


class _Encoder:
    """Writes the JSON text, interning types and location files into tables.

    Each piece that repeats is encoded once: types, locations, names and kinds by value,
    and an attrs view ops share (clones and decoded ops share the view of the op they
    copy: ``Op.clone``) by identity (the identity memos hold the objects they are keyed
    by, so an id is not reused meanwhile). Values are written as the text of their number
    (``ids``), once each."""

    def __init__(self) -> None:
        self.types: list[list[Any]] = []
        self.type_ids: dict[tuple[int, tuple], str] = {}  # (id(dtype), shape) -> index text
        self.type_objs: dict[int, tuple[TensorType, str]] = {}  # id(type) -> it, its index
        self.files: list[str] = []
        self.file_ids: dict[str, int] = {}
        self.locs: dict[tuple, str] = {}  # (file, line, column) -> [FILE,LINE,COL] text
        self.texts: dict[Any, str] = {}  # a name, device or kind -> its JSON text
        self.kinds: dict[str, str] = {}  # an op's kind -> '{"op":KIND'
        self.type_parts: dict[int, tuple[TensorType, str]] = {}  # id(t) -> ',"types":[T]'
        self.loc_parts: dict[tuple, str] = {}  # (file, line, column) -> ',"loc":[...]'
        self.tensors: dict[tuple, Any] = {}  # small tensors by content
        self.by_id: dict[int, tuple[Any, Any]] = {}  # id(object) -> (object, its encoding)
        self.attr_texts: dict[int, tuple[Any, str]] = {}  # id(attrs) -> (attrs, its text)
        self.array_texts: dict[tuple, str] = {}  # small arrays' JSON text by content
        self.tuple_texts: dict[tuple, str] = {}  # tuples of ints' JSON text
        # regions written in full, numbered as they end; the number of each by content
        self.full_regions = 0
        self.region_ids: dict[Any, int] = {}
        self.keys: dict[int, tuple[Graph, tuple | None]] = {}  # id(region) -> its content
        self.refs = False  # whether a region was written as a reference (version 2)

    def type(self, t: TensorType) -> str:
        """The index of ``t`` in the types table, as text."""
        hit = self.type_objs.get(id(t))
        if hit is not None:
            return hit[1]
        key = (id(t.dtype), t.shape)  # (DType members are singletons: a cheaper hash)
        i = self.type_ids.get(key)
        if i is None:
            i = self.type_ids[key] = str(len(self.types))
            self.types.append([t.dtype.value, list(t.shape)])
        self.type_objs[id(t)] = (t, i)
        return i

    def loc(self, loc: Location) -> str:
        """``loc`` as ``[FILE, LINE, COLUMN]`` text, its file interned."""
        key = (loc.file, loc.line, loc.column)
        out = self.locs.get(key)
        if out is None:
            i = self.file_ids.get(loc.file)
            if i is None:
                i = self.file_ids[loc.file] = len(self.files)
                self.files.append(loc.file)
            out = self.locs[key] = _dumps([i, loc.line, loc.column])
        return out

    def types_part(self, t: TensorType) -> str:
        """``,"types":[T]``: the types of an op with one result, of type ``t``."""
        out = ',"types":[' + self.type(t) + "]"
        self.type_parts[id(t)] = (t, out)
        return out

    def loc_part(self, loc: Location) -> str:
        out = self.loc_parts[loc.file, loc.line, loc.column] = ',"loc":' + self.loc(loc)
        return out

    def text(self, v: Any) -> str:
        """A name, device or kind (a string, or null) as JSON text."""
        if type(v) is not str:
            return _dumps(v)  # (null; anything else is not a name: json.dumps says so)
        out = self.texts.get(v)
        if out is None:
            out = self.texts[v] = _json_str(v)
        return out

    def attrs(self, attrs: Mapping[str, Any], g: Graph, index: int, kind: str) -> Any:
        hit = self.by_id.get(id(attrs))
        if hit is not None:
            return hit[1]
        out = {}
        for k, v in attrs.items():
            if type(v) is str:
                out[k] = v
            else:
                try:
                    out[k] = self.attr(v)
                except _Unencodable as e:
                    where = f"@{g.name}: op {index} '{kind}'"
                    raise BytecodeError(f"cannot encode {where}: attr {k}{e.args[0]}") from None
        self.by_id[id(attrs)] = (attrs, out)
        return out

    def attrs_part(self, attrs: Mapping[str, Any], g: Graph, index: int, kind: str) -> str:
        """``,"attrs":{...}``: an op's attrs as text, once per attrs view. Attrs of strings,
        integers, booleans and nulls (most of them, each op with its own view) are
        written here, the others by json.dumps of their encoding."""
        text = self.texts.get
        items = []
        for k, v in attrs.items():
            t = type(v)
            if t is str:
                vt = text(v)
                items.append(f"{_json_str(k)}:{_json_str(v) if vt is None else vt}")
            elif t is bool:
                items.append(f"{_json_str(k)}:{'true' if v else 'false'}")
            elif t is int:
                items.append(f"{_json_str(k)}:{int.__repr__(v)}")
            elif v is None:
                items.append(f"{_json_str(k)}:null")
            else:
                vt = self.value_text(v)
                if vt is None:
                    out = ',"attrs":' + _dumps(self.attrs(attrs, g, index, kind))
                    break
                items.append(f"{_json_str(k)}:{vt}")
        else:
            out = ',"attrs":{' + ",".join(items) + "}"
        self.attr_texts[id(attrs)] = (attrs, out)
        return out

    def value_text(self, v: Any) -> str | None:
        """The JSON text of the attr value ``v`` (as json.dumps writes it within the attrs'
        object) where it is a small array or a tuple of ints, by content (a model's
        constants and axes repeat: json.dumps per op was a third of encoding a deep
        model's ops); ``None`` for any other value (``attrs`` encodes those)."""
        t = type(v)
        if t is np.ndarray:
            if v.nbytes > 64:
                return None
            key: Any = (v.dtype.str, v.shape, v.tobytes())
            texts = self.array_texts
        elif t is tuple:
            for x in v:
                if type(x) is not int:  # (True == 1: a tuple of bools is not one of ints)
                    return None
            key, texts = v, self.tuple_texts
        else:
            return None
        out = texts.get(key)
        if out is None:
            try:
                out = texts[key] = _dumps(self.attr(v))
            except _Unencodable:
                return None  # (``attrs`` says what cannot be encoded, and where)
        return out

    def attr(self, v: Any) -> Any:
        if isinstance(v, np.ndarray) and v.nbytes <= 64:  # (a constant's scalar, say)
            key = (v.dtype.str, v.shape, v.tobytes())
            out = self.tensors.get(key)
            if out is None:
                out = self.tensors[key] = _encode_attr(v)
            return out
        return _encode_attr(v)

    def var(self, v: VariableDecl) -> str:
        out = f'{{"name":{self.text(v.name)},"type":{self.type(v.type)}'
        if v.device is not None:
            out += ',"device":' + self.text(v.device)
        if not v.trainable:
            out += ',"trainable":false'
        if v.loc is not None:
            out += ',"loc":' + self.loc(v.loc)
        return out + "}"

    def args(self, g: Graph, ids: dict[Value, str]) -> list[str]:
        """The index texts of ``g``'s argument types (numbering the arguments in ``ids``)."""
        out = []
        type_objs = self.type_objs
        for a in g.args:
            ids[a] = str(len(ids))
            t = type_objs.get(id(a.type))
            out.append(self.type(a.type) if t is None else t[1])
        return out

    def graph(self, g: Graph) -> str:
        ids: dict[Value, str] = {}
        types = self.args(g, ids)
        text = self.text
        args = ",".join([f"[{t},{text(a.name)}]" for t, a in zip(types, g.args)])
        return f'{{"name":{text(g.name)},"args":[{args}],{self.body(g, ids)}'

    def body(self, g: Graph, ids: dict[Value, str]) -> str:
        """``"ops":[...],"results":[...],"result_names":[...]}``: what ``graph`` writes
        after the arguments (numbered in ``ids``)."""
        ops = []
        # (``op`` inline, with the memos at hand: this loop is the encoding)
        kinds, type_parts, loc_parts, attr_texts = self.kinds, self.type_parts, \
            self.loc_parts, self.attr_texts
        text = self.text
        get = ids.__getitem__
        for i, op in enumerate(g.ops):
            kind = op.kind
            s = kinds.get(kind)
            if s is None:
                s = kinds[kind] = '{"op":' + text(kind)
            if op.inputs:
                try:
                    s += ',"in":[' + ",".join(map(get, op.inputs)) + "]"
                except KeyError:
                    raise BytecodeError(f"cannot encode @{g.name}: op {i} '{kind}' uses a "
                                        f"value not defined before it in its graph") from None
            attrs = op.attrs
            if attrs:
                hit = attr_texts.get(id(attrs))
                s += hit[1] if hit is not None else self.attrs_part(attrs, g, i, kind)
            results = op.results
            if len(results) == 1:  # (most ops)
                r = results[0]
                t = type_parts.get(id(r.type))
                s += self.types_part(r.type) if t is None else t[1]
                if r.name is not None:
                    s += ',"names":[' + text(r.name) + "]"
                ids[r] = str(len(ids))  # (its regions number their own values)
            elif results:
                s += ',"types":[' + ",".join([self.type(r.type) for r in results]) + "]"
                if any(r.name is not None for r in results):
                    s += ',"names":[' + ",".join([text(r.name) for r in results]) + "]"
                for r in results:
                    ids[r] = str(len(ids))
            if op.device is not None:
                s += ',"device":' + text(op.device)
            loc = op.loc
            if loc is not None:
                enc = loc_parts.get((loc.file, loc.line, loc.column))
                s += self.loc_part(loc) if enc is None else enc
            if op.regions:
                s += ',"regions":[' + ",".join([self.region(r) for r in op.regions]) + "]"
            ops.append(s + "}")
        try:
            result_ids = ",".join(map(get, g.results))
        except KeyError:
            v = next(v for v in g.results if v not in ids)
            raise BytecodeError(f"cannot encode @{g.name}: a result is not defined in "
                                f"the graph ({v!r})") from None
        names = g.result_names
        if len(names) != len(g.results):
            names = (list(names) + [f"out{i}" for i in range(len(names), len(g.results))]
                     )[:len(g.results)]
        return (f'"ops":[{",".join(ops)}],"results":[{result_ids}],'
                f'"result_names":[{",".join([text(n) for n in names])}]}}')

    def region(self, r: Graph) -> str:
        """A region in full, or (version 2) a reference to one written before with the
        same content, up to its name and its arguments' names (fusion regions repeat
        the same body once per layer)."""
        for op in r.ops:
            if op.regions:
                # (the text of a region names the regions in it by number: keyed by content)
                key: Any = self.content(r)
                k = self.region_ids.get(key) if key is not None else None
                out = None if k is not None else self.graph(r)
                break
        else:  # keyed by its text but its names (encoding it cost no more than a key)
            ids: dict[Value, str] = {}
            types = self.args(r, ids)
            body = self.body(r, ids)
            key = ",".join(types) + body
            k = self.region_ids.get(key)
            if k is None:
                text = self.text
                args = ",".join([f"[{t},{text(a.name)}]" for t, a in zip(types, r.args)])
                out = f'{{"name":{text(r.name)},"args":[{args}],{body}'
        if k is not None:
            self.refs = True
            names = [a.name for a in r.args]
            if names.count(None) == len(names):
                return f'{{"name":{self.text(r.name)},"like":{k}}}'
            return (f'{{"name":{self.text(r.name)},"like":{k},'
                    f'"arg_names":[{",".join([self.text(n) for n in names])}]}}')
        if key is not None:
            self.region_ids[key] = self.full_regions
        self.full_regions += 1
        assert out is not None
        return out

    def content(self, g: Graph) -> tuple | None:
        """What ``graph`` encodes ``g`` as, but its name and its arguments' names, as a
        hashable key (cheaper than encoding it: types, locations and attrs by their
        memos); ``None`` where encoding ``g`` fails (``graph`` says why). For a region
        with regions in it, whose text would name those by their numbers."""
        hit = self.keys.get(id(g))
        if hit is not None:
            return hit[1]
        ids: dict[Value, int] = {}
        type_, locs, attrs_, content = self.type, self.loc_key, self.attrs_text, self.content
        args = []
        for a in g.args:
            ids[a] = len(ids)
            args.append(type_(a.type))
        ops: list[tuple] = []
        key: tuple | None = None
        get = ids.__getitem__
        try:
            for i, op in enumerate(g.ops):
                results = op.results
                regions = op.regions
                ops.append((op.kind, tuple(map(get, op.inputs)),
                            attrs_(op.attrs, g, i, op.kind) if op.attrs else None,
                            tuple([type_(r.type) for r in results]),
                            tuple(map(_NAME, results)), op.device, locs(op.loc),
                            tuple([(r.name, tuple(map(_NAME, r.args)), content(r))
                                   for r in regions]) if regions else None))
                for r in results:
                    ids[r] = len(ids)
            names = list(g.result_names) + [
                f"out{i}" for i in range(len(g.result_names), len(g.results))]
            key = (tuple(args), tuple(ops), tuple(map(get, g.results)),
                   tuple(names[:len(g.results)]))
        except KeyError:  # a value used where it is not defined: not encodable
            key = None
        self.keys[id(g)] = (g, key)
        return key

    def loc_key(self, loc: Location | None) -> tuple | None:
        if loc is None:
            return None
        self.loc(loc)  # (interns its file, as encoding it would)
        return (loc.file, loc.line, loc.column)

    def attrs_text(self, attrs: Mapping[str, Any], g: Graph, index: int, kind: str) -> str:
        """The encoding of ``attrs`` as JSON text (a key for ``content``)."""
        hit = self.attr_texts.get(id(attrs))
        return hit[1] if hit is not None else self.attrs_part(attrs, g, index, kind)


class _Unencodable(Exception):
    """An attr value bytecode cannot hold; ``args[0]`` says which, after the attr name."""


def _encode_attr(v: Any) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        x = float(v)
        if math.isfinite(x):
            return x
        return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if isinstance(v, DType):
        return {"dtype": v.value}
    if isinstance(v, (tuple, list)):
        return [_encode_attr(x) for x in v]
    if isinstance(v, np.ndarray):
        return _encode_tensor(v)
    raise _Unencodable(f"={v!r} of type {type(v).__name__}")


def _encode_tensor(a: np.ndarray) -> dict[str, Any]:
    try:
        dtype = DType.from_numpy(a.dtype)
    except TfcError:
        raise _Unencodable(f" is a tensor of numpy dtype {a.dtype}") from None
    out: dict[str, Any] = {"tensor": dtype.value, "shape": list(a.shape)}
    flat = np.ascontiguousarray(a, dtype=dtype.np.newbyteorder("<")).reshape(-1)
    if flat.size > 1 and _is_splat(flat):
        out["splat"] = base64.b64encode(flat[:1].tobytes()).decode("ascii")
    else:
        out["data"] = base64.b64encode(flat.tobytes()).decode("ascii")
    return out


def _is_splat(flat: np.ndarray) -> bool:
    """Every element has the first one's bytes (so NaN payloads and -0.0 are kept)."""
    raw = flat.view(np.uint8).reshape(flat.size, flat.itemsize)
    return bool(np.all(raw == raw[0]))


# ---- decoding ---------------------------------------------------------------------------

def module_from_bytes(data: bytes, filename: str = "<bytecode>", *,
                      infer: bool = True, copies: dict[int, Graph] | None = None) -> Module:
    """The module encoded in ``data``, every op rebuilt and type-checked through the
    registry; any problem is a ``BytecodeError`` naming ``filename`` (and the graph and
    op). Like ``parse_module`` it does not run the verifier.

    ``infer=False`` rebuilds each op from its stored attrs and result types without
    inferring them: only for a caller that runs the verifier on the result next, which
    infers every op's types again and checks its attrs (complete, in normal form), so
    each op is inferred once instead of twice (``tfc.api.lowered_cache``: the
    re-inference was most of reading a 256-layer model back).

    ``copies``, where given, receives ``id(region) -> the region it is a copy of`` for
    each region read as a (version 2) reference: for ``verify_module``, which checks
    such a copy once, as the region it copies (a 64-layer MLP's fusion regions are
    mostly copies)."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise BytecodeError(f"{filename}: not valid IR bytecode (truncated or corrupt JSON: "
                            f"{e})") from None
    except RecursionError:
        raise BytecodeError(f"{filename}: IR bytecode nested too deeply") from None
    try:
        return _Decoder(filename, infer, copies).module(doc)
    except RecursionError:
        raise BytecodeError(f"{filename}: IR bytecode nested too deeply") from None


class _Decoder:
    """Rebuilds a module from the JSON tree; ``where`` says what is being read, for errors."""

    def __init__(self, filename: str, infer: bool = True,
                 copies: dict[int, Graph] | None = None) -> None:
        self.filename = filename
        self.copies = copies  # id(region) -> the region it copies (module_from_bytes)
        self.infer = infer  # False: stored attrs and types as they are (module_from_bytes)
        self.where = ""
        self.types: list[TensorType] = []
        self.files: list[str] = []
        self.version = 1
        self.full_regions: list[Graph] = []  # the regions read in full, as they end
        self.recipes: dict[int, tuple | None] = {}  # what copying each of them needs
        self.kinds: set[str] = set()  # the op kinds found in the registry (op_fast)
        # each distinct attrs object (by its JSON) decoded once, the ops share the view
        self.attrs_memo: dict[Any, Mapping[str, Any]] = {}
        self.full_memo: dict[tuple[str, int], Mapping[str, Any]] = {}  # (ids of the above)
        self.locs: dict[tuple[int, int, int | None], Location] = {}  # op_fast's

    def fail(self, message: str) -> NoReturn:
        at = f"{self.where}: " if self.where else ""
        raise BytecodeError(f"{self.filename}: {at}{message}")

    # checked JSON access

    def field(self, obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...],
              default: Any = ...) -> Any:
        if key not in obj:
            if default is not ...:
                return default
            self.fail(f"lacks the field '{key}'")
        v = obj[key]
        if not isinstance(v, kind) or (isinstance(v, bool) and kind is int):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(
                k.__name__ for k in kind)
            self.fail(f"field '{key}' should be {_JSON_NAMES.get(names, names)}, not "
                      f"{_json_kind(v)}")
        return v

    def index(self, v: Any, table: Sequence[Any], what: str) -> int:
        if not _is_int(v) or not 0 <= v < len(table):
            self.fail(f"bad {what} index {v!r} (the table has {len(table)})")
        return v

    # module level

    def target(self, target: Mapping[str, Any], module: Module) -> None:
        """The devices and fp16 transfers of the module (the text's ``target``)."""
        from tfc.devices import parse_devices
        self.where = "target"
        devices = self.field(target, "devices", list, [])
        if devices:
            if not all(isinstance(d, str) for d in devices):
                self.fail("devices should be a list of strings")
            try:
                module.devices = parse_devices(devices)
            except TfcError as e:
                self.fail(e.message)
        module.fp16_transfers = self.field(target, "fp16_transfers", bool, False)
        self.where = ""

    def module(self, doc: Any) -> Module:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else _json_kind(doc)
            self.fail(f"not IR bytecode (format is {found!r}, expected {FORMAT!r})")
        version = doc.get("version")
        if not _is_int(version) or version < 1:
            self.fail(f"invalid bytecode version {version!r}")
        if version > VERSION:
            self.fail(f"IR bytecode version {version}, but this tfc reads version "
                      f"{VERSION} at most; upgrade tfc to load it")
        self.version = version
        self.files = self.field(doc, "files", list)
        for i, f in enumerate(self.files):
            if not isinstance(f, str):
                self.fail(f"files[{i}] should be a string, not {_json_kind(f)}")
        self.types = [self.type_entry(i, t) for i, t in enumerate(self.field(doc, "types",
                                                                             list))]
        module = Module()
        self.target(self.field(doc, "target", dict, {}), module)
        for i, v in enumerate(self.field(doc, "variables", list)):
            self.where = f"variables[{i}]"
            var = self.var(v)
            if var.name in module.variables:
                self.fail(f"variable @{var.name} is declared twice")
            module.variables[var.name] = var
        self.where = ""
        for i, g in enumerate(self.field(doc, "graphs", list)):
            self.where = f"graphs[{i}]"
            graph = self.graph(g, "")
            if graph.name in module.graphs:
                self.where = ""
                self.fail(f"graph @{graph.name} is defined twice")
            module.graphs[graph.name] = graph
        return module

    def type_entry(self, i: int, t: Any) -> TensorType:
        self.where = f"types[{i}]"
        if not isinstance(t, list) or len(t) != 2 or not isinstance(t[1], list):
            self.fail(f"a type is [dtype, [dims]], not {t!r}")
        dtype = _DTYPES.get(t[0]) if isinstance(t[0], str) else None
        if dtype is None:
            self.fail(f"unknown dtype {t[0]!r}")
        if any(isinstance(d, bool) for d in t[1]):
            self.fail(f"bad dims {t[1]!r}")
        try:
            out = TensorType(dtype, tuple(t[1]))
        except TfcError as e:
            self.fail(e.message)
        self.where = ""
        return out

    def type(self, v: Any) -> TensorType:
        return self.types[self.index(v, self.types, "type")]

    def loc(self, v: Any) -> Location | None:
        if v is None:
            return None
        if not isinstance(v, list) or len(v) != 3 or not _is_int(v[1]) or not (
                v[2] is None or _is_int(v[2])):
            self.fail(f"a location is [file, line, column|null], not {v!r}")
        key = (self.index(v[0], self.files, "file"), v[1], v[2])
        loc = self.locs.get(key)  # (one object per location, as op_fast makes them)
        if loc is None:
            loc = self.locs[key] = Location(self.files[key[0]], v[1], v[2])
        return loc

    def name(self, v: Any, what: str) -> str | None:
        if v is not None and not isinstance(v, str):
            self.fail(f"{what} should be a string or null, not {_json_kind(v)}")
        return v

    def var(self, v: Any) -> VariableDecl:
        if not isinstance(v, dict):
            self.fail(f"a variable is an object, not {_json_kind(v)}")
        name = self.field(v, "name", str)
        self.where = f"variable @{name}"
        return VariableDecl(name, self.type(v.get("type")),
                            self.name(v.get("device"), "device"),
                            self.field(v, "trainable", bool, True),
                            self.loc(v.get("loc")))

    # graphs and ops

    def graph(self, g: Any, parent: str) -> Graph:
        if not isinstance(g, dict):
            self.fail(f"a graph is an object, not {_json_kind(g)}")
        name = self.field(g, "name", str)
        path = f"{parent}@{name}"
        self.where = path
        graph = Graph(name)
        values: list[Value] = []
        for a in self.field(g, "args", list):
            if not isinstance(a, list) or len(a) != 2:
                self.fail(f"an argument is [type, name], not {a!r}")
            values.append(graph.add_arg(self.type(a[0]), self.name(a[1], "an argument name")))
        append, extend, op_ = graph.ops.append, values.extend, self.op
        for i, op in enumerate(self.field(g, "ops", list)):
            new = op_(op, values, path, i)
            append(new)
            extend(new.results)
        self.where = path
        results = [values[self.value(v, values)] for v in self.field(g, "results", list)]
        names = self.field(g, "result_names", list)
        if len(names) != len(results) or not all(isinstance(n, str) for n in names):
            self.fail(f"result_names should be {len(results)} strings, not {names!r}")
        graph.set_results(results, names)
        return graph

    def value(self, v: Any, values: Sequence[Value]) -> int:
        if not _is_int(v) or not 0 <= v < len(values):
            self.fail(f"uses value {v!r}, which is not defined (yet): {len(values)} values "
                      f"are")
        return v

    def op(self, o: Any, values: Sequence[Value], path: str, i: int) -> Op:
        if not self.infer:
            try:
                return self.op_fast(o, values, path, i)
            except (_Slow, IndexError, KeyError, TypeError, AttributeError, TfcError):
                pass  # not as the encoder writes it: the checked path says what is wrong
        self.where = f"{path}: op {i}"  # (what op_fast needs not: it fails without a word)
        return self.op_checked(o, values, path, i)

    def op_fast(self, o: Any, values: Sequence[Value], path: str, i: int) -> Op:
        """``op_checked`` for an op as the encoder writes it, with the checks done as type
        tests; anything else raises (``_Slow`` or a lookup's error) before a region is
        read, and ``op_checked`` reads the op again and says what is wrong."""
        kind = o["op"]
        if kind not in self.kinds:  # (a str the registry has: tested once per kind)
            if type(kind) is not str:
                raise _Slow
            lookup(kind)
            self.kinds.add(kind)
        ins = o.get("in", _NONE)
        if type(ins) is not list:
            raise _Slow
        inputs = [values[v] if type(v) is int and v >= 0 else _slow() for v in ins]
        raw = o.get("attrs", _EMPTY)
        if type(raw) is not dict:
            raise _Slow
        if raw:
            key: Any = _flat_key(raw)
            if key is not None:
                attrs = self.attrs_memo.get(key)
                if attrs is None:  # (what ``attrs`` decodes such values as: _flat_key)
                    attrs = self.attrs_memo[key] = frozen_attrs(raw)
            else:  # (attrs' key: exact, as there)
                attrs = self.attrs_memo.get(json.dumps(raw, sort_keys=True))
                if attrs is None:  # (a first: decoded where errors are located)
                    raise _Slow
        else:
            attrs = _NO_ATTRS
        tt = self.types
        ts = o.get("types", _NONE)
        if type(ts) is not list:
            raise _Slow
        types = [tt[t] if type(t) is int and t >= 0 else _slow() for t in ts]
        names = o.get("names", _ABSENT)
        if names is _ABSENT:
            names = _NONE
        elif type(names) is not list or len(names) != len(types) or not all(
                n is None or type(n) is str for n in names):
            raise _Slow
        device = o.get("device")
        if device is not None and type(device) is not str:
            raise _Slow
        loc = o.get("loc")
        if loc is not None:
            if type(loc) is not list or len(loc) != 3:
                raise _Slow
            f, line, col = loc
            if type(f) is not int or type(line) is not int or not (
                    col is None or type(col) is int):
                raise _Slow
            key = (f, line, col)
            loc = self.locs.get(key)
            if loc is None:
                if f < 0:
                    raise _Slow
                loc = self.locs[key] = Location(self.files[f], line, col)
        rs = o.get("regions", _NONE)
        if type(rs) is not list:
            raise _Slow
        regions: list[Graph] = []
        if rs:  # (past here errors are the regions' own: no second reading)
            self.where = f"{path}: op {i} '{kind}'" + (f" ({loc})" if loc is not None else "")
            where = self.where
            regions = [self.region(r, f"{path}: op {i} '{kind}' region ") for r in rs]
            self.where = where
        return Op(kind, inputs, attrs, types, device=device, loc=loc, regions=regions,
                  names=names)

    def op_checked(self, o: Any, values: Sequence[Value], path: str, i: int) -> Op:
        if not isinstance(o, dict):
            self.fail(f"an op is an object, not {_json_kind(o)}")
        kind = self.field(o, "op", str)
        self.where = f"{path}: op {i} '{kind}'"
        try:
            lookup(kind)
        except TfcError as e:
            self.fail(e.message)
        loc = self.loc(o.get("loc"))
        if loc is not None:
            self.where += f" ({loc})"
        inputs = [values[self.value(v, values)] for v in self.field(o, "in", list, [])]
        attrs = self.attrs(self.field(o, "attrs", dict, {}))
        types = [self.type(t) for t in self.field(o, "types", list, [])]
        names = self.field(o, "names", list, [None] * len(types))
        if len(names) != len(types):
            self.fail(f"{len(names)} result names but {len(types)} result types")
        names = [self.name(n, "a result name") for n in names]
        device = self.name(o.get("device"), "device")
        where = self.where
        regions = [self.region(r, f"{path}: op {i} '{kind}' region ")
                   for r in self.field(o, "regions", list, [])]
        self.where = where
        if not self.infer:  # the caller verifies the module (module_from_bytes)
            return Op(kind, inputs, attrs, types, device=device, loc=loc, regions=regions,
                      names=names)
        try:
            _, full, inferred = infer_types(kind, [v.type for v in inputs], attrs)
        except TfcError as e:
            self.fail(e.message)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            # an attr of kind "any" an op's infer did not expect: still this file's fault
            self.fail(f"cannot infer the result types ({type(e).__name__}: {e})")
        if inferred is not None and inferred != types:
            shown = ", ".join(map(str, types)) or "none"
            want = ", ".join(map(str, inferred)) or "none"
            self.fail(f"result types are stored as {shown} but inferred as {want}")
        # (check_attrs made ``full`` of the kind and the attrs alone: shared like them)
        shared = self.full_memo.get((kind, id(attrs)))
        if shared is None:
            shared = self.full_memo[kind, id(attrs)] = frozen_attrs(full)
        return Op(kind, inputs, shared, types, device=device, loc=loc, regions=regions,
                  names=names)

    def region(self, r: Any, parent: str) -> Graph:
        """A region in full, or (version 2) ``{"name", "like": K, "arg_names"?}``: a copy
        of the ``K``-th region read in full (numbered as they end), renamed."""
        if self.version < 2 or not isinstance(r, dict) or "like" not in r:
            g = self.graph(r, parent)
            self.full_regions.append(g)
            return g
        name = self.field(r, "name", str)
        self.where = f"{parent}@{name}"
        k = self.index(r["like"], self.full_regions, "region")
        like = self.full_regions[k]
        names = self.field(r, "arg_names", list, [None] * len(like.args))
        if len(names) != len(like.args):
            self.fail(f"arg_names should be {len(like.args)} names, not {names!r}")
        names = [self.name(n, "an argument name") for n in names]
        if k not in self.recipes:
            self.recipes[k] = _recipe(like)
        recipe = self.recipes[k]
        if recipe is not None:
            g = _copy(recipe, name, names)
        else:
            g = like.clone()  # (its ops share their attrs and types: Op.clone)
            g.name = name
            for a, n in zip(g.args, names):
                a.name = n
        if self.copies is not None:
            self.copies[id(g)] = like
        return g

    # attrs

    def attrs(self, raw: dict[str, Any]) -> Mapping[str, Any]:
        """The attrs ``raw`` encodes, frozen (``frozen_attrs``): decoded once per distinct
        JSON, the ops that have the same share the view (and the verifier's check)."""
        if not raw:
            return frozen_attrs(raw)
        key: Any = _flat_key(raw)  # (var names, kinds, flags: the common case)
        if key is None:  # (exact: 1, 1.0, true and -0.0 are different JSON)
            key = json.dumps(raw, sort_keys=True)
        attrs = self.attrs_memo.get(key)
        if attrs is None:
            attrs = frozen_attrs({k: self.attr(v, k) for k, v in raw.items()})
            self.attrs_memo[key] = attrs
        return attrs

    def attr(self, v: Any, key: str) -> Any:
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return tuple(self.attr(x, key) for x in v)
        if isinstance(v, dict) and len(v) == 1 and "float" in v:
            if not isinstance(v["float"], str) or v["float"] not in _SPECIAL_FLOATS:
                self.fail(f"attr {key}: bad float {v['float']!r} (inf, -inf or nan)")
            return _SPECIAL_FLOATS[v["float"]]
        if isinstance(v, dict) and len(v) == 1 and "dtype" in v:
            if not isinstance(v["dtype"], str) or v["dtype"] not in _DTYPES:
                self.fail(f"attr {key}: unknown dtype {v['dtype']!r}")
            return _DTYPES[v["dtype"]]
        if isinstance(v, dict) and "tensor" in v:
            return self.tensor(v, key)
        self.fail(f"attr {key}: cannot decode {v!r}")

    def tensor(self, v: dict[str, Any], key: str) -> np.ndarray:
        what = f"attr {key}"
        dtype = _DTYPES.get(v["tensor"]) if isinstance(v["tensor"], str) else None
        if dtype is None:
            self.fail(f"{what}: unknown tensor dtype {v['tensor']!r}")
        shape = v.get("shape")
        if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
            self.fail(f"{what}: a tensor's shape is a list of sizes, not {shape!r}")
        keys = set(v) - {"tensor", "shape"}
        if keys not in ({"data"}, {"splat"}):
            self.fail(f"{what}: a tensor has 'data' or 'splat', not {sorted(keys)}")
        (part,) = keys
        text = v[part]
        if not isinstance(text, str):
            self.fail(f"{what}: '{part}' should be a base64 string")
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as e:
            self.fail(f"{what}: bad base64 in '{part}' ({e})")
        wire = dtype.np.newbyteorder("<")
        size = math.prod(shape)
        count = 1 if part == "splat" else size
        if len(raw) != count * wire.itemsize:
            self.fail(f"{what}: {dtype.value}{list(shape)} needs {count * wire.itemsize} "
                      f"bytes of '{part}', not {len(raw)}")
        if dtype == DType.bool and any(b > 1 for b in raw):
            self.fail(f"{what}: a bool tensor's bytes are 0 or 1")
        flat = np.frombuffer(raw, dtype=wire)
        try:
            if part == "splat":
                out = np.full(shape, flat[0], dtype=dtype.np)
            else:  # reshape the view, then copy: an array that owns its data
                out = flat.reshape(shape).astype(dtype.np)
        except (MemoryError, ValueError):
            self.fail(f"{what}: {dtype.value}{list(shape)} is too large")
        out.flags.writeable = False  # the op keeps it as it is (no second copy)
        return out


def _recipe(g: Graph) -> tuple | None:
    """What copying ``g`` needs (``_copy``): its argument types, and its ops and results
    with the values they use by position; ``None`` for a region with regions in it."""
    pos: dict[Value, int] = {a: i for i, a in enumerate(g.args)}
    ops = []
    for op in g.ops:
        if op.regions:
            return None
        results = op.results
        names = [r.name for r in results]
        ops.append((op.kind, [pos[v] for v in op.inputs], op.attrs, [r.type for r in results],
                    op.device, op.loc, names if names.count(None) != len(names) else _NONE))
        for r in results:
            pos[r] = len(pos)
    return [a.type for a in g.args], ops, [pos[v] for v in g.results], g.result_names


def _copy(recipe: tuple, name: str, arg_names: Sequence[str | None]) -> Graph:
    """A copy of the region ``recipe`` was taken of (``_recipe``), as ``Graph.clone`` makes
    one (its ops share their attrs, types and locations), under its own names: a version-2
    reference read (a deep model's fusion regions are mostly these: without the mapping
    of old values to new ones a clone keeps, a copy costs half as much)."""
    arg_types, ops, results, result_names = recipe
    g = Graph(name)
    values = [g.add_arg(t, n) for t, n in zip(arg_types, arg_names)]
    append = g.ops.append
    for kind, ins, attrs, types, device, loc, names in ops:
        op = Op(kind, [values[i] for i in ins], attrs, types, device=device, loc=loc,
                names=names)
        append(op)
        values.extend(op.results)
    g.set_results([values[i] for i in results], result_names)
    return g


class _Slow(Exception):
    """An op not as the encoder writes it: read it again with every check (op_checked)."""


def _slow() -> Any:
    raise _Slow


def _flat_key(raw: dict[str, Any]) -> tuple | None:
    """A key of attrs whose values are all strings, integers, booleans or null, or lists
    of those (axes), with each value's type (``true`` is not ``1``); ``None`` for others.
    Such attrs decode to themselves, their lists as tuples (``frozen_attrs`` of them)."""
    out = []
    for k, v in raw.items():
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            out.append((k, t, v))
        elif t is list:
            items = []
            for x in v:
                tx = type(x)
                if tx is str or tx is int or tx is bool or x is None:
                    items.append((tx, x))
                else:
                    return None
            out.append((k, t, tuple(items)))
        else:
            return None
    return tuple(out)


_NONE: list[Any] = []  # (never changed)
_ABSENT: list[Any] = []
_EMPTY: dict[str, Any] = {}  # (never changed)
_NO_ATTRS = frozen_attrs({})


_JSON_NAMES = {"str": "a string", "int": "an integer", "list": "a list", "dict": "an object",
               "bool": "a boolean"}


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    return _JSON_NAMES.get(type(v).__name__, type(v).__name__)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)
