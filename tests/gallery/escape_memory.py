"""Escape 16 (memory exhaustion): in its first call, reserve address space a GiB at a time until the
kernel refuses, and keep what it got. Reservations (MAP_NORESERVE, never touched) cost the machine no
memory, so this shows the bound without using it up; the same limit stops memory that is touched.
Where no limit applies it reserves until the address space or the map count runs out, and a kernel
that touched its memory would take the machine's."""
import mmap

GIB = 1 << 30
NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)  # Linux's value on x86_64 and aarch64
HELD = []


def modulated_layernorm(x, scale, shift):
    try:
        while True:
            HELD.append(mmap.mmap(-1, GIB, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | NORESERVE))
    except OSError as exc:
        raise MemoryError(f"reserved {len(HELD)} GiB, then: {exc.strerror}") from None
