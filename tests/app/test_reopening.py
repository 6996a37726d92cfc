"""Opening a registry again in the same process: the engine its last owner closed, never one that is open.

registry/events/database.py `release_engine`: a closed registry's engine,
its pool disposed of, is kept for the next open of the same database, so a
process that opens one registry again and again (each command of a test run
in process, a script, a job worker) compiles each statement once and asks
the database about itself once, not on every open. An engine is held by one
open registry at a time, and never crosses a fork.
"""
from __future__ import annotations

import os

from sqlalchemy import event
from sqlalchemy.engine.default import DefaultExecutionContext

from registry.app import open_registry


def compiled_anew(registry, read) -> int:
    """How many statements `read(registry)` had compiled (not found in the engine's statement cache)."""
    misses = []

    def count(conn, cursor, statement, parameters, context, executemany):
        if isinstance(context, DefaultExecutionContext) and context.compiled is not None:
            misses.append(context.cache_hit is context.cache_hit.CACHE_MISS)

    event.listen(registry.engine, "before_cursor_execute", count)
    try:
        read(registry)
    finally:
        event.remove(registry.engine, "before_cursor_execute", count)
    return sum(misses)


def a_whole_read(registry) -> None:
    with registry.view() as view:
        view.artifact("nobody")


def test_a_registry_opened_again_takes_the_engine_closed_before_and_compiles_nothing_again(migrated_sqlite_url):
    with open_registry(migrated_sqlite_url) as first:
        assert compiled_anew(first, a_whole_read) > 0  # a new engine compiles what it reads
    with open_registry(migrated_sqlite_url) as again:
        assert again.engine is first.engine
        assert compiled_anew(again, a_whole_read) == 0


def test_an_engine_is_never_held_by_two_open_registries(migrated_sqlite_url):
    with open_registry(migrated_sqlite_url) as one, open_registry(migrated_sqlite_url) as other:
        assert one.engine is not other.engine
    with open_registry(migrated_sqlite_url) as one, open_registry(migrated_sqlite_url) as other:
        assert one.engine is not other.engine  # two engines were given back; each goes to one owner


def test_a_registry_closed_twice_gives_its_engine_back_once(migrated_sqlite_url):
    registry = open_registry(migrated_sqlite_url)
    registry.close()
    registry.close()
    with open_registry(migrated_sqlite_url) as one, open_registry(migrated_sqlite_url) as other:
        assert one.engine is not other.engine
        assert registry.engine in (one.engine, other.engine)


def test_a_closed_engine_is_open_again_with_nothing_of_its_last_owner(migrated_sqlite_url):
    """Its pool was disposed of when it was given back: the next owner's reads and appends make connections
    of their own, and closing leaves none."""
    with open_registry(migrated_sqlite_url) as first:
        a_whole_read(first)
    assert first.engine.pool.checkedin() == first.engine.pool.checkedout() == 0
    with open_registry(migrated_sqlite_url) as again:
        a_whole_read(again)
        assert again.store.head_position() == 0
    assert again.engine.pool.checkedin() == again.engine.pool.checkedout() == 0


def test_a_forked_child_makes_its_own_engine(migrated_sqlite_url):
    with open_registry(migrated_sqlite_url) as parents:
        a_whole_read(parents)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the parent's idle engine must not be handed out here
        try:
            with open_registry(migrated_sqlite_url) as childs:
                a_whole_read(childs)
                answer = b"own" if childs.engine is not parents.engine else b"parent's"
        except BaseException as exc:  # noqa: BLE001 - the parent reports whatever the child met
            answer = repr(exc).encode()
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        said = answer.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert said == b"own"
    with open_registry(migrated_sqlite_url) as again:  # and the parent still takes its own back
        assert again.engine is parents.engine
