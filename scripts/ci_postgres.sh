#!/usr/bin/env bash
# A throwaway PostgreSQL for the history tests, from the distribution's package:
#   scripts/ci_postgres.sh start      prints "URL DIR": the postgresql:// URL, its folder
#   scripts/ci_postgres.sh stop DIR   stops it and removes DIR
# It listens on 127.0.0.1 only and trusts local connections. initdb refuses to run as
# root, so as root it runs as the package's postgres user, in a folder of its own.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] && [ -x "$bin/initdb" ] || { echo "ci_postgres: no PostgreSQL server package" >&2; exit 3; }
as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $1 in
start)
  dir=$(mktemp -d /tmp/vllm-perf-pg.XXXXXX)
  chmod 755 "$dir"
  [ "$(id -u)" != 0 ] || chown postgres "$dir"
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as "$bin/initdb" -D "$dir/data" -A trust -U vllm_perf > "$dir/initdb.log"
  as "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start > /dev/null
  echo "postgresql://vllm_perf@127.0.0.1:$port/postgres $dir"
  ;;
stop)
  as "$bin/pg_ctl" -D "$2/data" -m fast -w stop > /dev/null 2>&1 || true
  rm -rf "$2"
  ;;
esac
