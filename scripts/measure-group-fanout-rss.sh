#!/usr/bin/env bash
# Peak RSS (VmHWM) of one `apns-worker run` with [tracing] on while it fans out one group job
# of DEVICES devices and delivers them to the simulator.
#   scripts/measure-group-fanout-rss.sh BINARY LABEL [DEVICES]   (BINARY: an apns-worker executable)
# Uses the repository's scripts/broker.sh, scripts/postgres.sh and scripts/otlp-receiver.sh
# (ports from APNS_BROKER_PORT etc., as scripts/test).
set -euo pipefail
bin=$1; label=$2; devices=${3:-100000}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${TMPDIR:-/tmp}/fanout-rss-$label
rm -rf "$work"; mkdir -p "$work"
cd "$repo"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  scripts/postgres.sh stop "$work/postgres" >/dev/null 2>&1 || true
  scripts/broker.sh stop "$work/broker" >/dev/null 2>&1 || true
}
trap cleanup EXIT
eval "$(scripts/broker.sh start "$work/broker")"
eval "$(scripts/postgres.sh start "$work/postgres")"
bundle=com.example.rss
simport=$((APNS_BROKER_PORT + 13000))
"$bin" simulator --port $simport --bundle $bundle --credentials "$work/credentials" --summary-every 0 > "$work/sim.log" 2>&1 &
pids+=($!)
scripts/otlp-receiver.sh "$work/otlp.port" /dev/null > "$work/otlp.log" 2>&1 &
pids+=($!)
for i in $(seq 1 120); do [ -f "$work/credentials/ca.pem" ] && [ -s "$work/otlp.port" ] && break; sleep 1; done
cat > "$work/worker.conf" <<CONF
[amqp]
url = $APNS_TEST_AMQP_URL
[admin]
listen = 127.0.0.1:0
[registry]
url = $APNS_TEST_POSTGRES_URL
[tracing]
endpoint = http://127.0.0.1:$(cat "$work/otlp.port")
[apns "$bundle"]
teamId = TEAM123456
keyId = KEY1234567
tokenKeyFile = credentials/AuthKey_KEY1234567.p8
host = 127.0.0.1
port = $simport
caFile = credentials/ca.pem
CONF
"$bin" registry migrate --config "$work/worker.conf" > /dev/null
"$APNS_TEST_POSTGRES_BIN/psql" -q "$APNS_TEST_POSTGRES_URL" -c "INSERT INTO apns_devices (bundle_id, token, group_name, environment, registered, changed_at, registered_at)
  SELECT '$bundle', lpad(to_hex(i), 64, '0'), 'big', 'production', true, 1, 1 FROM generate_series(1, $devices) AS i"
APNS_WORKER_LOG_LEVEL=info "$bin" run --config "$work/worker.conf" > "$work/worker.log" 2>&1 &
worker=$!
pids+=($worker)
for i in $(seq 1 120); do grep -q "admin HTTP server listening" "$work/worker.log" && break; sleep 1; done
hwm() { awk '/VmHWM/ {printf "%.1f", $2/1024}' /proc/$worker/status; }
echo "$label: before the group job: VmHWM $(hwm) MiB"
start=$(date +%s)
"$bin" publish --config "$work/worker.conf" --group big --alert "rss" > /dev/null
until grep -q "group job fanned out" "$work/worker.log"; do sleep 1; [ $(( $(date +%s) - start )) -lt 1800 ] || { echo "timeout fan-out" >&2; exit 1; }; done
echo "$label: fan-out of $devices done after $(( $(date +%s) - start )) s: VmHWM $(hwm) MiB"
admin=$(grep -o 'admin.port=[0-9]*' "$work/worker.log" | head -1 | cut -d= -f2)
until [ "$(curl -fsS "http://127.0.0.1:$admin/api/status" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(b.get("jobs",{}).get("delivered",0) for b in d.get("bundles",[])))')" -ge "$devices" ]; do
  sleep 2; [ $(( $(date +%s) - start )) -lt 3000 ] || { echo "timeout delivery" >&2; break; }
done
echo "$label: $devices delivered after $(( $(date +%s) - start )) s: VmHWM $(hwm) MiB"
