"""Frames between the evaluation harness and its candidate worker process.

A frame is an 8-byte little-endian length, a JSON header of that length, then
the raw storage bytes of every tensor the header lists. Nothing is pickled:
the worker runs hostile code, and unpickling what it sends would hand that
code the harness process. The harness reads a frame only up to the byte
budget it set, so a worker cannot make it allocate without bound.

The same frames carry plain bytes for a process that has no torch (the
trusted launcher's worker, registry/kernels/launcher_worker.py):
``write_byte_frame`` and ``read_byte_frame`` send and take each payload as a
one-dimensional ``uint8`` tensor's storage, which the harness reads with
``read_frame`` like any other. torch is imported only by the tensor
functions.
"""
from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    import torch

HEADER_LIMIT = 1 << 20  # bytes of JSON header a harness accepts from a worker
ERROR_TEXT_LIMIT = 2000
"""Most characters of an error message a frame carries that the harness keeps (the worker cuts its own
there too, but the candidate can write a frame itself)."""
_LENGTH = struct.Struct("<Q")


class WireError(RuntimeError):
    """A frame that is malformed, too large, or cut short (the worker died or lied)."""


def dtype_from_name(name: Any) -> torch.dtype:
    """The torch dtype called ``name`` (``"bfloat16"``); anything else is a WireError."""
    import torch

    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise WireError(f"unknown dtype {name!r} in a frame")
    return dtype


def tensor_meta(t: torch.Tensor) -> dict[str, Any]:
    """What a frame says about a tensor whose storage bytes follow it."""
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "strides": list(t.stride()),
            "nbytes": t.untyped_storage().nbytes()}


def storage_bytes(t: torch.Tensor) -> memoryview:
    """The whole storage of a CPU tensor as bytes (the layout travels in its meta)."""
    import torch

    storage = t.untyped_storage()
    if storage.nbytes() == 0:
        return memoryview(b"")
    flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return memoryview(flat.numpy()).cast("B")


def write_frame(stream: BinaryIO, header: dict[str, Any], tensors: Sequence[torch.Tensor] = ()) -> None:
    """Send ``header`` and the storage of each CPU ``tensor`` (listed under ``header["tensors"]``)."""
    _write(stream, dict(header, tensors=[tensor_meta(t) for t in tensors]), [storage_bytes(t) for t in tensors])


def _write(stream: BinaryIO, header: dict[str, Any], payloads: Sequence[bytes | memoryview]) -> None:
    text = json.dumps(header, allow_nan=False).encode("utf-8")
    stream.write(_LENGTH.pack(len(text)))
    stream.write(text)
    for payload in payloads:
        stream.write(payload)
    stream.flush()


def byte_meta(size: int) -> dict[str, Any]:
    """The meta of ``size`` plain bytes: a one-dimensional uint8 tensor."""
    return {"dtype": "uint8", "shape": [size], "strides": [1], "nbytes": size}


def write_byte_frame(stream: BinaryIO, header: dict[str, Any], payloads: Sequence[bytes] = ()) -> None:
    """Send ``header`` and each payload as a uint8 tensor's storage (no torch needed)."""
    _write(stream, dict(header, tensors=[byte_meta(len(payload)) for payload in payloads]), payloads)


def read_byte_frame(stream: BinaryIO, byte_budget: int) -> tuple[dict[str, Any], list[bytes]]:
    """One frame whose tensors are all plain bytes (one-dimensional uint8); anything else is a WireError."""
    header, metas = _read_header(stream)
    sizes = []
    for meta in metas:
        size = meta.get("nbytes") if isinstance(meta, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or meta != byte_meta(size):
            raise WireError(f"a frame for plain bytes carries {str(meta)[:200]}")
        sizes.append(size)
    if sum(sizes) > byte_budget:
        raise WireError(f"frame carries more than the {byte_budget} bytes expected")
    return header, [_read_exactly(stream, size) for size in sizes]


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks, got = [], 0
    while got < size:
        data = stream.read(size - got)
        if not data:
            raise WireError(f"frame cut short: wanted {size} bytes, got {got}")
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def _dense(shape: list[int], strides: list[int]) -> bool:
    """True when (shape, strides) address every element of a storage exactly once."""
    expected = 1
    for size, stride in sorted(zip(shape, strides), key=lambda pair: (pair[1], pair[0])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _check_meta(meta: Any) -> tuple[torch.dtype, list[int], list[int], int]:
    if not isinstance(meta, dict):
        raise WireError("tensor meta is not an object")
    dtype = dtype_from_name(meta.get("dtype"))
    shape, strides, nbytes = meta.get("shape"), meta.get("strides"), meta.get("nbytes")
    ints = (isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in [*(shape or []), *(strides or [])])
    if not (isinstance(shape, list) and isinstance(strides, list) and len(shape) == len(strides) and all(ints)):
        raise WireError(f"bad shape/strides {shape!r}/{strides!r}")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise WireError(f"bad nbytes {nbytes!r}")
    return dtype, shape, strides, nbytes


def _read_header(stream: BinaryIO) -> tuple[dict[str, Any], list[Any]]:
    """A frame's JSON header (at most HEADER_LIMIT bytes) and its tensor list, the payloads still unread."""
    (length,) = struct.unpack("<Q", _read_exactly(stream, _LENGTH.size))
    if length > HEADER_LIMIT:
        raise WireError(f"frame header of {length} bytes (limit {HEADER_LIMIT})")
    try:
        header = json.loads(_read_exactly(stream, length))
    except (ValueError, RecursionError) as exc:  # RecursionError: a header nested deeper than the parser goes
        raise WireError(f"frame header is not JSON ({str(exc)[:200]})") from None
    metas = header.get("tensors") if isinstance(header, dict) else None
    if not isinstance(metas, list):
        raise WireError("frame header has no tensor list")
    return header, metas


def read_frame(stream: BinaryIO, byte_budget: int) -> tuple[dict[str, Any], list[torch.Tensor]]:
    """One frame: its header and its tensors (CPU, in the layout the header gives).

    A tensor's storage must be exactly its elements (dense, no other bytes):
    anything else is a WireError, as is a frame whose payload exceeds
    ``byte_budget``.
    """
    import torch

    header, metas = _read_header(stream)
    checked = [_check_meta(meta) for meta in metas]
    if sum(nbytes for *_, nbytes in checked) > byte_budget:
        raise WireError(f"frame carries more than the {byte_budget} bytes expected")
    tensors = []
    for dtype, shape, strides, nbytes in checked:
        numel = 1
        for size in shape:
            numel *= size
        item = torch.empty((), dtype=dtype).element_size()
        if nbytes != numel * item or not _dense(shape, strides):
            raise WireError(f"a tensor of shape {shape} and strides {strides} in {nbytes} storage bytes "
                            "is not a dense tensor with storage of its own")
        flat = torch.frombuffer(bytearray(_read_exactly(stream, nbytes)), dtype=dtype) if nbytes else \
            torch.empty(0, dtype=dtype)
        tensors.append(flat.as_strided(shape, strides))
    return header, tensors
