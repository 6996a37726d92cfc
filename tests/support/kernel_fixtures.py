"""Candidate kernel entries for the evaluate tests: one that raises at run time, its message trying to add a line of
its own to what the registry prints."""
import torch


def broken_modulated_layernorm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    raise RuntimeError(f"illegal memory access (simulated)\n{FORGED}")


FORGED = "forged: PROMOTED"
