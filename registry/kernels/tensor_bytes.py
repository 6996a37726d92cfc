"""Tensors to the launcher's bytes and back: what the evaluation and the runtime both hand the trusted launcher.

The launcher (registry/kernels/launcher.py) knows buffers as bytes and a
plan's declared dtype, shape and strides; these two functions are the only
place a torch tensor becomes those bytes, or comes back from them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from registry.kernels import wire
from registry.kernels.launch_plan import LaunchPlan

if TYPE_CHECKING:
    import torch


def input_bytes(names: Sequence[str], tensors: Sequence["torch.Tensor"]) -> dict[str, bytes]:
    """Each input tensor's bytes by the spec's name: its elements, in its own shape made dense."""
    return {name: bytes(wire.storage_bytes(t.detach().to("cpu").contiguous().clone())) for name, t in zip(names, tensors)}


def output_tensor(plan: LaunchPlan, name: str, data: bytes) -> "torch.Tensor":
    """An output buffer's bytes as the tensor the plan declares (dtype, shape, strides), on the CPU."""
    import torch

    spec = next(b for b in plan.buffers if b.name == name)
    dtype = wire.dtype_from_name(spec.dtype)
    flat = torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)
    return flat.as_strided(spec.shape, spec.strides)
