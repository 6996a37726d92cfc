#!/usr/bin/env bash
# The GPU session's one script (written for an H200; about 5 minutes on a fresh clone). Every check here needs a
# CUDA device; none of it has run on one yet (no device was lent to this work).
#
#   OUT=/some/folder bash benchmarks/gpu_kernels.sh
#
# In order (a failing step is noted in summary.txt and the next one still runs):
#   1. make install, then make test with the device tests live (REGISTRY_TEST_STRICT=1)    -> make_test.txt
#   2. the built-in kernels' bundles built (the registry's own cubins for this device's arch) and launched by
#      the trusted launcher on the gpu corpus: outputs byte-equal to the Triton-JIT launch       -> jit_equal.txt
#   3. the launcher's CUDA event times against the kernels' CUPTI spans (within 2% from 20 us)   -> cupti.txt
#   4. registry artifact register / evaluate / promote of each built-in bundle on a fresh registry,
#      then lock, and the runtime loading the promoted bundle from the signed lock               -> promote.txt
#   5. the hostile-cubin gallery (spin loop, out-of-bounds write, unmapped read, marker scan), each registered
#      and evaluated; and tests/kernels/test_launcher_gpu.py                                            -> hostile.txt
#   6. the Python-entry kind's forged early "done" (tests/gallery/forged_done.py) evaluated and promoted:
#      held by execution.launches_unverified                                                    -> forged_done.txt
#   7. each kernel's bandwidth as a share of the device's peak, as a table for docs/benchmarks.md -> bandwidth.md
# summary.txt holds the environment and one line per step.
set -uo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY=.venv/bin/python
unset TRITON_INTERPRET  # compiled kernels, CUDA events
export PYTHONUNBUFFERED=1

step() {  # step NAME TIMEOUT FILE COMMAND...: run, tee into FILE, note the outcome in summary.txt
    local name=$1 limit=$2 file=$3
    shift 3
    local started=$SECONDS
    if timeout "$limit" "$@" >"$OUT/$file" 2>&1; then
        echo "ok     $name ($((SECONDS - started)) s)" | tee -a "$OUT/summary.txt"
    else
        echo "FAILED $name (exit $?, $((SECONDS - started)) s; see $file)" | tee -a "$OUT/summary.txt"
    fi
}

make install >"$OUT/install.txt" 2>&1 || { echo "make install failed (see install.txt)" | tee "$OUT/summary.txt"; exit 1; }
"$PY" -c 'import sys, torch, triton
from cuda.bindings import driver
assert torch.cuda.is_available(), "no CUDA device visible to torch"
err, version = driver.cuDriverGetVersion()
print(f"python {sys.version.split()[0]}  torch {torch.__version__}  triton {triton.__version__}  driver {version}")
print(f"device {torch.cuda.get_device_name()}  capability {torch.cuda.get_device_capability()}")' | tee "$OUT/summary.txt"

step "make test, device tests live" 1500 make_test.txt env REGISTRY_TEST_STRICT=1 make test
step "built-in kernels launched, byte-equal to Triton JIT" 300 jit_equal.txt "$PY" benchmarks/gpu_launcher.py jit-equal "$OUT"
step "launcher events against CUPTI spans" 300 cupti.txt "$PY" benchmarks/gpu_launcher.py cupti "$OUT"
step "evaluate and promote each built-in kernel" 900 promote.txt "$PY" benchmarks/gpu_launcher.py promote "$OUT"
step "hostile-cubin gallery" 600 hostile.txt "$PY" benchmarks/gpu_launcher.py hostile "$OUT"
step "forged early done on the Python-entry kind, held" 300 forged_done.txt \
    "$PY" benchmarks/gpu_launcher.py forged-done "$OUT"
step "bandwidth share per kernel" 300 bandwidth_log.txt "$PY" benchmarks/gpu_launcher.py bandwidth "$OUT"
cat "$OUT/summary.txt"
