"""Pieces shared by the row-wise kernels: layout, storage rounding, input checks.

Every kernel here keeps one row of the hidden dimension per program, loads
with a mask (D need not be a power of two), converts each 16-bit value to fp32
right after its load, and does all math in fp32.

Storage rounding is done by hand. Triton's interpreter converts fp32 to
bfloat16 by truncating the mantissa (its cast has no round-to-nearest-even),
so a plain ``.to(tl.bfloat16)`` disagrees with torch in about half of all
elements on CPU while agreeing on a GPU. Rounding with integer arithmetic on
the fp32 bit pattern gives IEEE round-to-nearest-even on both, and the kernels
store the resulting 16-bit patterns through an int16 view of the output.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

ACTIVATION_DTYPES = (torch.bfloat16, torch.float16)


@triton.jit
def encode_16bit(y, IS_BF16: tl.constexpr):
    """fp32 -> the int16 bit pattern of bf16/fp16, rounded to nearest even."""
    if IS_BF16:
        bits = y.to(tl.uint32, bitcast=True)
        rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
        # A NaN's payload could carry into the sign bit; emit torch's quiet NaN.
        rounded = tl.where(y != y, 0x7FC0, rounded)
        out = rounded.to(tl.int16)
    else:
        out = y.to(tl.float16).to(tl.int16, bitcast=True)
    return out


@triton.jit
def round_through_16bit(y, IS_BF16: tl.constexpr):
    """fp32 -> the fp32 value that storing ``y`` as bf16/fp16 and reloading gives."""
    if IS_BF16:
        bits = encode_16bit(y, True).to(tl.uint16, bitcast=True).to(tl.uint32)
        out = (bits << 16).to(tl.float32, bitcast=True)
    else:
        out = y.to(tl.float16).to(tl.float32)
    return out


def row_launch_meta(dim: int) -> dict[str, int | bool]:
    """Launch options for one row of ``dim`` elements per program.

    BLOCK_D is the next power of two (the tail is masked); num_warps follows
    Triton's layer-norm tutorial (one warp per 256 elements, 1 to 8).
    ``enable_fp_fusion=False`` stops the compiler contracting a multiply and
    an add into one FMA: eager torch runs them as separate kernels, each
    rounding to fp32, and a bitwise drop-in must round the same way. (The
    interpreter ignores the option; numpy never fuses.)
    """
    block = triton.next_power_of_2(dim)
    return {"BLOCK_D": block, "num_warps": min(max(block // 256, 1), 8), "enable_fp_fusion": False}


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """The int16 view through which a kernel stores rounded bf16/fp16 bit patterns."""
    return t.view(torch.int16)


def check_activation(name: str, t: torch.Tensor, shape: tuple[int, ...] | None = None,
                     dtype: torch.dtype | None = None) -> None:
    """Refuse a [B, S, D] activation the kernels were not written for."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 3:
        raise ValueError(f"{name} must be [B, S, D], got shape {list(t.shape)}")
    if t.dtype not in ACTIVATION_DTYPES:
        raise ValueError(f"{name} must be bfloat16 or float16, got {t.dtype}")
    if shape is not None and tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
    if dtype is not None and t.dtype != dtype:
        raise ValueError(f"{name} has dtype {t.dtype}, expected {dtype}")


def check_fp32(name: str, t: torch.Tensor, shape: tuple[int, ...], device: torch.device) -> None:
    """Refuse a modulation/affine vector that is not fp32 of the expected shape and device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise ValueError(f"{name} must be float32, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {list(t.shape)}, expected {list(shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")


def check_device(kernel: object, t: torch.Tensor) -> None:
    """A compiled kernel needs CUDA tensors; only the interpreter takes CPU ones."""
    interpreted = type(kernel).__name__ == "InterpretedFunction"
    if not interpreted and t.device.type != "cuda":
        raise ValueError(
            f"tensor on {t.device}: compiled Triton kernels need CUDA tensors "
            "(set TRITON_INTERPRET=1 before import to run them on CPU)"
        )
