"""Torch eager references: the "native" arm every kernel is measured against.

The math follows the Wan 2.x DiT block (adaLN modulation around non-affine
LayerNorm, gated residual adds, affine LayerNorm before cross-attention, RMS
norm on q/k), written the way an eager model runs it: upcast to fp32, compute
with stock torch ops, cast back to the activation dtype once at the end.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

EPS = 1e-6
"""LayerNorm/RMSNorm epsilon of the Wan DiT blocks (WanLayerNorm, WanRMSNorm)."""


def modulated_layernorm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """y = LN(x) * (1 + scale_b) + shift_b; LN non-affine over the last dim, fp32 math."""
    dim = x.shape[-1]
    normed = F.layer_norm(x.float(), (dim,), eps=EPS)
    return (normed * (1 + scale[:, None, :]) + shift[:, None, :]).to(x.dtype)


def gated_residual(residual: torch.Tensor, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """out = residual + x * gate_b in fp32, cast to the activation dtype."""
    return (residual.float() + x.float() * gate[:, None, :]).to(residual.dtype)


def gated_residual_layernorm(residual: torch.Tensor, x: torch.Tensor, gate: torch.Tensor,
                             weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u = residual + x * gate_b (stored in the activation dtype); n = LN(u) * weight + bias.

    The LayerNorm reads u as stored, because that is what the next layer of
    an unfused model sees.
    """
    u = gated_residual(residual, x, gate)
    n = F.layer_norm(u.float(), (u.shape[-1],), weight, bias, eps=EPS)
    return n.to(u.dtype), u


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim, fp32 math."""
    return F.rms_norm(x.float(), (x.shape[-1],), weight, eps=EPS).to(x.dtype)
