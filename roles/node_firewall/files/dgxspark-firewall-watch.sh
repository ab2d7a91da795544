#!/bin/sh
# dgxspark.cluster (node_firewall): run by dgxspark-firewall-watch.timer every few seconds, without Ansible.
# The table inet dgxspark gone (`nft flush ruleset`, a restart of Debian's nftables.service, a hand): load it again from
# its file; when it cannot be loaded, kill every running container, then stop the firewall unit, and with it Docker and
# Prometheus (their drop-ins require the unit; Docker cannot start again while the table cannot be loaded), so that the
# node serves nothing unguarded. A table that is loaded but changed is the firewall phase's and status.yml's to name.
# Killed first, not left to Docker's stop: that gives each container its stop timeout and dockerd its shutdown timeout
# (a serving engine took minutes), and with live-restore on it leaves them running. A container killed counts as
# stopped by hand: no restart policy brings it back (a deploy does, once the table is back).
# Usage: dgxspark-firewall-watch.sh NFT RULESET_FILE FIREWALL_UNIT [DOCKER_UNIT]
set -u
nft=$1 file=$2 unit=$3 docker_unit=${4:-}
"$nft" list table inet dgxspark >/dev/null 2>&1 && exit 0
echo "dgxspark-firewall-watch: the table inet dgxspark is gone; loading $file again"
"$nft" -f "$file" && exit 0
echo "dgxspark-firewall-watch: $file cannot be loaded; killing the running containers, then stopping $unit and Docker and Prometheus with it: nothing serves unguarded" >&2
if [ -n "$docker_unit" ] && systemctl is-active --quiet "$docker_unit"; then
    running=$(timeout 10 docker ps -q)
    # shellcheck disable=SC2086  # one argument per container ID
    [ -z "$running" ] || timeout 20 docker kill $running >/dev/null
fi
systemctl stop "$unit"
exit 1
