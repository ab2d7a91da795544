#!/bin/sh
# dgxspark.cluster (fleet_router): run by dgxspark-router-nat-watch.timer every few seconds, without Ansible.
# The router's table (its port redirected to the serving instance) gone while its unit is active (`nft flush ruleset`, a
# restart of Debian's nftables.service, a hand): load it again from the file the last swap wrote and loaded, so the fleet's
# endpoint is back within the timer's interval, as node_firewall's watch puts the firewall's table back. A unit stopped
# on purpose (its ExecStop deletes the table) is left stopped; a table loaded but changed is status.yml's to name.
# Usage: dgxspark-router-nat-watch.sh NFT RULESET_FILE TABLE NAT_UNIT
set -u
nft=$1 file=$2 table=$3 unit=$4

systemctl is-active --quiet "$unit" || exit 0
"$nft" list table inet "$table" >/dev/null 2>&1 && exit 0
[ -f "$file" ] || { echo "dgxspark-router-nat-watch: the table inet $table is gone and $file is missing: deploy.yml --tags router writes it" >&2; exit 1; }
echo "dgxspark-router-nat-watch: the table inet $table is gone; loading $file again"
"$nft" -f "$file" && exit 0
echo "dgxspark-router-nat-watch: $file cannot be loaded: the router's port leads nowhere until deploy.yml --tags router" >&2
exit 1
