"""scripts/pg_throwaway.sh: the server binds its port itself and moves on when the port is taken.

The script never probes for a free port and releases it (another process
could take it in between): it lets PostgreSQL bind a candidate port and
tries the next one when the bind fails. Here the first candidate is taken
on purpose, by seeding bash's RANDOM, so the retry happens by construction.
"""
from __future__ import annotations

import errno
import re
import socket
import subprocess

import psycopg
import pytest

from limits import HANG_GUARD_S
from paths import ROOT

SCRIPT = ROOT / "scripts" / "pg_throwaway.sh"
SEED = 4242


def bash(commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source {SCRIPT}; RANDOM={SEED}; {commands}"], capture_output=True,
                          text=True, timeout=HANG_GUARD_S)


def test_a_taken_port_is_skipped_and_the_server_binds_another():
    if not bash("_pg_bindir").stdout.strip():
        pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin): `make test` installs them as root")
    taken = int(bash("_pg_next_port; echo $port").stdout)
    with socket.socket() as holder:
        # SO_REUSEADDR as PostgreSQL sets it: a connection of an earlier run left in TIME_WAIT on this port (the
        # seed makes it the same port every run) must not stop this bind, since it would not stop the server's
        # and the port would then not be taken. A listener of another process does stop it: just as good.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            holder.bind(("127.0.0.1", taken))
            holder.listen()
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE, exc
        # The server is stopped by the script's EXIT trap when this shell ends, after the query.
        done = bash("pg_throwaway_start && echo \"URL=$REGISTRY_TEST_POSTGRES_URL\" && "
                    "\"$(_pg_bindir)/psql\" \"${REGISTRY_TEST_POSTGRES_URL/+psycopg/}\" -tAc 'select 1'")
    assert done.returncode == 0, done.stderr
    assert f"port {taken} is taken; trying another" in done.stderr
    url = re.search(r"^URL=(\S+)$", done.stdout, re.M).group(1)
    port = int(re.search(r"@127\.0\.0\.1:(\d+)/", url).group(1))
    assert port != taken and done.stdout.rstrip().endswith("1")
    with pytest.raises(psycopg.OperationalError):  # stopped and removed on exit
        psycopg.connect(url.replace("+psycopg", ""), connect_timeout=5)


def test_a_run_drops_every_database_it_made_and_the_server_goes_at_once():
    """Tests drop their databases as they go (tests/conftest.py), so tearing the server down is quick.

    A pytest run of two Postgres tests (a fresh database, and a copy of the migrated template) against a
    throwaway server of its own: afterwards the server holds no database the run made (a run used to leave
    hundreds, whose files took minutes to delete after the last test), and stopping it takes seconds. Starts a
    server and a pytest process that imports torch: about ten seconds on the shared two-core machine. The pytest
    process loads no installed plugin (xdist, hypothesis, schemathesis...: about 1 s of CPU to import, and neither
    test uses one): what is shown is tests/conftest.py's dropping.
    """
    if not bash("_pg_bindir").stdout.strip():
        pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin): `make test` installs them as root")
    root = SCRIPT.parents[1]
    done = bash(
        f"pg_throwaway_start && cd {root} && "
        "REGISTRY_TEST_POSTGRES_URL=$REGISTRY_TEST_POSTGRES_URL PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 "
        ".venv/bin/python -m pytest -q -p no:cacheprovider 'tests/app/test_register.py::test_a_name_typed_in_nfd_is_the_nfc_name[postgres]' "
        "tests/events/test_store_postgres.py::test_a_speed_record_written_by_another_catch_up_between_reads_is_loaded_not_refused"
        " >/dev/null 2>&1; echo PYTEST=$?; "
        "\"$(_pg_bindir)/psql\" \"${REGISTRY_TEST_POSTGRES_URL/+psycopg/}\" -tAc "
        "\"select count(*) from pg_database where datname like 't\\_%'\"; "
        "start=$(date +%s%N); pg_throwaway_stop; echo STOP_MS=$(( ($(date +%s%N) - start) / 1000000 ))")
    assert done.returncode == 0, done.stderr
    assert "PYTEST=0" in done.stdout, done.stdout
    left = int(re.search(r"PYTEST=0\n(\d+)\n", done.stdout).group(1))
    assert left == 0, f"{left} databases left behind"
    assert int(re.search(r"STOP_MS=(\d+)", done.stdout).group(1)) < 20_000


def test_the_servers_files_go_to_a_tmpfs_with_room_and_to_the_temporary_folder_otherwise(tmp_path):
    """A CREATE DATABASE costs about 200 ms of the server's CPU on ext4 and 35 ms on a tmpfs
    (docs/benchmarks.md, "The suite"): the files go to /dev/shm when it is a tmpfs with room and the machine
    has memory to spare; a machine without one (a container's 64 MiB /dev/shm, say) keeps the temporary
    folder, so the run never fills a small tmpfs."""
    shm_is_tmpfs = subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"], capture_output=True,
                                  text=True).stdout.strip() == "tmpfs"
    roomy = bash(f"TMPDIR={tmp_path}; PG_THROWAWAY_TMPFS_MIN_KIB=0; PG_THROWAWAY_MEMORY_MIN_KIB=0; _pg_data_parent")
    assert roomy.stdout.strip() == ("/dev/shm" if shm_is_tmpfs else str(tmp_path)), roomy
    for cramped in ("PG_THROWAWAY_TMPFS_MIN_KIB", "PG_THROWAWAY_MEMORY_MIN_KIB"):  # more than any machine has
        done = bash(f"TMPDIR={tmp_path}; {cramped}=$((1 << 50)); _pg_data_parent")
        assert done.stdout.strip() == str(tmp_path), (cramped, done)
