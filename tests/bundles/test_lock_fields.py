"""Lock files: online `lock verify` compares every field of an entry a runtime reads with the registry.

A lock entry copied from another workload's lock, an edited speedup, a
verdict id pointing at an earlier held verdict, or any other edited field is
refused, naming the field; an entry promoted under an older contract than the
workload's current one is refused as `stale_contract`.
"""
from __future__ import annotations

import json

import pytest

from ship_helpers import MANIFEST, declare, make_bundle, measure_and_promote, ship


@pytest.fixture
def cli(registry_cli):
    declare(registry_cli)
    return registry_cli


def export(cli, workload: str = "wan", name: str = "registry.lock.json"):
    out = cli.tmp / name
    result = cli("lock", "--workload", workload, "--unsigned", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, json.loads(out.read_text())


def verify(cli, path, *args):
    result = cli("lock", "verify", str(path), "--json", *args)
    assert result.exit_code in (0, 3), result.output
    return result.exit_code, json.loads(result.output)["problems"] if result.output.strip() else result.stderr


def rewrite(path, document) -> None:
    path.write_text(json.dumps(document))


def field_problems(problems) -> list[tuple[str, str]]:
    return [(p["code"], p["detail"].split(":")[0]) for p in problems]


def test_an_honest_lock_holds_online(cli):
    ship(cli, cli.tmp / "bundles", "fast", 1.3)
    out, _ = export(cli)
    assert verify(cli, out) == (0, [])


def test_an_edited_speedup_is_refused_naming_the_field(cli):
    ship(cli, cli.tmp / "bundles", "slow", 1.3)
    ship(cli, cli.tmp / "bundles", "quick", 1.6)
    out, document = export(cli)
    entry = next(e for e in document["artifacts"] if e["artifact"] == "slow")
    assert round(entry["speedup"], 1) == 1.3
    entry["speedup"] = 99.0  # the runtime would now prefer the slower artifact
    rewrite(out, document)
    status, problems = verify(cli, out)
    assert status == 3 and [(p["artifact"], p["code"]) for p in problems] == [("slow", "field_mismatch")]
    assert problems[0]["detail"].startswith("speedup: the lock says 99.0; the registry says 1.3")


@pytest.mark.parametrize("field, value", [
    ("speedup_ci", [0.5, 99.0]),
    ("contract_version", 7),
    ("verdict_position", 1),
])
def test_every_other_entry_field_is_compared(cli, field, value):
    ship(cli, cli.tmp / "bundles", "fast", 1.3)
    out, document = export(cli)
    document["artifacts"][0][field] = value
    rewrite(out, document)
    status, problems = verify(cli, out)
    assert status == 3 and field_problems(problems) == [("field_mismatch", field)]


def test_a_verdict_id_pointing_at_an_earlier_held_verdict_is_refused(cli):
    directory = make_bundle(cli.tmp / "bundles", "patient")
    assert cli("artifact", "register", "patient", "--workload", "wan", "--kind", "step_cache",
               "--bundle", str(directory)).exit_code == 0
    held = cli("promote", "patient", "--json")
    assert held.exit_code == 3 and json.loads(held.output)["decision"] == "held"
    held_verdict = json.loads(cli("show", "patient", "--json").output)["verdict_event_id"]
    assert measure_and_promote(cli, "patient", 1.5) == "promoted"
    out, document = export(cli)
    entry = document["artifacts"][0]
    assert entry["verdict_event_id"] != held_verdict
    entry["verdict_event_id"] = held_verdict
    rewrite(out, document)
    status, problems = verify(cli, out)
    assert status == 3
    assert ("field_mismatch", "verdict_event_id") in field_problems(problems)
    detail = next(p["detail"] for p in problems if p["detail"].startswith("verdict_event_id"))
    assert "the locked verdict decided held" in detail


def declare_loose(cli) -> None:
    """A second workload with a looser contract (min SSIM 0.5)."""
    path = cli.tmp / "loose.yaml"
    path.write_text(MANIFEST.replace("workload: wan", "workload: loose").replace("min_ssim: 0.98", "min_ssim: 0.5"))
    assert cli("workload", "declare", str(path)).exit_code == 0


def test_an_entry_copied_from_another_workloads_lock_is_refused(cli):
    declare_loose(cli)
    ship(cli, cli.tmp / "bundles", "strict", 1.2)
    directory = make_bundle(cli.tmp / "bundles", "sloppy")
    assert cli("artifact", "register", "sloppy", "--workload", "loose", "--kind", "step_cache",
               "--bundle", str(directory)).exit_code == 0
    assert measure_and_promote(cli, "sloppy", 2.0, worst_ssim=0.6) == "promoted"  # passes only the loose contract
    wan_out, wan = export(cli)
    _, loose = export(cli, "loose", "loose.lock.json")
    copied = loose["artifacts"][0]
    wan["artifacts"].insert(0, copied)
    rewrite(wan_out, wan)
    refused = cli("lock", "verify", str(wan_out))  # as copied: refused offline, reading the file
    assert refused.exit_code == 1 and "an entry of another workload's lock" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    copied["identity"]["workload"] = "wan"  # disguised: only the registry can tell
    rewrite(wan_out, wan)
    status, problems = verify(cli, wan_out)
    assert status == 3 and [(p["artifact"], p["code"]) for p in problems] == [("sloppy", "field_mismatch")]
    assert problems[0]["detail"].startswith("workload: the lock is for 'wan'; the registry has sloppy in workload "
                                            "'loose'")


def test_a_lock_promoted_under_an_older_contract_is_stale_online(cli):
    ship(cli, cli.tmp / "bundles", "veteran", 1.5)
    out, _ = export(cli)
    newer = cli.tmp / "wan-v2.yaml"
    newer.write_text((cli.tmp / "wan.yaml").read_text().replace("min_ssim: 0.98", "min_ssim: 0.985"))
    assert cli("workload", "declare", str(newer)).exit_code == 0
    status, problems = verify(cli, out)
    assert status == 3 and [(p["artifact"], p["code"]) for p in problems] == [("veteran", "stale_contract")]
    assert cli("rejudge", "wan").exit_code == 0
    status, problems = verify(cli, out)  # judged again: a new verdict, so this lock names an old one
    assert status == 3 and field_problems(problems)[0] == ("field_mismatch", "verdict_event_id")
    fresh, _ = export(cli, name="fresh.lock.json")
    assert verify(cli, fresh) == (0, [])


def test_a_lock_naming_a_field_twice_is_refused(cli):
    """JSON readers disagree on which of two equal keys counts; a lock that could be read two ways is refused."""
    ship(cli, cli.tmp / "bundles", "fast", 1.3)
    out, _ = export(cli)
    text = out.read_text()
    out.write_text(text.replace('"speedup": ', '"speedup": 99.0, "speedup": ', 1))
    refused = cli("lock", "verify", str(out))
    assert refused.exit_code == 1 and "duplicate key 'speedup'" in refused.stderr


def test_an_approval_under_an_older_contract_does_not_ship(cli):
    """The advisory tier ships only through a person's approval; that approval answered the contract of its day."""
    path = cli.tmp / "adv.yaml"
    path.write_text(MANIFEST.replace("workload: wan", "workload: adv").replace("tier: perceptual", "tier: advisory"))
    assert cli("workload", "declare", str(path)).exit_code == 0
    directory = make_bundle(cli.tmp / "bundles", "advised")
    assert cli("artifact", "register", "advised", "--workload", "adv", "--kind", "step_cache",
               "--bundle", str(directory)).exit_code == 0
    assert measure_and_promote(cli, "advised", 1.5) == "recorded"
    assert cli("approve", "advised", "--reason", "looked at the frames", actor="dana").exit_code == 0
    query = ("resolve", "--workload", "adv", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8", "--json")
    assert json.loads(cli(*query).output)["match"]["artifact"] == "advised"
    path.write_text(path.read_text().replace("min_ssim: 0.98", "min_ssim: 0.97"))
    assert cli("workload", "declare", str(path)).exit_code == 0
    answer = json.loads(cli(*query).output)
    assert answer["match"] is None and [o["code"] for o in answer["others"]] == ["stale_contract"]
    assert cli("rejudge", "adv").exit_code == 0  # judged again: recorded, waiting for a person again
    assert json.loads(cli("show", "advised", "--json").output)["decision"] == "recorded"
