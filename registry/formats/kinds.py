"""What an artifact can be: the kinds an `ArtifactRegistered` event names and the gate judges.

- `fused_kernel`: a kernel meant to replace a few torch operations bit for bit;
- `attention_backend`: an attention implementation, checked for which backend really ran;
- `step_cache`: reuse of a transformer output across denoising steps;
- `module`: any other replacement module;
- `triton_kernel`: compiled Triton kernels shipped as a `registry.triton-kernel/1` bundle (their TTIR, cubins,
  Triton's metadata and a declarative launch spec), launched by the registry's own launcher from the cubins it
  rebuilt itself; nothing of the candidate's Python runs (docs/bundles.md).
"""
from __future__ import annotations

ARTIFACT_KINDS = ("fused_kernel", "attention_backend", "step_cache", "module", "triton_kernel")

TRITON_KERNEL_FORMAT = "registry.triton-kernel/1"
"""The bundle format of a `triton_kernel` artifact, and the only kind such a bundle registers as."""
