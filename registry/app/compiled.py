"""A registered triton_kernel bundle as the evaluation reads it: its cubins from disk, checked, and its spec's plans.

`registered_kernel` opens the bundle directory given to `registry evaluate
--bundle`, checks every file against the manifest recorded at registration
(the same check the trusted loader makes: registry/bundles/files.py), and
reads each cubin once, checking those bytes' digest again. Those bytes are
the registry's own: registration rebuilt each cubin from its TTIR and
required byte equality (docs/bundles.md), so no ELF written by the candidate
but not reproduced by the registry reaches the driver. `BundleKernel.plan`
is the spec evaluated for one call (`plan_call`), the only place a launch
spec meets concrete sizes; the launcher gets only its result.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from registry.formats.errors import UserError
from registry.kernels.launch_plan import LaunchPlan
from registry.kernels.launcher import PlanRefused, arch_capability


class BundleKernel:
    """The CompiledKernel the evaluation and the runtime read (registry/kernels/launch_evaluate.py)."""

    planning_arch: str | None = None
    """The arch plans are made for, set once the device is known (``for_device``)."""

    def __init__(self, manifest: Any, cubins: Mapping[tuple[str, str], bytes]) -> None:
        self.manifest, self.spec = manifest, manifest.spec
        self.inputs = tuple(t.name for t in self.spec.tensors if t.role != "output")
        self.outputs = tuple(t.name for t in self.spec.tensors if t.role != "input")
        self.cubins = dict(cubins)

    def arch_for(self, capability: Sequence[int]) -> str:
        """The bundle's target arch for a device of this compute capability (sm_90a for (9, 0))."""
        for arch in self.spec.arches:
            if arch_capability(arch) == tuple(capability):
                return arch
        raise PlanRefused(f"the bundle's cubins are built for {', '.join(self.spec.arches)}, none for a device of "
                          f"compute capability {capability[0]}.{capability[1]}")

    def plan(self, args: Sequence[Any]) -> LaunchPlan:
        """The plan of one call on these tensors (dtype, shape, strides read from their attributes), for the
        device ``for_device`` named; PlanRefused when no variant of the spec takes them."""
        from registry.formats.launch_spec import CallRefused, CallTensor
        from registry.kernels.plan import plan_call

        if len(args) != len(self.inputs):
            raise PlanRefused(f"{len(args)} inputs; the bundle takes {', '.join(self.inputs)}")
        given = {name: CallTensor(str(t.dtype).removeprefix("torch."), tuple(t.shape), tuple(t.stride()))
                 for name, t in zip(self.inputs, args)}
        if self.planning_arch is None:
            raise RuntimeError("BundleKernel.plan before for_device: plans are made for a device's arch")
        try:
            return plan_call(self.spec, given, arch=self.planning_arch)
        except CallRefused as exc:
            raise PlanRefused(str(exc)) from None

    def for_device(self, capability: Sequence[int]) -> "BundleKernel":
        self.planning_arch = self.arch_for(capability)
        return self


def registered_cubins(bundle: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A triton_kernel registration's cubins, {kernel@arch: sha256}, from its stored manifest (what the gate binds
    the harness launcher's evidence to); None for any other registration."""
    from registry.formats.kinds import TRITON_KERNEL_FORMAT

    if not bundle or bundle.get("format") != TRITON_KERNEL_FORMAT:
        return None
    from registry.bundles.kernel_manifest import parse_kernel_manifest  # the bundles package only for a kernel's

    manifest = parse_kernel_manifest(bundle)
    return {f"{key}@{target.arch}": manifest.file(target.cubin).sha256 for key, target in manifest.targets()}


def operation_replaced(manifest: Any) -> str:
    """The built-in operation whose reference the bundle replaces (its ``replaces.fingerprint``): what the
    evaluation compares it with, on that operation's corpus. A bundle replacing anything else has no reference
    here, and is refused in one line."""
    from registry.bundles import reference_fingerprint
    from registry.kernels.ops import list_operations, resolve_entry

    for spec in list_operations():
        if reference_fingerprint(resolve_entry(spec.reference)) == manifest.fingerprint:
            return spec.name
    raise UserError(f"the bundle replaces the operation {manifest.fingerprint[:19]}..., which is none of the "
                    "registry's operations: nothing to compare it with (`registry kernels` lists them)")


def read_bundle_kernel(directory: str | os.PathLike, manifest: Any) -> BundleKernel:
    """The bundle at ``directory``, which must be exactly ``manifest``'s files; its cubins read and re-hashed."""
    from registry.bundles import BundleError, verify_directory
    from registry.bundles.files import read_regular

    root = Path(directory)
    try:
        verify_directory(root, manifest)
        cubins = {}
        for key, target in manifest.targets():
            declared = manifest.file(target.cubin)
            data = read_regular(root / target.cubin, declared.size)
            if hashlib.sha256(data).hexdigest() != declared.sha256:
                raise UserError(f"{target.cubin} changed while it was being read")
            cubins[(key, target.arch)] = data
    except (BundleError, OSError) as exc:
        raise UserError(f"bundle {root}: {exc}") from None
    return BundleKernel(manifest, cubins)


def registered_kernel(artifact: str, registered: Mapping[str, Any], directory: str | os.PathLike,
                      capability: Sequence[int]) -> tuple[str, BundleKernel]:
    """(the operation it replaces, the triton_kernel ``artifact`` as registered, read from ``directory``) for a
    device of ``capability``; one UserError line when that directory is not the bundle registered."""
    from registry.bundles import BundleError
    from registry.bundles.manifests import parse_manifest

    try:
        manifest = parse_manifest(registered["bundle"], f"artifact {artifact}'s registration")
    except BundleError as exc:
        raise UserError(str(exc)) from None
    if manifest.digest != registered["payload_sha256"]:
        raise UserError(f"artifact {artifact}: the recorded manifest does not hash to its payload")
    op = operation_replaced(manifest)
    return op, read_bundle_kernel(directory, manifest).for_device(capability)
