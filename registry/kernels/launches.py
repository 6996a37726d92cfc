"""Launch counter: the execution signal for kernel candidates.

The registry refuses to credit an artifact that cannot show it ran (docs/architecture.md,
gate step 2: calls > 0, no fallbacks). A wrapper proves a launch by routing it
through :func:`launch`, which counts only after the launch returned without
raising; a wrapper that hands work back to the torch reference says so through
:func:`record_fallback`. A candidate that bypasses both is seen as never having
run, which is the fail-closed reading.
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tally:
    """Launches and fallbacks seen inside one :func:`counting` block."""

    launches: int = 0
    fallbacks: int = 0
    interpreted_launches: int = 0
    by_kernel: Counter = field(default_factory=Counter)


class LaunchCounter:
    """Process-wide counts, guarded by a lock so threaded callers stay exact."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[Tally] = []

    def _add(self, kernel: str, *, fallback: bool, interpreted: bool) -> None:
        with self._lock:
            for tally in self._open:
                if fallback:
                    tally.fallbacks += 1
                else:
                    tally.launches += 1
                    tally.interpreted_launches += int(interpreted)
                    tally.by_kernel[kernel] += 1

    @contextmanager
    def counting(self) -> Iterator[Tally]:
        tally = Tally()
        with self._lock:
            self._open.append(tally)
        try:
            yield tally
        finally:
            with self._lock:
                self._open.remove(tally)


COUNTER = LaunchCounter()


def kernel_name(kernel: Any) -> str:
    """The Python name of a ``@triton.jit`` function (compiled or interpreted)."""
    return getattr(getattr(kernel, "fn", kernel), "__name__", type(kernel).__name__)


def is_interpreted(kernel: Any) -> bool:
    """True when Triton decorated ``kernel`` for its interpreter (TRITON_INTERPRET at import)."""
    return type(kernel).__name__ == "InterpretedFunction"


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **meta: Any) -> None:
    """Launch ``kernel[grid](*args, **meta)`` and count it once it has returned."""
    kernel[grid](*args, **meta)
    COUNTER._add(kernel_name(kernel), fallback=False, interpreted=is_interpreted(kernel))


def record_fallback(kernel: str) -> None:
    """Record that a wrapper served a call with the reference instead of its kernel."""
    COUNTER._add(kernel, fallback=True, interpreted=False)


def counting() -> Any:
    """Context manager yielding a :class:`Tally` of launches made inside it."""
    return COUNTER.counting()
