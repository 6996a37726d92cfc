"""LPIPS (AlexNet, v0.1) without downloads and without importing ``lpips``.

LPIPS (Zhang, Isola, Efros, Shechtman, Wang, "The Unreasonable
Effectiveness of Deep Features as a Perceptual Metric", CVPR 2018) compares
two images through the five ReLU outputs of an ImageNet AlexNet (Krizhevsky
et al. 2012, in torchvision's single-tower layout): each feature map is
unit-normalised along channels, the squared difference is weighted per
channel by a calibrated 1x1 linear head, averaged over space, and the five
layers are summed.

The pieces come from two files, neither ever fetched at run time:

* the linear heads ship inside the ``lpips`` package
  (``lpips/weights/v0.1/alex.pth``). The package's ``__init__`` imports
  torchvision, which this project does not install, so the file is located
  with ``importlib.util.find_spec`` (which does not execute the package) and
  read with ``torch.load(weights_only=True)``;
* the ImageNet backbone is a torchvision-style state dict
  (``features.N.weight`` / ``features.N.bias``) that the user supplies: the
  ``backbone_path`` argument, else ``$REGISTRY_LPIPS_BACKBONE``, else
  torchvision's cache file ``<torch hub dir>/checkpoints/alexnet-owt-7be5be79.pth``.
  Its SHA-256 must start with ``7be5be79`` (the check torchvision itself
  applies to that file) unless the caller declares the full digest of another
  backbone with ``expected_sha256``.

The forward pass repeats ``lpips.LPIPS(net='alex', version='0.1')`` in eval
mode operation for operation, in float32 on the CPU, so that it reproduces
the reference implementation's numbers (see ``tests/evidence/test_lpips.py`` and the
golden file made by ``scripts/make_lpips_golden.py``). Anything missing or
mismatched yields :class:`Absent` with the reason, never a substitute number.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from registry.formats.errors import UserError
from registry.evidence.frames import check_frames, check_pair, unit_float
from registry.formats.digests import is_sha256

BACKBONE_ENV = "REGISTRY_LPIPS_BACKBONE"
BACKBONE_FILE = "alexnet-owt-7be5be79.pth"
# torchvision names its download by the first 8 hex digits of the file's
# SHA-256 and checks exactly that prefix; we apply the same check.
TORCHVISION_SHA256_PREFIX = "7be5be79"
# The calibrated v0.1 AlexNet heads as shipped in lpips 0.1.4 (weights/v0.1/alex.pth).
# Pinned: a different heads file would be a different metric under the same name.
HEADS_SHA256 = "df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0"

# torchvision alexnet().features: conv index -> (out, in, kernel, stride, padding).
# Each conv is followed by a ReLU (the LPIPS taps); max-pool 3/2 precedes convs 3 and 6.
_CONVS = {
    0: (64, 3, 11, 4, 2),
    3: (192, 64, 5, 1, 2),
    6: (384, 192, 3, 1, 1),
    8: (256, 384, 3, 1, 1),
    10: (256, 256, 3, 1, 1),
}
_POOL_BEFORE = {3, 6}
# lpips.pretrained_networks.ScalingLayer: ImageNet statistics re-expressed for inputs in [-1, 1].
_SHIFT = (-0.030, -0.088, -0.188)
_SCALE = (0.458, 0.448, 0.450)
_EPS = 1e-10  # lpips.normalize_tensor


@dataclass(frozen=True)
class Absent:
    """A metric that was not measured, and why."""

    reason: str


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _torch_hub_dir() -> Path:
    """torch.hub.get_dir()'s rule, without importing torch."""
    if "TORCH_HOME" in os.environ:
        return Path(os.environ["TORCH_HOME"]).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME", "~/.cache")
    return Path(cache).expanduser() / "torch" / "hub"


def _backbone_location(backbone_path: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The declared backbone file and where the declaration came from (first one wins)."""
    if backbone_path is not None:
        return Path(backbone_path).expanduser(), "backbone_path"
    if os.environ.get(BACKBONE_ENV):
        return Path(os.environ[BACKBONE_ENV]).expanduser(), f"${BACKBONE_ENV}"
    return _torch_hub_dir() / "checkpoints" / BACKBONE_FILE, "the torch hub cache"


def _heads_file() -> Path | Absent:
    spec = importlib.util.find_spec("lpips")
    if spec is None or not spec.submodule_search_locations:
        return Absent("the lpips package is not installed (its calibrated v0.1 heads are needed)")
    path = Path(list(spec.submodule_search_locations)[0]) / "weights" / "v0.1" / "alex.pth"
    if not path.is_file():
        return Absent(f"the lpips package has no heads file weights/v0.1/alex.pth at {path}")
    digest = _sha256(path)
    if digest != HEADS_SHA256:
        return Absent(f"the LPIPS heads file {path} has sha256 {digest}, not lpips 0.1.4's {HEADS_SHA256}")
    return path


def _lpips_version() -> str:
    try:
        return importlib.metadata.version("lpips")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _load_state(torch: Any, path: Path, what: str) -> dict[str, Any] | Absent:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a reason, not a crash
        return Absent(f"cannot read the {what} {path}: {type(exc).__name__}: {exc}")
    if not isinstance(state, dict):
        return Absent(f"the {what} {path} is not a state dict")
    return state


def _tensor(state: dict[str, Any], key: str, shape: tuple[int, ...], torch: Any, what: str) -> Any:
    value = state.get(key)
    if value is None:
        return Absent(f"the {what} lacks {key}")
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape or value.dtype != torch.float32:
        got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
        return Absent(f"the {what} has {key} {got}; expected {shape} torch.float32")
    return value.contiguous()


class LpipsBackend:
    """LPIPS-Alex v0.1 distance from a verified backbone and the shipped heads."""

    name = "lpips-alex"

    def __init__(self, torch: Any, convs: list[tuple[Any, Any]], heads: list[Any], version: str) -> None:
        self._torch = torch
        self._convs = convs
        self._heads = heads
        self.version = version
        self._shift = torch.tensor(_SHIFT, dtype=torch.float32)[None, :, None, None]
        self._scale = torch.tensor(_SCALE, dtype=torch.float32)[None, :, None, None]

    def _features(self, image: Any) -> list[Any]:
        functional = self._torch.nn.functional
        h = (image - self._shift) / self._scale
        taps = []
        for (index, (_, _, _, stride, padding)), (weight, bias) in zip(_CONVS.items(), self._convs):
            if index in _POOL_BEFORE:
                h = functional.max_pool2d(h, kernel_size=3, stride=2)
            h = functional.relu(functional.conv2d(h, weight, bias, stride=stride, padding=padding))
            taps.append(h)
        return taps

    def _distance(self, ref: np.ndarray, cand: np.ndarray) -> float:
        torch = self._torch
        functional = torch.nn.functional
        images = []
        for frame in (ref, cand):
            pixels = torch.from_numpy(np.ascontiguousarray(frame.transpose(2, 0, 1), dtype=np.float32))
            images.append(2 * pixels[None] - 1)  # frames are [0, 1]; LPIPS expects [-1, 1]
        feats_ref, feats_cand = (self._features(image) for image in images)
        total: Any = 0
        for a, b, head in zip(feats_ref, feats_cand, self._heads):
            a = a / (torch.sqrt(torch.sum(a**2, dim=1, keepdim=True)) + _EPS)
            b = b / (torch.sqrt(torch.sum(b**2, dim=1, keepdim=True)) + _EPS)
            layer = functional.conv2d((a - b) ** 2, head)
            total = total + layer.mean([2, 3], keepdim=True)
        return float(total.reshape(()))

    def distance_per_frame(self, ref_frames: Any, cand_frames: Any) -> list[float]:
        """LPIPS distance of each frame pair of two ``[frames, height, width, 3]`` stacks."""
        ref = check_frames(ref_frames, "reference")
        cand = check_frames(cand_frames, "candidate")
        check_pair(ref, cand)
        with self._torch.inference_mode():  # one frame pair in float at a time, like SSIM
            return [self._distance(unit_float(r), unit_float(c)) for r, c in zip(ref, cand)]


_CACHE: dict[tuple[str, str], LpipsBackend] = {}


def _build(torch: Any, backbone: dict[str, Any], heads_path: Path, backbone_digest: str) -> LpipsBackend | Absent:
    convs = []
    for index, (out_ch, in_ch, kernel, _, _) in _CONVS.items():
        weight = _tensor(backbone, f"features.{index}.weight", (out_ch, in_ch, kernel, kernel), torch, "backbone")
        bias = _tensor(backbone, f"features.{index}.bias", (out_ch,), torch, "backbone")
        for part in (weight, bias):
            if isinstance(part, Absent):
                return part
        convs.append((weight, bias))
    heads_state = _load_state(torch, heads_path, "LPIPS heads file")
    if isinstance(heads_state, Absent):
        return heads_state
    heads = []
    for layer, (out_ch, _, _, _, _) in enumerate(_CONVS.values()):
        head = _tensor(heads_state, f"lin{layer}.model.1.weight", (1, out_ch, 1, 1), torch, "LPIPS heads file")
        if isinstance(head, Absent):
            return head
        heads.append(head)
    version = (
        f"0.1 (lpips {_lpips_version()}; heads sha256:{HEADS_SHA256}; "
        f"backbone sha256:{backbone_digest})"
    )
    return LpipsBackend(torch, convs, heads, version)


def get_lpips_backend(
    backbone_path: str | os.PathLike[str] | None = None,
    expected_sha256: str | None = None,
) -> LpipsBackend | Absent:
    """The LPIPS-Alex backend, loaded once per process per (backbone file, digest), or :class:`Absent`.

    ``expected_sha256`` (64 hex digits) declares the exact backbone to accept;
    without it only torchvision's ImageNet AlexNet file (SHA-256 prefix
    ``7be5be79``) is accepted.
    """
    if expected_sha256 is not None and not is_sha256(expected_sha256.lower()):  # either case, as tools print it
        raise UserError(f"--lpips-sha256 must be 64 hex digits, got {expected_sha256!r}")
    if importlib.util.find_spec("torch") is None:
        return Absent("torch is not installed")
    heads_path = _heads_file()
    if isinstance(heads_path, Absent):
        return heads_path
    path, source = _backbone_location(backbone_path)
    if not path.is_file():
        return Absent(f"no AlexNet backbone file at {path} (from {source}); nothing is downloaded")
    digest = _sha256(path)
    if expected_sha256 is not None:
        if digest != expected_sha256.lower():
            return Absent(f"backbone {path} has sha256 {digest}, not the one declared with --lpips-sha256 "
                          f"({expected_sha256.lower()})")
    elif not digest.startswith(TORCHVISION_SHA256_PREFIX):
        return Absent(
            f"backbone {path} has sha256 {digest}, not torchvision's AlexNet "
            f"(prefix {TORCHVISION_SHA256_PREFIX}); declare its sha256 with --lpips-sha256 to use another backbone"
        )
    key = (str(path.resolve()), digest)
    if key not in _CACHE:
        import torch

        backbone = _load_state(torch, path, "backbone")
        if isinstance(backbone, Absent):
            return backbone
        built = _build(torch, backbone, heads_path, digest)
        if isinstance(built, Absent):
            return built
        _CACHE[key] = built
    return _CACHE[key]
