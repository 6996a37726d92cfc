"""PNG strips of reference and candidate frames, so a person can see what a candidate broke."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from registry.formats.output_files import write_output

GAP = 4
LABEL = 16


def write_strip(path: Path, reference: np.ndarray, candidate: np.ndarray, ssim: list[float], title: str) -> None:
    """Reference frames on top, candidate frames below, per-frame SSIM under each; worst frame boxed in red."""
    count, height, width, _ = reference.shape
    worst = int(np.argmin(ssim))
    canvas = Image.new("RGB", (count * (width + GAP) + GAP, 2 * height + 3 * GAP + 2 * LABEL), "white")
    draw = ImageDraw.Draw(canvas)
    draw.text((GAP, 2), title, fill="black")
    for index in range(count):
        x = GAP + index * (width + GAP)
        canvas.paste(Image.fromarray(reference[index]), (x, LABEL + GAP))
        canvas.paste(Image.fromarray(candidate[index]), (x, LABEL + 2 * GAP + height))
        colour = "red" if index == worst else "black"
        draw.text((x, LABEL + 3 * GAP + 2 * height), f"SSIM {ssim[index]:.4f}", fill=colour)
        if index == worst:
            draw.rectangle((x - 2, LABEL + GAP - 2, x + width + 1, LABEL + 2 * GAP + 2 * height + 1), outline="red", width=2)
    encoded = io.BytesIO()
    canvas.save(encoded, format="PNG")
    write_output(path, encoded.getvalue(), force=True, option="--out")
