"""The expression language of launch specs: grids, predicates, constraints and integer arguments.

A compiled kernel's launch spec (registry/formats/launch_spec.py) computes
its grid and chooses its variant from the sizes of one call. Those
computations are written as short expressions, parsed here with `ast`
(which executes nothing) and accepted only when every node is on a
whitelist; the registry evaluates the checked tree itself. Nothing of an
expression is ever compiled, `eval`'d or pasted into code (Triton's
`tools/compile.py` pastes its grid strings into C).

The language (docs/bundles.md, "The expression language"):

- integer literals in decimal (`0`, `128`; no sign, no `0x`, no `_`);
- the symbols the spec declares (sizes read from the inputs);
- `+ - * // %`, and `cdiv(a, b)`, `min(a, b, ...)`, `max(a, b, ...)`;
- comparisons `== != < <= > >=` (chained as in Python), combined with
  `and` / `or` (evaluated left to right, stopping as Python does).

It is typed: arithmetic takes and gives integers, a comparison gives a
truth value, `and`/`or` take truth values only; a grid or an argument is an
integer expression, a predicate or constraint a truth-valued one. Nothing
else parses: no unary operators (write `0 - x`), no `**`, `/`, bit
operators, attributes, subscripts, other calls, keywords, strings, floats,
booleans, conditionals, lambdas, comprehensions, walrus or starred
arguments. Only ASCII is read (Python folds some Unicode letters into
ASCII names).

Bounded: the text is at most MAX_TEXT characters and MAX_NODES nodes; every
literal, symbol value and intermediate result lies within +-MAX_VALUE (the
int64 range); `//`, `%` and `cdiv` take a dividend >= 0 and a divisor > 0.
Anything else is refused in one line naming the expression, never
computed into a wrong number.

Pure: the standard library and registry.formats.errors only.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Union

from registry.formats.errors import UserError

MAX_TEXT = 1000
MAX_NODES = 200
MAX_VALUE = (1 << 63) - 1
FUNCTIONS = ("cdiv", "min", "max")
INTEGER, TRUTH = "integer", "truth value"

_CHARACTERS = re.compile(r"[A-Za-z0-9_ +\-*/%(),<>=!]*")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_RESERVED = frozenset(FUNCTIONS) | {"and", "or", "not", "if", "else", "in", "is", "lambda", "True", "False", "None"}

_ARITHMETIC = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_COMPARISON = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
# What a refusal calls a construct that is not in the language (anything missing here is named by its class).
_NAMES = {ast.Pow: "'**'", ast.Div: "'/' (use '//')", ast.MatMult: "'@'", ast.LShift: "'<<'", ast.RShift: "'>>'",
          ast.BitAnd: "'&'", ast.BitOr: "'|'", ast.BitXor: "'^'", ast.UnaryOp: "a unary operator (write 0 - x)",
          ast.Attribute: "attribute access", ast.Subscript: "a subscript", ast.Lambda: "a lambda",
          ast.IfExp: "a conditional expression", ast.NamedExpr: "an assignment expression (:=)",
          ast.Starred: "a starred argument", ast.ListComp: "a comprehension", ast.SetComp: "a comprehension",
          ast.DictComp: "a comprehension", ast.GeneratorExp: "a comprehension", ast.Tuple: "a tuple",
          ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set", ast.JoinedStr: "an f-string",
          ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Slice: "a slice",
          ast.In: "'in'", ast.NotIn: "'not in'", ast.Is: "'is'", ast.IsNot: "'is not'", ast.Not: "'not'"}


class ExpressionError(UserError):
    """An expression outside the language, or one whose evaluation is refused (the message names it)."""


def check_symbol_name(name: object) -> str:
    """A name a spec may declare as a symbol: an ASCII identifier of at most 64 characters, no keyword or function."""
    if not isinstance(name, str) or not _SYMBOL.fullmatch(name) or name in _RESERVED:
        raise ExpressionError(f"{name!r} cannot name a symbol (an ASCII identifier of at most 64 characters, not "
                              f"{', '.join(sorted(_RESERVED))})")
    return name


# A checked tree: ("lit", n) | ("sym", name) | ("op", symbol, left, right) | ("call", name, args)
# | ("cmp", first, ((symbol, operand), ...)) | ("and" | "or", operands)
Node = tuple


@dataclass(frozen=True)
class Expression:
    """A checked expression: its text, what it yields (INTEGER or TRUTH) and the symbols it reads."""

    text: str
    kind: str
    symbols: frozenset[str]
    tree: Node

    def evaluate(self, values: Mapping[str, int]) -> Union[int, bool]:
        """The value under `values` (every symbol it reads must be given, within +-MAX_VALUE)."""
        for name in sorted(self.symbols):
            value = values.get(name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ExpressionError(f"{self.text!r}: symbol {name} has no integer value")
            if abs(value) > MAX_VALUE:
                raise ExpressionError(f"{self.text!r}: symbol {name} = {value} is outside +-{MAX_VALUE}")
        return _Evaluation(self.text, values).value(self.tree)


def parse_expression(text: object, symbols: Iterable[str], kind: str) -> Expression:
    """Parse `text` as an expression of `kind` (INTEGER or TRUTH) over the declared `symbols`, or refuse it."""
    if kind not in (INTEGER, TRUTH):
        raise ValueError(f"unknown expression kind {kind!r}")
    if not isinstance(text, str):
        raise ExpressionError(f"an expression is a string, got {type(text).__name__}")
    shown = repr(text) if len(text) <= 80 else f"{text[:77]!r}..."
    if not text.strip():
        raise ExpressionError("an empty expression")
    if len(text) > MAX_TEXT:
        raise ExpressionError(f"{shown}: {len(text)} characters, more than the {MAX_TEXT} an expression may hold")
    if not _CHARACTERS.fullmatch(text):
        bad = next(c for c in text if not _CHARACTERS.fullmatch(c))
        raise ExpressionError(f"{shown}: the character {bad!r} is not part of the expression language")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        reason = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise ExpressionError(f"{shown}: not an expression ({reason})") from None
    checker = _Checker(shown, text.strip(), frozenset(symbols))
    node, found = checker.check(tree.body)
    if found != kind:
        raise ExpressionError(f"{shown}: gives {_article(found)}, where {_article(kind)} is expected")
    return Expression(text, kind, frozenset(checker.read), node)


def _article(kind: str) -> str:
    return f"an {kind}" if kind == INTEGER else f"a {kind}"


class _Checker:
    """Walks a parsed tree once: every node on the whitelist, typed, counted; builds the evaluated form."""

    def __init__(self, shown: str, source: str, symbols: frozenset[str]) -> None:
        self.shown, self.source, self.symbols = shown, source, symbols
        self.read: set[str] = set()
        self.nodes = 0

    def refuse(self, problem: str) -> ExpressionError:
        return ExpressionError(f"{self.shown}: {problem}")

    def check(self, node: ast.AST) -> tuple[Node, str]:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.refuse(f"more than {MAX_NODES} nodes")
        if isinstance(node, ast.Constant):
            return self._literal(node)
        if isinstance(node, ast.Name):
            if node.id in FUNCTIONS:
                raise self.refuse(f"{node.id} is a function; call it")
            if node.id not in self.symbols:
                raise self.refuse(f"{node.id!r} is not a declared symbol")
            self.read.add(node.id)
            return ("sym", node.id), INTEGER
        if isinstance(node, ast.BinOp):
            symbol = _ARITHMETIC.get(type(node.op))
            if symbol is None:
                raise self.refuse(f"{self._name(node.op)} is not part of the expression language")
            return ("op", symbol, self._operand(node.left, INTEGER, symbol), self._operand(node.right, INTEGER, symbol)), \
                INTEGER
        if isinstance(node, ast.Call):
            return self._call(node), INTEGER
        if isinstance(node, ast.Compare):
            first = self._operand(node.left, INTEGER, "a comparison")
            rest = []
            for op, right in zip(node.ops, node.comparators):
                symbol = _COMPARISON.get(type(op))
                if symbol is None:
                    raise self.refuse(f"{self._name(op)} is not part of the expression language")
                rest.append((symbol, self._operand(right, INTEGER, symbol)))
            return ("cmp", first, tuple(rest)), TRUTH
        if isinstance(node, ast.BoolOp):
            word = "and" if isinstance(node.op, ast.And) else "or"
            return (word, tuple(self._operand(value, TRUTH, f"'{word}'") for value in node.values)), TRUTH
        raise self.refuse(f"{self._name(node)} is not part of the expression language")

    def _operand(self, node: ast.AST, kind: str, where: str) -> Node:
        checked, found = self.check(node)
        if found != kind:
            raise self.refuse(f"{where} takes {_article(kind)}, not {_article(found)}")
        return checked

    def _literal(self, node: ast.Constant) -> tuple[Node, str]:
        value = node.value
        if isinstance(value, bool) or not isinstance(value, int):
            what = "a boolean" if isinstance(value, bool) else f"a {type(value).__name__} literal" \
                if value is not None and value is not ... else repr(value)
            raise self.refuse(f"{what} is not part of the expression language (integers only)")
        written = self.source[node.col_offset:node.end_col_offset]  # one line of ASCII: columns are characters
        if not _DECIMAL.fullmatch(written):
            raise self.refuse(f"the literal {written!r} is not written in plain decimal")
        if value > MAX_VALUE:
            raise self.refuse(f"the literal {value} is above {MAX_VALUE}")
        return ("lit", value), INTEGER

    def _call(self, node: ast.Call) -> Node:
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            callee = node.func.id if isinstance(node.func, ast.Name) else self._name(node.func)
            raise self.refuse(f"calls {callee!s}; only {', '.join(FUNCTIONS)} may be called")
        name = node.func.id
        if node.keywords:
            raise self.refuse(f"{name} takes no keyword arguments")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise self.refuse(f"{name} takes no starred arguments")
        if name == "cdiv" and len(node.args) != 2:
            raise self.refuse(f"cdiv takes 2 arguments, not {len(node.args)}")
        if len(node.args) < 2:
            raise self.refuse(f"{name} takes at least 2 arguments, not {len(node.args)}")
        return ("call", name, tuple(self._operand(arg, INTEGER, name) for arg in node.args))

    @staticmethod
    def _name(node: ast.AST) -> str:
        return _NAMES.get(type(node), type(node).__name__)


class _Evaluation:
    """One evaluation: the values given, every intermediate kept within +-MAX_VALUE."""

    def __init__(self, text: str, values: Mapping[str, int]) -> None:
        self.shown = repr(text) if len(text) <= 80 else f"{text[:77]!r}..."
        self.values = values

    def refuse(self, problem: str) -> ExpressionError:
        return ExpressionError(f"{self.shown}: {problem}")

    def value(self, node: Node) -> Union[int, bool]:
        tag = node[0]
        if tag == "lit":
            return node[1]
        if tag == "sym":
            return self.values[node[1]]
        if tag == "op":
            return self._bounded(self._arithmetic(node[1], self.value(node[2]), self.value(node[3])))
        if tag == "call":
            args = [self.value(arg) for arg in node[2]]
            if node[1] == "cdiv":
                self._divisible(args[0], args[1], "cdiv")
                return self._bounded((args[0] + args[1] - 1) // args[1])
            return (min if node[1] == "min" else max)(args)
        if tag == "cmp":
            left = self.value(node[1])
            for symbol, operand in node[2]:
                right = self.value(operand)
                if not _compare(symbol, left, right):
                    return False
                left = right
            return True
        if tag == "and":
            return all(self.value(operand) for operand in node[1])
        if tag == "or":
            return any(self.value(operand) for operand in node[1])
        raise AssertionError(f"unknown node {tag!r}")

    def _arithmetic(self, symbol: str, left: int, right: int) -> int:
        if symbol == "+":
            return left + right
        if symbol == "-":
            return left - right
        if symbol == "*":
            return left * right
        self._divisible(left, right, symbol)
        return left // right if symbol == "//" else left % right

    def _divisible(self, left: int, right: int, symbol: str) -> None:
        if right == 0:
            raise self.refuse(f"division by zero ({left} {symbol} 0)" if symbol != "cdiv" else
                              f"division by zero (cdiv({left}, 0))")
        if right < 0 or left < 0:
            shown = f"cdiv({left}, {right})" if symbol == "cdiv" else f"{left} {symbol} {right}"
            raise self.refuse(f"{shown}: '//', '%' and cdiv take a dividend >= 0 and a divisor > 0")

    def _bounded(self, result: int) -> int:
        if abs(result) > MAX_VALUE:
            raise self.refuse(f"an intermediate value {result} is outside +-{MAX_VALUE}")
        return result


def _compare(symbol: str, left: int, right: int) -> bool:
    if symbol == "==":
        return left == right
    if symbol == "!=":
        return left != right
    if symbol == "<":
        return left < right
    if symbol == "<=":
        return left <= right
    if symbol == ">":
        return left > right
    return left >= right
