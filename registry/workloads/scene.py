"""The analytic scene the demo DiT's denoiser blends in: coloured shapes moving with the frame index.

A randomly initialised transformer produces texture, not pictures. For a
person to see what a lossy candidate broke, the denoiser's clean-latent
prediction is anchored on this scene (see `tiny_dit.TinyVideoDiT.predict_clean`),
so the frames show shapes that move and a broken candidate shows as blur,
smear or noise on them.

The scene is drawn at latent resolution in logit space (the decoder applies a
sigmoid after upsampling, which keeps edges sharp at pixel resolution).
Shapes are anti-aliased over one latent pixel by clamping their signed
distance, so a sub-pixel move changes the picture smoothly.
"""
from __future__ import annotations

import math

import torch

# Colours in RGB [0, 1]. Logits are clamped to this band so that every colour
# is reachable by the sigmoid decoder with a finite logit.
_RGB_FLOOR = 0.03
_RGB_CEIL = 0.97


def _coverage(signed_distance: torch.Tensor) -> torch.Tensor:
    """Fraction of a latent pixel inside a shape: 1 inside, 0 outside, linear over one pixel."""
    return (0.5 - signed_distance).clamp(0.0, 1.0)


def scene_rgb(frames: int, size: int) -> torch.Tensor:
    """The scene as RGB in [0, 1], shape [frames, 3, size, size], float32.

    Three shapes cross the frame at different speeds and in different directions over a
    vertical gradient, so consecutive frames always differ and each part of
    the picture moves differently.
    """
    if frames < 1 or size < 8:
        raise ValueError(f"scene needs frames >= 1 and size >= 8, got frames={frames}, size={size}")
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    y = coords.view(1, size, 1)
    x = coords.view(1, 1, size)
    f = torch.arange(frames, dtype=torch.float32).view(frames, 1, 1)
    unit = size / 16.0  # shape sizes and speeds are written for a 16-pixel latent

    sky = torch.tensor([0.10, 0.16, 0.38]).view(1, 3, 1, 1)
    ground = torch.tensor([0.55, 0.62, 0.80]).view(1, 3, 1, 1)
    ramp = (y / size).unsqueeze(1)  # [1, 1, size, 1]
    rgb = (sky * (1.0 - ramp) + ground * ramp).expand(frames, 3, size, size).clone()

    # Red disc moving right along the top.
    cx, cy = (2.5 + 1.3 * f) * unit, 4.0 * unit
    disc = torch.sqrt((x - cx) ** 2 + (y - cy) ** 2) - 2.4 * unit
    # Green square rising from the bottom left towards the middle.
    sx, sy = (3.5 + 0.35 * f) * unit, (12.5 - 0.6 * f) * unit
    square = torch.maximum((x - sx).abs(), (y - sy).abs()) - 1.8 * unit
    # Yellow ring moving left along the bottom right, slower.
    rx, ry = (12.5 - 0.5 * f) * unit, 11.5 * unit
    radius = torch.sqrt((x - rx) ** 2 + (y - ry) ** 2)
    ring = (radius - 2.0 * unit).abs() - 0.7 * unit

    for distance, colour in (
        (ring, (0.98, 0.86, 0.15)),
        (square, (0.15, 0.80, 0.30)),
        (disc, (0.92, 0.18, 0.16)),
    ):
        cover = _coverage(distance).unsqueeze(1)  # [frames, 1, size, size]
        rgb = rgb * (1.0 - cover) + torch.tensor(colour).view(1, 3, 1, 1) * cover
    return rgb


def scene_logits(frames: int, size: int) -> torch.Tensor:
    """`scene_rgb` mapped through the inverse sigmoid (the decoder's output nonlinearity)."""
    rgb = scene_rgb(frames, size).clamp(_RGB_FLOOR, _RGB_CEIL)
    return torch.log(rgb) - torch.log1p(-rgb)


def gaussian_blur(latent: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable spatial Gaussian blur of a [frames, channels, h, w] tensor (replicate padding).

    sigma is in latent pixels; sigma == 0 returns the input unchanged.
    """
    if not math.isfinite(sigma) or sigma < 0.0:
        raise ValueError(f"blur sigma must be finite and >= 0, got {sigma}")
    if sigma == 0.0:
        return latent
    radius = max(1, math.ceil(3.0 * sigma))
    taps = torch.arange(-radius, radius + 1, dtype=latent.dtype)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
    kernel = kernel / kernel.sum()
    frames, channels, height, width = latent.shape
    flat = latent.reshape(frames * channels, 1, height, width)
    flat = torch.nn.functional.pad(flat, (radius, radius, 0, 0), mode="replicate")
    flat = torch.nn.functional.conv2d(flat, kernel.view(1, 1, 1, -1))
    flat = torch.nn.functional.pad(flat, (0, 0, radius, radius), mode="replicate")
    flat = torch.nn.functional.conv2d(flat, kernel.view(1, 1, -1, 1))
    return flat.reshape(frames, channels, height, width)
