"""The manifest of a compiled Triton kernel bundle (`registry.triton-kernel/1`): files, sources, spec, window.

A `triton_kernel` artifact ships no Python to run: its bundle holds the
`@triton.jit` source (for review, never executed), per kernel and target
architecture Triton's TTIR, the cubin and Triton's metadata JSON, and the
launch spec (registry/formats/launch_spec.py) that says what each call
launches. The manifest declares every file with its SHA-256 and size exactly
as a `registry.bundle/1` manifest does (registry/bundles/manifest.py: the same
path rules, the same compatibility window, the same identity: the SHA-256 of
the canonical manifest), and adds:

- `sources`: the declared `.py` files holding the kernels' source;
- `triton`: the Triton version the kernels were compiled with, which must be
  the one the registry rebuilds them with;
- `spec`: the launch spec, whose kernel targets name declared files (`.ttir`,
  `.cubin`, `.json`), each file used once;
- `replaces.fingerprint`: the operation replaced;
- `compatibility`: the window, whose `gpu_architectures` must be exactly the
  devices the spec's targets run on (sm_90a -> sm90, sm_100a -> sm100).

Every declared file is a source or a kernel file: nothing ships unexplained.
Parsing is strict (unknown fields at any depth, one-line refusals). Pure:
reading the cubins themselves is registry/bundles/cubin.py's job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from registry.formats.kinds import TRITON_KERNEL_FORMAT
from registry.formats.launch_spec import (TARGET_ARCHES, TRITON_VERSION, CallRefused, CallTensor, KernelTarget,
                                          LaunchSpec, SpecError, match_call, parse_launch_spec)

from .fields import FIELDS as f
from .fields import BundleFieldError
from .manifest import BundleFile, DeclaredFiles, TensorSignature, Window, parse_files, parse_window

_TOP = ("format", "files", "sources", "triton", "spec", "replaces", "compatibility")
_REPLACES = ("fingerprint",)
TARGET_SUFFIXES = {"ttir": ".ttir", "cubin": ".cubin", "metadata": ".json"}
MAX_TARGET_BYTES = {"ttir": 32 << 20, "cubin": 64 << 20, "metadata": 1 << 20}
MAX_KERNEL_FILES_BYTES = 512 << 20
"""What registration reads into memory and sends to the rebuild: each kernel file, and all of them together."""


@dataclass(frozen=True)
class KernelBundleManifest(DeclaredFiles):
    files: tuple[BundleFile, ...]
    sources: tuple[str, ...]
    triton: str
    spec: LaunchSpec
    fingerprint: str
    window: Window

    format = TRITON_KERNEL_FORMAT

    def canonical(self) -> dict[str, Any]:
        """The manifest as the one JSON form that is hashed, stored in the log and written to lock files."""
        return {
            "format": TRITON_KERNEL_FORMAT,
            "files": [{"path": x.path, "sha256": x.sha256, "size": x.size} for x in self.files],
            "sources": list(self.sources),
            "triton": self.triton,
            "spec": self.spec.canonical(),
            "replaces": {"fingerprint": self.fingerprint},
            "compatibility": self.window.canonical(),
        }

    def targets(self) -> list[tuple[str, KernelTarget]]:
        """Every (kernel key, target) the bundle carries a cubin for, in a stable order."""
        return [(key, kernel.targets[arch]) for key, kernel in sorted(self.spec.kernels.items())
                for arch in sorted(kernel.targets)]

    def input_problem(self, inputs: tuple[TensorSignature, ...]) -> str | None:
        """Why a call site with these input signatures would not be launched (None when the spec takes it)."""
        declared = [t for t in self.spec.tensors if t.role != "output"]
        if len(inputs) != len(declared):
            return f"{len(inputs)} inputs; the bundle takes {len(declared)}"
        given = {}
        for index, (signature, tensor) in enumerate(zip(inputs, declared)):
            if signature.device != "cuda":
                return f"input {index} ({tensor.name}): device {signature.device}, the bundle takes cuda"
            if any(not isinstance(d, int) for d in signature.shape + signature.stride):
                return f"input {index} ({tensor.name}): the bundle's spec needs every size and stride"
            given[tensor.name] = CallTensor(signature.dtype, tuple(signature.shape), tuple(signature.stride))
        try:
            match_call(self.spec, given)
        except CallRefused as exc:
            return str(exc)
        return None


def parse_kernel_manifest(data: Any) -> KernelBundleManifest:
    """Build a kernel bundle manifest from parsed JSON; a problem is a BundleFieldError `field: problem`."""
    top = f.mapping(data, "")
    f.only_known(top, _TOP, "")
    if f.required(top, "format", "") != TRITON_KERNEL_FORMAT:
        raise BundleFieldError(f"format: {top['format']!r} is not {TRITON_KERNEL_FORMAT!r}")
    files = parse_files(f.required(top, "files", ""))
    paths = {x.path for x in files}
    sources = _sources(f.required(top, "sources", ""), paths)
    triton = f.text(f.required(top, "triton", ""), "triton")
    if triton != TRITON_VERSION:
        raise BundleFieldError(f"triton: {triton!r}; the registry rebuilds kernels with Triton {TRITON_VERSION} only")
    try:
        spec = parse_launch_spec(f.required(top, "spec", ""), "spec")
    except SpecError as exc:
        raise BundleFieldError(str(exc)) from None
    used = _kernel_files(spec, {x.path: x.size for x in files})
    unexplained = sorted(paths - used - set(sources))
    if unexplained:
        raise BundleFieldError(f"files: {unexplained[0]!r} is neither a source nor a kernel's file")
    replaces = f.mapping(f.required(top, "replaces", ""), "replaces")
    f.only_known(replaces, _REPLACES, "replaces")
    window = parse_window(f.required(top, "compatibility", ""))
    devices = sorted({TARGET_ARCHES[arch][0] for arch in spec.arches})
    if sorted(window.gpu_architectures) != devices:
        raise BundleFieldError(f"compatibility.gpu_architectures: {list(window.gpu_architectures)}; the kernels' "
                               f"targets run on exactly {devices}")
    return KernelBundleManifest(files=files, sources=sources, triton=triton, spec=spec,
                                fingerprint=f.text(f.required(replaces, "fingerprint", "replaces"),
                                                   "replaces.fingerprint"),
                                window=window)


def _sources(value: Any, paths: set[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise BundleFieldError("sources: expected a non-empty list of declared .py files")
    for index, path in enumerate(value):
        where = f"sources[{index}]"
        if path not in paths:
            raise BundleFieldError(f"{where}: {path!r} is not one of the declared files")
        if not path.endswith(".py"):
            raise BundleFieldError(f"{where}: {path!r} is not a Python source file (.py)")
    if len(set(value)) != len(value):
        raise BundleFieldError("sources: a file is listed twice")
    return tuple(value)


def _kernel_files(spec: LaunchSpec, paths: dict[str, int]) -> set[str]:
    """Every file the spec's kernel targets name: declared, of its kind's suffix and size, each named once."""
    used: set[str] = set()
    total = 0
    for key, kernel in sorted(spec.kernels.items()):
        for arch, target in sorted(kernel.targets.items()):
            for kind, path in target.files().items():
                where = f"spec.kernels.{key}.targets.{arch}.{kind}"
                if path not in paths:
                    raise BundleFieldError(f"{where}: {path!r} is not one of the declared files")
                if not path.endswith(TARGET_SUFFIXES[kind]):
                    raise BundleFieldError(f"{where}: {path!r} does not end in {TARGET_SUFFIXES[kind]}")
                if path in used:
                    raise BundleFieldError(f"{where}: {path!r} is named by another kernel target too")
                if paths[path] > MAX_TARGET_BYTES[kind]:
                    raise BundleFieldError(f"{where}: {path!r} is {paths[path]} bytes; a {kind} file may hold "
                                           f"{MAX_TARGET_BYTES[kind]}")
                total += paths[path]
                used.add(path)
    if total > MAX_KERNEL_FILES_BYTES:
        raise BundleFieldError(f"spec.kernels: the kernels' files hold {total} bytes, more than the "
                               f"{MAX_KERNEL_FILES_BYTES} a bundle may hold")
    return used
