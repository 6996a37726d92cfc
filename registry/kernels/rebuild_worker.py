"""The jailed side of a cubin rebuild: pid 1 of its own sandbox, compiling TTIR it is sent, nothing else.

Exec'd by registry/kernels/sandbox_launch.py (through
`Sandbox.module_command`) with the jail's config as its last argument. It
confines itself first, as every worker is confined
(`sandbox_launch.confine`: its own /tmp, limits, a uid of its own, no
capabilities, the syscall filter; no network in the jail), then reads one
JSON request on standard input (a list of jobs: TTIR text, target, options),
compiles each with registry/kernels/ttir_compile.py and writes one JSON
answer on standard output: per job the cubin (base64) and Triton's metadata,
or the one-line error that stopped it. Nothing of a bundle but the TTIR text
reaches it, and that is read by MLIR's parser, never executed as Python.
"""
from __future__ import annotations

import base64
import json
import os
import sys


def serve(stdin, stdout) -> None:
    from registry.formats.errors import first_line
    from registry.kernels.ttir_compile import compile_ttir, key_private_cache_by_version

    key_private_cache_by_version()
    request = json.loads(stdin.read())
    answers = []
    for job in request["jobs"]:
        try:
            cubin, metadata = compile_ttir(job["ttir"], job["arch"], job["options"])
        except Exception as exc:  # noqa: BLE001 - any failure to compile is the job's answer, named
            answers.append({"error": f"{type(exc).__name__}: {first_line(exc)}"[:2000]})
            continue
        answers.append({"cubin": base64.b64encode(cubin).decode("ascii"), "metadata": metadata})
    json.dump({"answers": answers}, stdout)
    stdout.flush()


def main(argv: list[str]) -> None:
    from registry.kernels.sandbox_launch import SETUP_FAILED, SetupError, confine

    config = json.loads(argv[-1])
    try:
        confine(config, config["probe_ids"])
    except (SetupError, OSError) as exc:
        os.write(2, f"sandbox: {exc}\n".encode())
        os._exit(SETUP_FAILED)
    # The answer goes out on a descriptor of its own; everything else that writes to standard output (Triton
    # prints a failed ptxas run's PTX there, ptxas inherits it) goes to standard error, never into the answer.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main(sys.argv)
