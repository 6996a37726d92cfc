"""Technique 7: a lazy output; a tensor subclass that runs the kernel only when someone reads it.

The call returns at once (the clock sees nothing), and the first torch
function the checker applies to the result computes it.
"""
import torch

from gallery._shared import honest_modln


class LazyOutput(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            pending = getattr(arg, "_pending", None) if isinstance(arg, LazyOutput) else None
            if pending is not None:
                arg._pending = None
                with torch._C.DisableTorchFunctionSubclass():
                    arg.copy_(honest_modln(*pending))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def modulated_layernorm(x, scale, shift):
    out = torch.empty_like(x).as_subclass(LazyOutput)
    out._pending = (x, scale, shift)
    return out
