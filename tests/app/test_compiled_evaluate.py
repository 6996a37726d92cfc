"""`registry evaluate` and `promote` of a triton_kernel, on a real built bundle, on a machine without a GPU.

The module builds the built-in modulated LayerNorm as a `registry.triton-kernel/1`
bundle (the cpu corpus's four (D, dtype), sm_90a: about 15 s of compiling on a
loaded 2-core machine, once) and
registers it once, which rebuilds its cubins in the sandbox; each test gets
a copy of that registry. Then:

- `evaluate` says in one line that it needs a CUDA device, and records
  nothing (with or without --bundle);
- the bundle as the evaluation reads it: its op found by the reference it
  replaces, its real cubins, plans from its spec; a cubin changed on disk
  since registration is refused;
- the evaluation run whole on the simulated driver (whose kernels compute
  the reference per real cubin): the execution item names exactly the
  registered cubins' digests, and the gate, reading the registration from the
  log, binds them (`execution.launcher_unbound` for other digests);
- what stops an imported document claiming the launcher: only its binding to
  the registered cubins (docs/evidence-format.md, "Who may claim the harness
  launcher"): a document naming them is judged like the registry's own.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from registry.app.compiled import operation_replaced, read_bundle_kernel, registered_cubins, registered_kernel
from registry.cli.main import main
from registry.formats.errors import UserError
from registry.kernels.corpus import corpus_cases
from registry.kernels.launch_evaluate import evaluate_compiled
from registry.kernels.launcher import Launcher, PlanRefused
from registry.kernels.ops import get_operation
from registry.kernels.simulated_driver import SimulatedDriver
from compiled_fixtures import BUILT_CASES, built_modln, jail, modln_op_workload, simulated_images  # noqa: F401 - fixtures
from read_side import Reads
from store_helpers import opened

CASES = BUILT_CASES
MANIFEST = modln_op_workload(16)


@pytest.fixture(scope="module")
def built(built_modln):
    return built_modln


@pytest.fixture(scope="module")
def registered(built, sqlite_template, tmp_path_factory) -> Path:
    """A registry file in which the workload is declared and the bundle registered through the CLI, once for the
    module: registration rebuilds every cubin in the sandbox (about a second each time), and each test gets a
    copy of this file, as `registry_cli` gives a copy of the migrated template."""
    path = tmp_path_factory.mktemp("registered") / "registry.db"
    shutil.copyfile(sqlite_template, path)
    (path.parent / "op.yaml").write_text(MANIFEST)

    def cli(*args):
        return CliRunner().invoke(main, ["--db", f"sqlite:///{path}", "--actor", "reviewer", *args])

    assert cli("workload", "declare", str(path.parent / "op.yaml")).exit_code == 0
    done = cli("artifact", "register", "modln-c", "--workload", "wan-modln-op", "--kind", "triton_kernel",
               "--bundle", str(built[0]))
    assert done.exit_code == 0, done.output
    assert not path.with_name(path.name + "-wal").exists()  # the commands closed it: the file holds every write
    return path


@pytest.fixture
def cli(registry_cli, registered):
    shutil.copyfile(registered, registry_cli.tmp / "registry.db")  # the file at registry_cli.url
    return registry_cli


def events(url: str, artifact: str) -> list[str]:
    return [e.type for e in opened(url).store.read_stream(f"artifact:{artifact}")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal of a machine without a CUDA device")
@pytest.mark.parametrize("bundle", [True, False])
def test_evaluate_without_a_cuda_device_says_so_in_one_line_and_records_nothing(cli, built, bundle):
    result = cli("evaluate", "modln-c", *(["--bundle", str(built[0])] if bundle else []))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert lines == ["error: artifact modln-c is a triton_kernel: evaluating it launches its cubins, which needs a CUDA "
                     "device, and this machine has none; nothing was run or recorded"]
    assert events(cli.url, "modln-c") == ["ArtifactRegistered"]


def test_the_bundle_is_read_as_registered_its_op_found_by_the_reference_it_replaces(cli, built, tmp_path):
    directory, manifest = built
    registered = Reads(opened(cli.url).store).current_artifact("modln-c")
    op, kernel = registered_kernel("modln-c", registered, directory, (9, 0))
    assert op == "modulated_layernorm" == operation_replaced(manifest)
    assert sorted(kernel.cubins) == sorted((f"modln_d{d}_{t}", "sm_90a") for d, t in CASES)
    assert {f"{key}@{arch}": hashlib.sha256(image).hexdigest() for (key, arch), image in kernel.cubins.items()} \
        == registered_cubins(registered["bundle"])
    args = get_operation(op).make_inputs(corpus_cases("cpu")[0], "cpu")
    plan = kernel.plan(args)
    assert [launch.kernel for launch in plan.launches] == ["modln_d128_bfloat16"] and plan.variant == "d128_bfloat16"
    wide = (torch.empty(1, 4, 1536, dtype=torch.bfloat16), torch.empty(1, 1536), torch.empty(1, 1536))
    with pytest.raises(PlanRefused, match="1536"):
        kernel.plan(wide)  # D 1536: no variant of this bundle
    with pytest.raises(PlanRefused, match="none for a device of compute capability 10.0"):
        kernel.for_device((10, 0))
    changed = tmp_path / "changed"
    shutil.copytree(directory, changed)
    cubin = changed / "kernels" / "modln_d128_bfloat16" / "sm_90a.cubin"
    data = cubin.read_bytes()
    cubin.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(UserError, match="sm_90a.cubin"):
        read_bundle_kernel(changed, manifest)


class SimulatedBundleLauncher:
    """The Launcher on the simulated driver, whose kernels for each real cubin compute the reference."""

    timer, device_name = "emulator", "simulated CUDA driver (emulator)"
    confinement = {"identity": "harness_user", "memory": "none"}

    def __init__(self, cubins, spec):
        self.launcher = Launcher(SimulatedDriver({}, images=simulated_images(cubins, spec)), flush_bytes=4096)
        self.digests = self.launcher.load(cubins)

    def call(self, cases, *, deadline_s):
        return self.launcher.call(cases, deadline_s=deadline_s)

    def close(self):
        self.launcher.close()


def _documents(cli, built, digests=None):
    directory, _ = built
    registered = Reads(opened(cli.url).store).current_artifact("modln-c")
    op, kernel = registered_kernel("modln-c", registered, directory, (9, 0))

    items = evaluate_compiled(op, kernel, lambda cubins: SimulatedBundleLauncher(cubins, kernel.spec),
                              device=torch.device("cpu"), capability=(9, 0), corpus="cpu", runs=16, warmup=0,
                              policy="byte_equal", tolerances_by_dtype=None, sandboxed=False)
    return registered, items


def test_the_evaluation_names_the_registered_cubins_and_the_gate_binds_them(cli, built, jail):
    """The registry's own evaluation (simulated device) is bound; the same document naming other cubins, imported
    afterwards, is held for exactly that."""
    registered, items = _documents(cli, built)
    assert [item["kind"] for item in items] == ["parity", "benchmark", "execution"], items
    execution = items[2]
    assert execution["cubins"] == registered_cubins(registered["bundle"])
    assert execution["launches"][:4] == [[f"modln_d{case.dim}_{case.dtype}@sm_90a"] for case in corpus_cases("cpu")]
    for run, evidence in (("simulated", items),
                          ("forged", [items[0], items[1], dict(execution, cubins={key: "ab" * 32
                                                                                  for key in execution["cubins"]})])):
        document = {"format": "registry.evidence/1", "artifact": "modln-c", "run": run,
                    "payload_sha256": registered["payload_sha256"], "evidence": evidence}
        path = cli.tmp / f"{run}.json"
        path.write_text(json.dumps(document))
        assert cli("evidence", "import", str(path)).exit_code == 0
        verdict = json.loads(cli("promote", "modln-c", "--json").output)
        unbound = [reason for reason in verdict["reasons"]
                   if re.search("not of its bytes|does not come from the harness launcher", reason)]
        assert verdict["decision"] == "held", verdict
        if run == "simulated":
            # bound: held only because this launcher ran unsandboxed, on an emulator's clock
            assert verdict["rule"] == "execution.unsandboxed" and unbound == [], verdict["reasons"]
            assert any(re.search("emulator|interpreter", reason) for reason in verdict["reasons"])
        else:
            assert len(unbound) == 1 and "the registered bundle holds sha256" in unbound[0], verdict["reasons"]
