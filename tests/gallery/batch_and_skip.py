"""Technique 4: the first call computes every later call's answer; the others are look-ups.

The corpus is public (declared shapes and seeds), so the first call rebuilds
all of it, runs the kernel once per case, and later calls look the answer up
by shape.
"""
from registry.kernels.corpus import corpus_cases
from registry.kernels.ops import get_operation

from gallery._shared import honest_modln

_ANSWERS: dict = {}


def modulated_layernorm(x, scale, shift):
    if not _ANSWERS:
        spec = get_operation("modulated_layernorm")
        for case in corpus_cases("cpu"):
            inputs = spec.make_inputs(case, x.device)
            _ANSWERS[(tuple(inputs[0].shape), inputs[0].dtype)] = honest_modln(*inputs)
    return _ANSWERS[(tuple(x.shape), x.dtype)].clone()
