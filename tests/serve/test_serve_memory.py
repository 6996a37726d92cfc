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


# How far into its first heap an arena's state starts: right after the heap's heap_info (a few words).
ARENA_STATE_WITHIN = 4096


def glibc_arenas(pid: int) -> int:
    """The malloc arenas of a process other than the main one, from its memory: glibc maps each arena's heaps as
    64 MiB regions aligned to 64 MiB (the part in use read-write, the rest reserved, `---p`), and each heap opens
    with its `heap_info`, whose first word is its arena's address. An arena whose first heap fills takes another
    heap, so heaps are counted by the arena they belong to, not one by one. An arena's state lies in its first
    heap, just after that heap's `heap_info`: a first word that does not point there is not an arena's, and a
    region that names none is some other mapping the same shape (an anonymous 64 MiB mapping that happens to be
    so aligned), not counted."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        low, high = (int(bound, 16) for bound in fields[0].split("-"))
        rows.append((low, high, fields[1], len(fields) > 5))
    heap = 64 << 20
    named_by: dict[int, int] = {}  # a heap-shaped region's start -> the first word it holds
    with open(f"/proc/{pid}/mem", "rb") as memory:
        for index, (low, high, mode, named) in enumerate(rows):
            if named or mode != "rw-p" or low % heap:
                continue
            following = rows[index + 1] if index + 1 < len(rows) else None
            if following and following[0] == high and following[2] == "---p" and not following[3]:
                high = following[1]
            if high - low == heap:
                memory.seek(low)
                named_by[low] = int.from_bytes(memory.read(8), "little")
    return len({arena for arena in named_by.values()
                if arena - arena % heap in named_by and arena % heap < ARENA_STATE_WITHIN})


@needs_glibc
def test_a_server_under_concurrent_requests_keeps_at_most_two_arenas(tmp_path):
    """Every request thread allocates; uncapped, each took an arena of its own (7 counted here). Arenas are
    counted by the address each heap names, so an arena that took a second heap still counts once."""
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
        assert glibc_arenas(server.process.pid) <= 1  # and the main arena


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


KEPT_CONTRACT = "workload: wan-kept\nspeed: {min_speedup: %s, runs_per_arm: 16, protocol: paired, max_pairs: 4000}\n"


def measured_registry(url: str, records: int, batches: int = 4, pairs: int = 50):
    """A registry of `records` artifacts, each with a speed record of `batches` batches of `pairs` pairs at the
    gate (undecided, so every record keeps moving as a soak's do); (registry, {artifact: session})."""
    from registry.app.bench import open_session
    from registry.app.workloads import declare_workload, register_artifact
    from registry.contracts import Contract
    from store_helpers import opened

    registry = opened(url, actor="t", create=True)
    declare_workload(registry, Contract.from_yaml(KEPT_CONTRACT % 1.2))
    sessions = {}
    for index in range(records):
        name = f"k{index}"
        register_artifact(registry, name, workload="wan-kept", kind="step_cache", payload_sha256=f"{index:064x}")
        sessions[name], _ = open_session(registry, name, "d", "perf_counter")
        for batch in range(batches):
            move(registry, name, sessions[name], f"b{batch}", pairs)
    return registry, sessions


def move(registry, artifact: str, session: str, batch: str, pairs: int = 2) -> None:
    from registry.app.bench import record_pairs

    record_pairs(registry, artifact, session, [2.4] * pairs, [2.0] * pairs, batch)


@pytest.fixture
def fresh_live(monkeypatch):
    """The live view's module with nothing kept from another test's reads."""
    from registry.serve import live

    monkeypatch.setattr(live, "FIGURES", live.PageFigures())
    monkeypatch.setattr(live, "RECORDS", live.PageRecords())
    return live


def test_a_live_read_decodes_and_draws_only_the_records_that_moved_since_the_last(sqlite_url, fresh_live,
                                                                                   monkeypatch):
    """Against the report's own figures: a record whose row has not moved since the last read is neither decoded
    nor drawn again; what the page shows is what a reader that kept nothing draws, after a batch and after the
    workload's contract is declared anew (the records' rows unchanged, their reading not)."""
    from registry.app.workloads import declare_workload
    from registry.contracts import Contract
    from registry.projections.view import View

    live = fresh_live
    registry, sessions = measured_registry(sqlite_url, records=3, batches=1, pairs=2)
    pages = []
    latest = View.latest
    monkeypatch.setattr(View, "latest", lambda view, *args, **kw: pages.append(latest(view, *args, **kw)) or pages[-1])

    def fresh_reader() -> dict:
        with monkeypatch.context() as fresh:
            fresh.setattr(live, "FIGURES", live.PageFigures())
            fresh.setattr(live, "RECORDS", live.PageRecords())
            return live.snapshot(registry)

    first = live.snapshot(registry)
    assert len(first["records"]) == 3 and pages[-1].unchanged == {} and len(pages[-1].moved) == 3
    move(registry, "k1", sessions["k1"], "b1")
    shown = live.snapshot(registry)
    assert pages[-1].moved == [shown["records"][0]["record"]]  # k1's, decoded
    assert len(pages[-1].unchanged) == 2
    assert shown == fresh_reader()
    figures, _ = live.FIGURES.held()
    assert (figures, live.RECORDS.held()) == (2, 3)  # the scatter and k1's new figure drawn; the page's 3 records
    declare_workload(registry, Contract.from_yaml(KEPT_CONTRACT % 1.1))
    redeclared = live.snapshot(registry)
    assert pages[-1].unchanged == {} and len(pages[-1].moved) == 3
    assert redeclared == fresh_reader()
    assert redeclared["records"] != shown["records"]  # read against the new gate


def test_a_kept_record_whose_row_was_changed_is_refused_as_any_damaged_row(sqlite_url, fresh_live):
    """A record left undecoded is still checked: its state against its row hash, and its head."""
    import sqlite3

    from registry.projections.errors import DamagedReadModel

    registry, _ = measured_registry(sqlite_url, records=2, batches=1, pairs=2)
    fresh_live.snapshot(registry)
    database = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with database:
        assert database.execute("UPDATE projection_speed_records SET state = replace(state, '2.4', '9.4') "
                                "WHERE record LIKE '%' || ?", (f"{1:064x}",)).rowcount == 1
    with pytest.raises(DamagedReadModel, match="does not hash to its row_hash"):
        fresh_live.snapshot(registry)
    with database:
        assert database.execute("UPDATE projection_speed_records SET state = replace(state, '9.4', '2.4') "
                                "WHERE record LIKE '%' || ?", (f"{1:064x}",)).rowcount == 1
        assert database.execute("UPDATE projection_record_heads SET last_position = last_position - 1 "
                                "WHERE record LIKE '%' || ?", (f"{0:064x}",)).rowcount == 1
    database.close()
    with pytest.raises(DamagedReadModel, match="its head at"):
        fresh_live.snapshot(registry)


def traced_peak(read) -> int:
    """The most bytes of Python objects `read()` held at once (tracemalloc)."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_live_reads_working_set_is_what_moved_not_how_full_the_page_is(sqlite_url, fresh_live):
    """A read after one record moved holds at its peak about what one record's decoding and one figure's drawing
    take, with a page of 2 records of 200 pairs as with one of 12. Measured: 1.31 and 1.30 MB; when every read
    decoded all of its page's records, 1.41 and 2.26 MB. Bounded here at 3 MB."""
    registry, sessions = measured_registry(sqlite_url, records=12)
    live = fresh_live
    peaks = {}
    for shown in (2, 12):
        live.snapshot(registry, most_plots=shown)
        move(registry, "k11", sessions["k11"], f"m{shown}")
        peaks[shown] = traced_peak(lambda: live.snapshot(registry, most_plots=shown))
    assert peaks[12] <= peaks[2] * 1.25 + 64 * 1024, peaks
    assert peaks[12] < 3 * 2**20, peaks


def test_a_figure_the_live_view_draws_is_freed_when_drawn_not_at_the_next_full_collection(sqlite_url, fresh_live):
    """A matplotlib figure and its canvas (the Agg renderer's pixel buffer) refer to each other; left to the
    collector's schedule, the figures of a page stayed resident until a full collection (21 MB for 48)."""
    import gc

    from matplotlib.figure import Figure

    registry, _ = measured_registry(sqlite_url, records=4, batches=1, pairs=2)
    gc.collect()
    fresh_live.snapshot(registry)
    assert fresh_live.FIGURES.held()[0] == 5  # the scatter and four records' figures drawn
    assert [found for found in gc.get_objects() if type(found) is Figure] == []


def test_a_figure_is_drawn_once_when_saved(monkeypatch):
    """`tight_layout` leaves a placeholder layout engine on the figure, and `savefig` draws a figure with any engine
    once more before it renders it: a second draw of every figure the live view and the pages make, for nothing."""
    from matplotlib.figure import Figure
    from registry.projections.plots import running_bounds_plot

    draws, draw = [], Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda figure, renderer: (draws.append(figure), draw(figure, renderer))[1])
    bounds = [(None, None)] * 3 + [(1.0 + index / 1000, 2.0 - index / 1000) for index in range(20)]
    plot = running_bounds_plot({"running_bounds": bounds, "level": 0.99, "gate": 1.2, "decided_at": None,
                                "reading": "undecided", "shows": "undecided", "artifacts": ["k1"],
                                "payload_sha256": "a" * 64, "alpha": 0.001, "pairs": 23, "sessions": ["s"],
                                "documents": 1, "stop": "not yet"})
    assert plot.png.startswith(b"\x89PNG") and len(draws) == 1
