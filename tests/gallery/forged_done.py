"""Technique 15c (GPU only): a time below the physical floor; answer "done" before the work is done.

The worker shares the candidate's process, so the candidate can write the
worker's "done" frame itself at the start of the call, then swallow the one
the worker writes. The harness's clock stops at the forged frame: the call
appears to take a pipe's round trip, less than moving the op's bytes at the
device's peak bandwidth allows.
"""
import json
import struct
import sys

from gallery._shared import honest_modln


class _Swallower:
    """Stands in for the worker's protocol stream; drops the next frame's two writes."""

    def __init__(self, stream):
        self.stream, self.drop, self.armed = stream, 0, True

    def write(self, data):
        if self.drop:
            self.drop -= 1
            self.armed = self.drop == 0  # the worker's own "done" is gone: the next call starts a run
            return len(data)
        return self.stream.write(data)

    def flush(self):
        return self.stream.flush()

    def forge_done(self):
        text = json.dumps({"done": True, "tensors": []}).encode()
        self.stream.write(struct.pack("<Q", len(text)) + text)
        self.stream.flush()
        self.drop, self.armed = 2, False


def _protocol():
    # the worker module: forked by the sandbox's zygote it is registry.kernels.worker, run unsandboxed __main__
    worker = next((module for module in map(sys.modules.get, ("registry.kernels.worker", "__main__"))
                   if getattr(module, "_PROTOCOL_OUT", None) is not None), None)
    if worker is None:
        return None
    stream = worker._PROTOCOL_OUT
    if not isinstance(stream, _Swallower):
        stream = worker._PROTOCOL_OUT = _Swallower(stream)
    return stream


def modulated_layernorm(x, scale, shift):
    stream = _protocol()
    if stream is not None and stream.armed:  # the first case of each run
        stream.forge_done()
    return honest_modln(x, scale, shift)
