#!/usr/bin/env bash
# Make sure the host can run the virtual Spark lab:
#  - installs Debian's docker.io, debootstrap, iproute2, iptables (apt-get update once) if missing;
#  - starts dockerd in the background if it is not running (log: /var/log/dgxspark-lab-dockerd.log),
#    and waits for its socket.
# Idempotent: a second run does nothing. Needs root. Works on a fresh Debian 12 machine.
set -euo pipefail

LOG=${DGXSPARK_LAB_DOCKERD_LOG:-/var/log/dgxspark-lab-dockerd.log}
SOCK=/var/run/docker.sock
export DEBIAN_FRONTEND=noninteractive

if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-docker.sh: must run as root (it installs packages and starts dockerd)" >&2
    exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || [ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
# tc comes with iproute2; ssh-keygen/ssh for the controller side of the lab.
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)

if [ ${#need[@]} -gt 0 ]; then
    echo "ensure-docker.sh: installing ${need[*]}"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need[@]}"
fi
# docker.io recommends these; make sure the runtime pieces dockerd needs are there.
for bin in containerd runc; do
    if ! command -v "$bin" >/dev/null 2>&1; then
        echo "ensure-docker.sh: $bin missing; installing" >&2
        apt-get install -y -q --no-install-recommends "$bin"
    fi
done

docker_ok() {
    # Use Debian's client when present (a /usr/local/bin/docker of another version may shadow it).
    local cli=/usr/bin/docker
    [ -x "$cli" ] || cli=docker
    timeout 10 "$cli" info >/dev/null 2>&1
}

if docker_ok; then
    echo "ensure-docker.sh: dockerd is running"
    exit 0
fi

if pgrep -x dockerd >/dev/null 2>&1; then
    echo "ensure-docker.sh: dockerd process exists but does not answer yet; waiting"
else
    echo "ensure-docker.sh: starting dockerd (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    # Not a systemd machine (CI containers): start the daemon directly, detached from this shell.
    nohup setsid /usr/sbin/dockerd >>"$LOG" 2>&1 </dev/null &
fi

for _ in $(seq 1 120); do
    if [ -S "$SOCK" ] && docker_ok; then
        echo "ensure-docker.sh: dockerd is up"
        exit 0
    fi
    sleep 0.5
done
echo "ensure-docker.sh: dockerd did not come up within 60 s; last lines of $LOG:" >&2
tail -n 30 "$LOG" >&2 || true
exit 1
