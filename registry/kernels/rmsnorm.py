"""RMS norm with weight (the q/k norm of Wan self-attention), one pass per row."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from registry.kernels.launches import launch
from registry.kernels.reference import EPS
from registry.kernels.rowwise import (bits_view, check_activation, check_device, check_fp32, encode_16bit,
                                      row_launch_meta)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, y_ptr, eps, D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    mean_sq = tl.div_rn(tl.sum(x * x, axis=0), D)
    inv_rms = tl.div_rn(1.0, tl.sqrt_rn(mean_sq + eps))
    weight = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x * inv_rms) * weight
    tl.store(y_ptr + row * D + cols, encode_16bit(y, IS_BF16), mask=mask)


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Triton twin of :func:`registry.kernels.reference.rms_norm`."""
    check_activation("x", x)
    batch, seq, dim = x.shape
    check_fp32("weight", weight, (dim,), x.device)
    check_device(_rms_norm_kernel, x)
    x = x.contiguous()
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    launch(_rms_norm_kernel, (batch * seq,), x, weight.contiguous(), bits_view(y), EPS,
           D=dim, IS_BF16=x.dtype == torch.bfloat16, **row_launch_meta(dim))
    return y
