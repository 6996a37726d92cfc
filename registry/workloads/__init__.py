"""The demo video workload: a tiny deterministic video DiT and candidate variants of it.

torch lives here (and in kernels/), never in gate/ or contracts/.
"""
from .candidates import (
    CANDIDATE_NAMES,
    Candidate,
    ClaimedFlashAttention,
    LossyStepSkip,
    ModulatedNormCandidate,
    SdpaAttention,
    StepCache,
    all_candidates,
    make_candidate,
    make_timed_callable,
)
from .sampler import STEPS, generate, reference_generate, reference_latent, sample_clean_latent
from .tiny_dit import (
    FRAMES,
    PIXEL_SIZE,
    REFERENCE_BACKEND,
    REFERENCE_OPS,
    DiTOps,
    modulated_layer_norm,
    reference_attention,
)

__all__ = [
    "CANDIDATE_NAMES",
    "FRAMES",
    "PIXEL_SIZE",
    "REFERENCE_BACKEND",
    "REFERENCE_OPS",
    "STEPS",
    "Candidate",
    "ClaimedFlashAttention",
    "DiTOps",
    "LossyStepSkip",
    "ModulatedNormCandidate",
    "SdpaAttention",
    "StepCache",
    "all_candidates",
    "generate",
    "make_candidate",
    "make_timed_callable",
    "modulated_layer_norm",
    "reference_attention",
    "reference_generate",
    "reference_latent",
    "sample_clean_latent",
]
