"""Candidate kernel entries for the evaluate tests: one that raises at run time."""
import torch


def broken_modulated_layernorm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("illegal memory access (simulated)")
