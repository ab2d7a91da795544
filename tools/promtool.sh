#!/usr/bin/env bash
# `promtool check rules` and `promtool test rules` over the monitoring role's alert rules (make test runs it).
# promtool comes from Debian's own `prometheus` package, unpacked under .cache/ rather than installed: installing it
# would start a Prometheus server on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
root=.cache/prometheus-deb
promtool=$root/usr/bin/promtool
if [ ! -x "$promtool" ]; then
    mkdir -p "$root/download"
    (cd "$root/download" && { apt-get download -q -o APT::Sandbox::User=root prometheus 2>/dev/null \
        || { apt-get update -q >/dev/null && apt-get download -q -o APT::Sandbox::User=root prometheus; }; })
    dpkg-deb -x "$root"/download/prometheus_*.deb "$root"
    rm -rf "$root/download"
fi
"$promtool" --version 2>&1 | head -1
"$promtool" check rules roles/monitoring/files/dgxspark_alerts.rules.yml
"$promtool" test rules tests/promtool/*.test.yml
