"""The GPU checks of the trusted launcher (run by benchmarks/gpu_kernels.sh, one subcommand per step).

    python benchmarks/gpu_launcher.py jit-equal|cupti|promote|hostile|forged-done|bandwidth OUT

Each needs a CUDA device and writes into OUT (bundles, a registry, evidence).
The first H200 session ran `jit-equal` and `cupti` (docs/benchmarks.md, "Kernels"); the other steps got no time.

- `jit-equal`: the built-in kernels built as bundles for this device's arch
  (OUT/bundles), each gpu corpus case launched by the launcher on NVIDIA's
  driver and by the Triton-JIT wrapper; the outputs must be equal byte for byte.
- `cupti`: each case's launcher event time against its kernel's CUPTI span
  (torch.profiler, the launcher in this process on the same context); from
  20 us up they must agree within 2%.
- `promote`: a fresh registry (OUT/registry.db): each bundle registered,
  `registry evaluate --bundle` (16 pairs, 3 warm-up), `promote`; then a
  signed lock and `registry.runtime.load` of the modulated LayerNorm from it,
  one call compared with the reference.
- `hostile`: the hostile-cubin gallery (tests/support/hostile_bundles.py) built for
  this arch, registered, evaluated: each must be the one failure naming its
  class, and `promote` must hold it.
- `forged-done`: the Python-entry kind's forged early "done"
  (tests/gallery/forged_done.py) evaluated and promoted: held.
- `bandwidth`: each op's candidate bandwidth share of the device's peak from
  the `promote` step's evidence, as a markdown table (OUT/bandwidth.md) for
  docs/benchmarks.md.
"""
from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tests")]  # the hostile gallery and its builder

OPS = ("modulated_layernorm", "gated_residual", "gated_residual_layernorm", "rms_norm")
CONTRACT = "workload: {op}-op\nparity: {{policy: byte_equal}}\n" \
           "speed: {{min_speedup: 1.1, runs_per_arm: 16, protocol: paired, decision: point}}\n"


def device_arch() -> str:
    from registry.formats.launch_spec import TARGET_ARCHES

    major, minor = torch.cuda.get_device_capability()
    found = [arch for arch, (_, number) in TARGET_ARCHES.items() if number == major * 10 + minor]
    if not found:
        raise SystemExit(f"no cubin target for compute capability {major}.{minor} ({', '.join(TARGET_ARCHES)})")
    return found[0]


def bundles(out: Path) -> dict:
    """The built-in bundles for this device's arch, built once into OUT/bundles; their manifests by op."""
    from registry.app.kernel_bundles import build_builtin_bundles
    from registry.bundles import verify_directory

    folder = out / "bundles"
    if folder.exists():
        return {op: verify_directory(folder / op).manifest for op in OPS}
    return build_builtin_bundles(folder, list(OPS), [device_arch()])


def read(out: Path, op: str):
    from registry.app.compiled import read_bundle_kernel

    return read_bundle_kernel(out / "bundles" / op, bundles(out)[op]).for_device(torch.cuda.get_device_capability())


def jit_equal(out: Path) -> int:
    from registry.kernels.corpus import corpus_cases
    from registry.kernels.launcher import Launcher, cuda_driver
    from registry.kernels.ops import get_operation, resolve_entry
    from registry.kernels.tensor_bytes import input_bytes

    failures = 0
    for op in OPS:
        kernel, spec = read(out, op), get_operation(op)
        jit = resolve_entry(spec.kernels[0])
        launcher = Launcher(cuda_driver())
        try:
            launcher.load({k: v for k, v in kernel.cubins.items()})
            for case in corpus_cases("gpu"):
                args = spec.make_inputs(case, "cuda")
                plan = kernel.plan(args)
                outcome = launcher.call([(plan, input_bytes(kernel.inputs, args))], deadline_s=30)
                expected = jit(*args)
                expected = expected if isinstance(expected, tuple) else (expected,)
                for name, want in zip(kernel.outputs, expected):
                    got = outcome.cases[0].outputs[name]
                    same = got == want.contiguous().cpu().view(torch.uint8).numpy().tobytes()
                    failures += not same
                    print(f"{op} {case.label} {name}: {'byte-equal' if same else 'DIFFERS'} to the Triton-JIT "
                          f"launch; launcher {outcome.device_s * 1e6:.1f} us; guards {outcome.violations() or 'intact'}")
        finally:
            launcher.close()
    return failures


def cupti(out: Path) -> int:
    from torch.profiler import ProfilerActivity, profile

    from registry.kernels.corpus import corpus_cases
    from registry.kernels.launcher import Launcher, cuda_driver
    from registry.kernels.ops import get_operation
    from registry.kernels.tensor_bytes import input_bytes

    outside = 0
    for op in OPS:
        kernel, spec = read(out, op), get_operation(op)
        launcher = Launcher(cuda_driver())
        try:
            launcher.load(kernel.cubins)
            for case in corpus_cases("gpu"):
                args = spec.make_inputs(case, "cuda")
                call = [(kernel.plan(args), input_bytes(kernel.inputs, args))]
                launcher.call(call, deadline_s=30)  # warm
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    events = [launcher.call(call, deadline_s=30).device_s for _ in range(5)]
                entry = kernel.spec.kernels[call[0][0].launches[0].kernel].entry
                spans = [e.device_time_total / 1e6 for e in prof.events() if e.name == entry]
                ratio = statistics.median(e / s for e, s in zip(events, spans)) if len(spans) == 5 else float("nan")
                long_enough = statistics.median(spans or [0]) >= 20e-6
                bad = long_enough and not 0.98 <= ratio <= 1.02
                outside += bad
                print(f"{op} {case.label}: events {statistics.median(events) * 1e6:.1f} us, CUPTI "
                      f"{statistics.median(spans or [0]) * 1e6:.1f} us, ratio {ratio:.4f}"
                      f"{' OUTSIDE 2%' if bad else '' if long_enough else ' (under 20 us: not held to 2%)'}")
        finally:
            launcher.close()
    return outside


def cli(out: Path, *args: str) -> subprocess.CompletedProcess:
    """`registry --db OUT/registry.db ARGS...`, the registry made first when this run has none yet."""
    if not (out / "registry.db").exists() and args[:1] != ("init",):
        made = cli(out, "init")
        if made.returncode != 0:
            raise SystemExit(f"registry init failed: {made.stderr.strip()}")
    return subprocess.run([sys.executable, "-m", "registry", "--db", f"sqlite:///{out / 'registry.db'}", *args],
                          capture_output=True, text=True, timeout=1800)


def promote(out: Path) -> int:
    from registry.bundles import Profile
    from registry.kernels.corpus import corpus_cases
    from registry.kernels.ops import get_operation
    from registry.kernels.reference import modulated_layernorm
    from registry.runtime import load, resolve

    bundles(out)
    problems = 0
    for op in OPS:
        manifest = out / f"{op}.yaml"
        manifest.write_text(CONTRACT.format(op=op))
        cli(out, "workload", "declare", str(manifest))
        done = cli(out, "artifact", "register", f"{op}-compiled", "--workload", f"{op}-op", "--kind", "triton_kernel",
                   "--bundle", str(out / "bundles" / op))
        print(done.stdout.strip() or done.stderr.strip())
        done = cli(out, "evaluate", f"{op}-compiled", "--bundle", str(out / "bundles" / op), "--warmup", "3",
                   "--runs", "16", "--emit", str(out / f"evidence_{op}.json"), "--force")
        print(done.stdout.strip() or done.stderr.strip())
        cli(out, "evidence", "import", str(out / f"evidence_{op}.json"))
        verdict = json.loads(cli(out, "promote", f"{op}-compiled", "--json").stdout)
        problems += verdict["decision"] not in ("promoted", "rejected")
        print(f"{op}: {verdict['decision']} by {verdict['rule']}: {verdict['reasons'][0]}")
    key, lock = out / "signing.key", out / "registry.lock.json"
    cli(out, "keys", "init", str(key))
    major, minor = torch.cuda.get_device_capability()
    profile = Profile(f"sm{major}{minor}", torch.__version__, torch.version.cuda, "3.7.1")
    done = cli(out, "lock", "--workload", "modulated_layernorm-op", "--key", str(key), "--out", str(lock),
               "--arch", profile.gpu_architecture, "--torch", profile.torch, "--cuda", str(profile.cuda),
               "--triton", "3.7.1")
    print(done.stdout.strip() or done.stderr.strip())
    answer = resolve("modulated_layernorm-op", profile, lock=lock, trusted_keys=[f"{key}.pub"]) \
        if done.returncode == 0 else None
    if answer is None or answer.match is None:
        print(f"runtime: nothing to load from the lock ({answer.reason_codes() if answer else done.stderr.strip()})")
        return problems
    root = out / "trusted"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(out / "bundles" / "modulated_layernorm", root / answer.match.artifact)
    kernel = load(answer.match, trusted_root=root)
    args = get_operation("modulated_layernorm").make_inputs(corpus_cases("gpu")[0], "cuda")
    got, expected = kernel(*args), modulated_layernorm(*args)
    print(f"runtime: loaded {answer.match.artifact} from the signed lock and launched it; equal to the reference bit "
          f"for bit: {torch.equal(got, expected)} (max abs difference {(got.float() - expected.float()).abs().max():.3g})")
    return problems


def hostile(out: Path) -> int:
    from hostile_bundles import EXPECTED, build_hostile_bundles

    folder = out / "hostile"
    built = build_hostile_bundles(folder, device_arch())
    manifest = out / "hostile.yaml"
    manifest.write_text(CONTRACT.format(op="hostile"))
    cli(out, "workload", "declare", str(manifest))
    problems = 0
    for name, directory in built.items():
        artifact = name.replace("_", "-")
        registered = cli(out, "artifact", "register", artifact, "--workload", "hostile-op", "--kind", "triton_kernel",
                         "--bundle", str(directory))
        done = cli(out, "evaluate", artifact, "--bundle", str(directory), "--warmup", "0", "--runs", "2", "--json")
        failures = [i for i in json.loads(done.stdout or "{}").get("evidence", []) if i["kind"] == "failure"]
        verdict = json.loads(cli(out, "promote", artifact, "--json").stdout or "{}")
        caught = failures and re.search(EXPECTED[name], failures[0]["error"])
        problems += not caught or verdict.get("decision") != "held"
        print(f"{name}: registered ({registered.returncode}); "
              f"{failures[0]['error'] if failures else 'NO FAILURE RECORDED'}; {verdict.get('decision')} by "
              f"{verdict.get('rule')}")
    return problems


def forged_done(out: Path) -> int:
    from gallery import candidate_file

    path = candidate_file("forged_done", out)
    manifest = out / "forged.yaml"
    manifest.write_text(CONTRACT.format(op="forged"))
    cli(out, "workload", "declare", str(manifest))
    cli(out, "artifact", "register", "forged-done", "--workload", "forged-op", "--kind", "fused_kernel",
        "--op", "modulated_layernorm", "--entry", f"{path}:modulated_layernorm")
    done = cli(out, "evaluate", "forged-done", "--warmup", "1", "--runs", "4")
    print(done.stdout.strip(), done.stderr.strip())
    verdict = json.loads(cli(out, "promote", "forged-done", "--json").stdout)
    print(f"forged-done: {verdict['decision']} by {verdict['rule']}: {verdict['reasons'][0]}")
    return verdict["decision"] != "held"


def bandwidth(out: Path) -> int:
    lines = ["| op | candidate median (us) | bandwidth share of peak | device |", "|---|---|---|---|"]
    for op in OPS:
        path = out / f"evidence_{op}.json"
        if not path.exists():
            lines.append(f"| {op} | - | not measured (no evidence) | - |")
            continue
        items = {item["kind"]: item for item in json.loads(path.read_text())["evidence"]}
        bench = items.get("benchmark")
        if bench is None:
            lines.append(f"| {op} | - | failed: {items.get('failure', {}).get('error', '?')[:80]} | - |")
            continue
        share = bench.get("bandwidth_share")
        lines.append(f"| {op} | {statistics.median(bench['candidate_s']) * 1e6:.1f} | "
                     f"{'-' if share is None else f'{100 * share:.1f}%'} | {bench['device']} |")
    (out / "bandwidth.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


STEPS = {"jit-equal": jit_equal, "cupti": cupti, "promote": promote, "hostile": hostile, "forged-done": forged_done,
         "bandwidth": bandwidth}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in STEPS:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(STEPS)} OUT")
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device (torch.cuda.is_available() is False)")
    target = Path(sys.argv[2]).resolve()
    target.mkdir(parents=True, exist_ok=True)
    sys.exit(1 if STEPS[sys.argv[1]](target) else 0)
