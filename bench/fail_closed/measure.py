#!/usr/bin/env python3
"""Fail closed (issue 49): how long a lab node serves after its firewall table is lost for good, without Ansible.

On NODE of a deployed lab: the ruleset file made unloadable (a line that is not nftables appended), then
`nft flush ruleset`. From that moment, it prints the seconds until
  (a) the watch notices (its journal says the file cannot be loaded),
  (b) no port of the node that listened before answers from the controller (the management network: the API on the head,
      Ray's or the rank's ports on a worker; SSH aside; a TCP connection each),
  (c) Docker is inactive.
With --stand-in, a container is started there first that is the worst Docker's own stop meets: a server on the port
after the API's (the engine holds the API's) that ignores SIGTERM, with a 300 s stop
timeout and `restart: always` (Docker's own stop waits for it, past the docker unit's 90 s).
With --hung-dockerd, dockerd is stopped (SIGSTOP) right before the flush: Docker then answers no call, and the watch
kills the containers without it (dgxspark-firewall-watch.sh); Docker's unit stops once systemd kills dockerd.
Then it puts the file back and starts the firewall unit and Docker again (the serving containers were killed: the head's
supervisor starts the group again, or a deploy does).

    DGXSPARK_LAB_INSTANCE=N DGXSPARK_LAB_STATE_SUFFIX=-N .venv/bin/python bench/fail_closed/measure.py spark-alpha \
        [--stand-in] [--hung-dockerd]
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lab"))
import labctl  # noqa: E402  pylint: disable=wrong-import-position
from labnet import answers, sigterm_ignoring_server  # noqa: E402  pylint: disable=wrong-import-position

RULESET = "/etc/dgxspark/nftables-dgxspark.nft"
API_PORT = 8000
LIMIT_S = 150
STAND_IN = "dgxspark-bench-stand-in"
STAND_IN_SERVER = sigterm_ignoring_server(API_PORT + 1)


def ssh(node, command, timeout=LIMIT_S + 30):
    cmd = ["ssh", "-F", os.path.join(labctl.STATE_DIR, "ssh", "config"), node, command]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout



def listening(node):
    """TCP ports listening on the node beyond loopback, SSH aside."""
    ports = set()
    for line in ssh(node, "ss -Htln").splitlines():
        address, _, port = line.split()[3].rpartition(":")
        if not address.startswith(("127.", "[::1]")) and port != "22":
            ports.add(int(port))
    return sorted(ports)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("node", help="a lab node (spark-alpha is the head)")
    parser.add_argument("--stand-in", action="store_true", help="start the worst-case serving container first")
    parser.add_argument("--hung-dockerd", action="store_true", help="stop dockerd (SIGSTOP) right before the flush")
    args = parser.parse_args()
    node = args.node
    address = labctl.mgmt_ip(labctl.node_index(node))
    if args.stand_in:
        image = json.load(open(os.path.join(labctl.STATE_DIR, "lab.json"), encoding="utf-8"))["serving_image"]
        ssh(node, "docker rm -f %s >/dev/null 2>&1; docker run -d --name %s --network host --restart always --stop-timeout 300"
            " --entrypoint python3 %s -c %s" % (STAND_IN, STAND_IN, image, shlex.quote(STAND_IN_SERVER)))
        time.sleep(3)
    ports = listening(node)
    assert ports, "nothing but SSH listens on %s: nothing to measure (is it serving?)" % node
    saved = ssh(node, "cat %s" % RULESET)

    def on_node(name, loop):
        """Run LOOP on the node until it ends; its end, in the node's clock (the lab host's), is the event's time."""
        on_node.events[name] = float(ssh(node, "timeout %d sh -c %s; date +%%s.%%N" % (LIMIT_S, shlex.quote(loop))).strip())

    on_node.events = {}
    # The flush, then the watchers: they look at what comes after `since` only.
    hang = "kill -STOP $(pidof dockerd) && " if args.hung_dockerd else ""
    since = float(ssh(node, "echo 'this is not nftables' >> %s && %sdate +%%s.%%N && nft flush ruleset" % (RULESET, hang)).strip())
    try:
        report(node, address, ports, since, on_node)
    finally:
        if args.hung_dockerd:
            ssh(node, "pidof dockerd >/dev/null && kill -CONT $(pidof dockerd) || true")
        ssh(node, "cat > %s <<'RULESET'\n%sRULESET\nsystemctl reset-failed dgxspark-firewall.service docker.service docker.socket;"
            " systemctl start docker.service" % (RULESET, saved))
        if args.stand_in:
            ssh(node, "docker rm -f %s >/dev/null 2>&1 || true" % STAND_IN)
        ssh(node, "systemctl list-unit-files prometheus.service -q | grep -q . && systemctl start prometheus.service || true")


def report(node, address, ports, since, on_node):
    """Wait for (a), (b) and (c), then print them."""
    events, answered = on_node.events, set()
    watchers = [
        threading.Thread(target=on_node, args=("watch", "until journalctl -u dgxspark-firewall-watch.service --since @%d"
                                               " --no-pager -o cat | grep -q 'cannot be loaded'; do sleep 0.2; done" % int(since))),
        threading.Thread(target=on_node, args=("docker", "until systemctl is-active docker.service | grep -qx -e inactive -e failed; do sleep 0.2; done")),
    ]
    for thread in watchers:
        thread.start()
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:  # LIMIT_S: the port answering for good (the figure then reads LIMIT_S)
        now = set(port for port in ports if answers(address, port, timeout=1.0))
        answered |= now
        if not now:
            break
        time.sleep(0.2)
    events["ports"] = time.time()
    for thread in watchers:
        thread.join()
    still = "" if time.monotonic() < deadline else " (still answering: the limit of this bench)"
    print("%s: %d of its %d listening port(s) answered the management network without the table (%s)"
          % (node, len(answered), len(ports), ", ".join(map(str, sorted(answered)))))
    print("  (a) the watch found the table unloadable after %5.1f s" % (events["watch"] - since))
    print("  (b) no port answers any more after         %5.1f s%s%s" % (
        events["ports"] - since, "" if API_PORT not in answered else " (the API's %d among them)" % API_PORT, still))
    print("  (c) Docker inactive after                  %5.1f s" % (events["docker"] - since))


if __name__ == "__main__":
    main()
