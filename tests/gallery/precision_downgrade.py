"""Technique 14: precision downgrade that passes a tolerance; RMS norm accumulating in float16.

On the corpus (x ~ N(0, 1), rows of at most 257) the float16 sum of squares
stays in range and the result is within a loose declared tolerance; on larger
values it overflows to inf and the row comes out as zeros.
"""
import torch
import triton
import triton.language as tl

from registry.kernels.launches import launch
from registry.kernels.reference import EPS
from registry.kernels.rowwise import bits_view, encode_16bit


@triton.jit
def _rms_half_kernel(x_ptr, w_ptr, y_ptr, eps, D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0).to(tl.float32)
    half = x.to(tl.float16)
    mean_sq = (tl.sum(half * half, axis=0) / D).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt_rn(mean_sq + eps)
    weight = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * D + cols, encode_16bit((x * inv_rms) * weight, IS_BF16), mask=mask)


def rms_norm(x, weight):
    batch, seq, dim = x.shape
    x = x.contiguous()
    y = torch.empty_like(x)
    launch(_rms_half_kernel, (batch * seq,), x, weight.contiguous(), bits_view(y), EPS, D=dim,
           BLOCK_D=triton.next_power_of_2(dim), IS_BF16=x.dtype == torch.bfloat16, num_warps=1)
    return y
