"""Reading a manifest's YAML text strictly: duplicate keys and malformed text are errors, not guesses.

Apart from `manifest` because PyYAML is needed only where a manifest is read,
and `registry.contracts` is imported on every registry open (for the naming
rule), including by read commands that never see a manifest.
"""
from __future__ import annotations

from typing import Any

import yaml

from registry.contracts.errors import ContractError
from registry.formats.documents import MAX_DEPTH, DocumentError, check_tree, integer_refusal, too_many_digits


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of keeping the last one silently, and aliases.

    An alias (`*name`) repeats a node by reference, so a few hundred bytes of
    nested aliases stand for billions of values: every later walk of the tree
    (the depth check, the contract's own checks, canonical JSON) would spend
    minutes on them. A manifest is short enough to write out, so aliases (and
    merge keys, which use them) are refused where they appear, before any
    expansion.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ContractError(f"manifest line {event.start_mark.line + 1}: an alias (*{event.anchor}) repeats "
                                "another value; aliases are not accepted in a manifest, write the value out")
        return super().compose_node(parent, index)


def _integer_within_limit(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    """YAML's int, refused past MAX_INTEGER_DIGITS before Python's own conversion limit speaks."""
    if too_many_digits(node.value):
        raise ContractError(integer_refusal(node.value, f"manifest line {node.start_mark.line + 1}"))
    return loader.construct_yaml_int(node)


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
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _integer_within_limit)


def load_yaml(text: str) -> Any:
    """The mapping a manifest's YAML text holds; every failure is one ContractError line.

    Besides YAML's own errors, duplicate keys and aliases: integers past
    MAX_INTEGER_DIGITS, nesting past MAX_DEPTH and strings holding a lone
    surrogate (registry.formats.documents, shared with evidence documents).
    """
    if not isinstance(text, str):
        raise ContractError(f"manifest: expected YAML text, got {type(text).__name__}")
    try:
        tree = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
        check_tree(tree, "manifest")
        return tree
    except DocumentError as exc:
        raise ContractError(str(exc)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ContractError(f"manifest: invalid YAML: {exc.problem}{where}") from None
    except (yaml.YAMLError, TypeError) as exc:
        raise ContractError(f"manifest: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ContractError(f"manifest: nested more than {MAX_DEPTH} levels deep") from None
