"""A new user's path, as one test through the CLI: a hand-written workload and a kernel registered with
`--payload`, evidence written by hand, promoted, told it cannot ship and how to, made into a bundle, registered
as a new identity, its evidence imported again under the bundle's digest, promoted, locked with a signature and
checked by `lock verify`. Every command it runs is one the README or docs/ name (`COMMANDS_RUN` is checked
against them), and every digest it types back was printed in full by an earlier command.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from registry.cli.main import main
from newcomer_helpers import KERNEL, WINDOW, WORKLOAD, evidence
from paths import ROOT

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

DIGEST = re.compile(r"\b[0-9a-f]{64}\b")
# Commands whose first argument names a subcommand (`lock` alone exports; `lock verify` checks).
GROUPS = ("workload", "artifact", "bundle", "evidence", "lock", "keys", "frames")


class User:
    """Runs `registry` as a user would, and keeps the command names it ran."""

    def __init__(self, folder: Path):
        self.folder, self.url, self.ran = folder, f"sqlite:///{folder / 'registry.db'}", []
        self.runner = CliRunner()

    def __call__(self, *args: str, status: int = 0):
        group = args[0] in GROUPS and len(args) > 1 and not args[1].startswith("-")
        self.ran.append(f"{args[0]} {args[1]}" if group else args[0])
        result = self.runner.invoke(main, ["--db", self.url, *args])
        assert result.exit_code == status, (args, result.output)
        return result

    def write(self, name: str, text: str) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return str(path)


def test_from_a_hand_written_workload_and_payload_to_a_signed_lock_that_verifies(tmp_path):
    user = User(tmp_path)
    user("init")
    user("workload", "declare", user.write("my-wan-modln.yaml", WORKLOAD))

    # A kernel registered by its payload: it can be judged, and the registry says it cannot ship and how to.
    registered = user("artifact", "register", "my-modln", "--workload", "my-wan-modln", "--kind", "fused_kernel",
                      "--payload", user.write("kernel.py", KERNEL)).output
    [payload_digest] = DIGEST.findall(registered)  # printed in full: the user types it into the document
    assert "never ships" in registered and "registry bundle create" in registered
    user("evidence", "import", user.write("evidence-1.json", json.dumps(evidence(payload_digest))))
    assert json.loads(user("promote", "my-modln", "--json").output)["decision"] == "promoted"

    # lock names the promoted artifact it leaves out, and why; nothing is written.
    nothing = user("lock", "--workload", "my-wan-modln", "--unsigned", "--out", str(tmp_path / "early.lock.json"),
                   status=3)
    assert "left out: my-modln (no_bundle)" in nothing.stderr and "registry bundle create" in nothing.stderr
    assert not (tmp_path / "early.lock.json").exists()
    resolved = user("resolve", "--workload", "my-wan-modln", "--arch", "sm90", "--torch", "2.13.0", status=3)
    assert "promoted but left out: my-modln (no_bundle)" in resolved.output

    # The bundle, made from the CLI; an error names the field.
    bundle = tmp_path / "bundles" / "my-modln"
    user.write("bundles/my-modln/kernel.py", KERNEL)
    missing = user("bundle", "create", str(bundle), "--entry", "kernel.py:fused_modln", "--replaces",
                   "op:modulated_layernorm", status=1)
    assert missing.stderr.startswith("error: compatibility: not declared; give --compatibility FILE.json")
    made = user("bundle", "create", str(bundle), "--entry", "kernel.py:fused_modln", "--replaces",
                "op:modulated_layernorm", "--compatibility", user.write("window.json", json.dumps(WINDOW))).output
    [bundle_digest] = DIGEST.findall(made)

    # The same id with other bytes is a new identity: asked for in so many words, then registered.
    asked = user("artifact", "register", "my-modln", "--workload", "my-wan-modln", "--kind", "fused_kernel",
                 "--bundle", str(bundle), status=1)
    assert "--new-identity" in asked.stderr and "would stop counting" in asked.stderr
    assert payload_digest in asked.stderr and bundle_digest in asked.stderr
    again = user("artifact", "register", "my-modln", "--workload", "my-wan-modln", "--kind", "fused_kernel",
                 "--bundle", str(bundle), "--new-identity").output
    assert bundle_digest in again and "never ships" not in again
    assert json.loads(user("show", "my-modln", "--json").output)["decision"] == "registered"

    # Its evidence again, under the bundle's digest; promoted; locked, signed; the lock verifies.
    user("evidence", "import", user.write("evidence-2.json", json.dumps(evidence(bundle_digest))))
    assert json.loads(user("promote", "my-modln", "--json").output)["decision"] == "promoted"
    user("keys", "init", str(tmp_path / "signing.key"))
    locked = user("lock", "--workload", "my-wan-modln", "--key", str(tmp_path / "signing.key"), "--out",
                  str(tmp_path / "registry.lock.json")).output
    assert f"my-modln: bundle {bundle_digest}" in locked
    verified = user("lock", "verify", str(tmp_path / "registry.lock.json"), "--key", str(tmp_path / "signing.key.pub"),
                    "--bundles", str(tmp_path / "bundles")).output
    assert verified.startswith("lock holds: 1 artifact(s) of my-wan-modln; checked lock file, signature and expiry, "
                               "bundles, registry")
    ships = user("resolve", "--workload", "my-wan-modln", "--arch", "sm90", "--torch", "2.13.0", "--cuda", "12.8",
                 "--triton", "3.5.0").output
    assert "ships my-modln" in ships and bundle_digest in ships

    text = "\n".join(document.read_text(encoding="utf-8") for document in DOCUMENTS)
    undocumented = sorted({name for name in user.ran if not re.search(
        r"registry(?: --?[a-z-]+(?:[ =]\S+)?)* " + re.escape(name) + r"(?![\w-])", text)})
    assert undocumented == [], f"commands the docs never name: {undocumented}"
