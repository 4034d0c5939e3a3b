#!/usr/bin/env bash
# Throwaway 3-node RabbitMQ cluster on this machine, for the failover test.
#
#   scripts/cluster.sh start DIR       start three nodes (DIR/node1…3), join them, print exports
#   scripts/cluster.sh stop DIR        stop every node and wait for each to exit
#   scripts/cluster.sh start-node DIR N   start node N again (after a kill -9), as it was
#
# Each node is a scripts/broker.sh node with its own name, ports and data directory: node N
# listens for AMQP on APNS_CLUSTER_PORT+N-1 (default 5720), management on
# APNS_CLUSTER_MGMT_PORT+N-1 (15720) and Erlang distribution on APNS_CLUSTER_DIST_PORT+N-1
# (25720). Nodes 2 and 3 join node 1. Quorum queues get a member on each of the three nodes
# (RabbitMQ's default quorum cluster size is 3). The pid of node N's Erlang VM is in
# DIR/nodeN/rabbitmq.pid.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR | start-node DIR N" >&2; exit 2; }
RMQ_BIN=/usr/lib/rabbitmq/bin

# Writes node N's broker.sh environment to DIR/nodeN/ports (once) and loads it.
node_env() {
  local n=$1 file=$dir/node$1/ports
  if [ ! -f "$file" ]; then
    mkdir -p "$dir/node$n"
    local amqp=$((${APNS_CLUSTER_PORT:-5720} + n - 1))
    cat > "$file" <<ENV
export APNS_BROKER_PORT=$amqp
export APNS_BROKER_MGMT_PORT=$((${APNS_CLUSTER_MGMT_PORT:-15720} + n - 1))
export APNS_BROKER_DIST_PORT=$((${APNS_CLUSTER_DIST_PORT:-25720} + n - 1))
export APNS_BROKER_NODENAME=apnsw-cluster-$amqp@localhost
ENV
  fi
  unset APNS_BROKER_TLS_PORT
  # shellcheck disable=SC1090
  . "$file"
}

start_node() {
  ( node_env "$1"; scripts/broker.sh start "$dir/node$1" > "$dir/node$1/exports" )
}

case "$cmd" in
start)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  for n in 1 2 3; do start_node "$n"; done
  first=$(node_env 1; echo "$APNS_BROKER_NODENAME")
  for n in 2 3; do
    (
      node_env "$n"
      ctl=("$RMQ_BIN/rabbitmqctl" -n "$APNS_BROKER_NODENAME")
      timeout 120 "${ctl[@]}" stop_app > /dev/null
      timeout 120 "${ctl[@]}" join_cluster "$first" > /dev/null
      timeout 120 "${ctl[@]}" start_app > /dev/null
    ) || { echo "cluster.sh: node $n did not join $first" >&2; exit 1; }
  done
  timeout 120 "$RMQ_BIN/rabbitmqctl" -n "$first" await_online_nodes 3 > /dev/null \
    || { echo "cluster.sh: the cluster did not reach 3 running nodes" >&2; exit 1; }
  # Failover list, node names and management URLs, in node order.
  urls=() nodes=() mgmt=() ports=()
  for n in 1 2 3; do
    eval "$(node_env "$n"; echo "a=$APNS_BROKER_PORT m=$APNS_BROKER_MGMT_PORT nn=$APNS_BROKER_NODENAME")"
    urls+=("amqp://guest:guest@127.0.0.1:$a/%2f"); nodes+=("$nn"); mgmt+=("http://127.0.0.1:$m"); ports+=("$a")
  done
  cat <<OUT
export APNS_TEST_CLUSTER_DIR=$dir
export APNS_TEST_CLUSTER_URLS="${urls[*]}"
export APNS_TEST_CLUSTER_NODES="${nodes[*]}"
export APNS_TEST_CLUSTER_MGMT_URLS="${mgmt[*]}"
export APNS_TEST_CLUSTER_PORTS="${ports[*]}"
OUT
  ;;
start-node)
  n=${3:-}
  [[ "$n" =~ ^[123]$ ]] || { echo "usage: $0 start-node DIR 1|2|3" >&2; exit 2; }
  dir=$(cd "$dir" && pwd)
  start_node "$n"
  ;;
stop)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  for n in 3 2 1; do
    [ -f "$dir/node$n/ports" ] || continue
    ( node_env "$n"; scripts/broker.sh stop "$dir/node$n" ) || true
  done
  ;;
*)
  echo "usage: $0 start|stop DIR | start-node DIR N" >&2; exit 2 ;;
esac
