#!/usr/bin/env bash
# Workspace-access benchmark (crates/gpuhub/benches/access.rs), built optimised, figures on standard
# output (measured, never asserted):
#   - a small response's latency (p50/p99 of 200 requests) and throughput (2000 requests, 16 at a time),
#     and a 100 MiB download, directly to a workspace container, through gpuhub's authenticating proxy,
#     and through JupyterHub's configurable-http-proxy (npm install into a temporary directory; skipped
#     when npm is missing);
#   - cat of 1 GiB through the SSH gateway (OpenSSH) against docker exec.
#
# Needs root, a Docker engine and what scripts/setup-debian.sh installs; builds gpuhub/jupyter:latest
# on first use (scripts/build-jupyter-image.sh). DOCKER_HOST selects another engine.
# Usage: scripts/bench-access.sh
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
command -v node >/dev/null && command -v npm >/dev/null ||
    echo "bench-access: node/npm not found: the configurable-http-proxy comparison will be skipped" >&2
exec cargo bench -p gpuhub --bench access
