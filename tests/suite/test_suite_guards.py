"""tests/conftest.py's guards, run on a small suite of their own in a child pytest; and the suite's size.

A test that leaks torch's thread count or an environment variable fails and
the state is put back; every run ends with a summary of what was skipped and
why, in parallel runs too; with REGISTRY_TEST_STRICT=1 a skip fails the run
unless its test is marked `device`. Making the suite faster must not make it
smaller: the count of tests may not fall below FEWEST_TESTS.
"""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from limits import HANG_GUARD_S
from paths import TESTS
from process_forks import ProcessForks

CONFTEST = TESTS / "conftest.py"
# The suite's size when this guard was last raised: a change that removes tests lowers it only by editing this line
# (and saying why), never by accident.
FEWEST_TESTS = 1698

SUITE = '''
import os
import pytest
import torch

def test_leaks_a_variable():
    os.environ["GUARD_PROBE"] = "1"

def test_leaks_threads():
    torch.set_num_threads(torch.get_num_threads() + 1)

def test_sees_the_state_put_back():
    assert "GUARD_PROBE" not in os.environ

def test_skips_for_want_of_a_server():
    pytest.skip("no widget server")

@pytest.mark.device
def test_skips_for_want_of_a_device():
    pytest.skip("needs a CUDA GPU")
'''


def _child_env(**changes: str) -> dict[str, str]:
    """This process's environment as a child run's own (not an xdist worker's, not strict), with `changes`."""
    env = {k: v for k, v in os.environ.items() if k != "REGISTRY_TEST_STRICT" and not k.startswith("PYTEST_XDIST_")}
    return {**env, **changes}


# The child runs load only the plugin the guards meet (xdist): the installed ones (hypothesis, schemathesis,
# playwright...) cost each run about as much start-up as torch does, and the probe suite uses none of them.
WITHOUT_PLUGINS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
PRELOADED = ("torch", "pytest", "registry.events.database")
"""What tests/conftest.py imports (torch alone is about 1.5 s of CPU an interpreter), but the modules of plugins a
run may load: pytest rewrites the asserts of those as it imports them, which it cannot do once they are imported."""


@pytest.fixture(scope="module")
def forks():
    """The server the file's child runs are forked from (tests/support/process_forks.py): each run is still a pytest
    run of its own in a process of its own, even when this test runs inside an xdist worker, without an
    interpreter's start-up and torch's import each time."""
    server = ProcessForks(_child_env(**WITHOUT_PLUGINS), PRELOADED)
    yield server
    server.close()


def run_suite(forks: ProcessForks, tmp_path: Path, strict: bool, *select: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_probe.py").write_text(SUITE, encoding="utf-8")
    env = _child_env(**WITHOUT_PLUGINS, **({"REGISTRY_TEST_STRICT": "1"} if strict else {}))
    return forks.run("pytest", ["-p", "no:cacheprovider", "-p", "xdist", "-q", "-W", "ignore::pytest.PytestUnknownMarkWarning",
                      *select, str(tmp_path)], cwd=tmp_path, env=env, timeout=HANG_GUARD_S)


def test_leaks_fail_the_leaking_test_and_are_put_back_and_skips_are_summarised(forks, tmp_path):
    done = run_suite(forks, tmp_path, False)
    assert done.returncode == 1, done.stdout
    assert "ERROR test_probe.py::test_leaks_a_variable" in done.stdout
    assert "environment variables GUARD_PROBE" in done.stdout
    assert "ERROR test_probe.py::test_leaks_threads" in done.stdout and "torch threads" in done.stdout
    assert "3 passed, 2 skipped, 2 errors" in done.stdout  # test_sees_the_state_put_back passed
    assert "skipped tests, by reason" in done.stdout
    assert "1 for lack of a device: needs a CUDA GPU" in done.stdout
    assert "1 skipped: no widget server" in done.stdout


def test_a_strict_run_fails_on_a_skip_unless_its_test_is_device_bound(forks, tmp_path):
    done = run_suite(forks, tmp_path, True, "-k", "skips")
    assert done.returncode == 1, done.stdout
    assert "1 FAILS THE RUN (strict): no widget server" in done.stdout
    assert "REGISTRY_TEST_STRICT=1: 1 skipped tests fail the run" in done.stdout
    assert "1 for lack of a device: needs a CUDA GPU" in done.stdout
    device_only = run_suite(forks, tmp_path, True, "-k", "device")
    assert device_only.returncode == 0, device_only.stdout
    assert "1 for lack of a device: needs a CUDA GPU" in device_only.stdout


def test_a_parallel_run_lists_every_workers_skips_and_a_strict_one_fails_on_them(forks, tmp_path):
    """Under pytest-xdist (what `make test` runs) the skips happen in the workers and the summary is the controller's.

    It starts worker interpreters that import torch (two, then one: a controller counting one worker's device skip
    decides the exit status as it does two workers'): seconds, the only way to see the controller's summary.
    """
    done = run_suite(forks, tmp_path, True, "-n", "2", "-k", "skips")
    assert done.returncode == 1, done.stdout
    assert "1 FAILS THE RUN (strict): no widget server" in done.stdout
    assert "1 for lack of a device: needs a CUDA GPU" in done.stdout
    device_only = run_suite(forks, tmp_path, True, "-n", "1", "-k", "device")
    assert device_only.returncode == 0, device_only.stdout
    assert "1 for lack of a device: needs a CUDA GPU" in device_only.stdout


def test_a_module_skipped_at_import_is_listed_and_fails_a_strict_run(forks, tmp_path):
    (tmp_path / "test_absent.py").write_text(
        "import pytest\npytest.importorskip('a_module_nobody_installed')\n", encoding="utf-8")
    done = run_suite(forks, tmp_path, True, "-k", "put_back")
    assert done.returncode == 1, done.stdout
    assert "1 FAILS THE RUN (strict): could not import 'a_module_nobody_installed'" in done.stdout


def _whole_suite_count(forks: ProcessForks) -> int:
    """The number of tests a collection of the whole of tests/ finds, in a child pytest (with every installed
    plugin, as a whole run has: a plugin may add tests)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    done = forks.run("pytest", ["--collect-only", "-q", "-p", "no:cacheprovider", str(TESTS)], cwd=TESTS.parent,
                     env=env, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stdout[-2000:]
    return int(done.stdout.strip().splitlines()[-1].split()[0])  # "N tests collected in ..."


def test_the_suite_does_not_shrink(request):
    """The whole run's collection is counted as it stands (every xdist worker collects every test); a run of part
    of the suite collects the whole in a child pytest instead, which takes seconds only then."""
    items = request.session.items
    whole = {path.name for path in TESTS.rglob("test_*.py")} <= {item.path.name for item in items} \
        and not request.config.option.keyword and not request.config.option.markexpr \
        and not request.config.getoption("deselect")
    count = len(items) if whole else _whole_suite_count(request.getfixturevalue("forks"))
    assert count >= FEWEST_TESTS, f"{count} tests, fewer than the {FEWEST_TESTS} this suite had"


# What may not stand in a comment or a docstring of the code, the suite, the benchmarks or the scripts: a tracker's
# numbers say nothing to a reader of the code, and outlive what they named.
ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+", re.IGNORECASE)


def test_no_comment_cites_an_issue_number():
    root = TESTS.parent
    found = [f"{path.relative_to(root)}:{number}" for folder in ("registry", "tests", "benchmarks", "scripts", "examples")
             for path in sorted((root / folder).rglob("*")) if path.suffix in (".py", ".sh")
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if ISSUE_NUMBER.search(line) and "ISSUE_NUMBER" not in line]
    assert found == []


# A deadline on an example fails it by the wall clock, whatever it computed: on a loaded machine, or in a pause of
# the process, a property that holds would fail. tests/conftest.py's profile gives every example none.
A_DEADLINE = re.compile(r"\bdeadline=(?!None\b)")


def test_no_property_has_a_deadline():
    from hypothesis import settings

    assert settings.default.deadline is None
    found = [f"{path.relative_to(TESTS)}:{number}" for path in sorted(TESTS.rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if A_DEADLINE.search(line)]
    assert found == []
