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
# policy, the NetworkPolicy, no service account token, no placeholder, the memory limit against
# the worker's bound, the spread over nodes, the APNs key's file name), the ConfigMap's
# configuration with `apns-worker check-config` and the Secret's values, the APNs key's rotation
# as docs/operating.md describes it (each half of it alone refused), and, when a test broker
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

render() {
  if command -v kubectl > /dev/null; then
    kubectl kustomize "$1"
  else
    "$tools/bin/python" scripts/check-kubernetes.py render "$1"
  fi
}
if command -v kubectl > /dev/null; then
  render "$work/kustomize" > "$work/rendered.yaml"
  renderer="kubectl kustomize ($(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: //p'))"
  # As shipped, without the operator's files, it must not render (nor apply) at all.
  if kubectl kustomize "$manifests" > /dev/null 2>&1; then
    echo "check-kubernetes: FAIL: $manifests renders without the operator's secrets/: a placeholder would be applied" >&2
    exit 1
  fi
else
  render "$work/kustomize" > "$work/rendered.yaml"
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

# The APNs key's rotation (docs/operating.md, "Rotating credentials"): a new AuthKey_<keyId>.p8 in secrets/,
# the old key ID replaced by the new one in configmap.yaml and kustomization.yaml, applied. The
# kubelet updates the ConfigMap's and the Secret's folders separately, so the worker sees each
# half alone for a while: it must take the two new halves together, and refuse each mix (the
# configuration in force stays) rather than sign with a key under another key ID.
config_of() { "$tools/bin/python" -c 'import sys, yaml
print(next(d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "ConfigMap")["data"]["apns-worker.conf"], end="")' "$1"; }
key_secret=apns-worker-apns-key
key_dir=$(sed -n 's#^tokenKeyFile = \(.*\)/AuthKey_[^/]*$#\1#p' "$work/apns-worker.conf" | head -1)
old_id=$(sed -n 's/^keyId = //p' "$work/apns-worker.conf" | head -1)
new_id=NEWKEY0001
cp -r "$work/kustomize" "$work/rotated"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/rotated/secrets/AuthKey_$new_id.p8" 2> /dev/null
rm "$work/rotated/secrets/AuthKey_$old_id.p8"
sed -i "s/$old_id/$new_id/g" "$work/rotated/configmap.yaml" "$work/rotated/kustomization.yaml"
render "$work/rotated" > "$work/rotated.yaml"
config_of "$work/rotated.yaml" > "$work/new.conf"
cp "$work/apns-worker.conf" "$work/old.conf"
# The operator's slip: the new file named, its key ID not.
sed "s/^keyId = .*/keyId = $old_id/" "$work/new.conf" > "$work/slip.conf"
"$tools/bin/python" scripts/check-kubernetes.py mount "$work/rendered.yaml" "$key_secret" "$work/old-key"
"$tools/bin/python" scripts/check-kubernetes.py mount "$work/rotated.yaml" "$key_secret" "$work/new-key"
grep -q "^keyId = $new_id$" "$work/new.conf" && [ -s "$work/new-key/AuthKey_$new_id.p8" ] && [ "$(ls "$work/new-key")" = "AuthKey_$new_id.p8" ] \
  || { echo "check-kubernetes: FAIL: the rotation did not give the ConfigMap keyId $new_id and the Secret $key_secret AuthKey_$new_id.p8 alone" >&2; exit 1; }
pairs_checked() { # CONF KEY_DIR: check-config with the key folder where the pod mounts it
  sed "s#^tokenKeyFile = $key_dir/#tokenKeyFile = $2/#" "$1" > "$work/pair.conf"
  env APNS_WORKER_AMQP_URL="$(cat "$work/amqp-url")" APNS_WORKER_ADMIN_TOKEN="$(cat "$work/admin-token")" \
    APNS_WORKER_ADMIN_METRICSTOKEN="$(cat "$work/metrics-token")" APNS_WORKER_REGISTRY_URL="$(cat "$work/registry-url")" \
    "$bin" check-config "$work/pair.conf" > "$work/pair.out" 2>&1
}
for pair in "old.conf old-key pass" "new.conf new-key pass" "old.conf new-key refuse" "new.conf old-key refuse" "slip.conf new-key refuse"; do
  read -r conf keys expected <<< "$pair"
  if pairs_checked "$work/$conf" "$work/$keys"; then got=pass; else got=refuse; fi
  if [ "$got" != "$expected" ]; then
    echo "check-kubernetes: FAIL: key rotation: the configuration $conf with the key folder $keys: the worker would $got it, not $expected it: $(tail -2 "$work/pair.out")" >&2
    exit 1
  fi
done
grep -q "is the key of $new_id, not of keyId $old_id" "$work/pair.out" \
  || { echo "check-kubernetes: FAIL: key rotation: the slip (new file, old keyId) was not refused for the key ID: $(cat "$work/pair.out")" >&2; exit 1; }
echo "check-kubernetes: ok: the APNs key's rotation ($old_id to $new_id): both halves taken together, each half alone and a new file under the old keyId refused"

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
