#!/usr/bin/env bash
# Throwaway RabbitMQ node for tests, CI and the local run command.
#
#   scripts/broker.sh start DIR   start a node whose state lives in DIR; prints shell exports
#   scripts/broker.sh stop DIR    stop that node and wait for it to exit
#   scripts/broker.sh kill DIR    kill -9 that node at once, as a crash would (the soak's --kill-broker)
#
# Runs /usr/lib/rabbitmq/bin/rabbitmq-server directly: the /usr/sbin wrappers switch to the
# rabbitmq user, which fails in containers and CI sandboxes. Ports come from the environment
# (APNS_BROKER_PORT, APNS_BROKER_MGMT_PORT, APNS_BROKER_DIST_PORT) or defaults that stay clear of
# a system broker on 5672/15672.
#
# With APNS_BROKER_TLS_PORT set, the node also listens for amqps on that port, with a CA and a
# server certificate for the host name `localhost` (not 127.0.0.1) made here with openssl in
# DIR/tls; the exports name the port and the CA file.
#
# With APNS_BROKER_FRAME_MAX set, the node offers that frame_max (bytes) instead of RabbitMQ's
# 131,072: a test's own node, for content headers as large as the worker accepts.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

RMQ_BIN=/usr/lib/rabbitmq/bin
amqp_port=${APNS_BROKER_PORT:-5682}
mgmt_port=${APNS_BROKER_MGMT_PORT:-15682}
dist_port=${APNS_BROKER_DIST_PORT:-25682}
node=${APNS_BROKER_NODENAME:-apnsw-$amqp_port@localhost}
tls_port=${APNS_BROKER_TLS_PORT:-}
frame_max=${APNS_BROKER_FRAME_MAX:-}

node_env() {
  export RABBITMQ_NODENAME=$node
  export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
  export RABBITMQ_NODE_PORT=$amqp_port
  export RABBITMQ_DIST_PORT=$dist_port
  export RABBITMQ_MNESIA_BASE=$dir/mnesia
  export RABBITMQ_LOG_BASE=$dir/log
  export RABBITMQ_CONFIG_FILE=$dir/rabbitmq
  export RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config
  export RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins
  export RABBITMQ_PID_FILE=$dir/rabbitmq.pid
  export RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf
}

# pids=(the live ones of: the shell that started the node, and the node's own process, beam.smp,
# its child): killing the shell alone left a node that did not stop in time running, orphaned,
# on its ports. A pid counts only while its process carries this node's environment: a file
# left by a crashed run can name a pid the kernel has since given to another process (pid_max
# is 32768 here), which must be neither killed nor taken for a running node.
node_pids() {
  pids=()
  local file pid
  for file in "$dir/server.shell.pid" "$RABBITMQ_PID_FILE"; do
    [ -f "$file" ] && pid=$(cat "$file") && [[ "$pid" =~ ^[0-9]+$ ]] && is_this_node "$pid" && pids+=("$pid")
  done
  return 0
}

is_this_node() {
  { tr '\0' '\n' < "/proc/$1/environ"; } 2>/dev/null | grep -qxF "RABBITMQ_PID_FILE=$RABBITMQ_PID_FILE"
}

case "$cmd" in
start)
  [ -x "$RMQ_BIN/rabbitmq-server" ] || { echo "broker.sh: rabbitmq-server is not installed (apt-get install rabbitmq-server)" >&2; exit 1; }
  mkdir -p "$dir/mnesia" "$dir/log"
  dir=$(cd "$dir" && pwd)
  node_env
  echo '[rabbitmq_management].' > "$RABBITMQ_ENABLED_PLUGINS_FILE"
  echo '[].' > "$RABBITMQ_ADVANCED_CONFIG_FILE"
  cat > "$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$amqp_port
management.tcp.port = $mgmt_port
management.tcp.ip = 127.0.0.1
loopback_users = none
log.console = false
log.file.level = info
CONF
  if [ -n "$frame_max" ]; then
    echo "frame_max = $frame_max" >> "$dir/rabbitmq.conf"
  fi
  if [ -n "$tls_port" ]; then
    tls=$dir/tls
    mkdir -p "$tls"
    if [ ! -f "$tls/server.pem" ]; then
      "$(dirname "$0")/test-tls-cert.sh" "$tls" "apns-worker test broker CA" "$dir/log/openssl.log"
    fi
    cat >> "$dir/rabbitmq.conf" <<CONF
listeners.ssl.default = 127.0.0.1:$tls_port
ssl_options.cacertfile = $tls/ca.pem
ssl_options.certfile = $tls/server.pem
ssl_options.keyfile = $tls/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
  fi
  # The node shares two cores with everything a test run starts. Starved of them, it misses
  # Raft's 10 s to elect a new quorum queue's leader (541 cluster_not_formed), and a queue with
  # at-least-once dead-lettering whose formation timed out can crash-loop the node's
  # rabbit_fifo_dlx_sup past its restart limit, after which no such queue starts on the node
  # again (rabbitmq-server#16652; docs/operating.md). So the node runs ahead of its clients for
  # the CPU, as a production broker on cores of its own would, where the caller may raise a
  # priority (APNS_BROKER_AHEAD=1: scripts/test's shared node alone; the nodes tests start of
  # their own, booting at once at that priority, starved the tests for over a minute), and
  # without the schedulers' busy-waiting, which would take that CPU from them.
  ahead=()
  if [ "${APNS_BROKER_AHEAD:-}" = 1 ] && [ "$(nice -n -10 nice 2>/dev/null || echo 0)" -lt "$(nice)" ]; then ahead=(nice -n -10); fi
  echo 'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none"' > "$RABBITMQ_CONF_ENV_FILE"
  # A node killed with -9 (the cluster tests) leaves its pid file. `rabbitmqctl wait` below reads
  # the file as soon as it is up, and a dead pid there ends the wait at once ("did not start",
  # with nothing in the node's log yet) whenever the new node, booting on loaded cores, has not
  # written its own pid first. Without the file, the wait waits for it to appear.
  node_pids
  [ ${#pids[@]} -eq 0 ] || { echo "broker.sh: a node of $dir still runs (pids ${pids[*]})" >&2; exit 1; }
  rm -f "$RABBITMQ_PID_FILE"
  # The node must not inherit the caller's descriptors: Foundation's Process (TestSupport's
  # PrivateBroker) learns that this script exited when the last holder of a socket it passes
  # down closes it, so a server keeping that socket would make the caller wait forever.
  (
    for fd in /proc/self/fd/*; do
      n=${fd##*/}
      if [ "$n" -gt 2 ] && [ "$n" -ne 255 ]; then eval "exec $n>&-"; fi
    done 2>/dev/null
    exec nohup ${ahead[@]+"${ahead[@]}"} "$RMQ_BIN/rabbitmq-server" > "$dir/log/stdout.log" 2>&1
  ) &
  echo $! > "$dir/server.shell.pid"
  # rabbitmqctl wait blocks until the app is up, or fails early if the node died. A node
  # starting beside a test run and a soak on two cores was seen to take more than 110 s; the
  # wait costs nothing when the node is quick.
  if ! timeout 250 "$RMQ_BIN/rabbitmqctl" -n "$node" wait --timeout 240 "$RABBITMQ_PID_FILE" > "$dir/log/wait.log" 2>&1; then
    echo "broker.sh: node $node did not start; last log lines:" >&2
    tail -n 30 "$dir/log/stdout.log" >&2 || true
    exit 1
  fi
  # The management listener comes up a moment after the app reports ready.
  for _ in $(seq 1 60); do
    curl -fsS -u guest:guest "http://127.0.0.1:$mgmt_port/api/overview" > /dev/null 2>&1 && break
    sleep 0.5
  done
  cat <<OUT
export APNS_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$amqp_port/%2f
export APNS_TEST_AMQP_PORT=$amqp_port
export APNS_TEST_RABBITMQ_MGMT_URL=http://127.0.0.1:$mgmt_port
export APNS_TEST_RABBITMQ_NODE=$node
export APNS_TEST_RABBITMQCTL=$RMQ_BIN/rabbitmqctl
export APNS_TEST_BROKER_DIR=$dir
OUT
  if [ -n "$tls_port" ]; then
    echo "export APNS_TEST_AMQPS_PORT=$tls_port"
    echo "export APNS_TEST_AMQPS_CA=$dir/tls/ca.pem"
  fi
  ;;
stop)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  node_env
  node_pids
  # rabbitmqctl stop can hang for minutes on a node that is already gone: only ask a live one.
  [ ${#pids[@]} -gt 0 ] || exit 0
  timeout 60 "$RMQ_BIN/rabbitmqctl" -n "$node" stop "$RABBITMQ_PID_FILE" > /dev/null 2>&1 || true
  alive() { for p in "${pids[@]}"; do is_this_node "$p" && return 0; done; return 1; }
  for _ in $(seq 1 40); do alive || break; sleep 0.25; done
  node_pids
  [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null || true
  ;;
kill)
  [ -d "$dir" ] || exit 0
  dir=$(cd "$dir" && pwd)
  node_env
  node_pids
  [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null || true
  # epmd keeps the name a moment; the next start waits for it in its own way.
  sleep 1
  ;;
*)
  echo "usage: $0 start|stop|kill DIR" >&2; exit 2 ;;
esac
