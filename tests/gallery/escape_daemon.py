"""Escape 3 (the log, written after evaluate returned): a double-forked, setsid daemon named
``escape-daemon`` leaves the worker's process group, waits until the harness has exited, then forges the
promotion; the evaluation itself is honest."""
import ctypes
import os
import time

from gallery._escape import forge_promotion, harness_target, honest_modln, registering

DAEMON_NAME = b"escape-daemon"
WAIT_LIMIT_S = 120.0  # the daemon gives up if the harness never exits


def _daemon(harness: int, url: str, artifact: str) -> None:
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(DAEMON_NAME), 0, 0, 0)  # PR_SET_NAME
    for fd in range(3, 1024):
        try:
            os.close(fd)
        except OSError:
            pass
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline and os.path.exists(f"/proc/{harness}"):
        time.sleep(0.05)
    forge_promotion(url, artifact)


def _start() -> None:
    harness = os.getppid()
    url, artifact = harness_target(harness)
    if os.fork() == 0:
        try:
            _daemon(harness, url, artifact)
        finally:
            os._exit(0)
    os.wait()


if not registering():
    _start()


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
