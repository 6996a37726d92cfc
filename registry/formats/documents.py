"""Reading a document a user hands the registry (a workload manifest, an evidence document) safely.

The one place both readers share, so a hostile file meets the same checks
whichever command it is given to, and every refusal is one line naming the
file:

- only a regular file is read, and its size is checked before a byte is
  read: a FIFO would block, `/dev/zero` never ends, and a file past the
  documented maximum is refused rather than loaded into memory (files that
  are hashed rather than parsed, a payload or a bundle's files, go through
  the same check: `sha256_file`);
- the text must be UTF-8 without a byte-order mark (a UTF-16 file is named
  as such instead of failing with a decoder's message);
- once parsed, the tree is checked for what a parser lets through but the
  registry cannot keep: nesting past `MAX_DEPTH` levels and strings holding a
  lone UTF-16 surrogate (which JSON's `\\ud800` escape produces and no UTF-8
  encoder can write, so it would otherwise fail deep inside an append);
- integer tokens longer than `MAX_INTEGER_DIGITS` are refused by the parsers
  before conversion (`too_many_digits`), in the user's terms rather than
  Python's own limit on integer conversion.

Pure: no database, no torch.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from registry.formats.text import is_unicode_text, printable_path
from registry.formats.errors import UserError

MAX_EVIDENCE_BYTES = 16 * 1024 * 1024
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
MAX_INTEGER_DIGITS = 1000
_BLOCK = 1 << 20

_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"), (codecs.BOM_UTF8, "UTF-8 with a byte-order mark"),
)
_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


_SURROGATE = "text holds a lone surrogate (U+D800 to U+DFFF), which is not valid Unicode"


class DocumentError(UserError):
    """A user document the registry will not read; one line naming the file (or the document) and why."""


def read_document(path: str | Path, what: str, max_bytes: int, *, follow_symlinks: bool = True) -> str:
    """The UTF-8 text of the regular file at `path`, refused before reading when it cannot be one.

    `what` names the document in messages ("evidence document", "manifest").
    """
    fd = open_regular(path, what, max_bytes, follow_symlinks=follow_symlinks)
    try:
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew while being read
        raise DocumentError(f"{path}: over the {_mib(max_bytes)} {_article(what)} {what} may have")
    return document_text(data, str(path), what, max_bytes)


def document_text(data: bytes | bytearray, where: str, what: str, max_bytes: int) -> str:
    """`data` as a document's text, refused in one line naming `where` (a file, or a request's body): at most
    `max_bytes`, UTF-8, without a byte-order mark (a UTF-16 document is named as such)."""
    if len(data) > max_bytes:
        raise DocumentError(too_large(len(data), max_bytes, where, what))
    for mark, encoding in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            raise DocumentError(f"{where}: the {what} is {encoding} text; save it as UTF-8 (without a byte-order mark)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{where}: not UTF-8 text (byte {exc.start}); save the {what} as UTF-8") from None


def too_large(size: int, max_bytes: int, where: str, what: str) -> str:
    """The refusal of a document of `size` bytes over its `max_bytes`."""
    return f"{where}: {_mib(size)}, over the {_mib(max_bytes)} {_article(what)} {what} may have"


def open_regular(path: str | Path, what: str, max_bytes: int, *, follow_symlinks: bool = True) -> int:
    """A file descriptor open for reading on the regular file at `path`, checked before a byte is read.

    Refused in one line: anything but a regular file (a FIFO is opened without
    blocking, then refused by kind), a file larger than `max_bytes`, and with
    `follow_symlinks=False` a symlink. The caller closes the descriptor.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise DocumentError(f"{path}: cannot read {what}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((label for test, label in _FILE_KINDS if test(info.st_mode)), "not a regular file")
            raise DocumentError(f"{path}: {kind}, not a regular file; give the {what} as a file")
        if info.st_size > max_bytes:
            raise DocumentError(too_large(info.st_size, max_bytes, str(path), what))
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_file(path: str | Path, what: str, max_bytes: int, *, follow_symlinks: bool = True) -> tuple[str, int]:
    """SHA-256 (hex) and size of the regular file at `path`, read in blocks under open_regular's rules.

    For files whose content is hashed rather than parsed (a payload, a bundle's
    files); a file that grows past `max_bytes` while it is read is refused too.
    """
    digest = hashlib.sha256()
    size = 0
    fd = open_regular(path, what, max_bytes, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            size += len(block)
            if size > max_bytes:
                raise DocumentError(f"{path}: over the {_mib(max_bytes)} {_article(what)} {what} may have")
            digest.update(block)
    return digest.hexdigest(), size


def load_json(text: str, what: str) -> Any:
    """Strict JSON for a user document, refused in one line naming `what`.

    Refused while parsing: the NaN/Infinity tokens, a key repeated in one
    object (JSON readers keep the last silently), integers past
    MAX_INTEGER_DIGITS; then (check_tree) nesting past MAX_DEPTH and strings
    holding a lone surrogate.
    """
    def refuse_constant(token: str) -> Any:
        raise DocumentError(f"{what}: the JSON token {token} is not a number the registry accepts")

    def integer(token: str) -> int:
        if too_many_digits(token):
            raise DocumentError(integer_refusal(token, what))
        return int(token)

    def without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, value in pairs:
            if key in obj:
                raise DocumentError(f"{what}: duplicate key {key!r} in one object (a reader would keep only one)")
            obj[key] = value
        return obj

    try:
        value = json.loads(text, parse_constant=refuse_constant, parse_int=integer, object_pairs_hook=without_duplicates)
    except json.JSONDecodeError as exc:
        raise DocumentError(f"{what}: invalid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise DocumentError(f"{what}: nested more than {MAX_DEPTH} levels deep") from None
    check_tree(value, what)
    return value


def check_tree(value: Any, what: str) -> None:
    """Refuse a parsed document nested past MAX_DEPTH or holding a string no UTF-8 file could hold.

    Iterative, so a tree at any depth is checked without recursion; a refusal
    names the path in the document (`evidence[0].device`).
    """
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, str) and not is_unicode_text(node):
            raise DocumentError(f"{what}: {printable_path(path) or 'the document'}: {_SURROGATE}")
        if isinstance(node, (dict, list)) and depth > MAX_DEPTH:
            raise DocumentError(f"{what}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            for key, child in node.items():
                inner = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and not is_unicode_text(key):
                    raise DocumentError(f"{what}: {printable_path(inner)}: the key {_SURROGATE}")
                stack.append((child, depth + 1, inner))
        elif isinstance(node, list):
            stack.extend((child, depth + 1, f"{path}[{index}]") for index, child in enumerate(node))


def too_many_digits(token: str) -> bool:
    """Whether an integer token (optional sign, digits, YAML's `_` separators) is past MAX_INTEGER_DIGITS."""
    return sum(character.isdigit() for character in token) > MAX_INTEGER_DIGITS


def integer_refusal(token: str, what: str) -> str:
    digits = sum(character.isdigit() for character in token)
    return f"{what}: an integer of {digits} digits; a value here has at most {MAX_INTEGER_DIGITS}"


def _article(noun: str) -> str:
    return "an" if noun[:1] in "aeiou" else "a"


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB"
