#!/usr/bin/env bash
# Prints the container engine to use: $ENGINE when set, else podman, else a docker whose daemon answers.
set -euo pipefail
if [ -n "${ENGINE:-}" ]; then echo "$ENGINE"; exit 0; fi
if command -v podman >/dev/null; then echo podman; exit 0; fi
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; exit 0; fi
echo "no container engine (podman, or docker with its daemon running): make container-engine installs podman" >&2
exit 1
