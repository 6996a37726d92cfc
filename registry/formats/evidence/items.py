"""One evidence item: checked against its kind's schema, then given the `derived` dict the registry computes.

The gate re-runs `parse_item` on every payload it reads, so a payload stored
by any other path than a document meets the same checks.
"""
from __future__ import annotations

from typing import Any

from registry.formats.evidence.derived import DERIVE
from registry.formats.evidence.errors import KIT, EvidenceError, only_known
from registry.formats.evidence.schemas import KINDS, SPECS


def parse_item(obj: Any, where: str = "item") -> dict[str, Any]:
    """Validate one raw item and return it normalized, with a registry-computed `derived` dict."""
    raw = KIT.mapping(obj, where)
    kind = raw.get("kind")
    if kind not in KINDS:
        raise EvidenceError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    spec = SPECS[kind]
    only_known(raw, ("kind", *spec), where)
    item: dict[str, Any] = {"kind": kind, **KIT.fields(raw, spec, where)}
    item["derived"] = DERIVE[kind](item, where)
    return item
