"""Shared test set-up.

Triton kernels run under the interpreter on machines without a GPU; the
variable must be set before any kernel module is imported.

`backend_url` gives each test a fresh, empty database on every backend: an
SQLite file under tmp_path, and a new database on the Postgres server named by
REGISTRY_TEST_POSTGRES_URL (`make test` starts a throwaway one). Without a
server the Postgres cases skip, saying how to run them.
"""
import os
import uuid

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

PG_URL = os.environ.get("REGISTRY_TEST_POSTGRES_URL")
PG_SKIP = "no PostgreSQL: run `make test` (starts a throwaway server) or set REGISTRY_TEST_POSTGRES_URL"


def _fresh_postgres_database() -> str:
    import psycopg
    from sqlalchemy.engine import make_url

    base = make_url(PG_URL)
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    if not PG_URL:
        pytest.skip(PG_SKIP)
    return _fresh_postgres_database()


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path / 'registry.db'}"


@pytest.fixture
def postgres_url():
    if not PG_URL:
        pytest.skip(PG_SKIP)
    return _fresh_postgres_database()


@pytest.fixture
def registry_cli(tmp_path, sqlite_url):
    """Run `registry` through click's runner on a fresh, initialised SQLite registry.

    `registry_cli(*args, actor=...)` returns the click Result; `.url` and `.tmp`
    name the database and a scratch folder.
    """
    from click.testing import CliRunner

    from registry.cli.main import main

    runner = CliRunner()

    def invoke(*args, actor="reviewer"):
        return runner.invoke(main, ["--db", sqlite_url, "--actor", actor, *args])

    assert invoke("init").exit_code == 0
    invoke.url, invoke.tmp = sqlite_url, tmp_path
    return invoke
