"""Technique 5: static state; the second call on a shape returns the result stored by the first."""
from gallery._shared import honest_modln

_STORED: dict = {}


def modulated_layernorm(x, scale, shift):
    key = (tuple(x.shape), x.dtype)
    if key not in _STORED:
        _STORED[key] = honest_modln(x, scale, shift)
    return _STORED[key].clone()
