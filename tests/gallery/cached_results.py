"""Technique 3: cache outputs keyed on where the inputs live (data_ptr, _version) or on what they hold.

The old harness timed the same input tensors over and over, so after the
first timed call every call was a dictionary look-up (by pointer, or by a
fingerprint of the bytes, which also survives copies of the inputs).
"""
import hashlib

import torch

from gallery._shared import honest_modln

_BY_POINTER: dict = {}
_BY_CONTENT: dict = {}


def _fingerprint(tensors):
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(str((tuple(t.shape), t.dtype)).encode())
        digest.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def modulated_layernorm(x, scale, shift):
    pointer = tuple((t.data_ptr(), t._version) for t in (x, scale, shift))
    if pointer in _BY_POINTER:
        return _BY_POINTER[pointer]
    content = _fingerprint((x, scale, shift))
    if content not in _BY_CONTENT:
        _BY_CONTENT[content] = honest_modln(x, scale, shift)
    _BY_POINTER[pointer] = _BY_CONTENT[content]
    return _BY_CONTENT[content]
