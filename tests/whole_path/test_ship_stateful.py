"""The shipping invariant under random lifecycles: whatever ships is promoted under the current contract.

A hypothesis state machine ships bundles of one workload through the CLI on a
real SQLite file: registers (and re-registers to earlier or other bytes),
imports evidence, promotes, revokes, re-declares the contract, re-judges,
and exports locks it keeps. At the end of each example (after every step
in one example: tests/support/stateful_checks.py):
(a) what `resolve` chooses, what the runtime (registry.runtime.resolve over
    the database) chooses and every entry of a fresh lock is promoted, under
    the workload's current contract version, for its current identity, and
    every lock field equals the registry's; online `lock verify` of that
    fresh lock finds nothing;
(b) every lock kept from an earlier step verifies online exactly when each
    of its entries still names the artifact's current verdict, promoted under
    the current contract, for the same bundle; otherwise it is refused.

Hostile steps, each checking its own invariant as it runs (no
whole-log work per step): a link planted at an output name (nothing outside
the named output is changed), a refresh of an edited signed lock (nothing is
signed that the registry did not decide), a deleted or dropped read-model
row or table, a deleted speed record or its head, a row deleted among a
workload's (no decision is made on a row that does not match its log),
and undecodable or look-alike names (refused, nothing appended).
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from registry.bundles import Profile
from registry.cli.main import main
from registry.projections.read_models import FINAL
from registry.runtime import resolve as runtime_resolve
from ship_helpers import MANIFEST, evidence, make_bundle
from stateful_checks import CheckedAtTheEnd, CopiedStart, checked_after_every_step

ARTIFACTS = ("a", "b")
SOURCES = ("def replacement(x):\n    return ('one', x)\n", "def replacement(x):\n    return ('two', x)\n")
MIN_SSIM = ("0.98", "0.993")
PROFILE_ARGS = ("--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8")
PROFILE = Profile("sm90", "2.13.0", "12.8")


class Shipping(CheckedAtTheEnd):
    START = CopiedStart()  # init, a workload, a signing key

    @initialize()
    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ship-machine-"))
        self.url = f"sqlite:///{self.tmp / 'registry.db'}"
        self.runner = CliRunner()
        self.steps = 0
        self.kept: list[tuple[Path, dict]] = []
        self.key = self.tmp / "signing.key"
        self.__dict__.update(self.START.start(self.tmp, self.start_registry))

    def start_registry(self) -> dict:
        self.ok("init")
        self.declare(MIN_SSIM[0])
        self.ok("keys", "init", str(self.key))
        return {"version": self.version}

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
                "--bundle", str(directory), "--new-identity")

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

    # -- hostile steps -----------------------------------------------------------------------------

    def files(self) -> dict[str, str]:
        """Every file under the machine's folder, by path, with its digest (a link by its target): the database
        and SQLite's -wal and -shm files beside it too. They hold still between commands because every command
        closes every connection it opened before it returns (the last to close removes the -wal and -shm), and
        so does this machine (`closing`: a sqlite3 connection left to the garbage collector would close, and
        change those files, at a moment nobody chose)."""
        found = {}
        for path in sorted(self.tmp.rglob("*")):
            if path.is_symlink():
                found[str(path)] = "link:" + str(path.readlink())
            elif path.is_file():
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        return found

    def events(self) -> int:
        with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn, conn:
            return conn.execute("SELECT count(*) FROM events").fetchone()[0]

    @rule(command=st.sampled_from(("lock", "attest", "report")), victim=st.sampled_from(("registry", "key")))
    def plant_a_link_at_an_output(self, command: str, victim: str) -> None:
        self.steps += 1
        out = self.tmp / f"planted-{self.steps}.out"
        out.symlink_to(self.tmp / ("registry.db" if victim == "registry" else "signing.key"))
        args = {"lock": ("lock", "--workload", "wan", "--key", str(self.key)),
                "attest": ("attest", ARTIFACTS[0], "--key", str(self.key)),
                "report": ("report", "--format", "json")}[command]
        before = self.files()
        result = self.cli(*args, "--out", str(out), "--force")
        assert result.exit_code == 1 and "symbolic link" in result.stderr, result.output
        assert self.files() == before  # nothing outside the named output is changed, the link included

    @rule(edit=st.sampled_from(("profile removed", "entry pasted", "entry dropped")))
    def refresh_an_edited_lock(self, edit: str) -> None:
        import base64

        self.steps += 1
        signed = self.tmp / f"signed-{self.steps}.json"
        if self.cli("lock", "--workload", "wan", *PROFILE_ARGS, "--key", str(self.key),
                    "--out", str(signed)).exit_code != 0:
            return
        envelope = json.loads(signed.read_text())
        document = json.loads(base64.b64decode(envelope["payload"]))
        if edit == "profile removed":
            document.pop("profile", None)
        elif edit == "entry pasted":
            document["artifacts"].append({**document["artifacts"][0], "artifact": "pasted"})
        else:
            document["artifacts"] = []
        forged = self.tmp / f"forged-{self.steps}.json"
        forged.write_text(json.dumps({**envelope, "payload": base64.b64encode(json.dumps(document).encode()).decode()}))
        out = self.tmp / f"refreshed-{self.steps}.json"
        refused = self.cli("lock", "--refresh", str(forged), "--key", str(self.key), "--out", str(out))
        assert refused.exit_code == 1 and not out.exists(), refused.output  # nothing signed it did not decide
        honest = self.cli("lock", "--refresh", str(signed), "--key", str(self.key), "--out", str(out), "--json")
        assert honest.exit_code == 0, honest.output
        refreshed = json.loads(honest.stdout)  # the signed envelope, as written: its payload is the lock
        for entry in json.loads(base64.b64decode(refreshed["payload"]))["artifacts"]:
            assert self.ships(entry["artifact"], self.version)["verdict_event_id"] == entry["verdict_event_id"]

    @rule(artifact=st.sampled_from(ARTIFACTS), damage=st.sampled_from((
        "DELETE FROM projection_artifacts WHERE artifact = '{a}'", "DELETE FROM projection_payloads",
        "UPDATE projection_artifacts SET row_hash = '0' WHERE artifact = '{a}'", "DROP TABLE projection_verdicts",
        "DROP TABLE projection_checkpoint")))
    def damage_a_read_model(self, artifact: str, damage: str) -> None:
        if self.state(artifact) is None:
            return  # caught up, and something to damage
        with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(damage.format(a=artifact))
        before = self.events()
        # revoke reads no payload index: with only the index damaged it decides, rightly, and appends.
        revoke = () if "projection_payloads" in damage else (("revoke", artifact, "--reason", "machine"),)
        for decision in (("promote", artifact), *revoke):
            result = self.cli(*decision)
            # The payload index is read only by a promote that decides (not by a standing verdict, nor revoke).
            if "projection_payloads" not in damage:
                assert result.exit_code == 1 and "registry replay" in result.stderr, (damage, result.output)
            assert result.exit_code != 70 and self.events() == before, (damage, result.output)
        self.ok("replay")

    @rule(artifact=st.sampled_from(ARTIFACTS), damage=st.sampled_from((
        "its speed record deleted", "its speed record's head deleted", "the other artifact's row deleted")))
    def damage_a_shared_or_listed_row(self, artifact: str, damage: str) -> None:
        """Rows no stream of the decision's own vouches for: a speed record, a row among the workload's."""
        state = self.state(artifact)
        if state is None:
            return
        other = next(name for name in ARTIFACTS if name != artifact)
        record = f"wan:{state['payload_sha256']}"
        out = self.tmp / f"listed-{self.steps}.json"
        with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as conn, conn:
            if damage == "the other artifact's row deleted":
                decisions = [("resolve", "--workload", "wan", *PROFILE_ARGS),
                             ("lock", "--workload", "wan", "--unsigned", "--out", str(out))]
                deleted = conn.execute("DELETE FROM projection_artifacts WHERE artifact = ?", (other,)).rowcount
            else:
                if state["decision"] in FINAL:
                    return  # promote returns a standing verdict without reading the record
                decisions = [("promote", artifact)]
                table = "projection_speed_records" if damage == "its speed record deleted" else "projection_record_heads"
                deleted = conn.execute(f"DELETE FROM {table} WHERE record = ?", (record,)).rowcount
        if not deleted:
            return  # nothing there to damage: the rule's invariant is about rows that were
        before = self.events()
        for decision in decisions:
            result = self.cli(*decision)
            assert result.exit_code == 1 and "registry replay" in result.stderr, (damage, decision, result.output)
        assert self.events() == before and not out.exists()  # no decision on a row that does not match its log
        self.ok("replay")

    @rule(name=st.sampled_from(("bad\udcff", "\u0430", "a\ufe0f", "a\u3164", "\uff41", "rn", "\u217f")))
    def register_an_undecodable_or_look_alike_name(self, name: str) -> None:
        if name in ("\u0430", "\uff41") and self.state("a") is None:
            return  # a look-alike is refused only beside the id it imitates
        self.steps += 1
        directory = make_bundle(self.tmp / f"bundles-{self.steps}", "x")
        if name in ("rn", "\u217f"):  # look-alikes of `m` of more than one character: `m` is there first
            self.ok("artifact", "register", "m", "--workload", "wan", "--kind", "step_cache", "--bundle", str(directory))
        before = self.events()
        result = self.cli("artifact", "register", name, "--workload", "wan", "--kind", "step_cache",
                          "--bundle", str(directory))
        assert result.exit_code == 1 and len(result.stderr.strip().splitlines()) == 1, result.output
        assert self.events() == before

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
            assert verified.exit_code == (0 if still else 3), (still, verified.output)


Shipping.TestCase.settings = settings(max_examples=20, stateful_step_count=12, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])
TestShipping = Shipping.TestCase
TestShippingCheckedAfterEveryStep = checked_after_every_step(Shipping, Shipping.TestCase.settings)
