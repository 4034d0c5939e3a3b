#!/usr/bin/env bash
# Checks deploy/grafana/apns-worker.json offline. Grafana publishes no JSON schema of its dashboard
# model (its schema is CUE inside Grafana), so the model it documents ("JSON model": schemaVersion,
# panels with gridPos, datasource and targets, templating) is checked structurally here: panels
# on the 24-column grid without overlap, unique ids and refIds, every panel's and target's
# datasource the dashboard's Prometheus variable, every variable a query uses defined. Every
# query must parse as PromQL (promtool check rules over a rule file made of them, the variables
# given values) and name only metrics the worker exports (the names as the Sources create them,
# as scripts/check-prometheus.sh reads them), the rules' recorded series, or Prometheus's `up`:
# a wrong name is no error to Grafana, only a panel that stays empty. Last, the check is run on a
# copy with one metric misspelt, which it must refuse.
#   scripts/check-grafana.sh [DASHBOARD]       (scripts/test runs it on the shipped dashboard)
set -euo pipefail
cd "$(dirname "$0")/.."
dashboard=${1:-deploy/grafana/apns-worker.json}
work=$(mktemp -d "${TMPDIR:-/tmp}/apns-check-grafana.XXXXXX")
trap 'rm -rf "$work"' EXIT

exported="$work/exported"
grep -rhoE '"apns_(worker|transport)_[a-z_]+"' Sources | tr -d '"' | sort -u > "$exported"
sed -n 's/^ *- record: *//p' deploy/prometheus/apns-worker.rules.yml >> "$exported"
echo up >> "$exported"

check() { # DASHBOARD: structure and metric names, then PromQL syntax
  /usr/bin/python3 - "$1" "$exported" "$work/queries.yml" <<'PY'
import json, re, sys

path, exported_path, rules_path = sys.argv[1:]
exported = set(open(exported_path).read().split())
problems = []
def fail(message):
    problems.append(message)
    print(f"check-grafana: FAIL: {message}", file=sys.stderr)

try:
    dashboard = json.load(open(path))
except ValueError as error:
    sys.exit(f"check-grafana: FAIL: {path} is not JSON: {error}")

def expect(document, key, kinds, where):
    if not isinstance(document.get(key), kinds):
        fail(f"{where}: {key} must be {' or '.join(k.__name__ for k in kinds) if isinstance(kinds, tuple) else kinds.__name__}, not {document.get(key)!r}")
        return False
    return True

for key, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list), ("templating", dict), ("time", dict)):
    expect(dashboard, key, kind, "dashboard")
if isinstance(dashboard.get("schemaVersion"), int) and dashboard["schemaVersion"] < 36:
    fail(f"schemaVersion {dashboard['schemaVersion']}: the model of Grafana 9 and later is 36 or more")
if isinstance(dashboard.get("uid"), str) and not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"]):
    fail(f"uid {dashboard['uid']!r}: at most 40 letters, digits, - and _")
variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
source = variables.get("datasource", {})
if source.get("type") != "datasource" or source.get("query") != "prometheus":
    fail("templating needs the variable datasource of type datasource, query prometheus: every panel reads it")
wanted = {"type": "prometheus", "uid": "${datasource}"}
builtin = {"__rate_interval", "__interval", "__range", "__all"}

def used_variables(text):
    return set(re.findall(r"\$\{?(\w+)", text)) - builtin

def metric_names(expr):
    """The metric names an expression reads: identifiers left once strings, label matchers,
    ranges, grouping label lists, function calls and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    keywords = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
    names = set()
    for match in re.finditer(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if not call and name.lower() not in keywords:
            names.add(name)
    return names

ids, occupied, rules = set(), {}, []
for index, panel in enumerate(dashboard.get("panels", [])):
    where = f"panel {index} ({panel.get('title')!r})"
    if not expect(panel, "id", int, where) or not expect(panel, "type", str, where) or not expect(panel, "gridPos", dict, where):
        continue
    if panel["id"] in ids:
        fail(f"{where}: id {panel['id']} is not unique")
    ids.add(panel["id"])
    grid = panel["gridPos"]
    if not all(isinstance(grid.get(k), int) for k in "hwxy") or grid["w"] < 1 or grid["h"] < 1 or grid["x"] < 0 or grid["y"] < 0 or grid["x"] + grid["w"] > 24:
        fail(f"{where}: gridPos {grid} is not a place on the 24-column grid")
        continue
    for x in range(grid["x"], grid["x"] + grid["w"]):
        for y in range(grid["y"], grid["y"] + grid["h"]):
            if (x, y) in occupied:
                fail(f"{where}: overlaps panel {occupied[(x, y)]} at column {x}, row {y}")
                break
            occupied[(x, y)] = panel["id"]
        else:
            continue
        break
    if panel["type"] == "row":
        continue
    expect(panel, "title", str, where)
    if panel.get("datasource") != wanted:
        fail(f"{where}: datasource must be {wanted}, not {panel.get('datasource')}")
    targets = panel.get("targets")
    if not isinstance(targets, list) or not targets:
        fail(f"{where}: no targets")
        continue
    refs = set()
    for target in targets:
        ref = target.get("refId")
        if not isinstance(ref, str) or ref in refs:
            fail(f"{where}: refId {ref!r} missing or repeated")
        refs.add(ref)
        if target.get("datasource") != wanted:
            fail(f"{where} {ref}: datasource must be {wanted}")
        expr = target.get("expr")
        if not isinstance(expr, str) or not expr.strip():
            fail(f"{where} {ref}: no expr")
            continue
        for name in sorted(used_variables(expr) - set(variables)):
            fail(f"{where} {ref}: ${name} is no variable of the dashboard")
        names = metric_names(expr)
        if not names:
            fail(f"{where} {ref}: {expr!r} reads no metric")
        for name in sorted(names - exported):
            fail(f"{where} {ref}: {name} is no metric the worker exports, nor a series the rules record: {expr!r}")
        # For promtool: the variables as Grafana substitutes them.
        concrete = expr.replace("$__rate_interval", "5m").replace("$bundle", ".*").replace("$job", "apns-worker")
        rules.append(f"      - record: grafana:{panel['id']}:{ref}\n        expr: {json.dumps(concrete)}\n")
for name, variable in variables.items():
    query = variable.get("query")
    text = query.get("query", "") if isinstance(query, dict) else str(query or "")
    for used in used_variables(text) - set(variables):
        fail(f"variable {name}: ${used} is no variable of the dashboard")
    if variable.get("type") == "query":
        for metric in re.findall(r"label_values\(\s*([A-Za-z_:][\w:]*)", text):
            if metric not in exported:
                fail(f"variable {name}: {metric} is no metric the worker exports")
with open(rules_path, "w") as f:
    f.write("groups:\n  - name: grafana\n    rules:\n" + "".join(rules))
if problems:
    sys.exit(f"check-grafana: {len(problems)} problem(s) in {path}")
print(f"check-grafana: ok: {path}: {len(ids)} panels on the grid, {len(rules)} queries over exported metrics")
PY
  [ "${PIPESTATUS[0]}" -eq 0 ] || return 1
  promtool check rules "$work/queries.yml" > "$work/promtool.out" 2>&1 \
    || { echo "check-grafana: FAIL: a query of $1 is not PromQL: $(cat "$work/promtool.out")" >&2; return 1; }
}

check "$dashboard"
echo "check-grafana: ok: every query parses as PromQL (promtool check rules)"
# The check itself: a dashboard with one metric misspelt must be refused.
sed 's/apns_worker_jobs_total/apns_worker_job_total/' "$dashboard" > "$work/misspelt.json"
if check "$work/misspelt.json" 2> "$work/misspelt.err"; then
  echo "check-grafana: FAIL: a dashboard reading apns_worker_job_total (misspelt) passed the check" >&2
  exit 1
fi
grep -q "apns_worker_job_total is no metric the worker exports" "$work/misspelt.err" \
  || { echo "check-grafana: FAIL: the misspelt metric was refused for another reason: $(cat "$work/misspelt.err")" >&2; exit 1; }
echo "check-grafana: ok: a misspelt metric (apns_worker_job_total) is refused"
echo "check-grafana: all Grafana checks passed"
