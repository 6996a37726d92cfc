"""Checks on option values that run while the command line is parsed, before anything is read or measured.

They raise UserError (registry.formats.errors), which the command group turns into one line on stderr
and exit 1, like every other refused input (registry.cli.main).
"""
from __future__ import annotations

import click

from registry.formats.numbers import parse_integer, parse_real


class _DecimalText:
    """A click number type that reads its text in ASCII decimal notation only (registry.formats.numbers), so
    `1_5` and `１５` are refused instead of read as 15; the range check is click's."""

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            value = self.read(value, _option(param) if param is not None else "number")
        return super().convert(value, param, ctx)

    def _describe_range(self) -> str:
        """click's range text for `--help`, or none for a number with no bound (click would print `x<=None`)."""
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


class Integer(_DecimalText, click.IntRange):
    name = "integer"
    read = staticmethod(parse_integer)


class Real(_DecimalText, click.FloatRange):
    name = "number"
    read = staticmethod(parse_real)


def _option(param: click.Parameter) -> str:
    return param.opts[0] if isinstance(param, click.Option) else param.human_readable_name


def name_value(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An id given on the command line follows the naming rule (docs/names.md)."""
    from registry.formats.names import check_name

    return None if value is None else check_name(value, _option(param))


def seed_value(_ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A seed on the command line is an integer in [0, 2**64 - 1]."""
    from registry.formats.names import check_seed

    return None if value is None else check_seed(value, _option(param))
