#!/usr/bin/env bash
# Builds and runs the example sync server (Examples/SyncServer, a package of its own that uses
# only the APNSWorkerClient product) against the test broker, with a real worker and the APNs
# simulator: the example publishes a job for a token Apple accepts and one for a token the
# simulator answers 410 Unregistered, and must see the worker's feedback event for the second
# (acked) and a delivery event for each job's end within its deadline. Fails first if the example's
# resolution fetches a package the client's does not name, if docs/integrating.md's graph of the client's
# package is not Client/Package.swift's, or if its build compiled Hummingbird, PostgresNIO, OTel,
# Mustache or swift-crypto.
#   scripts/check-example.sh BIN_DIR   (BIN_DIR holds a built apns-worker; needs APNS_TEST_AMQP_URL)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(cd "${1:?usage: scripts/check-example.sh BIN_DIR}" && pwd)/apns-worker
: "${APNS_TEST_AMQP_URL:?check-example: needs the test broker (scripts/test exports APNS_TEST_AMQP_URL)}"
example=Examples/SyncServer
work=$(mktemp -d "${TMPDIR:-/tmp}/apns-check-example.XXXXXX")
pids=()
cleanup() {
  for pid in ${pids[@]+"${pids[@]}"}; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  rm -rf "$work"
  return 0
}
trap cleanup EXIT

# What a sync server resolves, and so fetches: the client's package and the packages it names,
# nothing of the worker's (SwiftPM fetches every dependency of a package it resolves, whatever
# product is used).
allowed="client swift-distributed-tracing swift-log"
resolved=$(cd "$example" && swift package show-dependencies --format json) || { echo "check-example: FAIL: the example does not resolve" >&2; exit 1; }
resolved=$(echo "$resolved" | python3 scripts/client-graph.py resolved)
echo "check-example: the packages SwiftPM resolves (and fetches) for the example: $(echo $resolved)"
extra=$(comm -23 <(echo "$resolved") <(tr ' ' '\n' <<< "$allowed" | sort))
if [ -n "$extra" ]; then
  echo "check-example: FAIL: the example's resolution fetches packages a sync server does not need: $(echo $extra)" >&2
  exit 1
fi
# docs/integrating.md's graph of the client's package is the one Client/Package.swift declares.
edges=$(cd Client && swift package dump-package | python3 ../scripts/client-graph.py edges)
readme=$(sed -n '/^<!-- client-edges/,/^<!-- \/client-edges/p' docs/integrating.md | sed -n 's/^    //p')
if [ "$edges" != "$readme" ]; then
  echo "check-example: FAIL: docs/integrating.md's client-edges block is not Client/Package.swift's graph; it is:" >&2
  echo "$edges" | sed 's/^/    /' >&2
  exit 1
fi
(cd "$example" && swift build) > "$work/example-build.log" 2>&1 || { tail -40 "$work/example-build.log" >&2; exit 1; }
example_bin=$(cd "$example" && swift build --show-bin-path)
# What it builds, also on incremental runs: the Swift modules it compiled (Modules/*.swiftmodule)
# and the C targets with object files (SwiftPM plans a <target>.build directory for every target
# of the graph, compiled or not, so the directories alone say nothing).
modules=$( (cd "$example_bin/Modules" && ls -d ./*.swiftmodule | sed -e 's#^\./##' -e 's#\.swiftmodule$##';
  cd "$example_bin" && for dir in ./*.build; do
    [ -n "$(find "$dir" -name '*.o' -print -quit)" ] && [ ! -e "Modules/$(basename "$dir" .build).swiftmodule" ] && basename "$dir" .build
  done; true) | sort -u)
echo "check-example: targets built for the example: $(echo $modules)"
if echo "$modules" | grep -E '^(Hummingbird|HummingbirdCore|PostgresNIO|OTel|Mustache|Crypto|CCryptoBoringSSL)' ; then
  echo "check-example: FAIL: the example sync server built modules it never uses (above)" >&2
  exit 1
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bundle="com.example.sync-example.$$"
accepted=$(printf 'a%.0s' $(seq 64))
gone=$(printf 'b%.0s' $(seq 64))
sim_port=$(free_port)
admin_port=$(free_port)
"$bin" simulator --port "$sim_port" --credentials "$work/credentials" --bundle "$bundle" --unregistered "$gone" \
  --summary-every 0 > "$work/simulator.log" 2>&1 &
pids+=($!)
cat > "$work/worker.conf" <<CONF
[amqp]
url = $APNS_TEST_AMQP_URL
[admin]
listen = 127.0.0.1:$admin_port
[apns "$bundle"]
teamId = TEAM123456
keyId = KEY1234567
tokenKeyFile = $work/credentials/AuthKey_KEY1234567.p8
host = 127.0.0.1
port = $sim_port
caFile = $work/credentials/ca.pem
connections = 1
CONF
for _ in $(seq 1 150); do [ -f "$work/credentials/ca.pem" ] && break; sleep 0.2; done
"$bin" run --config "$work/worker.conf" > "$work/worker.log" 2>&1 &
pids+=($!)
ready=""
for _ in $(seq 1 300); do
  if curl -fsS "http://127.0.0.1:$admin_port/ready" > /dev/null 2>&1; then ready=yes; break; fi
  sleep 0.2
done
[ -n "$ready" ] || { echo "check-example: FAIL: the worker never became ready: $(tail -5 "$work/worker.log")" >&2; exit 1; }

status=0
APNS_EXAMPLE_AMQP_URL=$APNS_TEST_AMQP_URL APNS_EXAMPLE_BUNDLE=$bundle APNS_EXAMPLE_TOKENS="$accepted,$gone" \
  APNS_EXAMPLE_EXPECT_FEEDBACK=$gone APNS_EXAMPLE_EXPECT_EVENTS=1 APNS_EXAMPLE_FEEDBACK_QUEUE="sync-example.$$.feedback" APNS_EXAMPLE_DEADLINE_SECONDS=90 \
  "$example_bin/SyncServerExample" || status=$?
if [ "$status" -ne 0 ]; then
  echo "check-example: FAIL: the example sync server exited $status; worker log:" >&2
  tail -20 "$work/worker.log" >&2
  exit 1
fi
echo "check-example: ok: the example sync server published through APNSWorkerClient and handled the worker's feedback and delivery events"

# Its outbox: the broker restarts while the example publishes a change a second to three devices
# of a bundle no worker serves; what it could not publish must arrive when the broker is back,
# every job, in order per device (a job sent twice, at-least-once, counts once).
: "${APNS_TEST_BROKER_DIR:?check-example: needs the directory of the test broker (scripts/test exports APNS_TEST_BROKER_DIR)}"
outbox_bundle="com.example.sync-outbox.$$"
devices="$(printf 'c%.0s' $(seq 64)),$(printf 'd%.0s' $(seq 64)),$(printf 'e%.0s' $(seq 64))"
changes=20
jobs_queue() { "$bin" topology --url "$APNS_TEST_AMQP_URL" --bundle "$outbox_bundle" --json |
  python3 -c 'import json, sys; print(next(q.get("messages", 0) for q in json.load(sys.stdin)["queues"] if q["name"] == "apns." + sys.argv[1]))' "$outbox_bundle"; }
jobs_queue > /dev/null  # declares the bundle's queue, so that its jobs wait there
APNS_EXAMPLE_AMQP_URL=$APNS_TEST_AMQP_URL APNS_EXAMPLE_BUNDLE=$outbox_bundle APNS_EXAMPLE_TOKENS=$devices \
  APNS_EXAMPLE_CHANGES=$changes APNS_EXAMPLE_CHANGE_INTERVAL_MS=1000 APNS_EXAMPLE_PUBLISH_DEADLINE_SECONDS=2 \
  APNS_EXAMPLE_DEADLINE_SECONDS=400 "$example_bin/SyncServerExample" > "$work/outbox.log" 2>&1 &
example_pid=$!
pids+=($example_pid)
for _ in $(seq 1 600); do [ "$(jobs_queue 2>/dev/null || echo 0)" -ge 6 ] && break; sleep 0.2; done
kill -0 "$example_pid" 2>/dev/null || { echo "check-example: FAIL: the example ended before the broker restart: $(tail -5 "$work/outbox.log")" >&2; exit 1; }
echo "check-example: restarting the broker under the example ($(jobs_queue) jobs published)"
scripts/broker.sh stop "$APNS_TEST_BROKER_DIR"
sleep 3  # a broker that stays down for a while: the example's publishes fail and its outbox fills
scripts/broker.sh start "$APNS_TEST_BROKER_DIR" > /dev/null
status=0
wait "$example_pid" || status=$?
if [ "$status" -ne 0 ]; then
  echo "check-example: FAIL: the example sync server exited $status across the broker restart:" >&2
  tail -20 "$work/outbox.log" >&2
  exit 1
fi
grep -q '^outbox: kept' "$work/outbox.log" || { echo "check-example: FAIL: the restart never held a job in the outbox (the check proved nothing)" >&2; exit 1; }
# Every job of the bundle's queue, in queue order, through the management API.
mgmt=${APNS_TEST_RABBITMQ_MGMT_URL:?check-example: needs APNS_TEST_RABBITMQ_MGMT_URL}
curl -fsS -u guest:guest -H 'content-type: application/json' -X POST \
  -d '{"count": 100000, "ackmode": "ack_requeue_false", "encoding": "auto"}' \
  "$mgmt/api/queues/%2F/apns.$outbox_bundle/get" > "$work/outbox-jobs.json"
python3 - "$work/outbox-jobs.json" "$devices" "$changes" <<'PY' || exit 1
import json, sys
messages, devices, changes = json.load(open(sys.argv[1])), sys.argv[2].split(","), int(sys.argv[3])
seen, order = set(), {device: [] for device in devices}
for message in messages:
    job = json.loads(message["payload"])
    if job["id"] in seen:
        continue
    seen.add(job["id"])
    order[job["token"]].append(job["userInfo"]["change"])
for device, got in order.items():
    if got != list(range(1, changes + 1)):
        sys.exit(f"check-example: FAIL: device {device[:8]}…'s jobs arrived as changes {got}, not 1 to {changes} in order")
print(f"check-example: ok: the example's outbox kept what the broker restart refused: {len(seen)} jobs "
      f"({len(messages) - len(seen)} sent twice), every device's in order")
PY
