"""One naming rule for every id the registry records: artifacts, workloads, frame sets, actors and run ids.

A name is 1 to 128 characters long, starts with a letter or a digit, and
holds no whitespace, no control or other invisible character, and no colon.

Why each part:
- a length limit declared here, so a name is refused in the user's terms
  ("artifact id ... is 300 characters long") and never reaches the store's
  own limit on stream names (`artifact:<id>` must fit in 200 characters);
- a letter or digit first, so a name can never be read as a command-line
  option (`-x`) and never begins with punctuation that a shell or a
  terminal treats specially;
- no whitespace (a newline would forge a second line in every listing and
  log; a trailing space makes two names look alike), and no control or
  invisible character (Unicode categories C* and Z*: NUL, escapes that
  drive a terminal, zero-width and direction marks);
- NFC on entry (`normalized_name`), so `é` typed precomposed or as `e` and
  a combining accent is one name, stored and compared in one form; and no
  default-ignorable character (a variation selector, a combining grapheme
  joiner, a Hangul filler, the blank Braille pattern), which draws nothing;
- no colon, the separator of stream names (`artifact:ID`, `workload:ID`), so
  `registry history ID` can always tell an id from a stream name.

Everything else is allowed, brackets and dollars included: names are
printed literally everywhere (registry.cli.output). The rule is pure and
imports nothing from the registry but the refusal root (registry.formats.errors),
so the CLI, the application layer, the manifest and the evidence-document
parsers all apply the same one.

Stream names are built here too, from a kind's prefix and a name: every
event is about one artifact (`artifact:<id>`), one workload
(`workload:<id>`) or one frame set (`frameset:<name>`).
"""
from __future__ import annotations

import unicodedata
from typing import Any

from registry.formats.errors import UserError

MAX_NAME_LENGTH = 128
NAME_RULE = (f"1 to {MAX_NAME_LENGTH} characters, starting with a letter or digit, "
             "with no whitespace, control characters or ':'")
# How much of a refused name a message quotes.
_QUOTED = 40


# Characters that draw nothing although their category is a letter, mark or symbol: Unicode's
# Default_Ignorable_Code_Point ranges outside categories C and Z (DerivedCoreProperties.txt: the combining
# grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian variation selectors, variation selectors,
# musical formatting, tags) and the blank Braille pattern U+2800, which renders as a space.
_INVISIBLE = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800),
              (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


def is_invisible(char: str) -> bool:
    """A control, format, separator or default-ignorable character: one that a name must not hold."""
    code = ord(char)
    return unicodedata.category(char)[0] in "CZ" or any(low <= code <= high for low, high in _INVISIBLE)


def normalized_name(value: Any) -> Any:
    """A name as the registry stores and compares it: NFC (`é` typed as e + U+0301 is the precomposed `é`)."""
    return unicodedata.normalize("NFC", value) if isinstance(value, str) and not value.isascii() else value


def name_problem(value: Any) -> str | None:
    """What is wrong with `value` (NFC-normalised) as a name, in a few words; None when it is a valid name."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    value = normalized_name(value)
    if not value:
        return "is empty"
    if len(value) > MAX_NAME_LENGTH:
        return f"is {len(value)} characters long"
    if not value[0].isalnum():
        return f"starts with {value[0]!r}"
    for char in value:
        if char == "\n":
            return "contains a line break"
        if char.isspace():
            return f"contains whitespace ({char!r})"
        if is_invisible(char):
            return f"contains the control or invisible character U+{ord(char):04X}"
        if char == ":":
            return "contains ':'"
    return None


def _quoted(value: Any) -> str:
    """A refused name as a message shows it: repr, shortened past 40 characters."""
    if isinstance(value, str) and len(value) > _QUOTED:
        return repr(value[:_QUOTED]) + "…"
    return repr(value)


def name_refusal(value: Any) -> str | None:
    """Why `value` is refused as a name, quoting it and stating the rule; None when it is a valid name.

    Each parser puts its own words for where the name came from in front
    (an option, a manifest field, a document field).
    """
    problem = name_problem(value)
    return None if problem is None else f"{_quoted(value)} {problem} (a name is {NAME_RULE})"


def check_name(value: Any, what: str) -> str:
    """`value` NFC-normalised when it is a valid name; else raise UserError naming `what` (e.g. "--run")."""
    refusal = name_refusal(value)
    if refusal is not None:
        raise UserError(f"{what} {refusal}")
    return normalized_name(value)


# A seed identifies how frames were generated; generators take unsigned 64-bit seeds.
MAX_SEED = 2**64 - 1


def check_seed(value: Any, what: str) -> int:
    """Return `value` when it is a seed (an integer in [0, 2**64 - 1]); else raise UserError naming `what`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer seed, not {type(value).__name__}")
    if not 0 <= value <= MAX_SEED:
        raise UserError(f"{what} {value} is outside [0, 2**64 - 1], the range of a generator's seed")
    return value


# The subject of every stream: its prefix, and the name after it (docs/architecture.md, "Events").
ARTIFACT_PREFIX, WORKLOAD_PREFIX, FRAMESET_PREFIX = "artifact:", "workload:", "frameset:"
STREAM_PREFIXES = (ARTIFACT_PREFIX, WORKLOAD_PREFIX, FRAMESET_PREFIX)
# An identity's benchmark sessions, imported outcomes about a whole workload, an API token's issue and revocation.
BENCH_PREFIX, OUTCOMES_PREFIX, TOKEN_PREFIX = "bench:", "outcomes:", "token:"


def artifact_stream(artifact: str) -> str:
    return f"{ARTIFACT_PREFIX}{artifact}"


def workload_stream(workload: str) -> str:
    return f"{WORKLOAD_PREFIX}{workload}"


def frameset_stream(name: str) -> str:
    return f"{FRAMESET_PREFIX}{name}"


def bench_stream(identity: str) -> str:
    return f"{BENCH_PREFIX}{identity}"


def outcomes_stream(workload: str) -> str:
    return f"{OUTCOMES_PREFIX}{workload}"


HOOK_PREFIX = "hook:"


def hook_stream(hook_id: str) -> str:
    """The stream of one webhook: its addition, its delivery attempts, its removal (docs/hooks.md)."""
    return f"{HOOK_PREFIX}{hook_id}"
