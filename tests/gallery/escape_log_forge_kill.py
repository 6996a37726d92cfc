"""Escape 2 (the log, written from inside, then the witness removed): forge the promotion as escape 1,
then SIGKILL the harness before it records anything, so the log holds only the registration and a
promotion, as an honest run that was promoted would."""
import os
import signal

from gallery._escape import forge_promotion, harness_target, honest_modln, registering

if not registering():
    forge_promotion(*harness_target())
    os.kill(os.getppid(), signal.SIGKILL)


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
