"""Reading a manifest's YAML text strictly: duplicate keys and malformed text are errors, not guesses.

Apart from `manifest` because PyYAML is needed only where a manifest is read,
and `registry.contracts` is imported on every registry open (for the naming
rule), including by read commands that never see a manifest.
"""
from __future__ import annotations

from typing import Any

import yaml

from registry.contracts.errors import ContractError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one silently."""


def _mapping_without_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise ContractError(f"{key}: duplicate key (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(text: str) -> Any:
    """The mapping a manifest's YAML text holds; every failure is one ContractError line."""
    if not isinstance(text, str):
        raise ContractError(f"manifest: expected YAML text, got {type(text).__name__}")
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ContractError(f"manifest: invalid YAML: {exc.problem}{where}") from None
    except (yaml.YAMLError, TypeError) as exc:
        raise ContractError(f"manifest: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ContractError("manifest: nested too deeply to be a workload manifest") from None
