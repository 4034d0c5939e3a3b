#!/usr/bin/env bash
# Checks the machine-readable contract (docs/asyncapi.yaml, docs/schemas/) offline:
# check-jsonschema (PyPI, installed into a virtualenv here) validates the AsyncAPI document
# against AsyncAPI's own 3.0.0 schema (vendored in docs/schemas/vendor/) and every message schema
# against JSON Schema's meta-schema (draft 2020-12, shipped with the jsonschema library); then
# every example of docs/asyncapi-examples/ must agree with its schema (scripts/check-asyncapi.py),
# formats asserted (a date-time is checked as RFC 3339, not only as a string).
# ContractCorpusTests runs the same examples through the worker's own parsers. Patterns are
# evaluated as ECMA-262 (JSON Schema's regular expressions), and must give the same verdicts in
# Python's engine.
#   scripts/check-asyncapi.sh        (scripts/test runs it)
#   scripts/check-asyncapi.sh --captured DIR [--expect-kinds k1,k2]
#       validates the messages the worker wrote during the tests (APNS_TEST_CAPTURE_DIR,
#       Tests/TestSupport/ContractCapture.swift) instead; scripts/test runs it after the suites
set -euo pipefail
cd "$(dirname "$0")/.."
tools=${APNS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apns-worker}/pytools
if ! "$tools/bin/check-jsonschema" --version > /dev/null 2>&1; then
  echo "check-asyncapi: installing check-jsonschema into $tools" >&2
  [ -x "$tools/bin/pip" ] || python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet check-jsonschema==0.39.0
fi
if [ "${1:-}" = "--captured" ]; then
  exec "$tools/bin/python" scripts/check-asyncapi.py docs/schemas "$@"
fi
"$tools/bin/check-jsonschema" --schemafile docs/schemas/vendor/asyncapi-3.0.0.json docs/asyncapi.yaml
"$tools/bin/check-jsonschema" --check-metaschema docs/schemas/*.schema.json
# check-jsonschema itself (formats asserted, its default) on every example that must validate;
# check-asyncapi.py then judges each example alone, the invalid ones included.
for folder in docs/asyncapi-examples/*/; do
  kind=$(basename "$folder")
  "$tools/bin/check-jsonschema" --quiet --schemafile "docs/schemas/$kind.schema.json" \
    $(ls "$folder"valid-*.json "$folder"beyond-schema-*.json 2> /dev/null)
done
"$tools/bin/python" scripts/check-asyncapi.py docs/schemas docs/asyncapi-examples
echo "check-asyncapi: the AsyncAPI document, its schemas and the examples agree"
