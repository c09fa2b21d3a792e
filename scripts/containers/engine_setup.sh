#!/usr/bin/env bash
# `make container-engine`: a container engine on a Debian machine with none (run as root).
#
# Docker or Podman already present: nothing to do. Otherwise Debian's podman with runc, netavark and
# aardvark-dns (containers on one network find each other by name), and /etc/containers/containers.conf
# set for a machine like the CI's: runc (crun refuses hybrid cgroups), cgroupfs (no systemd), and
# default ulimits no higher than the machine allows. An existing containers.conf is left alone.
set -euo pipefail

if command -v podman >/dev/null || { command -v docker >/dev/null && docker info >/dev/null 2>&1; }; then
    echo "container engine present: $(command -v podman || command -v docker)"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "no container engine; run this as root to install podman (apt-get), or install Docker yourself" >&2
    exit 1
fi
packages=(podman runc netavark aardvark-dns uidmap iptables debootstrap)
apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null 2>&1 \
    || { apt-get update >/dev/null && apt-get install -y --no-install-recommends "${packages[@]}" >/dev/null; }
if [ ! -s /etc/containers/containers.conf ]; then
    mkdir -p /etc/containers
    cat > /etc/containers/containers.conf <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
fi
podman --version
