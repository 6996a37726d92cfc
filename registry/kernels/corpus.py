"""Shape corpora and seeded input generation shared by every operation.

The gpu corpus holds the activation shapes of Wan 2.x text-to-video DiTs at
batch 1 (sequence = latent frames x latent height x latent width / patch
area; hidden 1536 for 1.3B, 5120 for 14B) plus two awkward shapes whose
hidden size is not a multiple of the block (1537) or whose batch is > 1. The
cpu corpus keeps the same structure at sizes Triton's interpreter runs in
well under a second, with a non-power-of-two hidden size and both 16-bit
activation dtypes.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from registry.formats.errors import UserError

CORPORA = ("cpu", "gpu")

_GPU_SHAPES = (
    (1, 20280, 1536, "bfloat16"),
    (1, 32760, 1536, "bfloat16"),
    (1, 20280, 5120, "bfloat16"),
    (1, 5070, 5120, "bfloat16"),
    (1, 8190, 5120, "bfloat16"),
    (1, 257, 1537, "bfloat16"),
    (2, 511, 1536, "bfloat16"),
)
_CPU_SHAPES = (
    (1, 8, 128, "bfloat16"),
    (2, 5, 200, "bfloat16"),
    (1, 6, 96, "float16"),
    (1, 3, 257, "float16"),
)
_SEED_BASE = {"cpu": 1000, "gpu": 2000}


@dataclass(frozen=True)
class Case:
    """One corpus entry: an activation shape [batch, seq, dim], its dtype and its seed."""

    label: str
    batch: int
    seq: int
    dim: int
    dtype: str
    seed: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def rows(self) -> int:
        return self.batch * self.seq

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()


def corpus_cases(kind: str) -> tuple[Case, ...]:
    """The cases of corpus ``kind`` ("cpu" or "gpu"), labelled shape0, shape1, ..."""
    if kind not in CORPORA:
        raise UserError(f"unknown corpus {kind!r}; expected one of {list(CORPORA)}")
    shapes = _CPU_SHAPES if kind == "cpu" else _GPU_SHAPES
    return tuple(Case(f"shape{i}", b, s, d, dt, _SEED_BASE[kind] + i) for i, (b, s, d, dt) in enumerate(shapes))


class Sampler:
    """Seeded normal draws made on the target device, so the gpu corpus never crosses PCIe.

    A seed fixes the values per device type (CPU and CUDA generators differ).
    """

    def __init__(self, seed: int, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)

    def normal(self, shape: tuple[int, ...], mean: float, std: float,
               dtype: torch.dtype = torch.float32) -> torch.Tensor:
        draw = torch.randn(shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return (draw * std + mean).to(dtype)
