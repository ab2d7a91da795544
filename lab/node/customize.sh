#!/bin/sh
# Runs inside the debootstrapped node rootfs (chroot) before `docker import`.
# Arguments: $1 = the Debian mirror URI the host's apt uses, $2 = suite.
set -eu
MIRROR=$1
SUITE=$2

printf 'deb %s %s main\n' "$MIRROR" "$SUITE" > /etc/apt/sources.list

# Per-node identity is written by labctl at `up` (host keys, machine-id): none baked in.
rm -f /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id

# What a Spark runs: systemd-networkd as netplan's renderer, sshd, Docker.
systemctl enable systemd-networkd.service ssh.service docker.service containerd.service
# Nothing for networkd to wait on in a container (the rails are configured later by the network role).
systemctl disable systemd-networkd-wait-online.service || true
# Units that only make sense on hardware / with a console, or that would reach the Internet.
systemctl disable getty@.service e2scrub_reap.service apt-daily-upgrade.timer apt-daily.timer \
    e2scrub_all.timer fstrim.timer || true
systemctl mask getty.target console-getty.service systemd-pstore.service sys-kernel-config.mount \
    sys-kernel-debug.mount sys-kernel-tracing.mount sys-fs-fuse-connections.mount \
    systemd-remount-fs.service systemd-firstboot.service systemd-journald-audit.socket || true
# Installed in the image so that a deploy needs no apt (packages.txt); they run only where the monitoring role enables them.
systemctl disable prometheus.service prometheus-node-exporter.service || true

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /tmp/* || true
