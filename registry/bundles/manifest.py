"""The bundle manifest (`bundle.json`): what a shipped artifact is and where it may run.

A bundle is a directory of payload files plus this manifest, which declares
every file with its SHA-256 and size, the entry point, the operation the
artifact replaces, and the compatibility window a runtime must fall inside.
The schema is in docs/bundles.md. Parsing is strict in the way workload
manifests are: unknown fields, a path that could leave the bundle, a version
that does not parse or a range that is empty are errors, never defaults.

The bundle's identity is the SHA-256 of the manifest's canonical JSON; since
the manifest holds every file's digest, changing any byte of any file gives
a new identity. Pure: no database, no torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from registry.formats.errors import UserError
from registry.events.canonical import canonical_json, sha256_hex
from registry.formats.dtypes import ELEMENT_BYTES
from registry.formats.fields import ARCH

from .fields import FIELDS as f
from .fields import BundleFieldError

FORMAT = "registry.bundle/1"
MANIFEST_NAME = "bundle.json"
# A manifest is a short declaration; anything larger is refused before parsing.
MAX_MANIFEST_BYTES = 1 << 20
MAX_FILES = 4096

_TOP = ("format", "files", "entry_point", "replaces", "compatibility")
_FILE = ("path", "sha256", "size")
_ENTRY = ("file", "symbol")
_REPLACES = ("fingerprint", "inputs", "outputs")
_SIGNATURE = ("name", "shape", "stride", "dtype", "device")
_WINDOW = ("model", "gpu_architectures", "torch", "cuda", "triton", "execution_modes", "distributed_modes")
_MODEL = ("id", "revision")
_RANGE = ("min", "max_exclusive")
VERSIONED = ("torch", "cuda", "triton")

DTYPES = tuple(ELEMENT_BYTES)
DEVICE_TYPES = ("cpu", "cuda")
ANY = "*"
_MODE = re.compile(r"[a-z][a-z0-9_]*")


# Characters str.splitlines() breaks on: a name holding one is shown escaped so a refusal stays one line.
_LINE_BREAKS = {ord(c): repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"}


class BundleError(UserError):
    """A bundle or its manifest that cannot be accepted; the message is one line naming the problem."""

    def __init__(self, message: str):
        super().__init__(message.translate(_LINE_BREAKS))


@dataclass(frozen=True)
class BundleFile:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class TensorSignature:
    """One tensor the operation takes or returns; `*` in shape or stride accepts any size."""

    shape: tuple[int | str, ...]
    stride: tuple[int | str, ...]
    dtype: str
    device: str
    name: str | None = None

    def describe(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        strides = ",".join(str(s) for s in self.stride)
        return f"{self.dtype}[{dims}] stride ({strides}) on {self.device}"

    def canonical(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "stride": list(self.stride), "dtype": self.dtype,
                "device": self.device}


@dataclass(frozen=True)
class VersionRange:
    """`min` inclusive, `max_exclusive` exclusive; with neither, any version (or none) is accepted."""

    min: str | None = None
    max_exclusive: str | None = None

    @property
    def bounded(self) -> bool:
        return self.min is not None or self.max_exclusive is not None

    def specifier(self) -> SpecifierSet:
        """The range as a PEP 440 specifier set: `>=min,<max_exclusive`."""
        return SpecifierSet(self.describe() if self.bounded else "")

    def contains(self, version: str | None) -> bool:
        """Whether `version` lies in the range; a missing or unparseable version never meets a bound.

        PEP 440's specifier semantics, as `packaging` implements them: `<3.0`
        excludes 3.0's own pre-releases and dev releases (3.0.0rc1, 3.0.0a1,
        3.0.0.dev1) although they sort below 3.0, and a local version of a
        release inside the range (2.13.0+cu128) is inside it.
        """
        if not self.bounded:
            return True
        parsed = parse_version(version)
        return parsed is not None and self.specifier().contains(parsed)

    def describe(self) -> str:
        if not self.bounded:
            return "any"
        parts = ([f">={self.min}"] if self.min else []) + ([f"<{self.max_exclusive}"] if self.max_exclusive else [])
        return ",".join(parts)

    def canonical(self) -> dict[str, Any]:
        return {key: value for key, value in (("min", self.min), ("max_exclusive", self.max_exclusive)) if value}


@dataclass(frozen=True)
class Window:
    """Where the bundle may run: model, GPU architectures, library versions, modes."""

    model_id: str
    model_revision: str
    gpu_architectures: tuple[str, ...]
    versions: dict[str, VersionRange]
    execution_modes: tuple[str, ...]
    distributed_modes: tuple[str, ...]

    def canonical(self) -> dict[str, Any]:
        return {
            "model": {"id": self.model_id, "revision": self.model_revision},
            "gpu_architectures": list(self.gpu_architectures),
            **{name: self.versions[name].canonical() for name in VERSIONED},
            "execution_modes": list(self.execution_modes),
            "distributed_modes": list(self.distributed_modes),
        }


class DeclaredFiles:
    """What every manifest format shares: the files it declares, and its identity (the SHA-256 of its canonical form,
    which holds every file's digest, so any changed byte of any file is a new identity)."""

    files: tuple[BundleFile, ...]

    def canonical(self) -> dict[str, Any]:
        raise NotImplementedError

    @property
    def digest(self) -> str:
        """The bundle's identity: SHA-256 of the canonical manifest (which covers every file digest)."""
        return sha256_hex(canonical_json(self.canonical()))

    def file(self, path: str) -> BundleFile:
        return next(x for x in self.files if x.path == path)


@dataclass(frozen=True)
class BundleManifest(DeclaredFiles):
    files: tuple[BundleFile, ...]
    entry_file: str
    entry_symbol: str
    fingerprint: str
    inputs: tuple[TensorSignature, ...]
    outputs: tuple[TensorSignature, ...]
    window: Window

    format = FORMAT

    def canonical(self) -> dict[str, Any]:
        """The manifest as the one JSON form that is hashed, stored in the log and written to lock files."""
        return {
            "format": FORMAT,
            "files": [{"path": x.path, "sha256": x.sha256, "size": x.size} for x in self.files],
            "entry_point": {"file": self.entry_file, "symbol": self.entry_symbol},
            "replaces": {"fingerprint": self.fingerprint, "inputs": [s.canonical() for s in self.inputs],
                         "outputs": [s.canonical() for s in self.outputs]},
            "compatibility": self.window.canonical(),
        }

    def input_problem(self, inputs: tuple[TensorSignature, ...]) -> str | None:
        """Why a call site with these input signatures does not fit (None when every one fits its declared one)."""
        if len(inputs) != len(self.inputs):
            return f"{len(inputs)} inputs; the bundle takes {len(self.inputs)}"
        return next((p for p in (_signature_problem(i, g, d) for i, (g, d) in enumerate(zip(inputs, self.inputs)))
                     if p), None)


def _signature_problem(index: int, given: TensorSignature, declared: TensorSignature) -> str | None:
    label = f"input {index}" + (f" ({declared.name})" if declared.name else "")
    if given.dtype != declared.dtype:
        return f"{label}: dtype {given.dtype}, the bundle takes {declared.dtype}"
    if given.device != declared.device:
        return f"{label}: device {given.device}, the bundle takes {declared.device}"
    for what, have, want in (("shape", given.shape, declared.shape), ("stride", given.stride, declared.stride)):
        if len(have) != len(want) or any(w != ANY and h != w for h, w in zip(have, want)):
            return f"{label}: {what} {list(have)}, the bundle takes {list(want)}"
    return None


def check_token(value: Any, kind: str) -> str:
    """A GPU architecture (`kind="architecture"`) or mode name given by a runtime, refused in one line if malformed."""
    pattern, what = (ARCH, "a GPU architecture (sm90, sm100, ... or cpu)") if kind == "architecture" \
        else (_MODE, "a mode name (lowercase letters, digits, _)")
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise BundleError(f"{kind} {value!r} is not {what}")
    return value


def parse_version(text: str | None) -> Version | None:
    """A PEP 440 version, or None when there is none or it does not parse (never a guess)."""
    if not isinstance(text, str):
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def parse_bundle_manifest(data: Any) -> BundleManifest:
    """Build a `registry.bundle/1` manifest from parsed JSON; a problem is a BundleFieldError `field: problem`."""
    return _manifest(data)


def _manifest(data: Any) -> BundleManifest:
    top = f.mapping(data, "")
    f.only_known(top, _TOP, "")
    if f.required(top, "format", "") != FORMAT:
        raise BundleFieldError(f"format: {top['format']!r} is not {FORMAT!r}")
    files = parse_files(f.required(top, "files", ""))
    entry = f.mapping(f.required(top, "entry_point", ""), "entry_point")
    f.only_known(entry, _ENTRY, "entry_point")
    entry_file = f.text(f.required(entry, "file", "entry_point"), "entry_point.file")
    if entry_file not in {x.path for x in files}:
        raise BundleFieldError(f"entry_point.file: {entry_file!r} is not one of the declared files")
    if not entry_file.endswith(".py"):
        raise BundleFieldError(f"entry_point.file: {entry_file!r} is not a Python source file (.py)")
    symbol = f.text(f.required(entry, "symbol", "entry_point"), "entry_point.symbol")
    if not symbol.isidentifier():
        raise BundleFieldError(f"entry_point.symbol: {symbol!r} is not a Python identifier")
    replaces = f.mapping(f.required(top, "replaces", ""), "replaces")
    f.only_known(replaces, _REPLACES, "replaces")
    return BundleManifest(
        files=files, entry_file=entry_file, entry_symbol=symbol,
        fingerprint=f.text(f.required(replaces, "fingerprint", "replaces"), "replaces.fingerprint"),
        inputs=_signatures(f.required(replaces, "inputs", "replaces"), "replaces.inputs"),
        outputs=_signatures(f.required(replaces, "outputs", "replaces"), "replaces.outputs"),
        window=parse_window(f.required(top, "compatibility", "")),
    )


def _list(value: Any, path: str, *, limit: int | None = None) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise BundleFieldError(f"{path}: expected a non-empty list")
    if limit is not None and len(value) > limit:
        raise BundleFieldError(f"{path}: {len(value)} entries, more than the {limit} a bundle may hold")
    return value


def check_relative_path(path: Any, where: str) -> str:
    """A path inside the bundle: relative, POSIX separators, no `..`, `.` or empty parts."""
    text = f.text(path, where)
    if text.startswith("/") or re.match(r"[A-Za-z]:", text):
        raise BundleFieldError(f"{where}: {text!r} is an absolute path; paths are relative to the bundle")
    parts = text.split("/")
    if "\\" in text or "\0" in text or any(part in ("", ".", "..") for part in parts):
        raise BundleFieldError(f"{where}: {text!r} escapes or is not a plain path inside the bundle "
                            "(no '..', '.', empty parts or backslashes)")
    return text


def parse_files(value: Any) -> tuple[BundleFile, ...]:
    found: list[BundleFile] = []
    for index, item in enumerate(_list(value, "files", limit=MAX_FILES)):
        where = f"files[{index}]"
        entry = f.mapping(item, where)
        f.only_known(entry, _FILE, where)
        path = check_relative_path(f.required(entry, "path", where), f"{where}.path")
        if path == MANIFEST_NAME:
            raise BundleFieldError(f"{where}.path: the manifest {MANIFEST_NAME} does not list itself")
        if any(x.path == path for x in found):
            raise BundleFieldError(f"{where}.path: {path!r} is declared twice")
        digest = f.sha256(f.required(entry, "sha256", where), f"{where}.sha256")
        found.append(BundleFile(path, digest, f.integer(f.required(entry, "size", where), f"{where}.size", 0)))
    paths = {x.path for x in found}
    for x in found:
        # A file and a directory of the same name cannot both exist on disk.
        parent = x.path.rsplit("/", 1)[0] if "/" in x.path else None
        if parent in paths:
            raise BundleFieldError(f"files: {parent!r} is declared as a file and as a directory")
    return tuple(sorted(found, key=lambda x: x.path))


def _dims(value: Any, path: str) -> tuple[int | str, ...]:
    if not isinstance(value, list):
        raise BundleFieldError(f"{path}: expected a list of sizes (integers or '*')")
    return tuple(d if d == ANY else f.integer(d, f"{path}[{i}]", 0) for i, d in enumerate(value))


def _signatures(value: Any, path: str) -> tuple[TensorSignature, ...]:
    found = []
    for index, item in enumerate(_list(value, path, limit=64)):
        where = f"{path}[{index}]"
        spec = f.mapping(item, where)
        f.only_known(spec, _SIGNATURE, where)
        shape = _dims(f.required(spec, "shape", where), f"{where}.shape")
        stride = _dims(f.required(spec, "stride", where), f"{where}.stride")
        if len(shape) != len(stride):
            raise BundleFieldError(f"{where}.stride: {len(stride)} strides for {len(shape)} dimensions")
        name = spec.get("name")
        found.append(TensorSignature(
            shape=shape, stride=stride,
            dtype=f.choice(f.required(spec, "dtype", where), DTYPES, f"{where}.dtype"),
            device=f.choice(f.required(spec, "device", where), DEVICE_TYPES, f"{where}.device"),
            name=None if name is None else f.text(name, f"{where}.name"),
        ))
    return tuple(found)


def _tokens(value: Any, path: str, pattern: re.Pattern, what: str) -> tuple[str, ...]:
    items = _list(value, path, limit=64)
    for index, item in enumerate(items):
        if not isinstance(item, str) or not pattern.fullmatch(item):
            raise BundleFieldError(f"{path}[{index}]: {item!r} is not {what}")
    if len(set(items)) != len(items):
        raise BundleFieldError(f"{path}: an entry is listed twice")
    return tuple(items)


def _range(value: Any, path: str) -> VersionRange:
    spec = f.mapping(value, path)
    f.only_known(spec, _RANGE, path)
    bounds = {}
    for key in _RANGE:
        if key in spec:
            text = f.text(spec[key], f"{path}.{key}")
            if parse_version(text) is None:
                raise BundleFieldError(f"{path}.{key}: {text!r} is not a version (PEP 440)")
            bounds[key] = text
    result = VersionRange(**bounds)
    try:
        result.specifier()
    except InvalidSpecifier:
        raise BundleFieldError(f"{path}: {result.describe()!r} is not a PEP 440 version range "
                            "(a bound cannot carry a local version such as +cu128)") from None
    if result.min and result.max_exclusive and Version(result.min) >= Version(result.max_exclusive):
        raise BundleFieldError(f"{path}: min {result.min} is not below max_exclusive {result.max_exclusive}; "
                            "the range is empty")
    return result


def parse_window(value: Any) -> Window:
    spec = f.mapping(value, "compatibility")
    f.only_known(spec, _WINDOW, "compatibility")
    model = f.mapping(f.required(spec, "model", "compatibility"), "compatibility.model")
    f.only_known(model, _MODEL, "compatibility.model")
    return Window(
        model_id=f.text(f.required(model, "id", "compatibility.model"), "compatibility.model.id"),
        model_revision=f.text(f.required(model, "revision", "compatibility.model"), "compatibility.model.revision"),
        gpu_architectures=_tokens(f.required(spec, "gpu_architectures", "compatibility"),
                                  "compatibility.gpu_architectures", ARCH, "a GPU architecture (sm90, sm100, ... or cpu)"),
        versions={name: _range(f.required(spec, name, "compatibility"), f"compatibility.{name}") for name in VERSIONED},
        execution_modes=_tokens(f.required(spec, "execution_modes", "compatibility"), "compatibility.execution_modes",
                                _MODE, "a mode name (lowercase letters, digits, _)"),
        distributed_modes=_tokens(f.required(spec, "distributed_modes", "compatibility"),
                                  "compatibility.distributed_modes", _MODE, "a mode name (lowercase letters, digits, _)"),
    )
