"""The launch specs' expression language (registry/formats/expressions.py), against a reference evaluator.

Random typed expression trees are written out as text with only the
parentheses Python's precedence needs (and some spare ones), parsed by the
registry and evaluated; the tree is evaluated here independently (big
integers, the language's rules written again: `//`, `%` and cdiv on a
dividend >= 0 and a divisor > 0, every intermediate within int64, `and`/`or`
and chained comparisons stopping as Python does). Where the reference
computes a value, the registry gives it, and Python's own evaluation of the
text agrees; where the reference meets a division by zero, a negative
division or an out-of-range value, the registry refuses with that reason,
never a number. 10,000 seeded expressions a run, and 300 more drawn by
hypothesis: about 3 s on one core.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.formats.errors import UserError
from registry.formats.expressions import (INTEGER, MAX_NODES, MAX_TEXT, MAX_VALUE, TRUTH, ExpressionError,
                                          check_symbol_name, parse_expression)

SYMBOLS = ("B", "S", "D", "n_rows", "_k")
EXAMPLES = 10_000


class Refused(Exception):
    """What the reference says the registry must refuse, by reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


# ---- random trees and their text ------------------------------------------------------------------------

def literal(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, 7, 16, 128, 1000, rng.randrange(0, 1 << 20), rng.randrange(0, MAX_VALUE + 1),
                       MAX_VALUE, 1 << 31, (1 << 32) - 1])


def int_tree(rng: random.Random, depth: int) -> tuple:
    if depth <= 0 or rng.random() < 0.3:
        return ("lit", literal(rng)) if rng.random() < 0.5 else ("sym", rng.choice(SYMBOLS))
    roll = rng.random()
    if roll < 0.6:
        return ("op", rng.choice(["+", "-", "*", "//", "%"]), int_tree(rng, depth - 1), int_tree(rng, depth - 1))
    if roll < 0.75:
        return ("call", "cdiv", (int_tree(rng, depth - 1), int_tree(rng, depth - 1)))
    return ("call", rng.choice(["min", "max"]), tuple(int_tree(rng, depth - 1) for _ in range(rng.randint(2, 4))))


def bool_tree(rng: random.Random, depth: int) -> tuple:
    if depth <= 0 or rng.random() < 0.5:
        chain = tuple((rng.choice(["==", "!=", "<", "<=", ">", ">="]), int_tree(rng, depth - 1))
                      for _ in range(rng.randint(1, 3)))
        return ("cmp", int_tree(rng, depth - 1), chain)
    return (rng.choice(["and", "or"]), tuple(bool_tree(rng, depth - 1) for _ in range(rng.randint(2, 3))))


PRECEDENCE = {"or": 0, "and": 1, "cmp": 2, "+": 3, "-": 3, "*": 4, "//": 4, "%": 4}


def level(node: tuple) -> int:
    if node[0] == "op":
        return PRECEDENCE[node[1]]
    return PRECEDENCE.get(node[0], 5)


def text(node: tuple, rng: random.Random) -> str:
    """The tree written as the language's text, with the parentheses precedence needs and some spare ones."""
    tag = node[0]
    if tag == "lit":
        written = str(node[1])
    elif tag == "sym":
        written = node[1]
    elif tag == "op":
        left, right = text(node[2], rng), text(node[3], rng)
        if level(node[2]) < level(node):
            left = f"({left})"
        if level(node[3]) <= level(node):  # arithmetic is left-associative
            right = f"({right})"
        written = f"{left} {node[1]} {right}"
    elif tag == "call":
        written = f"{node[1]}({', '.join(text(arg, rng) for arg in node[2])})"
    elif tag == "cmp":
        parts = [text(node[1], rng)] + [f"{op} {text(operand, rng)}" for op, operand in node[2]]
        written = " ".join(parts)
    else:
        parts = [text(operand, rng) for operand in node[1]]
        parts = [f"({p})" if level(operand) <= level(node) else p for p, operand in zip(parts, node[1])]
        written = f" {tag} ".join(parts)
    return f"({written})" if rng.random() < 0.05 else written


def reference(node: tuple, values: dict[str, int]):
    """The value of the tree, or Refused(reason): the language's rules, written again."""
    tag = node[0]
    if tag == "lit":
        return node[1]
    if tag == "sym":
        return values[node[1]]
    if tag == "op":
        a, b = reference(node[2], values), reference(node[3], values)
        if node[1] in ("//", "%"):
            divide(a, b)
        result = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
                  "%": lambda: a % b}[node[1]]()
        return within(result)
    if tag == "call":
        args = [reference(arg, values) for arg in node[2]]
        if node[1] == "cdiv":
            divide(*args)
            return within(-(-args[0] // args[1]))
        return min(args) if node[1] == "min" else max(args)
    if tag == "cmp":
        left = reference(node[1], values)
        for op, operand in node[2]:
            right = reference(operand, values)
            if not {"==": left == right, "!=": left != right, "<": left < right, "<=": left <= right,
                    ">": left > right, ">=": left >= right}[op]:
                return False
            left = right
        return True
    for operand in node[1]:
        result = reference(operand, values)
        if result != (tag == "and"):
            return result
    return tag == "and"


def divide(a: int, b: int) -> None:
    if b == 0:
        raise Refused("division by zero")
    if a < 0 or b < 0:
        raise Refused("a dividend >= 0 and a divisor > 0")


def within(value: int) -> int:
    if abs(value) > MAX_VALUE:
        raise Refused("outside")
    return value


def python_value(written: str, values: dict[str, int]):
    """Python's own reading of the text (cdiv as Triton defines it), for values the reference computed."""
    scope = {"__builtins__": {}, "min": min, "max": max, "cdiv": lambda a, b: (a + b - 1) // b, **values}
    return eval(written, scope)  # noqa: S307 - the test's own generated text, never input


def symbol_values(rng: random.Random) -> dict[str, int]:
    return {name: rng.choice([0, 1, 2, 5, 128, 1537, rng.randrange(0, 1 << 16), rng.randrange(-(1 << 8), 1 << 8),
                              rng.randrange(-MAX_VALUE, MAX_VALUE + 1), MAX_VALUE, -MAX_VALUE]) for name in SYMBOLS}


def check_one(rng: random.Random, truth: bool) -> str:
    """One random expression through the registry and the reference; returns what happened to it."""
    tree = bool_tree(rng, 4) if truth else int_tree(rng, 4)
    written = text(tree, rng)
    values = symbol_values(rng)
    kind = TRUTH if truth else INTEGER
    if len(written) > MAX_TEXT:
        with pytest.raises(ExpressionError, match="characters, more than"):
            parse_expression(written, SYMBOLS, kind)
        return "too long"
    try:
        expression = parse_expression(written, SYMBOLS, kind)
    except ExpressionError as exc:
        assert f"more than {MAX_NODES} nodes" in str(exc), (written, exc)
        return "too many nodes"
    try:
        expected = reference(tree, values)
    except Refused as refused:
        with pytest.raises(ExpressionError) as caught:
            expression.evaluate(values)
        assert refused.reason in str(caught.value), (written, values, caught.value)
        assert "\n" not in str(caught.value)
        return refused.reason
    got = expression.evaluate(values)
    assert got == expected and type(got) is type(expected), (written, values, got, expected)
    assert python_value(written, values) == expected
    assert expression.symbols == {name for name in SYMBOLS if name in written.replace("(", " ").replace(
        ")", " ").replace(",", " ").split()}
    return "value"


def test_random_expressions_evaluate_as_the_reference_or_are_refused_for_its_reason():
    """EXAMPLES seeded expressions; every outcome occurs often enough that a wrong rule would be met."""
    seen: dict[str, int] = {}
    for seed in range(EXAMPLES):
        rng = random.Random(seed)
        outcome = check_one(rng, truth=rng.random() < 0.5)
        seen[outcome] = seen.get(outcome, 0) + 1
    assert sum(seen.values()) == EXAMPLES
    for outcome in ("value", "division by zero", "a dividend >= 0 and a divisor > 0", "outside"):
        assert seen.get(outcome, 0) >= EXAMPLES // 50, seen


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.booleans())
def test_random_expressions_under_hypothesis(rng, truth):
    """The same property where hypothesis chooses (and shrinks) the random draws."""
    check_one(rng, truth)


@pytest.mark.parametrize("written, why", [
    ("x.real", "'.'"), ("x[0]", "'['"), ("lambda: 1", "':'"), ("[a for a in x]", "'['"),
    ("min((a for a in x), 1)", "a comprehension"), ("{x}", "'{'"), ("'s'", "\"'\""), ('"s"', "'\"'"),
    ("b'x'", "\"'\""), ("f'{x}'", "\"'\""), ("1.5", "'.'"), ("1e3", "a float literal"), ("2j", "a complex literal"),
    ("True", "a boolean"), ("False", "a boolean"), ("None", "None"), ("-x", "a unary operator"),
    ("+x", "a unary operator"), ("~x", "'~'"), ("not x < 1", "a unary operator"), ("x ** 2", "'**'"),
    ("2 ** 2 ** 64", "'**'"), ("x / 2", "'/'"), ("x << 1", "'<<'"), ("x >> 1", "'>>'"), ("x & 1", "'&'"),
    ("x | 1", "'|'"), ("x ^ 1", "'^'"), ("x @ x", "'@'"), ("abs(x)", "calls abs"), ("__import__(x)", "calls __import__"),
    ("eval(x)", "calls eval"), ("x(1)", "calls x"), ("min(x)", "at least 2 arguments"), ("cdiv(x)", "cdiv takes 2"),
    ("cdiv(x, x, x)", "cdiv takes 2"), ("min(x, key=x)", "no keyword arguments"), ("max(*x, 1)", "no starred"),
    ("(x := 1)", "':'"), ("x if x else 1", "a conditional"), ("x in x", "'in'"), ("x not in x", "'not in'"),
    ("x is x", "'is'"), ("x is not x", "'is not'"), ("0x10", "plain decimal"), ("0o7", "plain decimal"),
    ("0b1", "plain decimal"), ("1_000", "plain decimal"), ("00", "plain decimal"), ("y", "not a declared symbol"),
    ("cdiv", "a function"), ("x, x", "a tuple"), ("(x, x)", "a tuple"), ("x + (x < 1)", "takes an integer"),
    ("1 and 2", "takes a truth value"), ("x < 1 < (x == 1)", "takes an integer"), ("ｘ", "'ｘ'"),
    ("x\n+ 1", "'\\n'"), ("x # comment", "'#'"), ("x;x", "';'"), ("x\t", "'\\t'"), ("", "empty"), ("   ", "empty"),
    ("9223372036854775808", "above"), ("(" * 300 + "x" + ")" * 300, "not an expression"),
    ("x" + " + x" * 120, "more than 200 nodes"), ("x " * 600, "more than the 1000"), ("x +", "not an expression"),
    ("yield x", "not an expression"),
])
def test_every_construct_outside_the_language_is_refused_in_one_line(written, why):
    with pytest.raises(ExpressionError) as caught:
        parse_expression(written, {"x"}, INTEGER)
    message = str(caught.value)
    assert why in message and "\n" not in message and isinstance(caught.value, UserError)


@pytest.mark.parametrize("written, kind", [("x < 1", INTEGER), ("x + 1", TRUTH), ("min(x, 1)", TRUTH)])
def test_an_expression_of_the_other_kind_is_refused(written, kind):
    with pytest.raises(ExpressionError, match="is expected"):
        parse_expression(written, {"x"}, kind)


def test_a_non_string_expression_is_refused():
    for value in (1, None, 1.5, ["x"], {"x": 1}):
        with pytest.raises(ExpressionError, match="is a string"):
            parse_expression(value, {"x"}, INTEGER)


@pytest.mark.parametrize("written, values, why", [
    ("x // y", {"x": 1, "y": 0}, "division by zero"), ("x % y", {"x": 1, "y": 0}, "division by zero"),
    ("cdiv(x, y)", {"x": 0, "y": 0}, "division by zero"), ("x // y", {"x": -1, "y": 2}, "dividend >= 0"),
    ("x % y", {"x": 1, "y": -2}, "dividend >= 0"), ("x * x", {"x": 1 << 32}, "outside"),
    ("x + x", {"x": MAX_VALUE}, "outside"), ("0 - x - x", {"x": MAX_VALUE}, "outside"),
    ("x + 1", {"x": MAX_VALUE + 1}, "outside"), ("x + 1", {"x": True}, "no integer value"),
    ("x + 1", {"x": 1.0}, "no integer value"), ("x + 1", {}, "no integer value"),
])
def test_an_evaluation_outside_the_rules_is_refused_never_a_number(written, values, why):
    with pytest.raises(ExpressionError, match=why):
        parse_expression(written, {"x", "y"}, INTEGER).evaluate(values)


def test_and_or_and_chained_comparisons_stop_where_python_stops():
    guarded = parse_expression("y > 0 and x // y >= 1", {"x", "y"}, TRUTH)
    assert guarded.evaluate({"x": 5, "y": 0}) is False
    with pytest.raises(ExpressionError, match="division by zero"):
        parse_expression("y > 0 or x // y >= 1", {"x", "y"}, TRUTH).evaluate({"x": 5, "y": 0})
    assert parse_expression("y < 0 < x // y", {"x", "y"}, TRUTH).evaluate({"x": 5, "y": 0}) is False
    assert parse_expression("0 <= x < 10 != y", {"x", "y"}, TRUTH).evaluate({"x": 5, "y": 10}) is False


@pytest.mark.parametrize("name", ["min", "cdiv", "and", "True", "None", "1x", "x-y", "é", "a" * 65, "", 3, None])
def test_names_that_cannot_be_symbols(name):
    with pytest.raises(ExpressionError, match="cannot name a symbol"):
        check_symbol_name(name)
