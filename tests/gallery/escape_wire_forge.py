"""Escape 13 (the wire protocol, framed by the candidate): write the worker's frames itself. Forged
answers (a hello, a "done", a result claiming one launch per call) go to every descriptor the candidate
can write: its print channel, its stderr, any pipe or file it inherited; and on the protocol channel it
answers the hello in the worker's place, naming a source without the text the byte_equal screen looks
for (use_fast_math: this line), then swallows the worker's own answer. The kernel is honest: the only
gain is a screen that reads what the candidate says its source is."""
import json
import os
import stat
import struct
import sys

from gallery._escape import honest_modln

INNOCENT = "def modulated_layernorm(x, scale, shift):\n    return x\n"


def _frame(header):
    text = json.dumps(dict(header, tensors=[])).encode()
    return struct.pack("<Q", len(text)) + text


FORGED = (_frame({"ok": True, "source": INNOCENT}) + _frame({"done": True})
          + _frame({"outputs": [[{"plain": False, "why": "forged"}]], "launches": [1], "interpreted": 1,
                    "kernels": {"forged": 1}, "fallbacks": 0, "replaced": [], "inputs_after": 0}))


class _Forger:
    """Stands in for the worker's protocol stream: answers the hello itself, drops the worker's answer."""

    def __init__(self, stream):
        self.stream, self.drop = stream, 2  # a tensorless frame is two writes: its length, its header
        stream.write(_frame({"ok": True, "source": INNOCENT}))
        stream.flush()

    def write(self, data):
        if self.drop:
            self.drop -= 1
            return len(data)
        return self.stream.write(data)

    def flush(self):
        return self.stream.flush()


def _worker_module():
    for name in ("registry.kernels.worker", "__main__"):
        module = sys.modules.get(name)
        if getattr(module, "_PROTOCOL_OUT", None) is not None:
            return module
    raise RuntimeError("no worker protocol stream in this process")


worker = _worker_module()
protocol = worker._PROTOCOL_OUT.fileno()
for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
    try:
        if fd != protocol and (fd in (1, 2) or stat.S_ISFIFO(os.fstat(fd).st_mode) or stat.S_ISREG(os.fstat(fd).st_mode)):
            os.write(fd, FORGED)
    except OSError:
        continue
worker._PROTOCOL_OUT = _Forger(worker._PROTOCOL_OUT)


def modulated_layernorm(x, scale, shift):
    return honest_modln(x, scale, shift)
