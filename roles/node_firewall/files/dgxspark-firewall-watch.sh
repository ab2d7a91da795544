#!/bin/sh
# dgxspark.cluster (node_firewall): run by dgxspark-firewall-watch.timer every few seconds, without Ansible.
# The table inet dgxspark gone (`nft flush ruleset`, a restart of Debian's nftables.service, a hand): load it again from
# its file; when it cannot be loaded, stop the firewall unit, and with it Docker and Prometheus (their drop-ins require
# the unit), so that the node serves nothing unguarded. A table that is loaded but changed is the firewall phase's and
# status.yml's to name.
# Usage: dgxspark-firewall-watch.sh NFT RULESET_FILE FIREWALL_UNIT
set -u
nft=$1 file=$2 unit=$3
"$nft" list table inet dgxspark >/dev/null 2>&1 && exit 0
echo "dgxspark-firewall-watch: the table inet dgxspark is gone; loading $file again"
"$nft" -f "$file" && exit 0
echo "dgxspark-firewall-watch: $file cannot be loaded; stopping $unit and Docker and Prometheus with it: nothing serves unguarded" >&2
systemctl stop "$unit"
exit 1
