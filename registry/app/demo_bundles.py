"""The demo's candidates as bundles (under `<out>/bundles/<artifact>`), and what would ship from them.

Each whole-generation candidate ships as a one-file bundle whose entry builds
the candidate from the registry's tiny video DiT; the file carries the
content hash of the candidate's implementation, so the bundle's identity
changes whenever the implementation does. The fused modulated LayerNorm ships
as a registry.triton-kernel/1 bundle: the registry's compiled cubins of the
built-in kernel, their TTIR and its launch spec (through `registry demo
--server`, as a bundle of the kernel module's source and its Triton entry
point, registered by digest).

The compatibility windows below are the demo's declarations, made once here:
the torch candidates run wherever torch does (measured on CPU), and the
Triton kernel is a GPU kernel (the interpreter is a correctness tool, not a
deployment target), so on a CPU machine it never matches.
"""
from __future__ import annotations

import inspect
import os
import shutil
from pathlib import Path
from typing import Any

from registry.bundles import CallSite, Profile, read_lock, reference_fingerprint, write_manifest
from registry.bundles.keys import create_key, load_signing_key
from registry.bundles.signed_lock import DEFAULT_VALID_FOR
from registry.formats.errors import UserError
from registry.formats.output_files import write_output

from .context import Registry
from .lock import export_lock, signed_lock
from .resolve import WorkloadResolution, resolve_workload

BUNDLES = "bundles"
SIGNING_KEY = "signing.key"
SIGNED_LOCK = "registry.lock.json"
SINGLE_PROCESS = {"execution_modes": ["inference"], "distributed_modes": ["single"]}
TORCH_RANGE = {"min": "2.4", "max_exclusive": "3.0"}

CANDIDATE_ENTRY = '''"""Bundle entry of the demo candidate {name}: builds it from the tiny video DiT in `registry.workloads`."""
from registry.workloads import make_candidate

# Content hash of the candidate's implementation (its name and class source): part of this bundle's identity.
IMPLEMENTATION_SHA256 = "{implementation}"


def build():
    return make_candidate("{name}")
'''


def _fresh(out_dir: Path, artifact: str) -> Path:
    """The demo's own bundle directory for `artifact`, emptied (the demo wrote it; nothing else lives there)."""
    directory = out_dir / BUNDLES / artifact
    if os.path.islink(directory):
        raise UserError(f"{directory}: is a symbolic link, and the demo never writes through one; remove it")
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def _signature(name: str, tensor, *, dims: list | None = None, strides: list | None = None,
               device: str | None = None) -> dict[str, Any]:
    return {"name": name, "shape": dims if dims is not None else list(tensor.shape),
            "stride": strides if strides is not None else list(tensor.stride()),
            "dtype": str(tensor.dtype).removeprefix("torch."), "device": device or tensor.device.type}


def video_fingerprint() -> str:
    """The operation whole-generation candidates replace: the reference generation."""
    from registry.workloads import reference_generate

    return reference_fingerprint(reference_generate)


def kernel_fingerprint() -> str:
    """The operation the fused kernel replaces: the eager modulated LayerNorm."""
    from registry.kernels.reference import modulated_layernorm

    return reference_fingerprint(modulated_layernorm)


def write_candidate_bundle(out_dir: Path, candidate, implementation_sha256: str, latent, model: dict) -> Path:
    """A bundle for one whole-generation demo candidate."""
    directory = _fresh(out_dir, candidate.name)
    write_output(directory / "candidate.py",
                 CANDIDATE_ENTRY.format(name=candidate.name, implementation=implementation_sha256), force=True)
    write_manifest(directory, entry_point={"file": "candidate.py", "symbol": "build"},
                   replaces={"fingerprint": video_fingerprint(), "inputs": [_signature("noise", latent)],
                             "outputs": [_signature("latent", latent)]},
                   compatibility={"model": model, "gpu_architectures": ["cpu", "sm80", "sm90", "sm100"],
                                  "torch": TORCH_RANGE, "cuda": {}, "triton": {}, **SINGLE_PROCESS})
    return directory


def write_compiled_kernel_bundle(out_dir: Path, artifact: str) -> Path:
    """The fused modulated LayerNorm as a registry.triton-kernel/1 bundle: the built-in kernel compiled by the
    registry (every corpus case, sm_90a and sm_100a), built afresh into the demo's bundle directory."""
    import tempfile

    from .kernel_bundles import build_builtin_bundles

    directory = _fresh(out_dir, artifact)
    directory.rmdir()
    with tempfile.TemporaryDirectory(prefix="registry-demo-kernel-", dir=directory.parent) as scratch:
        build_builtin_bundles(scratch, ops=["modulated_layernorm"])
        os.rename(Path(scratch) / "modulated_layernorm", directory)
    return directory


def registered_bundle(registry: Registry, out_dir: Path, artifact: str, *, workload: str, kind: str) -> Path | None:
    """The demo's bundle directory for `artifact` when it still holds exactly the payload `artifact` is registered
    with (as `kind`, for `workload`): the demo run again on its registry keeps it rather than building it afresh,
    since registration already checked those bytes (for a triton_kernel, rebuilt every cubin). None otherwise: not
    registered so, no such directory, a link, or files that no longer verify to that digest."""
    from registry.bundles import verify_directory

    directory = out_dir / BUNDLES / artifact
    with registry.view() as view:
        state = view.artifact(artifact)
    if state is None or (state.get("workload"), state.get("kind")) != (workload, kind) or os.path.islink(directory):
        return None
    try:
        verified = verify_directory(directory)
    except UserError:  # missing, edited, or a manifest this registry no longer reads (another Triton's)
        return None
    return directory if verified.digest == state.get("payload_sha256") else None


def write_kernel_bundle(out_dir: Path, artifact: str) -> Path:
    """The same kernel as a Python-entry bundle (registry.bundle/1): the kernel module's source and its Triton
    entry point, which `registry demo --server` registers by digest."""
    import torch

    from registry.kernels import modln

    directory = _fresh(out_dir, artifact)
    write_output(directory / "modln.py", inspect.getsource(modln), force=True)
    x = torch.empty(1, 1, 1, dtype=torch.bfloat16)  # the kernel takes bf16 or fp16 activations; this bundle, bf16
    per_batch = torch.empty(1, 1)
    activation = _signature("x", x, dims=["*", "*", "*"], strides=["*", "*", 1], device="cuda")
    inputs = [activation, _signature("scale", per_batch, dims=["*", "*"], strides=["*", 1], device="cuda"),
              _signature("shift", per_batch, dims=["*", "*"], strides=["*", 1], device="cuda")]
    write_manifest(directory, entry_point={"file": "modln.py", "symbol": "modulated_layernorm_triton"},
                   replaces={"fingerprint": kernel_fingerprint(), "inputs": inputs, "outputs": [activation]},
                   compatibility={"model": {"id": "*", "revision": "*"},
                                  "gpu_architectures": ["sm80", "sm90", "sm100"], "torch": TORCH_RANGE,
                                  "cuda": {"min": "12.0"}, "triton": {"min": "3.0"}, **SINGLE_PROCESS})
    return directory


def demo_resolutions(registry: Registry, profile: Profile, video_workload: str, video_model: dict,
                     kernel_workload: str) -> list[WorkloadResolution]:
    """What would ship on the machine described by `profile`, for both demo workloads."""
    return [resolve_workload(registry, video_workload, profile, video_call_site(video_model)),
            resolve_workload(registry, kernel_workload, profile, CallSite(fingerprint=kernel_fingerprint()))]


def video_call_site(video_model: dict) -> CallSite:
    return CallSite(video_model["id"], video_model["revision"], video_fingerprint())


def sign_video_lock(registry: Registry, out_dir: Path, profile: Profile, video_workload: str,
                    video_model: dict) -> dict[str, Any] | None:
    """Sign the video workload's lock for this machine with the demo's key; None when nothing ships here.

    The key is created once in `out_dir` (owner-only) and reused by later
    runs. What a serving process then does with the lock (resolve from it
    trusting only the demo's public key, load through the trusted loader)
    is the runtime's part, one layer up (registry.runtime), which the demo
    command calls with the call site returned here.
    """
    import json

    key_path = out_dir / SIGNING_KEY
    key = load_signing_key(key_path) if key_path.exists() else create_key(key_path)
    site = video_call_site(video_model)
    document = export_lock(registry, video_workload, profile, site)
    if not document["artifacts"]:
        return None
    lock_path = out_dir / SIGNED_LOCK
    write_output(lock_path, json.dumps(signed_lock(document, key, DEFAULT_VALID_FOR), indent=2, sort_keys=True)
                 + "\n", force=True)
    return {"lock": str(lock_path), "public_key": f"{key_path}.pub", "key_id": key.key_id,
            "expires_at": read_lock(lock_path).expires_at, "workload": video_workload,
            "trusted_root": str(out_dir / BUNDLES), "model": site.model_id, "revision": site.model_revision,
            "fingerprint": site.fingerprint}
