#!/usr/bin/env bash
# A throwaway CA and a server certificate it signed for the host name `localhost` (not
# 127.0.0.1), for the test servers' TLS listeners (scripts/broker.sh, scripts/postgres.sh).
#
#   scripts/test-tls-cert.sh DIR "CA NAME" LOG    writes DIR/ca.pem, ca.key, server.pem, server.key
#
# openssl's output goes to LOG; on failure it is printed and the script fails.
set -euo pipefail
tls=${1:?usage: $0 DIR "CA NAME" LOG}
ca_name=${2:?usage: $0 DIR "CA NAME" LOG}
log=${3:?usage: $0 DIR "CA NAME" LOG}
mkdir -p "$tls"
{
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=$ca_name" -keyout "$tls/ca.key" -out "$tls/ca.pem"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$tls/server.key" -out "$tls/server.csr"
  printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > "$tls/server.ext"
  openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 3650 \
    -extfile "$tls/server.ext" -out "$tls/server.pem"
} > "$log" 2>&1 || { echo "$(basename "$0"): openssl failed:" >&2; cat "$log" >&2; exit 1; }
