#!/usr/bin/env bash
# Checks the Prometheus rules of deploy/prometheus/ offline with Debian's promtool (installed by
# scripts/install-deps.sh): the rule file's syntax and expressions, the example configuration,
# and the rules' unit tests (apns-worker.rules.test.yml). The rules against a running worker's
# real /metrics are tested by APNSAdminTests.PrometheusRulesTests (a real Prometheus).
#   scripts/check-prometheus.sh        (scripts/test runs it)
set -euo pipefail
cd "$(dirname "$0")/../deploy/prometheus"
work=$(mktemp -d "${TMPDIR:-/tmp}/apns-check-prometheus.XXXXXX")
trap 'rm -rf "$work"' EXIT
promtool check rules apns-worker.rules.yml
# promtool opens the files a configuration names: point the token file and the rules at copies.
echo "check-prometheus-token" > "$work/token"
cp apns-worker.rules.yml "$work/"
sed "s#/etc/prometheus/apns-worker-admin-token#$work/token#" prometheus.example.yml > "$work/prometheus.yml"
promtool check config "$work/prometheus.yml"
promtool test rules apns-worker.rules.test.yml
echo "check-prometheus: rules, configuration and rule unit tests passed"
