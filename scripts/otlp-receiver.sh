#!/usr/bin/env bash
# The OTLP/HTTP trace receiver of the tests (scripts/otlp-receiver.py), with opentelemetry-proto
# (PyPI) installed into the tools' virtualenv first. scripts/test runs `--install` once before
# the tests; TracingEndToEndTests starts it as `scripts/otlp-receiver.sh PORTFILE OUT`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${APNS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apns-worker}/pytools
if ! "$tools/bin/python" -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' > /dev/null 2>&1; then
  echo "otlp-receiver: installing opentelemetry-proto into $tools" >&2
  [ -x "$tools/bin/pip" ] || python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet opentelemetry-proto==1.45.2
fi
[ "${1:-}" = "--install" ] && exit 0
exec "$tools/bin/python" scripts/otlp-receiver.py "$@"
