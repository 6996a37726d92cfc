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
from pathlib import Path

import psycopg
import pytest

from limits import HANG_GUARD_S

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pg_throwaway.sh"
SEED = 4242


def bash(commands: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f"source {SCRIPT}; RANDOM={SEED}; {commands}"], capture_output=True,
                          text=True, timeout=HANG_GUARD_S)


def test_a_taken_port_is_skipped_and_the_server_binds_another():
    if not bash("_pg_bindir").stdout.strip():
        pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin): `make test` installs them as root")
    taken = int(bash("_pg_next_port; echo $port").stdout)
    with socket.socket() as holder:
        try:
            holder.bind(("127.0.0.1", taken))
            holder.listen()
        except OSError as exc:  # already taken by another process: just as good
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
