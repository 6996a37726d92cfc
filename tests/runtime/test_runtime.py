"""registry.runtime: profile detection, resolve against a lock file or a database, the trusted loader, the example."""
from __future__ import annotations

import inspect
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from registry.bundles import Profile, reference_fingerprint
from registry.kernels import modln
from registry.kernels.reference import modulated_layernorm
from registry.runtime import LoadError, Match, RuntimeProfile, load, resolve
from ship_helpers import declare, ship, ship_fast_and_faster, sign_lock_file
from paths import ROOT

PROFILE = Profile("sm90", "2.13.0", "12.8")


@pytest.fixture
def locked(registry_cli):
    root = ship_fast_and_faster(registry_cli)
    lock = sign_lock_file(registry_cli)
    registry_cli.bundles, registry_cli.lock = root, lock
    return registry_cli


def test_a_lock_file_and_the_database_give_the_same_answer(locked):
    from_lock = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted)
    from_db = resolve("wan", PROFILE, database=locked.url)
    assert from_lock.match == from_db.match and from_lock.match.artifact == "faster"
    assert from_lock.reason_codes() == from_db.reason_codes() == {"fast": "not_selected"}
    with pytest.raises(ValueError, match="exactly one source"):
        resolve("wan", PROFILE)
    with pytest.raises(ValueError, match="not 'other'"):
        resolve("other", PROFILE, lock=locked.lock, trusted_keys=locked.trusted)


def test_load_returns_the_entry_point_without_touching_sys_path(locked):
    match = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted).match
    # Another test of this process may have loaded the same bundle (same digest, same private name) already.
    sys.modules.pop(f"_registry_bundle_{match.bundle_sha256[:16]}", None)
    path_before, modules_before = list(sys.path), set(sys.modules)
    replacement = load(match, trusted_root=locked.bundles)
    assert replacement(3) == ("faster", 3)
    assert sys.path == path_before
    added = set(sys.modules) - modules_before
    assert added == {f"_registry_bundle_{match.bundle_sha256[:16]}"} and "op" not in sys.modules


def test_load_refuses_a_file_changed_after_resolve(locked):
    match = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted).match
    entry = locked.bundles / "faster" / "op.py"
    entry.write_text(entry.read_text().replace("faster", "FASTER"))  # same size, other bytes
    with pytest.raises(LoadError, match="faster: refused: .*op.py has sha256"):
        load(match, trusted_root=locked.bundles)


def test_load_refuses_a_file_added_after_resolve(locked):
    match = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted).match
    (locked.bundles / "faster" / "sitecustomize.py").write_text("import os\n")
    with pytest.raises(LoadError, match="sitecustomize.py is not declared"):
        load(match, trusted_root=locked.bundles)


def test_load_refuses_a_bundle_resolving_outside_the_trusted_root(locked, tmp_path_factory):
    match = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted).match
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "faster"
    shutil.copytree(locked.bundles / "faster", elsewhere)
    trusted = tmp_path_factory.mktemp("trusted")
    os.symlink(elsewhere, trusted / "faster")
    with pytest.raises(LoadError, match="outside the trusted root"):
        load(match, trusted_root=trusted)
    outside_file = tmp_path_factory.mktemp("loose") / "op.py"
    shutil.copy(locked.bundles / "faster" / "op.py", outside_file)
    (locked.bundles / "faster" / "op.py").unlink()
    os.symlink(outside_file, locked.bundles / "faster" / "op.py")
    with pytest.raises(LoadError, match="symlink to outside the bundle"):
        load(match, trusted_root=locked.bundles)


def test_load_refuses_an_artifact_id_that_is_a_path(locked):
    match = resolve("wan", PROFILE, lock=locked.lock, trusted_keys=locked.trusted).match
    forged = Match("../faster", match.bundle_sha256, match.manifest, match.verdict_event_id)
    with pytest.raises(LoadError, match="cannot name a bundle directory"):
        load(forged, trusted_root=locked.bundles / "fast")


def test_reading_a_lock_file_imports_no_torch_until_detect(locked):
    program = (
        "import sys\n"
        "from registry.bundles import Profile\n"
        "from registry.runtime import RuntimeProfile, load, resolve\n"
        f"answer = resolve('wan', Profile('sm90', '2.13.0', '12.8'), lock={str(locked.lock)!r}, "
        f"trusted_keys={locked.trusted!r})\n"
        f"load(answer.match, trusted_root={str(locked.bundles)!r})\n"
        "heavy = sorted(m for m in ('torch', 'sqlalchemy', 'psycopg', 'numpy') if m in sys.modules)\n"
        "print(answer.match.artifact, heavy)\n"
        "RuntimeProfile.detect()\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["faster []", "True"]


def test_detect_describes_this_process():
    profile = RuntimeProfile.detect()
    assert profile.torch == torch.__version__ and profile.cuda == torch.version.cuda
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        assert profile.gpu_architecture == f"sm{major}{minor}"
    else:
        assert profile.gpu_architecture == "cpu"
    assert (profile.execution_mode, profile.distributed_mode) == ("inference", "single")


def _kernel_bundle_lock(cli, gpu_architectures: list[str]) -> Path:
    """A registry where the fused modulated LayerNorm ships as a bundle, exported to a lock file."""
    declare(cli)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    activation = {"name": "x", "shape": ["*", "*", "*"], "stride": ["*", "*", 1], "dtype": "bfloat16", "device": device}
    per_batch = {"shape": ["*", "*"], "stride": ["*", 1], "dtype": "float32", "device": device}
    ship(cli, cli.tmp / "bundles", "modln-triton", 1.6, source=inspect.getsource(modln),
         fingerprint=reference_fingerprint(modulated_layernorm), inputs=[activation, per_batch, per_batch],
         gpu_architectures=gpu_architectures, cuda={}, entry_symbol="modulated_layernorm_triton")
    return sign_lock_file(cli)


def _run_example(*args: str) -> str:
    example = runpy.run_path(str(ROOT / "examples" / "modln_runtime.py"), run_name="example")
    return example["main"](list(args))


def test_the_worked_example_ships_the_promoted_kernel(registry_cli, capsys):
    here = RuntimeProfile.detect().gpu_architecture
    lock = _kernel_bundle_lock(registry_cli, [here])
    assert _run_example("--lock", str(lock), "--trusted-key", registry_cli.trusted[0],
                        "--bundles", str(registry_cli.tmp / "bundles"), "--workload", "wan") \
        == "modln-triton"
    assert "ran as modln-triton; equal to the reference bit for bit: True" in capsys.readouterr().out


def test_the_worked_example_falls_back_and_logs_the_reason_code(registry_cli, capsys, caplog):
    elsewhere = "sm100" if RuntimeProfile.detect().gpu_architecture != "sm100" else "sm90"
    _kernel_bundle_lock(registry_cli, [elsewhere])
    used = _run_example("--db", registry_cli.url, "--bundles", str(registry_cli.tmp / "bundles"), "--workload", "wan")
    assert used == "reference"
    assert "not using modln-triton: gpu_architecture_mismatch" in caplog.text
    assert "ran as reference" in capsys.readouterr().out
