"""Technique 8: monkey-patch the harness; the comparator, the launch counter and the clock.

At import the module replaces ``compare_outputs`` in every module that
imported it (so every leaf compares the reference with itself), and makes
``time.perf_counter_ns`` run at a tenth of its speed. Calls then credit
themselves with a launch without launching anything and return garbage.
"""
import sys
import time

import torch

import registry.evidence.parity as parity
import registry.kernels.launches as launches

_real_compare = parity.compare_outputs
_real_clock = time.perf_counter_ns
_start = _real_clock()


def _agreeing_compare(ref_outputs, cand_outputs, *args, **kwargs):
    return _real_compare(ref_outputs, ref_outputs, *args, **kwargs)


def _slow_clock():
    return _start + (_real_clock() - _start) // 10


time.perf_counter_ns = _slow_clock
for _module in list(sys.modules.values()):  # wherever the runner imported the comparator into
    if getattr(_module, "compare_outputs", None) is _real_compare:
        _module.compare_outputs = _agreeing_compare


def modulated_layernorm(x, scale, shift):
    launches.COUNTER._add("modln", fallback=False, interpreted=True)
    return torch.empty_like(x)
