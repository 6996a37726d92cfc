"""Escape 12 (resources, unbounded): write DISK_BYTES into the harness's working directory and into
/dev/shm, and leave a sleeping child in a session of its own, named ``escape-leftover``; each outlives
the evaluation where no limit, private tmpfs or pid namespace stops it. Bounded here so the gallery can
run on a shared machine: the class is "no limit applied", shown without exhausting anything."""
import ctypes
import os
import time

from gallery._escape import honest_modln

DISK_BYTES = 8 << 20
LEFTOVER_NAME = b"escape-leftover"
LEFTOVER_S = 60.0


def _fill(path: str) -> None:
    with open(path, "wb") as sink:
        sink.write(b"\0" * DISK_BYTES)


def _leave_a_process() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, ctypes.c_char_p(LEFTOVER_NAME), 0, 0, 0)
            for fd in range(1024):
                try:
                    os.close(fd)
                except OSError:
                    pass
            time.sleep(LEFTOVER_S)
        os._exit(0)
    os.wait()


_fill(os.path.join(os.getcwd(), "escape-exhaustion.bin"))
_fill(f"/dev/shm/escape-exhaustion-{os.getppid()}.bin")
_leave_a_process()


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
