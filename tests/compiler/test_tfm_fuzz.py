"""Fuzzing the .tfm frontend: any text either builds a module or raises a located
``TfcError`` (file, line, column, caret) — never another exception."""

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfc.compiler.tfm import parse_tfm
from tfc.errors import TfcError
from tfc.ir.core import Module

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SOURCES = [p.read_text() for p in sorted(EXAMPLES.glob("*.tfm"))]
TOKENS = ["input", "param", "fn", "entry", "train", "minimize", "with", "over", "return",
          "(", ")", "{", "}", "[", "]", ",", "=", ":", ";", ".", "@", "+", "-", "*", "/",
          "**", "==", "<", "x", "y", "w1", "l", "relu", "mean", "f32", "i32", "B", "?", "0",
          "1", "-1", "2.5", "1e400", "99999999999999999999999", '"SAME"', '"\\q"', "true",
          "none", "zeros", "glorot_uniform", "adam", "sgd", "random.normal", "seed", "axis",
          "split", "num", "shape", "name", "\n", " ", "#", "\\", '"', "é", "\x00"]
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def check(text: str) -> None:
    try:
        module = parse_tfm(text, "fuzz.tfm")
    except TfcError as e:
        assert e.loc is not None and e.loc.file == "fuzz.tfm", repr(e)
        assert e.loc.line >= 1 and e.loc.column is not None and e.loc.column >= 1, repr(e)
        assert "\n  " in e.message and "^" in e.message, repr(e)  # the line and a caret
        assert str(e).startswith(f"fuzz.tfm:{e.loc.line}:{e.loc.column}: ")
        for internal in ("AttributeError", "KeyError", "IndexError", "TypeError:"):
            assert internal not in e.message, repr(e)  # a bug in the builder, not the input
    else:
        assert isinstance(module, Module) and module.entries


@st.composite
def mutated(draw: st.DrawFn) -> str:
    """An example with a few spans deleted, replaced by a token or copied elsewhere."""
    text = draw(st.sampled_from(SOURCES))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 12)))
        k = draw(st.integers(0, len(text)))
        piece = draw(st.one_of(st.just(""), st.sampled_from(TOKENS),
                               st.just(text[k:k + draw(st.integers(1, 30))])))
        text = text[:i] + piece + text[j:]
    return text


@st.composite
def word_swapped(draw: st.DrawFn) -> str:
    """An example with some whitespace-separated words replaced: mostly well-formed syntax
    with semantic errors (unknown names, ops, attrs; wrong shapes)."""
    words = draw(st.sampled_from(SOURCES)).split(" ")
    for _ in range(draw(st.integers(1, 3))):
        words[draw(st.integers(0, len(words) - 1))] = draw(st.sampled_from(TOKENS))
    return " ".join(words)


@FUZZ
@given(mutated())
def test_mutated_examples(text):
    check(text)


@FUZZ
@given(word_swapped())
def test_examples_with_swapped_words(text):
    check(text)


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map(" ".join))
def test_token_soup(text):
    check(text)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.text(max_size=60))
def test_arbitrary_text(text):
    check(text)


def test_the_examples_themselves_build():
    for text in SOURCES:
        check(text)


def test_deep_nesting_is_a_located_error_or_a_module():
    check("input x: f32[2]\nentry f(x) { return " + "-" * 3000 + "x }")
    check("input x: f32[2]\nentry f(x) { return " + "(" * 3000 + "x" + ")" * 3000 + " }")
    check("input x: f32[2]\nentry f(x) { return " + "relu(" * 400 + "x" + ")" * 400 + " }")
