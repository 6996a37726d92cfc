"""A reduced demo campaign (few runs) decides as the demo promises, on evidence that exists."""
from __future__ import annotations

import json

from click.testing import CliRunner

from registry.app import open_registry
from registry.cli.main import main


def test_reduced_demo_decides_as_promised(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["--db", url, "demo", "--runs", "2", "--warmup", "1", "--out", str(out),
                                       "--check", "--json"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output)
    decisions = {row["artifact"]: (row["decision"], row["rule"]) for row in outcome["rows"]}
    assert decisions["sdpa-attention"][0] in ("promoted", "rejected")
    assert decisions["step-cache"][0] in ("promoted", "rejected")
    assert decisions["lossy-skip"] == ("quarantined", "fidelity.failed")
    assert decisions["flash-claimed-fallback"][0] == "quarantined"
    assert decisions["modln-triton"] == ("held", "speed.interpreter")
    assert outcome["problems"] == []

    store = open_registry(url).store
    verdicts = [e for e in store.read_all() if e.type == "VerdictRendered"]
    assert len(verdicts) == 5
    for verdict in verdicts:
        ids = verdict.payload["verdict"]["evidence_ids"]
        assert ids, verdict.payload["artifact"]
        for event_id in ids:
            evidence = store.get(event_id)
            assert evidence is not None and evidence.position < verdict.position
            assert evidence.payload["artifact"] == verdict.payload["artifact"]
    assert store.verify().intact
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html
    assert {p.name for p in out.glob("*.png")} == {"sdpa-attention.png", "step-cache.png", "lossy-skip.png",
                                                    "flash-claimed-fallback.png"}
    verified = CliRunner().invoke(main, ["--db", url, "replay", "--verify"])
    assert verified.exit_code == 0, verified.output

    # Every candidate ships as a verified bundle, and the demo ends by saying what would ship here and why not the rest.
    from registry.bundles import verify_directory

    for name in decisions:
        state = json.loads(CliRunner().invoke(main, ["--db", url, "show", name, "--json"]).output)
        assert verify_directory(out / "bundles" / name).digest == state["payload_sha256"]
    shipped = {found["workload"]: found for found in outcome["resolve"]}
    video = {o["artifact"]: o["code"] for o in shipped["tiny-dit-t2v"]["others"]}
    assert video["lossy-skip"] == video["flash-claimed-fallback"] == "not_promoted"
    promoted = {name for name, (decision, _) in decisions.items() if decision == "promoted"}
    if promoted:
        assert shipped["tiny-dit-t2v"]["match"]["artifact"] in promoted
    kernel = {o["artifact"]: o["code"] for o in shipped["tiny-dit-modln-op"]["others"]}
    if decisions["modln-triton"][0] != "promoted":
        assert kernel == {"modln-triton": "not_promoted"} and shipped["tiny-dit-modln-op"]["match"] is None
