"""Escape 4 (the harness, rewritten from inside): open /proc/<ppid>/mem read-write, find the bytecode of
the harness's ``integrity`` checks (the same source compiles to the same bytes in this process) and make
it return at once. Then compute with torch and launch a token kernel: technique 13, which only the
integrity checks' ablated call catches."""
import os

from gallery._escape import registering
from gallery._shared import launch_nothing
from registry.kernels import evaluate
from registry.kernels.reference import modulated_layernorm as reference

RESUME, LOAD_CONST, RETURN_VALUE = 151, 100, 83  # CPython 3.11 opcodes


def _return_at_once(code) -> bytes:
    """The same bytes with ``return None`` right after RESUME (cell set-up before it stays as it was)."""
    body = bytearray(code.co_code)
    at = next(i for i in range(0, len(body), 2) if body[i] == RESUME) + 2
    body[at:at + 4] = bytes([LOAD_CONST, code.co_consts.index(None), RETURN_VALUE, 0])
    return bytes(body)


def _rewrite_parent(code) -> int:
    original, patched = code.co_code, _return_at_once(code)
    pid, written = os.getppid(), 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("rw") or (len(fields) > 5 and fields[5].startswith("/")):
                continue
            start, end = (int(part, 16) for part in fields[0].split("-"))
            try:
                mem.seek(start)
                region = mem.read(end - start)
            except OSError:
                continue
            at = region.find(original)
            while at >= 0:
                mem.seek(start + at)
                mem.write(patched)
                written += 1
                at = region.find(original, at + 1)
    if not written:
        raise RuntimeError("the harness's integrity bytecode was not found")
    return written


if not registering():
    _rewrite_parent(evaluate.integrity.__code__)


def modulated_layernorm(x, scale, shift):
    launch_nothing(x)
    return reference(x, scale, shift)
