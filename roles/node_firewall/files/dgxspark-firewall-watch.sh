#!/bin/sh
# dgxspark.cluster (node_firewall): run by dgxspark-firewall-watch.timer every few seconds, without Ansible.
# The table inet dgxspark gone (`nft flush ruleset`, a restart of Debian's nftables.service, a hand): load it again from
# its file; when it cannot be loaded, kill every running container, then stop the firewall unit, and with it Docker and
# Prometheus (their drop-ins require the unit; Docker cannot start again while the table cannot be loaded), so that the
# node serves nothing unguarded. A table that is loaded but changed is the firewall phase's and status.yml's to name.
# Killed first, not left to Docker's stop: that gives each container its stop timeout and dockerd its shutdown timeout
# (a serving engine took minutes), and with live-restore on it leaves them running. A container killed counts as
# stopped by hand: no restart policy brings it back (a deploy does, once the table is back).
# A Docker that does not answer within DOCKER_TIMEOUT_S (a hung dockerd; default 10 s) cannot kill them: then each
# container's first process, the child of its containerd shim, is killed by signal (the kernel ends every process of a
# PID namespace with its first one), without cgroup.kill, which cgroup v1 lacks.
# Usage: dgxspark-firewall-watch.sh NFT RULESET_FILE FIREWALL_UNIT [DOCKER_UNIT [DOCKER_TIMEOUT_S]]
set -u
nft=$1 file=$2 unit=$3 docker_unit=${4:-} docker_timeout_s=${5:-10}

# Every container's first process (the shim's child; with docker-init, that), SIGKILL, a few rounds for a shim that
# was starting one meanwhile. Prints how many it killed.
kill_without_docker() {
    killed=0
    for _ in 1 2 3; do
        firsts=""
        for shim in $(pgrep -x containerd-shim); do
            firsts="$firsts $(pgrep -P "$shim")"
        done
        # shellcheck disable=SC2086  # one argument per process ID
        [ -z "${firsts# }" ] || { kill -KILL $firsts 2>/dev/null; killed=$((killed + $(echo $firsts | wc -w))); }
        [ -n "${firsts# }" ] || break
        sleep 1
    done
    echo "$killed"
}
"$nft" list table inet dgxspark >/dev/null 2>&1 && exit 0
echo "dgxspark-firewall-watch: the table inet dgxspark is gone; loading $file again"
"$nft" -f "$file" && exit 0
echo "dgxspark-firewall-watch: $file cannot be loaded; killing the running containers, then stopping $unit and Docker and Prometheus with it: nothing serves unguarded" >&2
if [ -n "$docker_unit" ] && systemctl is-active --quiet "$docker_unit"; then
    answered=false
    if running=$(timeout "$docker_timeout_s" docker ps -q); then
        # shellcheck disable=SC2086  # one argument per container ID
        if [ -z "$running" ] || timeout "$docker_timeout_s" docker kill $running >/dev/null; then
            answered=true
        fi
    fi
    if [ "$answered" = false ]; then
        echo "dgxspark-firewall-watch: Docker did not answer within ${docker_timeout_s} s; killed $(kill_without_docker) containers' first processes without it" >&2
    fi
fi
systemctl stop "$unit"
exit 1
