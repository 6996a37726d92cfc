"""Escape 10 (the checks, forged): launch nothing; find the worker's launch counter (its LaunchWatch)
with ``gc`` and raise it by one per call, reading its ``ablate`` flag to return zeros on the ablated
call, torch's result on every other."""
import gc

import torch

from registry.kernels.reference import modulated_layernorm as reference


def _watch():
    return next(obj for obj in gc.get_objects() if type(obj).__name__ == "LaunchWatch")


def modulated_layernorm(x, scale, shift):
    watch = _watch()
    watch.launches += 1
    watch.interpreted += 1
    if watch.ablate:
        return torch.zeros_like(x)
    return reference(x, scale, shift)
