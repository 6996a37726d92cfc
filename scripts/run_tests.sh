#!/usr/bin/env bash
# Runs the whole suite, in parallel. When no Postgres URL is given and a PostgreSQL server
# is installed, starts a throwaway one on 127.0.0.1 for the run and stops it
# on exit, so the Postgres conformance tests run rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${REGISTRY_TEST_POSTGRES_URL:-}" ]; then
  # shellcheck source=scripts/pg_throwaway.sh
  source scripts/pg_throwaway.sh
  pg_throwaway_start || echo "PostgreSQL not available: Postgres tests will skip" >&2
fi
# The HTML report is checked in a real headless browser; install Debian's
# Chromium when it is missing and we may (the test skips, saying so, otherwise).
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium for the HTML report test" >&2
  { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } >/dev/null 2>&1 \
    || echo "chromium could not be installed: the browser test will skip" >&2
fi
# Bytecode is cached for the run even where the environment says PYTHONDONTWRITEBYTECODE (many containers
# do): otherwise every pytest process rewrites and compiles every test module, and every module of the
# plugins pytest rewrites (hypothesis, schemathesis), from source again, which doubled the CPU of a
# collection (about 16 CPU-s against 8, a fresh clone). What is written is __pycache__ (ignored by git) and
# the venv's own; the package's .pyc files are the ones `make install` compiled for its manifest.
unset PYTHONDONTWRITEBYTECODE
# In parallel, one worker per core (pytest-xdist). The tests of one file run
# on one worker, so what a file's tests share (the reduced demo campaign of
# tests/whole_path/test_demo.py) is built once per run. Files are handed out in the
# order tests/conftest.py sets (the longest first, so no long file starts
# last while the other worker idles), not xdist's own (most tests first).
# Every run's log names its 25 slowest tests (a later --durations given here wins).
.venv/bin/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --durations=25 "$@"
