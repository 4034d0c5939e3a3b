#!/usr/bin/env bash
# Throwaway PostgreSQL cluster for tests, CI and the local run command (contract §6's registry).
#
#   scripts/postgres.sh start DIR   initdb into DIR, start it on a loopback port; prints shell exports
#   scripts/postgres.sh stop DIR    stop that cluster (fast shutdown) and wait for it to exit
#
# Uses Debian's `postgresql` package binaries directly (/usr/lib/postgresql/<version>/bin), not the
# cluster wrappers. PostgreSQL refuses to run as root: as root, the cluster belongs to the
# unprivileged user `nobody` (or $APNS_POSTGRES_USER) and every server command runs as that user.
# Port from APNS_POSTGRES_PORT, default 5442 (clear of a system server on 5432). The database
# `apns` is owned by the role `apns` with password `apns`.
#
# With APNS_POSTGRES_TLS=1 the server also accepts TLS (plaintext stays allowed, so the default
# URLs with sslmode=disable work as before), with a CA and a server certificate for the host
# name `localhost` (not 127.0.0.1) made here with openssl in DIR/tls; the exports then name
# the CA file as APNS_TEST_POSTGRES_TLS_CA.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

port=${APNS_POSTGRES_PORT:-5442}
pg_bin=${APNS_POSTGRES_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "${APNS_POSTGRES_USER:-nobody}" -- "$@"
  else
    "$@"
  fi
}

case "$cmd" in
start)
  [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || { echo "postgres.sh: PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  data=$dir/data
  if [ "$(id -u)" -eq 0 ]; then
    owner=${APNS_POSTGRES_USER:-nobody}
    chown "$owner" "$dir"
    # The owner must reach DIR through every parent (a private mktemp dir under /tmp is 0700).
    parent=$dir
    while parent=$(dirname "$parent") && [ "$parent" != / ]; do chmod o+x "$parent" 2>/dev/null || true; done
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    printf 'apns\n' > "$dir/pwfile"
    [ "$(id -u)" -eq 0 ] && chown "${APNS_POSTGRES_USER:-nobody}" "$dir/pwfile"
    as_owner "$pg_bin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 > "$dir/initdb.log" 2>&1 \
      || { echo "postgres.sh: initdb failed:" >&2; tail -n 20 "$dir/initdb.log" >&2; exit 1; }
    cat >> "$data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 100
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
CONF
  fi
  if [ "${APNS_POSTGRES_TLS:-0}" = 1 ] && [ ! -f "$dir/tls/server.pem" ]; then
    tls=$dir/tls
    "$(dirname "$0")/test-tls-cert.sh" "$tls" "apns-worker test PostgreSQL CA" "$dir/openssl.log"
    # PostgreSQL refuses a key file others can read, or that its owner does not own.
    chmod 600 "$tls/server.key"
    [ "$(id -u)" -eq 0 ] && chown "${APNS_POSTGRES_USER:-nobody}" "$tls" "$tls/server.key" "$tls/server.pem"
    cat >> "$data/postgresql.conf" <<CONF
ssl = on
ssl_cert_file = '$tls/server.pem'
ssl_key_file = '$tls/server.key'
CONF
  fi
  # The server must not inherit the caller's descriptors (see broker.sh): close all but 0-2.
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] && [ "$n" -ne 255 ]; then eval "exec $n>&-"; fi
    done 2>/dev/null
    as_owner "$pg_bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start > "$dir/pg_ctl.log" 2>&1
  ) || { echo "postgres.sh: the server did not start; last log lines:" >&2; tail -n 20 "$dir/server.log" >&2 || true; exit 1; }
  psql=("$pg_bin/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qAt)
  if [ "$("${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname = 'apns'")" != 1 ]; then
    "${psql[@]}" -c "CREATE ROLE apns LOGIN PASSWORD 'apns'" -c "CREATE DATABASE apns OWNER apns" > /dev/null
  fi
  cat <<OUT
export APNS_TEST_POSTGRES_URL=postgres://apns:apns@127.0.0.1:$port/apns?sslmode=disable
export APNS_TEST_POSTGRES_PORT=$port
export APNS_TEST_POSTGRES_DIR=$dir
export APNS_TEST_POSTGRES_BIN=$pg_bin
OUT
  if [ -f "$dir/tls/ca.pem" ]; then echo "export APNS_TEST_POSTGRES_TLS_CA=$dir/tls/ca.pem"; fi
  ;;
stop)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  [ -n "$pg_bin" ] && [ -f "$dir/data/postmaster.pid" ] || exit 0
  as_owner "$pg_bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop > /dev/null 2>&1 || true
  ;;
*)
  echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
