"""What enters through the CLI: repeated runs, names, frame files and kernel entry points, on real SQLite files."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frame_helpers import MANIFEST as CLIP_MANIFEST
from frame_helpers import clip_registry, moving_disc
from store_helpers import opened
from cli_helpers import head, one_line_refusal


@pytest.fixture
def cli(registry_cli, tmp_path, monkeypatch):
    """A registry with workload `clip`, artifact `cache-v1` and frame set `moving-disc` (from reference.npz)."""
    clip_registry(registry_cli, tmp_path, monkeypatch)
    assert registry_cli("frames", "register", "moving-disc", str(tmp_path / "reference.npz"), "--seed", "7").exit_code == 0
    return registry_cli


def execution_document(cli, run: str | None = "run-1"):
    path = cli.tmp / "execution.json"
    document = {"format": "registry.evidence/1", "artifact": "cache-v1",
                "evidence": [{"kind": "execution", "candidate_calls": 8, "fallbacks": 0}]}
    if run is not None:
        document["run"] = run
    path.write_text(json.dumps(document))
    return path


# -- the same run twice records nothing new --------------------------------------------------------

def test_importing_the_same_run_twice_says_nothing_new_was_recorded(cli):
    document = str(execution_document(cli))
    first = json.loads(cli("evidence", "import", document, "--json").output)
    assert first["appended"] is True and first["positions"] == [head(cli)]
    before = head(cli)
    again = cli("evidence", "import", document, "--json")
    assert again.exit_code == 0 and json.loads(again.output) == {**first, "appended": False}
    said = cli("evidence", "import", document)
    assert said.exit_code == 0 and said.output.startswith("nothing new recorded") and "recorded 1" not in said.output
    assert head(cli) == before


def test_measuring_the_same_frames_run_twice_says_nothing_new_was_recorded(cli):
    np.save(cli.tmp / "candidate.npy", moving_disc())
    args = ["evidence", "frames", "cache-v1", "--reference", "moving-disc", "--candidate", str(cli.tmp / "candidate.npy"),
            "--run", "frames-1"]
    first = json.loads(cli(*args, "--json").output)
    before = head(cli)
    assert first["appended"] is True and first["position"] == before
    again = json.loads(cli(*args, "--json").output)
    assert again["appended"] is False and again["position"] == first["position"]
    said = cli(*args)
    assert said.exit_code == 0 and said.output.startswith("nothing new recorded")
    assert head(cli) == before


# -- one naming rule for every id ------------------------------------------------------------------

def test_an_empty_run_id_is_refused_before_measuring(cli):
    np.save(cli.tmp / "candidate.npy", moving_disc())
    before = head(cli)
    refused = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc",
                  "--candidate", str(cli.tmp / "candidate.npy"), "--run", "")
    assert "--run '' is empty" in one_line_refusal(refused)
    document = execution_document(cli, run="")
    assert "run: '' is empty" in one_line_refusal(cli("evidence", "import", str(document)))
    assert head(cli) == before


def test_an_actor_with_a_line_break_is_refused_and_nothing_is_created(cli, tmp_path):
    before = head(cli)
    refused = cli("artifact", "register", "other", "--workload", "clip", "--kind", "module", actor="bob\nalice")
    assert "--actor 'bob\\nalice' contains a line break" in one_line_refusal(refused)
    assert head(cli) == before
    from click.testing import CliRunner

    from registry.cli.main import main

    fresh = tmp_path / "fresh.db"
    refused = CliRunner().invoke(main, ["--db", f"sqlite:///{fresh}", "--actor", "bob\nalice", "init"])
    assert "contains a line break" in one_line_refusal(refused) and not fresh.exists()


def test_a_negative_seed_is_refused(cli):
    before = head(cli)
    refused = cli("frames", "register", "other-set", str(cli.tmp / "reference.npz"), "--seed", "-1")
    assert "--seed -1 is outside [0, 2**64 - 1]" in one_line_refusal(refused)
    assert head(cli) == before


def test_an_id_over_the_limit_is_refused_in_the_users_terms(cli):
    refused = one_line_refusal(cli("artifact", "register", "a" * 300, "--workload", "clip", "--kind", "module"))
    assert "ARTIFACT_ID" in refused and "is 300 characters long" in refused and "stream name" not in refused
    manifest = cli.tmp / "long.yaml"
    manifest.write_text(CLIP_MANIFEST.replace("workload: clip", "workload: " + "w" * 150))
    refused = one_line_refusal(cli("workload", "declare", str(manifest)))
    assert "workload: 'wwww" in refused and "is 150 characters long" in refused


@given(name=st.text(alphabet=st.characters(codec="utf-8"), max_size=6)
       | st.sampled_from(["a:b", "a b", "a\nb", "-a", "[/bad]", "a[/bad]", "x" * 129, "x" * 128, "é", "a\u200bb"]))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_every_entry_point_applies_the_same_naming_rule(cli, name):
    """An artifact id is accepted or refused alike by the CLI, an evidence document and the app layer."""
    from registry.formats.evidence.document import parse_document
    from registry.formats.evidence.errors import EvidenceError
    from registry.formats.names import name_problem

    valid = name_problem(name) is None
    registered = cli("artifact", "register", "--workload", "clip", "--kind", "module", "--", name)
    assert registered.exit_code == (0 if valid else 1), registered.output
    try:
        parse_document({"format": "registry.evidence/1", "artifact": name, "run": name,
                        "evidence": [{"kind": "execution", "candidate_calls": 1, "fallbacks": 0}]})
        parsed = True
    except EvidenceError:
        parsed = False
    assert parsed == valid
    frames = cli("frames", "register", "--seed", "7", "--", name, str(cli.tmp / "reference.npz"))
    # A valid new name registers (or finds the pixels under that name already); an invalid one never does.
    assert (frames.exit_code == 0) == valid or (valid and "other content" in frames.output), frames.output


# -- kernel entry points ---------------------------------------------------------------------------

@pytest.mark.parametrize("entry,message", [
    ("builtins:print", "module 'builtins' is not part of the registry package"),
    ("os:system", "module 'os' is not part of the registry package"),
    ("torch:add", "a candidate is given as its file"),
    ("registry.kernels.no_such_module:f", "the registry package has no module"),
    ("registry.kernels.modln:softmax", "defines no top-level function 'softmax'"),
    ("a b:c", "must have the form 'path/to/kernel.py:function'"),
    ("{tmp}/missing.py:f", "cannot read kernel source"),
    ("{tmp}/link.py:f", "cannot read kernel source"),
    ("{tmp}/folder.py:f", "a directory, not a regular file"),
    ("{tmp}/not_python.py:f", "not Python source"),
    ("{tmp}/kernel.py:not_defined", "defines no top-level function 'not_defined'"),
    ("{tmp}/kernel.py:1f", "is not a Python function name"),
])
def test_entries_that_are_not_kernels_are_refused(cli, entry, message):
    (cli.tmp / "kernel.py").write_text("def f(x, scale, shift):\n    return x\n")
    (cli.tmp / "link.py").symlink_to(cli.tmp / "kernel.py")  # a link in place of the candidate file
    (cli.tmp / "folder.py").mkdir()
    (cli.tmp / "not_python.py").write_text("def f(:\n")
    before = head(cli)
    refused = cli("artifact", "register", "kern", "--workload", "clip", "--kind", "fused_kernel",
                  "--op", "modulated_layernorm", "--entry", entry.format(tmp=cli.tmp))
    assert message in one_line_refusal(refused)
    assert head(cli) == before


def test_a_candidate_file_swapped_or_relinked_after_registration_is_refused_before_anything_runs(cli):
    """The evaluation reads the file once and must find the registered text: a file rewritten, or a link
    repointed, between registration and evaluation is measured under no identity."""
    honest, cheat = cli.tmp / "honest.py", cli.tmp / "cheat.py"
    honest.write_text("def f(x, scale, shift):\n    return x\n")
    cheat.write_text("def f(x, scale, shift):\n    return x * 0\n")
    assert cli("artifact", "register", "kern", "--workload", "clip", "--kind", "fused_kernel",
               "--op", "modulated_layernorm", "--entry", f"{honest}:f").exit_code == 0
    before = head(cli)
    honest.unlink()
    honest.symlink_to(cheat)
    assert "cannot read kernel source" in one_line_refusal(cli("evaluate", "kern", "--runs", "2"))
    honest.unlink()
    honest.write_text(cheat.read_text())
    assert "no longer holds the candidate registered" in one_line_refusal(cli("evaluate", "kern", "--runs", "2"))
    assert head(cli) == before
    both = cli("artifact", "register", "kern2", "--workload", "clip", "--kind", "fused_kernel", "--op",
               "modulated_layernorm", "--entry", f"{cheat}:f", "--payload", str(cheat))
    assert "a candidate file entry is its own payload" in one_line_refusal(both)


def test_a_candidate_file_is_registered_by_its_text_without_being_run_or_torch_imported(tmp_path):
    """Registration hashes the file as text: a candidate whose top level would leave a mark leaves none,
    no torch is imported, and the entry is stored with the file's absolute path. Runs the CLI in a
    fresh interpreter (about 1 s) because this test process has imported torch long ago."""
    marker = tmp_path / "ran"
    candidate = tmp_path / "kernel.py"
    candidate.write_text(f"open({str(marker)!r}, 'w').close()\n\ndef fused(x, scale, shift):\n    return x\n")
    (tmp_path / "clip.yaml").write_text("workload: clip\nparity: {policy: byte_equal}\n")
    sqlite_url = f"sqlite:///{tmp_path / 'fresh.db'}"
    probe = (
        "import sys; from registry.cli.main import main\n"
        "for args in (['init'], ['workload', 'declare', 'clip.yaml'], ['artifact', 'register', 'kern',"
        " '--workload', 'clip', '--kind', 'fused_kernel', '--op', 'modulated_layernorm', '--entry',"
        " 'kernel.py:fused']):\n"
        f"    try: main(['--db', {sqlite_url!r}, *args])\n"
        "    except SystemExit as exc: assert not exc.code, exc.code\n"
        "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert not marker.exists()
    (registered,) = opened(sqlite_url).store.read_stream("artifact:kern")
    assert registered.payload["entry"] == f"{candidate}:fused"


# -- messages in the user's terms: the option, not the parameter behind it ---------------------------

def test_option_errors_name_the_option(cli):
    np.save(cli.tmp / "candidate.npy", moving_disc())
    bad_digest = cli("evidence", "frames", "cache-v1", "--reference", "moving-disc",
                     "--candidate", str(cli.tmp / "candidate.npy"), "--lpips-sha256", "7be5be79")
    assert "--lpips-sha256 must be 64 hex digits" in one_line_refusal(bad_digest)
    assert cli("artifact", "register", "modln", "--workload", "clip", "--kind", "fused_kernel",
               "--op", "modulated_layernorm", "--entry", "registry.kernels.modln:modulated_layernorm_triton").exit_code == 0
    if not torch_has_cuda():
        refused = one_line_refusal(cli("evaluate", "modln", "--corpus", "gpu"))
        assert "--corpus cpu" in refused and "corpus='cpu'" not in refused


def torch_has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()
