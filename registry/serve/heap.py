"""The C heap of a server process: two malloc arenas, and the pages a live read freed given back at once.

What a server process holds beyond its Python objects is mostly glibc's
heap, and glibc keeps what a request freed. Two of its habits make a
threaded server's memory climb long after its own allocations stopped
growing (docs/benchmarks.md, "Soak"):

- one malloc arena per thread that allocated while another held an arena
  (up to 8 a core): each request thread ends up with its own heap, and each
  heap keeps the high-water mark of the largest read that thread served, so
  the largest read is held once per thread, not once;
- freed memory in the middle of a heap is returned only by `malloc_trim`;
  a live view's read (`GET /api/live`, tens of MB for a moment while it
  decodes its page) leaves its pages freed but resident until the next read
  reuses them.

So a server process caps its arenas at MALLOC_ARENAS before its first thread
starts (`mallopt(M_ARENA_MAX)`), and gives its free pages back to the system
after each live read (`malloc_trim(0)`, 1 to 12 ms measured on a soak). On a
C library other than glibc, neither exists and both do nothing: the server
works the same, and only its memory is not so bounded.
"""
from __future__ import annotations

import ctypes
import platform
from functools import lru_cache

# The arenas a server process's threads share: one for the event loop's thread and one for the request threads.
# Fewer would make every request thread wait on one lock for each malloc; each more keeps one more read's high
# water.
MALLOC_ARENAS = 2
M_ARENA_MAX = -8  # glibc's malloc.h


@lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (whose mallopt and malloc_trim these are), else None."""
    if platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(None)


def limit_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap this process's malloc arenas at `arenas`; call it before the process starts a thread (an arena made
    already stays). Whether the C library took it."""
    libc = _glibc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, arenas) == 1


def give_back_free_pages() -> None:
    """Return to the system every whole page the C heap holds freed, in every arena (glibc's `malloc_trim(0)`)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
