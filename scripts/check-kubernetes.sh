#!/usr/bin/env bash
# Checks deploy/kubernetes/ offline (no cluster), as `kubectl apply -k` would see it: renders the
# kustomization (kubectl kustomize when kubectl is installed, else the offline renderer of
# check-kubernetes.py) from a copy whose secrets/ holds generated test credentials, since the
# repository ships none; checks that the shipped folder does not render without them (no
# placeholder Secret can be applied); validates every rendered resource against Kubernetes' own
# schemas, 1.30 and 1.37 (kubernetes-validate from PyPI, installed into a virtualenv here), the
# KEDA resources against KEDA's CRD schemas vendored in deploy/kubernetes/schemas/, the
# manifests against each other (names, Secret keys, ports, the grace period against
# shutdownDeadline, one KEDA trigger per bundle, no replicas under KEDA, the PDB's eviction
# policy, the NetworkPolicy, no service account token, no placeholder), the ConfigMap's
# configuration with `apns-worker check-config` and the Secret's values, and, when a test broker
# is given (APNS_TEST_AMQP_URL, as scripts/test exports it), the readiness probe's command
# against a running worker.
#   scripts/check-kubernetes.sh BIN_DIR     (BIN_DIR holds a built apns-worker; scripts/test passes it)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=$(cd "${1:?usage: scripts/check-kubernetes.sh BIN_DIR}" && pwd)
bin="$bin_dir/apns-worker"
manifests=deploy/kubernetes
tools=${APNS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apns-worker}/pytools
if ! "$tools/bin/kubernetes-validate" --version > /dev/null 2>&1; then
  echo "check-kubernetes: installing kubernetes-validate into $tools" >&2
  python3 -m venv "$tools"
  "$tools/bin/pip" install --quiet kubernetes-validate==1.37.0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/apns-check-kubernetes.XXXXXX")
worker_pid=""
cleanup() { [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null; rm -rf "$work"; return 0; }
trap cleanup EXIT

# The operator's credentials, as secrets/README.md asks for them, generated for this run.
cp -r "$manifests" "$work/kustomize"
secrets="$work/kustomize/secrets"
printf 'amqps://apns-worker:%s@rabbitmq.example.internal:5671/%%2f' "$(openssl rand -hex 12)" > "$secrets/amqp-url"
printf '%s' "$(openssl rand -hex 24)" > "$secrets/admin-token"
printf '%s' "$(openssl rand -hex 24)" > "$secrets/metrics-token"
printf 'postgres://apns:%s@postgres.example.internal:5432/apns?sslmode=verify-full' "$(openssl rand -hex 12)" > "$secrets/registry-url"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$secrets/AuthKey_KEY1234567.p8" 2> /dev/null

if command -v kubectl > /dev/null; then
  kubectl kustomize "$work/kustomize" > "$work/rendered.yaml"
  renderer="kubectl kustomize ($(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: //p'))"
  # As shipped, without the operator's files, it must not render (nor apply) at all.
  if kubectl kustomize "$manifests" > /dev/null 2>&1; then
    echo "check-kubernetes: FAIL: $manifests renders without the operator's secrets/: a placeholder would be applied" >&2
    exit 1
  fi
else
  "$tools/bin/python" scripts/check-kubernetes.py render "$work/kustomize" > "$work/rendered.yaml"
  renderer="the offline renderer (kubectl not installed)"
fi
echo "check-kubernetes: ok: rendered with $renderer: $(grep -c '^kind:' "$work/rendered.yaml") resources"

# KEDA's resources against the vendored CRDs, and the manifests against each other.
"$tools/bin/python" scripts/check-kubernetes.py "$manifests" "$work/rendered.yaml" "$work"

# Kubernetes' own resources, strictly (unknown fields are errors), on the oldest and newest
# versions supported.
for version in 1.30.0 1.37.0; do
  "$tools/bin/kubernetes-validate" --strict --quiet -k "$version" "$work/core.yaml"
done
echo "check-kubernetes: ok: kubernetes-validate --strict 1.30 and 1.37 ($(grep '^kind:' "$work/core.yaml" | cut -d' ' -f2 | tr '\n' ' '))"

# The ConfigMap's configuration, with the Secret's values where the Deployment puts them.
env APNS_WORKER_AMQP_URL="$(cat "$work/amqp-url")" APNS_WORKER_ADMIN_TOKEN="$(cat "$work/admin-token")" \
  APNS_WORKER_ADMIN_METRICSTOKEN="$(cat "$work/metrics-token")" APNS_WORKER_REGISTRY_URL="$(cat "$work/registry-url")" \
  "$bin" check-config --skip-credentials "$work/apns-worker.conf"
echo "check-kubernetes: ok: apns-worker check-config on the ConfigMap's configuration"

# The readiness probe's own command against a running worker: ready with the token, not without.
if [ -n "${APNS_TEST_AMQP_URL:-}" ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  bundle="com.example.k8s-probe.$$"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/AuthKey.p8" 2> /dev/null
  # The ConfigMap's file, on loopback, with one bundle of its own whose APNs is a closed port
  # (the probe must not depend on Apple) and no registry (no PostgreSQL here).
  python3 - "$work/apns-worker.conf" "$port" "$bundle" "$work/AuthKey.p8" > "$work/probe.conf" <<'PY'
import re, sys
conf, port, bundle, key = sys.argv[1:]
text = open(conf).read()
text = re.sub(r"listen = .*", f"listen = 127.0.0.1:{port}", text)
text = re.sub(r"\[registry\][^\[]*", "", text)
text = re.sub(r'\[apns "[^"]+"\]', f'[apns "{bundle}"]', text)
text = re.sub(r"tokenKeyFile = .*", f"tokenKeyFile = {key}\nhost = 127.0.0.1\nport = 9", text)
print(text)
PY
  token="check-kubernetes-token-$$-0123456789"
  APNS_WORKER_AMQP_URL=$APNS_TEST_AMQP_URL APNS_WORKER_ADMIN_TOKEN=$token "$bin" run --config "$work/probe.conf" > "$work/worker.log" 2>&1 &
  worker_pid=$!
  sed "s#/127.0.0.1/8080#/127.0.0.1/$port#" "$work/readiness.sh" > "$work/probe.sh"
  ready=""
  for _ in $(seq 1 150); do
    kill -0 "$worker_pid" 2>/dev/null || break
    if APNS_WORKER_ADMIN_TOKEN=$token bash "$work/probe.sh" 2> /dev/null; then ready=yes; break; fi
    sleep 0.2
  done
  if [ -z "$ready" ]; then
    echo "check-kubernetes: FAIL: the readiness probe never passed against a running worker: $(tail -5 "$work/worker.log")" >&2
    exit 1
  fi
  if APNS_WORKER_ADMIN_TOKEN=wrong-token-0123456789 bash "$work/probe.sh" 2> /dev/null; then
    echo "check-kubernetes: FAIL: the readiness probe passed with a wrong token" >&2
    exit 1
  fi
  kill -TERM "$worker_pid"
  status=0
  wait "$worker_pid" || status=$?
  worker_pid=""
  [ "$status" -eq 0 ] || { echo "check-kubernetes: FAIL: the worker exited $status on SIGTERM: $(tail -5 "$work/worker.log")" >&2; exit 1; }
  echo "check-kubernetes: ok: the readiness probe's command passes against a running worker, fails with a wrong token; SIGTERM exits 0"
fi
echo "check-kubernetes: all Kubernetes checks passed"
