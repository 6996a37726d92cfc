"""A small, deterministic, text-free video DiT: the demo workload's model.

Shape of the real thing at toy scale (Peebles & Xie 2023, "Scalable Diffusion
Models with Transformers"; the video DiTs Wan/LTX/Hunyuan keep the same block):
a latent video is cut into 2x2 patches, every token attends to every other
token across all frames, and each block is conditioned on the timestep through
adaLN modulation (shift, scale and gate regressed from a sinusoidal timestep
embedding through an MLP).

The two operations candidates replace are passed in as `DiTOps` instead of
being hard-wired, so a candidate is exactly "the reference with one op
swapped": `attention` (reference: explicit softmax(QK^T/sqrt(d))V) and
`modulated_norm` (reference: LayerNorm without affine, then x*(1+scale)+shift,
the op a fused Triton kernel would replace).

Weights come from a fixed-seed `torch.Generator`; nothing is downloaded.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .scene import gaussian_blur, scene_logits

FRAMES = 8
LATENT_SIZE = 16
LATENT_CHANNELS = 8
PATCH = 2
WIDTH = 64
HEADS = 4
DEPTH = 3
MLP_RATIO = 4
TIME_DIM = 64
PIXEL_SIZE = 128  # decoded frames are PIXEL_SIZE x PIXEL_SIZE (8x the latent)
WEIGHT_SEED = 1729
# The attention logits are sharpened by this factor so that attention is
# position-selective rather than a near-uniform average over 512 tokens (a
# randomly initialised model otherwise hides any difference between backends).
QK_GAIN = 2.0
# Clean-latent prediction = scene prior + TRANSFORMER_BLEND * transformer output.
TRANSFORMER_BLEND = 0.15
# The scene prior is blurred by PRIOR_MAX_BLUR * t latent pixels at noise
# level t: like a real denoiser's posterior mean, the prediction is coarse at
# high noise and sharp near t = 0, so sampling with too few steps is blurry.
PRIOR_MAX_BLUR = 3.0
# The decoder's sigmoid is applied to DECODER_GAIN * logits: bilinear
# upsampling spreads an edge over 8 pixels, the gain narrows it again.
DECODER_GAIN = 3.0
REFERENCE_BACKEND = "MATH_REFERENCE"

TOKENS = FRAMES * (LATENT_SIZE // PATCH) ** 2
PATCH_DIM = LATENT_CHANNELS * PATCH * PATCH

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(q, k, v), each [batch, heads, tokens, head_dim] -> [batch, heads, tokens, head_dim]."""
ModulatedNormFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""(x [batch, tokens, width], shift [batch, width], scale [batch, width]) -> like x."""

LN_EPS = 1e-6


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d)) V written out: the reference every attention backend is judged against."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def modulated_layer_norm(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: LayerNorm without learned affine, then x * (1 + scale) + shift per sample (DiT, eq. in sec. 3.2)."""
    normed = F.layer_norm(x, (x.shape[-1],), eps=LN_EPS)
    return normed * (1.0 + scale.unsqueeze(1)) + shift.unsqueeze(1)


@dataclass(frozen=True)
class DiTOps:
    """The replaceable operations of the model; the reference uses `REFERENCE_OPS`."""

    attention: AttentionFn
    modulated_norm: ModulatedNormFn


REFERENCE_OPS = DiTOps(attention=reference_attention, modulated_norm=modulated_layer_norm)


def timestep_embedding(t: float, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of t in [0, 1] scaled to [0, 1000] (Vaswani et al. 2017; DiT), shape [1, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = (t * 1000.0) * freqs
    return torch.cat([torch.cos(angles), torch.sin(angles)]).unsqueeze(0)


def _sincos(positions: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    angles = positions.to(torch.float32).unsqueeze(-1) * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)


def position_embedding() -> torch.Tensor:
    """Fixed 3-D sin-cos embedding of (frame, row, column), [TOKENS, WIDTH]; width split 16/24/24."""
    grid = LATENT_SIZE // PATCH
    f, r, c = torch.meshgrid(
        torch.arange(FRAMES), torch.arange(grid), torch.arange(grid), indexing="ij"
    )
    return torch.cat(
        [_sincos(f.flatten(), 16), _sincos(r.flatten(), 24), _sincos(c.flatten(), 24)], dim=-1
    )


class _Init:
    """Draws weights from one seeded generator in a fixed order, so the model is the same every time."""

    def __init__(self, seed: int) -> None:
        self.gen = torch.Generator().manual_seed(seed)

    def linear(self, fan_in: int, fan_out: int, gain: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        weight = torch.randn(fan_out, fan_in, generator=self.gen) * (gain / math.sqrt(fan_in))
        bias = torch.randn(fan_out, generator=self.gen) * 0.02
        return weight, bias


@dataclass(frozen=True)
class _Block:
    modulation: tuple[torch.Tensor, torch.Tensor]  # c -> 6 * WIDTH
    qkv: tuple[torch.Tensor, torch.Tensor]
    proj: tuple[torch.Tensor, torch.Tensor]
    fc1: tuple[torch.Tensor, torch.Tensor]
    fc2: tuple[torch.Tensor, torch.Tensor]


def _apply(layer: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, layer[0], layer[1])


class TinyVideoDiT:
    """The denoiser. Read-only after construction: candidates never mutate it, they pass `DiTOps`."""

    def __init__(self, seed: int = WEIGHT_SEED) -> None:
        init = _Init(seed)
        self.patch_embed = init.linear(PATCH_DIM, WIDTH)
        self.time_mlp = (init.linear(TIME_DIM, WIDTH), init.linear(WIDTH, WIDTH))
        self.blocks = tuple(
            _Block(
                modulation=init.linear(WIDTH, 6 * WIDTH, gain=0.5),
                qkv=init.linear(WIDTH, 3 * WIDTH),
                proj=init.linear(WIDTH, WIDTH),
                fc1=init.linear(WIDTH, MLP_RATIO * WIDTH),
                fc2=init.linear(MLP_RATIO * WIDTH, WIDTH),
            )
            for _ in range(DEPTH)
        )
        self.final_modulation = init.linear(WIDTH, 2 * WIDTH, gain=0.5)
        self.final = init.linear(WIDTH, PATCH_DIM)
        # Fixed linear decoder latent channels -> RGB logits; the scene is
        # encoded through its pseudo-inverse so that decode(scene) == scene.
        self.decoder = torch.randn(3, LATENT_CHANNELS, generator=init.gen) / math.sqrt(LATENT_CHANNELS)
        self.scene_latent = torch.einsum(
            "cr,frhw->fchw", torch.linalg.pinv(self.decoder), scene_logits(FRAMES, LATENT_SIZE) / DECODER_GAIN
        )
        self.pos = position_embedding()

    # -- tokens ---------------------------------------------------------------
    @staticmethod
    def patchify(latent: torch.Tensor) -> torch.Tensor:
        """[F, C, H, W] -> [1, TOKENS, PATCH_DIM], tokens ordered (frame, row, column)."""
        f, c, h, w = latent.shape
        x = latent.reshape(f, c, h // PATCH, PATCH, w // PATCH, PATCH)
        return x.permute(0, 2, 4, 1, 3, 5).reshape(1, f * (h // PATCH) * (w // PATCH), c * PATCH * PATCH)

    @staticmethod
    def unpatchify(tokens: torch.Tensor) -> torch.Tensor:
        """Inverse of `patchify`."""
        grid = LATENT_SIZE // PATCH
        x = tokens.reshape(FRAMES, grid, grid, LATENT_CHANNELS, PATCH, PATCH)
        return x.permute(0, 3, 1, 4, 2, 5).reshape(FRAMES, LATENT_CHANNELS, LATENT_SIZE, LATENT_SIZE)

    # -- transformer ------------------------------------------------------------
    def embed(self, x_t: torch.Tensor, t: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Tokens h [1, TOKENS, WIDTH] and conditioning c = SiLU(time MLP) [1, WIDTH]."""
        h = _apply(self.patch_embed, self.patchify(x_t)) + self.pos
        emb = _apply(self.time_mlp[1], F.silu(_apply(self.time_mlp[0], timestep_embedding(t, TIME_DIM))))
        return h, F.silu(emb)

    def _modulation(self, block: _Block, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(_apply(block.modulation, c).chunk(6, dim=-1))

    def first_modulated_input(self, h: torch.Tensor, c: torch.Tensor, ops: DiTOps) -> torch.Tensor:
        """The first block's timestep-modulated input: the signal a TeaCache-style cache watches."""
        shift, scale = self._modulation(self.blocks[0], c)[:2]
        return ops.modulated_norm(h, shift, scale)

    def _attention(self, block: _Block, x: torch.Tensor, ops: DiTOps) -> torch.Tensor:
        batch, tokens, _ = x.shape
        qkv = _apply(block.qkv, x).reshape(batch, tokens, 3, HEADS, WIDTH // HEADS).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * math.sqrt(QK_GAIN), qkv[1] * math.sqrt(QK_GAIN), qkv[2]
        out = ops.attention(q, k, v)
        return _apply(block.proj, out.transpose(1, 2).reshape(batch, tokens, WIDTH))

    def run_blocks(self, h: torch.Tensor, c: torch.Tensor, ops: DiTOps) -> torch.Tensor:
        """All transformer blocks: h -> h, each attention and MLP gated by adaLN (DiT's adaLN block)."""
        for block in self.blocks:
            shift1, scale1, gate1, shift2, scale2, gate2 = self._modulation(block, c)
            h = h + gate1.unsqueeze(1) * self._attention(block, ops.modulated_norm(h, shift1, scale1), ops)
            mlp = _apply(block.fc2, F.gelu(_apply(block.fc1, ops.modulated_norm(h, shift2, scale2))))
            h = h + gate2.unsqueeze(1) * mlp
        return h

    def head(self, h: torch.Tensor, c: torch.Tensor, ops: DiTOps) -> torch.Tensor:
        """Final adaLN + linear back to patches, unpatchified to [F, C, H, W]."""
        shift, scale = _apply(self.final_modulation, c).chunk(2, dim=-1)
        return self.unpatchify(_apply(self.final, ops.modulated_norm(h, shift, scale)))

    # -- denoiser and decoder ---------------------------------------------------
    def predict_clean(self, t: float, transformer_out: torch.Tensor) -> torch.Tensor:
        """Clean-latent prediction: the noise-dependent scene prior blended with the transformer's output."""
        return gaussian_blur(self.scene_latent, PRIOR_MAX_BLUR * t) + TRANSFORMER_BLEND * transformer_out

    def decode(self, latent: torch.Tensor) -> np.ndarray:
        """Fixed decoder: channel mix to RGB logits, bilinear 8x upsample, sigmoid(DECODER_GAIN * .), round to uint8 [F, H, W, 3]."""
        logits = DECODER_GAIN * torch.einsum("rc,fchw->frhw", self.decoder, latent)
        logits = F.interpolate(logits, size=(PIXEL_SIZE, PIXEL_SIZE), mode="bilinear", align_corners=False)
        rgb = torch.round(torch.sigmoid(logits) * 255.0).to(torch.uint8)
        return rgb.permute(0, 2, 3, 1).contiguous().numpy()


@lru_cache(maxsize=1)
def build_model() -> TinyVideoDiT:
    """The one model of this workload, built once per process (weights are never mutated)."""
    return TinyVideoDiT(WEIGHT_SEED)
