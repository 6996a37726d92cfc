"""The hostile-cubin gallery as bundles: registered like honest ones here, refused by class on a GPU.

Each kernel of tests/gallery/compiled_hostile.py (a spin loop, a write past
its output, a read of an unmapped address, a scan for a marker kept in
another process) is built as a modulated LayerNorm bundle
(tests/support/hostile_bundles.py: about 10 s of compiling, once) and registered
through the CLI: registration's checks (the ELF, the metadata, the rebuild
byte for byte in the sandbox) pass every one, because each is a well-formed
kernel; what it does is only seen when it runs. Without a CUDA device
`evaluate` refuses in one line and records nothing; on one (the `device`
test) each evaluation records the one failure naming its class, and
`promote` holds it.
"""
from __future__ import annotations

import json
import re

import pytest
import torch

from store_helpers import opened
from compiled_fixtures import modln_op_workload
from hostile_bundles import EXPECTED, NAMES, build_hostile_bundles

MANIFEST = modln_op_workload(2)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    return build_hostile_bundles(tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def registered(registry_cli, bundles):
    (registry_cli.tmp / "op.yaml").write_text(MANIFEST)
    assert registry_cli("workload", "declare", str(registry_cli.tmp / "op.yaml")).exit_code == 0
    for name, directory in bundles.items():
        done = registry_cli("artifact", "register", name.replace("_", "-"), "--workload", "wan-modln-op",
                            "--kind", "triton_kernel", "--bundle", str(directory))
        assert done.exit_code == 0, (name, done.output)
    return registry_cli


def test_every_hostile_cubin_passes_registration_and_without_a_gpu_nothing_runs(registered, bundles):
    store = opened(registered.url).store
    for name in NAMES:
        artifact = name.replace("_", "-")
        assert [e.type for e in store.read_stream(f"artifact:{artifact}")] == ["ArtifactRegistered"]
        if not torch.cuda.is_available():
            done = registered("evaluate", artifact, "--bundle", str(bundles[name]))
            assert done.exit_code == 1 and "needs a CUDA device" in done.output
            assert [e.type for e in store.read_stream(f"artifact:{artifact}")] == ["ArtifactRegistered"]


@pytest.mark.device
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU to run the hostile cubins")
@pytest.mark.parametrize("name", NAMES)
def test_on_a_gpu_each_hostile_cubin_is_refused_with_its_class_named_and_held(registered, bundles, name):
    artifact = name.replace("_", "-")
    done = registered("evaluate", artifact, "--bundle", str(bundles[name]), "--warmup", "0", "--json")
    assert done.exit_code == 4, done.output
    (failure,) = [item for item in json.loads(done.output)["evidence"] if item["kind"] == "failure"]
    assert re.search(EXPECTED[name], failure["error"]), failure
    verdict = json.loads(registered("promote", artifact, "--json").output)
    assert verdict["decision"] == "held" and verdict["rule"] == "evaluation_failed", verdict
