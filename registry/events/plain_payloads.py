"""Validating and encoding a payload of plain fields without building its pydantic model.

Every append validates each payload against its type's model and writes its
canonical JSON. For a model whose fields are all of a few plain kinds (str,
int, a Literal of strs, dict[str, Any], each of them optionally None; with
min and max length, a lower bound, or the sha256 pattern), what pydantic's
strict, closed validation accepts is what a few type and range checks say,
and the validated fields are the given values with None for those left out.
`compile_plain` reads such a model's core schema (what pydantic-core
validates with) into those checks and the layout of its canonical text, and
`PlainPayload.encode` writes the text of a payload that passes them
directly, without the model object and without sorting its keys (about half
the cost of the model and the encoder together).

It only ever accepts. A payload it is not sure of (a key missing or extra, a
value or key of another type, a str or dict subclass included, a value out
of range, a nested value the encoder refuses) gets None, and the append
validates it with the model as before, so every refusal and its message is
still the model's. A model whose schema holds anything else (a validator, an
alias, another type or constraint, a default other than None, other
settings) is not compiled at all. A property test holds the two paths to the
same outcome on hostile payloads (tests/events/test_plain_payloads.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from json.encoder import encode_basestring as _quote  # the canonical encoder's own string quoting

from registry.formats.digests import SHA256_PATTERN, is_sha256
from registry.formats.text import is_unicode_text

from .canonical import encode_json

_MISSING = object()
# The compiled forms written down (`written_forms`), which appends read instead of the models.
FORMS_FILE = Path(__file__).with_name("plain_forms.json")

# Field kinds.
_STR, _INT, _LITERAL, _DICT = "str", "int", "literal", "dict"


@dataclass(frozen=True)
class Field:
    """One field of a compiled model: its kind, whether it may be left out or None, and its constraints."""

    name: str
    kind: str
    required: bool
    nullable: bool
    min_length: int = 0
    max_length: int | None = None
    ge: int | None = None
    sha256: bool = False
    members: frozenset[str] = frozenset()


def _keys(schema: dict, allowed: set[str]) -> bool:
    return isinstance(schema, dict) and set(schema) <= allowed


def _field(name: str, field: dict) -> Field | None:
    """The plain form of one field of a model's core schema, or None if it is not one of the plain kinds.

    Read from the schema pydantic-core itself validates with; a key that is
    not listed here (an alias, a validator, a strictness of its own, another
    constraint) leaves the field, and so the model, uncompiled.
    """
    if not _keys(field, {"type", "schema", "metadata"}) or field["type"] != "model-field" or field.get("metadata"):
        return None
    schema, required, nullable = field["schema"], True, False
    if _keys(schema, {"type", "schema", "default"}) and schema["type"] == "default":
        if "default" not in schema or schema["default"] is not None:
            return None
        schema, required = schema["schema"], False
    if _keys(schema, {"type", "schema"}) and schema["type"] == "nullable":
        schema, nullable = schema["schema"], True
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == _STR and _keys(schema, {"type", "min_length", "max_length", "pattern"}):
        if schema.get("pattern", SHA256_PATTERN) != SHA256_PATTERN:
            return None
        return Field(name, _STR, required, nullable, min_length=schema.get("min_length", 0),
                      max_length=schema.get("max_length"), sha256="pattern" in schema)
    if kind == _INT and _keys(schema, {"type", "ge"}) and type(schema.get("ge", 0)) is int:
        return Field(name, _INT, required, nullable, ge=schema.get("ge"))
    if (kind == _LITERAL and _keys(schema, {"type", "expected"})
            and all(type(member) is str for member in schema["expected"])):
        return Field(name, _LITERAL, required, nullable, members=frozenset(schema["expected"]))
    if schema == {"type": _DICT, "keys_schema": {"type": "str"}, "values_schema": {"type": "any"}}:
        return Field(name, _DICT, required, nullable)
    return None


def _field_check(index: int, field: Field) -> list[str]:
    """Source lines that check one field's value `value` (present, not None) and set its text `text<index>`."""
    if field.kind == _DICT:
        return ["if type(value) is not dict:", "    return None", "for key in value:",
                "    if type(key) is not str:", "        return None", f"text{index} = encode_json(value)"]
    if field.kind == _INT:
        bound = "" if field.ge is None else f" or value < {field.ge!r}"
        return [f"if type(value) is not int{bound}:", "    return None", f"text{index} = int.__repr__(value)"]
    if field.kind == _LITERAL:
        return [f"if type(value) is not str or value not in members{index}:", "    return None",
                f"text{index} = quote(value)"]
    limits = "".join([f" or len(value) < {field.min_length!r}" if field.min_length else "",
                      "" if field.max_length is None else f" or len(value) > {field.max_length!r}",
                      " or not is_sha256(value)" if field.sha256 else ""])
    return [f"if type(value) is not str{limits}:", "    return None", f"text{index} = quote(value)"]


def _encoder_source(fields: list[Field], layout: str) -> str:
    """The source of one model's `encode(data)`: each field's checks written out in turn, then the layout filled.

    Straight-line code, as `dataclasses` writes its __init__: the same checks
    as a loop over the fields would make, without the loop's per-field
    dispatch. What it is made of is the schema's: field names (identifiers),
    numbers, and a Literal's members passed in by name; never a payload's text.
    """
    # Keys must be str itself: a subclass can say it equals a field's name and hash like it.
    lines = ["def encode(data):", "    if type(data) is not dict:", "        return None", "    for key in data:",
             "        if type(key) is not str:", "            return None", "    given = 0", "    try:"]
    for index, field in enumerate(fields):
        missing = "return None" if field.required else f"text{index} = 'null'"
        none = ["given += 1", f"text{index} = 'null'"] if field.nullable else ["return None"]
        body = [f"value = data.get({field.name!r}, MISSING)", "if value is MISSING:", f"    {missing}",
                "elif value is None:", *(f"    {line}" for line in none), "else:", "    given += 1",
                *(f"    {line}" for line in _field_check(index, field))]
        lines += [f"        {line}" for line in body]
    lines += ["    except (TypeError, ValueError, RecursionError):  # the model path names what the encoder refuses",
              "        return None",
              "    if given != len(data):  # a key that is not a field (extra='forbid')", "        return None",
              f"    text = {layout!r} % ({', '.join(f'text{index}' for index in range(len(fields)))},)",
              "    return text if is_unicode_text(text) else None"]
    return "\n".join(lines) + "\n"


class PlainPayload:
    """A compiled payload model: `encode(data)` returns a payload's canonical text, or None to defer to the model."""

    def __init__(self, schema_version: int, fields: list[Field]):
        self.schema_version = schema_version
        self.fields = sorted(fields, key=lambda field: field.name)  # the canonical text's key order
        # One %s per field: '{"artifact":%s,"identity":%s,...}'. Field names are identifiers, with no % in them.
        layout = "{" + ",".join(f"{_quote(field.name)}:%s" for field in self.fields) + "}"
        self.source = _encoder_source(self.fields, layout)
        namespace = {"MISSING": _MISSING, "quote": _quote, "encode_json": encode_json, "is_sha256": is_sha256,
                     "is_unicode_text": is_unicode_text,
                     **{f"members{index}": field.members for index, field in enumerate(self.fields)}}
        exec(compile(self.source, f"<plain payload encoder {', '.join(f.name for f in self.fields)}>", "exec"),
             namespace)
        self.encode = namespace["encode"]


def compile_plain(model: Any) -> PlainPayload | None:
    """The compiled form of a payload model (a pydantic model class), or None when any of its settings or
    fields is not plain. Read from the model's core schema, the one pydantic-core validates with."""
    schema = model.__pydantic_core_schema__
    if not (_keys(schema, {"type", "cls", "config", "custom_init", "metadata", "ref", "root_model", "schema"})
            and schema["type"] == "model" and not schema.get("custom_init") and not schema.get("root_model")
            and _keys(schema.get("config"), {"extra_fields_behavior", "strict", "title"})
            and schema["config"].get("extra_fields_behavior") == "forbid" and schema["config"].get("strict") is True):
        return None
    inner = schema["schema"]
    if not (_keys(inner, {"type", "fields", "model_name", "computed_fields"}) and inner["type"] == "model-fields"
            and not inner.get("computed_fields") and inner.get("fields")):
        return None
    fields = [_field(name, field) for name, field in inner["fields"].items()]
    if any(field is None for field in fields):
        return None
    return PlainPayload(model.schema_version, fields)


def written_forms(models: dict[str, Any]) -> str:
    """The text of plain_forms.json: each model's compiled form (`compile_plain`) written down as data, so an
    append of a plain payload is checked and encoded without importing the models (pydantic). tests/
    test_plain_payloads.py holds the file to what this writes from the models as they stand; `python -m
    registry.events.types` writes it."""
    forms = {}
    for name in sorted(models):
        plain = compile_plain(models[name])
        if plain is not None:
            forms[name] = {"schema_version": plain.schema_version, "fields": [
                {"name": field.name, "kind": field.kind, "required": field.required, "nullable": field.nullable,
                 "min_length": field.min_length, "max_length": field.max_length, "ge": field.ge,
                 "sha256": field.sha256, "members": sorted(field.members)} for field in plain.fields]}
    return json.dumps(forms, indent=1, sort_keys=True) + "\n"


class WrittenForms(dict):
    """Event type -> its compiled form from plain_forms.json (None where its model has none), each compiled into
    its encoder on first use: an append of a plain payload imports no model and no pydantic."""

    def __missing__(self, event_type: str) -> PlainPayload | None:
        written = _forms().get(event_type)
        if written is None:
            return None
        fields = [Field(**{**field, "members": frozenset(field["members"])}) for field in written["fields"]]
        plain = self[event_type] = PlainPayload(written["schema_version"], fields)
        return plain


@cache
def _forms() -> dict[str, Any]:
    return json.loads(FORMS_FILE.read_text(encoding="utf-8"))


WRITTEN_FORMS = WrittenForms()
