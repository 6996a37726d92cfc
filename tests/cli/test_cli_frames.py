"""Frame sets and perceptual evidence end to end through the CLI on a real SQLite registry."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from frame_helpers import clip_registry, moving_disc
from cli_helpers import head

@pytest.fixture
def cli(registry_cli, tmp_path, monkeypatch):
    return clip_registry(registry_cli, tmp_path, monkeypatch)


def test_register_and_refuse_other_content_under_the_same_name(cli):
    registered = json.loads(cli("frames", "register", "moving-disc", str(cli.tmp / "reference.npz"), "--seed", "7", "--json").output)
    assert registered["frames"] == 4 and registered["dtype"] == "uint8" and registered["appended"] is True
    again = json.loads(cli("frames", "register", "moving-disc", str(cli.tmp / "reference.npz"), "--seed", "7", "--json").output)
    assert again["appended"] is False
    other = moving_disc()
    other[0, 0, 0, 0] ^= 1
    np.save(cli.tmp / "other.npy", other)
    before = head(cli)
    refused = cli("frames", "register", "moving-disc", str(cli.tmp / "other.npy"), "--seed", "7")
    assert refused.exit_code == 1 and "other content" in refused.output and head(cli) == before


def test_rgba_frames_are_refused_naming_the_problem(cli):
    np.save(cli.tmp / "rgba.npy", np.zeros((4, 48, 48, 4), dtype=np.uint8))
    result = cli("frames", "register", "rgba", str(cli.tmp / "rgba.npy"), "--seed", "7")
    assert result.exit_code == 1 and "RGBA" in result.output


def test_perceptual_evidence_from_a_png_directory(cli):
    cli("frames", "register", "moving-disc", str(cli.tmp / "reference.npz"), "--seed", "7")
    candidate = moving_disc()
    candidate[2] = 255 - candidate[2]  # one destroyed frame
    folder = cli.tmp / "candidate"
    folder.mkdir()
    for index, frame in enumerate(candidate):
        Image.fromarray(frame).save(folder / f"{index:03d}.png")
    result = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc", "--candidate", str(folder), "--json")
    assert result.exit_code == 0, result.output
    item = json.loads(result.output)["evidence"]
    assert len(item["ssim"]) == 4 and int(np.argmin(item["ssim"])) == 2 and min(item["ssim"]) < 0.5
    assert item["lpips"] is None and "lpips" in item["absent"]
    # The budget gates on LPIPS, which is absent here: the gate holds rather than guess.
    cli("evidence", "import", str(_other_evidence(cli.tmp)))
    verdict = json.loads(cli("promote", "cache-v1", "--json").output)
    assert verdict["decision"] in ("held", "quarantined")
    assert any("lpips" in reason for reason in verdict["reasons"])


def _other_evidence(tmp):
    path = tmp / "other-evidence.json"
    path.write_text(json.dumps({"format": "registry.evidence/1", "artifact": "cache-v1", "evidence": [
        {"kind": "execution", "candidate_calls": 8, "fallbacks": 0},
        {"kind": "benchmark", "protocol": "paired", "device": "cpu", "timer": "perf_counter",
         "baseline_s": [1.0, 1.01], "candidate_s": [0.5, 0.51], "schedule": ["BC", "CB"]}]}))
    return path


def test_seed_and_pixel_mismatches_are_refused(cli):
    cli("frames", "register", "moving-disc", str(cli.tmp / "reference.npz"), "--seed", "7")
    np.save(cli.tmp / "cand.npy", moving_disc())
    before = head(cli)
    wrong_seed = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc", "--candidate",
                     str(cli.tmp / "cand.npy"), "--seed", "8")
    assert wrong_seed.exit_code == 1 and "seed" in wrong_seed.output
    tampered = moving_disc()
    tampered[1, 5, 5, 1] += 1
    np.save(cli.tmp / "tampered.npy", tampered)
    wrong_pixels = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc", "--candidate",
                       str(cli.tmp / "cand.npy"), "--reference-path", str(cli.tmp / "tampered.npy"))
    assert wrong_pixels.exit_code == 1 and "do not match" in wrong_pixels.output
    short = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc", "--candidate",
                str(cli.tmp / "reference.npz"), "--vbench", "1.5")
    assert short.exit_code == 1
    assert head(cli) == before
