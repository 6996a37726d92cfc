"""How a benchmark prints the figures of one run: as JSON for a script, or one aligned line a figure for a reader."""
from __future__ import annotations

import json
from typing import Any


def print_figures(figures: dict[str, Any], *, as_json: bool, width: int) -> None:
    """`figures` as indented JSON, or each as `name value` with the names padded to `width` and floats to three
    decimals with thousands separators."""
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        print(f"{key:<{width}}{value:,.3f}" if isinstance(value, float) else f"{key:<{width}}{value}")
