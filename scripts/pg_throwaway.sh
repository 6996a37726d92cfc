# Source this file, then call pg_throwaway_start: it starts a throwaway
# PostgreSQL bound to 127.0.0.1 (fsync off: test data only), exports
# REGISTRY_TEST_POSTGRES_URL, and stops and removes it on exit.
# initdb refuses to run as root, so as root the server runs as `postgres`.
#
# The port: nothing probes for a free one and releases it (another process
# could take it in between). The server itself binds a candidate port; when
# that port is taken its start fails with "Address already in use" and the
# next candidate is tried. Candidates lie below Linux's ephemeral range
# (32768-60999), where the kernel hands out client ports.
PG_THROWAWAY_PORT_TRIES=25

# Sets `port` to the next candidate (in this shell, so that seeding RANDOM fixes the sequence).
_pg_next_port() {
  port=$((10000 + RANDOM % 22000))
}

_pg_bindir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

# Where the server's files go: a tmpfs (/dev/shm) when it has room and the machine has memory to spare, else
# the temporary folder. The tests make and drop a database each (CREATE DATABASE writes a few hundred files);
# on ext4 each new file's inode search scans past the inodes of the databases dropped before it, and that
# scan was most of the server's CPU: about 200 ms a CREATE DATABASE, against 35 ms on a tmpfs
# (docs/benchmarks.md, "The suite"). A run holds about 100 MiB there at once: a DROP DATABASE checkpoints.
PG_THROWAWAY_TMPFS_MIN_KIB=$((1024 * 1024))
PG_THROWAWAY_MEMORY_MIN_KIB=$((4 * 1024 * 1024))

_pg_data_parent() {
  local shm_free memory_free
  if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
    shm_free=$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')
  fi
  memory_free=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo 2>/dev/null)
  if [ "${shm_free:-0}" -ge "$PG_THROWAWAY_TMPFS_MIN_KIB" ] && [ "${memory_free:-0}" -ge "$PG_THROWAWAY_MEMORY_MIN_KIB" ]; then
    echo /dev/shm
  else
    echo "${TMPDIR:-/tmp}"
  fi
}

_pg_as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_throwaway_stop() {
  if [ -n "${PG_THROWAWAY_DIR:-}" ] && [ -d "$PG_THROWAWAY_DIR" ]; then
    _pg_as_owner "$(_pg_bindir)/pg_ctl" -D "$PG_THROWAWAY_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$PG_THROWAWAY_DIR"
  fi
}

pg_throwaway_start() {
  local bindir port
  bindir=$(_pg_bindir)
  if [ -z "$bindir" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing PostgreSQL for the test run" >&2
    { apt-get install -y -q postgresql || { apt-get update -q && apt-get install -y -q postgresql; }; } >/dev/null 2>&1 || return 1
    bindir=$(_pg_bindir)
  fi
  [ -n "$bindir" ] && [ -x "$bindir/initdb" ] || return 1
  PG_THROWAWAY_DIR=$(mktemp -d -p "$(_pg_data_parent)")
  [ "$(id -u)" = 0 ] && chown postgres "$PG_THROWAWAY_DIR"
  _pg_as_owner "$bindir/initdb" -D "$PG_THROWAWAY_DIR/data" -A trust -U postgres >/dev/null || return 1
  trap pg_throwaway_stop EXIT
  local try log
  for try in $(seq "$PG_THROWAWAY_PORT_TRIES"); do
    _pg_next_port
    log="$PG_THROWAWAY_DIR/log.$port"
    if _pg_as_owner "$bindir/pg_ctl" -D "$PG_THROWAWAY_DIR/data" -l "$log" -w \
      -o "-c listen_addresses=127.0.0.1 -p $port -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c unix_socket_directories=$PG_THROWAWAY_DIR -c max_connections=500" \
      start >/dev/null 2>&1; then
      break
    fi
    if ! grep -q "Address already in use" "$log" 2>/dev/null || [ "$try" = "$PG_THROWAWAY_PORT_TRIES" ]; then
      cat "$log" >&2
      return 1
    fi
    echo "port $port is taken; trying another" >&2
  done
  export REGISTRY_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
  echo "PostgreSQL for tests at 127.0.0.1:$port, its files under $(dirname "$PG_THROWAWAY_DIR")" >&2
}
