#!/usr/bin/env bash
# The performance kit's product slot with delivery events on (docs/benchmarks.md, "Delivery
# events' cost"): the kit writes its configuration and runs `$APNS_WORKER_BIN run --config FILE`
# with every APNS_WORKER_* variable removed; this copies FILE with `events = ends` added to each
# [apns "…"] section and runs the worker named by KIT_EVENTS_WORKER_BIN on the copy.
#   KIT_EVENTS_WORKER_BIN=/path/to/release/apns-worker APNS_WORKER_BIN=scripts/kit-events-product.sh \
#     PERF_CONTENDERS="go product" ../shared/perf/bench.sh
# KIT_EVENTS_QUEUE=quorum (default) or classic declares a queue bound to apns.events with `#`
# first, as a sync server that asks for events keeps one (the broker stores every event);
# KIT_EVENTS_QUEUE=none leaves the exchange unbound (the broker drops them).
set -euo pipefail
real=${KIT_EVENTS_WORKER_BIN:?kit-events-product.sh: set KIT_EVENTS_WORKER_BIN to a release apns-worker}
args=("$@")
for i in "${!args[@]}"; do
  if [ "${args[$i]}" = --config ]; then
    src=${args[$((i+1))]}
    dst=${src%.conf}-events.conf
    awk '{print} /^\[apns "/{print "events = ends"}' "$src" > "$dst"
    args[$((i+1))]=$dst
  fi
done
queue_type=${KIT_EVENTS_QUEUE:-quorum}
if [ "$queue_type" != none ]; then
  # The kit's node: management on 15800 (../shared/perf/broker.sh), declared as the worker
  # declares the exchange (topic, durable).
  api=http://127.0.0.1:${PERF_MGMT_PORT:-15800}/api
  call() { curl -fsS -u guest:guest -H 'content-type: application/json' -X "$1" -d "$3" "$api/$2" > /dev/null; }
  call PUT exchanges/%2f/apns.events '{"type":"topic","durable":true}'
  call PUT queues/%2f/kit.events "{\"durable\":true,\"arguments\":{\"x-queue-type\":\"$queue_type\"}}"
  call POST bindings/%2f/e/apns.events/q/kit.events '{"routing_key":"#"}'
fi
exec "$real" "${args[@]}"
