"""LPIPS backend: against lpips.LPIPS (golden file) within float32 rounding, and absent, never substituted."""
from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from registry.evidence import lpips_backend
from registry.evidence.lpips_backend import BACKBONE_ENV, Absent, LpipsBackend, get_lpips_backend
from paths import ROOT

GOLDEN = ROOT / "registry" / "evidence" / "data" / "lpips_alex_golden.npz"


def golden_script():
    """scripts/make_lpips_golden.py, whose numpy backbone draw the golden file was made from."""
    spec = importlib.util.spec_from_file_location("make_lpips_golden", ROOT / "scripts" / "make_lpips_golden.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def save_backbone(path: Path, state: dict[str, np.ndarray]) -> str:
    torch.save({name: torch.from_numpy(array) for name, array in state.items()}, path)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.fixture(scope="module")
def backbone(tmp_path_factory, golden):
    """The golden file's random AlexNet backbone, redrawn and saved as a torchvision-style state dict."""
    script = golden_script()
    state = script.random_backbone(int(golden["seed"]))
    assert script.weights_digest(state) == str(golden["weights_sha256"])
    path = tmp_path_factory.mktemp("backbone") / "random-alexnet.pth"
    return path, save_backbone(path, state), state


@pytest.fixture(autouse=True)
def no_ambient_backbone(monkeypatch, tmp_path):
    """Keep the user's environment and torch cache out of these tests."""
    monkeypatch.delenv(BACKBONE_ENV, raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))


# What the platform guarantees for the same float32 operations on another CPU: torch picks its
# convolution kernels by instruction set, and each sums up to 3,456 products (384 x 3 x 3) per output
# in its own blocked order. Rounding error of a reordered float32 sum grows like sqrt(K) u
# (u = 2**-24): about 60 u = 3.5e-6 relative per feature, and squaring the feature difference
# doubles it. Seen: 1 ulp on another x86-64 CPU; here, with oneDNN held to AVX2
# (ONEDNN_MAX_CPU_ISA=AVX2) up to 15 ulp (1.6e-6 relative, on the smallest distance), to SSE4.1
# up to 10 ulp (1.0e-6), and with oneDNN off 14 ulp (1.5e-6). A wrong operation (another
# normalisation, a missing layer, other heads) moves these distances by percent.
LPIPS_RTOL = 1e-5
# Identical frames have identical features, so their distance is 0 up to the square of one rounding.
LPIPS_ATOL = 1e-12


def test_matches_reference_lpips_within_float32_rounding(golden, backbone):
    path, digest, _ = backbone
    backend = get_lpips_backend(path, expected_sha256=digest)
    assert isinstance(backend, LpipsBackend), backend
    for group in ("square", "wide"):
        ours = np.array(backend.distance_per_frame(golden[f"ref_{group}"], golden[f"cand_{group}"]))
        reference = golden[f"lpips_{group}"].astype(np.float64)
        np.testing.assert_allclose(ours, reference, rtol=LPIPS_RTOL, atol=LPIPS_ATOL)
        assert reference[2] == 0.0 and reference[0] > reference[1] > 0.0


def test_description_names_heads_and_backbone_digests(backbone):
    path, digest, _ = backbone
    backend = get_lpips_backend(path, expected_sha256=digest)
    assert backend.name == "lpips-alex"
    assert f"backbone sha256:{digest}" in backend.version
    assert f"heads sha256:{lpips_backend.HEADS_SHA256}" in backend.version


def test_loaded_once_per_process(backbone):
    path, digest, _ = backbone
    assert get_lpips_backend(path, expected_sha256=digest) is get_lpips_backend(str(path), digest.upper())


def test_environment_variable_names_the_backbone(monkeypatch, backbone):
    path, digest, _ = backbone
    monkeypatch.setenv(BACKBONE_ENV, str(path))
    assert isinstance(get_lpips_backend(expected_sha256=digest), LpipsBackend)


def test_absent_without_a_backbone(monkeypatch, tmp_path):
    missing = get_lpips_backend()
    assert isinstance(missing, Absent)
    expected = tmp_path / "torch-home" / "hub" / "checkpoints" / "alexnet-owt-7be5be79.pth"
    assert str(expected) in missing.reason and "nothing is downloaded" in missing.reason
    monkeypatch.setenv(BACKBONE_ENV, str(tmp_path / "elsewhere.pth"))
    from_env = get_lpips_backend()
    assert isinstance(from_env, Absent) and f"${BACKBONE_ENV}" in from_env.reason
    named = get_lpips_backend(tmp_path / "named.pth")
    assert isinstance(named, Absent) and "named.pth" in named.reason


def test_wrong_digest_is_absent(backbone):
    path, digest, _ = backbone
    declared = "0" * 64
    wrong = get_lpips_backend(path, expected_sha256=declared)
    assert isinstance(wrong, Absent)
    assert digest in wrong.reason and declared in wrong.reason
    undeclared = get_lpips_backend(path)
    assert isinstance(undeclared, Absent)
    assert "prefix 7be5be79" in undeclared.reason


def test_malformed_declared_digest_is_an_error(backbone):
    with pytest.raises(ValueError, match="64 hex digits"):
        get_lpips_backend(backbone[0], expected_sha256="7be5be79")


def test_backbone_without_a_layer_is_absent(tmp_path, backbone):
    state = dict(backbone[2])
    del state["features.10.weight"]
    path = tmp_path / "partial.pth"
    result = get_lpips_backend(path, expected_sha256=save_backbone(path, state))
    assert isinstance(result, Absent) and "lacks features.10.weight" in result.reason


def test_backbone_with_wrong_shapes_is_absent(tmp_path, backbone):
    state = dict(backbone[2])
    state["features.3.weight"] = state["features.3.weight"][:, :, :3, :3].copy()
    path = tmp_path / "reshaped.pth"
    result = get_lpips_backend(path, expected_sha256=save_backbone(path, state))
    assert isinstance(result, Absent) and "features.3.weight (192, 64, 3, 3)" in result.reason


def test_unreadable_backbone_is_absent(tmp_path):
    path = tmp_path / "garbage.pth"
    path.write_bytes(b"not a checkpoint")
    result = get_lpips_backend(path, expected_sha256=hashlib.sha256(b"not a checkpoint").hexdigest())
    assert isinstance(result, Absent) and "cannot read the backbone" in result.reason


def test_absent_without_the_lpips_package(monkeypatch, backbone):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "lpips" else real_find_spec(name, *a)
    )
    result = get_lpips_backend(backbone[0], expected_sha256=backbone[1])
    assert isinstance(result, Absent) and "lpips package is not installed" in result.reason


def test_scorer_raises_on_frames_alexnet_cannot_take(backbone):
    """Frames pass SSIM's 11x11 rule but are too small for AlexNet's pooling: a real scorer failure."""
    backend = get_lpips_backend(backbone[0], expected_sha256=backbone[1])
    frames = np.random.default_rng(0).random((1, 24, 24, 3))
    with pytest.raises(RuntimeError):
        backend.distance_per_frame(frames, frames)


def fake_lpips_package(root: Path, heads: bytes | None) -> None:
    package = root / "lpips"
    (package / "weights" / "v0.1").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('the registry must never import lpips')\n")
    if heads is not None:
        (package / "weights" / "v0.1" / "alex.pth").write_bytes(heads)


def test_absent_when_the_package_lacks_its_heads(monkeypatch, tmp_path, backbone):
    fake_lpips_package(tmp_path, heads=None)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = get_lpips_backend(backbone[0], expected_sha256=backbone[1])
    assert isinstance(result, Absent) and "no heads file weights/v0.1/alex.pth" in result.reason


def test_absent_when_the_heads_are_not_lpips_0_1_4s(monkeypatch, tmp_path, backbone):
    fake_lpips_package(tmp_path, heads=b"other heads")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = get_lpips_backend(backbone[0], expected_sha256=backbone[1])
    assert isinstance(result, Absent)
    assert hashlib.sha256(b"other heads").hexdigest() in result.reason
