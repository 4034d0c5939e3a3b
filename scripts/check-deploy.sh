#!/usr/bin/env bash
# Checks the deploy files without a Docker engine (none runs on the CI machine), by running what
# can run here: docker-compose's own validation, the compose file's commands against the real
# binary, systemd's unit verifier, and the Dockerfile's packages and shell commands. With a test
# broker (APNS_TEST_AMQP_URL, as scripts/test exports it) the worker's compose healthcheck runs
# against a real worker started from compose.conf.
#   scripts/check-deploy.sh BIN_DIR     (BIN_DIR holds a built apns-worker; scripts/test passes it)
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=$(cd "${1:?usage: scripts/check-deploy.sh BIN_DIR}" && pwd)
bin="$bin_dir/apns-worker"
work=$(mktemp -d "${TMPDIR:-/tmp}/apns-check-deploy.XXXXXX")
simulator_pid=""
worker_pid=""
cleanup() {
  [ -n "$simulator_pid" ] && kill "$simulator_pid" 2>/dev/null
  [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  rm -rf "$work"; return 0
}
trap cleanup EXIT
failures=0
fail() { echo "check-deploy: FAIL: $*" >&2; failures=$((failures + 1)); }
ok() { echo "check-deploy: ok: $*"; }

# --- docker-compose.yml -------------------------------------------------------------------
export APNS_WORKER_ADMIN_TOKEN=check-deploy-admin-token
if docker-compose -f docker-compose.yml config > "$work/compose.yml" 2> "$work/compose.err"; then
  ok "docker-compose config accepts docker-compose.yml"
else
  fail "docker-compose config: $(cat "$work/compose.err")"
fi
/usr/bin/python3 - "$work/compose.yml" <<'PY' || fail "compose structure"
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
services = doc["services"]
def worker_needs_postgres(services):
    return services["worker"]["depends_on"].get("postgres", {}).get("condition") == "service_healthy"
assert set(services) == {"rabbitmq", "postgres", "simulator", "worker"}, sorted(services)
assert worker_needs_postgres(services), "worker must wait for a healthy postgres"
assert "management" in services["rabbitmq"]["image"], "rabbitmq must have the management plugin"
worker = services["worker"]
assert worker["deploy"]["replicas"] >= 1, "worker needs deploy.replicas"
assert "ports" not in worker, "worker must not publish fixed host ports, or --scale would collide"
assert worker["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
# Every service has a healthcheck; the worker's asks its admin server for /health.
for name, service in services.items():
    assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
test = worker["healthcheck"]["test"]
assert test[0] == "CMD" and test[1:3] == ["bash", "-c"] and "GET /health " in test[3], f"worker healthcheck: {test}"
# `docker-compose config` keeps compose's escape; the container gets "$$" as "$".
open(sys.argv[1] + ".health", "w").write(test[3].replace("$$", "$") + "\n")
print("check-deploy: ok: compose services, replicas, healthchecks")
PY
if (unset APNS_WORKER_ADMIN_TOKEN; docker-compose -f docker-compose.yml config -q) 2>/dev/null; then
  fail "compose must refuse to start the worker without APNS_WORKER_ADMIN_TOKEN"
else
  ok "compose refuses a worker without an admin token"
fi

# The compose file's simulator command line, run for real on free ports with the same options.
sim_args=$(/usr/bin/python3 - "$work/compose.yml" <<'PY'
import sys, yaml
cmd = yaml.safe_load(open(sys.argv[1]))["services"]["simulator"]["command"]
out = []
for a in cmd:
    if a.startswith(("--port=", "--binary-port=", "--feedback-port=")):
        a = a.split("=")[0] + "=0"
    elif a.startswith("--credentials="):
        a = "--credentials=CREDENTIALS"
    elif a.startswith("--host="):
        a = "--host=127.0.0.1"
    out.append(a)
print(" ".join(out))
PY
)
sim_args=${sim_args//CREDENTIALS/$work/credentials}
# shellcheck disable=SC2086
"$bin" $sim_args --summary-every 0 > "$work/simulator.log" 2>&1 &
simulator_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening" "$work/simulator.log" 2>/dev/null && break
  kill -0 "$simulator_pid" 2>/dev/null || break
  sleep 0.2
done
if grep -q "listening" "$work/simulator.log" \
  && openssl verify -CAfile "$work/credentials/ca.pem" -verify_hostname simulator "$work/credentials/server.pem" > /dev/null; then
  ok "the compose simulator command starts, with a certificate for the host name simulator: apns-worker $sim_args"
else
  fail "the compose simulator command did not start: $(tail -3 "$work/simulator.log")"
fi
kill "$simulator_pid" 2>/dev/null || true; wait "$simulator_pid" 2>/dev/null || true; simulator_pid=""

# The worker's compose configuration, with the simulator's credentials as the volume holds them.
sed "s#/credentials/#$work/credentials/#g" deploy/compose.conf > "$work/compose.conf"
if "$bin" check-config "$work/compose.conf" > "$work/check.out" 2>&1; then
  ok "deploy/compose.conf passes check-config with the simulator's credentials"
else
  fail "deploy/compose.conf: $(cat "$work/check.out")"
fi
# The worker's healthcheck command (as compose hands it to the container, `$$` unescaped) against
# a worker of compose.conf on a free loopback port, with the test broker and without the
# registry: healthy while it serves, unhealthy once it has stopped. APNs (the simulator's host
# name) does not resolve here, which /health does not depend on.
if [ -n "${APNS_TEST_AMQP_URL:-}" ] && [ -s "$work/compose.yml.health" ]; then
  admin_port=$(sed -n 's/^listen = .*:\([0-9]*\)$/\1/p' deploy/compose.conf)
  grep -q "/dev/tcp/127.0.0.1/$admin_port" "$work/compose.yml.health" || fail "the worker's healthcheck does not call compose.conf's admin port $admin_port"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  sed -e "s/^listen = .*/listen = 127.0.0.1:$port/" -e '/^\[registry\]/,/^$/d' -e '/^url = amqp/d' "$work/compose.conf" > "$work/health.conf"
  sed "s#/127.0.0.1/$admin_port#/127.0.0.1/$port#" "$work/compose.yml.health" > "$work/health.sh"
  APNS_WORKER_AMQP_URL=$APNS_TEST_AMQP_URL "$bin" run --config "$work/health.conf" > "$work/worker.log" 2>&1 &
  worker_pid=$!
  healthy=""
  for _ in $(seq 1 300); do
    kill -0 "$worker_pid" 2>/dev/null || break
    if bash "$work/health.sh" 2> /dev/null; then healthy=yes; break; fi
    sleep 0.2
  done
  kill -TERM "$worker_pid" 2>/dev/null; wait "$worker_pid" 2>/dev/null || true; worker_pid=""
  if [ -z "$healthy" ]; then
    fail "the worker's compose healthcheck never passed against a running worker: $(tail -3 "$work/worker.log")"
  elif bash "$work/health.sh" 2> /dev/null; then
    fail "the worker's compose healthcheck passes with no worker listening"
  else
    ok "the worker's compose healthcheck passes against a running worker of compose.conf, fails once it has stopped"
  fi
fi
worker_cmd=$(/usr/bin/python3 -c 'import sys,yaml; print(" ".join(yaml.safe_load(open(sys.argv[1]))["services"]["worker"]["command"]))' "$work/compose.yml")
[ "$worker_cmd" = "run --config /etc/apns-worker/compose.conf" ] || fail "worker command: $worker_cmd"
grep -q "COPY deploy/compose.conf /etc/apns-worker/compose.conf" deploy/Dockerfile || fail "the image must carry compose.conf"

# --- systemd template unit ------------------------------------------------------------------
sed "s#/usr/local/bin/apns-worker#$bin#g" deploy/apns-worker@.service > "$work/apns-worker@.service"
if (cd "$work" && systemd-analyze verify --man=no ./apns-worker@3.service) > "$work/unit.out" 2>&1 && [ ! -s "$work/unit.out" ]; then
  ok "systemd-analyze verify apns-worker@3.service"
else
  fail "systemd-analyze verify: $(sort -u "$work/unit.out")"
fi
"$bin" check-config --skip-credentials config/apns-worker.conf > /dev/null || fail "the unit's config/apns-worker.conf"

# --- Dockerfile -----------------------------------------------------------------------------
while read -r src; do
  [ -e "$src" ] || fail "Dockerfile COPY source $src does not exist"
done < <(awk '$1 == "COPY" && $2 !~ /^--from/ { for (i = 2; i < NF; i++) print $i }' deploy/Dockerfile)
# The build stage needs every package the worker's depends on by path (the client's, Client/):
# its manifest before the resolve and its sources before the build.
for dir in $(sed -n 's/^ *\.package(path: "\([^"]*\)").*/\1/p' Package.swift); do
  grep -q "^COPY $dir/Package.swift " deploy/Dockerfile || fail "the Dockerfile does not copy $dir/Package.swift, a path dependency of Package.swift"
  grep -q "^COPY $dir/Sources " deploy/Dockerfile || fail "the Dockerfile does not copy $dir/Sources, a path dependency of Package.swift"
done
# RUN commands (continuation lines joined) must parse as shell.
python3 - deploy/Dockerfile > "$work/run.sh" <<'PY'
import sys, re
text = re.sub(r"\\\n", " ", open(sys.argv[1]).read())
for line in text.splitlines():
    if line.startswith("RUN "):
        print(line[4:])
PY
bash -n "$work/run.sh" || fail "a RUN command of the Dockerfile does not parse"
# Every package the Dockerfile installs exists in Debian (bookworm is this machine's release).
for pkg in $(grep -o 'install -y --no-install-recommends [^&\\]*' deploy/Dockerfile | cut -d' ' -f4-); do
  apt-cache show "$pkg" > /dev/null 2>&1 || fail "Dockerfile installs $pkg, which Debian does not have"
done
# Every shared library the binary links, outside the Swift runtime (linked in statically by
# --static-swift-stdlib), comes from the runtime stage's packages, their dependencies, or the
# slim base image.
runtime_pkgs=$(awk '/^FROM \$\{RUNTIME_IMAGE\}/ { rt = 1 } rt && /install -y/ { sub(/.*--no-install-recommends /, ""); sub(/\\.*/, ""); print }' deploy/Dockerfile)
allowed=" libc6 libgcc-s1 libstdc++6 zlib1g "
for pkg in $runtime_pkgs; do
  allowed+=" $pkg $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances "$pkg" 2>/dev/null | grep -v '^ ' | grep -v '^<' | tr '\n' ' ') "
done
checked_libs=0
while read -r lib path; do
  case "$path" in /opt/swift/*|"$bin_dir"/*|"") continue ;; esac
  pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -z "$pkg" ] && pkg=$(dpkg -S "$path" 2>/dev/null | head -1 | cut -d: -f1) || true
  checked_libs=$((checked_libs + 1))
  case "$allowed" in *" $pkg "*) ;; *) fail "apns-worker links $lib ($path, package ${pkg:-unknown}), which the runtime image lacks" ;; esac
done < <(ldd "$bin" | awk '/=>/ { print $1, $3 }')
[ "$checked_libs" -gt 0 ] || fail "ldd found no system libraries in $bin"
ok "Dockerfile: COPY sources, RUN syntax, packages, $checked_libs system libraries covered by the runtime stage"

# The binary is linked as Package.swift's residentLinkerSettings say (docs/decisions.md, "Linking for
# resident memory"): relative relocations packed (DT_RELR), and none of its own symbols exported
# (-static-stdlib would export all ~200,000: 3.5 MiB of symbol tables resident).
exported=$(nm -D --defined-only "$bin" 2>/dev/null | wc -l)
if ! readelf -d "$bin" | grep -q '(RELR)'; then
  fail "apns-worker has no packed relative relocations (DT_RELR): Package.swift's linker settings were not applied"
elif [ "$exported" -ge 1000 ]; then
  fail "apns-worker exports $exported of its own symbols: --no-export-dynamic was not applied"
else
  ok "apns-worker is linked with DT_RELR and exports $exported symbols of its own"
fi

if [ "$failures" -gt 0 ]; then
  echo "check-deploy: $failures problem(s)" >&2
  exit 1
fi
echo "check-deploy: all deploy checks passed"
