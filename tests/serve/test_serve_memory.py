"""What a server process keeps in memory under load: its C heap (serve/heap.py) and the live view's figures
(serve/live.py `PageFigures`), the bounds docs/serve.md states ("Limits") and the soak measures
(docs/benchmarks.md, "Soak").

The heap's cases run a child process each (a process's arenas and pages are what they measure), one of them a
real `registry serve` process: a few seconds in all.
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from serve_helpers import ServerProcess, seed

GLIBC = platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="the heap's bounds are glibc's (mallopt, malloc_trim)")

# A child that starts THREADS threads allocating at once (each thread's first malloc takes an arena of its own
# while the cap allows) and prints how many heaps glibc then has (malloc_info's `<heap nr=...>`).
ARENAS_CHILD = """
import ctypes, os, sys, tempfile, threading
from registry.serve.heap import limit_arenas
if sys.argv[1] == "capped":
    assert limit_arenas()
libc = ctypes.CDLL(None)
barrier = threading.Barrier(8)
def allocate():
    held = [bytearray(4096) for _ in range(64)]
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
libc.fopen.restype = ctypes.c_void_p
path = os.path.join(tempfile.mkdtemp(), "malloc_info.xml")
stream = ctypes.c_void_p(libc.fopen(path.encode(), b"w"))
libc.malloc_info(0, stream)
libc.fclose(stream)
print(open(path).read().count("<heap nr="))
"""

# A child that fills the heap with 64 MiB of 64 KiB blocks (below glibc's mmap threshold: all from the heap),
# frees every one but the last (which keeps the heap's top, so free() alone returns nothing), and prints its
# resident memory in KiB before and after `give_back_free_pages`.
TRIM_CHILD = """
import ctypes
from registry.serve.heap import give_back_free_pages
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
def rss():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:"))
blocks = [libc.malloc(65536) for _ in range(1024)]
for block in blocks:
    ctypes.memset(block, 1, 65536)
for block in blocks[:-1]:
    libc.free(ctypes.c_void_p(block))
before = rss()
give_back_free_pages()
print(before, rss())
"""


def child(source: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", source, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@needs_glibc
def test_a_server_process_caps_its_malloc_arenas_so_no_thread_keeps_a_heap_of_its_own():
    """Uncapped, eight threads allocating at once make eight heaps or more (one each, up to 8 a core), each
    keeping the high water of what its thread did; capped, they share two."""
    assert int(child(ARENAS_CHILD, "uncapped")) > 2
    assert int(child(ARENAS_CHILD, "capped")) <= 2


@needs_glibc
def test_pages_freed_in_the_middle_of_the_heap_go_back_to_the_system():
    before, after = map(int, child(TRIM_CHILD).split())
    assert before - after >= 48 * 1024, (before, after)  # of the 64 MiB freed, whole pages go back


def glibc_heaps(pid: int) -> int:
    """The heaps of a process's malloc arenas other than the main one, from its memory map: glibc maps each as
    one 64 MiB region aligned to 64 MiB, the part in use read-write and the rest reserved (`---p`)."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        rows.append((low, high, fields[1], len(fields) > 5))
    heap = 64 << 20
    found = 0
    for index, (low, high, mode, named) in enumerate(rows):
        if named or mode != "rw-p" or low % heap:
            continue
        following = rows[index + 1] if index + 1 < len(rows) else None
        if following and following[0] == high and following[2] == "---p" and not following[3]:
            high = following[1]
        found += high - low == heap
    return found


@needs_glibc
def test_a_server_under_concurrent_requests_keeps_at_most_two_arenas(tmp_path):
    """Every request thread allocates; uncapped, each took an arena of its own (7 heaps counted here). The reads
    are small ones: an arena whose heap fills gets a second heap, which would count here as another arena."""
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    seeded = seed(url)
    with ServerProcess(url) as server:
        def read() -> None:
            with server.client(seeded.tokens["read"]) as client:
                for _ in range(8):
                    assert client.get("/api/artifacts/wan-fast").status_code == 200
                    assert client.get("/api/history/wan-fast?limit=20").status_code == 200

        readers = [threading.Thread(target=read) for _ in range(8)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        assert glibc_heaps(server.process.pid) <= 1  # and the main arena


class Drawer:
    """A figure drawer that counts what it draws (the figures themselves are the report's: html_report.py)."""

    def __init__(self, size: int = 100):
        self.size, self.drawn = size, []

    def __call__(self, kind: str, inputs: str) -> str:
        self.drawn.append((kind, inputs))
        return "x" * self.size


def test_the_figures_kept_are_the_last_pages_not_every_content_ever_drawn():
    from registry.serve.live import PageFigures

    drawer = Drawer()
    figures = PageFigures(draw=drawer)
    for read in range(20):  # each read: two records that never move, one whose figure moves every read
        for inputs in ("a", "b", json.dumps({"pairs": read})):
            figures.figure("bounds", inputs)
        figures.read_done()
    assert len(drawer.drawn) == 2 + 20  # drawn once per content
    assert figures.held() == (3, 300)  # the last page's three, not the 22 contents drawn
    figures.figure("bounds", "a")
    assert len(drawer.drawn) == 22


def test_figures_past_the_byte_bound_are_drawn_and_not_kept():
    from registry.serve.live import PageFigures

    drawer = Drawer(size=40)
    figures = PageFigures(most_bytes=100, draw=drawer)
    for read in range(3):
        for name in "abcd":
            assert figures.figure("bounds", name) == "x" * 40
            assert figures.held()[1] <= 100
        figures.read_done()
    assert figures.held() == (2, 80)
    assert len(drawer.drawn) == 2 + 2 * 3  # two kept across reads, two drawn on every read


def test_a_live_read_keeps_the_figures_of_its_page(sqlite_url, monkeypatch):
    """Against the report's own figures: after reads between which a record moved, what the server keeps is
    the page's figures (the scatter and each record's running bounds), not the figure drawn before the move."""
    from registry.app.bench import open_session, record_pairs
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract
    from registry.serve import live
    from store_helpers import opened

    monkeypatch.setattr(live, "FIGURES", live.PageFigures())
    registry = opened(sqlite_url, actor="t", create=True)
    declare_workload(registry, Contract.from_yaml(
        "workload: wan-kept\nspeed: {min_speedup: 1.2, runs_per_arm: 16, protocol: paired, max_pairs: 64}\n"))
    sessions = {}
    for name in ("k0", "k1"):
        register_artifact(registry, name, workload="wan-kept", kind="step_cache", payload_sha256=name[1] * 64)
        sessions[name], _ = open_session(registry, name, "d", "perf_counter")
        record_pairs(registry, name, sessions[name], [2.4, 2.4], [2.0, 2.0], "b0")  # at the gate: undecided
    for batch in range(1, 4):  # k1's record moves between reads: its figure is drawn again each time
        shown = live.snapshot(registry)
        record_pairs(registry, "k1", sessions["k1"], [2.4, 2.4], [2.0, 2.0], f"b{batch}")
    shown = live.snapshot(registry)
    assert len(shown["records"]) == 2
    kept, kept_bytes = live.FIGURES.held()
    assert kept == 1 + len(shown["records"])
    assert kept_bytes == len(shown["speed_fidelity"]) + sum(len(record["figure"]) for record in shown["records"])
