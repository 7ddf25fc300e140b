# Copyright 2026 The CoDA for ROS 2 Authors
# SPDX-License-Identifier: Apache-2.0
"""Pure-Python reference implementation of the staged-potential language.

Same language, same API, same errors (message, line, column) and the same float32 results bit
for bit as the C++ implementation (``coda_core_cpp.PotentialProgram``, see
``include/coda_core/potential.hpp`` for the language and its numerics). It exists for
differential testing and as readable documentation; it is a plain interpreter over a parse tree
and never calls ``eval``.

Numerics: every operation is computed on Python floats (IEEE double) and rounded to float32.
For ``+ - * /`` and ``sqrt`` of float32 operands this double rounding gives exactly the
correctly rounded float32 result, i.e. what the C++ code computes in float32.

Why one file of about 730 lines: it mirrors ``src/potential.cpp`` (lexer, parser, type checker) and
``src/potential_eval.cpp`` section by section, in the same order, so a rule is compared across the two
languages in one place; split, the mirror would no longer line up with the C++.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coda_core_cpp.errors import PotentialError

MAX_SOURCE_BYTES = 65536
MAX_DEPTH = 64
MAX_STAGES = 32
KEYWORDS = frozenset({"stage", "and", "or", "not"})
# name -> arity (-2: two or more)
FUNCTIONS: dict[str, int] = {"dist": 2, "dist_xy": 2, "norm": 1, "abs": 1, "exp": 1, "clip": 3, "min": -2, "max": -2}
TYPE_NAMES = {1: "scalar", 2: "vec2", 3: "vec3"}
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})

_F32 = struct.Struct("f")
Value = float | tuple[float, ...]


def f32(x: float) -> float:
    """Round a double to the nearest float32 (ties to even), overflowing to +-inf."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _div(a: float, b: float) -> float:
    if b == 0.0:
        if a != a or a == 0.0:
            return math.nan
        return math.copysign(1.0, a) * math.copysign(1.0, b) * math.inf
    return f32(a / b)


def _exp(x: float) -> float:
    try:
        return f32(math.exp(x))
    except OverflowError:
        return math.inf


def _truthy(x: float) -> bool:
    return x > 0.0 or x < 0.0


def _min(a: float, b: float) -> float:
    if a != a or b != b:
        return math.nan
    return b if b < a else a


def _max(a: float, b: float) -> float:
    if a != a or b != b:
        return math.nan
    return b if b > a else a


def _clip01(p: float) -> float:
    if p != p or p < 0.0:
        return 0.0
    return 1.0 if p > 1.0 else p


def _sqrt_sum_of_squares(values: Sequence[float]) -> float:
    squares = [f32(v * v) for v in values]
    total = squares[0]
    for s in squares[1:]:
        total = f32(total + s)
    return f32(math.sqrt(total))


# ---------------------------------------------------------------------------- lexer


@dataclass(frozen=True)
class _Token:
    kind: str  # number, ident, keyword, op, newline, end
    text: str
    line: int
    col: int
    begin: int
    end: int
    value: float = 0.0


def _describe(t: _Token) -> str:
    if t.kind == "newline":
        return "end of line"
    if t.kind == "end":
        return "end of input"
    return f"'{t.text}'"


def _show_char(c: int) -> str:
    if 0x21 <= c <= 0x7E:
        return f"'{chr(c)}'"
    return f"'\\x{c:02x}'"


def _is_digit(c: int) -> bool:
    return 0x30 <= c <= 0x39


def _is_ident_start(c: int) -> bool:
    return 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or c == 0x5F


def _is_ident_char(c: int) -> bool:
    return _is_ident_start(c) or _is_digit(c)


_SINGLES = frozenset(b"+-*/(),.:=<>")


def _lex(src: bytes) -> list[_Token]:
    toks: list[_Token] = []
    n = len(src)
    i, line, col, depth = 0, 1, 1, 0
    while i < n:
        c = src[i]
        if c == 0x0A:  # newline
            if depth == 0 and toks and toks[-1].kind != "newline":
                toks.append(_Token("newline", "\n", line, col, i, i + 1))
            i += 1
            line += 1
            col = 1
            continue
        if c in (0x20, 0x09, 0x0D):
            i += 1
            col += 1
            continue
        if c == 0x23:  # '#'
            end = src.find(b"\n", i)
            end = n if end < 0 else end
            try:  # a comment may hold any text, but text: bytes that are not UTF-8 (lone surrogates) are an error
                src[i:end].decode("utf-8")
            except UnicodeDecodeError as error:
                raise PotentialError(f"invalid UTF-8 byte {_show_char(src[i + error.start])} in a comment", line,
                                     col + error.start) from None
            col += end - i
            i = end
            continue
        start, scol = i, col
        if _is_digit(c) or (c == 0x2E and i + 1 < n and _is_digit(src[i + 1])):
            while i < n and _is_digit(src[i]):
                i += 1
            if i < n and src[i] == 0x2E:
                i += 1
                while i < n and _is_digit(src[i]):
                    i += 1
            if i < n and src[i] in (0x65, 0x45):  # e E
                j = i + 1
                if j < n and src[j] in (0x2B, 0x2D):
                    j += 1
                if j < n and _is_digit(src[j]):
                    i = j
                    while i < n and _is_digit(src[i]):
                        i += 1
                else:
                    raise PotentialError(f"malformed number '{src[start:j].decode('ascii')}'", line, scol)
            text = src[start:i].decode("ascii")
            value = f32(float(text))
            if not math.isfinite(value):
                raise PotentialError(f"number out of range: '{text}'", line, scol)
            toks.append(_Token("number", text, line, scol, start, i, value))
            col += i - start
            continue
        if _is_ident_start(c):
            while i < n and _is_ident_char(src[i]):
                i += 1
            text = src[start:i].decode("ascii")
            toks.append(_Token("keyword" if text in KEYWORDS else "ident", text, line, scol, start, i))
            col += i - start
            continue
        if i + 1 < n and src[i + 1] == 0x3D and c in b"=!<>":
            toks.append(_Token("op", src[i : i + 2].decode("ascii"), line, scol, i, i + 2))
            i += 2
            col += 2
            continue
        if c in _SINGLES:
            if c == 0x28:
                depth += 1
            if c == 0x29 and depth > 0:
                depth -= 1
            toks.append(_Token("op", chr(c), line, scol, i, i + 1))
            i += 1
            col += 1
            continue
        raise PotentialError(f"unexpected character {_show_char(c)}", line, col)
    if toks and toks[-1].kind != "newline":
        toks.append(_Token("newline", "", line, col, n, n))
    toks.append(_Token("end", "", line, col, n, n))
    return toks


# ---------------------------------------------------------------------------- parse tree


@dataclass
class _Node:
    kind: str  # num, load, neg, binary, not, component, call
    width: int  # 1 scalar, 2 vec2, 3 vec3
    op: str = ""
    kids: list[_Node] = field(default_factory=list)
    value: float = 0.0
    offset: int = 0  # load offset / component index
    depth: int = 1


@dataclass(frozen=True)
class _ParsedStage:
    name: str
    progress: _Node
    done: _Node
    progress_source: str
    done_source: str


class _Parser:
    def __init__(self, src: bytes, toks: list[_Token], layout: dict[str, tuple[int, int]]) -> None:
        self.src = src
        self.toks = toks
        self.pos = 0
        self.layout = layout

    # -- helpers
    @property
    def tok(self) -> _Token:
        return self.toks[self.pos]

    def peek(self) -> _Token:
        return self.toks[min(self.pos + 1, len(self.toks) - 1)]

    def advance(self) -> None:
        if self.pos + 1 < len(self.toks):
            self.pos += 1

    def is_kw(self, s: str) -> bool:
        return self.tok.kind == "keyword" and self.tok.text == s

    def is_op(self, s: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == s

    @staticmethod
    def fail(t: _Token, msg: str) -> PotentialError:
        return PotentialError(msg, t.line, t.col)

    def expect_op(self, s: str, where: str) -> None:
        if not self.is_op(s):
            raise self.fail(self.tok, f"expected '{s}' {where}, got {_describe(self.tok)}")
        self.advance()

    def check_depth(self, d: int, at: _Token) -> None:
        if d > MAX_DEPTH:
            raise self.fail(at, f"expression is nested too deeply (the limit is {MAX_DEPTH})")

    def add(self, at: _Token, node: _Node) -> _Node:
        node.depth = 1 + max((k.depth for k in node.kids), default=0)
        self.check_depth(node.depth, at)
        return node

    # -- program
    def parse_program(self) -> list[_ParsedStage]:
        stages: list[_ParsedStage] = []
        names: set[str] = set()
        if self.tok.kind == "end":
            raise self.fail(self.tok, "the program has no stages")
        while self.tok.kind != "end":
            if not self.is_kw("stage"):
                raise self.fail(self.tok, f"expected 'stage', got {_describe(self.tok)}")
            stage_tok = self.tok
            if len(stages) >= MAX_STAGES:
                raise self.fail(stage_tok, f"too many stages (the limit is {MAX_STAGES})")
            self.advance()
            if self.tok.kind != "ident":
                raise self.fail(self.tok, f"expected a stage name after 'stage', got {_describe(self.tok)}")
            name_tok = self.tok
            if name_tok.text in names:
                raise self.fail(name_tok, f"duplicate stage name '{name_tok.text}'")
            names.add(name_tok.text)
            self.advance()
            self.expect_op(":", "after the stage name")
            if self.tok.kind != "newline":
                raise self.fail(self.tok, f"expected end of line after ':', got {_describe(self.tok)}")
            self.advance()
            fields: dict[str, tuple[_Node, str]] = {}
            while self.tok.kind == "ident" and self.tok.text in ("progress", "done"):
                field_tok = self.tok
                self.advance()
                self.expect_op("=", f"after '{field_tok.text}'")
                if field_tok.text in fields:
                    raise self.fail(field_tok, f"duplicate '{field_tok.text}' in stage '{name_tok.text}'")
                first = self.tok
                root = self.parse_or(0)
                if root.width != 1:
                    raise self.fail(first, f"'{field_tok.text}' must be a scalar, got {TYPE_NAMES[root.width]}")
                end = self.toks[self.pos - 1].end
                if self.tok.kind != "newline":
                    raise self.fail(self.tok, f"expected end of line, got {_describe(self.tok)}")
                self.advance()
                fields[field_tok.text] = (root, self.src[first.begin : end].decode("utf-8", "surrogatepass"))
            if self.tok.kind != "end" and not self.is_kw("stage"):
                raise self.fail(self.tok, f"expected 'progress', 'done' or a new 'stage', got {_describe(self.tok)}")
            for required in ("progress", "done"):
                if required not in fields:
                    raise self.fail(name_tok, f"stage '{name_tok.text}' has no '{required}'")
            stages.append(
                _ParsedStage(name_tok.text, fields["progress"][0], fields["done"][0], fields["progress"][1],
                             fields["done"][1])
            )
        return stages

    # -- expressions
    def parse_or(self, d: int) -> _Node:
        left = self.parse_and(d)
        while self.is_kw("or"):
            op = self.tok
            self.advance()
            left = self.logic(op, left, self.parse_and(d))
        return left

    def parse_and(self, d: int) -> _Node:
        left = self.parse_not(d)
        while self.is_kw("and"):
            op = self.tok
            self.advance()
            left = self.logic(op, left, self.parse_not(d))
        return left

    def logic(self, op: _Token, left: _Node, right: _Node) -> _Node:
        if left.width != 1 or right.width != 1:
            raise self.fail(
                op,
                f"type mismatch: '{op.text}' needs scalars, got {TYPE_NAMES[left.width]} and {TYPE_NAMES[right.width]}",
            )
        return self.add(op, _Node("binary", 1, op.text, [left, right]))

    def parse_not(self, d: int) -> _Node:
        if self.is_kw("not"):
            op = self.tok
            self.check_depth(d + 1, op)
            self.advance()
            child = self.parse_not(d + 1)
            if child.width != 1:
                raise self.fail(op, f"type mismatch: 'not' needs a scalar, got {TYPE_NAMES[child.width]}")
            return self.add(op, _Node("not", 1, "not", [child]))
        return self.parse_cmp(d)

    def at_comparison(self) -> bool:
        return self.tok.kind == "op" and self.tok.text in COMPARISONS

    def parse_cmp(self, d: int) -> _Node:
        left = self.parse_sum(d)
        if not self.at_comparison():
            return left
        op = self.tok
        self.advance()
        right = self.parse_sum(d)
        if left.width != 1 or right.width != 1:
            raise self.fail(
                op,
                f"type mismatch: '{op.text}' needs scalars, got {TYPE_NAMES[left.width]} and {TYPE_NAMES[right.width]}",
            )
        node = self.add(op, _Node("binary", 1, op.text, [left, right]))
        if self.at_comparison():
            raise self.fail(self.tok, "comparisons cannot be chained; combine them with 'and'")
        return node

    def parse_sum(self, d: int) -> _Node:
        left = self.parse_term(d)
        while self.is_op("+") or self.is_op("-"):
            op = self.tok
            self.advance()
            left = self.arith(op, left, self.parse_term(d))
        return left

    def parse_term(self, d: int) -> _Node:
        left = self.parse_unary(d)
        while self.is_op("*") or self.is_op("/"):
            op = self.tok
            self.advance()
            left = self.arith(op, left, self.parse_unary(d))
        return left

    def arith(self, op: _Token, left: _Node, right: _Node) -> _Node:
        lt, rt = TYPE_NAMES[left.width], TYPE_NAMES[right.width]
        width = left.width
        if op.text in ("+", "-"):
            if left.width != right.width:
                verb = "add" if op.text == "+" else "subtract"
                raise self.fail(op, f"type mismatch: cannot {verb} {lt} and {rt}")
        elif op.text == "*":
            if left.width != 1 and right.width != 1:
                raise self.fail(op, f"type mismatch: cannot multiply {lt} and {rt}")
            width = max(left.width, right.width)
        elif right.width != 1:
            raise self.fail(op, f"type mismatch: cannot divide {lt} by {rt}")
        return self.add(op, _Node("binary", width, op.text, [left, right]))

    def parse_unary(self, d: int) -> _Node:
        if self.is_op("-") or self.is_op("+"):
            op = self.tok
            self.check_depth(d + 1, op)
            self.advance()
            child = self.parse_unary(d + 1)
            if op.text == "+":
                return child
            return self.add(op, _Node("neg", child.width, "-", [child]))
        return self.parse_postfix(d)

    def parse_postfix(self, d: int) -> _Node:
        node = self.parse_primary(d)
        while self.is_op("."):
            dot = self.tok
            self.advance()
            if self.tok.kind != "ident":
                raise self.fail(self.tok, f"expected a component name after '.', got {_describe(self.tok)}")
            comp = self.tok
            idx = {"x": 0, "y": 1, "z": 2}.get(comp.text, -1)
            if idx < 0:
                raise self.fail(comp, f"unknown component '.{comp.text}' (use .x, .y or .z)")
            if node.width == 1:
                raise self.fail(dot, f"type mismatch: '.{comp.text}' needs a vector, got scalar")
            if idx >= node.width:
                raise self.fail(dot, f"type mismatch: '.{comp.text}' on a vec2 (it has only .x and .y)")
            self.advance()
            node = self.add(dot, _Node("component", 1, ".", [node], offset=idx))
        return node

    def parse_primary(self, d: int) -> _Node:
        t = self.tok
        if t.kind == "number":
            self.advance()
            return self.add(t, _Node("num", 1, value=t.value))
        if t.kind == "ident" and self.peek().kind == "op" and self.peek().text == "(":
            return self.parse_call(d)
        if t.kind == "ident":
            if t.text not in self.layout:
                raise self.fail(t, f"unknown name '{t.text}'")
            self.advance()
            offset, length = self.layout[t.text]
            return self.add(t, _Node("load", length, t.text, offset=offset))
        if t.kind == "op" and t.text == "(":
            self.check_depth(d + 1, t)
            self.advance()
            inner = self.parse_or(d + 1)
            if not self.is_op(")"):
                raise self.fail(self.tok, f"expected ')', got {_describe(self.tok)}")
            self.advance()
            return inner
        raise self.fail(t, f"expected an expression, got {_describe(t)}")

    def parse_call(self, d: int) -> _Node:
        name = self.tok
        if name.text not in FUNCTIONS:
            raise self.fail(name, f"unknown function '{name.text}'")
        self.advance()
        self.check_depth(d + 1, self.tok)
        self.advance()  # '('
        args: list[_Node] = []
        arg_toks: list[_Token] = []
        if self.is_op(")"):
            self.advance()
        else:
            while True:
                arg_toks.append(self.tok)
                args.append(self.parse_or(d + 1))
                if self.is_op(")"):
                    self.advance()
                    break
                if self.is_op(","):
                    self.advance()
                    continue
                raise self.fail(self.tok, f"expected ',' or ')', got {_describe(self.tok)}")
        arity = FUNCTIONS[name.text]
        if arity > 0 and len(args) != arity:
            noun = "argument" if arity == 1 else "arguments"
            raise self.fail(name, f"'{name.text}' takes {arity} {noun}, got {len(args)}")
        if arity == -2 and len(args) < 2:
            raise self.fail(name, f"'{name.text}' takes at least 2 arguments, got {len(args)}")
        wants_vectors = name.text in ("dist", "dist_xy", "norm")
        for k, (arg, at) in enumerate(zip(args, arg_toks, strict=True)):
            if wants_vectors and arg.width == 1:
                raise self.fail(at, f"'{name.text}' argument {k + 1} must be a vector, got scalar")
            if not wants_vectors and arg.width != 1:
                raise self.fail(at, f"'{name.text}' argument {k + 1} must be a scalar, got {TYPE_NAMES[arg.width]}")
        if name.text == "dist" and args[0].width != args[1].width:
            raise self.fail(
                name,
                "'dist' arguments must have the same length, got "
                f"{TYPE_NAMES[args[0].width]} and {TYPE_NAMES[args[1].width]}",
            )
        return self.add(name, _Node("call", 1, name.text, args))


# ---------------------------------------------------------------------------- evaluation

_BINARY: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: f32(a + b),
    "-": lambda a, b: f32(a - b),
    "*": lambda a, b: f32(a * b),
    "/": _div,
    "<": lambda a, b: float(a < b),
    "<=": lambda a, b: float(a <= b),
    ">": lambda a, b: float(a > b),
    ">=": lambda a, b: float(a >= b),
    "==": lambda a, b: float(a == b),
    "!=": lambda a, b: float(a != b),
    "and": lambda a, b: float(_truthy(a) and _truthy(b)),
    "or": lambda a, b: float(_truthy(a) or _truthy(b)),
}


def _eval(node: _Node, state: Sequence[float]) -> Value:
    kind = node.kind
    if kind == "num":
        return node.value
    if kind == "load":
        if node.width == 1:
            return state[node.offset]
        return tuple(state[node.offset : node.offset + node.width])
    if kind == "neg":
        v = _eval(node.kids[0], state)
        return -v if isinstance(v, float) else tuple(-x for x in v)
    if kind == "not":
        return float(not _truthy(_scalar(_eval(node.kids[0], state))))
    if kind == "component":
        v = _eval(node.kids[0], state)
        assert isinstance(v, tuple)
        return v[node.offset]
    if kind == "binary":
        fn = _BINARY[node.op]
        a, b = _eval(node.kids[0], state), _eval(node.kids[1], state)
        if isinstance(a, tuple) and isinstance(b, tuple):
            return tuple(fn(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, tuple):
            return tuple(fn(x, b) for x in a)
        if isinstance(b, tuple):
            return tuple(fn(x, a) for x in b)  # scalar * vec: multiplication commutes exactly
        return fn(a, b)
    return _call(node, [_eval(k, state) for k in node.kids])


def _scalar(v: Value) -> float:
    assert isinstance(v, float)
    return v


def _vector(v: Value) -> tuple[float, ...]:
    assert isinstance(v, tuple)
    return v


def _call(node: _Node, args: list[Value]) -> float:
    name = node.op
    if name in ("dist", "dist_xy"):
        a, b = _vector(args[0]), _vector(args[1])
        width = len(a) if name == "dist" else 2
        return _sqrt_sum_of_squares([f32(a[i] - b[i]) for i in range(width)])
    if name == "norm":
        return _sqrt_sum_of_squares(_vector(args[0]))
    if name == "abs":
        return math.fabs(_scalar(args[0]))
    if name == "exp":
        return _exp(_scalar(args[0]))
    if name == "clip":
        return _min(_max(_scalar(args[0]), _scalar(args[1])), _scalar(args[2]))
    fold = _min if name == "min" else _max
    result = _scalar(args[0])
    for a in args[1:]:
        result = fold(result, _scalar(a))
    return result


# ---------------------------------------------------------------------------- public API


def _valid_identifier(name: str) -> bool:
    data = name.encode("utf-8", "surrogatepass")
    return bool(data) and _is_ident_start(data[0]) and all(_is_ident_char(c) for c in data)


def _check_layout(layout: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    if not isinstance(layout, Mapping):
        raise ValueError(f"layout: expected a mapping name -> (offset, length), got {type(layout)}")
    out: dict[str, tuple[int, int]] = {}
    for name, value in layout.items():
        if not isinstance(name, str):
            raise ValueError(f"layout: names must be str, got {name!r}")
        where = f"layout[{name!r}]"  # repr: a name from elsewhere may hold quotes, NUL bytes or lone surrogates
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | np.ndarray) or len(value) != 2:
            raise ValueError(f"{where}: expected (offset, length), got {value!r}")
        if any(isinstance(v, bool) or not hasattr(v, "__index__") for v in value):
            raise ValueError(f"{where}: expected integers (offset, length), got {value!r}")
        offset, length = (v.__index__() for v in value)
        if not _valid_identifier(name) or name in KEYWORDS:
            raise ValueError(f"layout: {name!r} is not a valid name (letters, digits, '_'; not a keyword)")
        if length < 1 or length > 3:
            raise ValueError(f"{where}: length must be 1, 2 or 3, got {length}")
        if offset < 0 or offset > 2**30:
            raise ValueError(f"{where}: offset must be in [0, 2**30], got {offset}")
        out[name] = (offset, length)
    return out


class PotentialProgram:
    """A parsed, type-checked staged-potential program (pure Python)."""

    def __init__(self, source: str, layout: dict[str, tuple[int, int]], stages: list[_ParsedStage]) -> None:
        """Use :meth:`compile`."""
        self._source = source
        self._layout = layout
        self._stages = stages
        self._required_dim = max((o + n for o, n in layout.values()), default=0)

    @staticmethod
    def compile(source: str, layout: Mapping[str, Any]) -> PotentialProgram:
        """Parse and type-check ``source`` against ``layout`` ({name: (offset, length)})."""
        if not isinstance(source, str):
            raise TypeError(f"source: expected str, got {type(source)}")
        checked = _check_layout(layout)
        data = source.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SOURCE_BYTES:
            raise PotentialError(
                f"the source is too large ({len(data)} bytes; the limit is {MAX_SOURCE_BYTES})", 1, 1
            )
        stages = _Parser(data, _lex(data), checked).parse_program()
        return PotentialProgram(source, checked, stages)

    @property
    def num_stages(self) -> int:
        """Number of stages K."""
        return len(self._stages)

    @property
    def stage_names(self) -> list[str]:
        """Stage names in order."""
        return [s.name for s in self._stages]

    @property
    def stages(self) -> list[tuple[str, str, str]]:
        """(name, progress source, done source) per stage."""
        return [(s.name, s.progress_source, s.done_source) for s in self._stages]

    @property
    def source(self) -> str:
        """The program text as compiled."""
        return self._source

    @property
    def layout(self) -> dict[str, tuple[int, int]]:
        """The layout the program was compiled against."""
        return dict(self._layout)

    @property
    def required_dim(self) -> int:
        """The smallest state length the program can read."""
        return self._required_dim

    def _evaluate(self, state: Sequence[float], stage: int) -> tuple[float, int]:
        k = len(self._stages)
        s = stage
        while s < k and _truthy(_scalar(_eval(self._stages[s].done, state))):
            s += 1
        if s == k:
            return 1.0, s
        p = _clip01(_scalar(_eval(self._stages[s].progress, state)))
        return f32(f32(float(s) + p) / float(k)), s

    def evaluate(self, state: Any, stage: int) -> tuple[float, int]:
        """Advance from ``stage`` while ``done`` holds; return (phi, new_stage)."""
        arr = np.asarray(state, dtype=np.float32)
        if arr.ndim != 1:
            raise ValueError(f"state: expected a 1-D array, got shape {arr.shape}")
        if not 0 <= stage <= self.num_stages:
            raise ValueError(f"stage must be in [0, {self.num_stages}], got {stage}")
        if arr.shape[0] < self._required_dim:
            raise ValueError(
                f"the state has {arr.shape[0]} entries; the layout needs at least {self._required_dim}"
            )
        return self._evaluate(arr.tolist(), int(stage))

    def evaluate_batch(self, states: Any, stages: Any) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate N states (N, D) float32 from stages (N,) int32; return (phi (N,), new_stages (N,))."""
        arr = np.asarray(states, dtype=np.float32)
        if arr.ndim != 2:
            raise ValueError(f"states: expected shape (N, D), got {arr.shape}")
        st = np.asarray(stages)
        if st.shape != (arr.shape[0],):
            raise ValueError(f"stages: expected shape ({arr.shape[0]},), got {st.shape}")
        st_list = st.astype(np.int64).tolist()
        for i, s in enumerate(st_list):
            if not 0 <= s <= self.num_stages:
                raise ValueError(f"stages[{i}] must be in [0, {self.num_stages}], got {s}")
        if arr.shape[1] < self._required_dim:
            raise ValueError(f"states have {arr.shape[1]} columns; the layout needs at least {self._required_dim}")
        results = [self._evaluate(row, s) for row, s in zip(arr.tolist(), st_list, strict=True)]
        phi = np.array([r[0] for r in results], dtype=np.float32)
        new = np.array([r[1] for r in results], dtype=np.int32)
        return phi, new

    def __repr__(self) -> str:
        """Name the stages."""
        return f"PotentialProgram(stages={self.stage_names!r})"


def shape_rewards(rewards: Any, phi: Any, next_phi: Any, dones: Any, gamma: float) -> np.ndarray:
    """Return ``rewards + gamma * next_phi * (1 - dones) - phi`` in float32, in that order."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    r = np.asarray(rewards, dtype=np.float32)
    arrays = [np.asarray(a, dtype=np.float32) for a in (phi, next_phi, dones)]
    for name, a in zip(("phi", "next_phi", "dones"), arrays, strict=True):
        if a.shape != r.shape:
            raise ValueError(f"{name}: expected shape {r.shape}, got {a.shape}")
    p, nphi, d = arrays
    g = np.float32(gamma)
    return ((r + (g * nphi) * (np.float32(1.0) - d)) - p).astype(np.float32)
