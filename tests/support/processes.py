"""Child processes for the tests that race or kill real processes (tests/events/test_crash.py, tests/whole_path/test_concurrency.py).

Children are forked from one forkserver per test process that has imported
the store, the database layer and the app's evidence and decision paths
already: each starts clean (no inherited connections or threads, as with
spawn) without importing them again, which under spawn cost each of the
suite's ~60 racing children about half a second of CPU before it raced.
One list for both files: the forkserver starts once, with the preload set
when it starts, and every test module is imported before the first test runs.
"""
from __future__ import annotations

import multiprocessing

FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload([
    "registry.events.store", "registry.events.database", "registry.app", "registry.app.decisions",
    "registry.app.evidence", "registry.projections", "psycopg", "test_crash", "test_concurrency",
])
