#!/usr/bin/env bash
# Kernel benchmark, evidence run and the GPU cheat gallery for one NVIDIA GPU (written for an H200;
# about 10 minutes: the isolated harness moves every call's inputs and outputs through a pipe).
#
#   OUT=/some/folder bash benchmarks/gpu_kernels.sh
#
# Writes into "$OUT" (8 files):
#   kernels_bench.txt / kernels_bench.json   benchmarks/kernels.py on the gpu corpus
#   evidence_<op>.json                        registry.evidence/1 documents from evaluate_kernel
#                                             (byte_equal policy, 15 ABBA pairs, 3 warm-up pairs)
#   gallery_gpu.txt                           pytest on tests/test_cheat_gallery_gpu.py (needs pytest)
#   summary.txt                               environment, then one line per op from the evidence
# Needs python3 with a CUDA build of torch and Triton 3.6 or 3.7; run from anywhere inside the repo.
set -euo pipefail
: "${OUT:?set OUT to the folder that receives the results}"
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
unset TRITON_INTERPRET  # compiled kernels, CUDA-event timing
mkdir -p "$OUT"

"$PY" -c 'import torch, triton, sys
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(f"python {sys.version.split()[0]}  torch {torch.__version__}  triton {triton.__version__}")
print(f"device {torch.cuda.get_device_name()}")' | tee "$OUT/summary.txt"

# A failing step is reported in summary.txt and the next one still runs.
timeout 120 "$PY" benchmarks/kernels.py --corpus gpu --runs 20 --warmup 5 --json "$OUT/kernels_bench.json" \
    2>&1 | tee "$OUT/kernels_bench.txt" || echo "benchmarks/kernels.py failed (exit $?)" | tee -a "$OUT/summary.txt"

EVALUATE='
import json, sys, time
from registry.kernels.evaluate import evaluate_kernel, evidence_document
from registry.kernels.ops import get_operation
op, corpus, path = sys.argv[1:4]
entry = get_operation(op).kernels[0]
items = evaluate_kernel(op, entry, corpus=corpus, runs=15, warmup=3, policy="byte_equal", tolerances_by_dtype=None)
stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
doc = evidence_document(op + "-triton", items, run="-".join([corpus, op, stamp]))
with open(path, "w") as fh:
    json.dump(doc, fh, indent=1, allow_nan=False)
print(op, [item["kind"] for item in items])
'
for op in modulated_layernorm gated_residual gated_residual_layernorm rms_norm; do
    timeout 240 "$PY" -c "$EVALUATE" "$op" gpu "$OUT/evidence_$op.json" \
        || echo "evaluate_kernel $op failed (exit $?)" | tee -a "$OUT/summary.txt"
done

# The device-marked cheat gallery: side streams, L2 persistence, times below the byte floor.
timeout 300 "$PY" -m pytest -q -p no:cacheprovider tests/test_cheat_gallery_gpu.py 2>&1 | tee "$OUT/gallery_gpu.txt" \
    || echo "GPU cheat gallery failed or could not run (exit $?)" | tee -a "$OUT/summary.txt"

SUMMARY='
import glob, json, os, statistics, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "evidence_*.json"))):
    with open(path) as fh:
        doc = json.load(fh)
    name = doc["artifact"]
    items = {item["kind"]: item for item in doc["evidence"]}
    if "failure" in items:
        failure = items["failure"]
        print(name, "FAILED at", failure["stage"], "-", failure["error"])
        continue
    parity, bench, run = items["parity"], items["benchmark"], items["execution"]
    leaves = parity["leaves"]
    equal = sum(leaf["byte_equal"] for leaf in leaves)
    worst = max(leaf["max_abs_error"] or 0.0 for leaf in leaves)
    ratio = statistics.median(b / c for b, c in zip(bench["baseline_s"], bench["candidate_s"]))
    share = bench.get("bandwidth_share")
    share_text = "n/a" if share is None else "%.1f%%" % (100 * share)
    print("%-30s byte_equal %d/%d leaves, max_abs %.3g; eager/kernel median of %d pairs %.2fx [%s]; "
          "bandwidth share %s; launches %d, fallbacks %d; approx_math %s"
          % (name, equal, len(leaves), worst, len(bench["schedule"]), ratio, bench["timer"], share_text,
             run["candidate_calls"], run["fallbacks"], parity.get("approx_math")))
'
"$PY" -c "$SUMMARY" "$OUT" | tee -a "$OUT/summary.txt"
