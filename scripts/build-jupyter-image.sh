#!/usr/bin/env bash
# Builds gpuhub/jupyter:latest locally, without a registry: a minimal Debian 12 root filesystem with
# Python, a JupyterLab virtual environment in /opt/jupyter, OpenSSH's sftp-server (for scp/sftp through
# the gpuhub SSH gateway) and libnss-wrapper (so that sftp-server runs for a UID the image's /etc/passwd
# does not know). The build itself is scripts/lib/debian-image.sh's (cached by its inputs).
#
# Usage: scripts/build-jupyter-image.sh [IMAGE]        (default gpuhub/jupyter:latest; needs root)
# Environment: GPUHUB_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPUHUB_FORCE_BUILD=1.
set -euo pipefail

IMAGE="${1:-gpuhub/jupyter:latest}"
NAME=jupyter
JUPYTERLAB_VERSION=4.6.6
PACKAGES=python3,python3-venv,ca-certificates,openssh-sftp-server,libnss-wrapper,bash,procps,coreutils
VENV=/opt/jupyter
PIP_PACKAGES="jupyterlab==$JUPYTERLAB_VERSION"
CHECK="$VENV/bin/jupyter lab --version"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
# shellcheck source=lib/debian-image.sh
source "$(dirname "$SELF")/lib/debian-image.sh"
