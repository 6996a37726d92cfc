"""Escape 8 (the baseline, sabotaged): the baseline arm runs the reference, which calls
``F.layer_norm``; replace it in this process with one that first sleeps BASELINE_DELAY_S. The kernel
itself is honest (it never calls F.layer_norm), so only a baseline run in this process slows down."""
import time

import torch.nn.functional as F

from gallery._escape import honest_modln

BASELINE_DELAY_S = 1.0
_honest_layer_norm = F.layer_norm


def _slow_layer_norm(*args, **kwargs):
    time.sleep(BASELINE_DELAY_S)
    return _honest_layer_norm(*args, **kwargs)


F.layer_norm = _slow_layer_norm


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
