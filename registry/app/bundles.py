"""Bundles from the command line: make one from a directory (`bundle create`), and register one.

`create_bundle` declares every regular file of a directory and writes its
manifest through the one writer (registry.bundles.write_manifest, which
validates it exactly as registration will); each problem is one line naming
the manifest field. `register_bundle` verifies every file against the
manifest, then appends one registration: nothing is appended unless the
whole directory checks out (registry.bundles.files): an undeclared or
missing file, a size or hash mismatch, a path or symlink leaving the bundle,
or an unknown manifest field is a one-line refusal. A compiled Triton kernel
bundle (`registry.triton-kernel/1`, kind `triton_kernel`) is then checked
kernel by kernel and rebuilt by the registry (app/kernel_bundles.py), still
before anything is appended.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from registry.bundles import (BundleError, BundleManifest, KernelBundleManifest, bundle_directory, verify_directory,
                              write_manifest)
from registry.bundles.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES
from registry.formats.documents import DocumentError, load_json, read_document
from registry.formats.errors import UserError
from registry.formats.kinds import TRITON_KERNEL_FORMAT
from registry.formats.output_files import check_output
from registry.formats.text import text_arguments

from .context import Registry
from .kernel_bundles import check_kernel_bundle
from .workloads import Registration, check_claims, current_contract, register_artifact

# `--replaces op:NAME`: the operation a built-in kernel replaces, as the registry's own reference defines it.
BUILT_IN_OPERATION = "op:"


@text_arguments
def register_bundle(registry: Registry, artifact: str, directory: str | Path, *, workload: str, kind: str,
                    backend: str | None = None, op: str | None = None, entry: str | None = None,
                    new_identity: bool | None = None) -> Registration:
    """Register ARTIFACT as the bundle in DIRECTORY; its identity is the manifest's digest."""
    bundle_directory(".", artifact)  # the id must be able to name the bundle's directory on a runtime node
    verified = verify_directory(directory)
    check_claims(artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry)
    if isinstance(verified.manifest, KernelBundleManifest) != (kind == "triton_kernel"):
        raise UserError(f"a triton_kernel artifact is registered from a {TRITON_KERNEL_FORMAT} bundle, and such a "
                        f"bundle only as a triton_kernel (this is a {verified.manifest.format} bundle, --kind {kind})")
    if kind == "triton_kernel":
        if op is not None or entry is not None:
            raise UserError("a triton_kernel bundle declares its own launches; give no --op or --entry")
        current_contract(registry, workload)  # an unknown workload is refused before the rebuild's seconds
        check_kernel_bundle(verified)
    return register_artifact(registry, artifact, workload=workload, kind=kind, backend=backend, op=op, entry=entry,
                             payload_sha256=verified.digest, bundle=verified.manifest.canonical(),
                             new_identity=new_identity)


@text_arguments
def create_bundle(directory: str | Path, *, entry: str | None, replaces: str | None, compatibility: str | None,
                  force: bool = False) -> BundleManifest:
    """Write DIRECTORY's `bundle.json`, declaring every regular file in it; returns the manifest.

    `entry` is FILE:SYMBOL (a .py file of the bundle and the callable in it);
    `replaces` a JSON file holding the manifest's `replaces` object, or
    `op:NAME` for a built-in operation (its reference's fingerprint and
    tensor signatures, computed here); `compatibility` a JSON file holding
    the `compatibility` object (docs/bundles.md, "The manifest"). Every field
    is required, as registration requires it: a missing one is named, never
    filled in. An existing manifest is replaced only with `force`.
    """
    folder = Path(directory)
    if folder.is_symlink() or not folder.is_dir():
        raise BundleError(f"{directory}: not a directory (a bundle is a directory of files; create it first)")
    entry_point = _entry_point(entry)
    replaced = _declared(replaces, "replaces", "--replaces FILE.json or --replaces op:NAME")
    window = _declared(compatibility, "compatibility", "--compatibility FILE.json")
    check_output(folder / MANIFEST_NAME, force, option="bundle manifest", error=BundleError)
    return write_manifest(folder, entry_point=entry_point, replaces=replaced, compatibility=window)


def _entry_point(entry: str | None) -> dict[str, str]:
    if entry is None:
        raise BundleError("entry_point: not declared; give --entry FILE:SYMBOL (a .py file of the bundle and the "
                          "callable in it)")
    file, colon, symbol = entry.rpartition(":")
    if not colon or not file or not symbol:
        raise BundleError(f"entry_point: --entry {entry!r} is not FILE:SYMBOL (a .py file of the bundle and the "
                          "callable in it, e.g. kernel.py:fused_modln)")
    return {"file": file, "symbol": symbol}


def _declared(given: str | None, field: str, how: str) -> dict[str, Any]:
    """The manifest block `field` from the option's value: a JSON file (or `op:NAME` for `replaces`)."""
    if given is None:
        raise BundleError(f"{field}: not declared; give {how} (every field of it: docs/bundles.md, "
                          "\"The manifest\"; nothing is filled in)")
    if field == "replaces" and given.startswith(BUILT_IN_OPERATION):
        return operation_replaces(given.removeprefix(BUILT_IN_OPERATION))
    try:
        block = load_json(read_document(given, f"{field} file", MAX_MANIFEST_BYTES), given)
    except DocumentError as exc:
        raise BundleError(f"{field}: {exc}") from None
    if not isinstance(block, dict):
        raise BundleError(f"{field}: {given} holds {type(block).__name__}, not the {field} object (docs/bundles.md)")
    return block


def operation_replaces(name: str) -> dict[str, Any]:
    """A built-in operation's `replaces` block: its reference's fingerprint and the tensors it takes and gives.

    Read from the registry's own reference implementation (trusted code), on
    one case of the CPU corpus: every size and stride is `*` but a
    contiguous last dimension, the dtypes are the case's, the device `cuda`
    (a kernel bundle is a GPU kernel).
    """
    import inspect

    from registry.bundles import reference_fingerprint
    from registry.kernels.operation_names import check_operation
    from registry.kernels.ops import get_operation, resolve_entry

    try:
        check_operation(name)
    except UserError as exc:
        raise BundleError(f"replaces: --replaces op:{name}: {exc}") from None
    spec = get_operation(name)
    reference = resolve_entry(spec.reference)
    case = spec.corpus("cpu")[0]
    inputs = spec.make_inputs(case, "cpu")
    outputs = reference(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    parameters = list(inspect.signature(reference).parameters)
    return {"fingerprint": reference_fingerprint(reference),
            "inputs": [_signature(parameters[i] if i < len(parameters) else f"input{i}", t)
                       for i, t in enumerate(inputs)],
            "outputs": [_signature(spec.outputs[i] if i < len(spec.outputs) else f"output{i}", t)
                        for i, t in enumerate(outputs)]}


def _signature(name: str, tensor) -> dict[str, Any]:
    rank = tensor.dim()
    return {"name": name, "shape": ["*"] * rank, "stride": ["*"] * (rank - 1) + [1] if rank else [],
            "dtype": str(tensor.dtype).removeprefix("torch."), "device": "cuda"}
