"""What an artifact can be: the kinds an `ArtifactRegistered` event names and the gate judges.

- `fused_kernel`: a kernel meant to replace a few torch operations bit for bit;
- `attention_backend`: an attention implementation, checked for which backend really ran;
- `step_cache`: reuse of a transformer output across denoising steps;
- `module`: any other replacement module.
"""
from __future__ import annotations

ARTIFACT_KINDS = ("fused_kernel", "attention_backend", "step_cache", "module")
