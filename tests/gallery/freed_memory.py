"""Technique 1: the output is whatever the allocator hands back, hoping it still holds the reference's answer.

On a GPU, torch's caching allocator returns the block the reference's output
just freed, so ``torch.empty_like`` "contains" the answer when the reference
ran first on the same inputs (KernelBench's allocator cheat). On CPU, glibc
hands back a freed block of the same size only sometimes.
"""
import torch

from gallery._shared import launch_nothing


def modulated_layernorm(x, scale, shift):
    launch_nothing(x)
    return torch.empty_like(x)
