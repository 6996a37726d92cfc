"""Flow-matching Euler sampler and the one-call generation of the demo workload.

Rectified-flow convention (Lipman et al. 2023; Liu et al. 2023; as in SD3 and
Wan): x_t = (1 - t) * x_0 + t * noise, sampled from t = 1 to t = 0 in equal
Euler steps. The denoiser predicts the clean latent x0_hat, which the sampler
turns into the velocity v = (x_t - x0_hat) / t.

Everything is float32 on CPU from a seeded generator, so the same call gives
bit-identical frames each time (for a fixed torch thread count).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from .tiny_dit import FRAMES, LATENT_CHANNELS, LATENT_SIZE, REFERENCE_OPS, DiTOps, TinyVideoDiT, build_model

STEPS = 10

BlockRunner = Callable[[TinyVideoDiT, int, int, torch.Tensor, torch.Tensor, DiTOps], torch.Tensor]
"""(model, step index, step count, h, c, ops) -> h after the transformer blocks; the hook a step cache uses."""


def check_seed(seed: int) -> int:
    """A seed is a non-negative int below 2**63; anything else is refused."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    return seed


def timesteps(steps: int) -> list[float]:
    """Noise levels 1 = t_0 > t_1 > ... > t_steps = 0, equally spaced."""
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    return [1.0 - i / steps for i in range(steps + 1)]


def initial_noise(seed: int) -> torch.Tensor:
    """The fixed-seed starting latent [FRAMES, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE]."""
    gen = torch.Generator().manual_seed(check_seed(seed))
    return torch.randn(FRAMES, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE, generator=gen)


def sample_clean_latent(
    seed: int,
    *,
    steps: int = STEPS,
    ops: DiTOps = REFERENCE_OPS,
    block_runner: BlockRunner | None = None,
) -> torch.Tensor:
    """Run the Euler sampler from the seed's noise; returns the clean latent."""
    model = build_model()
    schedule = timesteps(steps)
    x = initial_noise(seed)
    with torch.inference_mode():
        for index in range(steps):
            t, t_next = schedule[index], schedule[index + 1]
            h, c = model.embed(x, t)
            if block_runner is None:
                h = model.run_blocks(h, c, ops)
            else:
                h = block_runner(model, index, steps, h, c, ops)
            x0_hat = model.predict_clean(t, model.head(h, c, ops))
            x = x + (t_next - t) * ((x - x0_hat) / t)
    return x


def generate(
    seed: int,
    *,
    steps: int = STEPS,
    ops: DiTOps = REFERENCE_OPS,
    block_runner: BlockRunner | None = None,
) -> np.ndarray:
    """One generation: uint8 frames [FRAMES, PIXEL_SIZE, PIXEL_SIZE, 3]."""
    latent = sample_clean_latent(seed, steps=steps, ops=ops, block_runner=block_runner)
    return build_model().decode(latent)


def reference_latent(seed: int) -> torch.Tensor:
    """The reference clean latent (float32), the tensor byte-level parity is measured on."""
    return sample_clean_latent(seed)


def reference_generate(seed: int) -> np.ndarray:
    """The reference generation every candidate is compared against."""
    return generate(seed)
