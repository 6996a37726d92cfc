"""`registry lock` and `lock verify`: what a lock holds, offline checks, and checks against the registry."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from registry.cli.main import main
from registry.runtime.trust import PROCESS_HISTORY
from ship_helpers import make_bundle, measure_and_promote, register, ship, ship_fast_and_faster
from stateful_checks import CopiedStart
from store_helpers import opened

PROFILE = ("--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")

# The folder `shipped` builds through the CLI (four bundles shipped, one of them quarantined): built by the first
# test of a process that asks, copied for the others (nothing in it names the folder it was built in). The copies
# share their log's origin, so each test starts with no lock of that log accepted by the process (as a new log had).
SHIPPED = CopiedStart()


@pytest.fixture
def shipped(registry_cli, monkeypatch):
    monkeypatch.setattr(PROCESS_HISTORY, "_newest", {})
    SHIPPED.start(registry_cli.tmp, lambda: ship_four(registry_cli))
    registry_cli.bundles = registry_cli.tmp / "bundles"
    return registry_cli


def ship_four(registry_cli) -> dict:
    root = ship_fast_and_faster(registry_cli, faster_source="def replacement(x):\n    return x * 2\n")
    assert root == registry_cli.tmp / "bundles"
    ship(registry_cli, root, "blackwell", 2.5, gpu_architectures=["sm100"])
    ship(registry_cli, root, "quarantined", 3.0, worst_ssim=0.5)
    return {}


def export(cli, *args):
    """An unsigned lock (these tests check its content and the registry; tests/bundles/test_signed_lock.py signs)."""
    out = cli.tmp / "registry.lock.json"
    result = cli("lock", "--workload", "wan", *args, "--unsigned", "--out", str(out))
    return result, out


def offline(*args):
    """`registry lock verify` with no database anywhere: no --db and no REGISTRY_DATABASE_URL."""
    return CliRunner(env={"REGISTRY_DATABASE_URL": None}).invoke(main, ["lock", "verify", *args])


def test_a_lock_records_everything_a_deployment_needs(shipped):
    result, out = export(shipped, *PROFILE)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    registry = opened(shipped.url)
    head = registry.store.head_position()
    assert document["format"] == "registry.lock/1" and document["workload"] == "wan"
    assert document["log_position"] == head
    assert document["chain_hash"] == registry.store.read_all(after_position=head - 1)[0].hash
    assert [a["artifact"] for a in document["artifacts"]] == ["faster", "fast"]  # best first; sm100-only left out
    entry = document["artifacts"][0]
    state = json.loads(shipped("show", "faster", "--json").output)
    assert entry["identity"]["payload_sha256"] == entry["bundle_sha256"] == state["payload_sha256"]
    assert entry["identity"]["identity"] == state["identity"]
    assert entry["verdict_event_id"] == state["verdict_event_id"]
    manifest = entry["manifest"]
    assert manifest["entry_point"] == {"file": "op.py", "symbol": "replacement"}
    assert manifest["files"][0]["path"] == "op.py" and len(manifest["files"][0]["sha256"]) == 64
    assert manifest["compatibility"]["gpu_architectures"] == ["sm90", "sm100"]


def test_without_a_profile_every_promoted_bundle_is_locked(shipped):
    result, out = export(shipped)
    assert result.exit_code == 0
    assert [a["artifact"] for a in json.loads(out.read_text())["artifacts"]] == ["blackwell", "faster", "fast"]


def test_nothing_to_lock_exits_3_and_writes_nothing(shipped):
    result, out = export(shipped, "--arch", "sm80", "--torch", "2.13.0")
    assert result.exit_code == 3 and "no file written" in result.stderr
    assert not out.exists()


def test_verify_offline_needs_no_database(shipped):
    _, out = export(shipped, *PROFILE)
    for suffix in ("", "-wal", "-shm"):
        (shipped.tmp / f"registry.db{suffix}").unlink(missing_ok=True)
    result = offline(str(out), "--bundles", str(shipped.bundles))
    assert result.exit_code == 0, result.output
    assert "checked lock file, bundles" in result.output and "registry" not in result.output
    assert not (shipped.tmp / "registry.db").exists()


def test_a_bundle_changed_on_disk_fails_verify(shipped):
    _, out = export(shipped, *PROFILE)
    copy = shipped.tmp / "deployed"
    shutil.copytree(shipped.bundles, copy)
    (copy / "fast" / "op.py").write_text("def replacement(x):\n    return 'evil'\n")
    (copy / "faster" / "notes.txt").write_text("undeclared\n")
    result = offline(str(out), "--bundles", str(copy), "--json")
    assert result.exit_code == 3
    problems = {p["artifact"]: p for p in json.loads(result.output)["problems"]}
    assert problems["fast"]["code"] == "bundle_mismatch" and "op.py" in problems["fast"]["detail"]
    assert problems["faster"]["code"] == "bundle_mismatch" and "notes.txt" in problems["faster"]["detail"]


def test_an_edited_lock_file_is_refused(shipped):
    _, out = export(shipped, *PROFILE)
    document = json.loads(out.read_text())
    document["artifacts"][0]["manifest"]["compatibility"]["gpu_architectures"].append("sm80")
    out.write_text(json.dumps(document))
    result = offline(str(out))
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "the lock file was edited" in result.stderr
    document["surprise"] = True
    out.write_text(json.dumps(document))
    assert "surprise: unknown field" in offline(str(out)).stderr


def test_a_revocation_after_export_fails_verify_naming_who_and_why(shipped):
    _, out = export(shipped, *PROFILE)
    assert shipped("lock", "verify", str(out), "--bundles", str(shipped.bundles)).exit_code == 0
    assert shipped("revoke", "faster", "--reason", "corrupts frames at 720p", actor="carol").exit_code == 0
    result = shipped("lock", "verify", str(out), "--bundles", str(shipped.bundles))
    assert result.exit_code == 3
    assert "revoked: faster: revoked at position" in result.stderr
    assert "by carol: corrupts frames at 720p" in result.stderr
    assert offline(str(out), "--bundles", str(shipped.bundles)).exit_code == 0  # offline cannot know


def test_a_revocation_after_export_then_a_new_promotion_still_fails_verify(shipped):
    """The revoke is no longer the latest decision, but the locked verdict is no longer the one that counts."""
    _, out = export(shipped, *PROFILE)
    assert shipped("revoke", "faster", "--reason", "corrupts frames at 720p", actor="carol").exit_code == 0
    measure_and_promote(shipped, "faster", 1.8, 0.99)
    result = shipped("lock", "verify", str(out), "--bundles", str(shipped.bundles))
    assert result.exit_code == 3
    assert "field_mismatch: faster: verdict_event_id" in result.stderr


def test_a_new_identity_after_export_fails_verify(shipped):
    _, out = export(shipped, *PROFILE)
    changed = make_bundle(shipped.tmp / "v2", "fast", source="def replacement(x):\n    return x + 1\n")
    assert register(shipped, "fast", changed, new_identity=True).exit_code == 0
    problems = json.loads(shipped("lock", "verify", str(out), "--json").output)["problems"]
    assert [(p["artifact"], p["code"]) for p in problems] == [("fast", "identity_changed")]


def test_a_changed_claim_with_the_same_bundle_fails_verify(shipped):
    _, out = export(shipped, *PROFILE)
    same_bundle = shipped.bundles / "faster"
    moved = shipped("artifact", "register", "faster", "--workload", "wan", "--kind", "step_cache",
                    "--backend", "TORCH_SDPA", "--bundle", str(same_bundle), "--new-identity")
    assert moved.exit_code == 0, moved.output
    problems = json.loads(shipped("lock", "verify", str(out), "--json").output)["problems"]
    assert [(p["artifact"], p["code"]) for p in problems] == [("faster", "identity_changed")]
    assert "backend, identity" in problems[0]["detail"]


def test_another_registry_fails_the_chain_check(shipped, tmp_path_factory):
    _, out = export(shipped, *PROFILE)
    other_url = f"sqlite:///{tmp_path_factory.mktemp('other') / 'other.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", other_url, "init"]).exit_code == 0
    manifest = shipped.tmp / "wan.yaml"
    assert runner.invoke(main, ["--db", other_url, "workload", "declare", str(manifest)]).exit_code == 0
    result = runner.invoke(main, ["--db", other_url, "lock", "verify", str(out)])
    assert result.exit_code == 3 and "chain_mismatch" in result.stderr
