#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and the local run need, when any is missing.
# Needs root (or sudo) only when something has to be installed.
set -euo pipefail
# docker-compose and systemd: scripts/check-deploy.sh validates the compose file and the unit.
# chromium: the admin page is opened headless and its screenshot checked.
# openssl: scripts/broker.sh makes the certificates of the amqps listener.
# postgresql: the device registry (contract §6); scripts/postgres.sh runs throwaway clusters.
# prometheus: promtool checks and unit-tests deploy/prometheus/; a real server scrapes a worker in a test.
packages=(librabbitmq-dev libssl-dev openssl pkg-config rabbitmq-server curl nghttp2-client python3-h2 procps docker-compose systemd chromium postgresql prometheus)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
# The rabbitmq-server package tries to start the system service; policy-rc.d refusing that in a
# container is expected and harmless: we run our own nodes.
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
