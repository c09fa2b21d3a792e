#!/usr/bin/env bash
# `make base-image`: a local stand-in for python:3.11-slim-bookworm, built from Debian's own packages,
# for machines that reach Debian's mirror but no image registry (run as root).
#
#   debootstrap --variant=minbase bookworm -> python3.11, python3.11-venv, ca-certificates -> `podman import`
#
# The result has what the Dockerfile expects of its base: `python` on PATH (here Debian's 3.11), the
# `venv` module, groupadd/useradd, a CA bundle, LANG=C.UTF-8. It is tagged $BASE_IMAGE
# (default localhost/tts-python:3.11-bookworm); `make image BASE_IMAGE=...` builds on it. An image of
# that name already there is kept (FORCE=1 builds it again).
set -euo pipefail

BASE_IMAGE=${BASE_IMAGE:-localhost/tts-python:3.11-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ENGINE=${ENGINE:-$(scripts/containers/engine.sh)}

if [ -z "${FORCE:-}" ] && $ENGINE image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    echo "$BASE_IMAGE is there (FORCE=1 to build it again)"
    exit 0
fi
command -v debootstrap >/dev/null || apt-get install -y --no-install-recommends debootstrap >/dev/null
root=$(mktemp -d /var/tmp/tts-base.XXXXXX)
trap 'umount "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
started=$(date +%s)
debootstrap --variant=minbase bookworm "$root" "$MIRROR" >/dev/null
cat > "$root/etc/apt/sources.list" <<SOURCES
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb ${MIRROR%/debian}/debian-security bookworm-security main
SOURCES
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3.11 python3.11-venv ca-certificates >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
umount "$root/proc"
# The official image's names: `python` and `python3` on PATH.
ln -s /usr/bin/python3.11 "$root/usr/local/bin/python"
ln -s /usr/bin/python3.11 "$root/usr/local/bin/python3"
: > "$root/etc/resolv.conf"
tar -C "$root" -c . | $ENGINE import \
    --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV=LANG=C.UTF-8' \
    --change 'CMD=["python3"]' \
    - "$BASE_IMAGE" >/dev/null
echo "$BASE_IMAGE built in $(( $(date +%s) - started )) s: $($ENGINE image inspect --format '{{.Size}}' "$BASE_IMAGE") bytes"
