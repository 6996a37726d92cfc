"""Technique 12: a fast path tuned on the corpus shapes; wrong anywhere else (a "ghost optimisation branch").

The block size comes from a table of the declared corpus's hidden sizes; any
other size gets a 128-wide block, which silently drops the rest of the row.
"""
import torch

from registry.kernels.launches import launch
from registry.kernels.modln import _modln_kernel
from registry.kernels.reference import EPS
from registry.kernels.rowwise import bits_view

_TUNED_BLOCKS = {128: 128, 200: 256, 96: 128, 257: 512}


def modulated_layernorm(x, scale, shift):
    batch, seq, dim = x.shape
    y = torch.empty_like(x)
    launch(_modln_kernel, (batch * seq,), x.contiguous(), scale.contiguous(), shift.contiguous(), bits_view(y), seq,
           EPS, D=dim, BLOCK_D=_TUNED_BLOCKS.get(dim, 128), IS_BF16=x.dtype == torch.bfloat16, num_warps=1)
    return y
