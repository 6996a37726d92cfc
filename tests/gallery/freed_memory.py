"""Technique 1: the output is whatever the allocator hands back, hoping it still holds the reference's answer.

GPU form (tests/kernels/test_cheat_gallery_gpu.py): the same request on torch's
CUDA caching allocator, which keeps freed blocks itself and hands the block
just freed to the next request of its size (KernelBench's allocator cheat);
the CPU allocator installed below is not involved there.

CPU form. The harness before the isolation change computed the reference's
output first and kept it while it called the candidate; what the reference
had freed by then is its fp32 result (registry.kernels.reference computes in
fp32 and casts to the activation dtype at the end). glibc's malloc writes its
free-list pointers into a freed block and splits it for the next request of
any size (the harness's copies of the inputs took it), so a bare
``torch.empty_like`` found the answer in 1 of 4 cases at best. This candidate
therefore brings its own caching allocator: on import it installs one as
torch's CPU allocator (``c10::SetCPUAllocator`` through ctypes). Freed
blocks stay with it, whole, kept by size; a request gets the freed block of
its size that was handed out most recently. ``torch.empty`` of the input's
shape in fp32 thus returns the reference's freed result, and the candidate
rounds it to the activation dtype, the reference's own last step: none of
the op's arithmetic runs here. The one Triton launch is for the launch
counter. Against that harness it passed parity byte-equal on all 4 corpus
cases in each of 5 runs (12 counted launches, no fallbacks).

A freed block is marked by glibc's ``sem_post`` on a counter beside it,
called by torch as the block's deleter: no Python runs when a block is
freed, so frees from other threads or at interpreter exit are safe.
"""
import ctypes
import os

import torch

from gallery._shared import launch_nothing

_LIBC = ctypes.CDLL("libc.so.6")
_LIBC.posix_memalign.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_size_t]
_LIBC.calloc.restype = ctypes.c_void_p
_LIBC.calloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t]
_LIBC.sem_getvalue.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
_LIBC.sem_trywait.argtypes = [ctypes.c_void_p]
_SEM_POST = ctypes.cast(_LIBC.sem_post, ctypes.c_void_p).value
_SEM_T_BYTES = 32          # sizeof(sem_t) on 64-bit glibc; all zeros is a semaphore at 0
_ALIGNMENT = 64            # c10::gAlignment
_CPU_DEVICE = 0xFF00       # c10::Device{DeviceType::CPU, index -1}

# size in bytes -> blocks [last handed out, data, freed counter]; never given back to glibc
_BLOCKS: dict[int, list[list[int]]] = {}
_HANDED_OUT = 0


def _was_freed(counter: int) -> bool:
    value = ctypes.c_int()
    _LIBC.sem_getvalue(counter, ctypes.byref(value))
    return value.value > 0


def _block(nbytes: int) -> list[int]:
    """The freed block of ``nbytes`` handed out most recently, else a new one."""
    blocks = _BLOCKS.setdefault(nbytes, [])
    for block in sorted(blocks, reverse=True):
        if _was_freed(block[2]):
            _LIBC.sem_trywait(block[2])
            return block
    data = ctypes.c_void_p()
    if _LIBC.posix_memalign(ctypes.byref(data), _ALIGNMENT, nbytes) != 0:
        raise MemoryError(f"posix_memalign of {nbytes} bytes failed")
    block = [0, data.value, _LIBC.calloc(1, _SEM_T_BYTES)]
    blocks.append(block)
    return block


def _allocate(data_ptr_out: int, _allocator: int, nbytes: int) -> None:
    """``c10::DataPtr Allocator::allocate(size_t)``: the DataPtr is written to the caller's slot.

    Its words are data, deleter, deleter context, device (libstdc++'s
    unique_ptr stores the deleter before the pointer).
    """
    global _HANDED_OUT
    out = (ctypes.c_uint64 * 4).from_address(data_ptr_out)
    if nbytes == 0:
        out[0], out[1], out[2], out[3] = 0, _SEM_POST, 0, _CPU_DEVICE
        return
    block = _block(nbytes)
    _HANDED_OUT += 1
    block[0] = _HANDED_OUT
    out[0], out[1], out[2], out[3] = block[1], _SEM_POST, block[2], _CPU_DEVICE


def _install() -> None:
    """Make an allocator object whose vtable is torch's CPU allocator's with ``allocate`` replaced."""
    c10 = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so"))
    get_cpu_allocator = c10._ZN3c1015GetCPUAllocatorEv
    get_cpu_allocator.restype = ctypes.c_void_p
    set_cpu_allocator = c10._ZN3c1015SetCPUAllocatorEPNS_9AllocatorEh
    set_cpu_allocator.argtypes = [ctypes.c_void_p, ctypes.c_uint8]
    vtable = ctypes.c_void_p.from_address(get_cpu_allocator()).value
    # offset to top, type info, then ~Allocator x2, allocate, is_simple_data_ptr, raw_deleter, copy_data
    table = (ctypes.c_void_p * 8)(*(ctypes.c_void_p * 8).from_address(vtable - 16))
    table[4] = ctypes.cast(_ALLOCATE, ctypes.c_void_p).value
    allocator = (ctypes.c_void_p * 1)(ctypes.addressof(table) + 16)
    _KEEP.extend((table, allocator))
    set_cpu_allocator(ctypes.addressof(allocator), 255)


_ALLOCATE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)(_allocate)
_KEEP: list = []
_install()


def modulated_layernorm(x, scale, shift):
    freed_reference_result = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    launch_nothing(x)
    return freed_reference_result.to(x.dtype)
