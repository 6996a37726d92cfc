"""Fused adaLN modulation: y = LN(x) * (1 + scale_b) + shift_b in one pass.

An eager model runs this as a LayerNorm kernel plus two elementwise kernels,
reading and writing the [B, S, D] activation three times; the fused kernel
reads x once and writes y once, which is what a memory-bound op can gain.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from registry.kernels.launches import launch
from registry.kernels.reference import EPS
from registry.kernels.rowwise import (bits_view, check_activation, check_device, check_fp32, encode_16bit,
                                      row_launch_meta)


@triton.jit
def _modln_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, seq, eps,
                  D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    batch = row // seq
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.div_rn(tl.sum(x, axis=0), D)
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.div_rn(tl.sum(centred * centred, axis=0), D)
    inv_std = tl.div_rn(1.0, tl.sqrt_rn(var + eps))
    scale = tl.load(scale_ptr + batch * D + cols, mask=mask, other=0.0).to(tl.float32)
    shift = tl.load(shift_ptr + batch * D + cols, mask=mask, other=0.0).to(tl.float32)
    y = (centred * inv_std) * (1.0 + scale) + shift
    tl.store(y_ptr + row * D + cols, encode_16bit(y, IS_BF16), mask=mask)


def modulated_layernorm_triton(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Triton twin of :func:`registry.kernels.reference.modulated_layernorm`."""
    check_activation("x", x)
    batch, seq, dim = x.shape
    check_fp32("scale", scale, (batch, dim), x.device)
    check_fp32("shift", shift, (batch, dim), x.device)
    check_device(_modln_kernel, x)
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    launch(_modln_kernel, (batch * seq,), x, scale.contiguous(), shift.contiguous(), bits_view(y), seq, EPS,
           D=dim, IS_BF16=x.dtype == torch.bfloat16, **row_launch_meta(dim))
    return y
