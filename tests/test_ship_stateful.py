"""Issue 20's shipping invariant under random lifecycles: whatever ships is promoted under the current contract.

A hypothesis state machine ships bundles of one workload through the CLI on a
real SQLite file: registers (and re-registers to earlier or other bytes),
imports evidence, promotes, revokes, re-declares the contract, re-judges,
and exports locks it keeps. Every few steps and at the end of each example
(after every step in one example: tests/stateful_checks.py):
(a) what `resolve` chooses, what the runtime (registry.runtime.resolve over
    the database) chooses and every entry of a fresh lock is promoted, under
    the workload's current contract version, for its current identity, and
    every lock field equals the registry's; online `lock verify` of that
    fresh lock finds nothing;
(b) every lock kept from an earlier step verifies online exactly when each
    of its entries still names the artifact's current verdict, promoted under
    the current contract, for the same bundle; otherwise it is refused.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from registry.bundles import Profile
from registry.cli.main import main
from registry.runtime import resolve as runtime_resolve
from ship_helpers import MANIFEST, evidence, make_bundle
from stateful_checks import CheckedEveryFewSteps, checked_after_every_step

ARTIFACTS = ("a", "b")
SOURCES = ("def replacement(x):\n    return ('one', x)\n", "def replacement(x):\n    return ('two', x)\n")
MIN_SSIM = ("0.98", "0.993")
PROFILE_ARGS = ("--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
PROFILE = Profile("sm90", "2.13.0", "12.8")


class Shipping(CheckedEveryFewSteps):
    @initialize()
    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ship-machine-"))
        self.url = f"sqlite:///{self.tmp / 'registry.db'}"
        self.runner = CliRunner()
        self.steps = 0
        self.kept: list[tuple[Path, dict]] = []
        self.ok("init")
        self.declare(MIN_SSIM[0])

    def release(self) -> None:
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def cli(self, *args: str):
        result = self.runner.invoke(main, ["--db", self.url, "--actor", "machine", *args])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        return result

    def ok(self, *args: str):
        result = self.cli(*args)
        assert result.exit_code == 0, (args, result.output)
        return result

    def declare(self, min_ssim: str) -> None:
        path = self.tmp / f"wan-{min_ssim}.yaml"
        path.write_text(MANIFEST.replace("min_ssim: 0.98", f"min_ssim: {min_ssim}"))
        self.version = json.loads(self.ok("workload", "declare", str(path), "--json").output)["contract_version"]

    def state(self, artifact: str) -> dict | None:
        result = self.cli("show", artifact, "--json")
        return json.loads(result.output) if result.exit_code == 0 else None

    # -- rules -------------------------------------------------------------------------------------

    @rule(artifact=st.sampled_from(ARTIFACTS), source=st.sampled_from(range(len(SOURCES))))
    def register(self, artifact: str, source: int) -> None:
        self.steps += 1
        directory = make_bundle(self.tmp / f"bundles-{self.steps}", artifact, source=SOURCES[source])
        self.ok("artifact", "register", artifact, "--workload", "wan", "--kind", "step_cache",
                "--bundle", str(directory))

    @rule(artifact=st.sampled_from(ARTIFACTS), ratio=st.sampled_from((1.05, 1.4, 1.9)),
          worst_ssim=st.sampled_from((0.99, 0.999)), source=st.sampled_from(range(len(SOURCES))))
    def measure_and_promote(self, artifact: str, ratio: float, worst_ssim: float, source: int) -> None:
        if self.state(artifact) is None:
            self.register(artifact, source)
        path = self.tmp / f"evidence-{artifact}.json"
        # Evidence names the bytes it measured (docs/gate.md, "Evidence that names no payload").
        document = {**evidence(artifact, ratio, worst_ssim), "payload_sha256": self.state(artifact)["payload_sha256"]}
        path.write_text(json.dumps(document))
        self.ok("evidence", "import", str(path))
        assert self.cli("promote", artifact).exit_code in (0, 3)

    @rule(artifact=st.sampled_from(ARTIFACTS))
    def revoke(self, artifact: str) -> None:
        state = self.state(artifact)
        if state is not None and state["decision"] in ("promoted", "rejected"):
            self.ok("revoke", artifact, "--reason", "machine")

    @rule(min_ssim=st.sampled_from(MIN_SSIM))
    def redeclare(self, min_ssim: str) -> None:
        self.declare(min_ssim)

    @rule()
    def rejudge(self) -> None:
        self.ok("rejudge", "wan")

    @rule()
    def keep_a_lock(self) -> None:
        self.steps += 1
        out = self.tmp / f"kept-{self.steps}.json"
        if self.cli("lock", "--workload", "wan", "--unsigned", "--out", str(out)).exit_code == 0:
            self.kept.append((out, json.loads(out.read_text())))

    # -- invariants --------------------------------------------------------------------------------

    def whole_checks(self) -> None:
        self.whatever_ships_is_promoted_under_the_current_contract()
        self.kept_locks_hold_exactly_while_their_entries_still_stand()

    def ships(self, artifact: str, version: int) -> dict:
        state = self.state(artifact)
        assert state["decision"] == "promoted" and state["contract_version"] == version, state
        return state

    def whatever_ships_is_promoted_under_the_current_contract(self) -> None:
        if not hasattr(self, "url"):
            return
        version = self.version
        resolved = json.loads(self.cli("resolve", "--workload", "wan", *PROFILE_ARGS, "--json").output)
        if resolved["match"] is not None:
            self.ships(resolved["match"]["artifact"], version)
        runtime = runtime_resolve("wan", PROFILE, database=self.url)
        assert (runtime.match and runtime.match.artifact) == (resolved["match"] and resolved["match"]["artifact"])
        fresh = self.tmp / "fresh.json"
        exported = self.cli("lock", "--workload", "wan", "--unsigned", "--out", str(fresh), "--force")
        if exported.exit_code == 3:
            assert resolved["match"] is None
            return
        assert exported.exit_code == 0, exported.output
        for entry in json.loads(fresh.read_text())["artifacts"]:
            state = self.ships(entry["artifact"], version)
            assert (entry["verdict_event_id"], entry["verdict_position"], entry["speedup"], entry["speedup_ci"],
                    entry["contract_version"], entry["bundle_sha256"], entry["identity"]["identity"]) == (
                state["verdict_event_id"], state["verdict_position"], state["speedup"], state["speedup_ci"],
                state["contract_version"], state["payload_sha256"], state["identity"])
        verified = self.cli("lock", "verify", str(fresh), "--json")
        assert verified.exit_code == 0 and json.loads(verified.output)["problems"] == [], verified.output

    def kept_locks_hold_exactly_while_their_entries_still_stand(self) -> None:
        if not hasattr(self, "url"):
            return
        version = self.version
        for path, document in self.kept:
            still = all(
                (state := self.state(e["artifact"])) is not None and state["decision"] == "promoted"
                and state["verdict_event_id"] == e["verdict_event_id"] and state["contract_version"] == version
                and state["payload_sha256"] == e["bundle_sha256"]
                for e in document["artifacts"])
            verified = self.cli("lock", "verify", str(path), "--json")
            assert verified.exit_code == (0 if still else 1), (still, verified.output)


Shipping.TestCase.settings = settings(max_examples=20, stateful_step_count=12, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestShipping = Shipping.TestCase
TestShippingCheckedAfterEveryStep = checked_after_every_step(Shipping, Shipping.TestCase.settings)
