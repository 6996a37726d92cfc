#!/usr/bin/env bash
# The GPU session's one script (written for an H200; about 6 minutes). Every check here needs a CUDA device.
#
#   OUT=/some/folder bash benchmarks/gpu_kernels.sh
#   OUT=/some/folder PYTHON=/path/to/python3 bash benchmarks/gpu_kernels.sh
#
# Without PYTHON it runs `make install` and uses .venv's interpreter. With PYTHON (an interpreter that already
# holds the pins of pyproject.toml and this checkout installed, as on a machine with no package index) it
# installs nothing.
#
# In order (a failing step is noted in summary.txt and the next one still runs; the timed steps come first, so
# that nothing else uses the GPU while they measure):
#   1. the built-in kernels' bundles built (the registry's own cubins for this device's arch) and launched by
#      the trusted launcher on the gpu corpus: outputs byte-equal to the Triton-JIT launch       -> jit_equal.txt
#   2. the launcher's CUDA event times against the kernels' CUPTI spans (within 2% from 20 us)   -> cupti.txt
#   3. registry artifact register / evaluate / promote of each built-in bundle on a fresh registry,
#      then lock, and the runtime loading the promoted bundle from the signed lock               -> promote.txt
#   4. the Python-entry kind's forged early "done" (tests/gallery/forged_done.py) evaluated and promoted:
#      held by execution.launches_unverified                                                    -> forged_done.txt
#   5. each kernel's bandwidth as a share of the device's peak, as a table for docs/benchmarks.md -> bandwidth.md
#   6. the hostile-cubin gallery (spin loop, out-of-bounds write, unmapped read, marker scan), each registered
#      and evaluated                                                                             -> hostile.txt
#   7. the `device` tests of tests/kernels/ live (REGISTRY_TEST_STRICT=1; the rest of the suite needs no GPU
#      and runs wherever `make test` runs)                                                      -> device_tests.txt
# summary.txt holds the environment and one line per step.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY=${PYTHON:-.venv/bin/python}
unset TRITON_INTERPRET  # compiled kernels, CUDA events
export PYTHONUNBUFFERED=1

ENDS=$((SECONDS + ${BUDGET_S:-3600}))  # BUDGET_S: the seconds the whole run may take; each step gets what is left

step() {  # step NAME TIMEOUT FILE COMMAND...: run, tee into FILE, note the outcome in summary.txt
    local name=$1 limit=$2 file=$3
    shift 3
    local started=$SECONDS left=$((ENDS - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        echo "SKIPPED $name (the run's BUDGET_S is spent)" | tee -a "$OUT/summary.txt"
        return
    fi
    if timeout -k 5 "$limit" "$@" >"$OUT/$file" 2>&1; then
        echo "ok     $name ($((SECONDS - started)) s)" | tee -a "$OUT/summary.txt"
    else
        echo "FAILED $name (exit $?, $((SECONDS - started)) s; see $file)" | tee -a "$OUT/summary.txt"
    fi
}

if [ -z "${PYTHON:-}" ]; then
    make install >"$OUT/install.txt" 2>&1 || { echo "make install failed (see install.txt)" | tee "$OUT/summary.txt"; exit 1; }
fi
"$PY" -c 'import sys, torch, triton
from cuda.bindings import driver
assert torch.cuda.is_available(), "no CUDA device visible to torch"
err, version = driver.cuDriverGetVersion()
print(f"python {sys.version.split()[0]}  torch {torch.__version__}  triton {triton.__version__}  driver {version}")
print(f"device {torch.cuda.get_device_name()}  capability {torch.cuda.get_device_capability()}")' | tee "$OUT/summary.txt"

step "built-in kernels launched, byte-equal to Triton JIT" 300 jit_equal.txt "$PY" benchmarks/gpu_launcher.py jit-equal "$OUT"
step "launcher events against CUPTI spans" 120 cupti.txt "$PY" benchmarks/gpu_launcher.py cupti "$OUT"
step "evaluate and promote each built-in kernel" 600 promote.txt "$PY" benchmarks/gpu_launcher.py promote "$OUT"
step "forged early done on the Python-entry kind, held" 180 forged_done.txt \
    "$PY" benchmarks/gpu_launcher.py forged-done "$OUT"
step "bandwidth share per kernel" 60 bandwidth_log.txt "$PY" benchmarks/gpu_launcher.py bandwidth "$OUT"
step "hostile-cubin gallery" 300 hostile.txt "$PY" benchmarks/gpu_launcher.py hostile "$OUT"
step "device tests live" 900 device_tests.txt env REGISTRY_TEST_STRICT=1 "$PY" -m pytest -m device tests/kernels \
    -p no:cacheprovider -n 4 -q
cat "$OUT/summary.txt"
