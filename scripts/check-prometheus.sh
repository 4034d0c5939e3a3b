#!/usr/bin/env bash
# Checks the Prometheus files of deploy/prometheus/ offline with Debian's promtool (installed by
# scripts/install-deps.sh): the rule file's syntax and expressions, the example configuration AS
# SHIPPED (its rule file and token file are next to it), and the rules' unit tests
# (apns-worker.rules.test.yml: each alert fired and kept quiet, and a 50-minute incident
# in which each relevant alert fires). The rules against a running worker's real /metrics are tested by
# APNSAdminTests.PrometheusRulesTests (a real Prometheus).
#   scripts/check-prometheus.sh        (scripts/test runs it)
set -euo pipefail
cd "$(dirname "$0")/../deploy/prometheus"
promtool check rules apns-worker.rules.yml
promtool check config prometheus.example.yml
promtool test rules apns-worker.rules.test.yml
# Every alert has a runbook entry in docs/operating.md, and every unit test file names each alert.
alerts=$(sed -n 's/^ *- alert: *//p' apns-worker.rules.yml)
missing=0
for alert in $alerts; do
  grep -q "^#### \`$alert\`" ../../docs/operating.md || { echo "check-prometheus: FAIL: no runbook entry (#### \`$alert\`) in docs/operating.md" >&2; missing=1; }
  grep -q "alertname: $alert\$" apns-worker.rules.test.yml || { echo "check-prometheus: FAIL: no unit test of $alert" >&2; missing=1; }
done
# Every metric the rules read is one the worker exports (a wrong name is no error to
# Prometheus, only an alert that never fires): the names as the Sources create them.
for metric in $(grep -v '^ *#' apns-worker.rules.yml | grep -oE '\bapns_(worker|transport)_[a-z_]+' | sed -E 's/_(bucket|count|sum)$//' | sort -u); do
  grep -rqF "\"$metric\"" ../../Sources || { echo "check-prometheus: FAIL: the rules read $metric, which no Source exports" >&2; missing=1; }
done
[ "$missing" -eq 0 ]
echo "check-prometheus: rules, the example configuration as shipped, rule unit tests and runbook entries ($(echo "$alerts" | wc -w) alerts) passed"
