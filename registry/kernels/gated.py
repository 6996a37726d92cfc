"""Gated residual add, alone and fused with the LayerNorm that follows it.

In a Wan block the attention/FFN output re-enters the residual stream as
``residual + x * gate_b``; before cross-attention and the FFN that stream is
normalised again. Fusing the two reads residual and x once and writes the new
stream and its normalised copy once, instead of a round trip per eager op.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from registry.kernels.launches import launch
from registry.kernels.reference import EPS
from registry.kernels.rowwise import (bits_view, check_activation, check_device, check_fp32, encode_16bit,
                                      round_through_16bit, row_launch_meta)


@triton.jit
def _gated_residual_kernel(res_ptr, x_ptr, gate_ptr, out_ptr, seq,
                           D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    batch = row // seq
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    res = tl.load(res_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    gate = tl.load(gate_ptr + batch * D + cols, mask=mask, other=0.0).to(tl.float32)
    out = res + x * gate
    tl.store(out_ptr + row * D + cols, encode_16bit(out, IS_BF16), mask=mask)


@triton.jit
def _gated_residual_ln_kernel(res_ptr, x_ptr, gate_ptr, w_ptr, b_ptr, n_ptr, u_ptr, seq, eps,
                              D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    batch = row // seq
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    res = tl.load(res_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    gate = tl.load(gate_ptr + batch * D + cols, mask=mask, other=0.0).to(tl.float32)
    u = res + x * gate
    tl.store(u_ptr + row * D + cols, encode_16bit(u, IS_BF16), mask=mask)
    # Normalise u as stored (rounded to the activation dtype), like the eager model.
    u = tl.where(mask, round_through_16bit(u, IS_BF16), 0.0)
    mean = tl.div_rn(tl.sum(u, axis=0), D)
    centred = tl.where(mask, u - mean, 0.0)
    var = tl.div_rn(tl.sum(centred * centred, axis=0), D)
    inv_std = tl.div_rn(1.0, tl.sqrt_rn(var + eps))
    weight = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    bias = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    n = (centred * inv_std) * weight + bias
    tl.store(n_ptr + row * D + cols, encode_16bit(n, IS_BF16), mask=mask)


def _check_pair(residual: torch.Tensor, x: torch.Tensor, gate: torch.Tensor) -> tuple[int, int, int]:
    check_activation("residual", residual)
    check_activation("x", x, shape=tuple(residual.shape), dtype=residual.dtype)
    if x.device != residual.device:
        raise ValueError(f"x is on {x.device}, residual on {residual.device}")
    batch, seq, dim = residual.shape
    check_fp32("gate", gate, (batch, dim), residual.device)
    return batch, seq, dim


def gated_residual_triton(residual: torch.Tensor, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Triton twin of :func:`registry.kernels.reference.gated_residual`."""
    batch, seq, dim = _check_pair(residual, x, gate)
    check_device(_gated_residual_kernel, residual)
    residual, x = residual.contiguous(), x.contiguous()
    out = torch.empty_like(residual)
    if out.numel() == 0:
        return out
    launch(_gated_residual_kernel, (batch * seq,), residual, x, gate.contiguous(), bits_view(out), seq,
           D=dim, IS_BF16=residual.dtype == torch.bfloat16, **row_launch_meta(dim))
    return out


def gated_residual_layernorm_triton(residual: torch.Tensor, x: torch.Tensor, gate: torch.Tensor,
                                    weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton twin of :func:`registry.kernels.reference.gated_residual_layernorm`; returns (n, u)."""
    batch, seq, dim = _check_pair(residual, x, gate)
    check_fp32("weight", weight, (dim,), residual.device)
    check_fp32("bias", bias, (dim,), residual.device)
    check_device(_gated_residual_ln_kernel, residual)
    residual, x = residual.contiguous(), x.contiguous()
    n = torch.empty_like(residual)
    u = torch.empty_like(residual)
    if u.numel() == 0:
        return n, u
    launch(_gated_residual_ln_kernel, (batch * seq,), residual, x, gate.contiguous(), weight.contiguous(),
           bias.contiguous(), bits_view(n), bits_view(u), seq, EPS,
           D=dim, IS_BF16=residual.dtype == torch.bfloat16, **row_launch_meta(dim))
    return n, u
