#!/usr/bin/env bash
# Builds gpuhub/pytorch:latest locally, without an image registry: a minimal Debian 12 root filesystem with
# a virtual environment in /opt/pytorch holding PyTorch from PyPI, NumPy and JupyterLab, plus OpenSSH's
# sftp-server and libnss-wrapper like gpuhub/jupyter. PyTorch's CPU-only wheels are not on PyPI
# (download.pytorch.org is not reachable from every build host), so this is PyPI's CUDA build with its
# NVIDIA libraries: it runs on CPUs, and on the GPUs a container is given. About 3 GiB to download.
# The build itself is scripts/lib/debian-image.sh's (cached by its inputs).
#
# Usage: scripts/build-pytorch-image.sh [IMAGE]        (default gpuhub/pytorch:latest; needs root)
# Environment: GPUHUB_DEBIAN_MIRROR (default http://deb.debian.org/debian), GPUHUB_FORCE_BUILD=1.
set -euo pipefail

IMAGE="${1:-gpuhub/pytorch:latest}"
NAME=pytorch
TORCH_VERSION=2.15.0
NUMPY_VERSION=2.4.6
JUPYTERLAB_VERSION=4.6.6
PACKAGES=python3,python3-venv,ca-certificates,openssh-sftp-server,libnss-wrapper,bash,procps,coreutils
VENV=/opt/pytorch
PIP_PACKAGES="torch==$TORCH_VERSION numpy==$NUMPY_VERSION jupyterlab==$JUPYTERLAB_VERSION"
CHECK="$VENV/bin/python -c 'import torch; x = torch.randn(256, 256); print(\"torch\", torch.__version__, \"matmul\", tuple((x @ x).shape), \"cuda\", torch.cuda.is_available())'"
SELF="$(readlink -f "${BASH_SOURCE[0]}")"
# shellcheck source=lib/debian-image.sh
source "$(dirname "$SELF")/lib/debian-image.sh"
