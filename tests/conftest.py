"""Shared test set-up.

Triton kernels run under the interpreter on machines without a GPU; the
variable must be set before any kernel module is imported.

`backend_url` gives each test a fresh, empty database on every backend: an
SQLite file under tmp_path, and a new database on the Postgres server named by
REGISTRY_TEST_POSTGRES_URL (`make test` starts a throwaway one). Without a
server the Postgres cases skip, saying how to run them. `migrated_sqlite_url`,
`migrated_postgres_url`, `migrated_backend_url` (either, as `backend_url`) and
`registry_cli` give a fresh registry at this code's schema head: a copy of a template migrated once per worker process (a file copy for SQLite, CREATE
DATABASE ... TEMPLATE for Postgres), since migrating costs each test about
three times what copying does.

Parallel runs (pytest-xdist, `make test` runs `-n auto`): every worker shares
the one Postgres server and creates its own databases under unique names,
and its own files under its own tmp_path; the skip summary and strict mode
count the skips every worker reports, on the controller.

Order: the files whose tests take longest (LONGEST_FIRST, named with why in
docs/benchmarks.md, "The suite") are collected first, the rest in their own
order. Under `--dist loadfile --no-loadscope-reorder` (scripts/run_tests.sh)
xdist hands files out in this order, so no long file starts last while the
other worker has nothing left to do (xdist's own order, most tests first,
left the two-test stateful file to the end).

Process-wide state: every test must leave torch's thread count, os.environ
and the functions of `torch` and `torch.nn.functional` as it found them (a
leak would change what later modules measure: a gallery candidate imported
into a test's own process once slowed every later `F.layer_norm` of its
worker by a second); `no_leaked_process_state` restores them and fails the
test that leaked.

The cyclic garbage collector runs less often in a test process than Python's default (`CYCLIC_GC_THRESHOLDS`):
a worker holds torch, Hypothesis and every test module, and at the default thresholds it spent about 13% of
its CPU scanning them (5.7 of 42.6 CPU-s over the stateful, fuzzing and registration files; 1.9 at these),
and importing torch took about 0.3 CPU-s more. Each test process also does its torch work on one thread (below),
and numpy's BLAS in one (`OPENBLAS_NUM_THREADS`, inherited by the processes a test starts).
No test depends on when a collection runs: the ones that count objects or memory call `gc.collect()` first.

Skips: at the end of every run a summary lists what was skipped and why. With
REGISTRY_TEST_STRICT=1 (what CI sets) any skip fails the run, except a test
marked `device`: it needs the other kind of machine (a CUDA GPU, or the CPU
interpreter) and is reported as skipped for lack of that device.
"""
import gc
import os
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path

CYCLIC_GC_THRESHOLDS = (10_000, 20, 20)  # Python's default: (700, 10, 10); set before torch is imported
gc.set_threshold(*CYCLIC_GC_THRESHOLDS)
# numpy's OpenBLAS starts a thread per core when numpy is imported (torch imports it), and each spins waiting for
# work before it sleeps: a run under `perf record -a` put 1.3% of its samples in `blas_thread_server`, spread over
# every process that imports numpy. One thread in the test processes and in every process they start (which
# inherit it); a user's own setting is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import settings  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# One torch thread in a test process: `make test` runs one worker per core, and a worker's torch ops would
# otherwise start a thread per core whose waits spin on the cores the other worker needs (about 17% more CPU
# over the evidence, workload and kernel files). The processes a test starts keep torch's own default.
torch.set_num_threads(1)

STRICT_ENV = "REGISTRY_TEST_STRICT"
STRICT = os.environ.get(STRICT_ENV) == "1"

# No example has a deadline, on any run: Hypothesis fails an example that takes longer than its deadline (200 ms
# unless a test sets one) by the wall clock, so a loaded machine, a pause of the process or a first example's
# imports would fail a property that holds; and a test with no deadline gets 30 s, not 1 s, of drawing before
# HealthCheck.too_slow fails it. How fast the code is is measured in benchmarks, not here.
# Hypothesis draws its examples at random on a developer's run, to find what nobody wrote down; CI draws the same
# examples on every run of one commit (`derandomize`, no example database), so its verdict on a commit is the
# commit's, never the draw's. A case a random run finds is kept as an `@example` beside its test.
# (Loaded before any test module is imported: a test's own `settings(...)` takes the profile's values it does not set.)
settings.register_profile("suite", deadline=None)
settings.register_profile("ci", settings.get_profile("suite"), derandomize=True, database=None, print_blob=True)
settings.load_profile("ci" if STRICT else "suite")
_SKIPPED: list[tuple[str, str, bool]] = []  # (test id, reason, skipped for lack of a device)
PYTEST_OWN_VARIABLE = "PYTEST_CURRENT_TEST"  # pytest sets it around each test phase itself


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != PYTEST_OWN_VARIABLE}


_PATCHABLE = (torch, torch.nn.functional)


def _namespaces() -> list[dict[str, object]]:
    # A plain copy of each namespace (callable() on its thousand names doubled a trivial test's overhead): which
    # of the names that changed were functions is asked only of those, after the test.
    return [dict(vars(module)) for module in _PATCHABLE]


class EnginesMade:
    """Every engine the registry's code made (`registry.events.database.make_engine`) during the current test.

    Held here until the test ends, so an engine a test left open is not
    disposed of by the garbage collector behind its back (which on SQLite
    checkpoints the write-ahead log into the file at a moment nobody chose),
    but reported: one whose pool still holds a connection was never closed.
    """

    def __init__(self) -> None:
        from registry.events import database

        self.made: list = []
        self.watching = False
        made_by_sqlalchemy = database.create_engine

        def create_engine(*args, **kwargs):
            engine = made_by_sqlalchemy(*args, **kwargs)
            if self.watching:
                self.made.append(engine)
            return engine

        database.create_engine = create_engine

    def left_open(self) -> int:
        """How many still hold a connection; each is disposed of now, so no leak outlives the test that made it."""
        made, self.made = self.made, []
        left = [engine for engine in made if engine.pool.checkedin() or engine.pool.checkedout()]
        for engine in left:
            engine.dispose()
        return len(left)


ENGINES = EnginesMade()


@pytest.fixture(autouse=True)
def closes_what_it_opened():
    """Fail a test that left a registry open: a registry is closed (`with open_registry(...)`, Registry.close),
    an engine disposed of, by whoever opened it (docs/architecture.md, "What is opened is closed"); the ones the
    helpers of store_helpers.py open are closed here, before the check."""
    from registry.events.database import forget_idle_engines

    # a closed registry's engine is kept for the next open of its database (release_engine): none crosses from
    # one test to another, so every engine a test uses was made, and is counted, in it
    forget_idle_engines()
    ENGINES.watching = True
    yield
    helpers = sys.modules.get("store_helpers")  # imported by the tests that use it
    if helpers is not None:
        helpers.close_opened()
    ENGINES.watching = False
    forget_idle_engines()
    left = ENGINES.left_open()
    if left:
        pytest.fail(f"the test left {left} database engine(s) open: close every registry it opened "
                    "(`with open_registry(...)`, Registry.close) and dispose of every engine it made", pytrace=False)


@pytest.fixture(autouse=True)
def no_leaked_process_state():
    """Fail a test that changed torch's thread count, os.environ or a torch function, after putting them back."""
    threads, environment, namespaces = torch.get_num_threads(), _environment(), _namespaces()
    yield
    leaks = []
    for module, before in zip(_PATCHABLE, namespaces):
        now = vars(module)
        replaced = sorted(name for name, value in before.items() if now.get(name) is not value and callable(value))
        if replaced:
            leaks.append(f"{module.__name__} functions {', '.join(replaced)}")
            for name in replaced:
                setattr(module, name, before[name])
    if torch.get_num_threads() != threads:
        leaks.append(f"torch threads {threads} -> {torch.get_num_threads()}")
        torch.set_num_threads(threads)
    now = _environment()
    if now != environment:
        changed = sorted(k for k in set(environment) | set(now) if environment.get(k) != now.get(k))
        leaks.append(f"environment variables {', '.join(changed)}")
        for name in set(now) - set(environment):
            del os.environ[name]
        os.environ.update(environment)
    if leaks:
        pytest.fail("the test leaked process-wide state (restored now): " + "; ".join(leaks), pytrace=False)


def _skip_reason(report) -> str:
    # A report that crossed from an xdist worker may carry its (path, line, message) as a list.
    reason = report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
    return reason.removeprefix("Skipped: ")


DEVICE_BOUND = "skipped_for_lack_of_a_device"  # a user property: it travels with the report from an xdist worker


# The process that prints the summary records the skips: the only one, or an xdist run's controller, which
# receives every worker's reports (a worker runs with PYTEST_XDIST_WORKER set).
RECORDS_SKIPS = "PYTEST_XDIST_WORKER" not in os.environ


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.skipped:
        report.user_properties.append((DEVICE_BOUND, item.get_closest_marker("device") is not None))


def pytest_runtest_logreport(report):
    if report.skipped and not hasattr(report, "wasxfail") and RECORDS_SKIPS:
        _SKIPPED.append((report.nodeid, _skip_reason(report), dict(report.user_properties).get(DEVICE_BOUND, False)))


def pytest_collectreport(report):
    """A whole module skipped at import (importorskip, allow_module_level): never device-bound."""
    if report.skipped and RECORDS_SKIPS:
        _SKIPPED.append((report.nodeid, _skip_reason(report), False))


def _refused_skips() -> list[tuple[str, str, bool]]:
    return [skip for skip in _SKIPPED if not skip[2]] if STRICT else []


def pytest_sessionfinish(session, exitstatus):
    if PG_URL:
        _drop_the_rest()
    if _refused_skips() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write = terminalreporter.write_line
    if not _SKIPPED:
        write(f"no test was skipped{' (strict)' if STRICT else ''}")
        return
    terminalreporter.section("skipped tests, by reason")
    for (reason, device), count in sorted(Counter((r, d) for _, r, d in _SKIPPED).items()):
        kind = "for lack of a device" if device else ("FAILS THE RUN (strict)" if STRICT else "skipped")
        write(f"{count:4d} {kind}: {reason}")
    refused = _refused_skips()
    if refused:
        write(f"{STRICT_ENV}=1: {len(refused)} skipped tests fail the run; first: {refused[0][0]}", red=True)
    elif not STRICT:
        write(f"(with {STRICT_ENV}=1, as CI runs, any skip not marked `device` fails the run)")


# Longest first (seconds per file on the 2-core machine: docs/benchmarks.md, "The suite").
LONGEST_FIRST = (
    "test_demo.py", "test_serve_fuzz.py", "test_escape_gallery.py", "test_lifecycle_stateful.py", "test_jobs.py",
    "test_sandbox.py", "test_kernel_build.py", "test_serve_stateful.py", "test_suite_guards.py",
    "test_hostile_bundles.py", "test_speed_gate.py", "test_serve_worker.py", "test_monitor_lifecycle.py",
    "test_payload_index.py", "test_concurrency.py", "test_crash.py", "test_cheat_gallery.py", "test_evaluate_runner.py",
    "test_final_rejection.py", "test_pg_throwaway.py", "test_ship_stateful.py",
)


def pytest_collection_modifyitems(items):
    first = {name: rank for rank, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: each file's tests keep their order


PG_URL = os.environ.get("REGISTRY_TEST_POSTGRES_URL")
PG_SKIP = "no PostgreSQL: run `make test` (starts a throwaway server) or set REGISTRY_TEST_POSTGRES_URL"


def _postgres_admin_url() -> str:
    from sqlalchemy.engine import make_url

    return make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


def _fresh_postgres_database(template: str | None = None) -> str:
    """A new database under a name no other test or worker uses; a copy of `template` when one is named.

    Every database made here is dropped: by the fixture that made it once its test ends (`_dropped_after`), and
    whatever is left (a module's or the session's) when the worker's session ends (`pytest_sessionfinish`).
    """
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"t_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(_postgres_admin_url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    _CREATED.append(name)
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


# The Postgres databases this process made and has not dropped yet, in the order made.
_CREATED: list[str] = []


class _Dropper:
    """Drops this worker's finished databases on a thread of its own, so no test waits for a DROP DATABASE.

    A run leaves no database behind: a throwaway server torn down with hundreds of them spent minutes deleting
    their files after the last test (docs/benchmarks.md, "The suite"). `WITH (FORCE)` ends any connection a
    test left open.
    """

    def __init__(self) -> None:
        import queue
        import threading

        self.pending: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._drop_each, name="drop-databases", daemon=True)
        self.thread.start()

    def _drop_each(self) -> None:
        while (name := self.pending.get()) is not None:
            _drop_database(name)

    def finish(self) -> None:
        self.pending.put(None)
        self.thread.join()


def _drop_database(name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(_postgres_admin_url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except psycopg.Error:  # a template still being copied by a test: the session's end drops it
        return
    if name in _CREATED:
        _CREATED.remove(name)


_DROPPER: _Dropper | None = None


def _drop_later(url: str) -> None:
    """Hand a finished test's database to the dropper thread."""
    global _DROPPER
    from sqlalchemy.engine import make_url

    if _DROPPER is None:
        _DROPPER = _Dropper()
    _DROPPER.pending.put(make_url(url).database)


def _drop_the_rest() -> None:
    """At a worker's end: the dropper's queue drained, then every database of this process still standing."""
    if _DROPPER is not None:
        _DROPPER.finish()
    for name in list(reversed(_CREATED)):  # copies before the templates they were made from
        _drop_database(name)


def _migrated(url: str) -> None:
    from registry.events.database import make_engine, upgrade

    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()  # SQLite folds its WAL back into the file; Postgres may copy a database nobody is connected to


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A SQLite registry at the schema head, migrated once per worker process, for tests to copy."""
    path = tmp_path_factory.mktemp("template") / "registry.db"
    _migrated(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_template() -> str:
    """The name of a Postgres database at the schema head, migrated once per worker process, for tests to copy."""
    from sqlalchemy.engine import make_url

    if not PG_URL:
        pytest.skip(PG_SKIP)
    url = _fresh_postgres_database()
    _migrated(url)
    return make_url(url).database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    if not PG_URL:
        pytest.skip(PG_SKIP)
    url = _fresh_postgres_database()
    yield url
    _drop_later(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated_backend_url(request, tmp_path):
    """As `backend_url`, at the schema head: a copy of the worker's migrated template on either backend."""
    if request.param == "sqlite":
        return request.getfixturevalue("migrated_sqlite_url")
    return request.getfixturevalue("migrated_postgres_url")


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
def migrated_sqlite_url(tmp_path, sqlite_template):
    """A fresh SQLite registry at the schema head (what `registry init` makes), copied from the template."""
    path = tmp_path / "registry.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def postgres_database_for_a_test(template: str | None = None):
    """A fixture's body: a new database for one test (a copy of `template` when one is named), dropped once the
    test ends; the test skips where no server is given."""
    if not PG_URL:
        pytest.skip(PG_SKIP)
    url = _fresh_postgres_database(template)
    yield url
    _drop_later(url)


@pytest.fixture
def postgres_url():
    yield from postgres_database_for_a_test()


@pytest.fixture
def migrated_postgres_url(postgres_template):
    """A fresh Postgres registry at the schema head, a copy of the worker's template database."""
    yield from postgres_database_for_a_test(postgres_template)


@pytest.fixture
def registry_cli(tmp_path, migrated_sqlite_url):
    """Run `registry` through click's runner on a fresh, initialised SQLite registry (a copy of the template).

    `registry_cli(*args, actor=...)` returns the click Result; `.url` and `.tmp`
    name the database and a scratch folder.
    """
    from click.testing import CliRunner

    from registry.cli.main import main

    runner = CliRunner()

    def invoke(*args, actor="reviewer"):
        return runner.invoke(main, ["--db", migrated_sqlite_url, "--actor", actor, *args])

    invoke.url, invoke.tmp = migrated_sqlite_url, tmp_path
    return invoke
